"""slurm.* checks: parsers on real site files, verdicts over edited copies of the recorded fixtures,
and record/replay of the checks on this machine."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from clustercheck.checks.slurm import parse_gpu_dirs
from tests.helpers import FIXTURES, cli

from clustercheck.analyzers.topology import TopologyError, parse_gres_gpus, parse_slurm_conf
from clustercheck.facts.slurm_conf import parse_cgroup_conf, parse_gres_conf
from clustercheck.host import Host
from clustercheck.profile import CheckConfig
from clustercheck.result import CheckResult
from clustercheck.runner import run_one
from clustercheck.transports.fixture import Fixture, ReplayTransport

SDCC = FIXTURES / "slurm-sdcc"
ABACUS = FIXTURES / "slurm-abacus"
LS_GPUS = "ls_-1_proc_driver_nvidia_gpus"
PRINTENV = "printenv_SLURM_JOB_NODELIST"

# A real heterogeneous site's gres.conf (tabs, `Nodename` spelt so, several lines per node):
# danielmc81/slurm_config_files:gres.conf@3a12b0ef5ace9f88199a6ddc2294c12aa67f1e76 (whole file).
OCOTILLO_GRES = (
    "Nodename=ibnodo[1-2] \tName=gpu Type=m2070q\tFile=/dev/nvidia[0-3]\n"
    "Nodename=visualizacion1 Name=gpu Type=gtx970 \tFile=/dev/nvidia0\n"
    "Nodename=visualizacion1 Name=gpu Type=gtx1060 \tFile=/dev/nvidia1\n"
    "Nodename=visualizacion2 Name=gpu Type=rtx2080 \tFile=/dev/nvidia0\n"
    "Nodename=ibtesla \tName=gpu Type=v100\tFile=/dev/nvidia[0-3]\n"
    "\n"
)
# The GPU part of a real DGX-1 cluster's slurm.conf and its gres.conf:
# yyuzhongpv/GPU-Cluster-Configuration:{slurm.conf,gres.conf}@f884546be05e5330228481cdc33db7abdbb73ecb
# (slurm.conf lines 81-90 of the file, with its inline comment; gres.conf whole).
DGX_SLURM = """AccountingStorageTRES=gres/gpu
DebugFlags=CPU_Bind,gres           # show detailed information in Slurm logs about GPU binding and affinity
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=10.140.1.200
#AccountingStorageLoc=
#AccountingStoragePass=/var/run/munge/munge.socket.2
#AccountingStorageUser=slurm
#
# COMPUTE NODES
GresTypes=gpu
NodeName=master CPUs=48 RealMemory=256000 Sockets=2 CoresPerSocket=12 ThreadsPerCore=2 State=UNKNOWN
NodeName=dgx[1-4] NodeAddr=dgx[1-4] Gres=gpu:8 CPUs=80 RealMemory=512000 Sockets=2 CoresPerSocket=20 ThreadsPerCore=2 State=UNKNOWN
"""  # noqa: E501
DGX_GRES = "".join(f"Name=gpu File=/dev/nvidia{i} CPUs={(i % 4) * 10}-{(i % 4) * 10 + 9}\n" for i in range(8))


# -- helpers ------------------------------------------------------------------------------------------


def run(fixture: Path, check_id: str, **params: Any) -> CheckResult:
    host = Host(ReplayTransport(Fixture.load(fixture)))
    return run_one(host, CheckConfig(check_id, params, 30.0, "test"))


def copy(src: Path, tmp_path: Path, host: str | None = None) -> Path:
    dest = tmp_path / (host or src.name)
    shutil.copytree(src, dest)
    if host:
        manifest = yaml.safe_load((dest / "fixture.yaml").read_text())
        manifest["host"] = host
        (dest / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    return dest


def set_file(fixture: Path, path: str, text: str | None) -> None:
    """Replace a recorded file's text, or (None) make it absent on the node."""
    local = fixture / "files" / path.lstrip("/")
    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    absent = set(manifest.get("absent") or [])
    if text is None:
        local.unlink(missing_ok=True)
        absent.add(path)
    else:
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        absent.discard(path)
    manifest["absent"] = sorted(absent)
    (fixture / "fixture.yaml").write_text(yaml.safe_dump(manifest))


