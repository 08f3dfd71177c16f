"""gpu.* checks: the kernel-log and version-file parsers on real lines, and every check's
verdicts over edited copies of the H100 fixture and records of the real corpus GPUs."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from clustercheck.checks.gpu import XID_CATALOG, parse_nvidia_version_file, parse_xids
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli

from clustercheck import Host, registry, runner
from clustercheck.probes.nvml import parse_nvidia_smi_xml
from clustercheck.profile import CheckConfig
from clustercheck.result import CheckResult
from clustercheck.transports.fixture import Fixture, ReplayTransport

HEALTHY = FIXTURES / "gpu-h100" / "healthy"
SMI = CORPUS / "nvidia_smi"


# the commands a test fixture answers: argv -> (exit code, stdout, stderr)
Commands = dict[tuple[str, ...], tuple[int, str, str]]


def healthy_record() -> dict[str, Any]:
    record: dict[str, Any] = json.loads((HEALTHY / "probes/nvml.json").read_text())
    return record


def node(
    tmp_path: Path,
    *,
    record: dict[str, Any] | None = None,
    files: dict[str, str | None] | None = None,
    commands: Commands | None = None,
) -> Path:
    """A copy of the healthy H100 fixture with the given record, files (None: absent) and commands."""
    folder = tmp_path / "node"
    shutil.copytree(HEALTHY, folder)
    if record is not None:
        (folder / "probes/nvml.json").write_text(json.dumps(record))
    meta = yaml.safe_load((folder / "fixture.yaml").read_text())
    for path, text in (files or {}).items():
        local = folder / "files" / path.lstrip("/")
        if text is None:
            local.unlink(missing_ok=True)
            meta["absent"] = [*meta.get("absent", []), path]
        else:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(text)
    for n, (argv, (code, out, err)) in enumerate((commands or {}).items()):
        cmd = folder / "commands" / f"test-{n}"
        cmd.mkdir(parents=True)
        (cmd / "command.yaml").write_text(yaml.safe_dump({"argv": list(argv), "exit_code": code, "duration_s": 0.01}))
        (cmd / "stdout").write_text(out)
        (cmd / "stderr").write_text(err)
    (folder / "fixture.yaml").write_text(yaml.safe_dump(meta))
    return folder


def run(folder: Path, check_id: str, **params: Any) -> CheckResult:
    """Run one check on a fixture through the runner (so errors are results, as in a real run)."""
    spec = registry.lookup(check_id)
    assert spec is not None
    values = {p.name: p.default for p in spec.params if not p.required} | params
    host = Host(ReplayTransport(Fixture.load(folder)))
    return runner.run_one(host, CheckConfig(check_id, values, 30.0, "test"))


def corpus_record(name: str) -> dict[str, Any]:
    record = parse_nvidia_smi_xml((SMI / name).read_text()).to_json()
    return record


# -- parsers on real text ----------------------------------------------------------------------


def test_xid_lines_from_real_logs() -> None:
    # quoted from NVIDIA/open-gpu-kernel-modules#1151, NVIDIA/NVSentinel#155, a 2017 syslog
    # paste, stas00/ml-engineering and the journalctl -k format
    log = (
        "May 18 19:02:39 kernel: NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae\n"
        "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
        "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.\n"
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
        "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.)\n"
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.\n"
        "[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff\n"
        "Okt 06 17:59:27 balrog kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.\n"
    )
    events = parse_xids(log)
    assert [(e.xid, e.pci) for e in events] == [
        (79, "0000:2b:00"),  # once, although the GPU-at and fallen-off lines surround it
        (79, "0000:b3:00"),  # no Xid line at all: still XID 79
        (79, "0000:03:00"),
        (63, "0000:10:1c"),
        (3, "0000:01:00"),
        (79, "0000:01:00"),
    ]
    assert events[1].uptime_s == 1843.308145 and events[0].uptime_s is None
    assert events[-1].message == "GPU has fallen off the bus."  # pid=... dropped
    assert [e.fatal for e in events] == [True, True, True, False, True, True]


def test_xid_catalog_is_nvidias() -> None:
    # NVIDIA's immediate actions for the XIDs admins meet most (NVSentinel's catalog mapping)
    assert {
        x: (XID_CATALOG[x].action, XID_CATALOG[x].fatal) for x in (13, 31, 43, 48, 63, 64, 74, 79, 94, 95, 119)
    } == {
        13: ("RESTART_APP", False),
        31: ("RESTART_APP", False),
        43: ("IGNORE", False),
        48: ("WORKFLOW_XID_48", True),
        63: ("IGNORE", False),
        64: ("RESET_GPU", True),
        74: ("WORKFLOW_NVLINK_ERR", True),
        79: ("RESTART_BM", True),
        94: ("RESTART_APP", False),
        95: ("RESET_GPU", True),
        119: ("RESET_GPU", True),
    }
    assert sorted(XID_CATALOG) == list(range(1, 162))


def test_xid_154_takes_the_recovery_action_from_its_message() -> None:
    log = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)\n"
    (event,) = parse_xids(log)
    assert event.fatal and event.action == "GPU Reset Required"
    (none,) = parse_xids(log.replace("0x1 (GPU Reset Required)", "0x0 (None)"))
    assert not none.fatal


def test_xid_154_action_stays_linear_on_a_line_of_many_parentheses() -> None:
    # the old pattern was quadratic in "(": 10k of them took about a second, holding the GIL
    line = "NVRM: Xid (PCI:0000:18:00): 154, " + "(" * 200_000 + " (GPU Reset Required)\n"
    start = time.monotonic()
    (event,) = parse_xids(line)
    assert event.action == "GPU Reset Required"
    assert time.monotonic() - start < 2.0  # generous: linear takes milliseconds


@given(st.text(max_size=400))
@settings(max_examples=200, deadline=None)
def test_xid_parser_takes_any_text(text: str) -> None:
    for event in parse_xids(text + "\nNVRM: Xid (PCI:0000:18:00): 79, x\n"):
        assert event.xid >= 0 and event.line >= 1


def test_nvidia_version_file_proprietary_and_open() -> None:
    assert parse_nvidia_version_file((HEALTHY / "files/proc/driver/nvidia/version").read_text()) == ("550.54.15", False)
    open_module = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:16:25 UTC 2024\nGCC version:  gcc version 12.3.0\n"
    )
    assert parse_nvidia_version_file(open_module) == ("550.54.15", True)
    assert parse_nvidia_version_file("garbage\n") == (None, False)


# -- no driver ---------------------------------------------------------------------------------


def test_no_driver_fails_count_and_skips_the_rest(tmp_path: Path) -> None:
    record: dict[str, Any] = {
        "source": "nvml",
        "error": "NVML library not found (libnvidia-ml.so.1), and no nvidia-smi on PATH",
        "driver_version": None,
        "cuda_version": None,
        "gpus": [],
    }
    folder = node(tmp_path, record=record, files={"/proc/driver/nvidia/version": None})
    count = run(folder, "gpu.count", expected=8)
    assert count.status.value == "fail"
    assert count.summary.startswith("0 GPUs visible, expected 8: NVML library not found")
    for check_id in (
        "gpu.model",
        "gpu.ecc",
        "gpu.pcie_link",
        "gpu.persistence_mode",
        "gpu.throttle",
        "gpu.isolation",
        "gpu.peermem",
        "gpu.driver",
        "stack.cuda_compat",
    ):
        params = {"expected": "H100"} if check_id == "gpu.model" else {}
        if check_id == "stack.cuda_compat":
            params = {"cuda_version": "12.4"}
        result = run(folder, check_id, **params)
        assert result.status.value == "skip", (check_id, result.summary)
        assert "NVML library not found" in result.summary


def test_no_driver_on_this_machine_over_the_cli(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("name: t\nchecks:\n  gpu.count: {expected: 8}\n  gpu.ecc:\n")
    proc = cli("run", "--local", "--profile", profile, "--format", "json")
    checks = {c["id"]: c for c in json.loads(proc.stdout)["hosts"].popitem()[1]["checks"]}
    if checks["gpu.count"]["data"]["visible"]:  # pragma: no cover - a machine with GPUs
        pytest.skip("this machine has NVIDIA GPUs")
    assert proc.returncode == 2
    assert checks["gpu.count"]["summary"].startswith("0 GPUs visible, expected 8: ")
    assert checks["gpu.ecc"]["status"] == "skip"


# -- count, model, driver ----------------------------------------------------------------------


def test_count_and_model_on_the_h100_fixture(tmp_path: Path) -> None:
    folder = node(tmp_path)
    assert run(folder, "gpu.count", expected=8).summary == "8 GPUs visible: NVIDIA H100 80GB HBM3"
    assert run(folder, "gpu.count", expected=4).summary == "8 GPUs visible, expected 4"
    assert run(folder, "gpu.count").status.value == "ok"
    assert run(folder, "gpu.model", expected="h100").summary == "8 x NVIDIA H100 80GB HBM3"
    wrong = run(folder, "gpu.model", expected="A100")
    assert wrong.status.value == "fail" and "GPU 0 (GPU-" in wrong.summary and "expected A100" in wrong.summary


def test_mixed_models_fail(tmp_path: Path) -> None:
    record = healthy_record()
    record["gpus"][7]["name"] = "NVIDIA H100 PCIe"
    result = run(node(tmp_path, record=record), "gpu.model", expected="H100")
    assert result.status.value == "fail" and result.summary.startswith("mixed GPU models")


def test_driver_kernel_module_mismatch_after_an_upgrade(tmp_path: Path) -> None:
    record = healthy_record()
    record["driver_version"] = "550.90.07"  # libraries upgraded, module of the old driver still loaded
    result = run(node(tmp_path, record=record), "gpu.driver")
    assert result.status.value == "fail"
    assert "kernel module 550.54.15 but user-space driver 550.90.07" in result.summary


def test_driver_minimum_and_exact(tmp_path: Path) -> None:
    folder = node(tmp_path)
    assert run(folder, "gpu.driver", min_version="535.104.05").status.value == "ok"
    old = run(folder, "gpu.driver", min_version="550.90.07")
    assert old.status.value == "fail" and "older than the minimum 550.90.07" in old.summary
    assert run(folder, "gpu.driver", exact="550.54.15").status.value == "ok"
    assert run(folder, "gpu.driver", exact="550.90.07").status.value == "fail"
    assert run(folder, "gpu.driver", min_version="five-fifty").status.value == "error"


# -- health -------------------------------------------------------------------------------------


def test_ecc_failures_name_index_and_uuid(tmp_path: Path) -> None:
    record = healthy_record()
    record["gpus"][1].update(remap_failure=True)
    result = run(node(tmp_path, record=record), "gpu.ecc")
    uuid = record["gpus"][1]["uuid"]
    assert result.status.value == "fail" and f"GPU 1 ({uuid}, 00000000:2A:00.0): row remapping failed" in result.summary


def test_ecc_on_the_t4_uses_page_retirement(tmp_path: Path) -> None:
    record = corpus_record("telegraf-nvidia-smi-q-x-TeslaT4-515.xml.txt")
    assert run(node(tmp_path, record=record), "gpu.ecc").status.value == "ok"
    record["gpus"][0]["retired_pages_pending"] = True
    pending = run(node(tmp_path / "b", record=record), "gpu.ecc")
    assert pending.status.value == "fail" and "pages pending retirement" in pending.summary


def test_ecc_disabled_and_mode_change_pending(tmp_path: Path) -> None:
    record = healthy_record()
    record["gpus"][0].update(ecc_current=False, ecc_pending=False)
    assert "ECC is disabled" in run(node(tmp_path, record=record), "gpu.ecc").summary
    assert run(node(tmp_path / "b", record=record), "gpu.ecc", require_enabled=False).status.value == "ok"
    record = healthy_record()
    record["gpus"][0].update(ecc_pending=False)
    assert run(node(tmp_path / "c", record=record), "gpu.ecc").status.value == "warn"


def test_pcie_width_always_gen_only_when_asked(tmp_path: Path) -> None:
    # the real A10G of an AWS g5 VM: Gen 1 of 4 (idle) at x8 of x16, on a root bus (no port above it)
    folder = node(tmp_path, record=corpus_record("telegraf-nvidia-smi-q-x-A10G-515.xml.txt"))
    width = run(folder, "gpu.pcie_link")
    assert width.status.value == "warn", width  # not a fail: a downgrade cannot be told from the design
    assert "x8 of x16, slot width unknown" in width.summary and width.action == "INVESTIGATE"
    assert "expected_width" in width.remedy
    assert run(folder, "gpu.pcie_link", expected_width=8).status.value == "ok"
    below = run(folder, "gpu.pcie_link", expected_width=16)
    assert below.status.value == "fail" and "PCIe link x8, expected x16 (GPU max x16)" in below.summary
    gen = run(folder, "gpu.pcie_link", expected_width=8, check_gen=True)
    assert gen.status.value == "warn" and "PCIe Gen 1, expected Gen 4" in gen.summary
    assert run(folder, "gpu.pcie_link", expected_width=8, check_gen=True, expected_gen=1).status.value == "ok"


# The place of GPU 0 (bus 19) of an HGX H100 in /sys/devices, from the bridges of the real
# `lspci -vvv` tests/corpus/pcie/gpud-lspci-vvv-hgx-8xH100-pex890xx-cx7.txt: root port 15:01.0,
# PEX890xx switch 16:00.0, its downstream port 17:01.0 (LnkCap x16), the GPU 19:00.0.
H100_GPU0_SYSFS = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"


def h100_q_record() -> dict[str, Any]:
    from clustercheck.facts.nvidia_smi import parse_nvidia_smi_q

    text = (SMI / "gpud-nvidia-smi-q-8xH100-535.161.08-fabric-completed.txt").read_text()
    return parse_nvidia_smi_q(text).to_json()


def test_pcie_downgrade_against_gpu_and_slot(tmp_path: Path) -> None:
    record = h100_q_record()
    record["gpus"][0]["pcie_width_current"] = 8  # edited: GPU 0 trained at x8 (a bad riser)
    readlink: Commands = {("readlink", "-f", "/sys/bus/pci/devices/0000:19:00.0"): (0, H100_GPU0_SYSFS + "\n", "")}
    port = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/max_link_width"
    down = run(node(tmp_path / "a", record=record, commands=readlink, files={port: "16\n"}), "gpu.pcie_link")
    assert down.status.value == "fail" and down.action == "REPLACE_HW"
    assert "GPU 0 (GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa, 00000000:19:00.0): PCIe link x8, max x16" in down.summary
    assert "upstream port 0000:17:01.0: max_link_width 16" in "\n".join(down.evidence)
    # the same GPU in a slot wired x8: narrower by design, not a fault
    design = run(node(tmp_path / "b", record=record, commands=readlink, files={port: "8\n"}), "gpu.pcie_link")
    assert design.status.value == "ok" and "1 narrower by design" in design.summary, design
    # the slot cannot be read (no recording): judged against the GPU alone, as before
    unread = run(node(tmp_path / "c", record=record), "gpu.pcie_link")
    assert unread.status.value == "fail" and "slot not read" in "\n".join(unread.evidence)
    # all at full width: the slot is never asked
    assert run(node(tmp_path / "d", record=h100_q_record()), "gpu.pcie_link").summary == (
        "8 GPUs at full PCIe link width"
    )


def test_persistence_mode(tmp_path: Path) -> None:
    assert run(node(tmp_path), "gpu.persistence_mode").summary == "persistence mode enabled on 8 GPUs"
    a100 = node(tmp_path / "b", record=corpus_record("telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535.xml.txt"))
    off = run(a100, "gpu.persistence_mode")
    assert off.status.value == "fail" and off.summary == "persistence mode disabled on GPU 0, expected enabled"
    assert run(a100, "gpu.persistence_mode", expected=False).status.value == "ok"


def test_throttle_reasons_and_temperature(tmp_path: Path) -> None:
    record = healthy_record()
    record["gpus"][4]["clocks_event_reasons"] = ["hw_slowdown", "hw_power_brake_slowdown"]
    hot = run(node(tmp_path, record=record), "gpu.throttle")
    assert hot.status.value == "fail" and "hw_slowdown, hw_power_brake_slowdown active" in hot.summary
    record = healthy_record()
    record["gpus"][4]["clocks_event_reasons"] = ["sw_thermal_slowdown"]
    assert run(node(tmp_path / "b", record=record), "gpu.throttle").status.value == "warn"
    healthy = node(tmp_path / "c")
    assert run(healthy, "gpu.throttle").summary == "8 GPUs: no hardware slowdown, hottest 32 °C"
    assert "32 °C, expected at most 30 °C" in run(healthy, "gpu.throttle", max_temperature=30).summary
    bad = run(healthy, "gpu.throttle", fail_on=("hw_slowdwn",))
    assert bad.status.value == "error" and "unknown clock event reasons hw_slowdwn" in bad.summary


def test_isolation_mig_and_compute_mode(tmp_path: Path) -> None:
    a100 = node(tmp_path, record=corpus_record("telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535.xml.txt"))
    assert "MIG enabled, expected disabled" in run(a100, "gpu.isolation", mig="disabled").summary
    assert run(a100, "gpu.isolation", mig="enabled").status.value == "ok"
    multi = run(a100, "gpu.isolation", compute_mode="exclusive_process")
    assert multi.status.value == "fail" and "compute mode DEFAULT, expected EXCLUSIVE_PROCESS" in multi.summary
    record = healthy_record()
    record["gpus"][0]["mig_pending"] = True
    assert (
        "MIG change to enabled pending a GPU reset" in run(node(tmp_path / "b", record=record), "gpu.isolation").summary
    )
    assert run(a100, "gpu.isolation", mig="sometimes").status.value == "error"


# -- XID through the kernel log ------------------------------------------------------------------


def test_xid_falls_back_to_the_journal_where_dmesg_is_refused(tmp_path: Path) -> None:
    journal = (
        "[86412.190240] gpu017 kernel: NVRM: Xid (PCI:0000:5d:00): 95, pid=2207, name=python, Uncontained: FBHUB.\n"
    )
    folder = node(
        tmp_path,
        commands={
            ("dmesg",): (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"),
            ("journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"): (0, journal, ""),
        },
    )
    # the healthy fixture's own dmesg recording is replaced by the refused one
    shutil.rmtree(folder / "commands" / "dmesg")
    result = run(folder, "gpu.xid")
    assert result.status.value == "fail"
    assert result.summary.startswith("XID 95 on GPU 0000:5d:00 (Uncontained: FBHUB): drain the node and reset the GPU")
    assert result.data["source"] == "journalctl -k -b"
    assert run(folder, "gpu.xid", ignore=("95",)).status.value == "ok"


def test_xid_application_faults_pass_unknown_ones_warn(tmp_path: Path) -> None:
    log = (HEALTHY / "commands/dmesg/stdout").read_text() + (
        "[90000.000001] NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x50\n"
    )
    app = node(tmp_path, commands={("dmesg",): (0, log, "")})
    shutil.rmtree(app / "commands" / "dmesg")
    result = run(app, "gpu.xid")
    assert result.status.value == "ok" and result.summary == "no fatal XID since boot (non-fatal: XID 13)"
    future = node(tmp_path / "b", commands={("dmesg",): (0, log.replace(": 13,", ": 999,"), "")})
    shutil.rmtree(future / "commands" / "dmesg")
    assert run(future, "gpu.xid").status.value == "warn"


def test_xid_without_any_kernel_log_is_an_error(tmp_path: Path) -> None:
    folder = node(
        tmp_path,
        commands={
            ("dmesg",): (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"),
            ("journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"): (
                1,
                "",
                "No journal files were found.\n",
            ),
        },
    )
    shutil.rmtree(folder / "commands" / "dmesg")
    result = run(folder, "gpu.xid")
    assert result.status.value == "error" and "cannot read the kernel log" in result.summary


# What a user who may not read the kernel log gets on this test machine (kernel.dmesg_restrict=1,
# journald running): `su nobody -c 'dmesg'` exits 1 with this message, and
# `journalctl -k -b -o short-monotonic --no-pager -q` exits 0 and prints nothing at all.
DMESG_REFUSED = (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")
JOURNAL = ("journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q")


def test_xid_with_dmesg_refused_and_a_silent_journal_cannot_tell(tmp_path: Path) -> None:
    folder = node(tmp_path, commands={("dmesg",): DMESG_REFUSED, JOURNAL: (0, "", "")})
    shutil.rmtree(folder / "commands" / "dmesg")
    result = run(folder, "gpu.xid")
    assert result.status.value == "error", result
    assert "journalctl -k -b` printed nothing" in result.summary and "Operation not permitted" in result.summary


def test_xid_reads_the_journal_when_dmesg_is_refused(tmp_path: Path) -> None:
    log = (HEALTHY / "commands/dmesg/stdout").read_text()
    folder = node(tmp_path, commands={("dmesg",): DMESG_REFUSED, JOURNAL: (0, log, "")})
    shutil.rmtree(folder / "commands" / "dmesg")
    result = run(folder, "gpu.xid")
    assert result.status.value == "ok" and "journalctl -k -b" in result.evidence[0]


def test_xid_on_a_cleared_kernel_log_says_so(tmp_path: Path) -> None:
    folder = node(tmp_path, commands={("dmesg",): (0, "", "")})  # `dmesg --clear` as root, then dmesg
    shutil.rmtree(folder / "commands" / "dmesg")
    result = run(folder, "gpu.xid")
    assert result.status.value == "ok" and "the kernel log is empty" in result.summary


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_xid_as_a_user_denied_the_kernel_log_is_an_error_not_ok(tmp_path: Path) -> None:
    # what this machine's dmesg and journalctl really answer a user who may not read the kernel log
    restricted = Path("/proc/sys/kernel/dmesg_restrict")
    if not restricted.exists() or restricted.read_text().strip() != "1" or not shutil.which("journalctl"):
        pytest.skip("needs kernel.dmesg_restrict=1 and journalctl")
    answers: Commands = {}
    for argv in (("dmesg",), JOURNAL):
        proc = subprocess.run(
            ["su", "nobody", "-s", "/bin/sh", "-c", " ".join(argv)], capture_output=True, text=True, timeout=30
        )
        answers[argv] = (proc.returncode, proc.stdout, proc.stderr)
    assert answers[("dmesg",)][0] != 0  # refused, as DMESG_REFUSED says
    folder = node(tmp_path, commands=answers)
    shutil.rmtree(folder / "commands" / "dmesg")
    result = run(folder, "gpu.xid")
    if answers[JOURNAL][1].strip():  # a journal this user may read: then it is the evidence
        assert result.status.value == "ok" and "journalctl -k -b" in result.evidence[0]
    else:
        assert result.status.value == "error" and "printed nothing" in result.summary, result


def test_xid_since_the_previous_prolog_judges_each_event_once(tmp_path: Path) -> None:
    """gpu.xid {since: previous}: a marker beside the prolog's state file (boot id, last uptime stamp)."""
    boot = "ab7ffac4-ae41-4842-9e0c-0a3e8e94d6e1\n"  # /proc/sys/kernel/random/boot_id of this test machine
    fell_off = (FIXTURES / "gpu-h100/xid79-fell-off-bus/commands/dmesg/stdout").read_text()
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  gpu.xid: {since: previous}\n")

    def prolog(log: str, name: str) -> dict[str, Any]:
        folder = node(
            tmp_path / name, files={"/proc/sys/kernel/random/boot_id": boot}, commands={("dmesg",): (0, log, "")}
        )
        shutil.rmtree(folder / "commands" / "dmesg")
        state = tmp_path / "state" / "s.json"
        proc = cli("prolog", "--replay", folder, "--profile", profile, "--state-file", state, "--syslog-socket", "")
        assert proc.returncode in (0, 2), proc.stderr
        checks: list[dict[str, Any]] = json.loads(state.read_text())["checks"]
        return checks[0]

    first = prolog(fell_off, "a")
    assert first["status"] == "fail" and "XID 79" in first["summary"]  # no marker yet: the whole boot
    marker = json.loads((tmp_path / "state" / "gpu.xid.marker.json").read_text())
    assert marker == {"name": "gpu.xid", "boot_id": boot.strip(), "uptime_s": 86412.190244}
    again = prolog(fell_off, "b")
    assert again == {"id": "gpu.xid", "status": "ok", "summary": "no XID events since the previous run"}
    later = (
        fell_off
        + "[90000.500000] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
        + "GPU has fallen off the bus.\n"
    )
    assert prolog(later, "c")["status"] == "fail"
    other_boot = node(
        tmp_path / "e",
        files={"/proc/sys/kernel/random/boot_id": boot.replace("ab7f", "0000")},
        commands={("dmesg",): (0, fell_off, "")},
    )
    shutil.rmtree(other_boot / "commands" / "dmesg")
    proc = cli(
        "prolog",
        "--replay",
        other_boot,
        "--profile",
        profile,
        "--state-file",
        tmp_path / "state" / "s.json",
        "--syslog-socket",
        "",
    )
    assert proc.returncode == 2  # a new boot: its whole log is judged again
    # `run` keeps no marker: it always judges the whole boot
    assert (
        run(node(tmp_path / "f", commands={("dmesg",): (0, fell_off, "")}), "gpu.xid", since="previous").status.value
        == "fail"
    )


