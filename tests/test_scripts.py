"""Scripts that run on a node: real files in the package, linted, sent byte for byte as recorded;
and how the evidence names such a script instead of spelling it out (`Host.run(shown_as=...)`)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import re
import subprocess
import sys

import pytest
import yaml
from tests.helpers import REPO, posix_sh_problems

from clustercheck import Host
from clustercheck.transports.local import LocalTransport


def test_shown_as_names_the_command_in_the_evidence_and_runs_argv_unchanged() -> None:
    host = Host(LocalTransport("n1"))
    script = "echo one; echo two >&2; exit 3"
    result = host.run("sh", "-c", script, shown_as="sh -c '<a test script>'")
    assert result.argv == ("sh", "-c", script) and result.stdout == "one\n" and result.exit_code == 3
    assert len(host.observations) == 1
    line = host.observations[0]
    assert line.startswith("$ sh -c '<a test script>'  (exit 3, ") and line.endswith(" s)  stderr: two")
    assert script not in line
    plain = host.run(sys.executable, "-c", "print(1)")
    assert host.observations[1].startswith(f"$ {plain.command}  (exit 0, ")


# -- the scripts' text: pinned, as recorded in fixtures --------------------------------------
#: Each shell script as sent, `module:NAME` -> (its file in facts/scripts, length, sha256). The
#: hashes were taken from the Python strings these files replaced: the same bytes, so every
#: fixture that recorded them replays. A new hash means re-recording the fixtures that ran it.
SENT = {
    "clustercheck.facts.image:PROBE_SCRIPT": (
        "rdma_image_probe.sh",
        944,
        "1df6471b563a63e7d6837e7d34b8bfb9ca6d57fde55d5de97fe177b003e30004",
    ),
    "clustercheck.facts.image:IMAGE_SCRIPT": (
        "image_stack_probe.sh",
        2565,
        "af2bdbcfc146e6fc215abc7260273d69c18d184161ddd67e7694b2974cc638f5",
    ),
    "clustercheck.checks.rdma.bandwidth:LOOPBACK_SCRIPT": (
        "rdma_loopback.sh",
        267,
        "8e9e277c6dda31c715ec488e285e5cd214a9977dd5777066e7368b77cb618cf8",
    ),
    "clustercheck.sweep:RDMA_PAIR_SCRIPT": (
        "rdma_pair.sh",
        1237,
        "d8eee37e9ec1da1089b63c2325bb5fdcc0ba93cb11c7efd31458006fdb2aea9c",
    ),
    "clustercheck.facts.image:IMAGE_FILE_SCRIPT": (
        "image_file.sh",
        219,
        "a91e714392e7d4993788142e9ed91f63db767bed63026662ba0fea7f13e31ad9",
    ),
    # a part of HOST_SCRIPT and of the image's PROBE_SCRIPT (their @LIBRARY_SCAN@)
    "clustercheck.facts.infiniband:LIBRARY_SCAN": (
        "rdma_library_scan.sh",
        400,
        "f069534de9179b16695a4df07c9ddc6683f706b726ee64811cc7d92ffb467a55",
    ),
    "clustercheck.facts.infiniband:HOST_SCRIPT": (
        "rdma_host_gather.sh",
        745,
        "b5ffdaf5aba0751b94642a561d6f53151cde1109a26ed26a2aca81a8c8a383df",
    ),
    "clustercheck.checks.rdma.counters:gather_script(0)": (
        "rdma_counters.sh",
        231,
        "63e08176377f4ab13b94fd170d8b0b68e824f59e7c923ec956244d3d8042cb8a",
    ),
    "clustercheck.checks.rdma.counters:gather_script(5)": (
        "rdma_counters_window.sh",
        354,
        "b83e6dc0448b6866e4008509318a38b04f4dd4b2060e8f931ca1857dc41139a1",
    ),
    "clustercheck.checks.nccl:_LIST_SCRIPT": (
        "nccl_list_logs.sh",
        207,
        "c690f34a4d149c3497a942969dd2bab17e7f5d87d657bc85491e83af1ce2538c",
    ),
    "clustercheck.checks.nccl:_GREP_SCRIPT": (
        "nccl_grep_log.sh",
        836,
        "8ee9a9fbc845d6021758ee3f79c0da5fbb862c546a73397383695ce73a3ff3d2",
    ),
    # was an f-string around the shlex-quoted folder; the folder is now $1 (fixtures re-derived)
    "clustercheck.checks.roce:NET_SYSFS_SCRIPT": (
        "roce_net_sysfs.sh",
        79,
        "c94363e474c009f434638d00622ad75ded1a246c3b17eea7ea30959f3f99ac4c",
    ),
}


def sent(where: str) -> str:
    """The text a `module:NAME` (or `module:FUNCTION(NUMBER)`) of SENT sends to the node."""
    module, _, name = where.partition(":")
    called = re.fullmatch(r"(\w+)\(([\d.]+)\)", name)
    found = getattr(importlib.import_module(module), called.group(1) if called else name)
    text = found(float(called.group(2))) if called else found
    assert isinstance(text, str)
    return text


@pytest.mark.parametrize("where", sorted(SENT))
def test_a_script_is_sent_byte_for_byte_as_recorded(where: str) -> None:
    text = sent(where)
    assert (len(text), hashlib.sha256(text.encode()).hexdigest()) == SENT[where][1:]


SHIPPED_SHELL = sorted(
    p.name for p in importlib.resources.files("clustercheck.facts.scripts").iterdir() if p.name.endswith(".sh")
)


@pytest.mark.parametrize("file", SHIPPED_SHELL)
def test_every_shell_script_is_posix_sh_as_shipped(file: str) -> None:
    """Every .sh of facts/scripts parses in each POSIX shell here and passes shellcheck (where it
    is installed): what a script does on purpose it says in `# shellcheck disable=` lines."""
    shipped = importlib.resources.files("clustercheck.facts.scripts").joinpath(file).read_text()
    assert posix_sh_problems(shipped, shellcheck=True) == []
    assert file in [f for f, _, _ in SENT.values()], f"{file}: pin what sends it in SENT"


@pytest.mark.parametrize("where", sorted(SENT))
def test_a_shell_script_is_posix_sh_as_sent(where: str) -> None:
    assert posix_sh_problems(sent(where)) == []
    assert not re.search(r"@[A-Z][A-Z0-9_]*@", sent(where))  # every placeholder filled


#: The scripts sent whole as `sh -c SCRIPT ...` whose fixtures' recordings hold them verbatim
#: (argv[2], the key a replay looks a command up by): they were Python strings, and the files
#: are those bytes, so the recordings replay unedited. `where` -> fixtures holding it.
RECORDED = {
    "clustercheck.facts.infiniband:HOST_SCRIPT": 18,
    "clustercheck.checks.rdma.counters:gather_script(0)": 2,
    "clustercheck.checks.rdma.counters:gather_script(5)": 4,
    "clustercheck.checks.nccl:_LIST_SCRIPT": 6,
    "clustercheck.checks.nccl:_GREP_SCRIPT": 6,
    "clustercheck.checks.roce:NET_SYSFS_SCRIPT": 6,
}


def _recorded_argv() -> list[list[str]]:
    every = []
    for path in sorted((REPO / "fixtures").rglob("command.yaml")):
        argv = yaml.safe_load(path.read_text()).get("argv")
        if isinstance(argv, list) and argv[:2] == ["sh", "-c"] and len(argv) > 2:
            every.append(argv)
    return every


def test_the_fixtures_record_the_scripts_as_sent() -> None:
    recorded = _recorded_argv()
    held = {where: sum(argv[2] == sent(where) for argv in recorded) for where in RECORDED}
    assert held == RECORDED


def test_a_window_of_counters_fills_in_only_a_number() -> None:
    """rdma.counters' window is the one thing filled into its script: the digits of a number."""
    from clustercheck.checks.rdma.counters import gather_script

    assert "\nsleep 2.5\n" in gather_script(2.5) and "sleep" not in gather_script(0)
    for bad in (float("nan"), float("inf"), 1e9, True, "5; reboot", "$(reboot)"):
        with pytest.raises(ValueError, match="sample_s"):
            gather_script(bad)  # type: ignore[arg-type]


