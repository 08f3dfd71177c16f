"""The single file for compute nodes (`make dist` -> dist/clustercheck.pyz), run as a node runs it:
by a Python that has none of clustercheck's dependencies, from a fresh cache.

It is built once per session from this checkout by tools/build_pyz.py (what `make dist` runs on
the wheel), and every run uses a venv made with --without-pip from the base interpreter, whose
empty site-packages the tests first prove empty.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tools import build_pyz  # the repository's root is on sys.path (pyproject: pytest's pythonpath)

from clustercheck import __version__, registry

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "fixtures" / "demo-cluster"
NODE = DEMO / "gpu012"  # GPU 3 lost, XID 79: gpu.count and gpu.xid fail
PROFILE = DEMO / "site-profile.yaml"  # what `make demo` runs the demo cluster with


@pytest.fixture(scope="session")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "clustercheck.pyz"
    assert build_pyz.main(["--source", str(REPO), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with no clustercheck dependencies: a fresh venv without pip, from the base Python."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python3"
    probe = "import importlib.util as u, sys; print(sys.prefix); print([m for m in MODS if u.find_spec(m)])"
    mods = ["yaml", "rich", "typer", "pydantic", "paramiko", "psutil", "hostlist", "pynvml", "clustercheck"]
    seen = subprocess.run(
        [str(python), "-c", f"MODS = {mods!r}\n{probe}"], capture_output=True, text=True, timeout=60, env=_env()
    )
    prefix, found = seen.stdout.splitlines()
    assert Path(prefix) == venv and found == "[]", seen.stdout  # the venv's packages are not visible
    return python


def _env(cache: Path | None = None, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1", "COLUMNS": "200", "LANG": "C.UTF-8"}
    if cache is not None:
        env["CLUSTERCHECK_CACHE"] = str(cache)
        env["HOME"] = str(cache.parent)
    return {**env, **extra}


def run(python: Path, pyz: Path, *args: str | Path, cache: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), str(pyz), *map(str, args)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        cwd=cwd,
        env=_env(cache),
    )


def builds(cache: Path) -> list[Path]:
    """What is in the cache folder but its lock file."""
    return sorted(p for p in cache.iterdir() if p.name != ".lock")


def one_line(text: str) -> str:
    assert "Traceback" not in text and "SyntaxError" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_version_and_checks_without_dependencies(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    version = run(bare_python, pyz, "--version", cache=cache)
    assert (version.returncode, version.stdout) == (0, f"clustercheck {__version__}\n"), version.stderr
    listed = run(bare_python, pyz, "checks", "--format", "json", cache=cache)
    assert listed.returncode == 0, listed.stderr
    assert [c["id"] for c in json.loads(listed.stdout)] == [s.id for s in registry.all_checks()]
    table = run(bare_python, pyz, "checks", cache=cache)
    assert table.returncode == 0 and "gpu.count" in table.stdout, table.stderr
    # it ran from the cache, one folder per build, unpacked completely, the node commands compiled
    (build,) = builds(cache)
    assert build.name.startswith(f"{__version__}-") and (build / ".complete").is_file()
    assert list(build.glob("clustercheck/slurm/__pycache__/prolog_mode.*.pyc"))
    assert list(build.glob("yaml/__pycache__/*.pyc"))
    assert (build / "clustercheck" / "bare.py").is_file() and (build / "yaml" / "__init__.py").is_file()
    assert not list(build.glob("yaml/_yaml*")) and not (build / "typer").exists()  # C extensions stay out
    assert not (build / "example.py").exists()  # nvidia-ml-py's demo script


def test_run_replay_of_the_demo_node_without_dependencies(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = run(bare_python, pyz, "run", "--replay", NODE, "--profile", PROFILE, "--format", "json", cache=cache)
    assert result.returncode == 2, result.stderr
    (host,) = json.loads(result.stdout)["hosts"].values()
    statuses = {c["id"]: c["status"] for c in host["checks"]}
    assert statuses["gpu.count"] == "fail" and statuses["gpu.xid"] == "fail"
    # the same verdicts as the full install's
    venv = subprocess.run(
        [sys.executable, "-m", "clustercheck", "run", "--replay", str(NODE), "--profile", str(PROFILE), "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    (venv_host,) = json.loads(venv.stdout)["hosts"].values()
    assert statuses == {c["id"]: c["status"] for c in venv_host["checks"]}
    table = run(bare_python, pyz, "run", "--replay", NODE, "--profile", PROFILE, cache=cache)
    assert table.returncode == 2 and re.search(r"gpu\.xid\s*│\s*fail", table.stdout), table.stdout + table.stderr


def test_run_local_checks_this_machine_within_a_timeout(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    """The real local transport, and --timeout's forked, killable run, from the single file."""
    args = ("run", "--local", "--profile", "prolog", "--format", "json", "--timeout", "60")
    result = run(bare_python, pyz, *args, cache=tmp_path / "cache")
    assert result.returncode in (0, 1, 2, 3), result.stderr
    (host,) = json.loads(result.stdout)["hosts"].values()
    assert {c["id"] for c in host["checks"]} >= {"node.kernel", "node.cpu", "node.memory"}
    assert "Traceback" not in result.stderr


