"""Promise: clustercheck stays within its budget, whatever a check's own code does.

The worst case is code that never lets go of the interpreter lock: a regular expression with
catastrophic backtracking runs inside the C regex engine, so no Python thread or timer runs
until it returns (here: never). The prolog, `health` and `run --timeout` run their checks in a
child process that they kill, with everything it started, when the time is up; what the site
gets is the --on-internal-error verdict (prolog), "nothing changed" (health) or an error (run).
Each test also checks that the spinning process is gone afterwards.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.helpers import REPO

# re.match(r"(a+)+$", "a" * 40 + "!") takes about 2**40 steps in CPython's sre, holding the GIL
# (hours; before the fix a 2 s prolog budget ran on past 10 minutes). SLACK covers what the
# budget does not count: interpreter start-up and imports, seconds on a loaded shared machine.
SLACK = 4.0
SPIN_CHECK = '''
import re

from clustercheck import Host, Result, check, ok


@check(timeout=60)
def spins(host: Host) -> Result:
    """Parses a hostile line with a catastrophic regex (never returns, never releases the GIL)."""
    re.match(r"(a+)+$", "a" * 40 + "!")
    return ok("parsed")
'''
SPIN_IMPORT = 'import re\n\nre.match(r"(a+)+$", "a" * 40 + "!")\n'


def site(tmp_path: Path, code: str = SPIN_CHECK) -> tuple[Path, Path]:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text(code)
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.cpu:\n  site.spins:\n" if code is SPIN_CHECK else "checks:\n  node.cpu:\n")
    return tmp_path / "checks", profile


def clustercheck(*args: str | Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", *map(str, args)],
        capture_output=True, text=True, cwd=REPO, timeout=timeout, env=base,
    )  # fmt: skip
    return proc, time.monotonic() - start


def left_running(marker: Path) -> list[str]:
    """Processes whose command line names `marker` (the forked checker has the parent's)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(marker) in cmdline:
                found.append(f"{entry}: {cmdline}")
    return found


@pytest.mark.parametrize(("policy", "code"), [("pass", 0), ("fail", 70)])
def test_prolog_budget_holds_when_a_check_holds_the_interpreter_lock(tmp_path: Path, policy: str, code: int) -> None:
    checks, profile = site(tmp_path)
    proc, took = clustercheck(
        "prolog", "--checks", checks, "--profile", profile, "--budget", "2", "--on-internal-error", policy,
        "--state-file", tmp_path / "s.json", "--syslog-socket", "",
    )  # fmt: skip
    assert took < 2 + SLACK, f"took {took:.1f} s with a 2 s budget"
    assert proc.returncode == code, proc.stderr
    assert "the 2 s budget ran out before the checks could be judged" in proc.stderr
    state = json.loads((tmp_path / "s.json").read_text())
    assert state["verdict"] == "internal-error" and state["exit_code"] == code
    assert left_running(checks) == []


def test_prolog_budget_holds_when_a_site_module_spins_on_import(tmp_path: Path) -> None:
    checks, profile = site(tmp_path, SPIN_IMPORT)
    proc, took = clustercheck(
        "prolog", "--checks", checks, "--profile", profile, "--budget", "1.5",
        "--state-file", tmp_path / "s.json", "--syslog-socket", "",
    )  # fmt: skip
    assert took < 1.5 + SLACK and proc.returncode == 0, proc.stderr
    assert left_running(checks) == []


def test_health_budget_holds_and_nothing_is_changed(tmp_path: Path) -> None:
    checks, profile = site(tmp_path)
    calls = tmp_path / "scontrol-calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit 1\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    proc, took = clustercheck(
        "health", "--checks", checks, "--profile", profile, "--budget", "3", "--node", "n1",
        "--scontrol", scontrol, "--state-file", tmp_path / "prolog.json", "--syslog-socket", "",
    )  # fmt: skip
    assert took < 3 + SLACK, f"took {took:.1f} s with a 3 s budget"
    assert proc.returncode == 3, proc.stderr
    assert "did not finish within the 3 s budget" in proc.stderr and "nothing was changed" in proc.stderr
    assert not calls.exists()  # not even `scontrol show`
    assert left_running(checks) == []


def test_run_timeout_holds_when_a_check_holds_the_interpreter_lock(tmp_path: Path) -> None:
    checks, profile = site(tmp_path)
    proc, took = clustercheck("run", "--local", "--checks", checks, "--profile", profile, "--timeout", "2")
    limit = 2 + (2.0 + 0.05 * 2)  # --timeout plus cli.hard_stop_grace
    assert took < limit + SLACK, f"took {took:.1f} s with --timeout 2"
    assert proc.returncode == 3, proc.stderr
    assert "the run did not end within --timeout 2 s" in proc.stderr and "Traceback" not in proc.stderr
    assert left_running(checks) == []


def test_run_timeout_still_reports_what_finished(tmp_path: Path) -> None:
    # the ordinary case, a check waiting on a command: the runner's own timeout reports it
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text(
        "from clustercheck import Host, Result, check, ok\n\n\n"
        "@check(timeout=60)\ndef waits(host: Host) -> Result:\n"
        '    """Waits on a slow command."""\n'
        '    host.run("sleep", "30", timeout=60)\n'
        '    return ok("done")\n'
    )
    (tmp_path / "p.yaml").write_text("checks:\n  node.cpu:\n  site.waits:\n")
    proc, took = clustercheck(
        "run", "--local", "--checks", tmp_path / "checks", "--profile", tmp_path / "p.yaml", "--timeout", "2",
        "--format", "json",
    )  # fmt: skip
    assert took < 2 + SLACK + 1
    checks = next(iter(json.loads(proc.stdout)["hosts"].values()))["checks"]
    assert [c["status"] for c in checks] == ["ok", "error"] and "--timeout of 2 s expired" in checks[1]["summary"]
