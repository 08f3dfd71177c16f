"""Every fixture guards its own scenario: replaying it must give the statuses its `expect:` names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import REPO, all_fixtures, cli


@pytest.mark.parametrize("fixture", all_fixtures(), ids=lambda p: str(p.relative_to(REPO / "fixtures")))
def test_fixture_meets_its_expectations(fixture: Path) -> None:
    import yaml

    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    assert manifest["note"].strip(), "a fixture says what it shows"
    assert manifest["expect"], "a fixture names the statuses it must get"
    proc = cli("run", "--replay", str(fixture), "--format", "json")
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    (host,) = report["hosts"].values()
    got = {c["id"]: c["status"] for c in host["checks"]}
    for check_id, status in manifest["expect"].items():
        assert got.get(check_id) == status, f"{fixture.name}: {check_id} got {got.get(check_id)}, expected {status}"


def test_demo_cluster_has_healthy_and_broken_hosts() -> None:
    proc = cli("run", "--replay", "fixtures/demo-cluster", "--format", "json")
    report = json.loads(proc.stdout)
    statuses = {h: v["status"] for h, v in report["hosts"].items()}
    assert statuses["gpu001"] == "ok"
    assert {"ok", "warn", "fail"} <= set(statuses.values())
    assert proc.returncode == 2  # at least one fail
