"""Fleet reports: failures grouped by check, drift, stragglers; `clustercheck report` merging; html."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.helpers import DEMO, cli

from clustercheck.analyzers.fleet import summarize
from clustercheck.result import CheckResult, HostReport, Report, Status


def _demo_report(fmt: str) -> str:
    return cli("run", "--replay", str(DEMO), "--format", fmt).stdout


def test_groups_fold_hosts_and_drift_names_the_odd_node() -> None:
    checks = lambda ok_cpus, kernel_status: (  # noqa: E731
        CheckResult("node.kernel", kernel_status, "k", data={"facts": {"kernel": "5.15.0-91-generic"}}),
        CheckResult("node.cpu", Status.OK, "c", data={"facts": {"cpus online": ok_cpus}}),
    )
    hosts = [HostReport(f"gpu{i:03d}", checks(224, Status.OK)) for i in range(1, 17)]
    hosts[2] = HostReport("gpu003", checks(224, Status.FAIL))
    hosts[16 - 1] = HostReport("gpu016", checks(112, Status.FAIL))
    hosts[4] = HostReport("gpu005", checks(224, Status.WARN))
    fleet = summarize(Report("t", "p", tuple(hosts)))
    (fail, warn) = fleet.groups
    assert (fail.check, fail.status, fail.to_json()["hosts"]) == ("node.kernel", Status.FAIL, "gpu[003,016]")
    assert (warn.status, warn.hosts) == (Status.WARN, ("gpu005",))
    (drift,) = fleet.drift
    assert drift.to_json() == {
        "fact": "cpus online",
        "majority": "224",
        "majority_hosts": 15,
        "others": [{"value": "112", "hosts": "gpu016", "count": 1}],
    }


def test_stragglers_are_far_slower_than_the_median() -> None:
    def host(name: str, seconds: float) -> HostReport:
        return HostReport(name, (CheckResult("storage.mounts", Status.OK, "", duration_s=seconds),))

    fleet = summarize(Report("t", "p", tuple([host(f"n{i}", 0.5) for i in range(8)] + [host("slow", 9.0)])))
    assert [s.host for s in fleet.stragglers] == ["slow"]
    quick = summarize(Report("t", "p", tuple([host(f"n{i}", 0.01) for i in range(8)] + [host("q", 0.2)])))
    assert quick.stragglers == ()  # 20x the median, but 0.2 s is noise


def test_report_merges_jsonl_json_and_folders(tmp_path: Path) -> None:
    lines = _demo_report("jsonl").splitlines()
    per_host = len(lines) // 13
    (tmp_path / "a.jsonl").write_text("\n".join(lines[: 3 * per_host]) + "\n")  # gpu001-003
    (tmp_path / "b.jsonl").write_text("\n".join(lines[3 * per_host :]) + "\n")
    merged = cli("report", str(tmp_path), "--format", "json")
    assert merged.returncode == 2
    doc = json.loads(merged.stdout)
    assert sorted(doc["hosts"]) == [f"gpu{i:03d}" for i in range(1, 14)]
    assert doc["summary"] == json.loads(_demo_report("json"))["summary"]
    groups = {(g["check"], g["status"]): g["hosts"] for g in doc["fleet"]["groups"]}
    assert groups[("storage.mounts", "fail")] == "gpu003"
    assert doc["fleet"]["hosts"]["ok"] == {"count": 1, "hosts": "gpu001"}
    # a json report is an input too, and the later input wins for a host it repeats
    (tmp_path / "c.json").write_text(_demo_report("json"))
    again = json.loads(cli("report", str(tmp_path / "a.jsonl"), str(tmp_path / "c.json"), "-f", "json").stdout)
    assert len(again["hosts"]) == 13


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"host": "n1", "id": "x"}\n', "bad.jsonl:1: not a clustercheck result"),
        ("garbage\n", "bad.jsonl:1: not a JSON line"),
        ('{"hosts": []}', "bad.jsonl: not a clustercheck json report"),
    ],
)
def test_report_bad_input_exits_64(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text(content)
    proc = cli("report", str(tmp_path / "bad.jsonl"))
    assert proc.returncode == 64
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert cli("report", str(tmp_path / "missing.jsonl")).returncode == 64


def test_multi_host_table_lists_hosts_by_status_and_groups_problems() -> None:
    out = _demo_report("table")
    assert "ok 1 host: gpu001" in out
    assert "fail 10 hosts: gpu[002-006,008,010-013]" in out
    assert "gpu001 ok" not in out  # no per-host tables in the fleet view (-v shows them)
    assert re.search(r"fail\s+storage\.mounts\s+gpu003 \(1\)\s+/scratch did not answer stat within 5 s", out)
    assert re.search(r"cpus online\s+2 \(12 hosts\)\s+1 on gpu006", out)


def test_html_is_self_contained_with_one_grid_row_per_host(tmp_path: Path) -> None:
    page = tmp_path / "fleet.html"
    assert cli("run", "--replay", str(DEMO), "-f", "html", "-o", str(page)).returncode == 2
    html = page.read_text()
    assert html.count('<tr class="host"') == 13
    assert "http://" not in html and "https://" not in html and "<script" not in html
    assert "/scratch did not answer stat within 5 s" in html


def test_html_renders_in_a_real_headless_browser(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    page = tmp_path / "fleet.html"
    cli("run", "--replay", str(DEMO), "-f", "html", "-o", str(page))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    dom = subprocess.run(
        [browser, *flags, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.stdout.count('<tr class="host"') == 13, dom.stderr[-2000:]
    assert 'id="grid"' in dom.stdout
