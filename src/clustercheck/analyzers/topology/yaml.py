"""topology.yaml (Slurm 25.05+) -> the `Topology` of one of its entries.

PyYAML is imported inside the functions (`import yaml` is the PyYAML package, not this module):
checks/slurm.py may run in every job's prolog, and most sites have no topology.yaml.
Errors name the file and line of the YAML node: `topology.yaml:5: unknown switch key 'speed'`.
"""

from __future__ import annotations

from typing import Any

from clustercheck.facts.slurm_conf import expand_names as _expand
from clustercheck.result import Status

from .model import Finding, Switch, Topology, TopologyError

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
