"""The local transport and the Host API over it: real processes, real files, real timeouts."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from clustercheck import Host
from clustercheck.errors import CommandTimeout, HostError
from clustercheck.transports.local import LocalTransport


@pytest.fixture
def host() -> Host:
    return Host(LocalTransport("testnode"), command_timeout=5)


def test_run_returns_exit_code_and_both_streams(host: Host) -> None:
    result = host.run("sh", "-c", "echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "out\n", "err\n", False)
    assert host.observations == [
        "$ sh -c 'echo out; echo err >&2; exit 3'  " + f"(exit 3, {result.duration_s:.3f} s)  stderr: err"
    ]


def test_missing_command_exits_127(host: Host) -> None:
    result = host.run("no-such-command-xyz")
    assert result.exit_code == 127
    with pytest.raises(HostError, match=r"`no-such-command-xyz` exited 127 \(command not found on the node\)"):
        host.output("no-such-command-xyz")


def test_commands_run_in_the_c_locale(host: Host) -> None:
    assert host.output("sh", "-c", "echo $LC_ALL") == "C\n"


def test_timeout_kills_the_whole_process_group(host: Host) -> None:
    marker = f"clustercheck-test-{os.getpid()}"
    start = time.monotonic()
    # the child forks a grandchild that ignores SIGTERM and holds the output pipe open
    result = host.run("bash", "-c", f"(trap '' TERM; exec -a {marker} sleep 60) & exec sleep 61", timeout=1)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - start < 4
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
    assert "bash" in result.argv  # dash has no `exec -a`: the marker needs bash
    with pytest.raises(CommandTimeout):
        host.output("sleep", "5", timeout=0.5)


def test_large_output_does_not_deadlock(host: Host) -> None:
    out = host.output("sh", "-c", "head -c 12000000 /dev/zero | tr '\\0' x; head -c 3000000 /dev/zero >&2")
    assert len(out) == 12_000_000  # under the 16 MiB cap on stdout and stderr together


def test_read_files_and_absent_ones(host: Host, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("hello\n")
    assert host.read(str(tmp_path / "f")) == "hello\n"
    assert host.read("/proc/sys/kernel/osrelease").strip()
    with pytest.raises(FileNotFoundError):
        host.read(str(tmp_path / "missing"))
    assert host.read_optional(str(tmp_path / "missing")) is None
    assert f"read {tmp_path / 'missing'}: absent" in host.observations


def test_a_read_that_blocks_times_out(host: Host, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # open() blocks until a writer comes, like a read on a hung NFS mount
    start = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"did not finish within 0\.5 s"):
        host.read(str(fifo), timeout=0.5)
    assert time.monotonic() - start < 2
    with open(fifo, "w"):  # release the abandoned reader thread
        pass


def test_check_deadline_bounds_every_call(host: Host) -> None:
    host.deadline = time.monotonic() + 0.5
    result = host.run("sleep", "5")  # the command's own limit is 5 s, the check has 0.5 s left
    assert result.timed_out
    with pytest.raises(CommandTimeout, match="ran out of time before it could run sleep 1"):
        host.run("sleep", "1")


def test_facts_are_gathered_once_and_keep_their_evidence(host: Host) -> None:
    from clustercheck import fact

    calls = []

    @fact
    def kernel_release(h: Host) -> str:
        calls.append(1)
        return h.read("/proc/sys/kernel/osrelease").strip()

    first = kernel_release(host)
    host.observations = []  # the next check starts
    assert kernel_release(host) == first
    assert calls == [1]
    assert host.observations == ["read /proc/sys/kernel/osrelease (1 lines)"]
