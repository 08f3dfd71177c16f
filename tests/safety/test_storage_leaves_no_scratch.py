"""Promise: storage.read_pattern and storage.checkpoint_write leave no scratch data behind, even
when their node-side script is killed with SIGKILL, and never start a measurement that the
run's --timeout would cut short.

Real parts: the real measuring script (checks/storage.py SCRIPT) run with python3 on a real
folder of this machine, killed with a real SIGKILL; the real CLI for the run's --timeout.
How it holds: the script unlinks each data file right after creating it and reads it through
/proc/self/fd (O_DIRECT works on the reopened file), so the kernel frees the data when the
process dies, however it dies; its folder holds only a flock'd `.lock` (and, for a moment,
the small metadata files), and the next run removes folders whose lock no live process holds.
Before: a SIGKILL left up to `size` bytes (1 GiB by default) in `.clustercheck-storage-*`.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from checks import storage
from tests.helpers import cli

ARGS = {
    "mode": "read",
    "readers": 2,
    "size": 256 << 20,
    "budget_s": 30,
    "seq_block": 1 << 20,
    "meta_files": 200,
    "meta_size": 16 << 10,
    "max_ops": 100000,
    "o_direct": True,
    "margin": 0.05,
}


def scratch(folder: Path) -> list[Path]:
    return sorted(folder.glob(".clustercheck-storage-*"))


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def start_script(folder: Path, **overrides: object) -> subprocess.Popen[str]:
    args = {**ARGS, "path": str(folder), **overrides}
    return subprocess.Popen(
        [sys.executable, "-c", storage.SCRIPT, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_scratch(folder: Path, proc: subprocess.Popen[str]) -> Path:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        found = scratch(folder)
        if found and (found[0] / ".lock").exists():
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"the script made no scratch folder (exit {proc.poll()})")


def run_check(tmp_path: Path, params: dict[str, object], *options: str) -> dict[str, Any]:
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"checks": {"storage.read_pattern": params}}))
    proc = cli("run", "--local", "--profile", str(profile), "--format", "json", *options, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    check: dict[str, Any]
    (check,) = host["checks"]
    return check


def test_sigkill_of_the_script_leaves_no_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    proc = start_script(data)
    folder = wait_for_scratch(data, proc)
    time.sleep(1.5)  # writing its 256 MiB (the first 35% of the budget), or reading them
    assert proc.poll() is None, "the measurement ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # the kernel dropped the unlinked data files with the process: only the lock file remains
    assert files_in(folder) == [".lock"], files_in(folder)


def test_the_next_run_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    proc = start_script(data)
    folder = wait_for_scratch(data, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    (folder / "meta").mkdir()  # as a kill during the metadata phase leaves it
    (folder / "meta" / "s00000").write_bytes(b"x" * 16384)
    old = time.time() - 120  # killed two minutes ago
    os.utime(folder, (old, old))
    check = run_check(tmp_path, {"path": str(data), "size": "32MiB", "budget": 3, "meta_files": 50, "readers": 2})
    assert any(f"left by a killed earlier run ({folder})" in e for e in check["evidence"]), check
    assert scratch(data) == []


def test_a_live_runs_folder_is_never_removed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    live = data / ".clustercheck-storage-live"
    live.mkdir(parents=True)
    (live / "f000").write_bytes(b"y" * 4096)
    fd = os.open(live / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # its run is alive
        old = time.time() - 3600
        os.utime(live, (old, old))
        check = run_check(tmp_path, {"path": str(data), "size": "32MiB", "budget": 3, "meta_files": 50, "readers": 2})
        assert "killed earlier run" not in " ".join(check["evidence"])
        assert files_in(live) == [".lock", "f000"]
    finally:
        os.close(fd)


def test_a_budget_longer_than_the_runs_timeout_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    params = {"path": str(data), "size": "32MiB", "budget": 10, "meta_files": 50, "readers": 2}
    start = time.monotonic()
    check = run_check(tmp_path, params, "--timeout", "8")
    assert time.monotonic() - start < 20
    assert check["status"] == "error", check
    summary = str(check["summary"])
    assert summary.startswith("not measured: budget 10 s + 20 s to clean up does not fit"), summary
    assert "the run's --timeout" in summary
    assert scratch(data) == []