# -- GPUDirect RDMA ----------------------------------------------------------------------------

OPEN_550 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:16:25 UTC 2024\n"
)


def test_peermem_or_dmabuf(tmp_path: Path) -> None:
    modules = (HEALTHY / "files/proc/modules").read_text()
    no_peermem = "".join(line for line in modules.splitlines(True) if not line.startswith("nvidia_peermem "))
    dmabuf = node(tmp_path, files={"/proc/modules": no_peermem, "/proc/driver/nvidia/version": OPEN_550})
    result = run(dmabuf, "gpu.peermem")
    assert result.status.value == "ok" and "DMA-BUF is available" in result.summary
    assert run(dmabuf, "gpu.peermem", allow_dmabuf=False).status.value == "fail"
    old_kernel = node(
        tmp_path / "b",
        files={
            "/proc/modules": no_peermem,
            "/proc/driver/nvidia/version": OPEN_550,
            "/proc/sys/kernel/osrelease": "5.4.0-150-generic\n",
        },
    )
    assert "kernel 5.4.0-150-generic < 5.12" in run(old_kernel, "gpu.peermem").summary
    no_rdma = "".join(line for line in modules.splitlines(True) if "ib_" not in line.split()[0] and "mlx5" not in line)
    assert run(node(tmp_path / "c", files={"/proc/modules": no_rdma}), "gpu.peermem").status.value == "skip"


