"""Promise: replaying a fixture reads only the fixture's own plain files, and always ends.

Fixtures are folders people send each other. A link in one must not show the replaying
machine's files in the report, a FIFO must not hang replay (it did, before --timeout began),
a huge or endless file must be an error naming it and the cap, never a MemoryError, and a
node path with `..` must not climb out of files/. Each test replays through the CLI a fixture
recorded on this real machine, then damaged the way a hostile sender would.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from tests.helpers import FIXTURES, cli

MARKER = "MARKER-outside-the-fixture-7f3a"
PROFILE = "checks:\n  node.kernel:\n  node.memory: {min_total: 1MiB}\n"


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    out = tmp_path / "fx"
    proc = cli("record", "--profile", profile, "--local", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def _replay(fixture: Path, *args: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    proc = cli("run", "--replay", fixture, "--format", "json", *args, timeout=60)
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr + proc.stdout
    checks = {}
    if proc.stdout.strip():
        (host,) = json.loads(proc.stdout)["hosts"].values()
        checks = {c["id"]: (c["status"], c["summary"]) for c in host["checks"]}
    return proc.returncode, checks, proc.stdout + proc.stderr


def test_a_file_that_is_a_link_out_of_the_fixture_is_not_followed(recorded: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text(MARKER + "\n")
    osrelease = recorded / "files/proc/sys/kernel/osrelease"
    osrelease.unlink()
    osrelease.symlink_to(outside)
    code, checks, text = _replay(recorded)
    assert MARKER not in text
    status, summary = checks["node.kernel"]
    assert status == "error"
    assert f"{osrelease}: a symbolic link" in summary
    assert checks["node.memory"][0] == "ok"  # the rest of the fixture still replays
    assert code == 3


def test_a_folder_that_is_a_link_out_of_the_fixture_is_not_followed(recorded: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(recorded / "files/proc", elsewhere)
    (elsewhere / "sys/kernel/osrelease").write_text(MARKER + "\n")
    shutil.rmtree(recorded / "files/proc")
    (recorded / "files/proc").symlink_to(elsewhere)
    code, checks, text = _replay(recorded)
    assert MARKER not in text
    assert code == 3 and all(status == "error" for status, _ in checks.values())
    assert f"{recorded / 'files/proc'}: a symbolic link" in checks["node.kernel"][1]


def test_a_link_to_dev_zero_is_refused_not_read(recorded: Path) -> None:
    meminfo = recorded / "files/proc/meminfo"
    meminfo.unlink()
    meminfo.symlink_to("/dev/zero")
    _, checks, _ = _replay(recorded)
    assert checks["node.memory"][0] == "error"
    assert f"{meminfo}: a symbolic link" in checks["node.memory"][1]


def test_a_fifo_in_the_fixture_does_not_hang_replay(recorded: Path) -> None:
    meminfo = recorded / "files/proc/meminfo"
    meminfo.unlink()
    os.mkfifo(meminfo)  # nobody ever writes: opening it for reading would block forever
    _, checks, _ = _replay(recorded)  # cli() raises TimeoutExpired after 60 s if it hangs
    status, summary = checks["node.memory"]
    assert status == "error"
    assert f"{meminfo}: a FIFO, not a regular file" in summary


def test_a_fifo_as_a_commands_stdout_does_not_hang_replay(tmp_path: Path) -> None:
    fixture = tmp_path / "fx"
    shutil.copytree(FIXTURES / "demo-cluster" / "gpu001", fixture)
    (stdout,) = [p for p in fixture.glob("commands/*/stdout") if "ps_-e" in str(p)]
    stdout.unlink()
    os.mkfifo(stdout)
    _, checks, _ = _replay(fixture, "--profile", str(FIXTURES / "demo-cluster" / "site-profile.yaml"))
    status, summary = checks["node.services"]
    assert status == "error"
    assert f"{stdout}: a FIFO, not a regular file" in summary


def test_a_fifo_as_the_manifest_is_bad_input(recorded: Path) -> None:
    manifest = recorded / "fixture.yaml"
    manifest.unlink()
    os.mkfifo(manifest)
    code, _, text = _replay(recorded, "--profile", "base")
    assert code == 64
    assert f"{manifest}: a FIFO, not a regular file" in text


def test_a_file_over_the_cap_is_an_error_naming_it_and_the_cap(recorded: Path) -> None:
    meminfo = recorded / "files/proc/meminfo"
    with meminfo.open("r+b") as f:
        f.truncate(64 * 1024 * 1024 + 1)  # sparse: one byte over the cap
    _, checks, _ = _replay(recorded)
    status, summary = checks["node.memory"]
    assert status == "error"
    assert f"{meminfo}: 67108865 bytes or more, over the 64 MiB a fixture file may hold" in summary


def test_a_sparse_terabyte_manifest_is_bad_input_not_memory_error(recorded: Path) -> None:
    manifest = recorded / "fixture.yaml"
    with manifest.open("r+b") as f:
        f.truncate(1 << 40)
    code, _, text = _replay(recorded, "--profile", "base")
    assert code == 64
    assert f"{manifest}: {1 << 40} bytes or more, over the 64 MiB" in text


def test_a_node_path_with_dotdot_does_not_climb_out_of_files(tmp_path: Path) -> None:
    """A recorded slurm.conf whose Include climbs: replay must not read beside the fixture."""
    fixture = tmp_path / "cluster" / "node"
    shutil.copytree(FIXTURES / "slurm-abacus" / "abacusc-0-0", fixture)
    conf = fixture / "files/etc/slurm/slurm.conf"
    conf.write_text(conf.read_text() + "Include ../../../../secrets/slurm.conf\n")
    # /etc/slurm/../../../../secrets under files/ is cluster/secrets, beside the fixture
    planted = tmp_path / "cluster" / "secrets"
    planted.mkdir()
    (planted / "slurm.conf").write_text(f"NodeName={MARKER} CPUs=1\n")
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  slurm.topology:\n")
    _, checks, text = _replay(fixture, "--profile", str(profile))
    assert MARKER not in text
    status, summary = checks["slurm.topology"]
    assert status == "error"
    assert "/etc/slurm/../../../../secrets/slurm.conf (it climbs with `..`" in summary


def test_a_fixture_folder_linked_into_a_cluster_folder_is_refused(recorded: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    (cluster / "node").symlink_to(recorded)
    code, _, text = _replay(cluster, "--profile", "base")
    assert code == 64
    assert f"{cluster / 'node'}: a symbolic link to a fixture" in text
