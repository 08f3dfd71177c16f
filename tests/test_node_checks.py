"""node.* checks: pure parsers on real file formats, and verdicts over edited copies of a recorded node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from clustercheck.checks.node import (
    format_cpu_list,
    parse_cpu_list,
    parse_meminfo,
    parse_modules,
    parse_taint,
    release_key,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import DEMO, cli

from clustercheck.facts.mounts import parse_mounts
from clustercheck.facts.processes import parse_process_names, parse_ps, process_names

GPU001 = DEMO / "gpu001"


def test_parse_taint() -> None:
    assert parse_taint("0\n") == []
    assert [t[0] for t in parse_taint("4097")] == ["P", "O"]
    assert [t[0] for t in parse_taint("4225")] == ["P", "D", "O"]


def test_release_key_orders_numerically() -> None:
    assert release_key("5.15.0-91-generic") < release_key("5.15.0-101-generic")
    assert release_key("5.14.0-362.8.1.el9_3.x86_64") >= release_key("5.14")
    assert release_key("6.8.0-1015-nvidia+") == (6, 8, 0, 1015)


def test_parse_meminfo_recorded() -> None:
    info = parse_meminfo((GPU001 / "files/proc/meminfo").read_text())
    assert info["MemTotal"] == 24684096 * 1024
    assert "HugePages_Total" in info  # a count, not kB
    assert info["HugePages_Total"] == 0


def test_cpu_lists_round_trip() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert parse_cpu_list("\n") == set()


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=200))
@settings(max_examples=200, deadline=None)
def test_cpu_list_property(cpus: set[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


def test_parse_mounts_unescapes_and_keeps_options() -> None:
    mounts = parse_mounts((GPU001 / "files/proc/mounts").read_text() + "srv:/a\\040b /mnt/a\\040b nfs ro,hard 0 0\n")
    assert mounts["/scratch"]["type"] == "nfs4"
    options = mounts["/scratch"]["options"]
    assert isinstance(options, list) and "rsize=1048576" in options
    assert mounts["/mnt/a b"]["source"] == "srv:/a b"


def test_process_names_cover_truncated_comm_and_retitled_daemons() -> None:
    (listing,) = (GPU001 / "commands").glob("sh_-c_out_ps_-e*/stdout")
    names = parse_process_names(listing.read_text())
    assert {"sshd", "nvidia-persistenced", "nvidia-persiste", "slurmd", "munged"} <= names
    assert process_names("sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups") == {"sshd"}


def test_the_names_listing_gives_the_names_a_full_ps_listing_gives(tmp_path: Path) -> None:
    """PROCESS_NAMES (comm and argv[0]'s base name) answers to the same names as parse_ps +
    process_names over one real full listing of this machine, and holds no argument of any
    process. The script runs as the node runs it, with a `ps` on PATH printing that listing."""
    from clustercheck.facts.processes import PROCESS_NAMES

    full = subprocess.run(["ps", "-e", "-ww", "-o", "comm=", "-o", "args="], capture_output=True, text=True).stdout
    full += "sshd            sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups\nbash -bash\n"
    (tmp_path / "listing").write_text(full)
    (tmp_path / "ps").write_text(f"#!/bin/sh\ncat {tmp_path / 'listing'}\n")
    (tmp_path / "ps").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    names = subprocess.run(PROCESS_NAMES, capture_output=True, text=True, check=True, env=env).stdout
    assert parse_process_names(names) == {n for c, a in parse_ps(full) for n in process_names(c, a)}
    assert all(len(line.split()) <= 2 for line in names.splitlines())
    assert "-ww" not in names and "listener" not in names
    (tmp_path / "ps").write_text("#!/bin/sh\necho 'ps: cannot read /proc' >&2\nexit 1\n")
    failed = subprocess.run(PROCESS_NAMES, capture_output=True, text=True, env=env)
    assert failed.returncode == 1  # ps's own failure is kept, not an empty listing that exits 0


def test_services_records_process_names_never_command_lines(tmp_path: Path) -> None:
    """A full `ps` listing put every user's arguments into fixtures; only names are recorded now."""
    marker = "an-argument-of-a-users-process-4b1d"  # a plain argument, no shape redaction knows
    sleeper = subprocess.Popen(["sleep", "600"])
    holder = subprocess.Popen(["sh", "-c", f"sleep 601; : {marker}"])
    try:
        for proc_, word in ((sleeper, b"600"), (holder, marker.encode())):  # exec'd, command line in place
            while word not in Path(f"/proc/{proc_.pid}/cmdline").read_bytes():
                time.sleep(0.01)
        profile = tmp_path / "p.yaml"
        profile.write_text("checks:\n  node.services: {running: [sleep]}\n")
        out = tmp_path / "fx"
        proc = cli("record", "--profile", str(profile), "--local", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
    finally:
        for proc_ in (sleeper, holder):
            proc_.kill()
            proc_.wait()
    recorded = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert marker not in recorded
    (stdout,) = (out / "commands").glob("*/stdout")
    assert "sleep sleep" in stdout.read_text().splitlines()
    replay = cli("run", "--replay", str(out), "--format", "json")
    (host,) = json.loads(replay.stdout)["hosts"].values()
    assert [(c["id"], c["status"]) for c in host["checks"]] == [("node.services", "ok")]


def test_services_cannot_tell_from_an_empty_listing(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    (listing,) = (fixture / "commands").glob("sh_-c_out_ps_-e*/stdout")
    listing.write_text("")
    check = run_one(fixture, "node.services", {"running": ["slurmd"]})
    assert (check["status"], check["summary"]) == ("error", "cannot tell: `ps -e` listed no processes")


def test_parse_modules() -> None:
    mods = parse_modules((GPU001 / "files/proc/modules").read_text())
    assert {"nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_core"} <= mods


@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_parsers_take_garbage_without_crashing(text: str) -> None:
    parse_meminfo(text)
    parse_mounts(text)
    parse_ps(text)
    parse_modules(text)


# -- verdicts over edited copies of the recorded healthy node ------------------------------------


def variant(tmp_path: Path, edits: dict[str, str]) -> Path:
    fixture = tmp_path / "node"
    shutil.copytree(GPU001, fixture)
    for rel, text in edits.items():
        (fixture / rel).write_text(text)
    return fixture


def run_one(fixture: Path, check_id: str, params: dict[str, object]) -> dict[str, object]:
    profile = fixture.parent / "profile.yaml"
    profile.write_text(yaml.safe_dump({"checks": {check_id: params}}))
    proc = cli("run", "--replay", str(fixture), "--profile", str(profile), "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    check: dict[str, Any]
    (check,) = json.loads(proc.stdout)["hosts"]["gpu001"]["checks"]
    return check


def test_mounts_read_only_and_wrong_type(tmp_path: Path) -> None:
    mounts = (GPU001 / "files/proc/mounts").read_text().replace("/scratch nfs4 rw,", "/scratch nfs4 ro,")
    fixture = variant(tmp_path, {"files/proc/mounts": mounts})
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"], "types": ["lustre"]})
    assert check["status"] == "fail"
    assert check["summary"] == "/scratch is nfs4, expected lustre; /scratch is mounted read-only, expected read-write"
    assert run_one(fixture, "storage.mounts", {"paths": ["/scratch"], "rw": False})["status"] == "ok"


def test_mounts_missing(tmp_path: Path) -> None:
    check = run_one(variant(tmp_path, {}), "storage.mounts", {"paths": ["/lustre"]})
    assert (check["status"], check["summary"]) == ("fail", "/lustre is not mounted")


def test_kernel_allowed_and_minimum(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    assert run_one(fixture, "node.kernel", {"allowed": ["5.15.0-*-generic"]})["status"] == "ok"
    check = run_one(fixture, "node.kernel", {"allowed": ["6.8.0-*"]})
    assert check["summary"] == "kernel 5.15.0-91-generic, expected one of 6.8.0-*"
    check = run_one(fixture, "node.kernel", {"min_release": "5.15.0-101"})
    assert (check["status"], check["summary"]) == (
        "fail",
        "kernel 5.15.0-91-generic is older than the minimum 5.15.0-101",
    )


def test_cpu_count_and_governor(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    check = run_one(fixture, "node.cpu", {"expected": 224})
    assert (check["status"], check["summary"]) == ("fail", "2 CPUs online, expected 224")
    # the governor needs a recording of the grep over cpufreq: replay says what to re-record
    check = run_one(fixture, "node.cpu", {"governor": "performance"})
    assert check["status"] == "error"
    assert "no recording of `sh -c 'grep -H . /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor'`" in str(
        check["summary"]
    )


def test_services_units_through_systemctl(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    cmd = fixture / "commands" / "systemctl_is-active"
    cmd.mkdir()
    argv = ["systemctl", "is-active", "nvidia-persistenced", "nvidia-fabricmanager"]
    (cmd / "command.yaml").write_text(yaml.safe_dump({"argv": argv, "exit_code": 3, "duration_s": 0.01}))
    (cmd / "stdout").write_text("active\nfailed\n")
    check = run_one(fixture, "node.services", {"units": ["nvidia-persistenced", "nvidia-fabricmanager"]})
    assert (check["status"], check["summary"]) == ("fail", "unit nvidia-fabricmanager is failed")


def test_memory_available(tmp_path: Path) -> None:
    check = run_one(variant(tmp_path, {}), "node.memory", {"min_total": "16GiB", "min_available": "1TiB"})
    assert (check["status"], check["summary"]) == ("fail", "23.2 GiB of memory available, expected at least 1 TiB")


@pytest.mark.parametrize(
    ("online", "message"),
    [
        ("0-999999999999\n", "'0-999999999999' is not a range of CPU numbers below 65536"),
        ("0-" + "9" * 5000 + "\n", "/sys/devices/system/cpu/online is not a CPU list: "),
        ("3-1\n", "'3-1' is not a range of CPU numbers below 65536"),
        ("zero\n", "/sys/devices/system/cpu/online is not a CPU list: "),
    ],
)
def test_cpu_lists_a_node_could_not_have_are_an_error_not_a_hang(tmp_path: Path, online: str, message: str) -> None:
    """A hostile fixture or node: `0-999999999999` once meant a set of 10^12 CPUs, filling the memory."""
    check = run_one(variant(tmp_path, {"files/sys/devices/system/cpu/online": online}), "node.cpu", {})
    assert check["status"] == "error"
    assert message in str(check["summary"]) and str(check["summary"]).startswith("cannot tell: ")


def test_an_empty_cpu_list_is_no_evidence(tmp_path: Path) -> None:
    cpu = "files/sys/devices/system/cpu"
    check = run_one(variant(tmp_path, {f"{cpu}/online": "\n", f"{cpu}/present": "\n"}), "node.cpu", {})
    assert check["status"] == "error"
    assert check["summary"] == "cannot tell: /sys/devices/system/cpu/present lists no CPUs"