def test_legacy_nv_peer_mem_counts(tmp_path: Path) -> None:
    modules = (HEALTHY / "files/proc/modules").read_text().replace("nvidia_peermem ", "nv_peer_mem ")
    assert run(node(tmp_path, files={"/proc/modules": modules}), "gpu.peermem").summary.startswith("nv_peer_mem loaded")


# -- the record itself ---------------------------------------------------------------------------


def test_a_broken_record_is_an_error_naming_the_field(tmp_path: Path) -> None:
    record = copy.deepcopy(healthy_record())
    record["gpus"][0]["temperature_c"] = "hot"
    result = run(node(tmp_path, record=record), "gpu.throttle")
    assert result.status.value == "error" and "gpus[0].temperature_c is 'hot'" in result.summary


def test_every_gpu_check_explains_itself() -> None:
    for check_id in ("gpu.count", "gpu.ecc", "gpu.xid", "gpu.peermem", "stack.cuda_compat", "stack.nccl"):
        spec = registry.lookup(check_id)
        assert spec is not None and "Why:" in spec.doc and "How:" in spec.doc and "Fix:" in spec.doc
    names = ("count", "model", "driver", "ecc", "pcie_link", "persistence_mode", "throttle", "power", "processes")
    for check_id in [f"gpu.{n}" for n in (*names, "xid", "isolation", "peermem")]:
        spec = registry.lookup(check_id)
        assert spec is not None and spec.action, f"{check_id} names its usual action"
        assert all(w in spec.doc for w in ("Why:", "How:", "Fix:")), check_id
    proc = cli("explain", "gpu.xid")
    assert proc.returncode == 0 and "NVIDIA's XID catalog" in proc.stdout


