"""gpu.nvlink, gpu.fabric, gpu.affinity: the readers on the real corpus (tests/corpus/MANIFEST.md, section
"GPU fabric, NVLink, affinity (H1)"), garbage never a crash or a pass, and the checks through the CLI on
the replayed fixtures (fixtures/gpu-nvlink-*, gpu-fabric-*, gpu-affinity-*)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_mock import MockerFixture
from tests.helpers import CORPUS, FIXTURES, cli
from tests.test_nvml import FakeGpu, Pci, fake_nvml, not_supported

from clustercheck.facts.nvlink import (
    SXID_CLASS,
    GpuLinks,
    TopoError,
    closeness,
    expected_for,
    fabric_from_record,
    nvswitches_in_log,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_q_fabric,
    parse_sxids,
    parse_topo_matrix,
)
from clustercheck.probes import nvml

SMI = CORPUS / "nvidia_smi"
KLOG = CORPUS / "kernel_log"


def corpus(name: str) -> str:
    return (SMI / name).read_text()


def run_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("run", *args, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    (host,) = report["hosts"].values()
    check: dict[str, Any]
    (check,) = host["checks"]
    return proc.returncode, check


# -- nvidia-smi nvlink -s / -e ---------------------------------------------------------------------


def test_nvlink_status_8xa100_all_links_at_25() -> None:
    status = parse_nvlink_status(corpus("gpud-nvidia-smi-nvlink-status-8xA100.txt"))
    assert [g.index for g in status.gpus] == list(range(8))
    assert all(len(g.active) == 12 and not g.inactive for g in status.gpus)
    assert {link.speed_gbs for g in status.gpus for link in g.links} == {25.0}
    assert status.gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"


def test_nvlink_status_tab_indented_and_all_inactive() -> None:
    good = parse_nvlink_status(corpus("azurehpc-nvidia-smi-nvlink-s-8xA100-good.txt"))
    assert [(g.index, len(g.active)) for g in good.gpus] == [(7, 12)]
    bad = parse_nvlink_status(corpus("azurehpc-nvidia-smi-nvlink-s-8xA100-bad.txt"))
    (gpu,) = bad.gpus
    assert gpu.index == 6 and gpu.all_inactive and not gpu.links


def test_nvlink_status_h100_18_links_and_v100_inactive() -> None:
    h100 = parse_nvlink_status(corpus("pr-bottlerocket-4418-nvidia-smi-nvlink-status-H100-18links-EXCERPT.txt"))
    assert [(g.index, len(g.active)) for g in h100.gpus] == [(0, 18), (1, 18)]
    assert {link.speed_gbs for g in h100.gpus for link in g.links} == {26.562}
    v100 = parse_nvlink_status(corpus("issue-azhpc-diagnostics-73-nvlink-s-V100-links-3-5-inactive-EXCERPT.txt"))
    (gpu,) = v100.gpus
    assert gpu.name == "Tesla V100-SXM2-32GB"
    assert [link.link for link in gpu.inactive] == [3, 5] and len(gpu.active) == 4


def test_nvlink_status_a10_prints_nothing() -> None:
    status = parse_nvlink_status(corpus("gpud-nvidia-smi-nvlink-status-A10-no-nvlink.txt"))
    assert status.gpus == [] and status.stray == []


def test_nvlink_errors_counters() -> None:
    (gb300,) = parse_nvlink_errors(corpus("pr-srt-slurm-307-nvidia-smi-nvlink-e-gb300-SNIPPET.txt"))
    assert gb300.name == "NVIDIA GB300" and gb300.counters == {0: {"Replay": 0, "Recovery": 0, "CRC": 0}}
    a100 = parse_nvlink_errors(corpus("codeindex-8xA100-SXM4-40GB-535-nvlink-e-per-gpu-all-zero.txt"))
    assert len(a100) == 8 and all(len(g.counters) == 12 for g in a100)
    assert {v for g in a100 for c in g.counters.values() for v in c.values()} == {0}


def test_model_table() -> None:
    assert expected_for("NVIDIA A100-SXM4-80GB") == (12, 25.0)
    assert expected_for("NVIDIA H100 80GB HBM3") == (18, 26.562)
    assert expected_for("Tesla V100-SXM2-32GB") == (6, 25.781)
    assert expected_for("NVIDIA A10G") == (0, 0.0)  # unknown: nothing is learned


# -- nvidia-smi -q Fabric ---------------------------------------------------------------------------


def test_q_fabric_hgx_h100_completed() -> None:
    blocks = parse_q_fabric(corpus("gpud-nvidia-smi-q-8xH100-535.161.08-fabric-completed.txt"))
    assert len(blocks) == 8
    assert {(b.state, b.status) for b in blocks} == {("Completed", "Success")}
    assert blocks[0].bus_id == "00000000:19:00.0" and blocks[-1].bus_id == "00000000:DB:00.0"


def test_q_fabric_not_supported_on_pcie_cards() -> None:
    for name in ("gpud-nvidia-smi-q-A10-535.129.03.txt", "gpud-nvidia-smi-q-TitanV-560.35.03.txt"):
        (block,) = parse_q_fabric(corpus(name))
        assert block.state == "N/A" and not block.supported


def test_q_fabric_excerpts_failed_status_and_unhealthy() -> None:
    (azure,) = parse_q_fabric(corpus("pr-azhpc-images-506-fabric-completed-insufficient-resources-clique0-SNIPPET.txt"))
    assert (azure.state, azure.status, azure.clique_id) == ("Completed", "Insufficient Resources", "0")
    (mnnvl,) = parse_q_fabric(corpus("issue-dra-driver-626-nvidia-smi-q-grep-fabric-completed-health-unhealthy.txt"))
    assert (mnnvl.state, mnnvl.status, mnnvl.health, mnnvl.clique_id) == ("Completed", "Success", "Unhealthy", "2")


def test_q_fabric_truncated_file_has_no_block() -> None:
    assert parse_q_fabric(corpus("gpud-nvidia-smi-q-H100-535.183.01-INVALID-EDITED-truncated.txt")) == []


# -- nvidia-smi topo -m ---------------------------------------------------------------------------


def test_topo_tabs_and_spaces_read_the_same() -> None:
    spaces = parse_topo_matrix(corpus("aws-p4d24xl-8xA100-topo-m.txt"))
    tabs = parse_topo_matrix(corpus("aws-p4d24xl-8xA100-topo-m-tab-separated.txt"))
    assert spaces == tabs
    assert spaces.gpus == [f"GPU{i}" for i in range(8)] and spaces.nics == []
    assert spaces.relation["GPU0"]["GPU7"] == "NV12" and spaces.relation["GPU3"]["GPU3"] == "X"
    assert [spaces.numa_affinity[g] for g in spaces.gpus] == ["0"] * 4 + ["1"] * 4
    assert spaces.cpu_affinity["GPU4"] == "24-47,72-95"


def test_topo_nic_columns_and_legend() -> None:
    topo = parse_topo_matrix(corpus("issue-sglang-30401-topo-m-8xH100-nv18-8nics-nic-legend.txt"))
    assert topo.nics == [f"NIC{i}" for i in range(8)] and topo.cut_rows == []
    assert topo.nic_names["NIC7"] == "mlx5_7"
    assert [topo.relation[f"GPU{i}"][f"NIC{i}"] for i in range(8)] == ["PIX"] * 8
    assert topo.relation["GPU4"]["NIC0"] == "SYS"


def test_topo_excerpts_without_numa_id_or_cut_short() -> None:
    nccl = parse_topo_matrix(corpus("issue-nccl-933-topo-m-8gpu-nv8-9nics-EXCERPT.txt"))
    assert nccl.relation["GPU0"]["NIC2"] == "PIX" and nccl.numa_affinity["GPU4"] == "1"
    assert "GPU7" in nccl.cut_rows  # the excerpt ends at GPU6
    deepep = parse_topo_matrix(corpus("issue-deepep-128-topo-m-8gpu-pcie-only-sys-10nics-EXCERPT.txt"))
    assert deepep.relation["GPU0"]["GPU1"] == "SYS" and deepep.relation["GPU5"]["NIC5"] == "PIX"
    two = parse_topo_matrix(corpus("issue-club3090-1229-topo-m-2x5090-phb-tabs.txt"))
    assert two.relation["GPU0"]["GPU1"] == "PHB" and two.numa_affinity == {"GPU0": "0", "GPU1": "0"}


def test_topo_garbage_is_an_error_and_closeness_orders_the_legend() -> None:
    with pytest.raises(TopoError):
        parse_topo_matrix("Failed to initialize NVML: Driver/library version mismatch\n")
    assert closeness("X") < closeness("NV18") < closeness("PIX") < closeness("PXB") < closeness("PHB")
    assert closeness("PHB") < closeness("NODE") < closeness("SYS") < closeness("???")


# -- SXid and NVSwitch lines in the kernel log -------------------------------------------------------


def test_sxid_events_and_their_continuation_lines() -> None:
    text = (KLOG / "gpud-sxid-readme-xid79-then-sxid20034-ltssm-fault-up.txt").read_text()
    events = parse_sxids(text)
    assert [(e.switch, e.sxid) for e in events] == [
        ("nvidia-nvswitch1", 20034),
        ("nvidia-nvswitch0", 20034),
        ("nvidia-nvswitch2", 20034),
        ("nvidia-nvswitch0", 20034),
    ]
    assert {e.severity for e in events} == {"fatal"}
    assert events[0].pci == "0000:06:00.0" and events[0].uptime_s == pytest.approx(6781753.400584)
    assert "Severity" not in " ".join(e.message for e in events)  # detail lines are not events


def test_nvswitch_devices_named_in_boot_logs() -> None:
    boot = (KLOG / "gpud-dmesg-decode-iso-boot-mlx5-nvswitch-h100.log.txt").read_text()
    assert nvswitches_in_log(boot) == ["nvswitch0", "nvswitch1", "nvswitch2", "nvswitch3"] and parse_sxids(boot) == []
    kmsg = (KLOG / "gpud-kmsg-raw-nvswitch-open.log.txt").read_text()
    assert sorted(nvswitches_in_log(kmsg)) == ["nvswitch0", "nvswitch1", "nvswitch2", "nvswitch3"]
    assert nvswitches_in_log((KLOG / "gpud-dmesg-peermem-invalid-context.log.txt").read_text()) == []


def test_sxid_table_classes() -> None:
    # the fabric manager's "non-fatal error 12028" (tests/corpus/fabric_manager) is non-fatal in NVIDIA's table too
    assert SXID_CLASS[12028] == "non-fatal" and SXID_CLASS[20034] == "fatal" and SXID_CLASS[22003] == "always fatal"
    fm = (CORPUS / "fabric_manager" / "gpud-fabric-manager-nvswitch-nonfatal-12028-many.log.txt").read_text()
    assert parse_sxids(fm) == []  # the fabric manager's own log has no kernel SXid line


# -- garbage: never a crash, never more than the text holds -------------------------------------------

_noise = st.text(
    alphabet=st.sampled_from(list("GPU 0123456789:Link<inactive>GB/s()UUID-\t\n.XNVSYSPIX,Fabric")), max_size=400
)


@settings(max_examples=150, deadline=None)
@given(_noise)
def test_readers_take_any_text(text: str) -> None:
    status = parse_nvlink_status(text)
    assert sum(len(g.links) for g in status.gpus) <= text.count("Link")
    assert len(parse_nvlink_errors(text)) <= text.count("GPU")
    assert len(parse_q_fabric(text)) <= text.count("Fabric")
    assert len(parse_sxids(text)) <= text.count("SXid")
    try:
        topo = parse_topo_matrix(text)
    except TopoError:
        return
    assert topo.devices[0] == "GPU0"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["Link 3: <inactive>", "Link 1: 25 GB/s", "junk", "", "GPU 0: X (UUID: GPU-1)"])))
def test_a_link_before_any_gpu_is_never_counted(lines: list[str]) -> None:
    status = parse_nvlink_status("\n".join(lines))
    first_gpu = next((i for i, line in enumerate(lines) if line.startswith("GPU ")), len(lines))
    counted = sum(len(g.links) for g in status.gpus)
    assert counted == sum(1 for line in lines[first_gpu:] if line.startswith("Link"))


# -- the checks through the CLI, on the fixtures ------------------------------------------------------


def test_nvlink_healthy_a100() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-nvlink-healthy")
    assert code == 0 and check["status"] == "ok"
    assert "96 NVLinks" in check["summary"] and "12 each" in check["summary"]


def test_nvlink_down_names_the_gpu() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-nvlink-down")
    assert code == 2 and check["status"] == "fail" and check["action"] == "RESET_GPU"
    assert "GPU 6" in check["summary"] and "all NVLinks inactive" in check["summary"]
    assert "GPU 5" not in check["summary"]


def test_nvlink_expected_count_from_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"name": "p", "checks": {"gpu.nvlink": {"expected_links": 18}}}))
    code, check = run_json("--replay", FIXTURES / "gpu-nvlink-healthy", "-p", profile)
    assert code == 2 and "GPU 0 (NVIDIA A100-SXM4-80GB): 12 of 18 NVLinks active" in check["summary"]


def test_nvlink_slow_links_and_error_counters(tmp_path: Path) -> None:
    fixture = tmp_path / "slow"
    shutil.copytree(FIXTURES / "gpu-nvlink-healthy", fixture)
    status = fixture / "commands" / "nvidia-smi_nvlink_-s" / "stdout"
    # GPU 2's link 4 trained at a lower speed (edited from the real healthy output)
    lines = status.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("GPU 2:")) + 5
    assert lines[at].strip() == "Link 4: 25 GB/s"
    lines[at] = lines[at].replace("25 GB/s", "12.5 GB/s")
    status.write_text("".join(lines))
    code, check = run_json("--replay", fixture)
    assert check["status"] == "fail" and "GPU 2 (NVIDIA A100-SXM4-80GB): link 4 at 12.5 GB/s" in check["summary"]
    status.write_text((FIXTURES / "gpu-nvlink-healthy" / "commands" / "nvidia-smi_nvlink_-s" / "stdout").read_text())
    errors = fixture / "commands" / "nvidia-smi_nvlink_-e" / "stdout"
    text = errors.read_text()
    errors.write_text(text.replace("\t Link 7: Recovery Errors: 0", "\t Link 7: Recovery Errors: 3", 1))
    code, check = run_json("--replay", fixture)
    assert code == 1 and check["status"] == "warn"
    assert "GPU 0 link 7: 3 Recovery errors" in check["summary"]


def test_nvlink_no_nvlink_gpu_skips_but_not_where_links_are_expected(tmp_path: Path) -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-nvlink-none-a10g")
    assert code == 0 and check["status"] == "skip" and "no NVLink" in check["summary"]
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"name": "p", "checks": {"gpu.nvlink": {"expected_links": 12}}}))
    code, check = run_json("--replay", FIXTURES / "gpu-nvlink-none-a10g", "-p", profile)
    assert code == 3 and check["status"] == "error" and "printed no GPU" in check["summary"]


def test_fabric_healthy_hgx() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-fabric-healthy")
    assert code == 0 and check["status"] == "ok" and "4 NVSwitches" in check["summary"]


def test_fabric_not_started_explains_error_802() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-fabric-not-started")
    assert code == 2 and check["action"] == "RESTART_SERVICE"
    assert "nvidia-fabricmanager is inactive" in check["summary"]
    assert "8 GPUs" in check["summary"] and "In Progress" in check["summary"]
    assert "system not yet initialized" in check["summary"] and "802" in check["summary"]
    assert "systemctl enable --now nvidia-fabricmanager" in check["remedy"]


def test_fabric_fatal_sxid_reboot_and_its_root_cause() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-fabric-sxid-fatal")
    assert code == 2 and check["action"] == "REBOOT"
    assert "SXid 20034 (fatal) on nvidia-nvswitch0 x2" in check["summary"]
    assert "XID 79 on GPU 0000:91:00" in check["summary"]


def test_fabric_failed_registration_and_ignored_sxid(tmp_path: Path) -> None:
    fixture = tmp_path / "insufficient"
    shutil.copytree(FIXTURES / "gpu-fabric-healthy", fixture)
    q = fixture / "commands" / "nvidia-smi_-q" / "stdout"
    text = q.read_text()
    # the Status Azure/azhpc-images#506 posted, on the first GPU only
    q.write_text(
        text.replace(
            "Status                            : Success",
            "Status                            : Insufficient Resources",
            1,
        )
    )
    code, check = run_json("--replay", fixture)
    assert check["status"] == "fail" and check["action"] == "INVESTIGATE"
    assert "GPU 00000000:19:00.0: fabric state Completed but status Insufficient Resources" in check["summary"]
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"name": "p", "checks": {"gpu.fabric": {"ignore_sxid": ["20034"]}}}))
    code, check = run_json("--replay", FIXTURES / "gpu-fabric-sxid-fatal", "-p", profile)
    assert code == 0 and check["status"] == "ok"


def test_fabric_single_gpu_without_nvswitch_skips() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-fabric-none-a10")
    assert code == 0 and check["status"] == "skip"
    assert "no NVSwitch: fabric manager not needed" in check["summary"]


def test_affinity_table_and_sys_warning() -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-affinity-healthy")
    assert code == 0 and check["status"] == "ok"
    assert "GPU4 -> NIC4 (mlx5_4) (PIX) -> NUMA 1 / ?" in check["evidence"]
    code, check = run_json("--replay", FIXTURES / "gpu-affinity-sys")
    assert code == 1 and check["status"] == "warn" and check["action"] == "INVESTIGATE"
    assert "GPU4: nearest NIC NIC0 (mlx5_0) is SYS (across the CPU socket)" in check["summary"]
    assert "GPU3" not in check["summary"]


def test_affinity_without_nic_columns_skips_and_bad_relation_is_refused(tmp_path: Path) -> None:
    code, check = run_json("--replay", FIXTURES / "gpu-affinity-no-nic")
    assert code == 0 and check["status"] == "skip" and "no NIC" in check["summary"]
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"name": "p", "checks": {"gpu.affinity": {"max_relation": "FAR"}}}))
    proc = cli("run", "--replay", FIXTURES / "gpu-affinity-healthy", "-p", profile, "--format", "json")
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (3, 64) and "max_relation" in (proc.stdout + proc.stderr)


def test_affinity_nics_parameter_limits_the_judgement(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"name": "p", "checks": {"gpu.affinity": {"nics": ["mlx5_0", "mlx5_1"]}}}))
    code, check = run_json("--replay", FIXTURES / "gpu-affinity-healthy", "-p", profile)
    assert code == 1 and check["status"] == "warn" and "GPU4: nearest NIC NIC0 (mlx5_0) is SYS" in check["summary"]


def test_fabric_without_local_nvswitch_judges_the_gpus_only(tmp_path: Path) -> None:
    fixture = tmp_path / "mnnvl"
    shutil.copytree(FIXTURES / "gpu-fabric-healthy", fixture)
    # a kernel log naming no nvidia-nvswitch device: the fabric manager is not asked about
    peermem = (KLOG / "gpud-dmesg-peermem-invalid-context.log.txt").read_text()
    (fixture / "commands" / "dmesg" / "stdout").write_text(peermem)
    shutil.rmtree(fixture / "commands" / "systemctl_is-active_nvidia-fabricmanager")
    code, check = run_json("--replay", fixture)
    assert code == 0 and check["status"] == "ok" and "fabric manager not judged" in check["summary"]
    # the multi-node GPU of kubernetes-sigs/dra-driver-nvidia-gpu#626: Completed/Success, Health Unhealthy
    q = fixture / "commands" / "nvidia-smi_-q" / "stdout"
    q.write_text(corpus("issue-dra-driver-626-nvidia-smi-q-grep-fabric-completed-health-unhealthy.txt"))
    code, check = run_json("--replay", fixture)
    assert code == 2 and check["action"] == "INVESTIGATE" and "fabric health Unhealthy" in check["summary"]


def test_hostile_long_lines_read_in_linear_time() -> None:
    # each of these took quadratic time with backtracking patterns (a 200k-space run: minutes)
    run = " " * 200_000
    assert parse_nvlink_status(f"GPU 0: a{run}b\nLink 1: a{run}b").gpus[0].links[0].speed_gbs is None
    assert parse_nvlink_errors("GPU 0: x\nLink 1: a" + " Errors: x" * 50_000)[0].counters == {}
    assert parse_q_fabric(f"Fabric\n  a{run}b\n")[0].state is None
    assert parse_sxids("nvidia-nvswitch0: SXid (PCI:" * 20_000 + "0" * 100_000) == []
    with pytest.raises(TopoError):
        parse_topo_matrix(f"NIC0: {run}x\n" * 3)


def test_affinity_numa_mismatch_from_sysfs(tmp_path: Path) -> None:
    fixture = tmp_path / "numa"
    shutil.copytree(FIXTURES / "gpu-affinity-healthy", fixture)
    # sysfs puts GPU4's PIX NIC on NUMA node 0 while topo -m gives GPU4 NUMA 1 (edited: the
    # recording has no numa_node files; the others are written as topo -m implies them)
    for i in range(8):
        path = fixture / "files" / "sys" / "class" / "infiniband" / f"mlx5_{i}" / "device" / "numa_node"
        path.parent.mkdir(parents=True)
        path.write_text("0\n" if i <= 4 else "1\n")
    code, check = run_json("--replay", fixture)
    assert code == 1 and check["status"] == "warn"
    assert check["summary"] == "GPU4 is on NUMA node 1 but its nearest NIC NIC4 (mlx5_4) on node 0"
    assert "GPU5 -> NIC5 (mlx5_5) (PIX) -> NUMA 1 / 1" in check["evidence"]


# -- the same checks on the NVML record (a stand-in NVML answering what the real outputs show) --------
#
# tests/test_nvml.py's fake_nvml patches pynvml's calls; here every GPU answers NVML's NVLink and fabric
# calls with the values of the real nvidia-smi outputs the fixtures replay (nvlink -s speeds in GB/s as
# NVML's MBps, 25 GB/s -> 25000; nvlink -e's Replay/Recovery/CRC as DL_REPLAY/DL_RECOVERY/DL_CRC_FLIT with
# DL_CRC_DATA 0; the -q Fabric State/Status as nvmlGpuFabricState_t/nvmlReturn_t), its name, UUID and bus
# id those of the fixture's record, and every other call NOT_SUPPORTED. The record the probe then builds
# replaces the fixture's probes/nvml.json and the nvidia-smi recordings it makes unneeded are removed:
# the verdict must be the one nvidia-smi's outputs give.


NVLINK_VERSION = {"A100": pynvml.NVML_NVLINK_VERSION_3_0, "H100": pynvml.NVML_NVLINK_VERSION_4_0}
FABRIC_STATE = {"Not Started": 1, "In Progress": 2, "Completed": 3}
FABRIC_STATUS = {"Success": 0, "Insufficient Resources": pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, "N/A": 0}
HEALTH = {None: 0, "Healthy": 1, "Unhealthy": 2}


def nvml_links(
    name: str, status: GpuLinks | None, errors: dict[int, dict[str, int | None]] | None
) -> dict[int, tuple[Any, ...]] | Exception:
    """One GPU's NVML NVLink answers from its `nvlink -s` entry (a GpuLinks) and `nvlink -e` counters."""
    if status is None:
        return not_supported()  # nvidia-smi printed nothing for it: no NVLink
    version = next((v for k, v in NVLINK_VERSION.items() if k in name), pynvml.NVML_NVLINK_VERSION_2_0)
    links = {link.link: link for link in status.links}
    count = len(links) or expected_for(name)[0]  # all inactive: the model's links, each in state inactive
    out: dict[int, tuple[Any, ...]] = {}
    for n in range(count):
        link = links.get(n)
        active = link is not None and link.speed_gbs is not None
        mbps = round(link.speed_gbs * 1000) if active and link is not None and link.speed_gbs is not None else 0
        said = (errors or {}).get(n, {})
        counters = {
            pynvml.NVML_NVLINK_ERROR_DL_REPLAY: said.get("Replay", 0),
            pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: said.get("Recovery", 0),
            pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: said.get("CRC", 0),
            pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: 0,
        }
        out[n] = (int(active), version, mbps, counters)
    return out


