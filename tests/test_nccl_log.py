"""NCCL log analysis: every real log of the corpus against the expert's conclusion in MANIFEST.md,
the prefixes jobs put before NCCL lines, the fast path against the line-by-line one, and bad input.
"""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, cli

from clustercheck.analyzers import nccl_log
from clustercheck.analyzers.nccl_log import LogReport, analyze_paths, analyze_text, split_line

LOGS = CORPUS / "nccl_logs"


def report(name: str, **kwargs: Any) -> LogReport:
    return analyze_paths([LOGS / name], **kwargs)


def messages(r: LogReport) -> str:
    return "\n".join(f"{f.status.value}: {f.message}" for f in r.findings)


# -- the corpus: each file's expected conclusion (MANIFEST.md, "Expected expert conclusion") -----------
# Keys: network, gdr (gpudirect_rdma), single (single_node; "not False"/"not True" where the excerpt
# cannot show it), errors (how many runtime/init errors), status, plus file-specific checks below.
EXPECTED: dict[str, dict[str, Any]] = {
    # Only plugin init is shown; the srun "N: " label must not hide the hosts.
    "aws-awsome-fsdp-p5-srun-label-prefixed-abbreviated.txt": {
        "network": None,
        "gdr": None,
        "single": False,
        "errors": 0,
        "status": "warn",
        "hosts": {"p5-dy-gpu-3", "p5-dy-gpu-4"},
    },
    "aws-efa-eks-p4d-2node-nccl2.9.9-efa-gdrdma-allreduce.txt": {
        "network": "ofi",
        "gdr": True,
        "single": False,
        "errors": 0,
        "status": "ok",
        "hosts": {"nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"},
        "intra": {"P2P/IPC"},
    },
    # NCCL 2.4: "NET/Socket : Using [0]eth0" is the bootstrap interface, not a fallback.
    "cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt": {
        "network": "ofi",
        "gdr": False,
        "single": False,
        "errors": 0,
        "status": "warn",
        "intra": {"P2P/IPC"},
        "version": "2.4.6+cuda10.0",
    },
    # Single node over NVLink; aws-ofi-nccl failed to initialise and NCCL_IB_DISABLE=1: TCP would be used.
    "gnosia93-ec2-p4d-4proc-ofi-init-fail-socket-p2p.txt": {
        "network": "socket",
        "gdr": None,
        "single": True,
        "errors": 12,
        "status": "warn",
        "intra": {"P2P/CUMEM"},
    },
    "gnosia93-g6e48xl-1pod-4gpu-shm.log.txt": {
        "network": "ofi",
        "gdr": None,
        "single": True,
        "errors": 0,
        "status": "ok",
        "intra": {"SHM"},
        "net_channels": 0,
    },
    "gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt": {
        "network": "ofi",
        "gdr": False,
        "single": False,
        "errors": 0,
        "status": "warn",
        "intra": set(),
    },
    "gnosia93-p4d-4pods-1gpu-each-efa-gdrdma.txt": {
        "network": "ofi",
        "gdr": True,
        "single": False,
        "errors": 0,
        "status": "ok",
        "intra": set(),
    },
    "gnosia93-p4d24xl-1pod-4gpu-p2p-cumem.log.txt": {
        "network": "ofi",
        "gdr": None,
        "single": True,
        "errors": 0,
        "status": "ok",
        "intra": {"P2P/CUMEM"},
    },
    "issue-aws-ofi-nccl-715-sagemaker-timestamp-on-own-line-EXCERPT.txt": {
        "network": None,
        "gdr": None,
        "single": "not False",
        "errors": 0,
        "status": "warn",
        "hosts": {"algo-1"},
    },
    "issue-aws-ofi-nccl-889-cloudwatch-efa-provider-empty-nccl2.21.5-EXCERPT.txt": {
        "network": None,
        "gdr": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"ip-10-36-29-253"},
        "version": "2.21.5+cuda12.8",
    },
    "issue-deepep-417-h20-bootstrap-ipoib-ipv6-linklocal-nccl2.21.5-EXCERPT.txt": {
        "network": None,
        "gdr": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"mccx"},
        "version": "2.21.5+cuda12.4",
    },
    # Async "client reregistration" events: fabric noise worth a warning, no transport error.
    "issue-deepspeedexamples-310-ib-async-event-client-reregistration-WARN-EXCERPT.txt": {
        "network": None,
        "single": True,
        "errors": 0,
        "status": "warn",
        "hosts": {"gpu1"},
    },
    "issue-easydistill-4-python-logging-prefixed-rings-EXCERPT.txt": {
        "network": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"g340-cd51-4900-b72a-d104-a9bf-df48"},
    },
    "issue-horovod-685-nccl2.3.7-old-format-socket-EXCERPT.txt": {
        "network": "socket",
        "gdr": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"ml3"},
        "version": "2.3.7+cuda9.0",
    },
    "issue-llamafactory-355-single-node-no-ib-socket-EXCERPT.txt": {
        "network": "socket",
        "single": "not False",
        "errors": 0,
        "status": "warn",
        "hosts": {"work-1"},
    },
    "issue-nccl-1053-socket-on-loopback-topology-dump-EXCERPT.txt": {
        "network": "socket",
        "errors": 0,
        "status": "warn",
        "hosts": {"axa"},
    },
    "issue-nccl-1189-h20-2node-nccltests-interleaved-EXCERPT.txt": {
        "network": None,
        "single": False,
        "errors": 0,
        "status": "warn",
        "hosts": {"H20-GPU-05", "H20-GPU-06"},
    },
    "issue-nccl-1357-ib-sharp-ibext-h100-2node-EXCERPT.txt": {
        "network": "ib",
        "link_layer": "infiniband",
        "single": False,
        "errors": 0,
        "status": "ok",
        "hosts": {"qh100-gpu19", "qh100-gpu20"},
    },
    "issue-nccl-1405-ibext-roce-ipv6gid-status12-vendor129-EXCERPT.txt": {
        "network": "ib",
        "errors": 3,
        "status": "fail",
        "hosts": {"kp-ddp-worker-0"},
    },
    "issue-nccl-1538-k8s-worker-p2p-cumem-nccl2.22.3-EXCERPT.txt": {
        "network": None,
        "errors": 0,
        "status": "warn",
        "intra": {"P2P/CUMEM"},
        "hosts": {"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0"},
    },
    "issue-nccl-1769-gb200-mnnvl-fabric-nvls-aarch64-EXCERPT.txt": {
        "network": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"gb200a-04"},
    },
    # The IBext_v8 plugin carries its API version in the channel lines, and has no /GDRDMA there.
    "issue-nccl-1814-ibext_v8-channels-no-gdr-suffix-EXCERPT.txt": {
        "network": "ib",
        "gdr": False,
        "single": False,
        "errors": 0,
        "status": "warn",
        "net_channels": 13,
    },
    "issue-nccl-1814-nvls-tree-64ranks-EXCERPT.txt": {
        "network": None,
        "single": "not True",
        "errors": 0,
        "status": "warn",
        "hosts": {"hostname-test"},
    },
    "issue-nccl-340-tf-2gpu-no-libibverbs-socket-nccl2.5.7-EXCERPT.txt": {
        "network": "socket",
        "errors": 0,
        "status": "warn",
        "hosts": {"wangying-system"},
    },
    "issue-nccl-367-docker-no-libibverbs-socket-nccl2.5-EXCERPT.txt": {
        "network": "socket",
        "errors": 0,
        "status": "warn",
        "hosts": {"26a46eb2b1d3"},
    },
    "issue-nccl-676-dgxa100-ibext-disabled-still-roce-EXCERPT.txt": {
        "network": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"gpu01"},
    },
    "issue-nccl-707-a100-ib-mixed-roce-nccl2.7.6-init-EXCERPT.txt": {
        "network": "ib",
        "link_layer": "mixed",
        "single": "not False",
        "errors": 0,
        "status": "warn",
        "version": "2.7.6+cuda11.1",
    },
    "issue-nccl-892-h800-single-node-0-nvls-channels-EXCERPT.txt": {
        "network": None,
        "errors": 0,
        "status": "warn",
        "intra": {"P2P/direct pointer"},
        "hosts": {"036260b61d3a"},
    },
    # IBext loads, but the excerpt cannot show the final transport.
    "issue-nccl-952-ib-cluster-hpcx-ibext-init-EXCERPT.txt": {
        "network": None,
        "gdr": None,
        "errors": 0,
        "status": "warn",
        "hosts": {"<cluster_name>"},
    },
    "issue-nccl-tests-133-roce-a800-2node-nccl2.10.3-EXCERPT.txt": {
        "network": "ib",
        "link_layer": "roce",
        "single": False,
        "errors": 0,
        "status": "ok",
        "hosts": {"nodea", "nodeb"},
    },
    # Sockets by configuration (NCCL_IB_DISABLE=1), over two interfaces.
    "issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt": {
        "network": "socket",
        "errors": 0,
        "status": "warn",
        "hosts": {"user"},
    },
    "issue-nccl-tests-228-ib-2hca-nvswitch-0-nvls-EXCERPT.txt": {
        "network": "ib",
        "link_layer": "infiniband",
        "errors": 0,
        "status": "ok",
        "hosts": {"user"},
    },
    "issue-nccl-tests-24-roce-gid3-completion-error4-nccl2.4-EXCERPT.txt": {
        "network": "ib",
        "errors": 1,
        "status": "fail",
    },
    # NCCL 2.4.7: IB selected; "NET/Socket : Using [0]ib0" is the bootstrap line.
    "issue-nv_peer_memory-56-ib-no-gdrdma-nccl2.4.7-EXCERPT.txt": {
        "network": "ib",
        "link_layer": "infiniband",
        "gdr": None,
        "single": False,
        "errors": 0,
        "status": "ok",
        "hosts": {"master_node", "secondary_node"},
    },
    # Two ranks wrote one file at once: spliced lines are skipped and counted, the rest still reads.
    "raddet-2gpu-shm-socket-concurrent-writes-garbled.log.txt": {
        "network": "socket",
        "single": True,
        "errors": 0,
        "status": "ok",
        "intra": {"SHM"},
        "hosts": {"ljm"},
    },
    # aws-ofi-nccl loads, fails quietly (INFO), NCCL goes on with its own IB over RoCE: no fallback.
    "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt": {
        "network": "ib",
        "link_layer": "roce",
        "gdr": True,
        "single": False,
        "errors": 0,
        "status": "ok",
        "intra": {"P2P/IPC"},
        "net_channels": 64,
    },
    "slurmv4-roce-9hca-nccl2.29.3-sglang-node.txt": {
        "network": "ib",
        "link_layer": "roce",
        "gdr": True,
        "single": False,
        "errors": 0,
        "status": "ok",
        "version": "2.29.3+cuda13.1",
    },
    "slurmv4-roce-completion-error-vendor-err-81-node1.txt": {
        "network": "ib",
        "link_layer": "roce",
        "single": False,
        "errors": 1,
        "status": "fail",
        "hosts": {"tpgds-aihub0007"},
    },
    "slurmv4-roce-single-hca-pxn-nccl2.27.5-node2.txt": {
        "network": "ib",
        "link_layer": "roce",
        "gdr": True,
        "single": False,
        "errors": 0,
        "status": "warn",
    },
    "stas00-mlengineering-gcp-fastsocket-net-line-SNIPPET.txt": {"network": "socket", "errors": 0, "status": "warn"},
    "stas00-mlengineering-ib-plus-stray-roce-bond-net-line-SNIPPET.txt": {
        "network": "ib",
        "link_layer": "mixed",
        "errors": 0,
        "status": "warn",
    },
    # Single node over an NVLink bridge; IB initialised on RoCE, but GDR is disabled on every HCA.
    "timez-a100pcie-nvlinkbridge-roce-noGDR-subsys-all-nccl2.27.7.log.txt": {
        "network": "ib",
        "link_layer": "roce",
        "gdr": None,
        "single": True,
        "errors": 0,
        "status": "warn",
        "intra": {"P2P/direct pointer"},
        "net_channels": 0,
    },
}