# -- power, clocks ---------------------------------------------------------------------------------


def test_power_brake_and_hw_slowdown_fail_naming_each_gpu(tmp_path: Path) -> None:
    result = run(node(tmp_path, record=h100_q_record()), "gpu.power")  # the real 535.161.08 capture
    assert result.status.value == "fail" and result.action == "INVESTIGATE"
    assert result.summary.count("HW power brake (the chassis/PSU asserted the power-brake signal)") == 8
    assert "GPU 7 (GPU-b0fe4996-1f7c-91f6-0ccd-08ae3b7e23c5, 00000000:DB:00.0): clocks held back" in result.summary
    assert "BMC" in result.remedy
    assert result.data["facts"] == {"GPU power limit": "700 W"}


def test_power_limit_application_clocks_and_pstate(tmp_path: Path) -> None:
    a100 = corpus_record("telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535.xml.txt")  # 500 W of 500 W, clocks at default
    assert run(node(tmp_path / "a", record=a100), "gpu.power").status.value == "ok"
    capped = copy.deepcopy(a100)
    capped["gpus"][0]["power_limit_w"] = 400.0  # edited: capped with `nvidia-smi -pl 400`
    low = run(node(tmp_path / "b", record=capped), "gpu.power")
    assert low.status.value == "fail" and low.action == "FIX_CONFIG"
    assert "power limit 400 W, its default is 500 W" in low.summary and "nvidia-smi -i N -pl" in low.remedy
    assert run(node(tmp_path / "b2", record=capped), "gpu.power", power_limit=400).status.value == "ok"
    assert "the profile's is 450 W" in run(node(tmp_path / "b3", record=a100), "gpu.power", power_limit=450).summary
    slow = copy.deepcopy(a100)
    slow["gpus"][0]["clocks_app_graphics_mhz"] = 1005  # edited: `nvidia-smi -ac 1593,1005`
    pinned = run(node(tmp_path / "c", record=slow), "gpu.power")
    assert pinned.status.value == "warn" and "graphics application clock 1005 MHz, default 1275 MHz" in pinned.summary
    assert run(node(tmp_path / "c2", record=slow), "gpu.power", application_clocks=False).status.value == "ok"
    a10g = node(tmp_path / "d", record=corpus_record("telegraf-nvidia-smi-q-x-A10G-515.xml.txt"))  # idle: P8
    assert run(a10g, "gpu.power").status.value == "ok"
    assert "performance state P8, expected P0" in run(a10g, "gpu.power", performance_state="P0").summary
    assert run(a10g, "gpu.power", performance_state="fast").status.value == "error"