def set_command(fixture: Path, slug: str, stdout: str, exit_code: int = 0, stderr: str = "") -> None:
    folder = fixture / "commands" / slug
    record = yaml.safe_load((folder / "command.yaml").read_text())
    record["exit_code"] = exit_code
    (folder / "command.yaml").write_text(yaml.safe_dump(record))
    (folder / "stdout").write_text(stdout)
    (folder / "stderr").write_text(stderr)


def no_slurm_conf(fixture: Path) -> None:
    for folder in ("/etc/slurm", "/run/slurm/conf", "/var/spool/slurmd/conf-cache"):
        set_file(fixture, f"{folder}/slurm.conf", None)


def etc(fixture: Path, name: str) -> str:
    return (fixture / "files/etc/slurm" / name).read_text()


# -- parsers on real files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:volta:2", 2),
        ("gpu:8", 8),
        ("gpu:gtx970:1,gpu:gtx1060:1", 2),
        ("gpu:tesla_v100-sxm2-32gb:1", 1),
        ("gpu:a100:4(S:0-1),gpu:1", 5),
        ("gpu:2(S:0,1),gpu:1", 3),
        ("gpu", 1),
        ("gpu:no_consume:2", 2),
        ("mps:100,gpu:h100:8", 8),
        ("mps:100", 0),
        ("", 0),
    ],
)
def test_parse_gres_gpus(gres: str, gpus: int) -> None:
    assert parse_gres_gpus(gres) == gpus


def test_parse_gres_conf_of_a_real_heterogeneous_site() -> None:
    autodetect, lines = parse_gres_conf(OCOTILLO_GRES)
    assert autodetect is None
    by_node: dict[str, int] = {}
    for g in lines:
        for node in g.nodes or ():
            by_node[node] = by_node.get(node, 0) + g.gpus
    assert by_node == {"ibnodo1": 4, "ibnodo2": 4, "visualizacion1": 2, "visualizacion2": 1, "ibtesla": 4}
    assert lines[0].files == tuple(f"/dev/nvidia{i}" for i in range(4)) and lines[0].type == "m2070q"
    auto, _ = parse_gres_conf("AutoDetect=nvml\nName=gpu Type=h100 File=/dev/nvidia[0-7]\n")
    assert auto == "nvml"
    with pytest.raises(TopologyError, match=r"g:1: Count=two: expected a number"):
        parse_gres_conf("Name=gpu Count=two\n", "g")


def test_dgx_site_slurm_conf_with_inline_comment_and_its_gres_conf() -> None:
    conf = parse_slurm_conf(DGX_SLURM)
    assert conf.get("debugflags") == "CPU_Bind,gres"  # the comment is not part of the value
    assert parse_gres_gpus(conf.nodes["dgx3"].params["gres"]) == 8 and "gres" not in conf.nodes["master"].params
    _, lines = parse_gres_conf(DGX_GRES)
    assert sum(g.gpus for g in lines) == 8 and all(g.nodes is None for g in lines)


def test_sdcc_slurm_conf_with_spaces_around_equals() -> None:
    conf = parse_slurm_conf(etc(SDCC / "gpu001", "slurm.conf"), "/etc/slurm/slurm.conf")
    assert len(conf.nodes) == 39 and conf.nodes["gpu013"].line == 118
    assert conf.get("TaskPlugin") == "task/affinity,task/cgroup"
    assert conf.get("InteractiveStepOptions") == "--interactive --pty --preserve-env --mpi=none $SHELL"


