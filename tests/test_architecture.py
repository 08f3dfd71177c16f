"""Layering rules the code must keep: checks judge facts, and no check module imports another.

A check module (checks/<subsystem>.py) reads what it judges through clustercheck.facts (or the
core API); what two checks share is a fact, so a subsystem can change without breaking another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "checks"
FACTS = ROOT / "src" / "clustercheck" / "facts"


def package_of(path: Path) -> str:
    """The dotted package a file of checks/ sits in: `checks`, or `checks.gpu` for checks/gpu/x.py."""
    rel = (
        path.resolve().parent.relative_to(CHECKS.resolve()) if path.resolve().is_relative_to(CHECKS.resolve()) else None
    )
    return ".".join(("checks", *rel.parts)) if rel is not None else "checks"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in a file, relative ones resolved against its package."""
    tree = ast.parse(path.read_text(), str(path))
    package = package_of(path).split(".")
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):  # nested imports (inside functions) count too
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `from .rdma import x` or `from . import rdma`
                base = ".".join(package[: max(len(package) - node.level + 1, 1)])
                names = [node.module] if node.module else [alias.name for alias in node.names]
                found += [(node.lineno, f"{base}.{n}") for n in names]
            elif node.module:
                found.append((node.lineno, node.module))
                if node.module in ("checks", "clustercheck.checks"):  # `from checks import rdma`
                    found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def sibling_imports(path: Path, modules: set[str], own: str = "") -> list[str]:
    """`FILE:LINE: imports checks.X` for each import of one of `modules` of checks/ but `own`."""
    out = []
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for line, name in imported_modules(path):
        for prefix in ("checks.", "clustercheck.checks."):
            target = name[len(prefix) :].split(".")[0] if name.startswith(prefix) else ""
            if target in modules and target != own:
                out.append(f"{shown}:{line}: imports {name}")
    return out


def subsystems() -> dict[str, list[Path]]:
    """Each subsystem of checks/ (a module, or a package of modules) and its files."""
    found: dict[str, list[Path]] = {}
    for p in sorted(CHECKS.iterdir()):
        if p.suffix == ".py" and p.name != "__init__.py":
            found[p.stem] = [p]
        elif p.is_dir() and (p / "__init__.py").exists():
            found[p.name] = sorted(p.rglob("*.py"))
    return found


def test_no_check_module_imports_another() -> None:
    systems = subsystems()
    assert len(systems) >= 8, systems  # the test looks where the checks are
    offences = [o for name, files in systems.items() for p in files for o in sibling_imports(p, set(systems), name)]
    assert not offences, "a check module imports another (move what they share to clustercheck.facts):\n" + "\n".join(
        offences
    )


def test_a_subsystem_split_into_files_may_import_its_own_modules(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from .rdma import x\nfrom clustercheck.checks.gpu.nvlink import y\n")
    caught = [o.rsplit(": imports ", 1)[1] for o in sibling_imports(sample, {"gpu", "rdma"}, "gpu")]
    assert caught == ["checks.rdma"], caught


def test_the_rule_catches_every_form_of_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from .rdma import x\n"
        "from . import node\n"
        "import checks.gpu\n"
        "from clustercheck.checks.stack import y\n"
        "from checks import monitoring\n"
        "def f():\n"
        "    from .container import z\n"
        "import clustercheck.facts.image\n"
    )
    modules = {"rdma", "node", "gpu", "stack", "monitoring", "container"}
    caught = [o.rsplit(": imports ", 1)[1] for o in sibling_imports(sample, modules)]
    assert caught == [
        "checks.rdma",
        "checks.node",
        "checks.gpu",
        "clustercheck.checks.stack",
        "checks.monitoring",
        "checks.container",
    ], caught
    assert sibling_imports(sample, {"storage"}) == []  # facts and other modules are not siblings


def test_facts_modules_import_no_check_module() -> None:
    offences = []
    for path in sorted(FACTS.glob("*.py")):
        for line, name in imported_modules(path):
            if name == "checks" or name.startswith(("checks.", "clustercheck.checks")):
                offences.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert not offences, "a facts module imports a check module:\n" + "\n".join(offences)


def test_a_check_of_a_package_imports_its_own_module_only() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom clustercheck import registry\n"
        "assert registry.lookup('gpu.xid') and registry.lookup('gpu.nvlink')\n"
        "print(sorted(m for m in sys.modules if m.startswith('clustercheck.checks.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['clustercheck.checks.gpu', 'clustercheck.checks.gpu.nvlink']", out


# -- no import cycle ------------------------------------------------------------------------------

SRC = ROOT / "src" / "clustercheck"

# Cycles other work is still removing (issue 14): a new cycle anywhere else fails, and one of these
# may only shrink. Each entry: the modules a cycle may stay among, and who removes it.
KNOWN_CYCLES: tuple[frozenset[str], ...] = ()
KNOWN_CYCLE_PACKAGES: tuple[str, ...] = ()  # packages whose modules may still import each other in a cycle
KNOWN_EDGES: frozenset[tuple[str, str]] = frozenset()  # edges a cycle may still run through


