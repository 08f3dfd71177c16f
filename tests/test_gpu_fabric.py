"""gpu.nvlink, gpu.fabric, gpu.affinity: the readers on the real corpus (tests/corpus/MANIFEST.md, section
"GPU fabric, NVLink, affinity (H1)"), garbage never a crash or a pass, and the checks through the CLI on
the replayed fixtures (fixtures/gpu-nvlink-*, gpu-fabric-*, gpu-affinity-*)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli

from clustercheck.facts.nvlink import (
    SXID_CLASS,
    TopoError,
    closeness,
    expected_for,
    nvswitches_in_log,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_q_fabric,
    parse_sxids,
    parse_topo_matrix,
)

SMI = CORPUS / "nvidia_smi"
KLOG = CORPUS / "kernel_log"


def corpus(name: str) -> str:
    return (SMI / name).read_text()


def run_json(*args: str | Path) -> tuple[int, dict[str, object]]:
    proc = cli("run", *args, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    (host,) = report["hosts"].values()
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