def test_power_not_supported_skips_with_the_reason(tmp_path: Path) -> None:
    # a GPU whose NVML answered NOT_SUPPORTED to every power, clock and clock-reason call says so
    record = healthy_record()
    unsupported = [k for k in record["gpus"][0] if k.startswith(("power_", "clocks_", "performance_state"))]
    for gpu in record["gpus"]:
        gpu.update(dict.fromkeys(unsupported), unsupported=unsupported)
    result = run(node(tmp_path, record=record), "gpu.power")
    assert result.status.value == "skip"
    assert "power limit not supported by this GPU (NVML NOT_SUPPORTED)" in result.summary


# -- processes left on a GPU -----------------------------------------------------------------------


def test_processes_left_on_a_gpu_fail_naming_pid_and_user(tmp_path: Path) -> None:
    t4 = corpus_record("telegraf-nvidia-smi-q-x-TeslaT4-515.xml.txt")  # python 5762 (1005 MiB) and Xorg (G)
    # ps's format; the user modelled
    ps: Commands = {("ps", "-o", "pid=,user=", "-p", "5762"): (0, "   5762 jdoe\n", "")}
    result = run(node(tmp_path, record=t4, commands=ps), "gpu.processes")
    assert result.status.value == "fail" and result.action == "FIX_CONFIG"
    assert result.summary == (
        "GPU 0 (GPU-d37e67a5-91dd-3774-a5cb-99096249601a, 00000000:00:1E.0): PID 5762 python "
        "(user jdoe, 1005 MiB, type C)"
    )
    assert "kill" in result.remedy and "proctrack/cgroup" in result.remedy
    gone: Commands = {("ps", "-o", "pid=,user=", "-p", "5762"): (1, "", "")}  # exited between NVML and ps
    assert "(user ?, 1005 MiB" in run(node(tmp_path / "b", record=t4, commands=gone), "gpu.processes").summary
    # Xorg alone is a graphics process: not a leftover of a compute job, unless asked
    a10g = node(tmp_path / "c", record=corpus_record("telegraf-nvidia-smi-q-x-A10G-515.xml.txt"))
    assert run(a10g, "gpu.processes").status.value == "ok"