def test_the_nccl_grep_script_cuts_lines_where_the_check_says() -> None:
    from clustercheck.checks.nccl import _GREP_SCRIPT, CUT_MARK, MAX_LINE

    assert _GREP_SCRIPT.count(f"| cut -b 1-{MAX_LINE + 1} | awk -v n={MAX_LINE} ") == 4
    assert _GREP_SCRIPT.count('"\\t@@cut"') == 4 and CUT_MARK == "\t@@cut"


def test_the_loader_fills_placeholders_once_and_refuses_a_mismatch() -> None:
    from clustercheck.facts import script_text

    shipped = importlib.resources.files("clustercheck.facts.scripts").joinpath("rdma_image_probe.sh").read_text()
    assert "@LIBRARY_SCAN@" in shipped
    assert script_text("rdma_image_probe.sh", LIBRARY_SCAN="echo @LIBRARY_SCAN@").count("echo @LIBRARY_SCAN@") == 1
    with pytest.raises(ValueError, match=r"placeholders \['LIBRARY_SCAN'\], filled \[\]"):
        script_text("rdma_image_probe.sh")
    with pytest.raises(ValueError, match="filled"):
        script_text("image_file.sh", EXTRA="x")
    assert not any(line.lstrip().startswith("#") for line in script_text("image_file.sh").splitlines())