def test_parse_cgroup_conf_and_gpu_dirs() -> None:
    settings = parse_cgroup_conf(etc(SDCC / "gpu001", "cgroup.conf"))
    assert settings["constraindevices"][0] == "yes" and settings["constraindevices"][1].line == 4
    unsw = parse_cgroup_conf(etc(ABACUS / "abacusc-0-0", "cgroup.conf"))
    assert unsw["cgroupreleaseagentdir"][0] == "/etc/slurm/cgroup" and "constraindevices" not in unsw
    assert parse_gpu_dirs("0000:b1:00.0\n0000:ca:00.0\nREADME\n\n00000001:00:00.0\n") == [
        "0000:b1:00.0",
        "0000:ca:00.0",
        "00000001:00:00.0",
    ]


# -- slurm.gres ------------------------------------------------------------------------------------------


def test_gres_healthy() -> None:
    result = run(SDCC / "gpu001", "slurm.gres")
    assert result.status.value == "ok"
    assert result.summary == "2 GPUs: slurm.conf Gres=gpu:volta:2, gres.conf 2, 2 on the node"
    assert result.data == {
        "node": "gpu001",
        "slurm_conf": 2,
        "present": 2,
        "driver": True,
        "gres_conf": 2,
        "autodetect": None,
    }
    assert "/etc/slurm/gres.conf:1: 2 GPUs (/dev/nvidia[0-1])" in result.evidence


def test_gres_lost_gpu_names_slurms_drain_reason() -> None:
    result = run(SDCC / "gpu003", "slurm.gres")
    assert result.status.value == "fail"
    assert result.summary.startswith(
        "1 GPU on the node, /etc/slurm/slurm.conf:118 gives gpu003 2: slurmctld drains it "
        "(`gres/gpu count reported lower than configured (1 < 2)`)"
    )
    assert "Xid 79" in result.remedy


