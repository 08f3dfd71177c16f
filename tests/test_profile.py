"""Profiles: every problem in a bad profile is reported at once, as FILE:LINE: message.

Through the public surface only: `clustercheck.profile.load()` and the CLI in a subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustercheck import profile, registry
from clustercheck.errors import ProfileError, UsageError
from clustercheck.registry import Size

GiB = 1024**3
Write = Callable[[str, str | bytes], Path]  # the `write` fixture (conftest.py)
RunCli = Callable[..., "subprocess.CompletedProcess[str]"]  # the `run_cli` fixture (conftest.py)

BUNDLED = ["base", "deep", "gpu-node", "h100-ib", "prolog", "prolog-cpu"]


def problems(path: Path) -> list[str]:
    """The problems load() reports for the profile at `path` (it must refuse it)."""
    with pytest.raises(ProfileError) as info:
        profile.load(str(path))
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def assert_problems(path: Path, *expected: tuple[int, str]) -> None:
    """Exactly these problems, each `path:LINE: ...` holding the text, in any order."""
    got = problems(path)
    assert len(got) == len(expected), "\n".join(got)
    for line, text in expected:
        prefix = f"{path}:{line}: "
        assert any(p.startswith(prefix) and text in p for p in got), f"no {prefix}...{text}... in:\n" + "\n".join(got)


def check(prof: profile.Profile, check_id: str) -> profile.CheckConfig:
    return next(c for c in prof.checks if c.id == check_id)


# -- bundled profiles ----------------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profiles_load_by_name(name: str) -> None:
    prof = profile.load(name)
    assert prof.name == name
    assert prof.path == profile.bundled_dir() / f"{name}.yaml"
    known = {spec.id for spec in registry.all_checks()}
    assert prof.checks and all(c.id in known for c in prof.checks)


def test_gpu_node_extends_base_and_overrides_services() -> None:
    base, gpu = profile.load("base"), profile.load("gpu-node")
    # an overridden check keeps the parent's place; new checks follow
    gpu_checks = [
        "gpu.count",
        "gpu.driver",
        "gpu.ecc",
        "gpu.pcie_link",
        "gpu.persistence_mode",
        "gpu.throttle",
        "gpu.power",
        "gpu.processes",
        "gpu.xid",
    ]
    assert [c.id for c in gpu.checks] == [c.id for c in base.checks] + ["node.modules", *gpu_checks]
    assert check(gpu, "node.services").params["running"] == ("slurmd", "munged", "nvidia-persistenced")
    assert check(gpu, "node.memory") == check(base, "node.memory")
    assert check(base, "node.memory").params == {"min_total": 4 * GiB, "min_available": 0}


def test_prolog_sets_per_check_timeouts() -> None:
    prolog = profile.load("prolog")
    assert {c.id: c.timeout for c in prolog.checks} == {
        "node.kernel": 2,
        "node.cpu": 2,
        "node.memory": 2,
        "node.modules": 2,
        "gpu.count": 5,
        "gpu.ecc": 5,
        "gpu.xid": 5,
        "gpu.processes": 5,
        "gpu.persistence_mode": 5,
        "storage.mounts": 5,
        "rdma.ports": 5,
        "rdma.counters": 5,
    }


def test_missing_profile_names_the_bundled_ones(tmp_path: Path) -> None:
    bundled = r"\(base, deep, gpu-node, h100-ib, prolog-cpu, prolog\)"
    with pytest.raises(UsageError, match=r"profile 'nope' not found: .*" + bundled):
        profile.load("nope")
    with pytest.raises(UsageError, match="not found"):
        profile.load(str(tmp_path / "missing.yaml"))


# -- every problem at once -----------------------------------------------------------------


def test_every_problem_is_reported_at_once_with_its_line(write: Write) -> None:
    path = write(
        "site.yaml",
        dedent("""\
            name: site
            colour: blue
            checks:
              node.memroy: {min_total: 1TiB}
              node.cpu: {expected: eight, cores: 4}
              node.memory:
                min_available: lots
              node.kernel:
              node.kernel: {min_release: 5.15}
              gpu.counts: {expected: 8}
            """),
    )
    assert_problems(
        path,
        (2, "unknown key 'colour' (allowed: check_dirs, checks, description, extends, name)"),
        (4, "unknown check 'node.memroy' (did you mean node.memory?); `clustercheck checks` lists them"),
        (5, "node.cpu.expected: expected an integer, got 'eight'"),
        (5, "node.cpu has no parameter 'cores' (its parameters: expected, governor; and timeout)"),
        (7, "node.memory.min_available: expected a size like 512GiB, 1.9TiB or 500GB, got 'lots'"),
        (6, "node.memory needs the parameter 'min_total' (a size like 512GiB)"),
        (9, "check node.kernel is listed twice"),
        (9, "node.kernel.min_release: expected a string, got the number 5.15: quote it ('5.15')"),
        (10, "unknown check 'gpu.counts' (did you mean gpu.count?)"),
    )


def test_yaml_syntax_error_has_its_line(write: Write) -> None:
    path = write("bad.yaml", "checks:\n  node.cpu: {expected: 8\n  node.kernel:\n")
    (problem,) = problems(path)
    assert re.fullmatch(rf"{re.escape(str(path))}:[34]: YAML syntax error: .+", problem), problem


def test_bad_indentation_is_a_syntax_error_on_its_line(write: Write) -> None:
    path = write("bad.yaml", "checks:\n  node.cpu:\n    expected: 8\n   governor: x\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:4: YAML syntax error: ")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "checks:\n  node.cpu:\n    expected: 8\n    expected: 9\n",
            4,
            "node.cpu: parameter 'expected' is given twice",
        ),
        ("name: a\nchecks: {}\nname: b\n", 3, "'name' is given twice"),
        ("checks:\n  node.cpu:\n  node.cpu: {expected: 2}\n", 3, "check node.cpu is listed twice"),
    ],
    ids=["parameter", "top-level key", "check"],
)
def test_a_key_given_twice(write: Write, text: str, line: int, message: str) -> None:
    assert_problems(write("twice.yaml", text), (line, message))


# -- parameter types -----------------------------------------------------------------------

MOUNTS = "storage.mounts: {paths: [/scratch], %s}"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("node.cpu: {expected: eight}", "node.cpu.expected: expected an integer, got 'eight'"),
        ("node.cpu: {expected: 8.5}", "node.cpu.expected: expected an integer, got 8.5"),
        ("node.cpu: {expected: true}", "node.cpu.expected: expected an integer, got True"),
        ("node.cpu: {expected: }", "node.cpu.expected: expected an integer, got nothing"),
        ("node.cpu: {governor: 5}", "node.cpu.governor: expected a string, got the number 5: quote it ('5')"),
        ("node.cpu: {governor: [a]}", "node.cpu.governor: expected a string, got ['a']"),
        ("node.kernel: {min_release: 2024-01-01}", "node.kernel.min_release: expected a string, got datetime.date"),
        ("node.memory: {min_total: lots}", "node.memory.min_total: expected a size like 512GiB, 1.9TiB or 500GB"),
        ("node.memory: {min_total: -1}", "node.memory.min_total: a size cannot be negative: -1"),
        ("node.memory: {min_total: 1.2.3GiB}", "node.memory.min_total: expected a size like 512GiB"),
        ("node.memory: {min_total: yes}", "node.memory.min_total: expected a size like 512GiB, got True"),
        ("node.memory: {min_total: .inf}", "node.memory.min_total: a size must be finite, got inf"),
        (f"node.memory: {{min_total: {'9' * 400}GiB}}", "node.memory.min_total: the size '999"),
        (MOUNTS % "rw: maybe", "storage.mounts.rw: expected a true/false, got 'maybe'"),
        (MOUNTS % "rw: 1", "storage.mounts.rw: expected a true/false, got 1"),
        (MOUNTS % "answer_within: soon", "storage.mounts.answer_within: expected a number, got 'soon'"),
        (MOUNTS % "answer_within: .nan", "storage.mounts.answer_within: expected a number, got .nan (not a number)"),
        (MOUNTS % "answer_within: false", "storage.mounts.answer_within: expected a number, got False"),
        (MOUNTS % f"answer_within: {'9' * 400}", "storage.mounts.answer_within: the number 999"),
        ("node.modules: {loaded: nvidia}", "node.modules.loaded: expected a list of strings, got 'nvidia'"),
        ("node.modules: {loaded: [nvidia, 5]}", "node.modules.loaded: expected a list of strings, but it holds 5"),
        ("node.modules: {loaded: {nvidia: 1}}", "node.modules.loaded: expected a list of strings, got {'nvidia': 1}"),
    ],
)
def test_wrong_parameter_types(write: Write, entry: str, message: str) -> None:
    assert_problems(write("types.yaml", f"name: types\nchecks:\n  {entry}\n"), (3, message))


@pytest.mark.parametrize(
    ("written", "size"),
    [
        ("512GiB", 512 * GiB),
        ("1.5TiB", int(1.5 * 1024**4)),
        ("500GB", 500 * 1000**3),
        ("64G", 64 * GiB),
        ("4 gib", 4 * GiB),
        ("1024", 1024),
        ("2.5", 2),
        ("0", 0),
    ],
)
def test_sizes(write: Write, written: str, size: int) -> None:
    prof = profile.load(str(write("size.yaml", f"checks:\n  node.memory: {{min_total: {written}}}\n")))
    value = check(prof, "node.memory").params["min_total"]
    assert value == size
    assert isinstance(value, Size)


def test_values_of_every_type_are_converted(write: Write) -> None:
    path = write(
        "ok.yaml",
        dedent("""\
            checks:
              node.cpu: {expected: 8.0, governor: performance}
              storage.mounts: {paths: [/scratch, /home], rw: false, answer_within: 2}
            """),
    )
    prof = profile.load(str(path))
    assert check(prof, "node.cpu").params == {"expected": 8, "governor": "performance"}
    assert type(check(prof, "node.cpu").params["expected"]) is int
    mounts = check(prof, "storage.mounts").params
    given = {"paths": ("/scratch", "/home"), "rw": False, "types": (), "answer_within": 2.0}
    assert {k: mounts[k] for k in given} == given
    assert type(mounts["answer_within"]) is float


@pytest.mark.parametrize("entry", ["node.memory:", "node.memory: true", "node.memory: {min_available: 1GiB}"])
def test_missing_required_parameter(write: Write, entry: str) -> None:
    path = write("req.yaml", f"checks:\n  {entry}\n")
    assert_problems(path, (2, "node.memory needs the parameter 'min_total' (a size like 512GiB)"))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("node.cpu: 8", "node.cpu: parameters must be a mapping like {expected: 8}, empty for the defaults, or false"),
        ("node.cpu: [expected, 8]", "node.cpu: parameters must be a mapping"),
        ("8: {expected: 8}", "check ids are strings like node.memory, got 8"),
        ("node.cpu: {null: 8}", "node.cpu has no parameter 'None'"),
    ],
)
def test_malformed_check_entries(write: Write, entry: str, message: str) -> None:
    assert_problems(write("entry.yaml", f"checks:\n  {entry}\n"), (2, message))


# -- top level -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("", 1, "the profile is empty; it needs at least `checks:`"),
        ("# nothing but a comment\n\n", 1, "the profile is empty"),
        ("- node.cpu\n- node.kernel\n", 1, "a profile is a YAML mapping (name:, extends:, checks: ...), got list"),
        ("just words\n", 1, "a profile is a YAML mapping (name:, extends:, checks: ...), got str"),
        ("checks: [node.cpu, node.kernel]\n", 1, "checks must be a mapping of check id to parameters"),
        ("checks: 5\n", 1, "checks must be a mapping of check id to parameters"),
        ("name: x\nchecks:\n", 2, "checks must be a mapping of check id to parameters"),
        ("checks: !!set {node.cpu}\n", 1, "checks must be a mapping of check id to parameters"),
        ("name: [a]\nchecks: {}\n", 1, "name must be a string"),
        ("description: 5\nchecks: {}\n", 1, "description must be a string"),
        ("extends: [base]\nchecks: {}\n", 1, "extends must be a profile name or path"),
        ("check_dirs: site\nchecks: {}\n", 1, "check_dirs must be a list of folders"),
        ("checks: {}\nname: 2024-13-45\n", 2, "YAML error: invalid value '2024-13-45' for its type: month must be in"),
        ("checks:\n  node.cpu: {expected: !!int eight}\n", 2, "YAML error: invalid value 'eight' for its type"),
        ("checks:\n  node.cpu: {expected: !!float }\n", 2, "YAML error: invalid value '' for its type"),
        ("checks:\n  storage.mounts: {rw: !!bool maybe}\n", 2, "YAML error: invalid value 'maybe' for its type"),
        ("- !!timestamp 2024-01-01T99:00:00\n", 1, "YAML error: invalid value '2024-01-01T99:00:00'"),
        ("checks:\n  ? [a, b]\n  : 1\n", 2, "a mapping key must be a plain value"),
        ("a: &x {b: *x}\n", 1, "found unconstructable recursive node"),
    ],
)
def test_malformed_documents(write: Write, content: str, line: int, message: str) -> None:
    assert_problems(write("doc.yaml", content), (line, message))


def test_non_utf8_bytes_name_their_line(write: Write) -> None:
    path = write("latin1.yaml", "name: x\nchecks:\n  node.services: {running: [caf\xe9]}\n".encode("latin-1"))
    assert_problems(path, (3, "not UTF-8 text: byte 0xe9 at offset"))


def test_control_characters_name_their_line(write: Write) -> None:
    path = write("ctrl.yaml", "name: x\ndescription: bell\x07\nchecks: {}\n")
    assert_problems(path, (2, "YAML error: character '\\x07' is not allowed"))


def test_a_folder_is_not_a_profile(tmp_path: Path) -> None:
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(UsageError, match="not found"):
        profile.load(str(tmp_path / "dir.yaml"))


# -- extends -------------------------------------------------------------------------------


def test_extends_a_bundled_profile_overriding_one_parameter(write: Write) -> None:
    path = write(
        "site.yaml",
        dedent("""\
            extends: gpu-node
            checks:
              node.modules: {absent: []}
              node.memory: {min_available: 16GiB}
              node.cpu: {expected: 224}
            """),
    )
    prof, gpu = profile.load(str(path)), profile.load("gpu-node")
    assert prof.name == "site"
    assert prof.description == gpu.description  # inherited when the child has none
    modules = check(prof, "node.modules")
    assert modules.params == {"loaded": ("nvidia", "nvidia_uvm"), "absent": ()}  # the parent's `loaded` kept
    assert modules.source == f"{path}:3"
    memory = check(prof, "node.memory")
    assert memory.params == {"min_total": 4 * GiB, "min_available": 16 * GiB}  # base's min_total kept
    assert check(prof, "node.cpu").params["expected"] == 224
    assert check(prof, "node.kernel") == check(gpu, "node.kernel")
    # overridden checks keep the parent's order
    assert [c.id for c in prof.checks] == [c.id for c in gpu.checks]


def test_false_drops_an_inherited_check(write: Write) -> None:
    path = write("site.yaml", "extends: base\nchecks:\n  node.services: false\n  node.kernel: false\n")
    assert [c.id for c in profile.load(str(path)).checks] == ["node.cpu", "node.memory"]


def test_false_for_an_unknown_check_is_reported(write: Write) -> None:
    path = write("site.yaml", "extends: base\nchecks:\n  node.servics: false\n")
    assert_problems(path, (3, "`false` drops unknown check 'node.servics' (did you mean node.services?)"))


def test_child_overrides_a_parent_timeout_and_keeps_its_parameters(write: Write) -> None:
    path = write("site.yaml", "extends: prolog\nchecks:\n  node.memory: {timeout: 7}\n")
    memory = check(profile.load(str(path)), "node.memory")
    assert memory.timeout == 7.0
    assert memory.params["min_total"] == 4 * GiB


def test_extends_a_path_relative_to_the_profile_not_the_cwd(write: Write, tmp_path: Path, monkeypatch: Any) -> None:
    write("site/common/parent.yaml", "description: from the parent\nchecks:\n  node.cpu: {expected: 64}\n")
    child = write("site/nodes/child.yaml", "extends: ../common/parent.yaml\nchecks:\n  node.kernel:\n")
    write("cwd/common/parent.yaml", "checks: {node.cpu: {expected: 1}}\n")  # ../common/parent.yaml from the cwd
    (tmp_path / "cwd/here").mkdir()
    monkeypatch.chdir(tmp_path / "cwd/here")
    prof = profile.load(str(child))
    assert prof.description == "from the parent"
    assert check(prof, "node.cpu").params["expected"] == 64
    assert check(prof, "node.cpu").source == f"{child.parent}/../common/parent.yaml:3"


def test_extends_does_not_fall_back_to_the_cwd(write: Write, tmp_path: Path, monkeypatch: Any) -> None:
    write("cwd/parent.yaml", "checks: {node.cpu: }\n")
    child = write("profiles/child.yaml", "checks: {}\nextends: parent.yaml\n")
    monkeypatch.chdir(tmp_path / "cwd")
    assert_problems(child, (2, "profile 'parent.yaml' not found"))


@pytest.mark.parametrize("ref", ["missing", "missing.yaml", "../missing.yaml", "a" * 300, "nul\0byte", ""])
def test_extends_a_missing_profile(write: Write, ref: str) -> None:
    path = write("site.yaml", f"name: site\nextends: {json.dumps(ref)}\nchecks: {{}}\n")
    assert_problems(path, (2, f"profile {ref!r} not found: give a YAML file's path or a bundled profile"))


def test_problems_in_a_parent_name_the_parent(write: Write) -> None:
    parent = write("parent.yaml", "checks:\n  node.cpu: {expected: many}\n")
    child = write("child.yaml", "extends: parent.yaml\nchecks:\n  node.kernel: {allowed: 5}\n")
    got = problems(child)
    assert got == [
        f"{parent}:2: node.cpu.expected: expected an integer, got 'many'",
        f"{child}:3: node.kernel.allowed: expected a list of strings, got 5",
    ]


def test_extends_loop(write: Write) -> None:
    a = write("a.yaml", "extends: b.yaml\nchecks: {}\n")
    b = write("b.yaml", "checks: {}\nextends: a.yaml\n")
    (problem,) = problems(a)
    assert problem == f"{b}:2: profiles extend each other in a loop: {a} -> {b} -> {a}"


def test_extends_itself(write: Write) -> None:
    path = write("self.yaml", "name: me\nextends: self.yaml\nchecks: {}\n")
    assert_problems(path, (2, "profiles extend each other in a loop"))


# -- timeout -------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [("20", 20.0), ("0.5", 0.5), ("1e2", None)])
def test_timeout_valid(write: Write, value: str, seconds: float | None) -> None:
    path = write("t.yaml", f"checks:\n  node.cpu: {{timeout: {value}}}\n  node.kernel:\n")
    if seconds is None:  # YAML 1.1 reads 1e2 (no dot) as a string
        assert_problems(path, (2, "node.cpu.timeout: expected a number, got '1e2'"))
        return
    prof = profile.load(str(path))
    assert check(prof, "node.cpu").timeout == seconds
    assert check(prof, "node.cpu").params == {"expected": 0, "governor": ""}  # timeout is not a parameter
    assert check(prof, "node.kernel").timeout == registry.lookup("node.kernel").timeout  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "the time budget must be a number of seconds more than 0, got 0"),
        ("-5", "the time budget must be a number of seconds more than 0, got -5"),
        (".inf", "the time budget must be a number of seconds more than 0, got inf"),
        (".nan", "expected a number, got .nan"),
        ("soon", "expected a number, got 'soon'"),
        ("'20'", "expected a number, got '20'"),
        ("true", "expected a number, got True"),
        ("9" * 400, "the number 999"),
    ],
)
def test_timeout_invalid(write: Write, value: str, message: str) -> None:
    assert_problems(
        write("t.yaml", f"checks:\n  node.cpu:\n    timeout: {value}\n"), (3, f"node.cpu.timeout: {message}")
    )


# -- site checks ---------------------------------------------------------------------------

SITE_MODULE = '''\
from clustercheck import Host, Result, Size, check, ok


@check(needs=["probe nvml"], timeout=20)
def gpus(host: Host, *, expected: int = 8, min_memory: Size = Size(0)) -> Result:
    """The node has `expected` GPUs."""
    return ok(f"{expected} GPUs")
'''


def site_module(write: Write, folder: str, stem: str, text: str = SITE_MODULE) -> Path:
    """Check ids are global: each test uses its own module stem."""
    return write(f"{folder}/{stem}.py", text)


def test_check_dirs_site_module(write: Write, tmp_path: Path) -> None:
    site_module(write, "site-checks", "lab_ok")
    path = write(
        "site.yaml",
        "check_dirs: [site-checks]\nchecks:\n  lab_ok.gpus: {min_memory: 80GiB, timeout: 3}\n  node.kernel:\n",
    )
    prof = profile.load(str(path))
    gpus = check(prof, "lab_ok.gpus")
    assert gpus.params == {"expected": 8, "min_memory": 80 * GiB}
    assert gpus.timeout == 3.0
    assert prof.check_dirs == (tmp_path / "site-checks",)
    assert registry.lookup("lab_ok.gpus").needs == ("probe nvml",)  # type: ignore[union-attr]


def test_check_dirs_site_parameters_are_validated(write: Write) -> None:
    site_module(write, "site-checks", "lab_types")
    path = write("site.yaml", "check_dirs: [site-checks]\nchecks:\n  lab_types.gpus: {expected: eight}\n")
    assert_problems(path, (3, "lab_types.gpus.expected: expected an integer, got 'eight'"))


def test_check_dirs_did_you_mean_knows_site_checks(write: Write) -> None:
    site_module(write, "site-checks", "lab_typo")
    path = write("site.yaml", "check_dirs: [site-checks]\nchecks:\n  lab_typo.gpu:\n")
    assert_problems(path, (3, "unknown check 'lab_typo.gpu' (did you mean lab_typo.gpus?)"))


def test_check_dirs_of_a_parent_are_relative_to_the_parent(write: Write, tmp_path: Path) -> None:
    site_module(write, "common/checks", "lab_parent")
    write("common/parent.yaml", "check_dirs: [checks]\nchecks: {lab_parent.gpus: {expected: 4}}\n")
    child = write("nodes/child.yaml", "extends: ../common/parent.yaml\nchecks: {node.cpu: }\n")
    prof = profile.load(str(child))
    assert check(prof, "lab_parent.gpus").params["expected"] == 4
    assert prof.check_dirs == (tmp_path / "nodes/../common/checks",)


def test_check_dirs_missing_folder(write: Write, tmp_path: Path) -> None:
    path = write("site.yaml", "name: site\ncheck_dirs: [nope]\nchecks: {}\n")
    assert_problems(path, (2, f"the checks folder {tmp_path / 'nope'} does not exist"))


def test_extra_checks_folder_missing(write: Write, tmp_path: Path) -> None:
    path = write("site.yaml", "checks: {node.cpu: }\n")
    with pytest.raises(ProfileError) as info:
        profile.load(str(path), extra_check_dirs=(tmp_path / "nope",))
    assert info.value.problems == [f"--checks: the checks folder {tmp_path / 'nope'} does not exist"]


def test_check_dirs_site_module_with_a_syntax_error(write: Write) -> None:
    broken = site_module(write, "broken-checks", "lab_syntax", "from clustercheck import check\n\ndef gpus(:\n")
    path = write("site.yaml", "check_dirs: [broken-checks]\nchecks: {node.cpu: }\n")
    for _ in range(2):  # and again: a folder that failed to load is not remembered as loaded
        (problem,) = problems(path)
        assert problem.startswith(f"{broken}:3: the check module failed to load: SyntaxError: ")


def test_check_dirs_site_module_that_raises(write: Write) -> None:
    text = "import os\n\n\nVALUE = os.environ['CLUSTERCHECK_NO_SUCH_VARIABLE']\n"
    broken = site_module(write, "raising-checks", "lab_raises", text)
    path = write("site.yaml", "check_dirs: [raising-checks]\nchecks: {node.cpu: }\n")
    (problem,) = problems(path)
    assert problem == (f"{broken}:4: the check module failed to load: KeyError: 'CLUSTERCHECK_NO_SUCH_VARIABLE'")


def test_check_dirs_site_check_with_an_unsupported_parameter_type(write: Write) -> None:
    text = SITE_MODULE.replace("expected: int = 8", "expected: dict = {}")
    broken = site_module(write, "typed-checks", "lab_dict", text)
    path = write("site.yaml", "check_dirs: [typed-checks]\nchecks: {node.cpu: }\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{broken}:4: check lab_dict.gpus: parameter expected has type <class 'dict'>")


def test_check_dirs_site_module_calling_exit(write: Write) -> None:
    broken = site_module(write, "exit-checks", "lab_exit", "import sys\nsys.exit(3)\n")
    path = write("site.yaml", "check_dirs: [exit-checks]\nchecks: {node.cpu: }\n")
    (problem,) = problems(path)
    assert problem == f"{broken}:2: the check module failed to load: SystemExit: 3"


# -- a profile that came with a fixture loads no code (issue 13 item 5) ---------------------


def untrusted_problems(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as info:
        profile.load(str(path), allow_code=False)
    return info.value.problems


def test_untrusted_profile_refuses_check_dirs_and_imports_nothing(write: Write, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    site_module(write, "site-checks", "lab_untrusted", f"open({str(marker)!r}, 'w').close()\n")
    path = write("site.yaml", "name: site\ncheck_dirs: [site-checks]\nchecks: {node.cpu: }\n")
    (problem,) = untrusted_problems(path)
    assert problem.startswith(f"{path}:2: check_dirs names site check folders (Python code)")
    assert "--profile PROFILE" in problem and profile.TRUST_FLAG in problem
    assert not marker.exists()
    assert check(profile.load(str(path)), "node.cpu")  # trusted (the default): it loads
    assert marker.exists()


def test_untrusted_profile_refuses_check_dirs_of_a_non_bundled_parent(write: Write, tmp_path: Path) -> None:
    write("parent.yaml", "check_dirs: [site-checks]\nchecks: {node.cpu: }\n")
    path = write("child.yaml", "extends: parent.yaml\nchecks: {}\n")
    (problem,) = untrusted_problems(path)
    assert problem.startswith(f"{path}:1: extends 'parent.yaml' is not a bundled profile (base, ")


@pytest.mark.parametrize("ref", ["./gpu-node.yaml", "/etc/passwd", "../x/base.yaml", "gpu-node.yaml"])
def test_untrusted_profile_extends_only_bundled_names(write: Write, ref: str) -> None:
    write("gpu-node.yaml", "checks: {node.cpu: }\n")
    path = write("child.yaml", f"# site\nextends: {ref}\nchecks: {{}}\n")
    (problem,) = untrusted_problems(path)
    assert problem.startswith(f"{path}:2: extends {ref!r} is not a bundled profile")


def test_untrusted_profile_extends_the_bundled_one_not_a_same_named_file_beside_it(write: Write) -> None:
    write("gpu-node", "check_dirs: [x]\nchecks: {node.cpu: }\n")  # resolve() would pick this first
    path = write("child.yaml", "extends: gpu-node\nchecks: {node.cpu: {expected: 2}}\n")
    prof = profile.load(str(path), allow_code=False)
    assert check(prof, "node.cpu").params["expected"] == 2
    assert {c.id for c in prof.checks} >= {c.id for c in profile.load("gpu-node").checks}
    assert prof.check_dirs == ()


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profiles_load_untrusted(name: str) -> None:
    assert profile.load(name, allow_code=False).checks == profile.load(name).checks


@pytest.mark.parametrize("ref", ["/etc/passwd", "/etc/hostname", "/proc/self/environ"])
def test_untrusted_profile_must_be_a_yaml_file(ref: str) -> None:
    """A fixture naming a system file as its profile gets no part of it parsed into a message."""
    with pytest.raises(UsageError) as info:
        profile.load(ref, allow_code=False)
    assert str(info.value) == (
        f"the replayed fixture names {ref!r} as its profile, neither a .yaml file nor a bundled profile; "
        "choose the profile yourself with --profile PROFILE (or pass --trust-fixture-code)"
    )


def test_untrusted_profile_still_takes_the_users_checks_folders(write: Write, tmp_path: Path) -> None:
    site_module(write, "mine", "lab_users_own")
    path = write("site.yaml", "checks: {lab_users_own.gpus: }\n")
    prof = profile.load(str(path), extra_check_dirs=(tmp_path / "mine",), allow_code=False)
    assert check(prof, "lab_users_own.gpus")


# -- CLI -----------------------------------------------------------------------------------

BAD = """\
name: bad
checks:
  node.memroy: {min_total: 1TiB}
  node.cpu: {expected: eight}
  node.memory: {min_total: lots}
  node.kernel: {timeout: 0}
