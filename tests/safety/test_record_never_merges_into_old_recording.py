"""Promise: a recording is whole or absent; it never merges into an older one.

An older recording's `commands/` left in --out let a replay pass checks the new manifest
never names. `record` now records into a new folder beside --out and renames it into place:
a non-empty --out is refused unless --force (which replaces it whole), and an interrupted
recording leaves --out as it was.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from tests.helpers import REPO, cli

PROFILE = "checks:\n  node.kernel:\n  node.memory: {min_total: 1MiB}\n"


def _old_recording(tmp_path: Path) -> tuple[Path, Path]:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    out = tmp_path / "out"
    first = cli("record", "--profile", profile, "--local", "--out", out, "--note", "the old one")
    assert first.returncode == 0, first.stderr
    stale = out / "commands" / "stale"  # what an older profile recorded
    stale.mkdir(parents=True)
    (stale / "command.yaml").write_text("argv: [stale]\nexit_code: 0\n")
    (stale / "stdout").write_text("old\n")
    return profile, out


def test_a_non_empty_out_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    profile, out = _old_recording(tmp_path)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = cli("record", "--profile", profile, "--local", "--out", out)
    assert proc.returncode == 64
    assert proc.stderr.strip() == (
        f"clustercheck: error: --out {out}: the folder is not empty (an older recording?); "
        "record into a new folder, or pass --force to replace it whole"
    )
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_force_replaces_the_old_recording_whole(tmp_path: Path) -> None:
    profile, out = _old_recording(tmp_path)
    proc = cli("record", "--profile", profile, "--local", "--out", out, "--force", "--note", "the new one")
    assert proc.returncode == 0, proc.stderr
    assert not (out / "commands" / "stale").exists()
    assert yaml.safe_load((out / "fixture.yaml").read_text())["note"] == "the new one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "p.yaml"]  # no temporary folder left


def test_an_empty_out_and_a_new_out_are_recorded_into(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        proc = cli("record", "--profile", profile, "--local", "--out", out)
        assert proc.returncode == 0, proc.stderr
        assert (out / "fixture.yaml").is_file()
        assert oct((out).stat().st_mode & 0o777) != oct(0o700)  # not mkdtemp's private mode


def test_an_interrupted_recording_leaves_out_as_it_was(tmp_path: Path) -> None:
    profile, out = _old_recording(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "slowcheck.py").write_text(
        "import time\n"
        "from clustercheck import Host, Result, check, ok\n"
        "@check(timeout=60)\n"
        "def wait(host: Host) -> Result:\n"
        "    '''Reads a file, then takes its time.'''\n"
        "    host.read('/proc/meminfo')\n"
        "    time.sleep(3)\n"
        "    return ok('done')\n"
    )
    profile.write_text(f"check_dirs: [{site}]\nchecks:\n  slowcheck.wait:\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", "record", "-p", str(profile), "--local", "--out", str(out), "--force"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".out.*.recording/files/proc/meminfo")):
        assert proc.poll() is None and time.monotonic() < deadline, "the recording never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "p.yaml", "site"]
