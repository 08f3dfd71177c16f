"""Promise: an answer that is empty because the node did not let clustercheck look is "cannot
tell" (error, naming the source and how to grant access), never a pass or a skip.

`nccl.log` as an unprivileged user (setpriv to nobody; the real CLI, sh, ls and grep): a log
folder it may not list looked like a node without job logs (skip), and a log it may not read
looked like a log without NCCL lines (skip). A site that runs `clustercheck health` as a
service user would have been told nothing was wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import REPO

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
LOG = (
    "h1:100:100 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
    "h1:100:100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
    "h1:100:100 [0] NCCL INFO Using network Socket\n"
    "h1:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
)


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder nobody can read (pytest's tmp_path is root's alone)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the check as another user")
    probe = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", "import clustercheck"],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:  # e.g. a checkout under a 0700 folder: nobody cannot import clustercheck at all
        pytest.skip(f"user nobody cannot run clustercheck from this checkout ({REPO}): {probe.stderr.strip()[-200:]}")
    folder = Path(tempfile.mkdtemp(prefix="cc-denied-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_as_nobody(world: Path, paths: list[str]) -> dict[str, Any]:
    return run_check_as_nobody(world, "nccl.log", {"paths": paths})


def run_check_as_nobody(world: Path, check_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """The check's result, run by the CLI as the unprivileged user `nobody`."""
    profile = world / f"{check_id}.yaml"
    profile.write_text(json.dumps({"name": "t", "description": "t", "checks": {check_id: params}}))
    profile.chmod(0o644)
    proc = subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "clustercheck", "run", "--local", "--profile", str(profile), "-f", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(world), "NO_COLOR": "1"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    check: dict[str, Any]
    (check,) = host["checks"]
    return check


def test_a_log_folder_it_may_not_list_is_cannot_tell(world: Path) -> None:
    jobs = world / "jobs"
    jobs.mkdir(mode=0o700)  # root's: the logs are there, nobody cannot see them
    (jobs / "slurm-1.out").write_text(LOG)
    check = run_as_nobody(world, [f"{jobs}/*.out"])
    assert check["status"] == "error", check  # before: skip "no job logs match ..."
    assert check["summary"].startswith(f"cannot tell: {jobs} cannot be listed by this user (permission denied)")
    assert "run the check as a user who can read the job logs" in check["summary"]


def test_a_log_it_may_not_read_is_cannot_tell(world: Path) -> None:
    jobs = world / "jobs"
    jobs.mkdir(mode=0o755)
    log = jobs / "slurm-2.out"
    log.write_text(LOG)
    log.chmod(0o600)  # listed, not readable
    check = run_as_nobody(world, [f"{jobs}/*.out"])
    assert check["status"] == "error", check  # before: skip "... without NCCL lines"
    assert check["summary"].startswith(f"cannot tell: {log} cannot be read by this user (permission denied)")


def test_the_same_logs_readable_are_judged(world: Path) -> None:
    jobs = world / "jobs"
    jobs.mkdir(mode=0o755)
    log = jobs / "slurm-3.out"
    log.write_text(LOG)
    log.chmod(0o644)
    check = run_as_nobody(world, [f"{jobs}/*.out"])
    assert check["status"] == "fail", check  # the TCP fallback the log shows
    assert str(log) in check["summary"]


def test_an_empty_log_folder_is_still_a_skip(world: Path) -> None:
    jobs = world / "jobs"
    jobs.mkdir(mode=0o755)  # listable and empty: no job ran here, truly nothing to judge
    check = run_as_nobody(world, [f"{jobs}/*.out"])
    assert check["status"] == "skip", check
    assert check["summary"].startswith("no job logs match")


def run_dataset_as_nobody(world: Path, dataset: Path) -> dict[str, Any]:
    params = {"path": str(dataset), "dataset": True, "budget": 3, "readers": 2, "meta_files": 20}
    return run_check_as_nobody(world, "storage.read_pattern", params)


def test_a_dataset_folder_it_may_not_list_is_named(world: Path) -> None:
    dataset = world / "dataset"
    (dataset / "open").mkdir(parents=True)
    (dataset / "closed").mkdir(mode=0o700)  # root's shards: not read, and the evidence says so
    for folder in ("open", "closed"):
        (dataset / folder / "shard-0.tar").write_bytes(os.urandom(8 << 20))
    (dataset / "open" / "shard-0.tar").chmod(0o644)
    dataset.chmod(0o755)
    (dataset / "open").chmod(0o755)
    check = run_dataset_as_nobody(world, dataset)
    said = " ".join(check["evidence"])
    assert f"1 folders this user may not list were not read ({dataset / 'closed'})" in said, check
    (dataset / "open" / "shard-0.tar").unlink()  # now every large file is out of reach
    check = run_dataset_as_nobody(world, dataset)
    assert check["status"] == "error", check
    assert "that this user may read (permission denied:" in check["summary"], check