"""


def test_cli_run_bad_profile_exits_64_with_every_problem(write: Write, run_cli: RunCli) -> None:
    path = write("bad.yaml", BAD)
    proc = run_cli("run", "--profile", path)
    assert proc.returncode == 64, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines == [
        f"clustercheck: error: {path}:3: unknown check 'node.memroy' (did you mean node.memory?); "
        "`clustercheck checks` lists them",
        f"{path}:4: node.cpu.expected: expected an integer, got 'eight'",
        f"{path}:5: node.memory.min_total: expected a size like 512GiB, 1.9TiB or 500GB, got 'lots'",
        f"{path}:6: node.kernel.timeout: the time budget must be a number of seconds more than 0, got 0",
    ]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"- a\n- b\n",
        b"checks: [node.cpu]\n",
        b"checks: 5\n",
        b"\xff\xfe\x00garbage",
        b"name: 2024-13-45\n",
        b"checks:\n  node.cpu: {timeout: " + b"9" * 400 + b"}\n",
        b"extends: " + b"x" * 300 + b"\n",
        b'check_dirs: ["\\0"]\n',
    ],
    ids=["empty", "list", "checks-list", "checks-int", "binary", "bad-date", "huge-timeout", "long-extends", "nul"],
)
def test_cli_run_garbage_profile_exits_64_without_traceback(write: Write, run_cli: RunCli, content: bytes) -> None:
    path = write("garbage.yaml", content)
    proc = run_cli("run", "--profile", path)
    assert proc.returncode == 64, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"clustercheck: error: {path}:")
    assert all(
        re.match(rf"(clustercheck: error: )?{re.escape(str(path))}:\d+: \S", line) for line in proc.stderr.splitlines()
    )


def test_cli_run_missing_profile_exits_64(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("run", "--profile", tmp_path / "nope.yaml")
    assert proc.returncode == 64
    assert "not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_run_site_module_syntax_error_exits_64(write: Write, run_cli: RunCli) -> None:
    broken = site_module(write, "cli-checks", "lab_cli", "def broken(:\n")
    path = write("site.yaml", "checks: {node.cpu: }\n")
    proc = run_cli("run", "--checks", broken.parent, "--profile", path)
    assert proc.returncode == 64
    assert proc.stderr.startswith(f"clustercheck: error: {broken}:1: the check module failed to load: SyntaxError")
    assert "Traceback" not in proc.stderr


def test_cli_checks_lists_site_checks(write: Write, run_cli: RunCli) -> None:
    module = site_module(write, "listed-checks", "lab_listed")
    proc = run_cli("checks", "--checks", module.parent, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    spec = next(c for c in json.loads(proc.stdout) if c["id"] == "lab_listed.gpus")
    assert spec["params"] == [
        {"name": "expected", "type": "integer", "required": False, "default": 8},
        {"name": "min_memory", "type": "size like 512GiB", "required": False, "default": 0},
    ]


def test_cli_profiles_lists_the_bundled_ones(run_cli: RunCli) -> None:
    proc = run_cli("profiles")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert sorted(rows) == BUNDLED
    for name in BUNDLED:
        prof = profile.load(name)
        assert re.match(rf"{name}\s+{len(prof.checks)} checks\s+{re.escape(prof.description)}$", rows[name])


# -- JSON Schema ---------------------------------------------------------------------------

_KEYWORDS = {
    "$schema",
    "title",
    "description",
    "type",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "anyOf",
    "const",
    "pattern",
    "minimum",
    "exclusiveMinimum",
}


def _is_type(value: Any, kind: str) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "number": number,
        "integer": number and float(value).is_integer(),
    }[kind]


def schema_errors(schema: dict[str, Any], value: Any, where: str = "$") -> list[str]:
    """Validate against the subset of JSON Schema that json_schema() uses (jsonschema is not a dependency)."""
    unknown = set(schema) - _KEYWORDS
    assert not unknown, f"the test's validator does not know {unknown}"
    if "anyOf" in schema and all(schema_errors(s, value, where) for s in schema["anyOf"]):
        return [f"{where}: matches none of its anyOf"]
    if "const" in schema and not (type(value) is type(schema["const"]) and value == schema["const"]):
        return [f"{where}: is not {schema['const']!r}"]
    if "type" in schema and not _is_type(value, schema["type"]):
        return [f"{where}: is not of type {schema['type']}"]
    errors = []
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{where}: does not match {schema['pattern']}")
    if "minimum" in schema and _is_type(value, "number") and value < schema["minimum"]:
        errors.append(f"{where}: is below {schema['minimum']}")
    if "exclusiveMinimum" in schema and _is_type(value, "number") and value <= schema["exclusiveMinimum"]:
        errors.append(f"{where}: is not above {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                errors += schema_errors(props[key], item, f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{where}: {key!r} is not allowed")
        errors += [f"{where}: {key!r} is required" for key in schema.get("required", ()) if key not in value]
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += schema_errors(schema["items"], item, f"{where}[{i}]")
    return errors


def validate(schema: dict[str, Any], value: Any) -> list[str]:
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        return schema_errors(schema, value)
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]


@pytest.fixture(scope="module")
def schema(run_cli: RunCli) -> dict[str, Any]:
    proc = run_cli("profiles", "--schema")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_schema_names_every_registered_check(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"name", "description", "extends", "check_dirs", "checks"}
    checks = schema["properties"]["checks"]["properties"]
    builtin = {s.id for s in registry.all_checks() if s.id.startswith("node.")}
    assert builtin <= set(checks)
    for spec in registry.all_checks():
        if spec.id in checks:
            props = checks[spec.id]["anyOf"][0]["properties"]
            assert set(props) == {p.name for p in spec.params} | {"timeout"}
            assert checks[spec.id]["anyOf"][0]["required"] == [p.name for p in spec.params if p.required]


@pytest.mark.parametrize("name", BUNDLED)
def test_schema_validates_the_bundled_profiles(schema: dict[str, Any], name: str) -> None:
    doc = yaml.safe_load((profile.bundled_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
    assert validate(schema, doc) == []


@pytest.mark.parametrize(
    "doc",
    [
        {"checks": {"node.cpu": {"expected": "eight"}}},
        {"checks": {"node.memory": {"min_total": "lots"}}},
        {"checks": {"node.memory": {"min_total": "1.2.3GiB"}}},
        {"checks": {"node.memory": None}},
        {"checks": {"node.cpu": {"timeout": 0}}},
        {"checks": {"node.cpu": {"cores": 4}}},
        {"checks": {"node.memroy": {}}},
        {"colour": "blue", "checks": {}},
    ],
)
def test_schema_rejects_what_the_loader_rejects(schema: dict[str, Any], write: Write, doc: dict[str, Any]) -> None:
    assert validate(schema, doc)
    problems(write("doc.yaml", yaml.safe_dump(doc)))


# A profile's checks drawn from the real ones, with values of every type, right and wrong:
# the schema (what editors check) and load() must agree on each.
_SPECS = {s.id: s for s in registry.all_checks() if s.id.startswith("node.")}
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
    st.sampled_from(["512GiB", "1.9TiB", "500GB", "64G", "4 gib", "1.2.3GiB", "lots", "", " 8 ", "performance"]),
    st.text(max_size=6),
    st.lists(st.sampled_from(["nvidia", "/scratch", "D"]), max_size=3),
    st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def _checks(draw: st.DrawFn) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    for check_id in draw(st.lists(st.sampled_from([*_SPECS, "node.memroy"]), unique=True, max_size=4)):
        spec = _SPECS.get(check_id, _SPECS["node.memory"])
        names = [p.name for p in spec.params] + ["timeout", "timeot"]
        params = draw(st.dictionaries(st.sampled_from(names), _VALUES, max_size=4))
        checks[check_id] = draw(st.sampled_from([params, params, None, False, True, 8]))
    return {"checks": checks}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=_checks())
def test_schema_and_loader_agree(
    schema: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, doc: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("agree") / "p.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    try:
        profile.load(str(path))
        loader_problems: list[str] = []
    except ProfileError as exc:
        loader_problems = exc.problems
    schema_problems = validate(schema, json.loads(json.dumps(doc)))
    assert bool(loader_problems) == bool(schema_problems), (loader_problems, schema_problems)