def module_files() -> dict[str, Path]:
    """Every module of src/clustercheck and checks/ (installed as clustercheck.checks) by dotted name."""
    found: dict[str, Path] = {}
    for base, package in ((SRC, "clustercheck"), (CHECKS, "clustercheck.checks")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules it imports: every import in the file (inside functions and under
    TYPE_CHECKING too), `from P import name` counted as P.name where that is a module, else P."""

    def known(name: str) -> str | None:
        if name == "checks" or name.startswith("checks."):
            name = "clustercheck." + name
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                targets = [source, *(f"{source}.{alias.name}" for alias in node.names)]
            for target in targets:
                found = known(target)
                if found and found != module:
                    edges.add(found)
    return graph


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _known(component: list[str]) -> bool:
    return any(set(component) <= allowed for allowed in KNOWN_CYCLES) or all(
        m.startswith(KNOWN_CYCLE_PACKAGES) for m in component
    )


def test_no_import_cycle_in_src_and_checks() -> None:
    files = module_files()
    graph = import_graph(files)
    assert graph["clustercheck.main"] >= {"clustercheck.app", "clustercheck.cli"}  # nested imports are seen
    for a, b in KNOWN_EDGES:
        graph[a].discard(b)
    new = [c for c in cycles_of(graph) if not _known(c)]
    shown = [" <-> ".join(c) + "\n  " + "\n  ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c) for c in new]
    assert not new, "import cycles:\n" + "\n".join(shown)


def test_the_cli_layers_import_downwards_only() -> None:
    """main -> app -> commands -> cli -> slurm/bounded/profile: nothing below imports what is above it."""
    graph = import_graph(module_files())
    for a, b in KNOWN_EDGES:
        graph[a].discard(b)
    above = {"clustercheck.main": set(), "clustercheck.app": {"clustercheck.main"}}
    above["clustercheck.cli"] = {"clustercheck.main", "clustercheck.app"}
    slurm = [m for m in graph if m == "clustercheck.slurm" or m.startswith("clustercheck.slurm.")]
    for m in [*slurm, "clustercheck.bounded", "clustercheck.profile"]:
        above[m] = {"clustercheck.main", "clustercheck.app", "clustercheck.cli"}
    offences = [f"{m} imports {sorted(graph[m] & up)}" for m, up in above.items() if graph[m] & up]
    assert not offences, offences


def test_the_cycle_finder_finds_cycles_through_nested_imports(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from .c import x\n")
    (tmp_path / "pkg" / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\n")
    (tmp_path / "pkg" / "d.py").write_text("from pkg.a import y\n")
    files = {"pkg": tmp_path / "pkg" / "__init__.py", **{f"pkg.{n}": tmp_path / "pkg" / f"{n}.py" for n in "abcd"}}
    graph = import_graph(files)
    assert graph["pkg.d"] == {"pkg.a"}  # the module, not its package, nor a name as a module
    assert cycles_of(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


# -- one option table -----------------------------------------------------------------------------


def typer_options(command: str) -> dict[str, str]:
    """option -> kind ("value", "multi", "flag") of one command as the Typer application declares it."""
    import typer

    from clustercheck.app import app

    found: dict[str, str] = {}
    for param in typer.main.get_command(app).commands[command].params:  # type: ignore[attr-defined]
        kind = "flag" if getattr(param, "is_flag", False) else "multi" if param.multiple else "value"
        found |= {o: kind for o in (*param.opts, *param.secondary_opts) if o.startswith("-")}
    return found


def test_the_plain_parsers_option_tables_are_typers() -> None:
    """clustercheck.options (read by bare.py, cli's fast run path and the prolog's own parser) names
    exactly the options, and kinds, that the Typer commands declare: neither can drift."""
    from clustercheck import bare, options, slurm

    for command, spec in options.COMMANDS.items():
        table = {o: kind for o, (_, kind) in spec.items()}
        declared = typer_options(command)
        assert table == declared, (
            f"{command}: only Typer has {sorted(set(declared) - set(table))}, only the table "
            f"{sorted(set(table) - set(declared))}, kinds differ for "
            f"{sorted(o for o in set(table) & set(declared) if table[o] != declared[o])}"
        )
    # and the plain parsers read these tables, not copies of their own
    assert bare.SPECS == {"run": options.RUN, "health": options.HEALTH, "checks": options.CHECKS}
    assert set(bare.SSH_OPTIONS) == set(options.RUN_SSH)
    prolog = {**slurm.PROLOG_OPTIONS, **slurm.PROLOG_FLAGS}
    assert prolog == {**{o: k for o, (k, _) in options.PROLOG.items()}, "--debug": "debug"}


def test_a_drifted_option_table_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck import options

    declared = typer_options("prolog")
    assert declared["--checks"] == "multi" and declared["--dry-run"] == "flag" and declared["--budget"] == "value"
    monkeypatch.setitem(options.COMMANDS, "prolog", {k: v for k, v in options.PROLOG.items() if k != "--dry-run"})
    with pytest.raises(AssertionError, match="only Typer has \\['--dry-run'\\]"):
        test_the_plain_parsers_option_tables_are_typers()