# Slurm's cgroup v2 place of a job's task (system.slice/<node>_slurmstepd.scope/job_<id>/step_<id>/user/task_<n>)
JOB_CGROUP = "0::/system.slice/gpu001_slurmstepd.scope/job_4242/step_0/user/task_0\n"


def test_a_running_jobs_process_is_no_leftover_outside_its_prolog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t4 = corpus_record("telegraf-nvidia-smi-q-x-TeslaT4-515.xml.txt")  # python 5762 (1005 MiB)
    busy = node(tmp_path / "a", record=t4, files={"/proc/5762/cgroup": JOB_CGROUP})
    result = run(busy, "gpu.processes")  # as `health` sees a node running job 4242
    assert result.status.value == "ok", result
    assert "PID 5762 belongs to running job 4242" in "\n".join(result.evidence)
    # in the prolog of another job, that process holds the new job's GPU
    monkeypatch.setenv("SLURM_JOB_ID", "4243")
    ps: Commands = {("ps", "-o", "pid=,user=", "-p", "5762"): (0, "   5762 jdoe\n", "")}
    other = node(tmp_path / "b", record=t4, files={"/proc/5762/cgroup": JOB_CGROUP}, commands=ps)
    assert run(other, "gpu.processes").status.value == "fail"
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # a run inside job 4242 itself
    assert run(other, "gpu.processes").status.value == "ok"
    # a process in no job's cgroup (an sshd session's) is a leftover wherever the check runs
    monkeypatch.delenv("SLURM_JOB_ID")
    outside: dict[str, str | None] = {"/proc/5762/cgroup": "0::/user.slice/user-1000.slice/session-7.scope\n"}
    assert run(node(tmp_path / "c", record=t4, files=outside, commands=ps), "gpu.processes").status.value == "fail"


def test_memory_held_without_a_process_needs_a_reset(tmp_path: Path) -> None:
    record = h100_q_record()
    record["gpus"][3]["memory_used_mib"] = 30000  # edited: memory held, no process listed
    result = run(node(tmp_path, record=record), "gpu.processes")
    assert result.status.value == "fail" and result.action == "RESET_GPU"
    assert "GPU 3 (" in result.summary
    assert "30000 MiB of GPU memory used with no compute process listed" in result.summary
    assert run(node(tmp_path / "b", record=record), "gpu.processes", max_memory_mib=40000).status.value == "ok"