def test_every_corpus_log_has_an_expected_conclusion() -> None:
    on_disk = {p.name for p in LOGS.iterdir()}
    assert on_disk == set(EXPECTED), f"missing: {on_disk - set(EXPECTED)}, stale: {set(EXPECTED) - on_disk}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_log_conclusion(name: str) -> None:
    want = EXPECTED[name]
    r = report(name)
    got = r.to_json()
    assert got["network"] == want["network"], messages(r)
    if "gdr" in want:
        assert got["gpudirect_rdma"] == want["gdr"], messages(r)
    single = want.get("single")
    if single == "not False":
        assert got["single_node"] is not False
    elif single == "not True":
        assert got["single_node"] is not True
    elif "single" in want:
        assert got["single_node"] is single, messages(r)
    assert len(got["errors"]) == want["errors"], got["errors"]
    assert got["status"] == want["status"], messages(r)
    for key, field in (("link_layer", "link_layer"), ("net_channels", "net_channels"), ("version", "nccl_version")):
        if key in want:
            assert got[field] == want[key]
    if "hosts" in want:
        assert set(got["hosts"]) == want["hosts"]
    if "intra" in want:
        assert set(got["intra_node"]) == want["intra"]
    json.dumps(got)  # the documented shape is JSON as it is


# -- what the corpus logs must say, beyond the headline fields --------------------------------------------


def test_nccl_24_socket_line_is_the_bootstrap_not_a_fallback() -> None:
    r = report("cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt")
    assert "fell back" not in messages(r)
    for host in r.hosts.values():
        assert host["network"] == "ofi" and host["interfaces"] == []
    assert "AWS Libfabric" in r.net_plugins


def test_ib_over_roce_with_gdr_names_hcas_and_lines() -> None:
    r = report("slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt")
    host = r.hosts["tpgds-aihub0008"]
    assert len(host["devices"]) == 8 and all(d.endswith("/RoCE") for d in host["devices"])
    assert host["oob"] == "enp25s0np0" and host["gpudirect_rdma"] is True
    ok = [f for f in r.findings if f.message.startswith("inter-node traffic")]
    assert ok and [ref.line for ref in ok[0].refs] == [189, 346]  # "Using network IB", first NET channel


def test_no_gdr_names_the_cause_aws_ofi_gives() -> None:
    r = report("gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt")
    gdr = next(f for f in r.findings if "GPUDirect RDMA" in f.message)
    assert gdr.status.value == "warn" and "disabling GDR" in gdr.message
    assert report("gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt", expect_gdr=True).status.value == "fail"


def test_socket_fallback_names_its_cause_and_line() -> None:
    r = report("issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt")
    socket = next(f for f in r.findings if "TCP sockets" in f.message)
    assert "NCCL_IB_DISABLE set by environment to 1" in socket.message
    assert r.hosts["user"]["interfaces"] == ["ib0", "ibs85f0"]
    r = report("issue-llamafactory-355-single-node-no-ib-socket-EXCERPT.txt")
    assert "NET/IB : No device found" in messages(r)
    r = report("issue-nccl-367-docker-no-libibverbs-socket-nccl2.5-EXCERPT.txt")
    assert "Failed to open libibverbs" in messages(r)
    r = report("issue-nccl-1053-socket-on-loopback-topology-dump-EXCERPT.txt")
    assert "loopback interface lo" in messages(r)


