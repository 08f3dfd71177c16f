"""`clustercheck topology`: the switch tree of topology.conf / topology.yaml, where a job's nodes
sit in it, and whether it tells the truth about the fabric (an ibnetdiscover dump).

Host-free: it reads files on this machine (and SLURM_JOB_NODELIST with --job-nodes-from-env),
never a node. The exit code follows the status: 0 ok, 1 warn, 2 fail, 64 bad input.
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from clustercheck import __version__
from clustercheck.errors import UsageError
from clustercheck.result import ExitCode, Status, worst


class TopologyFormat(str, Enum):
    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("topology")(topology)


def topology(
    conf: Annotated[
        Path | None,
        typer.Option("--conf", help="topology.conf or topology.yaml (told apart by the file name)."),
    ] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Judge where these nodes sit: a hostlist, e.g. 'gpu[001-016]'.")
    ] = None,
    job_nodes_from_env: Annotated[
        bool, typer.Option("--job-nodes-from-env", help="Judge the nodes of $SLURM_JOB_NODELIST (inside a job).")
    ] = False,
    name: Annotated[
        str | None, typer.Option("--topology", help="The topology.yaml entry (default: the cluster_default one).")
    ] = None,
    slurm_conf: Annotated[
        Path | None,
        typer.Option("--slurm-conf", help="Also check that every NodeName of this slurm.conf hangs from a leaf."),
    ] = None,
    ibnetdiscover: Annotated[
        Path | None, typer.Option("--ibnetdiscover", help="An ibnetdiscover dump: the fabric as the cables make it.")
    ] = None,
    node_map: Annotated[
        Path | None,
        typer.Option(
            "--node-map",
            help="HCA GUID to Slurm node name, one `GUID NAME` a line (ibmap2slurm or ibnetdiscover "
            "node-name-map format); without it, names come from node descriptions like 'gpu001 mlx5_0'.",
        ),
    ] = None,
    generate: Annotated[
        bool, typer.Option("--generate", help="With --ibnetdiscover: print a topology.conf made from the fabric.")
    ] = False,
    compare: Annotated[
        bool,
        typer.Option("--compare", help="With --ibnetdiscover and --conf: where topology.conf contradicts the fabric."),
    ] = False,
    oversubscription: Annotated[
        bool,
        typer.Option(
            "--oversubscription",
            help="With --ibnetdiscover: per leaf switch, host-facing against uplink bandwidth (ports x rate), "
            "leaves above --max-ratio and leaves with fewer live uplinks than their peers.",
        ),
    ] = False,
    max_ratio: Annotated[
        float,
        typer.Option(
            "--max-ratio", help="With --oversubscription: the highest host:uplink ratio allowed (1.0 = non-blocking)."
        ),
    ] = 1.0,
    fmt: Annotated[TopologyFormat, typer.Option("--format", "-f", help="Output format.")] = TopologyFormat.table,
) -> int:
    """Show the switch tree, judge where a job's nodes sit, and check topology.conf against the fabric.

    Spanning more leaf switches than the node count needs warns (exit 1); nodes in trees with
    no common switch, or a topology.conf that slurmctld would refuse or that contradicts the
    fabric, fail (exit 2).
    """
    from clustercheck.analyzers import topology as topo_mod

    if nodes is not None and job_nodes_from_env:
        raise UsageError("give --nodes or --job-nodes-from-env, not both")
    if (generate or compare or node_map or oversubscription) and ibnetdiscover is None:
        raise UsageError("--generate, --compare, --oversubscription and --node-map work on an --ibnetdiscover dump")
    if generate + compare + oversubscription > 1:
        raise UsageError("choose one of --generate, --compare and --oversubscription")
    if not max_ratio > 0 or max_ratio == float("inf"):
        raise UsageError(f"--max-ratio {max_ratio:g}: give a ratio above 0, e.g. 1.0 for a non-blocking fabric")
    if compare and conf is None:
        raise UsageError("--compare needs --conf: the topology.conf to check against the fabric")
    if conf is None and ibnetdiscover is None:
        raise UsageError("give --conf topology.conf (or topology.yaml), or --ibnetdiscover DUMP")
    requested: list[str] | None = None
    if job_nodes_from_env:
        value = os.environ.get("SLURM_JOB_NODELIST", "").strip()
        if not value:
            raise UsageError("--job-nodes-from-env: SLURM_JOB_NODELIST is not set (not inside a Slurm job?)")
        requested = _expand(value, "SLURM_JOB_NODELIST")
    elif nodes is not None:
        requested = _expand(nodes, "--nodes")

    fabric = fabric_topo = None
    if ibnetdiscover is not None:
        names = topo_mod.parse_node_map(_read(node_map), str(node_map)) if node_map else None
        fabric = topo_mod.parse_ibnetdiscover(_read(ibnetdiscover), str(ibnetdiscover))
        if oversubscription:
            over = topo_mod.oversubscription(fabric, max_ratio)
            if fmt is TopologyFormat.json:
                json.dump(_oversubscription_json(over), sys.stdout, indent=2)
                print()
            else:
                _render_oversubscription(over)
            return int(ExitCode.for_status(over.status))
        fabric_topo = topo_mod.fabric_topology(fabric, names, guid_names=compare)
        if generate:
            if not fabric_topo.switches:
                for f in fabric_topo.findings:
                    print(f"clustercheck: {f.status.value}: {f}", file=sys.stderr)
                print(
                    f"clustercheck: fail: {ibnetdiscover}: no switch cabled to a host in the dump (no links): "
                    "no topology.conf can be made from it; run ibnetdiscover from a node whose HCA port is "
                    "Active and sees the subnet manager",
                    file=sys.stderr,
                )
                return int(ExitCode.for_status(Status.FAIL))
            text = topo_mod.render_topology_conf(
                fabric_topo,
                [
                    f"topology.conf generated by clustercheck {__version__} from {ibnetdiscover}",
                    f"{len(fabric_topo.switches)} switches, {fabric_topo.levels} levels, "
                    f"{len(fabric_topo.nodes)} nodes",
                    *(f"{f.status.value}: {f.message}" for f in fabric_topo.findings),
                    "",
                ],
            )
            sys.stdout.write(text)
            for f in fabric_topo.findings:
                print(f"clustercheck: {f.status.value}: {f}", file=sys.stderr)
            if any(f.status is Status.FAIL for f in fabric.findings):  # e.g. a duplicate GUID left out
                return int(ExitCode.for_status(Status.FAIL))
            return 0
    shown = topo_mod.parse_topology(_read(conf), str(conf), name) if conf is not None else fabric_topo
    assert shown is not None
    findings = list(shown.findings)
    if slurm_conf is not None:
        parsed = topo_mod.parse_slurm_conf(_read(slurm_conf), str(slurm_conf), _includer(slurm_conf))
        findings += shown.check_nodes(parsed.node_lines())
    if compare:
        assert fabric is not None and fabric_topo is not None
        findings += [f for f in fabric_topo.findings if f.status is not Status.OK]
        findings += topo_mod.compare(fabric, fabric_topo, shown)
    placement = topo_mod.place(shown, requested) if requested is not None else None
    if placement is not None:
        findings += placement.findings
    status = worst(f.status for f in findings)
    if fmt is TopologyFormat.json:
        json.dump(_to_json(shown, placement, findings, status, fabric_topo if compare else None), sys.stdout, indent=2)
        print()
    else:
        _render_table(shown, placement, findings, status, compared=fabric_topo if compare else None)
    return int(ExitCode.for_status(status))


def _expand(expression: str, what: str) -> list[str]:
    from clustercheck.hostlist import expand

    try:
        return expand(expression)
    except UsageError as exc:
        raise UsageError(f"{what}: {exc}") from None


#: The largest configuration or fabric dump read (an ibnetdiscover of a 10,000-node fabric is a
#: few MB): /dev/zero or a runaway file must not be read until memory runs out.
MAX_INPUT = 64 << 20


def _read(path: Path | None) -> str:
    import os
    import stat

    assert path is not None
    try:
        # O_NONBLOCK: a FIFO must not block the open; only a regular file is read, and at most MAX_INPUT
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{path}: not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as stream:
                data = stream.read(MAX_INPUT + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT:
        raise UsageError(f"{path}: larger than {MAX_INPUT >> 20} MiB: not a configuration or fabric dump")
    if b"\0" in data[:4096]:
        raise UsageError(f"{path}: a binary file, not a text configuration or dump")
    return data.decode("utf-8", errors="replace")


def _includer(slurm_conf: Path) -> Any:
    def read_include(target: str) -> tuple[str, str]:
        path = Path(target)
        if not path.is_absolute():
            path = slurm_conf.parent / path
        elif not path.exists():  # an absolute site path: look beside slurm.conf (a copied config)
            path = slurm_conf.parent / path.name
        return str(path), _read(path)

    return read_include


# -- output ----------------------------------------------------------------------------------------


def _to_json(shown: Any, placement: Any, findings: list[Any], status: Status, fabric: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": shown.source,
        "kind": shown.kind,
        "topology": shown.name,
        "switches": len(shown.switches),
        "levels": shown.levels,
        "leaves": len(shown.leaves),
        "nodes": len(shown.nodes),
        "roots": shown.roots,
        "nodes_requested": list(placement.nodes) if placement else None,
        "leaves_spanned": list(placement.leaves_spanned) if placement else [],
        "min_leaves": placement.min_leaves if placement else None,
        "common_switch": placement.common_switch if placement else None,
        "common_switch_level": placement.common_level if placement else None,
        "status": status.value,
        "findings": [f.to_json() for f in findings],
        "tree": shown.to_json(),
    }
    if fabric is not None:
        out["fabric"] = {"source": fabric.source, "switches": len(fabric.switches), "nodes": len(fabric.nodes)}
    return out


def _render_table(shown: Any, placement: Any, findings: list[Any], status: Status, compared: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree

    from clustercheck.hostlist import fold

    console = Console(highlight=False)
    spanned = set(placement.leaves_spanned) if placement else set()
    requested = set(placement.nodes) if placement else set()
    common = placement.common_switch if placement else None
    title = f"{shown.source}" + (f" (topology {shown.name})" if shown.name else "")
    title += (
        f": {shown.kind}, {len(shown.switches)} {'blocks' if shown.kind == 'block' else 'switches'}, "
        f"{shown.levels} level{'s' if shown.levels != 1 else ''}, {len(shown.nodes)} nodes"
    )
    tree = Tree(escape(title))
    seen: set[str] = set()

    def label(name: str) -> str:
        sw = shown.switches[name]
        text = name
        level = shown.level.get(name)
        if sw.has_children:
            text += f"  (level {level})" if level is not None else "  (in a loop)"
        elif sw.nodes:
            text += f"  {fold(sw.nodes)} ({len(sw.nodes)})"
        else:
            text += "  (no nodes)"
        if name in spanned:
            here = [n for n in sw.nodes if n in requested]
            text += f"  <- {len(here)} of the nodes"
        if name == common and len(spanned) > 1:
            text += "  <- lowest common switch"
        return escape(text)

    def add(parent: Tree, name: str) -> None:
        if name in seen:
            parent.add(escape(f"{name}  (shown above)"))
            return
        seen.add(name)
        branch = parent.add(label(name))
        for child in shown.switches[name].children:
            if child in shown.switches:
                add(branch, child)

    for root in shown.roots:
        add(tree, root)
    rest = [n for n in shown.switches if n not in seen]
    if rest:
        loop = tree.add("not reachable from a top switch (a loop)")
        for name in rest:
            if name not in seen:
                add(loop, name)
    if shown.kind in ("tree", "block"):
        console.print(tree)
    else:
        console.print(escape(title))
    if compared is not None:
        console.print(
            escape(
                f"fabric {compared.source}: {len(compared.switches)} switches, {compared.levels} levels, "
                f"{len(compared.nodes)} hosts"
            )
        )
    if placement is not None:
        console.print(
            escape(
                f"nodes: {len(placement.nodes)} ({fold(placement.nodes)}); leaves spanned: "
                f"{len(placement.leaves_spanned)}; fewest that hold them: {placement.min_leaves}; "
                f"lowest common switch: {placement.common_switch or 'none'}"
                + (f" (level {placement.common_level})" if placement.common_switch else "")
            )
        )
    for f in findings:
        console.print(escape(f"{f.status.value:<5} {f}"))
    summary = placement.summary if placement is not None and not placement.findings else None
    console.print(escape(f"status: {status.value}" + (f" - {summary}" if summary else "")))


def _oversubscription_json(over: Any) -> dict[str, Any]:
    worst_leaf = over.leaves[0] if over.leaves else None
    return {
        "source": over.source,
        "max_ratio": over.max_ratio,
        "leaves": [leaf.to_json() for leaf in over.leaves],
        "designed_uplinks": over.designed_uplinks,
        "worst": worst_leaf.to_json() if worst_leaf else None,
        "status": over.status.value,
        "findings": [f.to_json() for f in over.findings],
    }


def _render_oversubscription(over: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title=escape(f"{over.source}: oversubscription per leaf (limit {over.max_ratio:g}:1)"))
    for column in ("leaf", "switch", "hosts", "host Gb/s", "uplinks", "uplink Gb/s", "ratio"):
        table.add_column(column, justify="right" if column not in ("leaf", "switch") else "left")
    for leaf in over.leaves:
        ratio = leaf.ratio
        table.add_row(
            escape(leaf.description or "-"),
            leaf.name,
            str(leaf.hosts),
            f"{leaf.host_gbps:g}",
            str(leaf.uplinks)
            + ("" if over.designed_uplinks is None or leaf.uplinks >= over.designed_uplinks else " !"),
            f"{leaf.uplink_gbps:g}",
            "-" if ratio is None else f"{ratio:.2f}:1",
        )
    if over.leaves:
        console.print(table)
    for f in over.findings:
        console.print(escape(f"{f.status.value:<5} {f}"))
    console.print(escape(f"status: {over.status.value}"))
