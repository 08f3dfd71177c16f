"""Where a node set (a job's SLURM_JOB_NODELIST) sits in a `Topology`, and the verdict.

`place()` gives the leaf switches (or blocks) the nodes span, the least number of leaves that
could hold that many nodes, the lowest common switch, and findings: more leaves than needed
warns, nodes in trees with no common switch or under no leaf fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from clustercheck.hostlist import fold
from clustercheck.result import Status, worst

from .model import Finding, Topology


class Placement(NamedTuple):
    """How a node set sits in the topology, and the verdict."""

    nodes: tuple[str, ...]
    leaves_spanned: tuple[str, ...]
    min_leaves: int
    common_switch: str | None
    common_level: int | None
    unknown: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    @property
    def summary(self) -> str:
        if self.findings:
            return next(f.message for f in self.findings if f.status is self.status)
        n, k = len(self.nodes), len(self.leaves_spanned)
        where = f" ({', '.join(self.leaves_spanned)})" if k <= 4 else ""
        common = (
            f"; lowest common switch {self.common_switch} (level {self.common_level})"
            if self.common_switch and k > 1
            else ""
        )
        leaves = f"{k} leaf switch{'es' if k != 1 else ''}"
        return f"{n} node{'s' if n != 1 else ''} under {leaves}{where}, as few as possible{common}"


def min_leaves(topo: Topology, count: int) -> int:
    """The least number of leaves that could hold `count` nodes (largest leaves first)."""
    sizes = sorted((len(topo.switches[leaf].nodes) for leaf in topo.leaves), reverse=True)
    held, used = 0, 0
    for size in sizes:
        if held >= count:
            break
        held += size
        used += 1
    return used if held >= count else len(sizes)


def place(topo: Topology, nodes: Sequence[str]) -> Placement:
    """Judge a node set: spanning more leaves than needed warns; crossing disconnected trees fails."""
    nodes = tuple(dict.fromkeys(nodes))
    unknown = tuple(n for n in nodes if n not in topo.node_leaves)
    known = [n for n in nodes if n in topo.node_leaves]
    spanned_set = {leaf for n in known for leaf in topo.node_leaves[n]}
    spanned = tuple(leaf for leaf in topo.switches if leaf in spanned_set)
    needed = min_leaves(topo, len(known)) if known else 0
    findings: list[Finding] = []
    noun = "block" if topo.kind == "block" else "leaf switch"
    nouns = "blocks" if topo.kind == "block" else "leaf switches"
    if unknown:
        findings.append(
            Finding(
                Status.FAIL,
                f"{fold(unknown)} {'is' if len(unknown) == 1 else 'are'} under no {noun} of {topo.source}",
                topo.source,
            )
        )
    common: str | None = None
    common_level: int | None = None
    if known and topo.kind == "tree":
        target = frozenset(known)
        candidates = [
            (lvl, i, n)
            for i, n in enumerate(topo.switches)
            if (lvl := topo.level.get(n)) is not None and topo.covered(n) >= target
        ]
        if candidates:
            common_level, _, common = min(candidates)
        elif len(spanned) > 1:
            tops = sorted({_top(topo, leaf) for leaf in spanned})
            findings.append(
                Finding(
                    Status.FAIL,
                    f"{len(known)} nodes span {len(spanned)} leaf switches in {len(tops)} trees with no common "
                    f"switch (tops: {', '.join(tops[:4])}): traffic between them has no path in this topology; "
                    "Slurm places no job so unless TopologyParam=TopoOptional",
                    topo.source,
                )
            )
    if len(spanned) > needed:
        shown = ", ".join(spanned[:6]) + (", ..." if len(spanned) > 6 else "")
        findings.append(
            Finding(
                Status.WARN,
                f"{len(known)} nodes span {len(spanned)} {nouns} ({shown}); {needed} would hold them"
                + (f"; lowest common switch {common} (level {common_level})" if common else ""),
                topo.source,
            )
        )
    return Placement(nodes, spanned, needed, common, common_level, unknown, tuple(findings))


def _top(topo: Topology, name: str) -> str:
    seen = {name}
    while topo.parents.get(name):
        parent = topo.parents[name][0]
        if parent in seen:
            break
        seen.add(parent)
        name = parent
    return name
