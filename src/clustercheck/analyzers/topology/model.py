"""The topology model: `Topology` (a switch tree, or a set of blocks) and its `Finding`s.

A file's switches are analysed once, as slurmctld does (src/plugins/topology/tree/switch_record.c
of SchedMD/slurm; domain-facts §D.5): levels, parents, the nodes under each switch, and what
slurmctld would log or refuse (a child naming no switch, a loop, a node under two leaves, a tree
that splits). `Topology.check_nodes()` cross-checks with slurm.conf's nodes. Every other module of
the package builds a Topology (conf, yaml, cabling) or judges one (placement).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from clustercheck.facts.slurm_conf import ConfError
from clustercheck.hostlist import fold
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
