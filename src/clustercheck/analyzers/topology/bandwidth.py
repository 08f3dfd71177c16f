"""Oversubscription: per leaf switch of a `Fabric`, host-facing against uplink bandwidth.

`oversubscription()` (`clustercheck topology --oversubscription`, the rdma.oversubscription
check) rates each port from the link's width and speed in the dump (`LANE_GBPS`, `link_gbps()`);
leaves above the allowed ratio fail, leaves with fewer live uplinks than their peers warn.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

from clustercheck.result import Status, worst

from .ibnetdiscover import Fabric, IBLink, _is_host
from .model import Finding, _plural

#: Gb/s per lane of each InfiniBand speed as ibnetdiscover prints it (the kernel's per-lane rates,
#: domain-facts §F: SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25, HDR 50, NDR 100, XDR 200).
LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
_RATE_RE = re.compile(r"^(\d{1,2})x([A-Z0-9]{2,6})$")


def link_gbps(speed: str) -> float | None:
    """'4xNDR' -> 400.0; None for a speed the dump does not give or this table does not know."""
    m = _RATE_RE.match(speed)
    if not m or m.group(2) not in LANE_GBPS:
        return None
    return int(m.group(1)) * LANE_GBPS[m.group(2)]


class LeafLoad(NamedTuple):
    name: str  # ibnetdiscover id, "S-<guid>"
    description: str
    line: int
    hosts: int  # host-facing ports (SHARP aggregation nodes left out)
    host_gbps: float
    uplinks: int  # live ports to other switches
    uplink_gbps: float
    unknown_speeds: int  # ports whose speed is not in the dump (counted at the leaf's other ports' rate)

    @property
    def ratio(self) -> float | None:
        return self.host_gbps / self.uplink_gbps if self.uplink_gbps else None

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "switch": self.name,
            "description": self.description,
            "line": self.line,
            "hosts": self.hosts,
            "host_gbps": self.host_gbps,
            "uplinks": self.uplinks,
            "uplink_gbps": self.uplink_gbps,
            "ratio": round(ratio, 3) if ratio is not None else None,
        }


class Oversubscription(NamedTuple):
    source: str
    max_ratio: float
    leaves: list[LeafLoad]
    designed_uplinks: int | None  # the uplink count most leaves have
    findings: list[Finding]

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)


def _ratio_text(ratio: float | None) -> str:
    return "no uplink" if ratio is None else f"{ratio:.2f}:1"


def oversubscription(fabric: Fabric, max_ratio: float = 1.0) -> Oversubscription:
    """Per leaf (a switch with hosts), host-facing bandwidth against uplink bandwidth (ports x rate
    from each link's width and speed); leaves above `max_ratio` fail; a leaf with fewer live
    uplinks than most leaves have (its peers) warns: a cable out or a port down."""
    src = fabric.source
    findings: list[Finding] = list(fabric.findings)
    leaves: list[LeafLoad] = []
    for sw in fabric.switches:
        hosts: dict[int, IBLink] = {}
        ups: dict[int, IBLink] = {}
        for link in sw.links:
            other = fabric.nodes[link.remote]
            if other.kind == "Ca" and _is_host(other):
                hosts.setdefault(link.port, link)
            elif other.kind == "Switch" and other.name != sw.name:
                ups.setdefault(link.port, link)
        if not hosts:
            continue
        rates = [link_gbps(link.speed) for link in (*hosts.values(), *ups.values())]
        known = [r for r in rates if r is not None]
        fallback = Counter(known).most_common(1)[0][0] if known else 1.0

        def total(links: Iterable[IBLink], fallback: float = fallback) -> float:
            return sum(link_gbps(link.speed) or fallback for link in links)

        leaves.append(
            LeafLoad(
                sw.name,
                sw.description.strip(),
                sw.line,
                len(hosts),
                total(hosts.values()),
                len(ups),
                total(ups.values()),
                len(rates) - len(known),
            )
        )
    leaves.sort(key=lambda leaf: (-(leaf.ratio if leaf.ratio is not None else float("inf")), leaf.description))
    if not leaves:
        findings.append(
            Finding(
                Status.FAIL,
                "no switch with hosts in the dump (no links between switches and HCAs): nothing to judge; "
                "run ibnetdiscover from a node whose HCA port is Active and sees the subnet manager",
                src,
            )
        )
        return Oversubscription(src, max_ratio, leaves, None, findings)
    unknown = sum(leaf.unknown_speeds for leaf in leaves)
    if unknown:
        findings.append(
            Finding(
                Status.WARN,
                f"{_plural(unknown, 'port')} at leaves without a known speed in the dump: counted at their "
                "leaf's most common rate",
                src,
            )
        )
    multi = len(fabric.switches) > 1
    counts = Counter(leaf.uplinks for leaf in leaves)
    designed = max(counts, key=lambda n: (counts[n], n)) if multi else None
    for leaf in leaves:
        label = f"{leaf.description or leaf.name} ({leaf.name})"
        ratio = leaf.ratio
        if ratio is None:
            if multi:
                findings.append(
                    Finding(
                        Status.FAIL,
                        f"{label}: {_plural(leaf.hosts, 'host')} and no live uplink: its hosts reach no other leaf",
                        src,
                        leaf.line,
                    )
                )
            continue
        if ratio > max_ratio + 1e-9:
            findings.append(
                Finding(
                    Status.FAIL,
                    f"{label}: {_plural(leaf.hosts, 'host')} ({leaf.host_gbps:g} Gb/s) on "
                    f"{_plural(leaf.uplinks, 'uplink')} ({leaf.uplink_gbps:g} Gb/s) = {_ratio_text(ratio)}, "
                    f"above {max_ratio:g}:1",
                    src,
                    leaf.line,
                )
            )
    if designed is not None:
        short = [leaf for leaf in leaves if leaf.uplinks < designed]
        for leaf in sorted(short, key=lambda lf: (lf.uplinks, lf.description)):
            findings.append(
                Finding(
                    Status.WARN,
                    f"{leaf.description or leaf.name} ({leaf.name}): {leaf.uplinks} live uplinks where "
                    f"{counts[designed]} of {len(leaves)} leaves have {designed}: check the cables and ports "
                    "(cabling asymmetry)",
                    src,
                    leaf.line,
                )
            )
    worst_leaf = leaves[0]
    findings.append(
        Finding(
            Status.OK,
            f"{_plural(len(leaves), 'leaf', 'leaves')}; worst {worst_leaf.description or worst_leaf.name}: "
            f"{worst_leaf.hosts} hosts on {worst_leaf.uplinks} uplinks = {_ratio_text(worst_leaf.ratio)}",
            src,
        )
    )
    return Oversubscription(src, max_ratio, leaves, designed, findings)
