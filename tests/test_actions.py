"""A failing or warning result carries a machine-readable action (result.ACTIONS): the check's
own (`@check(action=...)`) unless the result names another; ok and skip carry none."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import cli

from clustercheck.result import ACTIONS

SITE = '''
from clustercheck import Host, Result, check, fail, ok, warn


@check(action="REBOOT")
def usual(host: Host, *, mode: str = "fail") -> Result:
    """Fails, warns or passes as told."""
    if mode == "fail":
        return fail("broken")
    if mode == "other":
        return fail("the cable", action="CHECK_CABLE")
    if mode == "warn":
        return warn("slow")
    return ok("fine")
'''


def run(tmp_path: Path, mode: str) -> dict[str, object]:
    (tmp_path / "checks").mkdir(exist_ok=True)
    (tmp_path / "checks" / "site.py").write_text(SITE)
    (tmp_path / "p.yaml").write_text(f"checks:\n  site.usual:\n    mode: {mode}\n")
    proc = cli("run", "--local", "--checks", tmp_path / "checks", "-p", tmp_path / "p.yaml", "-f", "json")
    (result,) = next(iter(json.loads(proc.stdout)["hosts"].values()))["checks"]
    return dict(result)


def test_a_failing_check_carries_its_declared_action(tmp_path: Path) -> None:
    assert run(tmp_path, "fail")["action"] == "REBOOT"
    assert run(tmp_path, "warn")["action"] == "REBOOT"


def test_a_result_names_another_action(tmp_path: Path) -> None:
    assert run(tmp_path, "other")["action"] == "CHECK_CABLE"


def test_a_passing_check_carries_none(tmp_path: Path) -> None:
    result = run(tmp_path, "ok")
    assert result["status"] == "ok" and "action" not in result


def test_an_unknown_action_is_a_load_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text(SITE.replace('action="REBOOT"', 'action="PRAY"'))
    (tmp_path / "p.yaml").write_text("checks:\n  site.usual:\n")
    proc = cli("run", "--local", "--checks", tmp_path / "checks", "-p", tmp_path / "p.yaml")
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert "site.py" in proc.stderr and "PRAY" in proc.stderr and "REBOOT" in proc.stderr


def test_every_action_is_explained() -> None:
    assert all(isinstance(v, str) and len(v) > 10 for v in ACTIONS.values())