def test_expectations_turn_a_socket_selection_into_a_failure() -> None:
    name = "issue-llamafactory-355-single-node-no-ib-socket-EXCERPT.txt"
    assert report(name, expect="ib").status.value == "fail"
    assert report(name, expect="socket").status.value == "ok"
    roce = "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt"
    assert report(roce, expect="ib").status.value == "ok"  # ib covers IB verbs over RoCE
    assert report(roce, expect="roce").status.value == "ok"
    assert report(roce, expect="ofi").status.value == "fail"
    assert report("issue-nccl-1357-ib-sharp-ibext-h100-2node-EXCERPT.txt", expect="roce").status.value == "fail"


def test_transport_errors_are_explained() -> None:
    r = report("issue-nccl-1405-ibext-roce-ipv6gid-status12-vendor129-EXCERPT.txt")
    assert "transport retry counter exceeded" in messages(r)
    assert [e[0].line for e in r.errors] == [1, 6, 11]
    r = report("slurmv4-roce-completion-error-vendor-err-81-node1.txt")
    assert "local protection error" in messages(r) and r.errors[0][0].line == 84
    r = report("issue-deepspeedexamples-310-ib-async-event-client-reregistration-WARN-EXCERPT.txt")
    assert not r.errors and "client reregistration" in messages(r)


def test_mixed_link_layers_warn_and_say_what_to_exclude() -> None:
    r = report("stas00-mlengineering-ib-plus-stray-roce-bond-net-line-SNIPPET.txt")
    mixed = next(f for f in r.findings if "together" in f.message)
    assert "mlx5_bond_0" in mixed.message and "NCCL_IB_HCA=^mlx5_bond_0" in mixed.remedy


def test_gdr_disabled_for_every_hca_on_a_single_node() -> None:
    r = report("timez-a100pcie-nvlinkbridge-roce-noGDR-subsys-all-nccl2.27.7.log.txt")
    assert "GPU Direct RDMA Disabled for HCA mlx5_0" in messages(r)
    assert r.hosts["mew0"]["gdr_hcas"] == {"mlx5_0": False, "mlx5_1": False, "mlx5_0+mlx5_1": False}


def test_one_hca_for_eight_gpus_warns() -> None:
    r = report("slurmv4-roce-single-hca-pxn-nccl2.27.5-node2.txt")
    assert "leaves one HCA (mlx5_0:1) for 8 GPUs" in messages(r)


def test_cloudwatch_duplicate_and_missing_efa() -> None:
    r = report("issue-aws-ofi-nccl-889-cloudwatch-efa-provider-empty-nccl2.21.5-EXCERPT.txt")
    assert r.hosts["ip-10-36-29-253"]["nccl_version"] == "2.21.5+cuda12.8"
    assert "provider efa output empty list" in messages(r)


def test_garbled_lines_are_counted() -> None:
    r = report("raddet-2gpu-shm-socket-concurrent-writes-garbled.log.txt")
    assert r.garbled_lines == 2 and "2 garbled lines skipped" in messages(r)


# -- prefixes, as jobs print them -----------------------------------------------------------------------

LINE = "gpu017:1234:1290 [3] NCCL INFO Using network IB"


@pytest.mark.parametrize(
    "raw",
    [
        LINE,
        "12: " + LINE,  # srun --label
        "[1,7]<stdout>:" + LINE,  # OpenMPI --tag-output
        "2025-11-12 20:41:43,851 - INFO - " + LINE,  # Python logging
        "[2026-01-02 10:24:27] " + LINE,  # NCCL_DEBUG_TIMESTAMP_FORMAT
        "  | 2025-05-16T16:39:51.208-07:00 | " + LINE,  # CloudWatch
        "  | 2025-05-16T16:39:51.208-07:00" + LINE + " | " + LINE,  # CloudWatch, message twice
        LINE + "\r",
    ],
)
def test_prefixes_are_taken_apart(raw: str) -> None:
    line = split_line(raw.rstrip("\r"))
    assert line is not None
    assert (line.host, line.dev, line.level, line.message) == ("gpu017", 3, "INFO", "Using network IB")


def test_lines_without_host_and_warn_file_positions() -> None:
    line = split_line("[3] NCCL INFO NET/IB : No device found.")
    assert line is not None and (line.host, line.dev) == (None, 3)
    warn = split_line(
        "[2026-01-02 10:24:27] ip-172-31-3-153:35115:35469 [2] int nccl_net_ofi_create_plugin"
        "(nccl_net_ofi_plugin_t**):208 NCCL WARN NET/OFI aws-ofi-nccl initialization failed"
    )
    assert warn is not None and (warn.host, warn.level) == ("ip-172-31-3-153", "WARN")
    assert split_line("training step 10 loss 2.3") is None
    spliced = split_line("ljm:803564:803604 [1] NCCL INFO comm 0x94 rank 1 nranks ljm:803563:803603 [0] NCCL INFO x")
    assert spliced is not None and spliced.level == "GARBLED"


def test_srun_labelled_job_output_end_to_end() -> None:
    text = "\n".join(
        [
            "0: epoch 1 step 0 loss 11.6",
            "0: gpu001:100:100 [0] NCCL INFO NET/IB : No device found.",
            "1: gpu002:200:200 [0] NCCL INFO NET/IB : No device found.",
            "0: gpu001:100:100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
            "0: gpu001:100:100 [0] NCCL INFO Using network Socket",
            "1: gpu002:200:200 [0] NCCL INFO Using network Socket",
            "0: gpu001:100:110 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
            "1: gpu002:200:210 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0",
        ]
    )
    r = analyze_text(text)
    assert (r.network, r.net_channels, r.single_node, r.status.value) == ("socket", 2, False, "fail")
    fell = next(f for f in r.findings if f.message.startswith("fell back to TCP sockets"))
    assert fell.message == "fell back to TCP sockets: NET/IB : No device found. (line 2)"


# -- the fast path agrees with the line-by-line one ------------------------------------------------------


