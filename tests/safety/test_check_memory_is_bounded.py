"""Promise: what a node's job log holds cannot make the `nccl.log` check hold memory in proportion
to it, and a line it had to cut makes the check say so (error naming FILE:LINE), never a verdict
on a silently shortened line.

The check runs through the real CLI on this machine (the real sh, grep, cut and awk), with the
transports' own output caps lifted (CLUSTERCHECK_MAX_OUTPUT) so that only the check's bound is
measured. Before: the grep script sent every matching line back whole, and the check held
several copies (a 200 MB one-line log took the client to 1.5 GB, and the old check even passed
it, naming a network of 200 MB); now each line crosses cut at MAX_LINE bytes and marked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from checks import nccl
from tests.helpers import REPO, cli

# Peak RSS of the CLI process itself (children, such as grep, excluded) printed on exit.
# The peak of this process's own memory: VmHWM, which execve() starts afresh. getrusage's
# ru_maxrss would carry the forking parent's peak into the child (a pytest process grown by an
# earlier test read as the CLI's 254 MB).
RSS = (
    "import atexit, runpy, sys\n"
    "peak = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1])\n"
    "atexit.register(lambda: sys.stderr.write('MAXRSS_KB %d\\n' % peak()))\n"
    "sys.argv = ['clustercheck', *sys.argv[1:]]\n"
    "runpy.run_module('clustercheck', run_name='__main__')\n"
)
UNCAPPED = {"CLUSTERCHECK_MAX_OUTPUT": "4G", "CLUSTERCHECK_MAX_HOST_OUTPUT": "8G"}


def run_log_check(tmp_path: Path, logs: str) -> tuple[dict[str, Any], int]:
    profile = tmp_path / "profile.yaml"
    profile.write_text(json.dumps({"name": "t", "description": "t", "checks": {"nccl.log": {"paths": [logs]}}}))
    proc = subprocess.run(
        [sys.executable, "-c", RSS, "run", "--local", "--profile", str(profile), "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **UNCAPPED, "NO_COLOR": "1"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    rss = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("MAXRSS_KB"))
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (result,) = host["checks"]
    return result, rss


def test_many_long_nccl_lines_do_not_grow_the_client(tmp_path: Path) -> None:
    # 1500 distinct WARN lines of 40 KB (60 MB): every one is a line the check asks for.
    log = tmp_path / "slurm-1.out"
    with log.open("w") as f:
        f.write("h1:100:100 [0] NCCL INFO Using network IB\n")
        for i in range(1500):
            f.write(f"h1:100:100 [0] NCCL WARN transport {i} " + "x" * 40_000 + "\n")
    result, rss_kb = run_log_check(tmp_path, str(log))
    assert result["status"] == "error", result
    assert f"{log}:2 is an NCCL line longer than {nccl.MAX_LINE} bytes" in result["summary"]
    assert "1500 such lines" in result["summary"]
    # the CLI alone is ~60 MB; the old check held the 60 MB answer several times over (>250 MB)
    assert rss_kb < 150 * 1024, f"client peak RSS {rss_kb // 1024} MB"


def test_a_cut_line_is_an_error_naming_it(tmp_path: Path) -> None:
    log = tmp_path / "slurm-2.out"
    long_line = "h1:100:100 [0] NCCL INFO Using network IB " + "y" * 10_000
    log.write_text("h1:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + long_line + "\n")
    result, _ = run_log_check(tmp_path, str(log))
    assert result["status"] == "error", result
    assert result["summary"].startswith(f"cannot tell: {log}:2 is an NCCL line longer than 4096 bytes")
    assert "yyyy" not in result["summary"]  # the old check named a network of 10 KB of y


def test_a_failure_stands_beside_a_cut_line(tmp_path: Path) -> None:
    # A TCP fallback read in full is a failure whatever a cut line hides; the cut line is named.
    log = tmp_path / "slurm-3.out"
    log.write_text(
        "h1:100:100 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
        "h1:100:100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "h1:100:100 [0] NCCL INFO Using network Socket\n"
        "h1:100:100 [0] NCCL WARN " + "z" * 9000 + "\n"
        "h1:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    result, _ = run_log_check(tmp_path, str(log))
    assert result["status"] == "fail", result
    assert any(f"{log}: line 4 longer than 4096 bytes" in e for e in result["evidence"]), result["evidence"]


def test_lines_within_the_cap_cross_unchanged(tmp_path: Path) -> None:
    # The script's cap changes nothing below it: the same answer as the analyzer on the whole file.
    line = "h1:100:100 [0] NCCL WARN " + "w" * (nccl.MAX_LINE - 40)
    log = tmp_path / "slurm-4.out"
    log.write_text(line + "\n")
    proc = subprocess.run(
        ["sh", "-c", nccl._GREP_SCRIPT, "sh", str(log), "NCCL (WARN)"], capture_output=True, text=True, timeout=60
    )
    rare = nccl.parse_sections(proc.stdout)["rare"]
    assert rare == [f"1:{line}"]


def test_commands_refuse_endless_and_blocking_inputs(tmp_path: Path) -> None:
    """`topology` read /dev/zero until memory ran out and hung on a FIFO; `nccl-log` read
    /dev/zero forever (in constant memory) and hung on a FIFO too. A regular file is required."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (("topology", "--conf"), ("topology", "--ibnetdiscover"), ("nccl-log",)):
        for path in ("/dev/zero", str(fifo)):
            proc = cli(*args, path, timeout=30)
            assert proc.returncode == 64, (args, path, proc.stderr)
            assert f"{path}: not a regular file" in proc.stderr


def test_topology_refuses_a_runaway_file(tmp_path: Path) -> None:
    big = tmp_path / "topology.conf"
    with big.open("wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: no disk used
    proc = cli("topology", "--conf", big, timeout=60)
    assert proc.returncode == 64 and "larger than 64 MiB" in proc.stderr, proc.stderr