# -- the storage script: a module, run as `python3 -c TEXT ARGS` -----------------------------
#: sha256 of the storage script as sent. It was a string in checks/storage.py (14665 characters,
#: 6f660c93...); as a module it is formatted and typed, so the storage fixtures' recorded argv
#: was updated to this text (their notes say so) and their outputs kept.
STORAGE_SENT = (30265, "065d7d15f287086d6c383210818928752b8d180bf16547c3f201951dc7a4b713")


def test_the_storage_script_is_the_module_sent_as_recorded() -> None:
    from clustercheck.checks.storage import SCRIPT

    module = importlib.resources.files("clustercheck.facts.scripts").joinpath("storage_probe.py").read_text()
    assert module == SCRIPT  # sent as the file is: what ruff and mypy check is what runs
    assert (len(SCRIPT), hashlib.sha256(SCRIPT.encode()).hexdigest()) == STORAGE_SENT
    recorded = sorted((REPO / "fixtures").glob("storage-*/commands/python3_-c_*/command.yaml"))
    assert len(recorded) == 6
    for path in recorded:
        assert yaml.safe_load(path.read_text())["argv"][2] == SCRIPT, path


PYTHON_SCRIPTS = sorted(
    p.name for p in importlib.resources.files("clustercheck.facts.scripts").iterdir() if p.name.endswith(".py")
)
PYTHON_SCRIPTS.remove("__init__.py")


@pytest.mark.parametrize("name", PYTHON_SCRIPTS)
def test_a_python_script_runs_on_python_3_6(name: str) -> None:
    """No syntax newer than 3.6, and no annotation a 3.6 interpreter would evaluate and fail on
    (`list[int]` in a signature or at module level): those are strings. Local annotations are
    never evaluated. (No Python 3.6 here to run it with: this reads it as 3.6 would.)"""
    import ast

    text = importlib.resources.files("clustercheck.facts.scripts").joinpath(name).read_text()
    tree = ast.parse(text, feature_version=(3, 6))
    evaluated: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            evaluated += [a.annotation for a in every if a is not None and a.annotation is not None]
            evaluated += [node.returns] if node.returns is not None else []
    evaluated += [n.annotation for n in tree.body if isinstance(n, ast.AnnAssign)]
    assert evaluated, "the script is typed"
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))  # it runs alone, as -c
    # a name (int, str) or None evaluates anywhere; `list[int]` and `int | None` need 3.9 and 3.10
    failing = [ast.unparse(a) for a in evaluated if not isinstance(a, (ast.Name, ast.Constant))]
    assert failing == [], f"annotations a Python 3.6 would evaluate and fail on: {failing}"
    assert not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in ast.walk(tree))


@pytest.mark.parametrize("name", PYTHON_SCRIPTS)
def test_importing_a_python_script_does_nothing(name: str) -> None:
    """Only `python3 -c` (`__name__ == "__main__"`) runs it: importing it (mypy, a test) reads no
    argv, arms no signal or alarm, prints nothing."""
    code = (
        "import signal, sys; sys.argv = ['x']\n"
        f"import clustercheck.facts.scripts.{name[:-3]}\n"
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.alarm(0) == 0\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_loading_the_scripts_imports_no_module_more() -> None:
    """The prolog's checks (storage.mounts, rdma.*) load their scripts when imported: that reads
    files, it imports neither facts/scripts/ nor the storage script's module."""
    code = (
        "import sys\n"
        "import clustercheck.checks.storage, clustercheck.facts.image\n"
        "print(sorted(m for m in sys.modules if m.startswith('clustercheck.facts.scripts')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
