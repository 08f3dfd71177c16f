"""RoCE: the QoS that makes RDMA over Ethernet lossless (PFC, trust, DSCP map, ECN, MTU), per node and across the fleet.

Reads, per RoCE port (an RDMA port whose link layer is Ethernet, from the rdma gather of
clustercheck.facts.infiniband): /sys/class/infiniband/<HCA>/ports/<N>/gid_attrs/ndevs/0 (its
network interface), `mlnx_qos -i <if>` (MLNX_OFED / mlnx-tools: trust state, DSCP->priority
map, PFC per priority), /sys/class/net/<if>/ecn/roce_np/enable/<prio> and roce_rp/enable/<prio>
(ECN notification and reaction point) and /sys/class/net/<if>/mtu, in one `grep -H .` per
interface. Nothing here writes.
Parsers: clustercheck.facts.roce.
"""

# Sources: corpus roce_qos/ (att/netarbiter's lossless setup, spiderpool's QoS query);
# domain-facts §F (ECN sysfs, PFC through mlnx_qos); NVIDIA's port MTU guidance for RoCE
# (4200 for an active MTU of 4096), as quoted in NVIDIA/dgx-spark-playbooks#103.

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.infiniband import port_selected, rdma
from clustercheck.facts.roce import QosReading, parse_mlnx_qos, parse_net_sysfs, ranges

NET_SYSFS_SCRIPT = script_text("roce_net_sysfs.sh")  # ECN enable files and MTU of the folder given as $1