def test_gres_autodetect_count_only_and_absent_gres_conf(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    set_file(fx, "/etc/slurm/gres.conf", "AutoDetect=nvml\n")
    result = run(fx, "slurm.gres")
    assert result.status.value == "ok" and result.summary.endswith("gres.conf AutoDetect, 2 on the node")
    set_file(fx, "/etc/slurm/gres.conf", "NodeName=gpu[001-013] Name=gpu Type=volta Count=2\n")
    result = run(fx, "slurm.gres")
    assert result.status.value == "fail" and "/etc/slurm/gres.conf:1 has no File=" in result.summary
    set_file(fx, "/etc/slurm/gres.conf", "NodeName=hpc001 Name=gpu File=/dev/nvidia0\n")
    result = run(fx, "slurm.gres")
    assert result.status.value == "fail" and "has no GPU line for gpu001" in result.summary
    set_file(fx, "/etc/slurm/gres.conf", None)
    result = run(fx, "slurm.gres")
    assert result.status.value == "fail" and result.summary.startswith("/etc/slurm/gres.conf is absent")


def test_gres_more_gpus_than_configured_warns(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    set_command(fx, LS_GPUS, "0000:18:00.0\n0000:3b:00.0\n0000:b1:00.0\n0000:ca:00.0\n")
    result = run(fx, "slurm.gres")
    assert result.status.value == "warn"
    assert result.summary.startswith("4 GPUs on the node, /etc/slurm/slurm.conf:118 offers 2")


def test_gres_node_name_and_cpu_nodes(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path, host="gpu099.example.org")
    result = run(fx, "slurm.gres")
    assert result.status.value == "error"
    assert "no NodeName line of /etc/slurm/slurm.conf defines gpu099 (set node_name" in result.summary
    assert run(fx, "slurm.gres", node_name="gpu001").status.value == "ok"
    cpu = copy(ABACUS / "abacusc-0-0", tmp_path)
    set_command(cpu, LS_GPUS, "0000:3b:00.0\n")
    result = run(cpu, "slurm.gres")
    assert result.status.value == "warn" and "gives abacusc-0-0 no gpu in Gres=" in result.summary


def test_gres_without_slurm_conf_cannot_tell(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    no_slurm_conf(fx)
    result = run(fx, "slurm.gres")
    assert result.status.value == "error"
    assert result.summary == (
        "cannot tell: no slurm.conf in /etc/slurm, /run/slurm/conf, /var/spool/slurmd/conf-cache "
        "(not a Slurm node? set config_dirs)"
    )
    assert run(fx, "slurm.placement").status.value == "skip"
    set_command(fx, LS_GPUS, "", exit_code=2, stderr="ls: cannot access: Permission denied\n")
    set_file(fx, "/etc/slurm/slurm.conf", etc(SDCC / "gpu001", "slurm.conf"))
    result = run(fx, "slurm.gres")
    assert result.status.value == "error" and "exited 2" in result.summary


def test_configless_copy_is_found(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    shutil.move(fx / "files/etc/slurm", fx / "files/run/slurm/conf")
    set_file(fx, "/etc/slurm/slurm.conf", None)
    manifest = yaml.safe_load((fx / "fixture.yaml").read_text())
    manifest["absent"] = ["/etc/slurm/slurm.conf", "/run/slurm/conf/topology.yaml"]
    (fx / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    result = run(fx, "slurm.gres")
    assert result.status.value == "ok" and "/run/slurm/conf/gres.conf:1: 2 GPUs (/dev/nvidia[0-1])" in result.evidence
    assert run(fx, "slurm.cgroup").status.value == "ok"
    assert run(fx, "slurm.topology").data["topology"] == "/run/slurm/conf/topology.conf"


# -- slurm.cgroup ----------------------------------------------------------------------------------------


def test_cgroup_healthy_and_switched_off() -> None:
    assert run(SDCC / "gpu001", "slurm.cgroup").summary == (
        "ConstrainDevices=yes, ConstrainCores=yes, TaskPlugin=task/affinity,task/cgroup"
    )
    result = run(SDCC / "gpu002", "slurm.cgroup")
    assert result.status.value == "fail"
    assert (
        result.summary
        == "ConstrainDevices=no (/etc/slurm/cgroup.conf:4), expected yes: a job can open every GPU of the node"
    )


def test_cgroup_absent_file_options_and_case(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    result = run(fx, "slurm.cgroup", constrain_ram=True)
    assert result.status.value == "fail" and result.summary.startswith(
        "ConstrainRAMSpace=no (/etc/slurm/cgroup.conf:3)"
    )
    set_file(fx, "/etc/slurm/cgroup.conf", "constraindevices=YES\nConstrainRamSpace=yes\n")
    assert run(fx, "slurm.cgroup", constrain_ram=True).status.value == "ok"
    set_file(fx, "/etc/slurm/cgroup.conf", None)
    result = run(fx, "slurm.cgroup")
    assert result.status.value == "fail"
    assert result.summary.startswith("ConstrainDevices not set in /etc/slurm/cgroup.conf (default no)")
    set_file(fx, "/etc/slurm/cgroup.conf", "ConstrainDevices yes\n")
    result = run(fx, "slurm.cgroup")
    assert (
        result.status.value == "fail" and "/etc/slurm/cgroup.conf:1: cannot read 'ConstrainDevices'" in result.summary
    )


def test_cgroup_needs_task_cgroup() -> None:
    result = run(ABACUS / "abacusc-0-0", "slurm.cgroup")
    assert "TaskPlugin=task/affinity (/etc/slurm/slurm.conf:32) lacks task/cgroup" in result.summary
    result = run(ABACUS / "abacusc-0-0", "slurm.cgroup", constrain_devices=False)
    assert result.status.value == "ok" and result.summary.startswith("no constraint required")


# -- slurm.topology ----------------------------------------------------------------------------------------


def test_topology_missing_node_names_both_files() -> None:
    result = run(SDCC / "gpu005", "slurm.topology")
    assert result.status.value == "fail"
    assert result.summary.startswith("/etc/slurm/slurm.conf:118: gpu013 (1 node) is under no leaf switch")
    assert any(e.startswith("warn: /etc/slurm/topology.conf:8: no switch reaches all") for e in result.evidence)
    finding = next(f for f in result.data["findings"] if f["status"] == "fail")
    assert (finding["file"], finding["line"], finding["status"]) == ("/etc/slurm/slurm.conf", 118, "fail")


def test_topology_healthy_site() -> None:
    result = run(ABACUS / "abacusc-0-0", "slurm.topology")
    assert result.summary == (
        "all 13 nodes of slurm.conf under 4 leaf switches of /etc/slurm/topology.conf "
        "(5 switches, 2 levels, top switch abacusc-net)"
    )
    assert result.data["slurm_conf_nodes"] == 13  # through the three included files


def test_topology_yaml_wins_over_topology_conf(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    set_file(
        fx,
        "/etc/slurm/topology.yaml",
        "- topology: site\n  cluster_default: true\n  tree:\n    switches:\n"
        "      - switch: top\n        children: s[0-3]\n"
        "      - switch: s0\n        nodes: hpc[001-019],gpu[001-013],submit[1-2],master[1-2]\n"
        "      - switch: s1\n        nodes: xf11id-srv2\n"
        "      - switch: s2\n        nodes: xf11id-srv3\n"
        "      - switch: s3\n        nodes: saturn4\n",
    )
    result = run(fx, "slurm.topology")
    assert result.status.value == "ok", result.summary
    assert result.data["topology"] == "/etc/slurm/topology.yaml" and result.data["levels"] == 2


def test_topology_plugin_and_file_must_agree(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    slurm_conf = etc(fx, "slurm.conf")
    set_file(fx, "/etc/slurm/topology.conf", None)
    result = run(fx, "slurm.topology")
    assert result.status.value == "fail" and result.summary.startswith(
        "/etc/slurm/slurm.conf:29: TopologyPlugin=topology/tree, but /etc/slurm has no topology.conf"
    )
    set_file(fx, "/etc/slurm/slurm.conf", slurm_conf.replace("TopologyPlugin           = topology/tree\n", ""))
    assert run(fx, "slurm.topology").status.value == "skip"
    set_file(fx, "/etc/slurm/topology.conf", etc(SDCC / "gpu001", "topology.conf"))
    result = run(fx, "slurm.topology")
    assert any("TopologyPlugin is not set: slurmctld ignores /etc/slurm/topology.conf" in e for e in result.evidence)
    set_file(fx, "/etc/slurm/slurm.conf", slurm_conf.replace("topology/tree", "topology/block"))
    result = run(fx, "slurm.topology")
    assert result.status.value == "fail"
    assert "TopologyPlugin=topology/block, but /etc/slurm/topology.conf defines a tree topology" in result.summary


def test_topology_unreadable_files(tmp_path: Path) -> None:
    fx = copy(SDCC / "gpu001", tmp_path)
    set_file(fx, "/etc/slurm/topology.conf", etc(fx, "topology.conf") + "SwitchName=s9 Nodes=gpu[1-\n")
    result = run(fx, "slurm.topology")
    assert result.status.value == "fail"
    assert result.summary.startswith("slurmctld cannot read it: /etc/slurm/topology.conf:12: SwitchName=s9 Nodes=")
    # placement never fails, even then
    assert run(fx, "slurm.placement").status.value == "warn"
    set_file(fx, "/etc/slurm/slurm.conf", "NodeName=gpu[001-\n")
    assert run(fx, "slurm.topology").status.value == "fail"
    assert run(fx, "slurm.gres").status.value == "error"
    abacus = copy(ABACUS / "abacusc-0-0", tmp_path)
    set_file(abacus, "/etc/slurm/nodenames.conf", None)
    result = run(abacus, "slurm.topology")
    assert result.status.value == "error" and "/etc/slurm/nodenames.conf is absent" in result.summary


# -- slurm.placement ---------------------------------------------------------------------------------------


def test_placement_warns_with_the_numbers_and_never_fails(tmp_path: Path) -> None:
    result = run(ABACUS / "abacusc-0-1", "slurm.placement")
    assert result.status.value == "warn"
    assert result.summary == (
        "4 nodes span 2 leaf switches (abacusc-0, abacusc-1); 1 would hold them; lowest common switch "
        "abacusc-net (level 1)"
    )
    assert "--switches=1@" in result.remedy
    assert result.data["leaves_spanned"] == ["abacusc-0", "abacusc-1"] and result.data["min_leaves"] == 1
    fx = copy(SDCC / "gpu001", tmp_path)
    set_command(fx, PRINTENV, "gpu001,saturn4\n")  # two trees with no common switch
    result = run(fx, "slurm.placement")
    assert result.status.value == "warn" and "no common switch" in result.summary
    set_command(fx, PRINTENV, "gpu001,gpu999\n")  # a node topology.conf does not know
    result = run(fx, "slurm.placement")
    assert result.status.value == "warn" and "gpu999 is under no leaf switch" in result.summary


def test_placement_skips_and_errors(tmp_path: Path) -> None:
    assert run(ABACUS / "abacusc-1-0", "slurm.placement").summary == (
        "not inside a Slurm job: SLURM_JOB_NODELIST is not set"
    )
    fx = copy(SDCC / "gpu001", tmp_path)
    set_command(fx, PRINTENV, "gpu001\n")
    assert run(fx, "slurm.placement").summary == "1 node (gpu001): nothing to place"
    set_command(fx, PRINTENV, "gpu[001-\n")
    result = run(fx, "slurm.placement")
    assert result.status.value == "error" and "SLURM_JOB_NODELIST='gpu[001-'" in result.summary
    set_command(fx, PRINTENV, "gpu[001-002]\n")
    set_file(fx, "/etc/slurm/topology.conf", None)
    assert run(fx, "slurm.placement").status.value == "skip"
    set_file(fx, "/etc/slurm/topology.yaml", "- topology: f\n  cluster_default: true\n  flat: true\n")
    assert run(fx, "slurm.placement").summary == "topology f is flat: no leaves to count"


# -- through the CLI, and on this machine ----------------------------------------------------------------


def test_replay_the_recorded_sdcc_cluster() -> None:
    proc = cli("run", "--replay", SDCC, "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 2, proc.stderr
    assert {h: v["status"] for h, v in report["hosts"].items()} == {
        "gpu001": "warn",
        "gpu002": "fail",
        "gpu003": "fail",
        "gpu004": "fail",
        "gpu005": "fail",
        "gpu006": "fail",
    }
    explain = cli("explain", "slurm.placement")
    assert explain.returncode == 0 and "never fails" in explain.stdout


def test_record_on_this_machine_then_replay(tmp_path: Path) -> None:
    config = tmp_path / "etc"
    shutil.copytree(SDCC / "gpu001/files/etc/slurm", config)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "name: p\ndescription: slurm checks on this machine\nchecks:\n"
        + "".join(f"  slurm.{c}: {{config_dirs: [{config}]}}\n" for c in ("topology", "placement", "cgroup"))
        + f"  slurm.gres: {{config_dirs: [{config}], node_name: gpu001}}\n"
    )
    env_before = os.environ.get("SLURM_JOB_NODELIST")
    os.environ["SLURM_JOB_NODELIST"] = "gpu[001-002],hpc001"
    try:
        proc = cli("record", "--profile", profile, "--local", "--out", tmp_path / "fx", "--note", "test")
    finally:
        if env_before is None:
            del os.environ["SLURM_JOB_NODELIST"]
        else:
            os.environ["SLURM_JOB_NODELIST"] = env_before
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "fx/commands" / PRINTENV / "stdout").read_text() == "gpu[001-002],hpc001\n"
    recorded = yaml.safe_load((tmp_path / "fx/fixture.yaml").read_text())["expect"]
    assert recorded["slurm.placement"] == "ok" and recorded["slurm.cgroup"] == "ok"
    replay = json.loads(cli("run", "--replay", tmp_path / "fx", "--profile", profile, "--format", "json").stdout)
    (host,) = replay["hosts"].values()
    assert {c["id"]: c["status"] for c in host["checks"]} == recorded
