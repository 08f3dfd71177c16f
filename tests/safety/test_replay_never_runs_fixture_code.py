"""Promise: replaying a fixture never runs Python that came with it.

A fixture names its profile, and a profile's `check_dirs:` are imported: `run`, `prolog` and
`health --replay DIR` without `--profile` imported, as root, whatever site checks the
fixture's sender put beside it. A profile taken from a fixture now loads no code: its
`check_dirs:`, and an `extends:` of anything but a bundled profile, are refused naming the
line, unless the user chooses the profile (`--profile`) or opts in (`--trust-fixture-code`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.helpers import DEMO, cli


@pytest.fixture
def sent(tmp_path: Path) -> tuple[Path, Path]:
    """A recorded node as someone sends it: its profile beside it, with a site check folder."""
    cluster = tmp_path / "cluster"
    node = cluster / "node"
    shutil.copytree(DEMO / "gpu001", node)
    marker = tmp_path / "IMPORTED"
    (cluster / "evil").mkdir()
    (cluster / "evil" / "evil_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (cluster / "evil-profile.yaml").write_text(
        "name: evil\nextends: gpu-node\ncheck_dirs: [evil]\nchecks:\n  node.cpu: {expected: 2}\n"
    )
    manifest = node / "fixture.yaml"
    manifest.write_text(manifest.read_text().replace("profile: ../site-profile.yaml", "profile: ../evil-profile.yaml"))
    return node, marker


REFUSAL = "evil-profile.yaml:3: check_dirs names site check folders (Python code)"


def test_run_replay_refuses_the_fixtures_check_dirs(sent: tuple[Path, Path]) -> None:
    node, marker = sent
    proc = cli("run", "--replay", node)
    assert proc.returncode == 64
    assert REFUSAL in proc.stderr and "--profile" in proc.stderr and "--trust-fixture-code" in proc.stderr
    assert not marker.exists()


def test_prolog_replay_imports_nothing_and_says_why(sent: tuple[Path, Path]) -> None:
    node, marker = sent
    proc = cli("prolog", "--replay", node)
    assert REFUSAL in proc.stderr
    assert not marker.exists()


def test_health_replay_refuses_the_fixtures_check_dirs(sent: tuple[Path, Path]) -> None:
    node, marker = sent
    proc = cli("health", "--replay", node)
    assert proc.returncode == 64
    assert REFUSAL in proc.stderr
    assert not marker.exists()


def test_an_extends_outside_the_bundled_profiles_is_refused(sent: tuple[Path, Path]) -> None:
    node, marker = sent
    cluster = node.parent
    (cluster / "parent.yaml").write_text("check_dirs: [evil]\nchecks: {node.cpu: }\n")
    (cluster / "evil-profile.yaml").write_text("# a site profile\nextends: parent.yaml\nchecks: {}\n")
    proc = cli("run", "--replay", node)
    assert proc.returncode == 64
    assert "evil-profile.yaml:2: extends 'parent.yaml' is not a bundled profile" in proc.stderr
    assert not marker.exists()


def test_the_users_own_profile_or_opt_in_runs_as_chosen(sent: tuple[Path, Path]) -> None:
    node, marker = sent
    chosen = cli("run", "--replay", node, "--profile", "base")
    assert chosen.returncode in (0, 1, 2, 3) and "Traceback" not in chosen.stderr
    assert not marker.exists()
    trusted = cli("run", "--replay", node, "--trust-fixture-code")
    assert "Traceback" not in trusted.stderr
    assert marker.exists()  # the opt-in does what it says
