"""rdma.oversubscription: leaf oversubscription and cabling asymmetry from a site's ibnetdiscover dump.

Reads one file on the node: the dump the profile names (`dump`, e.g. a nightly `ibnetdiscover
> /shared/fabric/ibnetdiscover.txt`). The analysis is `clustercheck topology --ibnetdiscover
DUMP --oversubscription`'s (clustercheck.analyzers.topology.oversubscription); nothing runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustercheck import Host, Result, check, fail, ok, warn
from clustercheck.errors import HostError
from clustercheck.result import Status


def _validate(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    problems = []
    dump = params.get("dump")
    if not isinstance(dump, str) or not dump.startswith("/"):
        problems.append(f"dump: {dump!r} is not the absolute path of an ibnetdiscover dump on the node")
    ratio = params.get("max_ratio", 1.0)
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not ratio > 0:
        problems.append(f"max_ratio: {ratio!r} is not a host:uplink ratio above 0 (1.0: non-blocking)")
    return problems


@check(needs=["file <dump>"], timeout=20, validate=_validate, action="CHECK_CABLE")
def oversubscription(host: Host, *, dump: str, max_ratio: float = 1.0) -> Result:
    """No leaf switch has more host bandwidth than its uplinks allow, nor fewer live uplinks than its peers.

    Why: a job's collectives cross the spines at the speed of the leaf's uplinks. A leaf with
    more host-facing bandwidth than uplink bandwidth (oversubscribed: 18 hosts on 15 uplinks
    is 1.20:1) slows every job that spans it, and a leaf with fewer live uplinks than the
    other leaves is a cable out or a port down that no node-local check sees: its HCAs are
    ACTIVE, only the fabric is thinner.

    How: reads the `ibnetdiscover` dump at `dump` on the node (the default form with
    Switch/Ca blocks, or `ibnetdiscover -p`; hosts seen only on switch port lines count), and
    for every leaf (a switch with hosts; SHARP aggregation nodes are no hosts) adds host-facing
    and uplink bandwidth (ports x the rate of each link's width and speed, 4xNDR = 400 Gb/s):
    a leaf above `max_ratio` (1.0: non-blocking) fails, a leaf with fewer live uplinks than
    most leaves have warns (cabling asymmetry), as `clustercheck topology --ibnetdiscover
    DUMP --oversubscription` does. A missing or unparsable dump is an error; a dump with
    duplicate GUIDs gives findings, not a crash. The dump is as old as its last refresh: keep
    it current (a nightly `ibnetdiscover > DUMP` from one node).

    Fix: the leaf and port are named: re-seat or replace the uplink cables the asymmetric leaf
    lacks (`iblinkinfo` shows its down ports), or re-cable the leaf so its host and uplink
    bandwidth match the design.
    """
    # imported here: every rdma module loads with rdma.ports on the prolog path, the analyzer costs ~50 ms
    from clustercheck.analyzers import topology as topo

    try:
        text = host.read(dump)
    except FileNotFoundError:
        raise HostError(
            host.name, f"cannot tell: the ibnetdiscover dump {dump} is absent (write it with `ibnetdiscover > {dump}`)"
        ) from None
    try:
        fabric = topo.parse_ibnetdiscover(text, dump)
    except topo.TopologyError as exc:
        raise HostError(host.name, f"cannot tell: {exc}") from None
    over = topo.oversubscription(fabric, max_ratio)
    data: dict[str, object] = {
        "dump": dump,
        "max_ratio": max_ratio,
        "leaves": [leaf.to_json() for leaf in over.leaves],
        "designed_uplinks": over.designed_uplinks,
        "findings": [f.to_json() for f in over.findings],
    }
    evidence = [f"{f.status.value}: {f.message}" + (f" ({dump}:{f.line})" if f.line else "") for f in over.findings]
    evidence += [
        f"{leaf.description or leaf.name} ({leaf.name}, line {leaf.line}): {leaf.hosts} hosts "
        f"({leaf.host_gbps:g} Gb/s) on {leaf.uplinks} uplinks ({leaf.uplink_gbps:g} Gb/s)"
        + (f" = {leaf.ratio:.2f}:1" if leaf.ratio is not None else "")
        for leaf in over.leaves[:40]
    ]
    if len(over.leaves) > 40:
        evidence.append(f"... and {len(over.leaves) - 40} more leaves (data.leaves has them all)")
    above = [lf for lf in over.leaves if lf.ratio is not None and lf.ratio > max_ratio + 1e-9]
    short = [lf for lf in over.leaves if over.designed_uplinks is not None and lf.uplinks < over.designed_uplinks]
    # the per-leaf findings these two lists sum up; every other finding (a leaf with no uplink, a GUID
    # described twice, a dump with no links, ports of unknown speed) is said as it is
    other_fails = [f for f in over.findings if f.status is Status.FAIL and f.line not in {lf.line for lf in above}]
    other_warns = [f for f in over.findings if f.status is Status.WARN and f.line not in {lf.line for lf in short}]
    n = len(over.leaves)
    parts_fail = [f.message for f in other_fails[:3]]
    if above:
        worst = above[0]
        parts_fail.insert(
            0,
            f"{len(above)} of {n} leaves above {max_ratio:g}:1, worst {worst.description or worst.name}: "
            f"{worst.hosts} hosts on {worst.uplinks} uplinks = {worst.ratio:.2f}:1 ({dump}:{worst.line})",
        )
    parts_warn = [f.message for f in other_warns[:3]]
    if short:
        fewest = min(short, key=lambda lf: lf.uplinks)
        parts_warn.insert(
            0,
            f"{len(short)} of {n} leaves with fewer live uplinks than the {over.designed_uplinks} most have "
            f"(cabling asymmetry), fewest {fewest.description or fewest.name}: {fewest.uplinks} ({dump}:{fewest.line})",
        )
    data["above"] = [lf.name for lf in above]
    data["short"] = [lf.name for lf in short]
    remedy = (
        "For an asymmetric leaf: `iblinkinfo` on the leaf shows its down ports; re-seat or replace those uplink "
        "cables. For a leaf above the ratio: re-cable it so host and uplink bandwidth match the design."
    )
    if parts_fail:
        return fail("; ".join(parts_fail + parts_warn), remedy=remedy, data=data, evidence=evidence)
    if parts_warn:
        return warn("; ".join(parts_warn), remedy=remedy, data=data, evidence=evidence)
    summary_ok = next((f.message for f in over.findings if f.status is Status.OK), f"{n} leaves")
    return ok(f"{summary_ok}; none above {max_ratio:g}:1, no leaf short of uplinks", data=data, evidence=evidence)
