"""roce.qos: the mlnx_qos parser on the real corpus outputs (property-tested against garbage), and the
verdicts and fleet drift through the CLI over fixtures/roce-qos-* (fixtures/roce-qos-derive.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli

from clustercheck.facts.roce import parse_mlnx_qos, parse_net_sysfs, ranges

ATT = (CORPUS / "roce_qos" / "att-netarbiter-setup-nic-lossless-mlnx_qos-trust-dscp-pfc3.txt").read_text()
SPIDERPOOL = (CORPUS / "roce_qos" / "spiderpool-doc-rdma-qos-query-mlnx_qos-ecn-sysfs-pfc5-SNIPPET.txt").read_text()
CLUSTER = FIXTURES / "roce-qos-cluster"
HEALTHY = CLUSTER / "roce01"


def test_mlnx_qos_of_a_lossless_dscp_setup() -> None:
    first, second = parse_mlnx_qos(ATT)  # `--trust dscp`, then `--pfc 0,0,0,1,0,0,0,0`: two answers
    for r in (first, second):
        assert r.trust == "dscp" and r.dcbx == "OS controlled"
        assert r.pfc == (False, False, False, True, False, False, False, False)
        assert r.pfc_priorities() == [3]
        assert r.dscps_of(3) == list(range(24, 32)) and r.dscp2prio[26] == 3  # NCCL_IB_TC 106 = DSCP 26
        assert len(r.dscp2prio) == 64
        assert r.tc_of_prio == {1: 0, 0: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7}


def test_mlnx_qos_of_a_priority_5_query() -> None:
    (r,) = parse_mlnx_qos(SPIDERPOOL)  # a grep of the answer: trust and the PFC table only
    assert (r.trust, r.pfc_priorities(), r.dscp2prio, r.dcbx) == ("dscp", [5], {}, "")


def test_ranges() -> None:
    assert ranges([24, 25, 26, 27, 28, 29, 30, 31]) == "24-31"
    assert (ranges([3]), ranges([]), ranges([0, 1, 3, 5, 6])) == ("3", "none", "0-1,3,5-6")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from([*ATT.splitlines(), *SPIDERPOOL.splitlines(), "", "enabled 1 1", "prio:9 dscp:99,"]),
        max_size=60,
    )
)
def test_mlnx_qos_parser_takes_shuffled_and_cut_output(lines: list[str]) -> None:
    for r in parse_mlnx_qos("\n".join(lines)):
        assert r.pfc is None or len(r.pfc) == 8
        assert all(0 <= d < 64 and 0 <= p < 8 for d, p in r.dscp2prio.items())
        assert all(0 <= p < 8 for p in r.tc_of_prio)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_mlnx_qos_parser_takes_garbage(text: str) -> None:
    parse_mlnx_qos(text)
    parse_net_sysfs(text.splitlines())


# -- verdicts through the CLI ----------------------------------------------------------------------


def replay(fixture: Path, *args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("run", "--replay", fixture, "--format", "json", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (check,) = [c for c in host["checks"] if c["id"] == "roce.qos"]
    return proc.returncode, check


def profile(tmp_path: Path, params: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"checks:\n  roce.qos: {{{params}}}\n")
    return path


def test_a_lossless_port_is_ok_with_its_facts() -> None:
    code, c = replay(HEALTHY)
    assert (code, c["status"]) == (0, "ok")
    assert c["summary"] == "1 RoCE port: PFC on priority 3, trust dscp, DSCP 26 -> 3, ECN on for priority 3, MTU 4200"
    assert c["data"]["facts"] == {
        "RoCE trust": "dscp",
        "RoCE PFC priorities": "3",
        "RoCE DSCP to priority 3": "24-31",
        "RoCE ECN priority 3": "np on, rp on",
        "RoCE MTU": "4200",
    }


def test_one_node_with_pfc_off_shows_in_the_fleet_drift(tmp_path: Path) -> None:
    proc = cli("run", "--replay", CLUSTER)
    assert proc.returncode == 2
    out = proc.stdout
    assert "fail 1 host: roce03" in out and "PFC is off on priority 3 (enabled on: none)" in out
    drift = out.split("drift from the majority", 1)[1]
    assert "RoCE PFC priorities" in drift and "3 (2 hosts)" in drift and "none on roce03" in drift
    # the merged report of per-node JSON results says the same
    for h in ("roce01", "roce02", "roce03"):
        (tmp_path / f"{h}.json").write_text(cli("run", "--replay", CLUSTER / h, "--format", "json").stdout)
    merged = cli("report", tmp_path, "--format", "json")
    assert merged.returncode == 2, merged.stderr
    (drifted,) = [d for d in json.loads(merged.stdout)["fleet"]["drift"] if d["fact"] == "RoCE PFC priorities"]
    assert drifted["majority"] == "3" and "roce03" in json.dumps(drifted)


def test_another_priority_and_trust_fail(tmp_path: Path) -> None:
    code, c = replay(HEALTHY, "--profile", profile(tmp_path, "priority: 5, trust: pcp, dscp: 40"))
    assert (code, c["status"], c["action"]) == (2, "fail", "FIX_CONFIG")
    assert "PFC is off on priority 5 (enabled on: 3)" in c["summary"]
    assert "trust state dscp, expected pcp" in c["summary"]
    code, c = replay(HEALTHY, "--profile", profile(tmp_path, "priority: 3, dscp: 46"))
    assert (code, c["status"]) == (2, "fail") and "DSCP 46 maps to priority 5, expected 3" in c["summary"]
    code, c = replay(HEALTHY, "--profile", profile(tmp_path, "mtu: 9000"))
    assert "MTU 4200, expected at least 9000" in c["summary"]


def test_ecn_off_fails_and_ecn_unreadable_cannot_tell(tmp_path: Path) -> None:
    code, c = replay(FIXTURES / "roce-qos-ecn-off")
    assert (code, c["status"]) == (2, "fail") and c["summary"].endswith("ECN reaction point off for priority 3")
    code, c = replay(FIXTURES / "roce-qos-no-ecn-sysfs")
    assert (code, c["status"]) == (3, "error")
    assert "ECN state for priority 3 unreadable" in c["summary"]
    assert c["data"]["facts"]["RoCE PFC priorities"] == "3"  # the facts still reach the fleet view
    code, c = replay(FIXTURES / "roce-qos-no-ecn-sysfs", "--profile", profile(tmp_path, "ecn: false"))
    assert (code, c["status"]) == (0, "ok")


def test_the_ecn_and_mtu_read_of_a_recording() -> None:
    (folder,) = (HEALTHY / "commands").glob("sh_-c_grep*")
    net = parse_net_sysfs((folder / "stdout").read_text().splitlines())
    assert net.mtu == 4200 and len(net.ecn) == 16 and all(net.ecn.values())
    assert parse_net_sysfs(["/sys/class/net/eth0/ecn/roce_np/enable/9:1", "/sys/class/net/eth0/mtu:x"]) == (
        {},
        None,
    )


def test_no_mlnx_qos_cannot_tell_and_an_ib_node_skips() -> None:
    code, c = replay(FIXTURES / "roce-qos-no-mlnx-qos")
    assert (code, c["status"]) == (3, "error")
    assert "mlnx_qos is not installed" in c["summary"]
    code, c = replay(FIXTURES / "roce-qos-infiniband")
    assert (code, c["status"]) == (0, "skip")


def test_bad_parameters_are_refused_when_the_profile_loads(tmp_path: Path) -> None:
    proc = cli("run", "--replay", HEALTHY, "--profile", profile(tmp_path, "priority: 9, trust: vlan, dscp: 64"))
    assert proc.returncode == 64
    for word in ("priority: 9", "trust: 'vlan'", "dscp: 64"):
        assert word in proc.stderr, proc.stderr


@pytest.mark.skipif(Path("/sys/class/infiniband").exists(), reason="this machine has RDMA devices")
def test_a_node_without_rdma_skips_on_this_machine(tmp_path: Path) -> None:
    proc = cli("run", "--local", "--profile", profile(tmp_path, ""), "--format", "json")
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (c,) = host["checks"]
    assert (proc.returncode, c["status"]) == (0, "skip"), c