def record_from_outputs(
    mocker: MockerFixture, fixture: Path, status_text: str, errors_text: str | None, old_driver: bool = False
) -> dict[str, Any]:
    record = json.loads((fixture / "probes" / "nvml.json").read_text())
    status = {g.index: g for g in parse_nvlink_status(status_text).gpus}
    errors = {g.index: g.counters for g in parse_nvlink_errors(errors_text)} if errors_text else {}
    gpus = []
    for g in record["gpus"]:
        answers = {
            "nvmlDeviceGetName": g["name"].encode(),
            "nvmlDeviceGetUUID": g["uuid"].encode(),
            "nvmlDeviceGetPciInfo": Pci(g["pci_bus_id"].encode()),
            "nvlink": nvml_links(g["name"], status.get(g["index"]), errors.get(g["index"])),
            "old_driver": old_driver,
        }
        gpus.append(FakeGpu(**answers))
    fake_nvml(mocker, record["driver_version"].encode(), 12020, gpus)
    return nvml.local()


def on_nvml_record(tmp_path: Path, source: Path, record: dict[str, Any], drop: tuple[str, ...]) -> Path:
    fixture = tmp_path / source.name
    shutil.copytree(source, fixture)
    (fixture / "probes" / "nvml.json").write_text(json.dumps(record, indent=1, sort_keys=True))
    for name in drop:
        shutil.rmtree(fixture / "commands" / name)
    return fixture


