"""The switch tree the cables make, and topology.conf checked against it.

`fabric_topology()` turns a `Fabric` (an ibnetdiscover dump) into a `Topology` (leaves: switches
with hosts; each switch's children: the switches one hop nearer the hosts);
`render_topology_conf()` writes a Topology as topology.conf (`clustercheck topology --generate`);
`compare()` lists what topology.conf says that the cables contradict (`--compare`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from clustercheck.hostlist import fold
from clustercheck.result import Status

from .ibnetdiscover import Fabric, IBNode, _is_host, hca_host
from .model import MAX_DEPTH, Finding, Switch, Topology, _plural


def fabric_topology(fabric: Fabric, names: Mapping[str, str] | None = None, *, guid_names: bool = False) -> Topology:
    """The tree the cables make: leaves are switches with hosts, each switch's children the
    switches one level down (by hop distance from the leaves). Findings name dump lines.

    An HCA with no node name is left out (and said so), unless `guid_names`: then it is a node
    named by its ibnetdiscover id (`H-<guid>`), as ibmap2slurm.py writes unmapped hosts."""
    findings: list[Finding] = list(fabric.findings)
    src = fabric.source
    hosts = [h for h in fabric.hcas if _is_host(h)]
    leaf_hosts: dict[str, list[tuple[str, IBNode]]] = {}
    unmapped: dict[str, list[str]] = {}
    host_leaves: dict[str, Counter[str]] = {}
    for hca in hosts:
        host = hca_host(hca, names) or (hca.name if guid_names else None)
        for link in hca.links:
            if fabric.nodes[link.remote].kind != "Switch":
                continue
            if host is None:
                unmapped.setdefault(link.remote, []).append(hca.name)
                continue
            leaf_hosts.setdefault(link.remote, []).append((host, hca))
            host_leaves.setdefault(host, Counter())[link.remote] += 1
    leaves = {s.name for s in fabric.switches if s.name in leaf_hosts or s.name in unmapped}
    # a host cabled to several leaves (rails, dual ports) goes under the one most of its links reach
    home: dict[str, str] = {}
    for host, counts in host_leaves.items():
        best = max(counts.values())
        home[host] = min(leaf for leaf, n in counts.items() if n == best)
    multi = {h: c for h, c in host_leaves.items() if len(c) > 1}
    if multi:
        example = next(iter(multi))
        findings.append(
            Finding(
                Status.WARN,
                f"{len(multi)} hosts have HCAs on several leaf switches (rails or dual ports), e.g. {example} on "
                f"{', '.join(sorted(multi[example]))}; each is placed under the leaf most of its links reach",
                src,
            )
        )
    # hop distance from the leaves over switch-to-switch cables
    dist: dict[str, int] = dict.fromkeys(leaves, 0)
    frontier = sorted(leaves)
    while frontier:
        nxt = []
        for name in frontier:
            for other in fabric.neighbours(name):
                if fabric.nodes[other].kind == "Switch" and other not in dist:
                    dist[other] = dist[name] + 1
                    nxt.append(other)
        frontier = sorted(nxt)
    switches: list[Switch] = []
    for sw in sorted(fabric.switches, key=lambda s: (-dist.get(s.name, -1), s.name)):
        if sw.name not in dist:
            findings.append(
                Finding(Status.WARN, f"switch {sw.name} ({sw.description}) reaches no host: left out", src, sw.line)
            )
            continue
        comment = sw.description
        if sw.name in leaves:
            nodes = sorted({h for h, _ in leaf_hosts.get(sw.name, []) if home[h] == sw.name})
            if sw.name in unmapped:
                guids = unmapped[sw.name]
                comment += f"; {len(guids)} HCA{'s' if len(guids) != 1 else ''} without a node name: " + ",".join(guids)
            switches.append(Switch(sw.name, sw.line, tuple(nodes), has_nodes=True, comment=comment))
        else:
            kids = tuple(
                sorted(
                    n
                    for n in fabric.neighbours(sw.name)
                    if fabric.nodes[n].kind == "Switch" and dist.get(n) == dist[sw.name] - 1
                )
            )
            switches.append(Switch(sw.name, sw.line, (), kids, has_children=True, comment=comment))
    count = sum(len(g) for g in unmapped.values())
    if count:
        findings.append(
            Finding(
                Status.WARN,
                f"{_plural(count, 'HCA')} without a Slurm node name (node description "
                f"{next(fabric.nodes[g[0]].description for g in unmapped.values())!r}): give --node-map "
                "(lines `GUID NAME`) or set node descriptions with rdma-ndd",
                src,
            )
        )
    return Topology("tree", src, switches, findings=findings)


def render_topology_conf(topo: Topology, header: Sequence[str] = ()) -> str:
    """A Topology as topology.conf text: top switches first, leaves last."""
    lines = [f"# {h}" if h else "#" for h in header]
    order = sorted(topo.switches.values(), key=lambda s: (-(topo.level.get(s.name) or 0), s.line, s.name))
    for sw in order:
        if sw.has_children:
            body = f"SwitchName={sw.name} Switches={','.join(sw.children)}"
        elif sw.nodes:
            body = f"SwitchName={sw.name} Nodes={fold(sw.nodes)}"
        else:
            # A leaf whose hosts all lack names: keep it out (an empty leaf only confuses), say why.
            lines.append(f"# SwitchName={sw.name}: no named node" + (f" ({sw.comment})" if sw.comment else ""))
            continue
        lines.append(body + (f"  # {sw.comment}" if sw.comment else ""))
    return "\n".join(lines) + "\n"


# -- fabric truth: topology.conf against the cables ----------------------------------------------------


def compare(cables: Fabric, fabric: Topology, conf: Topology) -> list[Finding]:
    """What topology.conf says that the fabric contradicts: nodes under the wrong leaf, nodes and
    switch links the fabric does not have, nodes the fabric has that topology.conf lacks."""
    out: list[Finding] = []
    match = _match_switches(cables, fabric, conf)
    conf_nodes = set(conf.node_leaves)
    fab_nodes = set(fabric.node_leaves)
    wrong: dict[tuple[str, str], list[str]] = {}
    for node in sorted(conf_nodes & fab_nodes):
        conf_leaves = conf.node_leaves[node]
        fab_leaves = set(fabric.node_leaves[node])
        if not any(match.get(leaf) in fab_leaves for leaf in conf_leaves):
            wrong.setdefault((conf_leaves[0], fabric.node_leaves[node][0]), []).append(node)
    for (conf_leaf, fab_leaf), nodes in wrong.items():
        alias = next((c for c, f in match.items() if f == fab_leaf and c != fab_leaf), None)
        called = f" (which topology.conf calls {alias})" if alias else ""
        out.append(
            Finding(
                Status.FAIL,
                f"{fold(nodes)}: topology.conf puts {'it' if len(nodes) == 1 else 'them'} under {conf_leaf}, "
                f"but the cables go to {fab_leaf}{called}",
                conf.source,
                conf.switches[conf_leaf].line,
            )
        )
    missing: dict[str, list[str]] = {}
    for node in sorted(conf_nodes - fab_nodes):
        missing.setdefault(conf.node_leaves[node][0], []).append(node)
    for leaf, nodes in missing.items():
        out.append(
            Finding(
                Status.FAIL,
                f"{fold(nodes)} ({len(nodes)} under {leaf}) {'has' if len(nodes) == 1 else 'have'} no link in "
                f"{fabric.source}: HCA down, cable out, or a node name the dump does not give",
                conf.source,
                conf.switches[leaf].line,
            )
        )
    extra = sorted(fab_nodes - conf_nodes)
    unnamed = [n for n in extra if re.fullmatch(r"H-[0-9a-fA-F]{16}", n)]
    if unnamed and not any(re.fullmatch(r"H-[0-9a-fA-F]{16}", n) for n in conf_nodes):
        # topology.conf names no host by GUID: HCAs without a node name are not its business
        extra = [n for n in extra if n not in unnamed]
        out.append(
            Finding(
                Status.OK,
                f"{_plural(len(unnamed), 'HCA')} without a node name left out of the comparison "
                f"({', '.join(unnamed[:3])}{', ...' if len(unnamed) > 3 else ''})",
                fabric.source,
            )
        )
    if extra:
        out.append(
            Finding(
                Status.WARN,
                f"{fold(extra)} ({len(extra)} nodes) {'is' if len(extra) == 1 else 'are'} cabled "
                f"but in no leaf of {conf.source}",
                conf.source,
            )
        )
    for name, sw in conf.switches.items():
        if name not in match:
            if sw.has_nodes and not conf.covered(name) & fab_nodes:
                continue  # its nodes are already reported as missing
            out.append(
                Finding(Status.WARN, f"switch {name} matches no switch of {fabric.source}", conf.source, sw.line)
            )
            continue
        for child in sw.children:
            if child not in match or child not in conf.switches:
                continue
            a, b = match[name], match[child]
            if a == b:
                continue
            if b not in cables.neighbours(a):
                out.append(
                    Finding(
                        Status.FAIL,
                        f"topology.conf links {name} to {child}, but {fabric.source} has no cable between {a} and {b}",
                        conf.source,
                        sw.line,
                    )
                )
    # cables between switches one level apart that topology.conf does not show
    back = {f: c for c, f in match.items()}
    for fname, fsw in fabric.switches.items():
        for child in fsw.children:
            upper, lower = back.get(fname), back.get(child)
            if upper is None or lower is None or upper == lower:
                continue
            if lower not in conf.switches[upper].children and upper not in conf.switches[lower].children:
                out.append(
                    Finding(
                        Status.WARN,
                        f"{fabric.source} cables {fname} to {child}, but topology.conf does not link "
                        f"{upper} and {lower}: Slurm will not route jobs over it",
                        conf.source,
                        conf.switches[upper].line,
                    )
                )
    return out


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def _match_switches(cables: Fabric, fabric: Topology, conf: Topology) -> dict[str, str]:
    """topology.conf switch -> fabric switch: the same name; else, for a leaf, the fabric leaf
    sharing most of its nodes; for an upper switch, the fabric switch of the same level cabled
    to most of its (matched) children."""
    match = {name: name for name in conf.switches if name in fabric.switches}
    fab_leaves = [n for n in fabric.leaves if n not in match.values()]
    for name in conf.leaves:
        if name in match:
            continue
        mine = conf.covered(name)
        scored = [(_jaccard(mine, fabric.covered(f)), f) for f in fab_leaves]
        best = max(scored, key=lambda sf: sf[0], default=(0.0, ""))
        if best[0] > 0:
            match[name] = best[1]

    def lowest_first(name: str) -> int:
        level = conf.level.get(name)
        return MAX_DEPTH + 1 if level is None else level

    uppers = sorted((n for n in conf.switches if n not in match and conf.switches[n].has_children), key=lowest_first)
    for name in uppers:
        kids = [match[c] for c in conf.switches[name].children if c in match]
        level = conf.level.get(name)
        best_key: tuple[int, float] = (0, 0.0)
        chosen = ""
        for fname, fsw in fabric.switches.items():
            if not fsw.has_children or (level is not None and fabric.level.get(fname) != level):
                continue
            key = (
                sum(1 for k in kids if k in cables.neighbours(fname)),
                _jaccard(conf.covered(name), fabric.covered(fname)),
            )
            if key > best_key:
                best_key, chosen = key, fname
        if best_key[0] > 0:
            match[name] = chosen
    return match
