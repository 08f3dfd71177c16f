"""Fleet reports: failures grouped by check, drift, stragglers; `clustercheck report` merging; html."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import DEMO, FIXTURES, cli
from tests.sshd import SSHServer, free_port

from clustercheck.analyzers.fleet import summarize
from clustercheck.result import CheckResult, HostReport, Report, Status


def _demo_report(fmt: str) -> str:
    return cli("run", "--replay", str(DEMO), "--format", fmt).stdout


def test_groups_fold_hosts_and_drift_names_the_odd_node() -> None:
    def checks(ok_cpus: int, kernel_status: Status) -> tuple[CheckResult, CheckResult]:
        return (
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
        # issue 13 item 17: a json report of the wrong shape is bad input, never an internal error
        ('{"hosts": {"n1": {"checks": "ok"}}}', """bad.jsonl: host 'n1': "checks" is a string, not a list"""),
        ('{"hosts": {"n1": {"checks": ["ok"]}}}', "bad.jsonl: host 'n1', check 1: not a clustercheck result: a string"),
        (
            '{"hosts": {"n1": {"checks": [{"id": "x", "status": "ok", "evidence": 5}]}}}',
            """host 'n1', check 1: not a clustercheck result: "evidence" is a number, not a list of strings""",
        ),
        ('{"hosts": {"n1": {"checks": [{"id": "x", "status": "ok", "data": [1]}]}}}', '"data" is a list'),
        ('[{"host": "n1"}]', "bad.jsonl: not a clustercheck json report or jsonl results: it holds a list"),
        ('{\n  "clustercheck": "0.1.0",\n  "hosts": {\n', "bad.jsonl: not a whole json report"),
    ],
)
def test_report_bad_input_exits_64(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text(content)
    proc = cli("report", str(tmp_path / "bad.jsonl"))
    assert proc.returncode == 64
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert cli("report", str(tmp_path / "missing.jsonl")).returncode == 64


def test_report_skips_a_truncated_line_with_a_warning_and_counts_it(tmp_path: Path) -> None:
    lines = _demo_report("jsonl").splitlines()
    killed = lines[5][:70]  # a node killed while writing this line
    glued = lines[6][:40] + lines[7]  # a line cut short, then the next result written on after it
    (tmp_path / "a.jsonl").write_text("\n".join([*lines[:5], killed, glued, *lines[8:]]) + "\n")
    proc = cli("report", tmp_path / "a.jsonl", "-f", "json")
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'a.jsonl'}:6: a JSON line cut short (a node killed mid-write?): skipped it" in proc.stderr
    assert f"{tmp_path / 'a.jsonl'}:7: a JSON line cut short" in proc.stderr
    assert "kept the whole result written after it" in proc.stderr
    assert "skipped 2 truncated lines" in proc.stderr and "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)

    def found(line: str) -> bool:
        obj = json.loads(line)
        return any(c["id"] == obj["id"] for c in doc["hosts"][obj["host"]]["checks"])

    assert not found(lines[5]) and not found(lines[6]) and found(lines[7])
    assert sum(doc["summary"].values()) == len(lines) - 2
    # the last line of a file cut mid-write (no newline)
    (tmp_path / "b.jsonl").write_text("\n".join(lines)[:-50])
    cut = cli("report", tmp_path / "b.jsonl")
    assert cut.returncode == 2 and f"b.jsonl:{len(lines)}: a JSON line cut short" in cut.stderr


def test_multi_host_table_lists_hosts_by_status_and_groups_problems() -> None:
    out = _demo_report("table")
    assert "ok 1 host: gpu001" in out
    assert "fail 10 hosts: gpu[002-006,008,010-013]" in out
    assert "gpu001 ok" not in out  # no per-host tables in the fleet view (-v shows them)
    # the action column: a mount that does not answer is INVESTIGATE (storage.mounts' docstring)
    assert re.search(
        r"fail\s+storage\.mounts\s+gpu003 \(1\)\s+INVESTIGATE\s+/scratch did not answer stat within 5 s", out
    )
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


def test_html_grid_reads_without_colour_and_fits_1400_px(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    page = tmp_path / "fleet.html"
    assert cli("run", "--replay", DEMO, "-f", "html", "-o", page).returncode == 2
    html = page.read_text()
    legend = re.search(r'<p id="legend">(.*?)</p>', html)
    assert legend is not None
    for letter, status in (("O", "ok"), ("W", "warn"), ("F", "fail"), ("S", "skip"), ("E", "error")):
        assert f'<span class="st s-{status}">{letter}</span> {status}' in legend.group(1)
    cells = re.findall(r'<td class="cell s-(\w+)" title="[^"]*">(\w)</td>', html)
    assert len(cells) == 13 * 20 and all(letter == status[0].upper() for status, letter in cells)
    assert ("fail", "F") in cells and ("warn", "W") in cells
    # measured by the browser at 1400 px: nothing wider than the window (the page has no script
    # of its own; this copy gets one that writes the page's width into the DOM)
    probe = tmp_path / "probe.html"
    probe.write_text(
        html.replace(
            "</body>",
            "<script>document.body.setAttribute('data-width', document.documentElement.scrollWidth)</script></body>",
        )
    )
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    dom = subprocess.run(
        [
            browser,
            *flags,
            "--window-size=1400,1000",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    width = re.search(r'data-width="(\d+)"', dom.stdout)
    assert width is not None, dom.stderr[-2000:]
    assert int(width.group(1)) <= 1400


# -- the fleet view: one row per distinct problem, unreachable hosts folded, by host -------------


def _replay_all(pattern: str) -> list[str]:
    args: list[str] = []
    for fixture in sorted(FIXTURES.glob(pattern)):
        args += ["--replay", str(fixture)]
    return args


def test_different_problems_of_one_check_get_a_row_and_a_hostlist_each(tmp_path: Path) -> None:
    # gpu202's exporter is down; gpu203 lacks a GPU's series; gpu204 lacks the XID field
    proc = cli("run", *_replay_all("monitoring-*"))
    assert proc.returncode == 2, proc.stderr
    problems = proc.stdout.split("problems by check")[1]
    assert len(re.findall(r"fail\s+monitoring\.dcgm_exporter", problems)) == 3
    # each row with its action: a restart mends a stopped exporter and a lost GPU, not a missing field
    exporter = r"monitoring\.dcgm_exporter\s+"
    assert re.search(exporter + r"gpu202 \(1\)\s+RESTART_SERVICE\s+dcgm-exporter is not running", problems)
    lost = r"gpu203 \(1\)\s+RESTART_SERVICE\s+GPU 3 \(GPU-d877bae9\.\.\.\) has no series"
    assert re.search(exporter + lost, problems)
    assert re.search(exporter + r"gpu204 \(1\)\s+FIX_CONFIG\s+DCGM_FI_DEV_XID_ERRORS absent", problems)
    assert "gpu[202-204]" not in problems and "other summaries" not in problems
    # the html page and `report --format json` group the same way
    results = tmp_path / "monitoring.json"
    assert cli("run", *_replay_all("monitoring-*"), "-f", "json", "-o", results).returncode == 2
    groups = json.loads(cli("report", results, "-f", "json").stdout)["fleet"]["groups"]
    assert sorted(g["hosts"] for g in groups) == ["gpu202", "gpu203", "gpu204"]
    assert {g["hosts"]: g["action"] for g in groups} == {
        "gpu202": "RESTART_SERVICE",
        "gpu203": "RESTART_SERVICE",
        "gpu204": "FIX_CONFIG",
    }
    page = cli("report", results, "-f", "html").stdout
    assert len(re.findall(r"<td>monitoring\.dcgm_exporter</td><td>gpu20[234]&nbsp;\(1\)</td>", page)) == 3
    assert '<td>gpu204&nbsp;(1)</td><td><code class="action">FIX_CONFIG</code></td>' in page


def _jsonl(path: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    lines = [
        json.dumps({"host": h, "id": c, "status": s, "summary": summary, "profile": "p"}) for h, c, s, summary in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_summaries_that_differ_only_in_values_fold_and_words_never_do(tmp_path: Path) -> None:
    results = _jsonl(
        tmp_path / "r.jsonl",
        [
            ("n1", "node.memory", "fail", "15.6 GiB of memory, expected at least 20 GiB"),
            ("n2", "node.memory", "fail", "15.2 GiB of memory, expected at least 20 GiB"),
            ("n3", "node.modules", "fail", "module nvidia_uvm is not loaded"),
            ("n4", "node.modules", "fail", "module nvidia_peermem is not loaded"),
            *[(f"n{i}", "node.cpu", "fail", f"1 of 2 CPUs online: CPU {i} is offline") for i in range(5, 10)],
            ("n10", "node.memory", "ok", "256 GiB of memory"),
        ],
    )
    proc = cli("report", results)
    assert proc.returncode == 2, proc.stderr
    out = proc.stdout
    assert re.search(r"node\.memory\s+n\[1-2\] \(2\)\s+\{15\.2,15\.6\} GiB of memory, expected at least 20 GiB", out)
    assert re.search(r"node\.cpu\s+n\[5-9\] \(5\)\s+1 of 2 CPUs online: CPU \{5\.\.9\} is offline", out)
    assert re.search(r"node\.modules\s+n3 \(1\)\s+module nvidia_uvm is not loaded", out)
    assert re.search(r"node\.modules\s+n4 \(1\)\s+module nvidia_peermem is not loaded", out)
    # each host's exact summary stays in the json
    groups = json.loads(cli("report", results, "-f", "json").stdout)["fleet"]["groups"]
    memory = next(g for g in groups if g["check"] == "node.memory")
    assert {s["summary"] for s in memory["summaries"]} == {
        "15.6 GiB of memory, expected at least 20 GiB",
        "15.2 GiB of memory, expected at least 20 GiB",
    }


def test_unreachable_hosts_are_one_line_per_cause_not_a_row_per_check(sshd: SSHServer, tmp_path: Path) -> None:
    dead = free_port()
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"\nHost dead1 dead2\n  HostName 127.0.0.1\n  Port {dead}\n  User {sshd.user}\n"
        + f"\nHost stranger1 stranger2 stranger3\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        + f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {known}\n"
    )
    hosts = "dead[1-2],stranger[1-3]"
    proc = cli("run", "--ssh", hosts, "--ssh-config", config, "-p", "base")
    assert proc.returncode == 3, proc.stderr
    out = proc.stdout
    assert f"unreachable: dead[1-2]: connection refused (port {dead})" in out
    assert "unreachable: stranger[1-3]: unknown SSH host key (check it, then re-run with --accept-new-host-keys" in out
    assert "not run" not in out and "dead1" not in out.split("unreachable")[-1]
    assert len(out.splitlines()) < 20, out
    progress = rf"^clustercheck: \[\d/5\] dead2 unreachable: connection refused \(port {dead}\)"
    assert re.search(progress, proc.stderr, re.M)
    # -v: each host's own message (with the ssh-keyscan line to paste), still no per-check rows
    verbose = cli("run", "--ssh", hosts, "--ssh-config", config, "-p", "base", "-v").stdout
    assert "  dead2: connection refused by dead2 (127.0.0.1:" in verbose
    assert re.search(
        r"  stranger3: unknown SSH host key for stranger3 \(127\.0\.0\.1:\d+\).*ssh-keyscan", verbose, re.S
    )
    assert "not run" not in verbose and "dead1 error" not in verbose
    # one host alone: why, once, not a "not run" row per check
    alone = cli("run", "--ssh", "dead1", "--ssh-config", config, "-p", "base")
    assert alone.returncode == 3
    assert f"unreachable: connection refused by dead1 (127.0.0.1:{dead}): is sshd running there" in alone.stdout
    assert "(4 checks not run)" in alone.stdout and "not run:" not in alone.stdout
    # the json keeps every check's error, for scripts
    doc = json.loads(cli("run", "--ssh", "dead1", "--ssh-config", config, "-p", "base", "-f", "json").stdout)
    assert all(c["summary"].startswith("not run: host unreachable") for c in doc["hosts"]["dead1"]["checks"])


def test_by_host_is_one_line_per_problem_host() -> None:
    proc = cli("run", "--replay", DEMO, "--by", "host")
    assert proc.returncode == 2, proc.stderr
    out = proc.stdout
    assert "problems by host\n" in out and "problems by check\n" not in out
    assert re.search(  # each problem with the action it asks for
        r"gpu012\s+fail\s+gpu\.count: 7 GPUs visible, expected 8: GPU 3: GPU is lost \[REBOOT\]; "
        r"gpu\.xid: XID 79 on GPU 0000:5d:00 \(GPU has fallen off the bus\): reboot the node",
        out,
    )
    assert len(re.findall(r"^\s+gpu0\d\d\s+(fail|warn)\s", out, re.M)) == 12  # every problem host, once
    assert not re.search(r"^\s+gpu001\s", out, re.M)
    # a view only the table has is a mistake for the others, said before any host is contacted
    wrong = cli("run", "--replay", DEMO, "--by", "host", "-f", "json")
    assert wrong.returncode == 64 and "--by host shapes the table format only" in wrong.stderr
    assert wrong.stdout == ""
    assert cli("run", "--replay", DEMO, "--by", "rack").returncode == 64


def test_verbose_shows_the_problem_hosts_and_all_shows_every_host() -> None:
    verbose = cli("run", "--replay", DEMO, "-v").stdout
    assert "gpu002 fail" in verbose and "gpu007 warn" in verbose and "remedy:" in verbose
    assert "gpu001 ok" not in verbose
    assert "ok 1 host: gpu001" in verbose  # the fleet view follows the tables
    every = cli("run", "--replay", DEMO, "-v", "--all").stdout
    assert "gpu001 ok" in every and "gpu002 fail" in every
    terse = cli("run", "--replay", DEMO).stdout
    assert "gpu002 fail" not in terse and "(-v: the problem hosts' checks" in terse


def test_piped_table_honours_columns() -> None:
    narrow = subprocess.run(
        [sys.executable, "-m", "clustercheck", "run", "--replay", str(DEMO)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "90"},
        timeout=60,
    )
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 90
    assert max(len(line) for line in _demo_report("table").splitlines()) > 120  # cli() sets COLUMNS=200


def test_one_problem_asking_for_different_actions_is_two_rows(tmp_path: Path) -> None:
    """The same summary with another action is another fix: its own row, its own hostlist; the
    by-host lines name each problem's action."""
    rows = [
        {"host": "n1", "id": "site.gpu", "status": "fail", "summary": "GPU 3 failed", "action": "RESET_GPU"},
        {"host": "n2", "id": "site.gpu", "status": "fail", "summary": "GPU 5 failed", "action": "RESET_GPU"},
        {"host": "n3", "id": "site.gpu", "status": "fail", "summary": "GPU 1 failed", "action": "REPLACE_HW"},
        {"host": "n4", "id": "site.gpu", "status": "ok", "summary": "fine"},
    ]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    groups = json.loads(cli("report", results, "-f", "json").stdout)["fleet"]["groups"]
    assert sorted((g["hosts"], g["action"]) for g in groups) == [("n3", "REPLACE_HW"), ("n[1-2]", "RESET_GPU")]
    table = cli("report", results).stdout
    assert re.search(r"site\.gpu\s+n\[1-2\] \(2\)\s+RESET_GPU\s+GPU \{3,5\} failed", table)
    assert re.search(r"site\.gpu\s+n3 \(1\)\s+REPLACE_HW\s+GPU 1 failed", table)
    by_host = cli("report", results, "--by", "host").stdout
    assert "site.gpu: GPU 1 failed [REPLACE_HW]" in by_host


