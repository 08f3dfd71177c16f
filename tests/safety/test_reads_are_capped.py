"""Promise: a node cannot make clustercheck hold unbounded memory, and a cut input is an
error that names it, never a silently truncated text a check then judges as complete.

Caps (host.py): 16 MiB per command output (stdout and stderr together) or file read,
64 MiB per host per run; CLUSTERCHECK_MAX_OUTPUT and CLUSTERCHECK_MAX_HOST_OUTPUT change
them. Every test runs the real CLI under an address-space limit (so a regression fails
with MemoryError instead of eating the machine) and measures its peak memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers import REPO
from tests.sshd import SSHServer

AS_LIMIT = 3 * 1024**3  # bytes of address space the CLI may map (threads' stacks included)


def site(tmp_path: Path, body: str) -> tuple[Path, Path]:
    folder = tmp_path / "checks"
    folder.mkdir(parents=True)
    (folder / "site.py").write_text(
        "from clustercheck import Host, Result, check, ok\n\n\n"
        "@check(timeout=60)\ndef work(host: Host) -> Result:\n"
        '    """Reads what the node gives."""\n'
        + "".join(f"    {line}\n" for line in body.splitlines())
        + '    return ok("judged " + str(len(text)) + " characters")\n'
    )
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  site.work:\n")
    return folder, profile


# Runs the CLI under an address-space limit and reports its peak RSS (that of the CLI or of any
# process it waited for, e.g. the child a --timeout run forks) on its last stderr line.
_MEASURE = """
import resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
proc = subprocess.run(sys.argv[2:], capture_output=True)
sys.stdout.buffer.write(proc.stdout)
sys.stderr.buffer.write(proc.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
"""


def run(*args: str | Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], float, float, str]:
    """`clustercheck run ARGS -f json` -> (the one check's result, seconds, peak RSS in MiB, stderr)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(AS_LIMIT), sys.executable, "-m", "clustercheck", "run",
         *map(str, args), "-f", "json"],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - start
    *err, peak_kib = proc.stderr.splitlines()
    hosts = json.loads(proc.stdout)["hosts"]
    (check,) = next(iter(hosts.values()))["checks"]
    return check, took, int(peak_kib) / 1024, "\n".join(err)


def test_a_local_command_that_prints_500_mb_is_cut_and_named(tmp_path: Path) -> None:
    checks, profile = site(tmp_path, 'text = host.output("head", "-c", "500000000", "/dev/zero")')
    check, took, peak, err = run("--local", "--checks", checks, "-p", profile)
    assert check["status"] == "error", check
    assert "`head -c 500000000 /dev/zero` printed more than 16 MiB" in check["summary"]
    assert "CLUSTERCHECK_MAX_OUTPUT" in check["summary"] and "Traceback" not in err
    assert peak < 200, f"peak memory {peak:.0f} MiB"
    assert took < 20


def test_a_local_command_that_prints_forever_is_stopped(tmp_path: Path) -> None:
    checks, profile = site(tmp_path, 'text = host.run("yes", "the same line").stdout')
    check, took, peak, _ = run("--local", "--checks", checks, "-p", profile, env={"CLUSTERCHECK_MAX_OUTPUT": "4M"})
    assert check["status"] == "error" and "`yes 'the same line'` printed more than 4 MiB" in check["summary"]
    assert took < 10 and peak < 200


def test_a_file_larger_than_the_cap_is_not_judged(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    with big.open("wb") as f:
        f.truncate(40 * 1024 * 1024)  # sparse: 40 MiB of zeros
    for path in (big, Path("/dev/zero")):  # a device that never ends
        checks, profile = site(tmp_path / f"for-{path.name}", f"text = host.read({str(path)!r})")
        check, took, peak, _ = run("--local", "--checks", checks, "-p", profile)
        assert check["status"] == "error" and f"{path} is larger than 16 MiB" in check["summary"], check
        assert took < 20 and peak < 200


def test_each_host_has_a_cap_for_the_whole_run(tmp_path: Path) -> None:
    body = "text = ''\nfor _ in range(6):\n    text += host.output('head', '-c', '1000000', '/dev/zero')"
    checks, profile = site(tmp_path, body)
    check, _, _, _ = run("--local", "--checks", checks, "-p", profile, env={"CLUSTERCHECK_MAX_HOST_OUTPUT": "3M"})
    assert check["status"] == "error"
    assert "sent more than 3 MiB in this run (clustercheck's cap per host" in check["summary"], check


def test_a_bad_cap_setting_is_named(tmp_path: Path) -> None:
    checks, profile = site(tmp_path, 'text = host.output("true")')
    check, _, _, _ = run("--local", "--checks", checks, "-p", profile, env={"CLUSTERCHECK_MAX_OUTPUT": "lots"})
    assert check["status"] == "error" and "CLUSTERCHECK_MAX_OUTPUT='lots' is not a size" in check["summary"]


def test_a_500_mb_answer_over_ssh_is_cut_and_named(tmp_path: Path, sshd: SSHServer) -> None:
    checks, profile = site(tmp_path, 'text = host.output("head", "-c", "500000000", "/dev/zero")')
    ssh = ("--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config))
    check, took, peak, err = run(*ssh, "--checks", checks, "-p", profile)
    assert check["status"] == "error", check
    assert "`head -c 500000000 /dev/zero` printed more than 16 MiB" in check["summary"] and "Traceback" not in err
    assert peak < 250, f"peak memory {peak:.0f} MiB"  # was 1.08 GB
    assert took < 20
    # a file is read with `cat` over SSH: the same cap, naming the command
    checks, profile = site(tmp_path / "file", "text = host.read('/dev/zero')")
    check, _, peak, _ = run(*ssh, "--checks", checks, "-p", profile)
    assert check["status"] == "error" and "`cat -- /dev/zero` printed more than 16 MiB" in check["summary"]
    assert peak < 250
