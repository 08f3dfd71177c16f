"""Slurm network topology: topology.conf, topology.yaml and ibnetdiscover dumps as one switch tree.

What this module owns (pure, host-free; `clustercheck topology` and `checks/slurm.py` are thin
layers over it):

- Slurm's `Key=Value` file syntax and slurm.conf itself are read by `clustercheck.facts.slurm_conf`
  (the one parser; `read_conf_lines`, `parse_slurm_conf`, `SlurmConf`, `parse_gres_gpus` are
  re-exported here for `clustercheck topology --conf`).
- `parse_topology_conf()` / `parse_topology_yaml()` -> `Topology`: switches (leaves hold nodes,
  upper switches hold switches) or blocks, with the findings slurmctld itself would log or die
  on, each naming the file and line (domain-facts §D.5; the checks mirror
  src/plugins/topology/tree/switch_record.c of SchedMD/slurm).
- `place()`: for a node set (a job's SLURM_JOB_NODELIST), the leaf switches it spans, the least
  number of leaves that could hold that many nodes, the lowest common switch, and a verdict.
- `parse_ibnetdiscover()` -> `Fabric`, `fabric_topology()` (the tree the cables make, with HCAs
  mapped to Slurm node names), `render_topology_conf()` and `compare()` (topology.conf against
  the fabric: nodes under the wrong leaf, missing links).

Hostlist expressions go through `clustercheck.hostlist` (python-hostlist), never a regex.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from clustercheck.facts.slurm_conf import ConfError
from clustercheck.facts.slurm_conf import ConfLine as ConfLine  # re-exported: the one parser lives there
from clustercheck.facts.slurm_conf import NodeDef as NodeDef
from clustercheck.facts.slurm_conf import SlurmConf as SlurmConf
from clustercheck.facts.slurm_conf import _without_parentheses as _without_parentheses  # tests/safety pin it
from clustercheck.facts.slurm_conf import expand_names as _expand
from clustercheck.facts.slurm_conf import parse_gres_gpus as parse_gres_gpus
from clustercheck.facts.slurm_conf import parse_slurm_conf as parse_slurm_conf
from clustercheck.facts.slurm_conf import read_conf_lines as read_conf_lines
from clustercheck.hostlist import SLURM_MAX_NAME, fold
from clustercheck.result import Status, worst

# Slurm: SwitchName "must be shorter than HOST_NAME_MAX (64)"; topology.yaml.5 "cannot be longer
# than 64 characters".
MAX_SWITCH_NAME = 64
# switch_record.c gives up resolving levels after 20 rounds: "Switch configuration is not a tree".
MAX_DEPTH = 20


# A topology, slurm.conf, gres.conf or ibnetdiscover file that cannot be read: FILE:LINE: why.
# One error for every Slurm file: read_conf_lines() raises it for topology.conf as for slurm.conf.
TopologyError = ConfError


# Values are NamedTuples, not dataclasses: creating a dataclass costs ~0.5 ms at import, and
# checks/slurm.py (which imports this module) may run in every job's prolog.


class Finding(NamedTuple):
    """One thing wrong (or worth knowing) about a topology, with where it was written."""

    status: Status
    message: str
    file: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "message": self.message, "file": self.file, "line": self.line}


# -- the topology model -------------------------------------------------------------------------------


class Switch(NamedTuple):
    """A switch (topology/tree) or a block (topology/block) as a file defines it."""

    name: str
    line: int
    nodes: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    link_speed: int | None = None
    has_nodes: bool = False  # Nodes= was given (a leaf), even if empty
    has_children: bool = False
    comment: str = ""  # shown after the line when rendered (a generated file's switch description)


class Topology:
    """A switch tree (or a set of blocks), analysed once: levels, parents, nodes under each switch.

    `findings` holds what is wrong with the file itself (as slurmctld would log or refuse it);
    `check_nodes()` adds the cross-check with slurm.conf, `place()` judges a node set.
    """

    def __init__(
        self,
        kind: str,
        source: str,
        switches: Sequence[Switch],
        *,
        block_sizes: tuple[int, ...] = (),
        name: str | None = None,
        others: tuple[str, ...] = (),
        findings: Iterable[Finding] = (),
    ) -> None:
        self.kind = kind  # tree | block | flat | ring | torus3d
        self.source = source
        self.name = name  # the topology.yaml entry
        self.others = others  # the other entries of topology.yaml
        self.block_sizes = block_sizes
        self.findings: list[Finding] = list(findings)
        self.switches: dict[str, Switch] = {}
        for sw in switches:
            if sw.name in self.switches:
                first = self.switches[sw.name]
                self._add(
                    Status.FAIL,
                    f"{self._noun} {sw.name} is defined twice (first at line {first.line}); "
                    f"slurmctld refuses this: `{self._Noun} ({sw.name}) has already been defined`",
                    sw.line,
                )
                continue
            self.switches[sw.name] = sw
        self.level: dict[str, int | None] = {}
        self.parents: dict[str, list[str]] = {n: [] for n in self.switches}
        self.node_leaves: dict[str, list[str]] = {}
        self._covered: dict[str, frozenset[str]] = {}
        self._analyse()

    # -- derived facts ------------------------------------------------------------------------------

    @property
    def _noun(self) -> str:
        return "block" if self.kind == "block" else "switch"

    @property
    def _Noun(self) -> str:  # the capitalised noun, as Slurm's messages write it
        return "Block" if self.kind == "block" else "Switch"

    @property
    def leaves(self) -> list[str]:
        return [n for n, s in self.switches.items() if not s.has_children]

    @property
    def nodes(self) -> list[str]:
        """Every node under some leaf, in file order."""
        return list(self.node_leaves)

    @property
    def levels(self) -> int:
        """How many levels the tree has (1: leaves only); Slurm's switch_levels + 1."""
        known = [v for v in self.level.values() if v is not None]
        return max(known) + 1 if known else 0

    @property
    def roots(self) -> list[str]:
        """Switches nobody lists as a child (the top of each tree)."""
        return [n for n in self.switches if not self.parents[n]]

    def covered(self, name: str) -> frozenset[str]:
        """The nodes under a switch (through its descendants)."""
        return self._covered.get(name, frozenset())

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    def _add(self, status: Status, message: str, line: int | None = None) -> None:
        self.findings.append(Finding(status, message, self.source, line))

    def _analyse(self) -> None:
        if self.kind not in ("tree", "block"):
            return
        names = self.switches
        for sw in names.values():
            if len(sw.name) > MAX_SWITCH_NAME:
                self._add(
                    Status.FAIL,
                    f"{self._noun} name {sw.name[:20]}... is {len(sw.name)} characters long; Slurm allows "
                    f"{MAX_SWITCH_NAME}",
                    sw.line,
                )
            if sw.has_nodes and sw.has_children:
                self._add(
                    Status.FAIL,
                    f"switch {sw.name} has both Nodes= and Switches=: slurmctld refuses it "
                    "(`switch has both child switches and nodes`; older versions ignore the Switches=)",
                    sw.line,
                )
            if not sw.has_nodes and not sw.has_children:
                self._add(Status.WARN, f"{self._noun} {sw.name} has neither Nodes= nor Switches=: it is empty", sw.line)
            for node in sw.nodes if not sw.has_children else ():
                self.node_leaves.setdefault(node, []).append(sw.name)
        # children and parents; a child that names no switch (or itself) is fatal for slurmctld
        valid_children: dict[str, list[str]] = {}
        for sw in names.values():
            kids = []
            for child in sw.children:
                if child not in names or child == sw.name:
                    what = "itself" if child == sw.name else "no switch defined in the file"
                    self._add(
                        Status.FAIL,
                        f"switch {sw.name} lists child {child}, which is {what}; slurmctld refuses this: "
                        f"`Switch configuration {sw.name} has invalid child ({child})`",
                        sw.line,
                    )
                    continue
                kids.append(child)
                self.parents[child].append(sw.name)
            valid_children[sw.name] = kids
        # levels as switch_record.c computes them: leaves 0, a parent 1 + its highest child
        for n, sw in names.items():
            self.level[n] = 0 if not sw.has_children else None
        for _ in range(len(names) + 1):
            changed = False
            for n in names:
                if self.level[n] is not None:
                    continue
                kid_levels = [self.level[c] for c in valid_children[n]]
                if all(k is not None for k in kid_levels):
                    self.level[n] = 1 + max((k for k in kid_levels if k is not None), default=-1)
                    changed = True
            if not changed:
                break
        unresolved = [n for n in names if self.level[n] is None]
        if unresolved:
            shown = ", ".join(f"{n} (line {names[n].line})" for n in unresolved[:6])
            more = f" and {len(unresolved) - 6} more" if len(unresolved) > 6 else ""
            self._add(
                Status.FAIL,
                f"switches list each other in a loop: {shown}{more}; slurmctld refuses this: "
                "`Switch configuration is not a tree`",
                names[unresolved[0]].line,
            )
        elif self.levels > MAX_DEPTH:
            self._add(
                Status.FAIL,
                f"the tree has {self.levels} levels; slurmctld gives up after {MAX_DEPTH}: "
                "`Switch configuration is not a tree`",
            )
        # the nodes under each switch (loop-safe)
        for n in names:
            self._covered[n] = self._collect(n, valid_children, set())
        multi = {node: leaves for node, leaves in self.node_leaves.items() if len(leaves) > 1}
        if multi:
            by_leaves: dict[tuple[str, ...], list[str]] = {}
            for node, leaves in multi.items():
                by_leaves.setdefault(tuple(leaves), []).append(node)
            for leaves_t, nodes in by_leaves.items():
                lines = ", ".join(f"{leaf} (line {names[leaf].line})" for leaf in leaves_t)
                self._add(
                    Status.WARN,
                    f"{fold(nodes)} {'is' if len(nodes) == 1 else 'are'} under {len(leaves_t)} leaf "
                    f"{self._noun}es: {lines}; slurmctld warns `Multiple leaf switches contain nodes` "
                    "and counts leaves wrongly for jobs on them",
                    names[leaves_t[-1]].line,
                )
        self._check_prefixes()
        if self.kind == "tree" and self.switches and not unresolved:
            self._check_root(set(self.node_leaves))
        if self.kind == "block" and self.block_sizes:
            base = self.block_sizes[0]
            for i, size in enumerate(self.block_sizes[1:], 1):
                ratio = size / self.block_sizes[i - 1]
                if size <= self.block_sizes[i - 1] or ratio != int(ratio) or int(ratio) & (int(ratio) - 1):
                    self._add(
                        Status.FAIL,
                        f"BlockSizes {','.join(map(str, self.block_sizes))}: each size must be a power of two "
                        f"times the one before it ({size} after {self.block_sizes[i - 1]})",
                    )
                    break
            for sw in names.values():
                if sw.has_nodes and len(sw.nodes) < base:
                    self._add(
                        Status.WARN,
                        f"block {sw.name} has {len(sw.nodes)} nodes, fewer than the base block size {base}",
                        sw.line,
                    )

    def _check_prefixes(self) -> None:
        """Names of a rare shape that look like a common one without its prefix (`n019` among
        `circe-n001`...): a typo Slurm only logs at debug level, and the real node is left out."""
        shapes = Counter(_shape(n) for n in self.node_leaves)
        suspects: dict[tuple[str, str], list[str]] = {}
        for node, leaves in self.node_leaves.items():
            rare = _shape(node)
            for common, count in shapes.items():
                if count < 3 * shapes[rare] or common == rare or not common.endswith(rare):
                    continue
                prefix = common[: len(common) - len(rare)]
                if "#" not in prefix and prefix + node not in self.node_leaves:
                    suspects.setdefault((leaves[0], prefix), []).append(node)
                    break
        for (leaf, prefix), nodes in suspects.items():
            self._add(
                Status.WARN,
                f"{fold(nodes)} under {leaf} look{'s' if len(nodes) == 1 else ''} like "
                f"{fold(prefix + n for n in nodes)} without the prefix {prefix!r}; no leaf holds "
                f"{fold(prefix + n for n in nodes)}",
                self.switches[leaf].line,
            )

    def _collect(self, name: str, children: Mapping[str, list[str]], stack: set[str]) -> frozenset[str]:
        if name in self._covered:
            return self._covered[name]
        sw = self.switches[name]
        if not sw.has_children:
            return frozenset(sw.nodes)
        stack.add(name)
        out: set[str] = set()
        for child in children[name]:
            if child not in stack:
                out |= self._collect(child, children, stack)
        stack.discard(name)
        result = frozenset(out)
        if not stack:  # only memoise outside a loop, where the answer does not depend on the path
            self._covered[name] = result
        return result

    def _check_root(self, all_nodes: set[str]) -> None:
        if not all_nodes or any(self._covered[n] >= all_nodes for n in self.switches):
            return
        tops = [r for r in self.roots if self._covered.get(r)]
        shown = ", ".join(f"{r} (line {self.switches[r].line})" for r in tops[:6])
        self._add(
            Status.WARN,
            f"no switch reaches all {len(all_nodes)} nodes: the tree splits under {len(tops)} top switches "
            f"({shown}); no job can span them (unless TopologyParam=TopoOptional). slurmctld warns "
            "`TOPOLOGY: no switch can reach all nodes through its descendants`",
            self.switches[tops[0]].line if tops else None,
        )

    # -- cross-check with slurm.conf ----------------------------------------------------------------

    def check_nodes(self, defined: Mapping[str, tuple[str, int]]) -> list[Finding]:
        """Findings from comparing with slurm.conf's nodes ({node: (file, line of its NodeName)})."""
        out: list[Finding] = []
        if self.kind not in ("tree", "block"):
            return out
        missing: dict[tuple[str, int], list[str]] = {}
        for node, where in defined.items():
            if node not in self.node_leaves:
                missing.setdefault(where, []).append(node)
        for (file, line), nodes in missing.items():
            out.append(
                Finding(
                    Status.FAIL,
                    f"{fold(nodes)} ({len(nodes)} node{'s' if len(nodes) != 1 else ''}) "
                    f"{'is' if len(nodes) == 1 else 'are'} under no leaf {self._noun} of {self.source}; "
                    "every node must hang from a switch (topology.conf.5), and slurmctld warns "
                    f"`{self._noun}es lack access to {len(nodes)} nodes`",
                    file,
                    line,
                )
            )
        for sw in self.switches.values():
            unknown = [n for n in sw.nodes if n not in defined]
            if unknown and not sw.has_children:
                out.append(
                    Finding(
                        Status.WARN,
                        f"{self._noun} {sw.name} lists {fold(unknown)}, which no NodeName line defines; "
                        "slurmctld drops them (`Invalid hostnames in switch configuration`): a typo or a "
                        "missing prefix?",
                        self.source,
                        sw.line,
                    )
                )
        if (
            self.kind == "tree"
            and self.switches
            and not any(f.message.startswith("no switch reaches") for f in self.findings)
        ):
            before = len(self.findings)
            self._check_root(set(self.node_leaves) | set(defined))
            out.extend(self.findings[before:])
            del self.findings[before:]
        return out

    # -- rendering ----------------------------------------------------------------------------------

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "switch": sw.name,
                "line": sw.line,
                "level": self.level.get(sw.name),
                "children": list(sw.children),
                "nodes": fold(sw.nodes) if sw.nodes else "",
                "node_count": len(sw.nodes),
            }
            for sw in self.switches.values()
        ]


