"""storage.* checks: option rules, mounts over edited copies of the recorded demo node, and the
measuring script run for real on this machine (tmp_path) and replayed from fixtures."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from clustercheck.checks.storage import expected_types, judge_option, parse_option_rule, parse_options
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import DEMO, cli

GPU001 = DEMO / "gpu001"
NFS_LINE = "/scratch nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,"


def test_option_rules() -> None:
    assert parse_option_rule("nfs:rsize>=1MiB") == ("nfs", "rsize", ">=", "1MiB")
    assert parse_option_rule("hard") == ("", "hard", "", "")
    opts = parse_options(["rw", "rsize=65536", "hard", "vers=4.2"])
    assert judge_option("nfs:rsize>=1MiB", "nfs4", opts) == "has rsize=65536 (64 KiB), expected rsize>=1MiB"
    assert judge_option("nfs:rsize>=1MiB", "lustre", opts) is None  # rule for another type
    assert judge_option("nfs:hard", "nfs4", opts) is None
    assert judge_option("nfs:vers=4.2", "nfs", opts) is None
    assert judge_option("noac", "nfs", opts, forbid=True) is None
    assert judge_option("hard", "nfs", opts, forbid=True) == "has option hard, which the profile forbids"
    assert judge_option("nfs:noac", "nfs4", parse_options(["soft"])) == "lacks option noac"
    assert judge_option("rsize>=1MiB", "nfs", parse_options(["rsize=big"])) is not None
    for bad in ("", "nfs:", "a b", "rsize>=lots", "x>"):
        with pytest.raises(ValueError):
            parse_option_rule(bad)


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_option_rule_never_crashes_otherwise(rule: str) -> None:
    with contextlib.suppress(ValueError):
        parse_option_rule(rule)


def test_expected_types_per_path() -> None:
    types = ("ext4", "/scratch=nfs|nfs4", "/lustre/=lustre")
    assert expected_types(types, "/scratch") == ["nfs", "nfs4"]
    assert expected_types(types, "/lustre") == ["lustre"]
    assert expected_types(types, "/") == ["ext4"]
    assert expected_types((), "/") == []


def variant(tmp_path: Path, edits: dict[str, str]) -> Path:
    fixture = tmp_path / "node"
    shutil.copytree(GPU001, fixture)
    for rel, text in edits.items():
        (fixture / rel).parent.mkdir(parents=True, exist_ok=True)
        (fixture / rel).write_text(text)
    return fixture


def run_one(fixture: Path, check_id: str, params: dict[str, object], host: str = "gpu001") -> dict[str, object]:
    profile = fixture.parent / "profile.yaml"
    profile.write_text(yaml.safe_dump({"checks": {check_id: params}}))
    proc = cli("run", "--replay", str(fixture), "--profile", str(profile), "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    (check,) = json.loads(proc.stdout)["hosts"][host]["checks"]
    return check  # type: ignore[no-any-return]


NFS_RULES = {"require_options": ["nfs:rsize>=1MiB", "nfs:wsize>=1MiB", "nfs:hard"], "forbid_options": ["nfs:noac"]}


def test_mounts_options_on_recorded_nfs(tmp_path: Path) -> None:
    mounts = (GPU001 / "files/proc/mounts").read_text()
    fixture = variant(tmp_path, {})
    params = {"paths": ["/", "/scratch"], "types": ["ext4", "/scratch=nfs|nfs4"], **NFS_RULES}
    check = run_one(fixture, "storage.mounts", params)
    assert (check["status"], check["summary"]) == (
        "ok",
        "2 mounts present, read-write, 4 option rules met and answering",
    )
    small = mounts.replace(NFS_LINE, NFS_LINE.replace("rsize=1048576", "rsize=65536"))
    assert small != mounts
    (fixture / "files/proc/mounts").write_text(small)
    check = run_one(fixture, "storage.mounts", params)
    assert check["status"] == "fail"
    assert check["summary"] == "/scratch (nfs4) has rsize=65536 (64 KiB), expected rsize>=1MiB"
    assert run_one(fixture, "storage.mounts", {**params, "options_status": "warn"})["status"] == "warn"
    (fixture / "files/proc/mounts").write_text(mounts.replace(NFS_LINE, NFS_LINE + "noac,"))
    check = run_one(fixture, "storage.mounts", params)
    assert (check["status"], check["summary"]) == ("fail", "/scratch (nfs4) has option noac, which the profile forbids")


def test_mounts_wrong_type_and_missing_lustre_client(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"], "types": ["/scratch=lustre"]})
    assert (check["status"], check["summary"]) == ("fail", "/scratch is nfs4, expected lustre")
    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    manifest["absent"] = ["/sys/fs/lustre/version", "/proc/fs/lustre/version"]  # as a recording would say
    (fixture / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"], "lustre_client": True})
    assert check["status"] == "fail"
    assert "no Lustre client" in str(check["summary"])


def test_mounts_bad_rule_is_an_error_not_a_pass(tmp_path: Path) -> None:
    check = run_one(variant(tmp_path, {}), "storage.mounts", {"paths": ["/"], "require_options": ["rsize>=lots"]})
    assert check["status"] == "error"
    assert "rsize>=lots" in str(check["summary"])


def test_mounts_hung_stat_fails_without_hanging(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    record = fixture / "commands/stat_-f_-c_T_scratch/command.yaml"
    rec = yaml.safe_load(record.read_text())
    rec.update(exit_code=None, timed_out=True, duration_s=5.0)
    record.write_text(yaml.safe_dump(rec))
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"]})
    assert (check["status"], check["summary"]) == ("fail", "/scratch did not answer stat within 5 s")