def _validate(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    problems = []
    priority = params.get("priority", 3)
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 7:
        problems.append(f"priority: {priority!r} is not a priority from 0 to 7")
    if params.get("trust", "dscp") not in ("dscp", "pcp", ""):
        problems.append(f"trust: {params.get('trust')!r} is not dscp, pcp or '' (not judged)")
    dscp = params.get("dscp", -1)
    if not isinstance(dscp, int) or isinstance(dscp, bool) or not -1 <= dscp <= 63:
        problems.append(f"dscp: {dscp!r} is not a DSCP from 0 to 63 (or -1: any DSCP of the priority)")
    mtu = params.get("mtu", 0)
    if not isinstance(mtu, int) or isinstance(mtu, bool) or mtu < 0:
        problems.append(f"mtu: {mtu!r} is not a number of bytes (0: not judged)")
    return problems


def _uniform(values: dict[str, str]) -> str:
    """One value when every port has it, else 'mlx5_0:3 mlx5_1:none' (a node's fact for the fleet view)."""
    distinct = set(values.values())
    if len(distinct) == 1:
        return next(iter(distinct))
    return " ".join(f"{k}:{v}" for k, v in values.items())


@check(needs=["command sh", "command grep", "command mlnx_qos"], timeout=15, validate=_validate, action="FIX_CONFIG")
def qos(
    host: Host,
    *,
    names: tuple[str, ...] = (),
    priority: int = 3,
    trust: str = "dscp",
    dscp: int = -1,
    ecn: bool = True,
    mtu: int = 0,
) -> Result:
    """Every RoCE port is lossless for NCCL's priority: PFC on it, the trust mode, the DSCP map, ECN, the MTU.

    Why: RoCE needs a lossless class: without PFC on the priority its traffic uses, a
    congested switch drops packets and RDMA's go-back-N retransmission cuts the bandwidth of
    every collective (out_of_sequence and local_ack_timeout_err climb, rdma.counters sees it),
    and without ECN (DCQCN) congestion turns into PFC pause storms. One node with PFC off, a
    different trust mode or a DSCP mapped elsewhere is enough to make the fabric lossy, and
    it passes every single-node test: the fleet view's drift table shows it (the facts below).

    How: for each RDMA port with link layer Ethernet (selected by `names` as in rdma.ports),
    its interface from /sys/class/infiniband/<HCA>/ports/<N>/gid_attrs/ndevs/0, then `mlnx_qos
    -i <if>`: PFC must be enabled on `priority` (default 3, NVIDIA's usual RoCE priority); the
    trust state must be `trust` (dscp or pcp; '' does not judge it); with trust dscp, DSCP
    `dscp` (the one NCCL_IB_TC gives: TC 106 is DSCP 26) must map to `priority`, or with
    `dscp: -1` at least one DSCP must. With `ecn`, /sys/class/net/<if>/ecn/roce_np/enable/
    <priority> and roce_rp/enable/<priority> must be 1. With `mtu` above 0, the interface's MTU
    must be at least that (NVIDIA suggests 4200 for RoCE's 4096 active MTU). PFC on other
    priorities too warns. Facts for the fleet view: RoCE trust, PFC priorities, DSCP to the
    priority, ECN and MTU. A node without RoCE ports skips; mlnx_qos missing or ECN files
    absent with `ecn` is "cannot tell" (error), never ok.

    Fix: `mlnx_qos -i <if> --trust dscp`, `mlnx_qos -i <if> --pfc 0,0,0,1,0,0,0,0` (a 1 at the
    priority), `mlnx_qos -i <if> --dscp2prio set,<dscp>,<priority>`; ECN: `echo 1 >
    /sys/class/net/<if>/ecn/roce_np/enable/<priority>` and roce_rp; MTU: `ip link set <if> mtu
    4200`. Make them persistent (NetworkManager/netplan dispatcher, or the NIC configuration
    operator) and match the switch's PFC/ECN configuration.
    """
    node = rdma(host)
    roce = [p for h in node.hcas for p in node.ports[h] if (p.link_layer or "").lower() == "ethernet"]
    roce = [p for p in roce if port_selected(p, names)]
    if not roce:
        which = f" matching {', '.join(names)}" if names else ""
        return skip(f"no RoCE port{which} (no RDMA port with link layer Ethernet): nothing to judge")
    fails: list[str] = []
    warns: list[str] = []
    unknown: list[str] = []
    evidence: list[str] = []
    per_port: list[dict[str, object]] = []
    f_trust: dict[str, str] = {}
    f_pfc: dict[str, str] = {}
    f_map: dict[str, str] = {}
    f_ecn: dict[str, str] = {}
    f_mtu: dict[str, str] = {}
    for port in roce:
        label = port.hca if sum(1 for p in roce if p.hca == port.hca) == 1 else f"{port.hca}:{port.port}"
        ndev = (
            host.read_optional(f"/sys/class/infiniband/{port.hca}/ports/{port.port}/gid_attrs/ndevs/0") or ""
        ).strip()
        if not ndev or "/" in ndev or " " in ndev:
            unknown.append(f"{port.label}: no network interface in gid_attrs/ndevs/0, so its QoS cannot be read")
            continue
        where = f"{port.label} ({ndev})"
        answer = host.run("mlnx_qos", "-i", ndev)
        readings = parse_mlnx_qos(answer.stdout) if answer.ok else []
        entry: dict[str, object] = {"hca": port.hca, "port": port.port, "interface": ndev}
        per_port.append(entry)
        if answer.exit_code == 127:
            unknown.append(
                f"{where}: mlnx_qos is not installed (MLNX_OFED or mlnx-tools), PFC and trust cannot be read"
            )
        elif not readings:
            detail = (answer.stderr.strip() or answer.stdout.strip())[:160] or "no output"
            unknown.append(f"{where}: `mlnx_qos -i {ndev}` {answer.describe()}: {detail}")
        else:
            _judge_qos(readings[-1], where, priority, trust, dscp, fails, warns, unknown, evidence, entry)
            reading = readings[-1]
            f_trust[label] = reading.trust or "?"
            f_pfc[label] = ranges(reading.pfc_priorities()) if reading.pfc is not None else "?"
            if reading.trust == "dscp":
                f_map[label] = ranges(reading.dscps_of(priority))
        base = f"/sys/class/net/{ndev}"
        argv = ("sh", "-c", NET_SYSFS_SCRIPT, "sh", base)
        read = host.run(*argv, shown_as=shown_with(argv, NET_SYSFS_SCRIPT, "'<roce net sysfs script>'"))
        net = parse_net_sysfs(read.stdout.splitlines())
        if ecn:
            np, rp = net.ecn.get(("roce_np", priority)), net.ecn.get(("roce_rp", priority))
            entry["ecn"] = {"np": np, "rp": rp}
            on_np = [p for (kind, p), v in sorted(net.ecn.items()) if kind == "roce_np" and v]
            on_rp = [p for (kind, p), v in sorted(net.ecn.items()) if kind == "roce_rp" and v]
            f_ecn[label] = f"np {_onoff(np)}, rp {_onoff(rp)}"
            evidence.append(
                f"{where}: ECN notification point on for priorities {ranges(on_np)}, reaction point {ranges(on_rp)}"
            )
            if np is None or rp is None:
                unknown.append(
                    f"{where}: ECN state for priority {priority} unreadable ({base}/ecn/roce_np|roce_rp/enable/"
                    f"{priority} absent: a driver without MLNX_OFED's ECN sysfs)"
                )
            if np is False or rp is False:
                off = " and ".join(n for n, v in (("notification point", np), ("reaction point", rp)) if v is False)
                fails.append(f"{where}: ECN {off} off for priority {priority}")
        value = net.mtu
        entry["mtu"] = value
        if value is not None:
            f_mtu[label] = str(value)
            evidence.append(f"{where}: MTU {value}")
        if mtu and value is None:
            unknown.append(f"{where}: /sys/class/net/{ndev}/mtu unreadable")
        elif mtu and value is not None and value < mtu:
            fails.append(f"{where}: MTU {value}, expected at least {mtu}")
    facts: dict[str, str] = {}
    for name, values in (
        ("RoCE trust", f_trust),
        ("RoCE PFC priorities", f_pfc),
        (f"RoCE DSCP to priority {priority}", f_map),
        (f"RoCE ECN priority {priority}", f_ecn),
        ("RoCE MTU", f_mtu),
    ):
        if values:
            facts[name] = _uniform(values)
    data: dict[str, object] = {"ports": per_port, "priority": priority, "facts": facts, "problems": fails + warns}
    remedy = (
        f"`mlnx_qos -i IF --trust {trust or 'dscp'}`; `mlnx_qos -i IF --pfc` with a 1 at priority {priority} only; "
        f"`mlnx_qos -i IF --dscp2prio set,DSCP,{priority}`; ECN: `echo 1 > /sys/class/net/IF/ecn/roce_np/enable/"
        f"{priority}` and roce_rp; MTU: `ip link set IF mtu 4200`. Persist them and match the switches."
    )
    if fails:
        return fail("; ".join(fails + warns + unknown), remedy=remedy, data=data, evidence=evidence)
    if unknown:
        exc = HostError(host.name, "cannot tell: " + "; ".join(unknown))
        exc.data = data  # type: ignore[attr-defined]  # the runner keeps a HostError's data and evidence
        exc.evidence = evidence  # type: ignore[attr-defined]
        raise exc
    if warns:
        return warn("; ".join(warns), remedy=remedy, data=data, evidence=evidence)
    said = f"{len(roce)} RoCE port{'s' if len(roce) != 1 else ''}: PFC on priority {priority}"
    said += f", trust {trust}" if trust else ""
    if trust == "dscp":
        said += (
            f", DSCP {dscp} -> {priority}"
            if dscp >= 0
            else f", DSCP {facts.get(f'RoCE DSCP to priority {priority}')} -> {priority}"
        )
    said += f", ECN on for priority {priority}" if ecn else ""
    said += f", MTU {facts['RoCE MTU']}" if "RoCE MTU" in facts else ""
    return ok(said, data=data, evidence=evidence)


def _onoff(value: bool | None) -> str:
    return "unknown" if value is None else ("on" if value else "off")


def _judge_qos(
    reading: QosReading,
    where: str,
    priority: int,
    trust: str,
    dscp: int,
    fails: list[str],
    warns: list[str],
    unknown: list[str],
    evidence: list[str],
    entry: dict[str, object],
) -> None:
    on = reading.pfc_priorities()
    entry.update({"trust": reading.trust, "pfc": on if reading.pfc is not None else None})
    evidence.append(
        f"{where}: trust {reading.trust or '?'}, PFC on {ranges(on) if reading.pfc is not None else '?'}"
        + (f", DSCP {ranges(reading.dscps_of(priority))} -> priority {priority}" if reading.trust == "dscp" else "")
        + (f", DCBX {reading.dcbx}" if reading.dcbx else "")
    )
    if reading.pfc is None:
        unknown.append(f"{where}: mlnx_qos printed no PFC table")
    elif not reading.pfc[priority]:
        fails.append(
            f"{where}: PFC is off on priority {priority} (enabled on: {ranges(on)}): RoCE traffic there is lossy"
        )
    elif len(on) > 1:
        others = [p for p in on if p != priority]
        warns.append(f"{where}: PFC also on priority {ranges(others)}, not only {priority}")
    if trust and reading.trust and reading.trust != trust:
        fails.append(f"{where}: trust state {reading.trust}, expected {trust}")
    elif trust and not reading.trust:
        unknown.append(f"{where}: mlnx_qos printed no trust state")
    if reading.trust == "dscp" and (trust in ("dscp", "")):
        mapped = reading.dscps_of(priority)
        if not reading.dscp2prio:
            unknown.append(f"{where}: mlnx_qos printed no dscp2prio map")
        elif dscp >= 0 and reading.dscp2prio.get(dscp) != priority:
            goes = reading.dscp2prio.get(dscp)
            fails.append(
                f"{where}: DSCP {dscp} maps to priority {goes if goes is not None else 'none'}, expected {priority}"
            )
        elif dscp < 0 and not mapped:
            fails.append(f"{where}: no DSCP maps to priority {priority}: RoCE traffic never reaches the lossless queue")
