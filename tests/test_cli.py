"""The command line as users meet it: subcommands, formats, exit codes, bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.helpers import DEMO, REPO, cli

SITE = str(DEMO / "site-profile.yaml")


def test_version_and_python_m() -> None:
    from clustercheck import __version__

    proc = cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"clustercheck {__version__}"


@pytest.mark.parametrize("sub", ["run", "record", "checks", "explain", "profiles"])
def test_every_subcommand_has_help(sub: str) -> None:
    proc = cli(sub, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout


def test_usage_errors_exit_64_not_2() -> None:
    proc = cli("run", "--no-such-option")
    assert proc.returncode == 64
    assert "No such option" in proc.stderr


def test_conflicting_targets_exit_64() -> None:
    proc = cli("run", "--local", "--replay", str(DEMO), "--profile", "base")
    assert proc.returncode == 64
    assert "choose one of --local" in proc.stderr


def test_bad_hostlist_exits_64() -> None:
    proc = cli("run", "--ssh", "gpu[01-", "--profile", "base")
    assert proc.returncode == 64
    assert "bad hostlist 'gpu[01-'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_exit_code_follows_worst_status() -> None:
    assert cli("run", "--replay", str(DEMO / "gpu001"), "--profile", SITE).returncode == 0
    assert cli("run", "--replay", str(DEMO / "gpu007"), "--profile", SITE).returncode == 1
    assert cli("run", "--replay", str(DEMO / "gpu002"), "--profile", SITE).returncode == 2


def test_error_exit_3_when_a_probe_was_not_recorded(tmp_path: Path) -> None:
    fixture = tmp_path / "gpu001"
    shutil.copytree(DEMO / "gpu001", fixture)
    (listing,) = (fixture / "commands").glob("sh_-c_out_ps_-e*")
    shutil.rmtree(listing)
    proc = cli("run", "--replay", str(fixture), "--profile", SITE, "--format", "json")
    assert proc.returncode == 3
    checks = {c["id"]: c for c in json.loads(proc.stdout)["hosts"]["gpu001"]["checks"]}
    services = checks["node.services"]
    assert services["status"] == "error"
    assert "has no recording of `sh -c 'out=$(ps -e -ww -o comm= -o args=)" in services["summary"]
    # a command that works pasted from here: the profile in use, --local as it was recorded
    rerecord = f"clustercheck record --profile fixtures/demo-cluster/site-profile.yaml --local --force --out {fixture}"
    assert rerecord in services["summary"]


def test_json_shape_is_the_documented_one() -> None:
    proc = cli("run", "--replay", str(DEMO), "--profile", SITE, "--format", "json")
    report = json.loads(proc.stdout)
    assert set(report) == {"clustercheck", "profile", "hosts", "summary"}
    assert report["profile"] == "demo-site"
    assert set(report["summary"]) == {"ok", "warn", "fail", "skip", "error"}
    gpu002 = report["hosts"]["gpu002"]
    assert gpu002["status"] == "fail"
    memory = next(c for c in gpu002["checks"] if c["id"] == "node.memory")
    # a fail carries its check's action (result.ACTIONS): node.memory's is REPLACE_HW (a lost DIMM)
    assert set(memory) == {"id", "status", "summary", "evidence", "remedy", "duration_s", "data", "action"}
    assert memory["action"] == "REPLACE_HW"
    assert memory["summary"] == "15.6 GiB of memory, expected at least 20 GiB"
    assert "MemTotal: 15.6 GiB" in memory["evidence"]
    assert "read /proc/meminfo (54 lines)" in memory["evidence"]
    assert "dmidecode" in memory["remedy"]
    assert memory["data"]["total_bytes"] == 16318292 * 1024


def test_jsonl_has_one_line_per_host_and_check() -> None:
    proc = cli("run", "--replay", str(DEMO), "--profile", SITE, "--format", "jsonl")
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 13 * 20  # 13 hosts, 20 checks (node, gpu, storage and stack)
    assert {line["host"] for line in lines} == {f"gpu{i:03d}" for i in range(1, 14)}


def test_jsonl_into_a_reader_that_stops_early_ends_the_run() -> None:
    # `run -f jsonl | head -1` used to hang for ever: the broken pipe killed the runner's workers
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", "run", "--replay", str(DEMO), "-f", "jsonl"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert json.loads(first)["host"].startswith("gpu")
    proc.stdout.close()  # the reader goes away, as head does
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert code == 2  # the report's exit code, not a crash
    assert "Traceback" not in proc.stderr.read()


def closed_stdout_run(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m clustercheck ARGS` whose stdout is a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "clustercheck", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=60,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [["checks"], ["checks", "-f", "json"], ["profiles"], ["explain", "gpu.xid"], ["--help"], ["topology", "--help"]],
)
def test_a_command_cut_off_by_a_closed_output_exits_141(args: list[str]) -> None:
    """`clustercheck checks | head`: rich and click exited 1 ("warn") when the reader had gone; a
    command cut off while writing exits 141 (128 + SIGPIPE, as cat does), quietly."""
    proc = closed_stdout_run(*args)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


@pytest.mark.parametrize("fmt", ["table", "json", "jsonl"])
def test_a_reader_gone_before_the_report_keeps_the_verdict_as_exit_code(fmt: str) -> None:
    # `run ... | head` with `set -o pipefail`: rich's table exited 1 ("warn") on the broken pipe
    # and click did the same for json, where the verdict was 2
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", "run", "--replay", str(DEMO), "-f", fmt],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # gone before clustercheck writes a byte
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    said = proc.stderr.read()
    assert code == 2, said  # the demo cluster's verdict: a check failed
    assert "Traceback" not in said and "Error" not in said


def test_junit_and_prometheus_written_atomically(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    assert cli("run", "--replay", str(DEMO), "--profile", SITE, "-f", "junit", "-o", str(junit)).returncode == 2
    suites = ET.parse(junit).getroot()
    assert len(suites.findall("testsuite")) == 13
    assert int(suites.get("failures", "0")) == 11
    prom = tmp_path / "clustercheck.prom"
    assert cli("run", "--replay", str(DEMO), "--profile", SITE, "-f", "prometheus", "-o", str(prom)).returncode == 2
    text = prom.read_text()
    assert 'clustercheck_check_status{host="gpu003",check="storage.mounts",status="fail"} 1' in text
    assert sorted(os.listdir(tmp_path)) == ["clustercheck.prom", "report.xml"]  # no temp files left


def test_table_verbose_shows_evidence_and_remedy() -> None:
    proc = cli("run", "--replay", str(DEMO / "gpu003"), "--profile", SITE, "-v")
    assert "/scratch did not answer stat within 5 s" in proc.stdout
    assert "$ stat -f -c %T /scratch  (timed out after 5.0 s)" in proc.stdout
    assert "remedy: Mount what is missing" in proc.stdout
    as_json = cli("run", "--replay", str(DEMO / "gpu003"), "--profile", SITE, "-f", "json")
    (host,) = json.loads(as_json.stdout)["hosts"].values()
    assert "umount -f -l" in next(c["remedy"] for c in host["checks"] if c["id"] == "storage.mounts")


def test_profile_defaults_to_the_fixtures_recorded_one() -> None:
    proc = cli("run", "--replay", str(DEMO), "--format", "json")
    assert json.loads(proc.stdout)["profile"] == "demo-site"


def test_checks_lists_every_check_with_parameters() -> None:
    proc = cli("checks", "--format", "json")
    checks = {c["id"]: c for c in json.loads(proc.stdout)}
    assert {"node.kernel", "node.memory", "node.cpu", "storage.mounts", "node.services", "node.modules"} <= set(checks)
    memory = checks["node.memory"]
    assert memory["needs"] == ["file /proc/meminfo"]
    assert {"name": "min_total", "type": "size like 512GiB", "required": True, "default": None} in memory["params"]
    table = cli("checks")
    assert "storage.mounts" in table.stdout


def test_explain() -> None:
    proc = cli("explain", "node.kernel")
    assert proc.returncode == 0
    assert "Why:" in proc.stdout and "Fix:" in proc.stdout and "fail_taints" in proc.stdout
    bad = cli("explain", "node.kernal")
    assert bad.returncode == 64
    assert "did you mean node.kernel" in bad.stderr


def test_site_checks_dir(tmp_path: Path) -> None:
    (tmp_path / "site.py").write_text(
        "from clustercheck import Host, Result, check, fail, ok\n"
        "@check(needs=['file /proc/sys/kernel/osrelease'])\n"
        "def kernel_is(host: Host, *, release: str) -> Result:\n"
        "    '''The kernel release is exactly `release`.'''\n"
        "    got = host.read('/proc/sys/kernel/osrelease').strip()\n"
        "    return ok(got) if got == release else fail(f'kernel {got}, expected {release}')\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  site.kernel_is: {release: 5.15.0-91-generic}\n")
    proc = cli(
        "run", "--replay", str(DEMO / "gpu001"), "--profile", str(profile), "--checks", str(tmp_path), "-f", "json"
    )
    assert proc.returncode == 0, proc.stderr
    (check,) = json.loads(proc.stdout)["hosts"]["gpu001"]["checks"]
    assert check["id"] == "site.kernel_is" and check["status"] == "ok"


def test_a_crashing_check_is_an_error_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(
        "from clustercheck import Host, Result, check\n"
        "@check\n"
        "def boom(host: Host) -> Result:\n"
        "    '''Always crashes.'''\n"
        "    return 1 / 0\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(f"check_dirs: [{tmp_path}]\nchecks:\n  broken.boom:\n  node.kernel:\n")
    proc = cli("run", "--replay", str(DEMO / "gpu001"), "--profile", str(profile), "-f", "json")
    assert proc.returncode == 3
    checks = json.loads(proc.stdout)["hosts"]["gpu001"]["checks"]
    assert checks[0]["status"] == "error"
    assert checks[0]["summary"] == "the check crashed: ZeroDivisionError: division by zero"
    assert checks[1]["status"] == "ok"
    debug = cli("--debug", "run", "--replay", str(DEMO / "gpu001"), "--profile", str(profile), "-f", "json")
    assert any("ZeroDivisionError" in e for e in json.loads(debug.stdout)["hosts"]["gpu001"]["checks"][0]["evidence"])


def test_local_run_on_this_machine() -> None:
    proc = cli("run", "--local", "--profile", "base", "--format", "json")
    assert proc.returncode in (0, 1, 2, 3)
    report = json.loads(proc.stdout)
    (host,) = report["hosts"].values()
    kernel = next(c for c in host["checks"] if c["id"] == "node.kernel")
    assert kernel["data"]["release"] == Path("/proc/sys/kernel/osrelease").read_text().strip()


def test_whole_run_timeout_reports_unfinished_checks(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "from clustercheck import Host, Result, check, ok\n"
        "@check(timeout=60)\n"
        "def sleepy(host: Host) -> Result:\n"
        "    '''Sleeps through a command.'''\n"
        "    host.run('sleep', '30', timeout=60)\n"
        "    return ok('slept')\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(f"check_dirs: [{tmp_path}]\nchecks:\n  slow.sleepy:\n  node.kernel:\n")
    proc = cli("run", "--local", "--profile", str(profile), "--timeout", "1", "-f", "json", timeout=20)
    assert proc.returncode == 3
    checks = json.loads(proc.stdout)["hosts"]
    (host,) = checks.values()
    assert [c["status"] for c in host["checks"]] == ["error", "error"]
    assert "--timeout of 1 s expired" in host["checks"][0]["summary"]
    # the abandoned command was killed with the run, not left behind
    assert subprocess.run(["pgrep", "-f", "^sleep 30$"], capture_output=True).returncode == 1


def test_prolog_path_imports_neither_typer_nor_rich_nor_paramiko() -> None:
    code = (
        "import atexit, sys\n"
        "from clustercheck.main import main\n"
        "heavy = ('typer', 'rich', 'paramiko', 'pydantic', 'psutil')\n"
        "atexit.register(lambda: print('LOADED', [m for m in heavy if m in sys.modules], file=sys.stderr))\n"
        "main(['run', '--local', '--profile', 'prolog', '--format', 'json'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "LOADED []" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["profile"] == "prolog"


def test_fast_path_and_typer_path_agree(tmp_path: Path) -> None:
    fast = cli("run", "--local", "-p", "base", "-f", "json", "-o", str(tmp_path / "fast.json"))
    # a global option before `run` is not the fast path's: Typer runs the same command
    slow = cli("--debug", "run", "--local", "-p", "base", "-f", "json", "-o", str(tmp_path / "slow.json"))
    assert fast.returncode == slow.returncode
    statuses = [
        [(c["id"], c["status"]) for c in json.loads((tmp_path / f).read_text())["hosts"][os.uname().nodename]["checks"]]
        for f in ("fast.json", "slow.json")
    ]
    assert statuses[0] == statuses[1]
    # a bad value on the fast path falls through to Typer's own error, exit 64
    bad = cli("run", "--local", "-p", "base", "-f", "yaml")
    assert bad.returncode == 64 and "yaml" in bad.stderr
    for wrong in (["--jobs", "0"], ["--timeout", "nan"], ["--by", "rack"], ["--nope"], ["extra"]):
        said = cli("run", "--local", "-p", "base", *wrong)
        assert said.returncode == 64 and "Usage: clustercheck run" in said.stderr, (wrong, said.stderr)


def test_jsonl_streams_each_host_as_it_finishes() -> None:
    proc = cli("run", "--replay", str(DEMO / "gpu001"), "--replay", str(DEMO / "gpu002"), "-p", SITE, "-f", "jsonl")
    hosts = [json.loads(line)["host"] for line in proc.stdout.splitlines()]
    assert sorted(set(hosts)) == ["gpu001", "gpu002"]
    # each host's lines come together, as a block written when it finished
    assert hosts == sorted(hosts, key=hosts.index)


def test_output_to_dev_null_writes_into_it_and_never_replaces_it() -> None:
    proc = cli("run", "--replay", str(DEMO / "gpu001"), "-f", "json", "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert Path("/dev/null").is_char_device()
