"""Promise: `clustercheck prolog` never drains a healthy node for clustercheck's own faults.

Only a failed check makes the prolog exit non-zero (Slurm then drains the node). A mistake on
the Prolog= line, a closed or broken stdout, a state file it cannot write, a crash: each follows
--on-internal-error (default pass), is said on stderr and in syslog naming the cause, and leaves
a real failing check's verdict as it was. Each case runs the real CLI as slurmd would, with a
socket standing in for /dev/log; the last one is slurmd itself with a typo on its Prolog= line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import FIXTURES, REPO
from tests.slurm_cluster import SlurmCluster, SyslogSink

CLUSTER = FIXTURES / "prolog-cluster"
HEALTHY = CLUSTER / "healthy"
DIMM_LOST = CLUSTER / "dimm-lost"
JOB = {"SLURMD_NODENAME": "gpu101", "SLURM_JOB_ID": "77", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}


def prolog(
    *args: str | Path, sink: SyslogSink, shell: str = "", stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    """`clustercheck prolog ARGS` as slurmd starts it; `shell` redirections apply (e.g. `>&-`)."""
    argv = [sys.executable, "-m", "clustercheck", "prolog", *map(str, args), "--syslog-socket", str(sink.path)]
    if shell:
        argv = ["sh", "-c", f'exec "$@" {shell}', "sh", *argv]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_"))}
    return subprocess.run(
        argv, stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=60, env={**base, **JOB}
    )


@pytest.mark.parametrize(
    ("args", "cause"),
    [
        (["--no-such-option"], "unknown option '--no-such-option'"),
        (["--budget"], "--budget needs a value"),
        (["--budget", "soon"], "--budget 'soon' is not a number of seconds from 0.1 on"),
        (["--on-internal-error", "maybe"], "--on-internal-error 'maybe' is not pass or fail"),
        (["stray-word"], "unexpected argument 'stray-word'"),
    ],
)
def test_a_mistake_on_the_prolog_line_passes_the_node_and_says_why(
    tmp_path: Path, sink: SyslogSink, args: list[str], cause: str
) -> None:
    proc = prolog("--replay", HEALTHY, "--state-file", tmp_path / "s.json", *args, sink=sink)
    assert proc.returncode == 0, proc.stderr
    assert f"INTERNAL ERROR, could not judge the node: bad command line: {cause}" in proc.stderr
    assert "passing the node (--on-internal-error pass)" in proc.stderr and "Traceback" not in proc.stderr
    (line,) = sink.read()
    assert line.startswith("<27>") and cause in line  # daemon.err
    assert json.loads((tmp_path / "s.json").read_text())["verdict"] == "internal-error"


def test_a_mistake_with_policy_fail_fails_the_node_as_asked(tmp_path: Path, sink: SyslogSink) -> None:
    args = ("--replay", HEALTHY, "--on-internal-error", "fail", "--bogus", "--state-file", tmp_path / "s.json")
    proc = prolog(*args, sink=sink)
    assert proc.returncode == 64 and "unknown option '--bogus'" in proc.stderr
    state = json.loads((tmp_path / "s.json").read_text())
    assert state["reason"] == "clustercheck: internal error: bad command line: unknown option '--bogus'"


@pytest.mark.parametrize(("fixture", "code"), [(HEALTHY, 0), (DIMM_LOST, 2)])
def test_a_closed_stdout_changes_no_verdict(tmp_path: Path, sink: SyslogSink, fixture: Path, code: int) -> None:
    # `Prolog=/usr/bin/clustercheck prolog >&-`: fd 1 closed, and the next file opened would be fd 1
    proc = prolog("--replay", fixture, "--state-file", tmp_path / "s.json", sink=sink, shell=">&-", stdout=None)
    assert proc.returncode == code, proc.stderr
    state = json.loads((tmp_path / "s.json").read_text())  # the verdict, not a report printed into it
    assert state["exit_code"] == code and state["verdict"] == ("pass" if code == 0 else "fail")
    assert len(sink.read()) == 1


def test_closed_stdout_and_stderr_change_no_verdict(tmp_path: Path, sink: SyslogSink) -> None:
    proc = prolog("--replay", DIMM_LOST, "--state-file", tmp_path / "s.json", sink=sink, shell=">&- 2>&-")
    assert proc.returncode == 2
    assert json.loads((tmp_path / "s.json").read_text())["verdict"] == "fail"


@pytest.mark.parametrize(("fixture", "code"), [(HEALTHY, 0), (DIMM_LOST, 2)])
def test_a_broken_pipe_on_stdout_changes_no_verdict(tmp_path: Path, sink: SyslogSink, fixture: Path, code: int) -> None:
    argv = [sys.executable, "-m", "clustercheck", "prolog", "--replay", str(fixture)]
    argv += ["--state-file", str(tmp_path / "s.json"), "--syslog-socket", str(sink.path)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, **JOB}
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the prolog writes its verdict
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "the verdict could not be written to stdout (Broken pipe)" in err and "Traceback" not in err
    assert any("could not be written to stdout" in line for line in sink.read())
    assert json.loads((tmp_path / "s.json").read_text())["exit_code"] == code


@pytest.mark.parametrize(("fixture", "code"), [(HEALTHY, 0), (DIMM_LOST, 2)])
def test_a_state_file_that_names_no_file_changes_no_verdict(sink: SyslogSink, fixture: Path, code: int) -> None:
    proc = prolog("--replay", fixture, "--state-file", "/", sink=sink)
    assert proc.returncode == code, proc.stderr
    assert "--state-file '/' names no file" in proc.stderr
    (line,) = sink.read()
    assert "--state-file '/' names no file" in line


def test_an_empty_state_file_means_none(tmp_path: Path, sink: SyslogSink) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "prolog", "--replay", str(HEALTHY), "--state-file", ""],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "state: none written" in proc.stdout and list(tmp_path.iterdir()) == []


def test_a_crash_while_judging_passes_the_node_and_says_why(tmp_path: Path, sink: SyslogSink) -> None:
    crash = (
        "import sys\n"
        "from clustercheck.slurm import prolog_mode\n"  # where the prolog looks drain_reason up
        "from clustercheck.main import main\n"
        "def broken(*a, **k):\n"
        "    raise RuntimeError('a bug in clustercheck, after the checks')\n"
        "prolog_mode.drain_reason = broken\n"
        "main(sys.argv[1:])\n"
    )
    argv = [sys.executable, "-c", crash, "prolog", "--replay", str(DIMM_LOST), "--state-file", str(tmp_path / "s")]
    proc = subprocess.run(
        [*argv, "--syslog-socket", str(sink.path)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0
    assert (
        "INTERNAL ERROR, could not judge the node: RuntimeError: a bug in clustercheck, after the checks" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    (line,) = sink.read()
    assert line.startswith("<27>") and "RuntimeError" in line


def test_slurmd_with_a_typo_on_its_prolog_line_still_runs_jobs(safety_slurm: SlurmCluster) -> None:
    script = safety_slurm.root / "prolog.sh"
    good = script.read_text()
    typo = good.replace("--budget 8", "--budget 8 --on-internal-eror fail")  # sic: the option is misspelt
    assert typo != good
    script.write_text(typo)
    try:
        proc = safety_slurm.run("srun", "-w", "s1", "-N1", "true", timeout=60)
        assert proc.returncode == 0, proc.stderr + safety_slurm.logs()
        assert "DRAIN" not in safety_slurm.state("s1")
        state = safety_slurm.prolog_state("s1")
        assert state["verdict"] == "internal-error" and state["exit_code"] == 0
        assert "unknown option '--on-internal-eror'" in state["error"]
        assert any("--on-internal-eror" in line for line in safety_slurm.syslog.read())  # type: ignore[union-attr]
    finally:
        script.write_text(good)