def same_verdict(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert (a["status"], a["summary"], a.get("action")) == (b["status"], b["summary"], b.get("action"))
    assert {k: v for k, v in a["data"].items() if k != "source"} == {
        k: v for k, v in b["data"].items() if k != "source"
    }


@pytest.mark.parametrize("old_driver", [False, True], ids=["link-fields", "per-link-calls"])
@pytest.mark.parametrize("name", ["gpu-nvlink-healthy", "gpu-nvlink-down"])
def test_nvlink_from_nvml_equals_nvidia_smi(mocker: MockerFixture, tmp_path: Path, name: str, old_driver: bool) -> None:
    """Both ways the probe reads NVLink (one field-values call; a driver without the link-scoped fields:
    the per-link calls) give the record nvidia-smi's outputs give the verdict of."""
    source = FIXTURES / name
    smi = source / "commands"
    record = record_from_outputs(
        mocker,
        source,
        (smi / "nvidia-smi_nvlink_-s" / "stdout").read_text(),
        (smi / "nvidia-smi_nvlink_-e" / "stdout").read_text(),
        old_driver,
    )
    # the field-values way asks the state of link 0 alone per GPU; the per-link way every link number
    asked = pynvml.nvmlDeviceGetNvLinkState.call_count
    assert asked == (8 * pynvml.NVML_NVLINK_MAX_LINKS if old_driver else 8)
    gpu0 = record["gpus"][0]
    assert gpu0["nvlinks"][0] == {
        "link": 0,
        "active": True,
        "version": pynvml.NVML_NVLINK_VERSION_3_0,
        "speed_mbps": 25000,
        "replay_errors": 0,
        "recovery_errors": 0,
        "crc_errors": 0,
    }
    fixture = on_nvml_record(tmp_path, source, record, ("nvidia-smi_nvlink_-s", "nvidia-smi_nvlink_-e"))
    _, from_smi = run_json("--replay", source)
    _, from_nvml = run_json("--replay", fixture)
    assert (from_smi["data"]["source"], from_nvml["data"]["source"]) == ("nvidia-smi", "nvml")
    assert from_nvml["evidence"][0] == "NVLink state from NVML (probe nvml)"
    same_verdict(from_nvml, from_smi)


def test_nvlink_from_nvml_on_real_h100_and_v100_outputs(mocker: MockerFixture, tmp_path: Path) -> None:
    """The H100 18-link excerpt (bottlerocket#4418: 26.562 GB/s = NVML's 26562 MBps) and the V100 with
    links 3 and 5 down (azhpc-diagnostics#73), each as the GPUs of a node's record."""
    h100 = parse_nvlink_status(corpus("pr-bottlerocket-4418-nvidia-smi-nvlink-status-H100-18links-EXCERPT.txt"))
    fixture = tmp_path / "h100"
    shutil.copytree(FIXTURES / "gpu-nvlink-healthy", fixture)
    shutil.rmtree(fixture / "commands")
    gpus = [
        FakeGpu(
            nvmlDeviceGetName=b"NVIDIA H100 80GB HBM3",
            nvmlDeviceGetUUID=(g.uuid or "").encode(),
            nvmlDeviceGetPciInfo=Pci(f"00000000:{0x18 + 0x10 * g.index:02X}:00.0".encode()),
            nvlink=nvml_links("NVIDIA H100 80GB HBM3", g, None),
        )
        for g in h100.gpus
    ]
    fake_nvml(mocker, b"535.183.01", 12020, gpus)
    (fixture / "probes" / "nvml.json").write_text(json.dumps(nvml.local()))
    code, check = run_json("--replay", fixture)
    assert (code, check["status"]) == (0, "ok")
    assert check["summary"] == "2 GPUs: 36 NVLinks active (18 each)"
    assert (
        "GPU 1 (NVIDIA H100 80GB HBM3): 18 of 18 links active at 26.562 GB/s, expected 18 at >= 26.562 GB/s"
        in (check["evidence"])
    )
    (v100,) = parse_nvlink_status(
        corpus("issue-azhpc-diagnostics-73-nvlink-s-V100-links-3-5-inactive-EXCERPT.txt")
    ).gpus
    one = FakeGpu(
        nvmlDeviceGetName=v100.name.encode(),
        nvmlDeviceGetUUID=b"GPU-00000000-0000-0000-0000-000000000003",
        nvmlDeviceGetPciInfo=Pci(b"00000000:3B:00.0"),
        nvlink=nvml_links(v100.name, v100, None),
    )
    fake_nvml(mocker, b"535.183.01", 12020, [one])
    record = nvml.local()
    assert [link["active"] for link in record["gpus"][0]["nvlinks"]] == [True, True, True, False, True, False]
    (fixture / "probes" / "nvml.json").write_text(json.dumps(record))
    code, check = run_json("--replay", fixture)
    # the record's only GPU is index 0 (NVML's numbering), the excerpt's GPU 3
    assert (code, check["status"]) == (2, "fail")
    assert "GPU 0 (Tesla V100-SXM2-32GB): links 3, 5 inactive" in check["summary"]


def test_nvlink_nvml_not_supported_skips_and_counters_warn(mocker: MockerFixture, tmp_path: Path) -> None:
    a10g = FIXTURES / "gpu-nvlink-none-a10g"
    record = record_from_outputs(
        mocker, a10g, (a10g / "commands" / "nvidia-smi_nvlink_-s" / "stdout").read_text(), None
    )
    assert record["gpus"][0]["nvlinks"] == [] and "nvlinks" in record["gpus"][0]["unsupported"]
    fixture = on_nvml_record(tmp_path, a10g, record, ("nvidia-smi_nvlink_-s",))
    code, check = run_json("--replay", fixture)
    assert (code, check["status"]) == (0, "skip") and "NVML reports no NVLink" in check["summary"]
    # the healthy node with 3 recovery errors on GPU 0 link 7, the edit test_nvlink_slow_links_and_error_counters
    # makes to the real `nvlink -e` output
    source = FIXTURES / "gpu-nvlink-healthy"
    text = (source / "commands" / "nvidia-smi_nvlink_-e" / "stdout").read_text()
    edited = text.replace("\t Link 7: Recovery Errors: 0", "\t Link 7: Recovery Errors: 3", 1)
    assert edited != text
    record = record_from_outputs(
        mocker, source, (source / "commands" / "nvidia-smi_nvlink_-s" / "stdout").read_text(), edited
    )
    record["gpus"][1]["nvlinks"][2]["crc_errors"] = 101  # a record edit: one over max_crc_errors (100)
    fixture = on_nvml_record(tmp_path / "e", source, record, ("nvidia-smi_nvlink_-s", "nvidia-smi_nvlink_-e"))
    code, check = run_json("--replay", fixture)
    assert (code, check["status"]) == (1, "warn")
    assert (
        check["summary"]
        == "GPU 0 link 7: 3 Recovery errors (more than 0); GPU 1 link 2: 101 CRC errors (more than 100)"
    )


def fabric_gpus(q_text: str, name: str = "NVIDIA H100 80GB HBM3") -> list[FakeGpu | Exception]:
    """NVML's answers for the GPUs of `nvidia-smi -q` text (its Fabric blocks): state, status, clique, cluster,
    health summary; bus ids those of the text."""
    gpus: list[FakeGpu | Exception] = []
    for i, b in enumerate(parse_q_fabric(q_text)):
        uuid = bytes.fromhex((b.cluster_uuid or "0" * 32).replace("-", "")) if b.cluster_uuid else bytes(16)
        fabric: Any = (
            not_supported()
            if not b.supported
            else (
                FABRIC_STATE[b.state or ""],
                FABRIC_STATUS[b.status or "N/A"],
                int(b.clique_id or 0),
                uuid,
                HEALTH[b.health],
            )
        )
        gpus.append(
            FakeGpu(
                nvmlDeviceGetName=name.encode(),
                nvmlDeviceGetUUID=f"GPU-{i:08d}-0000-0000-0000-000000000000".encode(),
                nvmlDeviceGetPciInfo=Pci((b.bus_id or f"00000000:{i:02X}:00.0").encode()),
                fabric=fabric,
            )
        )
    return gpus


@pytest.mark.parametrize("name", ["gpu-fabric-healthy", "gpu-fabric-not-started"])
def test_fabric_from_nvml_equals_nvidia_smi_q(mocker: MockerFixture, tmp_path: Path, name: str) -> None:
    source = FIXTURES / name
    q_text = (source / "commands" / "nvidia-smi_-q" / "stdout").read_text()
    fake_nvml(mocker, b"535.161.08", 12020, fabric_gpus(q_text))
    record = nvml.local()
    states = {(g["fabric_state"], g.get("fabric_status")) for g in record["gpus"]}
    assert states == ({("Completed", "Success")} if name.endswith("healthy") else {("In Progress", None)})
    fixture = on_nvml_record(tmp_path, source, record, ("nvidia-smi_-q",))
    _, from_smi = run_json("--replay", source)
    _, from_nvml = run_json("--replay", fixture)
    assert (from_smi["data"]["source"], from_nvml["data"]["source"]) == ("nvidia-smi -q", "nvml")
    assert from_nvml["evidence"][0] == "GPU record (NVML fabric info): 8 GPUs, 8 with a fabric state"
    same_verdict(from_nvml, from_smi)
    # the same bus ids, states and kernel log; only `nvidia-smi -q` was not run
    ran = [line for line in from_nvml["evidence"] if line.startswith("$ ")]
    assert not any("nvidia-smi" in line for line in ran)
    # (NVML always answers a clique id, 0 here, which the 535 driver's `-q` does not print)
    assert [x.removesuffix(", CliqueId 0") for x in from_nvml["evidence"][1:] if x not in ran] == [
        x for x in from_smi["evidence"][1:] if not x.startswith("$ ")
    ]


def test_fabric_from_nvml_failed_registration_and_unhealthy(mocker: MockerFixture, tmp_path: Path) -> None:
    """Azure's Completed / Insufficient Resources (NVML_ERROR_INSUFFICIENT_RESOURCES as the status) and the
    MNNVL GPU with Health Summary Unhealthy, each the only GPU of the HGX fixture's record."""
    for snippet, said in (
        (
            "pr-azhpc-images-506-fabric-completed-insufficient-resources-clique0-SNIPPET.txt",
            "fabric state Completed but status Insufficient Resources, expected Success",
        ),
        ("issue-dra-driver-626-nvidia-smi-q-grep-fabric-completed-health-unhealthy.txt", "fabric health Unhealthy"),
    ):
        fake_nvml(mocker, b"570.86.15", 12080, fabric_gpus(corpus(snippet), "NVIDIA GB200"))
        record = nvml.local()
        fixture = on_nvml_record(tmp_path / snippet[:12], FIXTURES / "gpu-fabric-healthy", record, ("nvidia-smi_-q",))
        code, check = run_json("--replay", fixture)
        assert (code, check["status"], check["action"]) == (2, "fail", "INVESTIGATE"), check["summary"]
        assert said in check["summary"]
    assert record["gpus"][0]["fabric_clique_id"] == 2
    assert record["gpus"][0]["fabric_cluster_uuid"] == "dc6e40c4-d722-4357-9ba6-5291dd461278"


def test_q_text_record_carries_the_fabric_as_nvml_does() -> None:
    """`nvidia-smi -q` pasted as a node's record (facts.nvidia_smi) fills the same fabric fields."""
    from clustercheck.facts.nvidia_smi import parse_nvidia_smi_q

    h100 = parse_nvidia_smi_q(corpus("gpud-nvidia-smi-q-8xH100-535.161.08-fabric-completed.txt"))
    assert {(g.fabric_state, g.fabric_status) for g in h100.gpus} == {("Completed", "Success")}
    (a10,) = parse_nvidia_smi_q(corpus("gpud-nvidia-smi-q-A10-535.129.03.txt")).gpus
    assert (a10.fabric_state, a10.fabric_status) == ("N/A", None)
    blocks = fabric_from_record(h100.gpus)
    assert blocks is not None and blocks == [
        dataclasses.replace(b, line=0)
        for b in parse_q_fabric(corpus("gpud-nvidia-smi-q-8xH100-535.161.08-fabric-completed.txt"))
    ]


def test_fabric_over_ssh_still_reads_the_health_summary_from_q(tmp_path: Path) -> None:
    """A record made of `nvidia-smi -q -x` (source nvidia-smi) has the <fabric> state but no health summary:
    gpu.fabric reads `nvidia-smi -q` for it, as before the record carried a fabric."""
    fixture = tmp_path / "ssh"
    shutil.copytree(FIXTURES / "gpu-fabric-healthy", fixture)
    path = fixture / "probes" / "nvml.json"
    record = json.loads(path.read_text())
    record["source"] = "nvidia-smi"
    for g in record["gpus"]:
        g.update(fabric_state="Completed", fabric_status="Success")
    path.write_text(json.dumps(record))
    code, check = run_json("--replay", fixture)
    assert (code, check["status"], check["data"]["source"]) == (0, "ok", "nvidia-smi -q")
    assert check["evidence"][0] == "`nvidia-smi -q`: 8 Fabric blocks, 8 with a fabric state"