def test_prolog_writes_its_state_file(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    state = tmp_path / "state" / "prolog.json"
    args = ("prolog", "--replay", NODE, "--profile", PROFILE, "--state-file", state, "--syslog-socket", "")
    result = run(bare_python, pyz, *args, cache=tmp_path / "cache")
    assert result.returncode == 2, result.stderr
    verdict = json.loads(state.read_text())
    assert verdict["verdict"] == "fail" and verdict["exit_code"] == 2
    assert verdict["reason"].startswith("clustercheck: gpu.count: ")  # the first failed check
    assert "FAIL, the node must not run the job" in result.stdout
    # the prolog path stays lean from the single file too: clustercheck and PyYAML, from its cache
    traced = subprocess.run(
        [str(bare_python), "-X", "importtime", str(pyz), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=_env(tmp_path / "cache"),
    )
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in traced.stderr.splitlines() if "|" in line}
    assert "yaml" in imported and not imported & {"rich", "typer", "pydantic", "paramiko", "pynvml"}, imported


def test_health_runs_and_changes_nothing_without_scontrol(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    args = ("health", "--replay", NODE, "--profile", PROFILE, "--node", "gpu012", "--syslog-socket", "")
    result = run(bare_python, pyz, *args, "--scontrol", tmp_path / "no-scontrol", cache=tmp_path / "cache")
    assert result.returncode == 3
    assert "cannot read node gpu012's state, so nothing was changed" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_eight_first_runs_at_once_share_one_unpacked_copy(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # empty: the first jobs after an upgrade

    def step(i: int) -> subprocess.CompletedProcess[str]:
        state = tmp_path / f"state-{i}.json"
        args = ("prolog", "--replay", NODE, "--profile", PROFILE, "--state-file", state, "--syslog-socket", "")
        return run(bare_python, pyz, *args, cache=cache)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(step, range(8)))
    assert [r.returncode for r in results] == [2] * 8, [r.stderr for r in results]
    assert all("Traceback" not in r.stderr for r in results)
    (build,) = builds(cache)  # one copy, no temporary folders left
    assert (build / ".complete").is_file()
    assert len(list(tmp_path.glob("state-*.json"))) == 8


def test_a_run_killed_while_unpacking_leaves_nothing_in_the_way(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    stale = cache / ".unpacking-0123456789ab-xyz"  # what a SIGKILL during the first run leaves
    (stale / "clustercheck").mkdir(parents=True)
    (cache / ".lock").touch()  # its lock is released by the kernel with the process
    result = run(bare_python, pyz, "--version", cache=cache)
    assert result.returncode == 0, result.stderr
    (build,) = builds(cache)
    assert (build / ".complete").is_file()


def test_an_upgrade_keeps_the_three_newest_builds(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    old = ["0.0.4-aaaaaaaaaaaa", "0.0.3-bbbbbbbbbbbb", "0.0.2-cccccccccccc", "0.0.1-dddddddddddd"]  # newest first
    for age, name in enumerate(old):
        (cache / name / "clustercheck").mkdir(parents=True)
        (cache / name / ".complete").touch()
        stamp = 1_700_000_000 - age * 86400
        os.utime(cache / name / ".complete", (stamp, stamp))
    (cache / "not-a-build").mkdir()  # no .complete: not one of its builds, left alone
    result = run(bare_python, pyz, "--version", cache=cache)
    assert result.returncode == 0, result.stderr
    names = {p.name for p in builds(cache)}
    (current,) = (n for n in names if n.startswith(f"{__version__}-"))
    assert names == {current, old[0], old[1], "not-a-build"}


def test_a_stuck_unpacker_does_not_hold_the_others(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    """A run stuck while holding the cache's lock (a hung disk): the next one waits 5 s, then
    unpacks into a private folder for itself, and runs."""
    import fcntl

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    with (cache / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = run(bare_python, pyz, "--version", cache=cache)
    assert (result.returncode, result.stdout) == (0, f"clustercheck {__version__}\n"), result.stderr
    assert builds(cache) == []  # it did not write where the stuck run holds the lock


def test_unavailable_commands_name_what_to_install(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    record = run(bare_python, pyz, "record", "--out", tmp_path / "rec", cache=cache)
    assert record.returncode == 64
    assert "needs typer" in one_line(record.stderr) and "pip install clustercheck" in record.stderr
    for ssh_args in (["--ssh", "gpu[001-002]"], ["--ssh=gpu001"], ["-l", "admin"]):
        ssh = run(bare_python, pyz, "run", *ssh_args, "--profile", "prolog", cache=cache)
        assert ssh.returncode == 64 and "needs paramiko" in one_line(ssh.stderr)
    explain = run(bare_python, pyz, "explain", "gpu.count", cache=cache)
    assert explain.returncode == 64 and "needs typer" in one_line(explain.stderr)
    bad = run(bare_python, pyz, "run", "--replay", NODE, "--no-such-option", cache=cache)
    assert bad.returncode == 64 and "--no-such-option" in one_line(bad.stderr)


def test_its_commands_take_the_full_installs_options() -> None:
    """clustercheck.bare parses what the Typer application defines: a new option must come to both."""
    typer = pytest.importorskip("typer")
    from clustercheck import bare
    from clustercheck.app import app

    group = typer.main.get_command(app)
    for command, spec in bare.SPECS.items():
        params = group.commands[command].params
        typer_opts = {o for p in params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
        expected = typer_opts - set(bare.SSH_OPTIONS) if command == "run" else typer_opts
        assert set(spec) == expected, (
            f"{command}: only Typer has {expected - set(spec)}, only bare {set(spec) - expected}"
        )


def old_pythons() -> list[Path]:
    """Interpreters older than 3.10 on this machine: on PATH, or installed with pyenv."""
    candidates = [shutil.which(n) for n in ("python3.9", "python3.8", "python3.7", "python3.6", "python2.7")]
    if shutil.which("pyenv"):
        listed = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=30)
        for v in listed.stdout.split():
            if re.fullmatch(r"(2\.7|3\.[0-9])\.\d+", v):
                prefix = subprocess.run(["pyenv", "prefix", v], capture_output=True, text=True, timeout=30)
                candidates.append(str(Path(prefix.stdout.strip()) / "bin" / "python"))
    found = []
    for c in filter(None, candidates):
        probe = subprocess.run(
            [c, "-c", "import sys; print(sys.version_info[0] * 100 + sys.version_info[1])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if probe.returncode == 0 and probe.stdout.strip().isdigit() and int(probe.stdout) < 310:
            found.append(Path(c))
    return found


def other_pythons() -> list[Path]:
    """Interpreters 3.10+ besides the one running the tests: on PATH, or installed with pyenv."""
    names = [f"python3.{minor}" for minor in range(10, 16)]
    candidates = [shutil.which(n) for n in names]
    if shutil.which("pyenv"):
        listed = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=30)
        for v in listed.stdout.split():
            if re.fullmatch(r"3\.1[0-9]\.\d+", v):
                prefix = subprocess.run(["pyenv", "prefix", v], capture_output=True, text=True, timeout=30)
                candidates.append(str(Path(prefix.stdout.strip()) / "bin" / "python3"))
    found: dict[str, Path] = {}
    for c in filter(None, candidates):
        probe = subprocess.run([c, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True)
        version = probe.stdout.strip()
        if probe.returncode == 0 and version and version != sys.version.split()[0]:
            found.setdefault(version.rsplit(".", 1)[0], Path(c))
    return list(found.values())


def test_other_python_versions_run_it_with_no_site_packages(pyz: Path, tmp_path: Path) -> None:
    pythons = other_pythons()
    if not pythons:
        pytest.skip("no other Python 3.10+ here (on PATH or from pyenv)")
    for python in pythons:  # -I -S: not even that Python's own site-packages
        result = subprocess.run(
            [str(python), "-I", "-S", str(pyz), "run", "--replay", str(NODE), "--profile", str(PROFILE), "-f", "json"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env=_env(tmp_path / "cache"),
        )
        assert result.returncode == 2, (python, result.stderr)
        (host,) = json.loads(result.stdout)["hosts"].values()
        assert {c["id"]: c["status"] for c in host["checks"]}["gpu.xid"] == "fail"


def test_it_runs_through_its_shebang(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    """As slurmd or a shell runs it: `#!/usr/bin/env python3`, the first python3 on PATH."""
    path = f"{bare_python.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = {**_env(tmp_path / "cache"), "PATH": path}
    result = subprocess.run([str(pyz), "--version"], capture_output=True, text=True, timeout=120, env=env)
    assert (result.returncode, result.stdout) == (0, f"clustercheck {__version__}\n"), result.stderr


def test_it_carries_every_package_pyproject_installs(pyz: Path, tmp_path: Path) -> None:
    tomllib = pytest.importorskip("tomllib")
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    files = build_pyz.from_source(REPO)
    for package in packages:
        assert f"{package.replace('.', '/')}/__init__.py" in files, package
    assert "clustercheck/profiles/prolog.yaml" in files and "clustercheck/profile.schema.json" in files


def test_its_first_lines_parse_under_old_pythons(pyz: Path) -> None:
    """Before the version check runs, the whole file must compile: only two lines are code."""
    text = pyz.read_text(encoding="ascii")
    code = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(code) == 2 and code[0].startswith("import sys; sys.version_info >= (3, 10)")
    for minor in (7, 8, 9):  # the oldest ast can check; the real old Pythons run in the next test
        ast.parse(text, feature_version=(3, minor))


def test_an_old_python_is_told_which_python_it_needs(pyz: Path, tmp_path: Path) -> None:
    pythons = old_pythons()
    if not pythons:
        pytest.skip("no Python older than 3.10 here (on PATH or from pyenv)")
    for python in pythons:
        result = run(python, pyz, "prolog", cache=tmp_path / "cache")
        assert result.returncode == 64, (python, result.stderr)
        line = one_line(result.stderr)
        assert "needs Python 3.10 or newer" in line and re.search(r"is Python [23]\.\d+\.\d+", line), line
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("keep", [0.5, 0.999, "boot"])
def test_a_truncated_copy_says_so(pyz: Path, bare_python: Path, tmp_path: Path, keep: float | str) -> None:
    data = pyz.read_bytes()
    size = data.index(b"#|end\n") - 100 if keep == "boot" else int(len(data) * float(keep))
    cut = tmp_path / "clustercheck.pyz"
    cut.write_bytes(data[:size])  # an interrupted copy
    for args, code in (
        (["--version"], 70),
        (["run", "--replay", str(NODE)], 70),
        (["prolog", "--on-internal-error", "fail"], 70),
        (["prolog", "--syslog-socket", ""], 0),  # --on-internal-error pass (the default): a bad copy
    ):  # on a shared filesystem must not drain every node
        result = run(bare_python, cut, *args, cache=tmp_path / "cache")
        line = one_line(result.stderr)
        assert result.returncode == code, line
        assert f"{cut} is truncated" in line or f"{cut}: truncated" in line, line
        assert "copy it again" in line and result.stdout == ""
    assert not list((tmp_path / "cache").glob("*/.complete"))


def test_a_truncated_copy_says_so_even_with_its_build_unpacked(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert run(bare_python, pyz, "--version", cache=cache).returncode == 0  # unpacked by the whole file
    data = pyz.read_bytes()
    for size in (len(data) - 1, len(data) // 3):
        cut = tmp_path / "clustercheck.pyz"
        cut.write_bytes(data[:size])
        result = run(bare_python, cut, "--version", cache=cache)
        assert result.returncode == 70 and result.stdout == ""
        assert f"truncated ({size} bytes, built as {len(data)}" in one_line(result.stderr)
    padded = tmp_path / "padded.pyz"
    padded.write_bytes(data.replace(b"\n", b"\r\n", 3))  # a text-mode transfer
    assert "damaged" in one_line(run(bare_python, padded, "--version", cache=cache).stderr)


def test_a_damaged_copy_says_so(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    data = bytearray(pyz.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("A") if data[middle] != ord("A") else ord("B")  # still base64, wrong contents
    bad = tmp_path / "clustercheck.pyz"
    bad.write_bytes(bytes(data))
    result = run(bare_python, bad, "--version", cache=tmp_path / "cache")
    assert result.returncode == 70
    assert "damaged" in one_line(result.stderr) and "SHA-256" in result.stderr


def test_a_cache_others_can_write_is_refused(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)  # code imported from here would run as root
    result = run(bare_python, pyz, "--version", cache=cache)
    assert result.returncode == 70 and result.stdout == ""
    assert f"cache folder {cache}" in one_line(result.stderr) and "refusing" in result.stderr
    assert list(cache.iterdir()) == []


def test_the_build_is_reproducible(pyz: Path) -> None:
    """The same inputs give the same bytes, whatever order they are found in, and no timestamps."""
    files = {**build_pyz.from_source(REPO), **build_pyz.vendored()}
    assert build_pyz.render(files) == build_pyz.render(dict(reversed(list(files.items()))))
    assert os.access(pyz, os.X_OK) and pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def test_nccl_log_runs_without_typer_as_the_full_install_does(pyz: Path, bare_python: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    logs = REPO / "tests" / "corpus" / "nccl_logs"
    log = logs / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt"
    cases: tuple[list[str | Path], ...] = (
        ["--format", "json", log],
        ["-f=json", log],
        [log, "--expect", "ib", "--jobs", "2", "-f", "json"],
    )
    for args in cases:
        got = run(bare_python, pyz, "nccl-log", *args, cache=cache)
        full = subprocess.run(
            [sys.executable, "-m", "clustercheck", "nccl-log", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env=_env(),
        )
        if args[0] == "-f=json":  # not a plain argument (click reads the value '=json'): said, with the options
            assert got.returncode == 64 and "--format table|json" in one_line(got.stderr)
            continue
        assert (got.returncode, got.stdout) == (full.returncode, full.stdout), got.stderr
        assert json.loads(got.stdout)["link_layer"] == "roce"
    socket = logs / "issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt"
    table = run(bare_python, pyz, "nccl-log", socket, cache=cache)
    assert table.returncode in (1, 2) and "network: socket" in table.stdout, table.stderr
    missing = run(bare_python, pyz, "nccl-log", tmp_path / "no-such.log", cache=cache)
    assert missing.returncode == 64 and "no-such.log" in one_line(missing.stderr)