def _big_log(tmp_path: Path, hosts: int = 24, rounds: int = 6) -> Path:
    """A multi-host log made of a real node log, hosts renamed, lines interleaved, one host without GDR."""
    template = (LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt").read_text().splitlines()[1:]
    init, comm = template[:225], template[225:]
    out = []
    for block in [init] + [comm] * rounds:
        per_host = []
        for i in range(hosts):
            lines = [line.replace("tpgds-aihub0008", f"gpu{i:03d}") for line in block]
            if i == 7:  # one node whose HCAs lost GPUDirect RDMA
                lines = [line.replace("/GDRDMA", "") for line in lines]
            per_host.append(lines)
        for start in range(0, len(block), 7):
            for lines in per_host:
                out.extend(lines[start : start + 7])
    out.append(
        "gpu011:207008:208000 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer "
        "10.99.91.63<36473> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.99.91.59"
    )
    path = tmp_path / "job.log"
    path.write_text("\n".join(out) + "\n")
    return path


def _essentials(r: LogReport) -> dict[str, Any]:
    j = r.to_json()
    return {
        "top": {k: j[k] for k in ("network", "link_layer", "gpudirect_rdma", "net_channels", "single_node", "status")},
        "errors": j["errors"],
        "findings": [(f["status"], f["message"], f["lines"]) for f in j["findings"]],
        "gdr": {h: v["gpudirect_rdma"] for h, v in j["hosts"].items()},
        "network": {h: v["network"] for h, v in j["hosts"].items()},
    }


def test_fast_path_and_processes_agree_with_the_exact_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _big_log(tmp_path)
    exact = analyze_paths([path])
    assert exact.hosts["gpu007"]["gpudirect_rdma"] is False and exact.hosts["gpu006"]["gpudirect_rdma"] is True
    assert exact.status.value == "fail" and exact.errors[0][0].line == exact.lines
    monkeypatch.setattr(nccl_log.knobs, "EXACT_CHANNELS", 500)  # attribute the first channels only, count the rest
    monkeypatch.setattr(nccl_log.knobs, "BLOCK", 4096)
    fast = analyze_paths([path])
    assert _essentials(fast) == _essentials(exact)
    # and in stretches on two processes (in a fresh interpreter, as the CLI runs them)
    knobs = {"EXACT_CHANNELS": 500, "BLOCK": 4096, "PARALLEL_MIN": 1, "GREP": False}
    (parallel,) = _in_a_fresh_process(path, 2, (None,), **knobs)
    assert parallel == json.dumps({**fast.to_json(), "lines": fast.lines})


def test_block_reader_numbers_lines_across_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    lines = [f"h{rng.randrange(3)}:1:2 [0] NCCL INFO Using network {rng.choice(['IB', 'Socket'])}" for _ in range(300)]
    lines = [line if rng.random() < 0.5 else "x" * rng.randrange(0, 300) for line in lines]
    monkeypatch.setattr(nccl_log.knobs, "BLOCK", 97)
    part = nccl_log._scan_stream(io.BytesIO("\n".join(lines).encode()), "-")
    assert part.lines == len(lines)
    want = [(i, line) for i, line in enumerate(lines, 1) if "NCCL" in line]
    seen = {(n, text) for n, text in part.records}
    firsts: dict[str, int] = {}
    for n, text in want:
        firsts.setdefault(text, n)
    assert seen == {(n, t) for t, n in firsts.items()}


def test_overlong_lines_are_skipped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_log.knobs, "MAX_LINE", 1000)
    monkeypatch.setattr(nccl_log.knobs, "BLOCK", 256)
    text = "a:1:2 [0] NCCL INFO Using network IB\n" + "z" * 5000 + "\nb:1:2 [0] NCCL WARN Call to ibv_foo failed\n"
    r = analyze_text(text)
    assert r.skipped_long_lines == 1 and r.errors[0][0].line == 3


def test_exact_start_keeps_each_hosts_first_info_line_and_counts_its_repeats() -> None:
    """Which lines the exact start keeps for parsing (the line numbers) and which it only counts for their
    host (`repeats`): a repeat of a line kept (pointers aside) is neither; another rank's same message
    is a repeat; WARN, GPU Direct RDMA, channel lines and lines with two markers are kept; a pointer in
    the prefix is left out as well; an overlong line is kept cut."""
    plugin = "NET/Plugin: Failed to find ncclNetPlugin_v9 symbol."
    comm = "rank {} nRanks 2 nNodes 1 localRanks 2 localRank {}"
    lines = [
        f"h1:1:1 [0] NCCL INFO {plugin}",  # 1 kept
        f"h1:2:2 [1] NCCL INFO {plugin}",  # 2 a repeat on h1 (device 1)
        f"h1:1:1 [0] NCCL INFO {plugin}",  # 3 the same line again: neither
        f"h2:1:1 [0] NCCL INFO {plugin}",  # 4 kept: another host
        f"h1:1:1 [0] NCCL INFO comm 0x1a {comm.format(0, 0)}",  # 5 kept
        f"h1:1:1 [0] NCCL INFO comm 0x2b {comm.format(0, 0)}",  # 6 the same but the pointer: neither
        f"h1:2:2 [1] NCCL INFO comm 0x3c {comm.format(1, 1)}",  # 7 kept: another message
        f"h1:2:2 [1] NCCL WARN {plugin}",  # 8 kept: WARN
        "h1:3:3 [2] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",  # 9 kept
        "h1:4:4 [3] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",  # 10 kept: GPU Direct RDMA
        f"h1:3:3 [2] NCCL INFO {plugin} NCCL INFO Using network IB",  # 11 kept: two markers
        "h1:5:5 [4] NCCL INFO Using network IB",  # 12 kept: the first with one marker
        "h1:6:6 [5] NCCL INFO Using network IB",  # 13 a repeat on h1 (device 5)
        "h0x1:1:1 [0] NCCL INFO Using network IB",  # 14 kept: host h0x1
        "h0x2:1:1 [0] NCCL INFO Using network IB",  # 15 the same line as 14, pointers aside: neither
        f"h1:7:7 [6] NCCL INFO {plugin} " + "y" * 5000,  # 16 kept, cut
        "h1:8:8 [7] NCCL INFO Channel 00/02 :    0   1",  # 17 kept
        "h1:9:9 [7] NCCL INFO Channel 00/02 :    0   1",  # 18 kept: channel lines
    ]
    part = nccl_log._scan_stream(io.BytesIO("\n".join(lines).encode()), "-")
    assert [n for n, _ in part.records] == [1, 4, 5, 7, 8, 9, 10, 11, 12, 14, 16, 17, 18]
    assert part.repeats == {"h1": [2, {1, 5}]}
    assert (part.cut, part.cut_line) == (1, 16)


# -- bad input -----------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_random_bytes_never_crash(data: bytes) -> None:
    r = analyze_text(data)
    json.dumps(r.to_json())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(EXPECTED)), min_size=1, max_size=2), st.integers(0, 4000), st.binary(max_size=8))
def test_truncated_and_corrupted_corpus_logs_never_crash(names: list[str], cut: int, junk: bytes) -> None:
    data = b"".join((LOGS / n).read_bytes()[: cut + 200] for n in names)
    data = data[:cut] + junk + data[cut:] + b"\xff\xfe NCCL INFO \x00 via NET/"
    json.dumps(analyze_text(data).to_json())


def test_megabyte_lines_and_invalid_utf8() -> None:
    data = b"x" * (1 << 20) + b"\n\xff\xfe gpu1:1:1 [0] NCCL INFO Using network IB \xff\n" + b"y" * (1 << 20)
    r = analyze_text(data)
    assert r.network == "ib" and r.lines == 3


# -- the CLI ---------------------------------------------------------------------------------------------