def _shape(name: str) -> str:
    return re.sub(r"[0-9]+", "#", name)


def _plural(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


# -- topology.conf ------------------------------------------------------------------------------------

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


# -- topology.yaml ------------------------------------------------------------------------------------

TOPOLOGY_TYPES = ("tree", "block", "flat", "ring", "torus3d")


def parse_topology_yaml(text: str, source: str = "topology.yaml", name: str | None = None) -> Topology:
    """topology.yaml (Slurm 25.05+) -> the Topology of one entry.

    The entry is `name` when given, else the first with `cluster_default: true` (as Slurm picks
    it for partitions without a Topology=), else the first. Tree and block entries are analysed;
    flat, ring and torus3d ones come back with no switches.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise TopologyError(f"{source}:{line}: YAML syntax error: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise TopologyError(f"{source}: YAML error: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise TopologyError(f"{source}: nested too deep to be a topology.yaml") from None
    if root is None:
        raise TopologyError(f"{source}: empty; expected a list of `- topology: NAME` entries")
    if not isinstance(root, yaml.SequenceNode):
        raise TopologyError(f"{source}:{_ln(root)}: expected a list of `- topology: NAME` entries")
    entries: list[tuple[str, bool, yaml.MappingNode]] = []
    for item in root.value:
        mapping = _mapping(item, source, "a topology entry")
        topo_name = _scalar(mapping, "topology", source)
        if topo_name is None:
            raise TopologyError(f"{source}:{_ln(item)}: a topology entry needs `topology: NAME`")
        default = _scalar(mapping, "cluster_default", source)
        entries.append((topo_name, (default or "").lower() in ("true", "yes", "1"), mapping))
    if not entries:
        raise TopologyError(f"{source}: defines no topology")
    names = [e[0] for e in entries]
    if name is not None:
        chosen = next((e for e in entries if e[0] == name), None)
        if chosen is None:
            raise TopologyError(f"{source}: no topology named {name!r}; it defines {', '.join(names)}")
    else:
        chosen = next((e for e in entries if e[1]), entries[0])
    findings: list[Finding] = []
    if name is None and not any(e[1] for e in entries):
        findings.append(
            Finding(Status.WARN, f"no topology has `cluster_default: true`; analysed the first, {names[0]}", source)
        )
    topo_name, _, mapping = chosen
    others = tuple(n for n in names if n != topo_name)
    kinds = [k for k in TOPOLOGY_TYPES if _get(mapping, k) is not None]
    if len(kinds) != 1:
        raise TopologyError(
            f"{source}:{_ln(mapping)}: topology {topo_name} must define exactly one of {', '.join(TOPOLOGY_TYPES)}"
            f" (it defines {', '.join(kinds) or 'none'})"
        )
    kind = kinds[0]
    body = _get(mapping, kind)
    assert body is not None
    if kind == "tree":
        tree = _mapping(body, source, "tree:")
        switches = [_yaml_switch(item, source) for item in _sequence(_get(tree, "switches"), source, "switches:")]
        return Topology("tree", source, switches, name=topo_name, others=others, findings=findings)
    if kind == "block":
        block = _mapping(body, source, "block:")
        sizes_node = _get(block, "block_sizes")
        sizes: list[int] = []
        for s in _sequence(sizes_node, source, "block_sizes:") if sizes_node is not None else []:
            value = s.value if isinstance(s, yaml.ScalarNode) else None
            if not (isinstance(value, str) and value.isdigit()):
                raise TopologyError(f"{source}:{_ln(s)}: block_sizes: expected whole numbers")
            sizes.append(int(value))
        blocks = []
        for item in _sequence(_get(block, "blocks"), source, "blocks:"):
            m = _mapping(item, source, "a block")
            block_name = _scalar(m, "block", source)
            if block_name is None:
                raise TopologyError(f"{source}:{_ln(item)}: a block needs `block: NAME`")
            nodes = _hostlist_value(m, "nodes", source)
            blocks.append(Switch(block_name, _ln(item), nodes or (), has_nodes=nodes is not None))
        return Topology("block", source, blocks, block_sizes=tuple(sizes), name=topo_name, others=others,
                        findings=findings)  # fmt: skip
    findings.append(Finding(Status.OK, f"topology {topo_name} is {kind}: no switch tree to analyse", source))
    return Topology(kind, source, [], name=topo_name, others=others, findings=findings)


_YAML_SWITCH_KEYS = {"switch", "children", "nodes"}


def _yaml_switch(item: Any, source: str) -> Switch:
    mapping = _mapping(item, source, "a switch")
    for key_node, _ in mapping.value:
        if key_node.value not in _YAML_SWITCH_KEYS:
            raise TopologyError(
                f"{source}:{_ln(key_node)}: unknown switch key {key_node.value!r}; "
                f"allowed: {', '.join(sorted(_YAML_SWITCH_KEYS))}"
            )
    name = _scalar(mapping, "switch", source)
    if name is None:
        raise TopologyError(f"{source}:{_ln(item)}: a switch needs `switch: NAME`")
    nodes = _hostlist_value(mapping, "nodes", source)
    children = _hostlist_value(mapping, "children", source)
    return Switch(
        name,
        _ln(item),
        nodes or (),
        children or (),
        has_nodes=nodes is not None,
        has_children=children is not None,
    )


def _ln(node: Any) -> int:
    return int(node.start_mark.line) + 1


def _get(mapping: Any, key: str) -> Any:
    for k, v in mapping.value:
        if getattr(k, "value", None) == key:
            return v
    return None


def _mapping(node: Any, source: str, what: str) -> Any:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise TopologyError(f"{source}:{_ln(node)}: {what} must be a mapping")
    return node


def _sequence(node: Any, source: str, what: str) -> list[Any]:
    import yaml

    if node is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise TopologyError(f"{source}:{_ln(node)}: {what} must be a list")
    return list(node.value)


def _scalar(mapping: Any, key: str, source: str) -> str | None:
    import yaml

    node = _get(mapping, key)
    if node is None:
        return None
    if not isinstance(node, yaml.ScalarNode):
        raise TopologyError(f"{source}:{_ln(node)}: {key}: expected a single value")
    return str(node.value)


def _hostlist_value(mapping: Any, key: str, source: str) -> tuple[str, ...] | None:
    import yaml

    node = _get(mapping, key)
    if node is None:
        return None
    if isinstance(node, yaml.SequenceNode):  # a YAML list of hostlists
        parts = [str(n.value) for n in node.value if isinstance(n, yaml.ScalarNode)]
        expression = ",".join(parts)
    elif isinstance(node, yaml.ScalarNode):
        expression = str(node.value)
    else:
        raise TopologyError(f"{source}:{_ln(node)}: {key}: expected a hostlist")
    if not expression.strip():
        return ()
    return tuple(_expand(expression, f"{source}:{_ln(node)}", key))


def parse_topology(text: str, source: str, name: str | None = None) -> Topology:
    """topology.yaml or topology.conf, told apart by the file name (or, failing that, the content)."""
    lowered = source.lower()
    is_yaml = lowered.endswith((".yaml", ".yml")) or (
        not lowered.endswith(".conf") and text.lstrip().startswith(("---", "- topology"))
    )
    if is_yaml:
        return parse_topology_yaml(text, source, name)
    if name is not None:
        raise TopologyError(f"{source}: --topology NAME applies to topology.yaml only")
    return parse_topology_conf(text, source)


# -- placement -------------------------------------------------------------------------------------------


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


# -- ibnetdiscover ------------------------------------------------------------------------------------

_NODE_RE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*(?:#\s*"([^"]*)"(.*))?$')
_PORT_RE = re.compile(r'^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s+"([^"]+)"\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s*(?:#(.*))?$')
_HEADER_RE = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid)=", re.IGNORECASE)
_SPEED_RE = re.compile(r"\b(\d+x[A-Z0-9]+)\b")
_LID_RE = re.compile(r"\blid (\d+)")
# rdma-ndd sets a node description of "<hostname> <device>" (e.g. "gpu001 mlx5_0", "RMD701091901003
# ibp11s0f0"); vendor defaults ("MT25408 ConnectX Mellanox Technologies") name no host.
_HCA_DEVICE_RE = re.compile(r"^(mlx\d+_\d+|hfi\d+_\d+|qib\d+|HCA-\d+|ib\w*|bnxt_re\d+|irdma\d+|efa_\d+|rxe\d+)$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")


class IBLink(NamedTuple):
    port: int
    remote: str
    remote_port: int
    speed: str


class IBNode(NamedTuple):
    kind: str  # Switch | Ca | Rt
    name: str  # ibnetdiscover's id: "S-<guid>", "H-<guid>"
    ports: int
    description: str
    line: int
    lid: int | None
    links: list[IBLink]  # filled while reading the node's port lines

    @property
    def guid(self) -> str:
        return normalize_guid(self.name)


class Fabric:
    """An ibnetdiscover dump: switches, HCAs and the cables between them."""

    def __init__(self, source: str, nodes: dict[str, IBNode]) -> None:
        self.source = source
        self.nodes = nodes
        self.findings: list[Finding] = []

    @property
    def switches(self) -> list[IBNode]:
        return [n for n in self.nodes.values() if n.kind == "Switch"]

    @property
    def hcas(self) -> list[IBNode]:
        return [n for n in self.nodes.values() if n.kind == "Ca"]

    def neighbours(self, name: str) -> list[str]:
        return list(dict.fromkeys(link.remote for link in self.nodes[name].links))


def normalize_guid(text: str) -> str:
    """'S-0008f10500200b50', '0x8f10500200b50', 'H-003048c749cd0000' -> 16 lower-case hex digits."""
    value = text.strip().strip('"')
    value = re.sub(r"^[SHR]-", "", value)
    value = re.sub(r"^0x", "", value, flags=re.IGNORECASE)
    if not re.fullmatch(r"[0-9a-fA-F]{1,16}", value):
        raise ValueError(f"not a GUID: {text!r}")
    return value.lower().rjust(16, "0")


#: `ibnetdiscover -p` (ports report): one line per port, hosts only on link lines, e.g.
#: `CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib-i1l1s01' )`;
#: a port with no peer ends in the node's description alone. The names are taken apart with
#: string methods, not a backtracking pattern: a hostile line stays linear.
_P_HEAD_RE = re.compile(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]{1,16})\s+(\d+x)\s+(\S+)\s*(.*)$")
_P_PEER_RE = re.compile(r"^-\s+(CA|SW|RT)\s+(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]{1,16})\s*(.*)$")
_P_KIND = {"CA": ("Ca", "H-"), "SW": ("Switch", "S-"), "RT": ("Rt", "R-")}
_COMMENT_DESC_RE = re.compile(r'^\s*"([^"]*)"')


def _p_names(tail: str) -> tuple[str, str] | None:
    """`( 'local name' - 'remote name' )` -> the two names, trimmed (sites pad them)."""
    inner = tail.strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        return None
    inner = inner[1:-1].strip()
    if len(inner) < 2 or inner[0] != "'" or inner[-1] != "'":
        return None
    parts = inner[1:-1].split("' - '")
    if len(parts) != 2:
        return None
    return parts[0].strip(), parts[1].strip()


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover") -> Fabric:
    """An `ibnetdiscover` dump -> Fabric; TopologyError (FILE:LINE) for lines of no known form.

    Reads the default form (`Switch`/`Ca` blocks of port lines) and the ports report of
    `ibnetdiscover -p` (one link a line, no blocks). A node only linked to, never described, is
    taken from the port lines that name it (its description in their comment); the same GUID
    described twice is a finding (the second block is left out), not an error."""
    nodes: dict[str, IBNode] = {}
    current: IBNode | None = None
    findings: list[Finding] = []
    # nodes seen only at the far end of a port line: name -> (kind, description, first line)
    linked: dict[str, tuple[str, str, int]] = {}
    p_ports: set[tuple[str, int]] = set()

    def p_node(kind: str, guid: str, lid: str, desc: str, number: int) -> IBNode:
        k, prefix = _P_KIND[kind]
        name = prefix + normalize_guid(guid)
        node = nodes.get(name)
        if node is None:
            node = nodes[name] = IBNode(k, name, 0, desc, number, int(lid) or None, [])
        return node

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:  # a blank line ends a node's block
            current = None
            continue
        if line.startswith("#") or _HEADER_RE.match(line):
            continue
        m = _NODE_RE.match(line)
        if m:
            kind, ports, name, desc, rest = m.groups()
            lid = _LID_RE.search(rest or "")
            current = IBNode(kind, name, int(ports), desc or "", number, int(lid.group(1)) if lid else None, [])
            if name in nodes:
                findings.append(
                    Finding(
                        Status.FAIL,
                        f"{name} appears twice (first at line {nodes[name].line}): a duplicate GUID (two "
                        "sweeps in one file, or a cloned GUID); the second block is left out",
                        source,
                        number,
                    )
                )
                continue  # `current` collects the duplicate's ports and is dropped
            nodes[name] = current
            continue
        p = _PORT_RE.match(line)
        if p:
            if current is None:
                raise TopologyError(f"{source}:{number}: a port line before any Switch/Ca line")
            port, _, remote, rport, _, comment = p.groups()
            speeds = _SPEED_RE.findall(comment or "")
            current.links.append(IBLink(int(port), remote, int(rport), speeds[-1] if speeds else ""))
            if remote not in linked and remote[:2] in ("H-", "S-", "R-"):
                d = _COMMENT_DESC_RE.match(comment or "")
                if d:
                    kind = {"H-": "Ca", "S-": "Switch", "R-": "Rt"}[remote[:2]]
                    linked[remote] = (kind, d.group(1), number)
            continue
        h = _P_HEAD_RE.match(line)
        if h:
            kind, plid, port, guid, width, speed, rest = h.groups()
            peer = _P_PEER_RE.match(rest)
            names = _p_names(peer.group(5)) if peer else None
            if peer and names:
                local = p_node(kind, guid, plid, names[0], number)
                other = p_node(peer.group(1), peer.group(4), peer.group(2), names[1], number)
                if (local.name, int(port)) not in p_ports:
                    p_ports.add((local.name, int(port)))
                    local.links.append(IBLink(int(port), other.name, int(peer.group(3)), width + speed))
                continue
            if not rest.startswith("-"):  # a port with no peer: down or unconnected, not a link
                p_node(kind, guid, plid, rest.strip().strip("'").strip(), number)
                continue
        raise TopologyError(
            f"{source}:{number}: not an ibnetdiscover line: {line[:60]!r} "
            '(expected `Switch N "S-..."`, `Ca N "H-..."`, `[port] "NAME"[port]`, or an '
            "`ibnetdiscover -p` line `SW LID PORT GUID 4x NDR - CA LID PORT GUID ( 'NAME' - 'NAME' )`)"
        )
    if not nodes:
        raise TopologyError(f"{source}: no Switch or Ca in it: not an ibnetdiscover dump")
    fabric = Fabric(source, nodes)
    fabric.findings.extend(findings)
    dangling = sorted({link.remote for n in nodes.values() for link in n.links if link.remote not in nodes})
    if dangling:
        taken = [d for d in dangling if d in linked]
        for name in taken:
            kind, desc, first = linked[name]
            nodes[name] = IBNode(kind, name, 0, desc, first, None, [])
        lost = [d for d in dangling if d not in linked]
        fabric.findings.append(
            Finding(
                Status.WARN,
                f"{_plural(len(dangling), 'node')} linked to but not described ({', '.join(dangling[:4])}"
                f"{', ...' if len(dangling) > 4 else ''}): a truncated dump, or one that gives hosts only on "
                "switch port lines"
                + (f"; {len(taken)} taken from the port lines that name them" if taken else "")
                + (f"; {len(lost)} without a description left out" if lost else ""),
                source,
            )
        )
        for n in nodes.values():
            n.links[:] = [link for link in n.links if link.remote in nodes]
    # a cable is listed at both ends; add the end a partial dump may lack (a set of the ends each
    # node lists: scanning a node's links per link was quadratic in a hostile dump's port count)
    ends = {(n.name, link.port, link.remote) for n in nodes.values() for link in n.links}
    for n in list(nodes.values()):
        for link in list(n.links):
            other = nodes[link.remote]
            if (other.name, link.remote_port, n.name) not in ends:
                ends.add((other.name, link.remote_port, n.name))
                other.links.append(IBLink(link.remote_port, n.name, link.port, link.speed))
    return fabric


def parse_node_map(text: str, source: str = "node map") -> dict[str, str]:
    """GUID -> Slurm node name, from `H-<guid> name` (ibmap2slurm) or `0x<guid> "name"` (node-name-map).

    A name with several words ("gpu001 mlx5_0") gives its first word, the host.
    """
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise TopologyError(f'{source}:{number}: expected `GUID NAME` (e.g. `0x0002c90300080e84 "gpu001"`)')
        try:
            guid = normalize_guid(parts[0])
        except ValueError:
            raise TopologyError(f"{source}:{number}: {parts[0]!r} is not a GUID") from None
        name = parts[1].strip().strip('"').split()
        if not name:
            raise TopologyError(f"{source}:{number}: no name after the GUID")
        if len(name[0]) > SLURM_MAX_NAME:
            raise TopologyError(
                f"{source}:{number}: a node name of {len(name[0])} characters; Slurm's are at most "
                f"{SLURM_MAX_NAME} (MAXHOSTNAMELEN)"
            )
        out[guid] = name[0]
    return out


def hca_host(hca: IBNode, names: Mapping[str, str] | None = None) -> str | None:
    """The Slurm node name of an HCA: from the map, else from an rdma-ndd description, else None."""
    if names and hca.guid in names:
        return names[hca.guid]
    words = hca.description.split()
    if (
        len(words) == 2
        and len(words[0]) <= SLURM_MAX_NAME
        and _HCA_DEVICE_RE.match(words[1])
        and _HOSTNAME_RE.match(words[0])
    ):
        return words[0].split(".")[0]
    return None


def _is_host(hca: IBNode) -> bool:
    # A SHARP aggregation node is an HCA inside a switch, not a host: counting it would turn a
    # spine into a "leaf".
    return "aggregation node" not in hca.description.lower()


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


# -- oversubscription: host-facing against uplink bandwidth per leaf ------------------------------------

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