def test_processes_in_the_prolog_fail_the_job_start(tmp_path: Path) -> None:
    folder = FIXTURES / "gpu-processes-left-4090"
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  gpu.processes:\n")
    state = tmp_path / "state" / "s.json"
    proc = cli("prolog", "--replay", folder, "--profile", profile, "--state-file", state, "--syslog-socket", "")
    assert proc.returncode == 2, proc.stderr
    (result,) = json.loads(state.read_text())["checks"]
    assert result["status"] == "fail" and "PID 2010222 /usr/bin/python (user " in result["summary"]
    assert result["summary"].count("PID ") == 8


def test_processes_on_a_shared_node_judge_only_the_jobs_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = json.loads((FIXTURES / "gpu-processes-left-4090/probes/nvml.json").read_text())
    pids = [p["pid"] for g in record["gpus"] if g["index"] in (1, 6) for p in g["processes"]]
    ps: Commands = {("ps", "-o", "pid=,user=", "-p", ",".join(map(str, sorted(pids)))): (0, "", "")}
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  gpu.processes:\n")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_GPUS", "1,6")
    state = tmp_path / "state" / "s.json"

    def prolog(folder: Path) -> tuple[int, dict[str, Any]]:
        proc = cli("prolog", "--replay", folder, "--profile", profile, "--state-file", state, "--syslog-socket", "")
        (result,) = json.loads(state.read_text())["checks"]
        return proc.returncode, result

    code, result = prolog(node(tmp_path / "a", record=record, commands=ps))
    assert code == 2 and result["summary"].count("PID ") == 2, result
    assert "GPU 1 (" in result["summary"] and "GPU 6 (" in result["summary"]
    # the job's GPUs are clean: the other jobs' processes do not fail it
    for gpu in record["gpus"]:
        if gpu["index"] in (1, 6):
            gpu["processes"], gpu["memory_used_mib"] = [], 0
    code, result = prolog(node(tmp_path / "b", record=record))
    assert code == 0 and result["summary"] == "2 GPUs: no compute process, no GPU memory left", result


# -- XID chains, repeats and windows ----------------------------------------------------------------


def kernel_log_node(tmp_path: Path, log: str, **files: str) -> Path:
    folder = node(tmp_path, commands={("dmesg",): (0, log, "")}, files=dict(files) or None)
    shutil.rmtree(folder / "commands" / "dmesg")
    return folder


def test_xid_45_caused_by_an_nvlink_xid_is_an_nvlink_failure(tmp_path: Path) -> None:
    log = CORPUS / "kernel_log/issue-open-gpu-kernel-modules-1150-xid45-caused-by-previous-xid145-149-EXCERPT.txt"
    result = run(kernel_log_node(tmp_path, log.read_text()), "gpu.xid")
    assert result.status.value == "fail" and result.action == "RESET_GPU"
    assert "XID 45 on GPU 0000:dc:00 x2 caused by previous XID 149 (NVLINK_NETIR_ERROR): an NVLink failure" in (
        result.summary
    )
    for gpu in ("0000:ed:00", "0000:ba:00", "0000:97:00"):
        assert f"XID 45 on GPU {gpu}" in result.summary
    assert "nvidia-smi nvlink -s" in result.remedy
    assert {e["root_cause"] for e in result.data["events"]} == {145, 149}
    # the same XID 45 without the link is what the catalog says of it: the driver cleaned up after a killed process
    plain = log.read_text().replace(" caused by previous Xid 149", "").replace(" caused by previous Xid 145", "")
    assert run(kernel_log_node(tmp_path / "b", plain), "gpu.xid").status.value == "ok"


def test_xid_nvlink5_lines_are_judged_by_their_fatal_word(tmp_path: Path) -> None:
    lines = (CORPUS / "kernel_log/pr-gpud-1174-xid-149-145-94-kmsg-input-lines-SNIPPET.txt").read_text().splitlines()
    fatal = run(kernel_log_node(tmp_path / "a", lines[0] + "\n"), "gpu.xid")
    assert fatal.status.value == "fail" and "XID 149 on GPU 0019:01:00" in fatal.summary
    nonfatal = run(kernel_log_node(tmp_path / "b", lines[2] + "\n"), "gpu.xid")  # 145 RLW_RXPIPE Nonfatal
    assert nonfatal.status.value == "ok" and nonfatal.summary == "no fatal XID since boot (non-fatal: XID 145)"
    # an XID 45 that a non-fatal 145 on the same GPU caused is judged by that line
    chained = lines[2] + "\nNVRM: Xid (PCI:0018:01:00): 45, pid=7, name=python3, Ch 00000001 caused by previous Xid 145"
    assert run(kernel_log_node(tmp_path / "c", chained), "gpu.xid").status.value == "ok"


def test_xid_repeats_escalate_counting_each_burst_once(tmp_path: Path) -> None:
    log = (CORPUS / "kernel_log/gpud-dmesg-decode-iso-repeated-xid13-xid43.log.txt").read_text()
    folder = kernel_log_node(tmp_path, log)
    result = run(folder, "gpu.xid")
    assert result.status.value == "warn" and result.action == "INVESTIGATE"
    assert "XID 13 on GPU 0000:38:00 in 9 separate occurrences since boot" in result.summary  # of 629 lines
    assert "XID 43 on GPU 0000:38:00 in 7 separate occurrences" in result.summary
    assert "dcgmi diag -r 3" in result.remedy
    assert run(folder, "gpu.xid", repeat_threshold=10).status.value == "ok"
    assert run(folder, "gpu.xid", repeat_threshold=0).status.value == "ok"
    assert run(folder, "gpu.xid", repeat_fail=8).status.value == "fail"  # 13 fails at 9, 43 stays at 7
    one = "\n".join(log.splitlines()[:16]) + "\n"  # one burst of XID 13 and its XID 43
    assert run(kernel_log_node(tmp_path / "b", one), "gpu.xid").status.value == "ok"


# /proc/stat of this project's test machine, with its btime line set to 2025-01-21T00:00:00Z
PROC_STAT = (
    "cpu  1863453 1398 771025 98311846 41312 0 13066 0 0 0\n"
    "intr 262006153 0 9 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    "ctxt 575014356\nbtime 1737417600\nprocesses 2188131\nprocs_running 3\nprocs_blocked 0\n"
)


