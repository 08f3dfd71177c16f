"""The topology file slurmctld reads (topology.yaml, else topology.conf), gathered through the Host API.

The parsers are clustercheck.analyzers.topology's (its conf and yaml modules; `clustercheck
topology` reads local files with them); this module is how a check asks a node for the file, by
its real path in the config folder that holds slurm.conf.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from clustercheck.analyzers.topology.conf import parse_topology_conf
from clustercheck.analyzers.topology.model import Topology, TopologyError
from clustercheck.analyzers.topology.yaml import parse_topology_yaml
from clustercheck.facts.slurm_conf import ConfUnreadable

if TYPE_CHECKING:
    from clustercheck.host import Host

NEEDS = ("file /etc/slurm/topology.yaml", "file /etc/slurm/topology.conf")


def read_topology(host: Host, config_dir: str) -> Topology | None:
    """topology.yaml when present (Slurm ignores topology.conf then), else topology.conf, else None."""

    def gather(h: Host) -> Topology | None:
        yaml_path = posixpath.join(config_dir, "topology.yaml")
        conf_path = posixpath.join(config_dir, "topology.conf")
        try:
            text = h.read_optional(yaml_path)
            if text is not None:
                return parse_topology_yaml(text, yaml_path)
            text = h.read_optional(conf_path)
            return parse_topology_conf(text, conf_path) if text is not None else None
        except TopologyError as exc:
            raise ConfUnreadable(h.name, str(exc)) from None

    return host.fact(f"topology:{config_dir}", gather)