def test_cli_table_and_exit_codes() -> None:
    ok = cli("nccl-log", LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt")
    assert ok.returncode == 0, ok.stderr
    assert "tpgds-aihub0008" in ok.stdout and "GPUDirect RDMA on all 64 network channels" in ok.stdout
    warn = cli("nccl-log", LOGS / "gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt")
    assert warn.returncode == 1
    fail = cli("nccl-log", LOGS / "issue-nccl-1405-ibext-roce-ipv6gid-status12-vendor129-EXCERPT.txt")
    assert fail.returncode == 2 and "transport retry counter exceeded" in fail.stdout
    strict = cli("nccl-log", "--expect-gdr", LOGS / "gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt")
    assert strict.returncode == 2


def test_cli_json_shape() -> None:
    run = cli("nccl-log", "--format", "json", LOGS / "issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt")
    data = json.loads(run.stdout)
    kinds: dict[str, type | tuple[type, ...]] = {
        "nccl_version": (str, type(None)),
        "network": (str, type(None)),
        "link_layer": (str, type(None)),
        "gpudirect_rdma": (bool, type(None)),
        "net_channels": int,
        "errors": list,
        "hosts": dict,
        "status": str,
        "findings": list,
    }
    for key, kind in kinds.items():
        assert isinstance(data[key], kind), key
    assert data["network"] == "socket" and data["status"] in ("ok", "warn", "fail")
    for finding in data["findings"]:
        assert set(finding) >= {"status", "message", "lines"} and all(isinstance(n, int) for n in finding["lines"])


def test_cli_reads_stdin_and_several_files() -> None:
    text = (LOGS / "issue-nccl-tests-133-roce-a800-2node-nccl2.10.3-EXCERPT.txt").read_text()
    run = cli("nccl-log", "-f", "json", "-", stdin=text)
    assert run.returncode == 0 and json.loads(run.stdout)["link_layer"] == "roce"
    both = cli(
        "nccl-log",
        "-f",
        "json",
        LOGS / "slurmv4-roce-9hca-nccl2.29.3-sglang-node.txt",
        LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt",
    )
    data = json.loads(both.stdout)
    assert set(data["hosts"]) == {"tpgds-aihub0003", "tpgds-aihub0008"} and len(data["files"]) == 2
    assert "different NCCL versions" in both.stdout


@pytest.mark.parametrize("make", ["missing", "directory", "garbage", "empty"])
def test_cli_bad_input_exits_64_naming_the_file(tmp_path: Path, make: str) -> None:
    target = tmp_path / "job.out"
    if make == "directory":
        target.mkdir()
    elif make == "garbage":
        target.write_bytes(bytes(range(256)) * 40)
    elif make == "empty":
        target.write_bytes(b"")
    run = cli("nccl-log", target)
    assert run.returncode == 64, run.stdout + run.stderr
    assert str(target) in run.stderr and "Traceback" not in run.stderr


# -- nccl.log on a node: grep sends back only what matters --------------------------------------------


def _grep_rare_lines(path: Path) -> set[int]:
    import subprocess

    out = subprocess.run(
        ["grep", "-n", "-a", "-E", "-e", nccl_log.GREP_PATTERN, "--", str(path)], capture_output=True, check=False
    ).stdout.decode("utf-8", "replace")
    return {int(line.split(":", 1)[0]) for line in out.splitlines()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_grep_pattern_picks_the_lines_the_scanner_reads(name: str) -> None:
    data = (LOGS / name).read_bytes()
    python = {data.count(b"\n", 0, m.start()) + 1 for m in nccl_log._RARE.finditer(data)}
    listing = {
        data.count(b"\n", 0, m.start()) + 1 for m in re.finditer(rb"NCCL INFO Channel [0-9]+/[0-9]+ : +[0-9]+", data)
    }
    assert _grep_rare_lines(LOGS / name) == python - listing


@pytest.mark.parametrize(
    "name",
    [
        "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt",
        "gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt",
        "gnosia93-g6e48xl-1pod-4gpu-shm.log.txt",
        "slurmv4-roce-completion-error-vendor-err-81-node1.txt",
        "issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt",
        "cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt",
        "raddet-2gpu-shm-socket-concurrent-writes-garbled.log.txt",
    ],
)
def test_check_reads_through_grep_as_nccl_log_reads_the_file(name: str) -> None:
    import subprocess

    from clustercheck.checks import nccl as nccl_checks

    script = subprocess.run(
        ["sh", "-c", nccl_checks._GREP_SCRIPT, "sh", str(LOGS / name), nccl_log.GREP_PATTERN],
        capture_output=True,
        check=True,
    ).stdout.decode()
    via_grep = nccl_checks.analyze_grep_output(script, str(LOGS / name))
    direct = analyze_paths([LOGS / name])
    keys = ("network", "link_layer", "gpudirect_rdma", "net_channels", "single_node", "status", "intra_node")
    assert {k: via_grep.to_json()[k] for k in keys} == {k: direct.to_json()[k] for k in keys}
    assert [f.message for f in via_grep.findings] == [f.message for f in direct.findings]


def test_check_sections_and_bad_grep_output() -> None:
    from clustercheck.checks import nccl as nccl_checks

    assert nccl_checks.numbered(["12:a:b", "x", ":3", "7:"]) == [(12, "a:b"), (7, "")]
    assert nccl_checks.analyze_grep_output("@@ rare\n@@ counts\nvia NET/\t0\n", "/x") is None
    assert nccl_checks.analyze_grep_output("garbage \x00 without sections", "/x") is None


def test_a_log_named_with_a_newline_gets_no_other_file_read(tmp_path: Path) -> None:
    """`ls` prints a name holding a newline as two lines. A user's job log named
    `slurm-9.out<newline>stolen.out` made nccl.log grep `stolen.out` in its working folder (the
    prolog's: slurmd's spool) and judge it: here another job's log showing TCP sockets, which
    warned of a node whose own logs are fine. A line matching none of the globs is not read now."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "slurm-1.out").write_bytes(
        (LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt").read_bytes()
    )
    (jobs / "slurm-9.out\nstolen.out").write_text("a user's own job output\n")
    (tmp_path / "stolen.out").write_bytes(
        (LOGS / "issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt").read_bytes()
    )
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"checks:\n  nccl.log: {{paths: ['{jobs}/slurm-*.out'], max_files: 3}}\n")
    run = cli("run", "--local", "-p", profile, "-f", "json", cwd=tmp_path)
    (result,) = json.loads(run.stdout)["hosts"].popitem()[1]["checks"]
    assert (run.returncode, result["status"]) == (0, "ok"), run.stdout + run.stderr
    assert sorted(result["data"]["files"]) == [str(jobs / "slurm-1.out")]
    assert "matching none of the paths' globs ('stolen.out')" in " ".join(result["evidence"])
    grep = "$ sh -c '<nccl log grep script>' sh "
    grepped = [e[len(grep) :].split()[0] for e in result["evidence"] if e.startswith(grep)]
    assert grepped == [f"{jobs}/slurm-9.out", f"{jobs}/slurm-1.out"]  # the newest first; stolen.out never


def test_only_names_matching_no_glob_cannot_tell(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "a\nb.out").write_text("a user's own job output\n")  # lists as `.../jobs/a` and `b.out`
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"checks:\n  nccl.log: {{paths: ['{jobs}/*.out']}}\n")
    run = cli("run", "--local", "-p", profile, "-f", "json", cwd=tmp_path)
    (result,) = json.loads(run.stdout)["hosts"].popitem()[1]["checks"]
    assert (run.returncode, result["status"]) == (3, "error"), run.stdout + run.stderr
    assert "cannot tell: the log listing printed 2 lines matching none of the paths' globs" in result["summary"]


def test_listed_paths_are_matched_against_the_globs_part_for_part() -> None:
    from clustercheck.checks.nccl import glob_matches

    assert glob_matches("/var/tmp/jobs/slurm-1.out", "/var/tmp/jobs/slurm-*.out")
    assert glob_matches("/var/tmp/jobs/7/", "/var/tmp/jobs/[[:digit:]]/")  # a class fnmatch lacks: let through
    assert glob_matches("/var/tmp//j/a.out", "/var/tmp//j/[!b].out") and glob_matches("logs/x", "*/x")
    assert not glob_matches("/etc/shadow", "/var/tmp/*/*")  # the half after a newline: other parts
    assert not glob_matches("/var/tmp/jobs/secret", "/var/tmp/jobs/*.out")  # the half before one
    assert not glob_matches("stolen.out", "/var/tmp/jobs/slurm-*.out")


# -- newer NCCL: the device list of merged (virtual) NICs -----------------------------------------------

NEW_LOGS = CORPUS / "nccl_logs_new"


def test_merged_nic_device_list_names_every_physical_device() -> None:
    # NVIDIA/nccl-tests#373 (MANIFEST.md, nccl_logs_new): two virtual NICs, each two RoCE ports; the
    # list read nothing before (devices empty, link layer unknown).
    r = analyze_paths([NEW_LOGS / "issue-nccl-tests-373-ibext-v8-merged-nics-roce-3node-socketFinalizeAccept.txt"])
    host = r.hosts["bigo"]
    assert host["devices"] == ["mlx5_2:1/RoCE", "mlx5_3:1/RoCE", "mlx5_0:1/RoCE", "mlx5_1:1/RoCE"]
    assert host["link_layer"] == "roce" and host["oob"] == "bond0.526"
    assert host["net_plugin"] == "IBext_v8" and host["gpudirect_rdma"] is False
    out = r.to_json()
    assert out["network"] == "ib" and out["link_layer"] == "roce" and out["status"] == "fail"
    assert "socketFinalizeAccept: wrong type 3 != 4" in messages(r)


_HCA = st.from_regex(r"\A(mlx5_[0-9]{1,2}|bnxt_re[0-9])\Z")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(_HCA, st.sampled_from(["IB", "RoCE"])), min_size=1, max_size=3), min_size=1, max_size=4
    ),
    st.text(max_size=40),
)
def test_merged_device_lists_parse_to_their_devices_and_garbage_never_crashes(
    vnics: list[list[tuple[str, str]]], junk: str
) -> None:
    n = 0
    parts = []
    want: dict[str, str] = {}
    for v, members in enumerate(vnics):
        inner = []
        for hca, link in members:
            inner.append(f"[{n}] {hca}:1/{link}")
            want.setdefault(f"{hca}:1", link)
            n += 1
        parts.append(f"[{v}]={{{', '.join(inner)}}}")
    line = f"h1:1:2 [0] NCCL INFO NET/IB : Using {' '.join(parts)} [RO]; OOB eth0:10.0.0.1<0>\n"
    host = analyze_text(line.encode()).hosts["h1"]
    assert host["devices"] == [f"{d}/{link}" for d, link in want.items()]
    # the same line cut anywhere, or with garbage spliced in, is read without a crash
    cut = len(junk) % len(line)
    json.dumps(analyze_text((line[:cut] + junk + line[cut:]).encode("utf-8", "replace")).to_json())


# -- the command without Typer ---------------------------------------------------------------------------


def test_nccl_log_with_plain_arguments_imports_neither_typer_nor_rich() -> None:
    import subprocess
    import sys

    from tests.helpers import REPO

    log = LOGS / "gnosia93-g6e48xl-4pods-1gpu-each-efa-noGDR.log.txt"
    code = (
        "import atexit, sys\n"
        "from clustercheck.main import main\n"
        "heavy = ('typer', 'rich', 'paramiko', 'pydantic', 'psutil')\n"
        "atexit.register(lambda: print('LOADED', [m for m in heavy if m in sys.modules], file=sys.stderr))\n"
        f"main(['nccl-log', '--format=json', {str(log)!r}, '-j', '1'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "LOADED []" in proc.stderr, proc.stderr
    assert proc.returncode == 1 and json.loads(proc.stdout)["gpudirect_rdma"] is False


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "json", "--expect", "ib", "--expect-gdr"],
        ["-f", "json", "--expect=socket", "-j", "2"],
        ["--jobs=1", "-f", "json", "--expect", "roce"],
    ],
)
def test_plain_path_and_typer_path_agree(args: list[str]) -> None:
    log = LOGS / "slurmv4-roce-single-hca-pxn-nccl2.27.5-node2.txt"
    plain = cli("nccl-log", *args, log)
    # an argument the plain parser leaves to Typer ('--' before the file): the same command through Typer
    typer_path = cli("nccl-log", *args, "--", log)
    assert plain.returncode == typer_path.returncode and plain.returncode in (0, 1, 2), typer_path.stderr
    assert plain.stdout == typer_path.stdout and json.loads(plain.stdout)["network"] == "ib"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "xml"], "xml"),
        (["--jobs", "0"], "--jobs"),
        (["--expect", "tcp"], "tcp"),
        (["--format"], "--format"),
        (["--bogus"], "--bogus"),
        (["-f=json"], "=json"),  # click reads a short option's "=json" as its value
    ],
)
def test_plain_path_leaves_mistakes_to_typer(args: list[str], says: str) -> None:
    run = cli("nccl-log", LOGS / "slurmv4-roce-single-hca-pxn-nccl2.27.5-node2.txt", *args)
    assert run.returncode == 64 and says in run.stderr and "Traceback" not in run.stderr


# -- the package: one import surface, the scan's sizes set in one place (its knobs module) -----------------


def test_every_public_name_is_importable_from_the_package() -> None:
    for name in nccl_log.__all__:
        assert getattr(nccl_log, name) is not None, name
    from clustercheck.analyzers.nccl_log import GREP_PATTERN, Scanner  # what checks/nccl.py imports

    assert Scanner().report().status.value == "warn" and "NCCL (WARN" in GREP_PATTERN


def test_exact_channels_set_in_knobs_steers_every_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _big_log(tmp_path).read_bytes()

    def p2p_attributed() -> int:
        part = nccl_log._scan_stream(io.BytesIO(data), "-")
        return sum(n for (_, cls, _), (n, _) in part.channels.items() if cls.startswith("P2P/"))

    everything = p2p_attributed()
    monkeypatch.setattr(nccl_log.knobs, "BLOCK", 4096)
    monkeypatch.setattr(nccl_log.knobs, "EXACT_CHANNELS", 2000)
    # past the exact start intra-node P2P channels are no longer attributed one by one
    assert 0 < p2p_attributed() < everything


# -- the byte-level pass by GNU grep (analyzers/nccl_log/grep.py) ---------------------------------------

ALL_LOGS = sorted([*LOGS.iterdir(), *(CORPUS / "nccl_logs_new").iterdir()])
EXPECTS = (None, "ib", "roce", "ofi", "socket")


def _in_a_fresh_process(path: Path, jobs: int, expects: tuple[str | None, ...], **knobs: object) -> list[str]:
    """The JSON of each --expect for `path` scanned with `jobs` processes, in a fresh interpreter
    as the CLI runs it: forking stretch workers from this test process, beside the threads earlier
    tests left, can leave a worker waiting on a lock for ever."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "import clustercheck.analyzers.nccl_log as n\n"
        "for k, v in json.loads(sys.argv[1]).items(): setattr(n.knobs, k, v)\n"
        "out = []\n"
        "for e in json.loads(sys.argv[2]):\n"
        "    r = n.analyze_paths([sys.argv[3]], expect=e, jobs=int(sys.argv[4]))\n"
        "    out.append(json.dumps({**r.to_json(), 'lines': r.lines}))\n"
        "print(json.dumps(out))\n"
    )
    argv = [sys.executable, "-c", code, json.dumps(knobs), json.dumps(list(expects)), str(path), str(jobs)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    out: list[str] = json.loads(proc.stdout)
    return out


def _both_paths(
    monkeypatch: pytest.MonkeyPatch, paths: list[Path], *, jobs: int = 1, **knobs: int
) -> tuple[list[str], list[str], list[str]]:
    """The JSON of every --expect through the pure-Python scan and through grep, and how grep fared."""
    from clustercheck.analyzers.nccl_log import grep

    for name, value in knobs.items():
        monkeypatch.setattr(nccl_log.knobs, name, value)
    monkeypatch.setattr(nccl_log.knobs, "GREP_MIN", 0)
    fared: list[str] = []
    real = grep.scan_file

    def spy(*args: Any) -> Any:
        try:
            parts = real(*args)
        except grep.Unsuitable as exc:
            fared.append(str(exc))
            raise
        fared.append("grep")
        return parts

    monkeypatch.setattr(grep, "scan_file", spy)
    out: dict[bool, list[str]] = {}
    for use in (False, True):
        monkeypatch.setattr(nccl_log.knobs, "GREP", use)
        out[use] = []
        for e in EXPECTS:
            r = analyze_paths(paths, expect=e, jobs=jobs)
            out[use].append(json.dumps({**r.to_json(), "lines": r.lines}))
    return out[False], out[True], fared


@pytest.mark.parametrize("name", [p.name for p in ALL_LOGS])
def test_grep_path_gives_the_python_paths_report_on_every_corpus_log(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = next(p for p in ALL_LOGS if p.name == name)
    # small blocks and a short exact start, so that most of every log is read the lean way
    for exact, block in ((0, 1 << 14), (7, 1 << 12)):
        python, via_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=exact, BLOCK=block)
        assert via_grep == python, (exact, block)
        if exact == 0 and "a line longer than a block" not in fared:
            assert "grep" in fared  # grep did read it (the comparison is not Python against itself)


def test_grep_path_in_stretches_and_on_a_large_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _big_log(tmp_path, hosts=24, rounds=8)
    python, via_grep, fared = _both_paths(monkeypatch, [path], jobs=1, EXACT_CHANNELS=500, BLOCK=4096)
    assert via_grep == python and fared.count("grep") == len(EXPECTS), fared
    for jobs, exact in ((2, 500), (3, 0)):  # in stretches, each path in a fresh process
        knobs = {"PARALLEL_MIN": 1, "GREP_MIN": 0, "BLOCK": 4096, "EXACT_CHANNELS": exact}
        in_python = _in_a_fresh_process(path, jobs, EXPECTS, GREP=False, **knobs)
        assert _in_a_fresh_process(path, jobs, EXPECTS, GREP=True, **knobs) == in_python, (jobs, exact)
        if exact == 500:
            assert in_python == python, jobs  # the same report as one process's


def test_grep_path_keeps_line_numbers_of_a_file_without_final_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt").read_bytes().rstrip(b"\n")
    path = tmp_path / "cut.log"
    path.write_bytes(data + b"\nh9:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with error 12")
    python, via_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=0, BLOCK=4096)
    assert via_grep == python and "grep" in fared
    got = json.loads(python[0])
    assert got["lines"] == data.count(b"\n") + 2 and got["errors"][-1]["line"] == got["lines"]


def test_grep_path_counts_channel_lines_a_file_writes_like_the_end_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The channel grep reads a line of this scan's after the file, and the filter's number for it says
    how many channel lines there were: a file whose first line, at grep's offset 0, is a channel line
    like it (the sentinel this code used to write, or its text with another token), and whose last
    channel line is a common one, the filter prints only as context, is counted as in Python."""
    lines = (LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt").read_bytes().split(b"\n")
    common = [line for line in lines if line.endswith(b"/GDRDMA")]
    for first in (b"via SHM", b"0:0:via SHM", b"via SHM (the end of the channel lines 0123456789abcdef)"):
        path = tmp_path / "sentinel.log"
        path.write_bytes(b"\n".join([first, *lines, *common[:3], b"training step 1"]) + b"\n")
        python, via_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=0, BLOCK=1 << 14)
        assert via_grep == python and "grep" in fared, first
        assert json.loads(python[0])["lines"] == len(lines) + 5


def test_without_grep_on_path_the_python_scan_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _big_log(tmp_path)
    python, via_grep, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _, no_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    assert no_grep == python == via_grep and fared == ["no GNU grep"] * len(EXPECTS)


def _grep_killed_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str) -> None:
    """PATH's grep becomes GNU grep whose output goes through the shell command `cut` (`head -c 3000`),
    after which it is killed (SIGKILL), as a grep killed mid-write is."""
    import os
    import shutil as sh

    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    real = sh.which("grep", path=os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if d != str(folder)))
    assert real
    fake = folder / "grep"
    fake.write_text(
        f'#!/bin/sh\ncase "$1" in --version) exec {real} --version;; esac\n{real} "$@" | {cut}; kill -9 $$\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def test_a_grep_that_is_not_gnu_or_fails_is_never_a_partial_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = _big_log(tmp_path)
    python, _, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "grep"
    # busybox-like: not GNU -> the Python scan; GNU but killed mid-way -> an error said, then the Python scan
    fake.write_text("#!/bin/sh\necho 'grep (BusyBox) 1.36'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    _, other, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    assert other == python and fared == ["no GNU grep"] * len(EXPECTS)
    _grep_killed_after(tmp_path, monkeypatch, "head -c 3000")
    _, killed, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    assert killed == python and "grep" not in fared
    assert "failed (killed by signal 9)" in capfd.readouterr().err


def test_a_grep_killed_in_the_middle_of_a_line_is_never_a_partial_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """grep's output is block-buffered: a grep killed mid-write leaves half a line, here half of its
    first line's `LINE:OFFSET:` header. Said as grep's failure, then the whole file read in Python."""
    path = _big_log(tmp_path, hosts=8, rounds=2)
    python, _, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=0, BLOCK=4096)
    _grep_killed_after(tmp_path, monkeypatch, "head -n 1 | cut -c 1-3")
    _, killed, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=0, BLOCK=4096)
    assert killed == python and "grep" not in fared
    assert "failed (killed by signal 9)" in capfd.readouterr().err


def test_grep_path_reads_a_line_completed_while_grep_reads_up_to_the_size_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A WARN line the job is still writing when the scan begins: grep reads it whole, Python up to
    the size the file had. The file is read in Python, with that size: the same report."""
    from clustercheck.analyzers.nccl_log import grep

    lines = _big_log(tmp_path).read_bytes()
    path = tmp_path / "written.log"
    warn = b"gpu001:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with error 12\n"
    path.write_bytes(lines + warn[:30])
    python, _, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    real = grep._start

    def start_then_grow(*args: Any) -> Any:  # the rest of the line, written while the greps read
        proc = real(*args)
        if path.stat().st_size == len(lines) + 30:
            with path.open("ab") as log:
                log.write(warn[30:])
        return proc

    monkeypatch.setattr(grep, "_start", start_then_grow)
    monkeypatch.setattr(nccl_log.knobs, "GREP", True)
    r = analyze_paths([path])
    assert json.dumps({**r.to_json(), "lines": r.lines}) == python[0]
    assert path.stat().st_size == len(lines) + len(warn)


def test_grep_path_reads_a_log_ending_in_a_channel_line_without_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grep ends such a last line with a newline: that is no line read past the file's size, and the
    greps answer (a log still written often ends so)."""
    data = (LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt").read_bytes().rstrip(b"\n")
    last = [line for line in data.split(b"\n") if line.endswith((b"/GDRDMA", b"via NET/IB/0"))]
    for tail in last[0], last[0].replace(b"/GDRDMA", b""):
        path = tmp_path / "open.log"
        path.write_bytes(data + b"\n" + tail)
        python, via_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=0, BLOCK=4096)
        assert via_grep == python and fared == ["grep"] * len(EXPECTS), (tail, fared)


def test_grep_path_reads_a_growing_log_up_to_the_size_it_had(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.analyzers.nccl_log import grep

    path = _big_log(tmp_path)
    python, _, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    size = path.stat().st_size
    real = grep._start

    def start_then_grow(*args: Any) -> Any:  # the job writes on while the greps read
        proc = real(*args)
        with path.open("ab") as log:
            log.write(b"gpu001:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with error 12\n" * 50)
        return proc

    monkeypatch.setattr(grep, "_start", start_then_grow)
    monkeypatch.setattr(nccl_log.knobs, "GREP", True)
    r = analyze_paths([path])
    assert json.dumps({**r.to_json(), "lines": r.lines}) == python[0] and path.stat().st_size > size


def test_grep_path_reads_a_log_growing_by_channel_lines_up_to_the_size_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The greps count the common channel lines without Python seeing them: a log that grows by such
    lines while they read is read in Python instead, up to the size it had, with the same report."""
    from clustercheck.analyzers.nccl_log import grep

    path = _big_log(tmp_path)
    python, _, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    size = path.stat().st_size
    real = grep._start
    grown = (
        b"gpu001:207008:207008 [0] NCCL INFO Channel 00/0 : 1[1] -> 8[0] [receive] via NET/IB/0/GDRDMA\n"
        b"gpu007:207008:207008 [0] NCCL INFO Channel 00/0 : 1[1] -> 8[0] [receive] via NET/IB/0\n"
    ) * 500
    fared: list[str] = []

    def start_then_grow(*args: Any) -> Any:  # a new communicator's channel lines, written while grep reads
        proc = real(*args)
        with path.open("ab") as log:
            log.write(grown)
        return proc

    def spy(*args: Any) -> Any:
        try:
            return scan_file(*args)
        except grep.Unsuitable as exc:
            fared.append(str(exc))
            raise

    scan_file = grep.scan_file
    monkeypatch.setattr(grep, "_start", start_then_grow)
    monkeypatch.setattr(grep, "scan_file", spy)
    monkeypatch.setattr(nccl_log.knobs, "GREP", True)
    r = analyze_paths([path])
    assert json.dumps({**r.to_json(), "lines": r.lines}) == python[0] and path.stat().st_size > size
    assert fared and "grew by channel lines" in fared[0]


@pytest.mark.parametrize("use_grep", [True, False])
def test_jobs_do_not_change_the_report(use_grep: bool, tmp_path: Path) -> None:
    """--jobs 2 gave another report than --jobs 1 when the exact start reached past the first of the
    stretches (a file's eighth): it was cut short there. The greps read the whole file either way,
    so the grep path reads one stretch whatever --jobs says; the Python processes take the exact
    start whole as their first stretch (where one process reading the file would end it). Run in a
    process of its own, as the CLI runs it: its worker processes are forked from it."""
    import subprocess
    import sys

    from tests.helpers import REPO

    path = _big_log(tmp_path, hosts=8, rounds=2)
    code = f"""
import json, signal, sys
from clustercheck.analyzers import nccl_log
from clustercheck.analyzers.nccl_log import analyze_paths
signal.signal(signal.SIGTERM, lambda *_: None)  # a caller's handler that does not exit (a sweep's)
for name, value in (("GREP_MIN", 0), ("PARALLEL_MIN", 0), ("BLOCK", 4096), ("GREP", {use_grep})):
    setattr(nccl_log.knobs, name, value)
channels = open({str(path)!r}, "rb").read().count(b" via ")
for exact in (channels // 2, 0, 7):  # past the first eighth; none; a few
    nccl_log.knobs.EXACT_CHANNELS = exact
    runs = (analyze_paths([{str(path)!r}], jobs=j) for j in (1, 2, 3))
    said = [json.dumps({{**r.to_json(), "lines": r.lines}}) for r in runs]
    assert said[0] == said[1] == said[2], exact
print("same")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "same", proc.stderr[-2000:]


def test_lean_channel_lines_of_every_kind_agree_with_the_exact_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the exact start the common channel lines (IB, GPUDirect RDMA, no proxy, the tail ending the
    line) are counted and every other one read: CRLF endings, PXN proxies (as in the single-HCA PXN
    log), shared memory (as in the llama-3 SHM log) and no GPUDirect RDMA give what the exact scan
    gives, through grep and in Python, in one process and in stretches."""
    lines = _big_log(tmp_path).read_bytes().split(b"\n")
    net = [i for i, line in enumerate(lines) if b"via NET/IB/" in line]
    p2p = [i for i, line in enumerate(lines) if b"via P2P/" in line]
    for i in net[::5]:
        lines[i] += b"\r"
    for i in net[1::7]:
        lines[i] = lines[i].replace(b"/GDRDMA", b"(8)/GDRDMA")
    for i in p2p[::11]:
        lines[i] = lines[i].split(b" via ")[0] + b" via SHM/direct/direct"
    path = tmp_path / "kinds.log"
    path.write_bytes(b"\n".join(lines))
    exact = analyze_paths([path])
    assert exact.intra_node.get("SHM") and exact.net_channels == len(net)
    python, via_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=500, BLOCK=4096)
    assert via_grep == python and fared.count("grep") == len(EXPECTS)
    fast = json.loads(python[0])
    want = exact.to_json()
    for key in ("network", "link_layer", "gpudirect_rdma", "net_channels", "single_node", "status"):
        assert fast[key] == want[key], key
    assert {h: v["gpudirect_rdma"] for h, v in fast["hosts"].items()} == {
        h: v["gpudirect_rdma"] for h, v in want["hosts"].items()
    }
    assert [f["message"] for f in fast["findings"]] == [f["message"] for f in want["findings"]]
    knobs = {"PARALLEL_MIN": 1, "GREP_MIN": 0, "BLOCK": 4096, "EXACT_CHANNELS": 500}
    in_python = _in_a_fresh_process(path, 2, (None,), GREP=False, **knobs)
    assert _in_a_fresh_process(path, 2, (None,), GREP=True, **knobs) == in_python