def test_hca_firmware_drift_names_the_odd_node(tmp_path: Path) -> None:
    """rdma.devices' drift facts on three real-derived nodes: fixtures/rdma/healthy-ndr (8 ConnectX-7 at
    fw 28.41.1000, the firmware of the real H100 sysfs tree in corpus ib_sysfs) three times, the third with
    every fw_ver line set to 28.43.2026, the real ConnectX-7 NDR firmware of corpus ib_tools
    issue-deepep-303 (the only change). The fleet view names gpu103; each node passes on its own."""
    cluster = tmp_path / "cluster"
    for n in (101, 102, 103):
        node = cluster / f"gpu{n}"
        shutil.copytree(FIXTURES / "rdma" / "healthy-ndr", node)
        manifest = node / "fixture.yaml"
        manifest.write_text(manifest.read_text().replace("host: gpu101", f"host: gpu{n}"))
    (gather,) = (cluster / "gpu103" / "commands").glob("sh_-c_echo_sysfs*")
    stdout = gather / "stdout"
    assert stdout.read_text().count("fw_ver:28.41.1000") == 8
    stdout.write_text(stdout.read_text().replace("fw_ver:28.41.1000", "fw_ver:28.43.2026"))
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  rdma.devices: {}\n")
    run = cli("run", "--replay", cluster, "--profile", profile, "--format", "json")
    assert run.returncode == 0, run.stderr
    hosts = json.loads(run.stdout)["hosts"]
    assert {h: c["checks"][0]["status"] for h, c in hosts.items()} == {"gpu101": "ok", "gpu102": "ok", "gpu103": "ok"}
    # recorded before the stack version was read: the fact is left out and the evidence says so, never guessed
    (c,) = hosts["gpu103"]["checks"]
    assert c["data"]["facts"] == {"HCA firmware": "28.43.2026"}
    assert "`ofed_info -s` is not in this recording: RDMA stack version not read" in c["evidence"]
    (tmp_path / "run.json").write_text(run.stdout)
    report = cli("report", tmp_path / "run.json", "--format", "json")
    assert json.loads(report.stdout)["fleet"]["drift"] == [
        {
            "fact": "HCA firmware",
            "majority": "28.41.1000",
            "majority_hosts": 2,
            "others": [{"value": "28.43.2026", "hosts": "gpu103", "count": 1}],
        }
    ]
    table = cli("run", "--replay", cluster, "--profile", profile).stdout
    assert re.search(r"HCA firmware\s+28\.41\.1000 \(2 hosts\)\s+28\.43\.2026 on gpu103", table), table
