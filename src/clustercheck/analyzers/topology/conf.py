"""topology.conf (topology/tree `SwitchName=`, topology/block `BlockName=`) -> `Topology`.

The lines are read by `clustercheck.facts.slurm_conf.read_conf_lines` (the one reader of Slurm's
`Key=Value` files), so an error names the file and line: `topology.conf:7: ...`.
"""

from __future__ import annotations

from collections import Counter

from clustercheck.facts.slurm_conf import ConfLine, read_conf_lines
from clustercheck.facts.slurm_conf import expand_names as _expand
from clustercheck.result import Status

from .model import Finding, Switch, Topology, TopologyError

_TREE_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
_BLOCK_KEYS = {"blockname", "nodes"}


def parse_topology_conf(text: str, source: str = "topology.conf") -> Topology:
    """topology.conf (topology/tree `SwitchName=` or topology/block `BlockName=`) -> Topology.

    Raises TopologyError for what slurmctld cannot parse at all (unknown keys, bad hostlists,
    a LinkSpeed that is not a number); everything it would accept with a warning, or refuse
    after parsing, is a finding.
    """
    switches: list[Switch] = []
    blocks: list[Switch] = []
    block_sizes: tuple[int, ...] = ()
    findings: list[Finding] = []
    for cl in read_conf_lines(text, source):
        if cl.include is not None:
            findings.append(
                Finding(Status.WARN, f"Include {cl.include} is not followed here: check that file too", source, cl.line)
            )
            continue
        key = cl.key
        if key == "switchname":
            _only(cl, _TREE_KEYS)
            switches.append(_switch_from(cl))
        elif key == "blockname":
            _only(cl, _BLOCK_KEYS)
            name = cl.pairs[0][1]
            nodes = cl.get("nodes")
            expanded = tuple(_expand(nodes, cl.where, f"BlockName={name} Nodes=")) if nodes else ()
            blocks.append(Switch(name, cl.line, expanded, has_nodes=nodes is not None))
        elif key in ("blocksizes", "blocklevels"):
            _only(cl, {key})
            try:
                block_sizes = tuple(int(v) for v in cl.pairs[0][1].split(",") if v)
            except ValueError:
                raise TopologyError(f"{cl.where}: {cl.pairs[0][0]}={cl.pairs[0][1]}: expected numbers") from None
        else:
            raise TopologyError(
                f"{cl.where}: unknown key {cl.pairs[0][0]!r}: topology.conf lines start with SwitchName= "
                "(topology/tree) or BlockName= / BlockSizes= (topology/block)"
            )
    if switches and blocks:
        raise TopologyError(f"{source}: mixes SwitchName= (topology/tree) and BlockName= (topology/block) lines")
    if not switches and not blocks:
        findings.append(Finding(Status.FAIL, "defines no switch and no block (slurmctld 25.11+ refuses this)", source))
    if blocks:
        return Topology("block", source, blocks, block_sizes=block_sizes, findings=findings)
    return Topology("tree", source, switches, findings=findings)


def _only(cl: ConfLine, allowed: set[str]) -> None:
    for key, _ in cl.pairs:
        if key.lower() not in allowed:
            raise TopologyError(
                f"{cl.where}: unknown key {key!r} on a {cl.pairs[0][0]} line (slurmctld: `Parsing error at "
                f"unrecognized key`); allowed: {', '.join(sorted(allowed))}"
            )
    seen = Counter(cl.keys())
    twice = [k for k, _ in cl.pairs if seen[k.lower()] > 1]
    if twice:
        raise TopologyError(f"{cl.where}: {twice[0]} is given twice on one line")


def _switch_from(cl: ConfLine) -> Switch:
    name = cl.pairs[0][1]
    nodes, children, speed = cl.get("nodes"), cl.get("switches"), cl.get("linkspeed")
    link_speed = None
    if speed is not None:
        if not speed.isdigit():
            raise TopologyError(f"{cl.where}: LinkSpeed={speed}: expected a whole number")
        link_speed = int(speed)
    return Switch(
        name,
        cl.line,
        tuple(_expand(nodes, cl.where, f"SwitchName={name} Nodes=")) if nodes else (),
        tuple(_expand(children, cl.where, f"SwitchName={name} Switches=")) if children else (),
        link_speed,
        has_nodes=nodes is not None,
        has_children=children is not None,
    )
