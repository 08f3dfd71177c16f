"""`parse_topology()`: a topology file of either kind, topology.yaml or topology.conf.

`clustercheck topology --conf FILE` and the sweep's pair choice (`--topology FILE`) are given a
path, not a kind: the name tells them apart, or failing that the content.
"""

from __future__ import annotations

from .conf import parse_topology_conf
from .model import Topology, TopologyError
from .yaml import parse_topology_yaml


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