def test_common_channel_lines_keep_their_first_line_before_a_later_proxy_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PXN line (read one by one) after the first common line (only counted) has the same key, IB
    with GPUDirect RDMA: the key's first line is still the common one, through grep as in Python."""
    lines = (LOGS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt").read_bytes().split(b"\n")
    net = [i for i, line in enumerate(lines) if line.endswith(b"/GDRDMA")]
    lines[net[3]] = lines[net[3]].replace(b"/GDRDMA", b"(3)/GDRDMA")  # as the PXN log prints a proxy
    path = tmp_path / "pxn-later.log"
    path.write_bytes(b"\n".join(lines))
    python, via_grep, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=0, BLOCK=1 << 14)
    assert via_grep == python and "grep" in fared
    (gdr,) = [f for f in json.loads(python[0])["findings"] if "GPUDirect RDMA on all" in f["message"]]
    assert gdr["lines"] == [net[0] + 1]


def test_a_grep_that_fails_after_the_exact_start_leaves_no_line_counted_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The exact start's lines are parsed while the greps read on; where grep then fails, the scan
    forgets them and reads the whole file in Python: a transport error near the start counts once."""

    lines = _big_log(tmp_path).read_text().splitlines()
    warn = (
        "gpu003:207008:208000 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer "
        "10.99.91.63<36473> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.99.91.59"
    )  # the big log's own last line, from another host, near the start
    path = tmp_path / "warn-early.log"
    path.write_text("\n".join([*lines[:5], warn, *lines[5:]]) + "\n")
    python, _, _ = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    assert json.loads(python[0])["error_count"] == 2
    _grep_killed_after(tmp_path, monkeypatch, "head -c 3000")
    _, killed, fared = _both_paths(monkeypatch, [path], EXACT_CHANNELS=50, BLOCK=4096)
    assert killed == python and "grep" not in fared
    assert "failed (killed by signal 9)" in capfd.readouterr().err
