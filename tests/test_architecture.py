"""Layering rules the code must keep: checks judge facts, and no check module imports another.

A check module (checks/<subsystem>.py) reads what it judges through clustercheck.facts (or the
core API); what two checks share is a fact, so a subsystem can change without breaking another.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