def test_xid_since_a_duration_or_a_time(tmp_path: Path) -> None:
    log = (CORPUS / "kernel_log/gpud-dmesg-decode-iso-repeated-xid13-xid43.log.txt").read_text()
    # up since 00:00, now 04:45 (17100 s): the XID 13 bursts run from 02:21 to 04:21
    folder = kernel_log_node(tmp_path, log, **{"/proc/stat": PROC_STAT, "/proc/uptime": "17100.00 250000.10\n"})
    recent = run(folder, "gpu.xid", since="30m")  # after 04:15: one burst
    assert recent.status.value == "ok", recent
    assert "judged: the last 30 min" in recent.evidence[0]
    assert "from before the window, not judged" in "\n".join(recent.evidence)
    since_three = run(folder, "gpu.xid", since="2025-01-21T03:00:00Z")
    assert since_three.status.value == "warn" and (
        "XID 13 on GPU 0000:38:00 in 7 separate occurrences since 2025-01-21T03:00:00Z (" in since_three.summary
    )
    assert "in 9 separate occurrences in the last 1 d (" in run(folder, "gpu.xid", since="1d").summary
    assert "in 9 separate occurrences" in run(folder, "gpu.xid", since="1d").summary
    # dmesg's uptime stamps: the XID 79 of the fell-off fixture at 86412 s, now 86500 s
    fell_off = (FIXTURES / "gpu-h100/xid79-fell-off-bus/commands/dmesg/stdout").read_text()
    stamped = kernel_log_node(tmp_path / "b", fell_off, **{"/proc/stat": PROC_STAT, "/proc/uptime": "86500.5 1.0\n"})
    assert run(stamped, "gpu.xid", since="1m").status.value == "ok"
    assert run(stamped, "gpu.xid", since="2m").status.value == "fail"


def test_xid_since_that_is_no_window_is_refused_at_the_profile_line(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  gpu.count:\n  gpu.xid: {since: yesterday}\n")
    proc = cli("run", "--replay", HEALTHY, "--profile", profile)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert f"{profile}:3" in proc.stderr and "not boot, previous, a duration" in proc.stderr


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_xid_since_parser_takes_any_text(text: str) -> None:
    from clustercheck.facts.kernel_log import parse_since

    try:
        kind, _ = parse_since(text)
    except ValueError as exc:
        assert "since:" in str(exc)
    else:
        assert kind in ("boot", "previous", "duration", "time")


def test_xid_parser_stays_linear_on_hostile_lines() -> None:
    line = "NVRM: Xid (PCI:0000:18:00): 45, " + "pid=1, " * 50_000 + "caused by previous Xid " * 2000 + "149\n"
    start = time.monotonic()
    (event,) = parse_xids(line * 3)[:1]
    assert event.xid == 45 and time.monotonic() - start < 2.0


# -- drift facts ------------------------------------------------------------------------------------


def test_firmware_ecc_and_power_limit_are_fleet_drift_facts(tmp_path: Path) -> None:
    record = h100_q_record()
    facts = run(node(tmp_path / "a", record=record), "gpu.count").data["facts"]
    assert facts == {"GPUs visible": 8, "GPU VBIOS": "96.00.74.00.0D", "GPU InfoROM": "G520.0200.00.05"}
    assert run(node(tmp_path / "b", record=record), "gpu.ecc").data["facts"] == {"GPU ECC mode": "on"}
    record["gpus"][5]["vbios_version"] = "96.00.74.00.01"  # edited: one GPU on the other node's VBIOS
    mixed = run(node(tmp_path / "c", record=record), "gpu.count").data["facts"]
    assert mixed["GPU VBIOS"] == "96.00.74.00.01, 96.00.74.00.0D"


def test_fleet_drift_names_the_node_on_other_firmware(tmp_path: Path) -> None:
    from clustercheck.analyzers.fleet import summarize
    from clustercheck.facts.nvidia_smi import parse_nvidia_smi_q
    from clustercheck.result import HostReport, Report

    # two real H100 nodes of gpud's test data: VBIOS 96.00.74.00.0D and 96.00.74.00.01
    other = parse_nvidia_smi_q((SMI / "gpud-nvidia-smi-q-8xH100-535.183.01-fabric-completed.txt").read_text()).to_json()
    hosts = []
    for n, record in enumerate([h100_q_record(), h100_q_record(), other]):
        folder = node(tmp_path / str(n), record=record)
        hosts.append(HostReport(f"gpu{n + 1:03d}", (run(folder, "gpu.count"), run(folder, "gpu.ecc"))))
    drift = {d.fact: d.to_json() for d in summarize(Report("t", "p", tuple(hosts))).drift}
    assert drift["GPU VBIOS"] == {
        "fact": "GPU VBIOS",
        "majority": "96.00.74.00.0D",
        "majority_hosts": 2,
        "others": [{"value": "96.00.74.00.01", "hosts": "gpu003", "count": 1}],
    }
    assert "GPU ECC mode" not in drift and "GPU InfoROM" not in drift  # the same on all three


def test_xid_check_stays_linear_on_a_flood_of_chained_lines(tmp_path: Path) -> None:
    # 40k XID lines: 149s and the 45s they caused on 8 GPUs (a quadratic chain walk took minutes)
    lines = []
    for n in range(20_000):
        gpu = f"0000:{0x18 + n % 8:02x}:00"
        lines.append(f"[{n}.5] NVRM: Xid (PCI:{gpu}): 149, NETIR Fatal XC0 i0 Link {n % 18} (0x0)")
        lines.append(f"[{n}.6] NVRM: Xid (PCI:{gpu}): 45, pid={n}, name=python3, Ch 0001 caused by previous Xid 149")
    folder = kernel_log_node(tmp_path, "\n".join(lines) + "\n")
    start = time.monotonic()
    result = run(folder, "gpu.xid")
    assert time.monotonic() - start < 10.0  # generous for a loaded machine: linear takes about a second
    assert result.status.value == "fail" and "caused by previous XID 149" in result.summary
    assert len(result.evidence) < 250  # the evidence is capped, the summary groups by GPU
