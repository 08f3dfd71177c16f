"""Slurm network topology: topology.conf, topology.yaml and ibnetdiscover dumps as one switch tree.

Pure and host-free; `clustercheck topology`, the sweep's pair choice and the slurm.* and
rdma.oversubscription checks are thin layers over it. One module per data source or job, by what
calls what (none imports this `__init__`, which only re-exports their public names, so
`from clustercheck.analyzers import topology` and `topology.<name>` keep working):

- `model`: `Topology` (switches or blocks, analysed as slurmctld does: levels, parents, the nodes
  under each switch, what slurmctld would log or refuse; domain-facts §D.5), `Switch`, `Finding`,
  `TopologyError`. Everything below builds or judges a Topology.
- `conf`: `parse_topology_conf()`, topology.conf (its lines through facts.slurm_conf's reader, so
  errors name the file and line).
- `yaml`: `parse_topology_yaml()`, topology.yaml (Slurm 25.05+), one entry of it.
- `parse`: `parse_topology()`, either file, told apart by name or content.
- `placement`: `place()`, where a node set (a job's nodes) sits: leaves spanned, the least that
  could hold it, the lowest common switch, a verdict.
- `ibnetdiscover`: `parse_ibnetdiscover()` -> `Fabric` (switches, HCAs, cables), `parse_node_map()`,
  `hca_host()` (an HCA's Slurm node name).
- `cabling`: `fabric_topology()` (the tree the cables make), `render_topology_conf()` (--generate)
  and `compare()` (topology.conf against the cables: nodes under the wrong leaf, missing links).
- `bandwidth`: `oversubscription()`, per leaf host-facing against uplink bandwidth.

Slurm's `Key=Value` syntax and slurm.conf itself are read by `clustercheck.facts.slurm_conf` (the
one parser; `read_conf_lines`, `parse_slurm_conf`, `SlurmConf`, `parse_gres_gpus` are re-exported
here for `clustercheck topology --conf`). Hostlist expressions go through `clustercheck.hostlist`
(python-hostlist), never a regex.
"""

from __future__ import annotations

from clustercheck.facts.slurm_conf import ConfLine as ConfLine
from clustercheck.facts.slurm_conf import NodeDef as NodeDef
from clustercheck.facts.slurm_conf import SlurmConf as SlurmConf
from clustercheck.facts.slurm_conf import _without_parentheses as _without_parentheses  # tests/safety pin it
from clustercheck.facts.slurm_conf import parse_gres_gpus as parse_gres_gpus
from clustercheck.facts.slurm_conf import parse_slurm_conf as parse_slurm_conf
from clustercheck.facts.slurm_conf import read_conf_lines as read_conf_lines

from .bandwidth import LANE_GBPS as LANE_GBPS
from .bandwidth import LeafLoad as LeafLoad
from .bandwidth import Oversubscription as Oversubscription
from .bandwidth import link_gbps as link_gbps
from .bandwidth import oversubscription as oversubscription
from .cabling import compare as compare
from .cabling import fabric_topology as fabric_topology
from .cabling import render_topology_conf as render_topology_conf
from .conf import parse_topology_conf as parse_topology_conf
from .ibnetdiscover import Fabric as Fabric
from .ibnetdiscover import IBLink as IBLink
from .ibnetdiscover import IBNode as IBNode
from .ibnetdiscover import hca_host as hca_host
from .ibnetdiscover import normalize_guid as normalize_guid
from .ibnetdiscover import parse_ibnetdiscover as parse_ibnetdiscover
from .ibnetdiscover import parse_node_map as parse_node_map
from .model import MAX_DEPTH as MAX_DEPTH
from .model import MAX_SWITCH_NAME as MAX_SWITCH_NAME
from .model import Finding as Finding
from .model import Switch as Switch
from .model import Topology as Topology
from .model import TopologyError as TopologyError
from .parse import parse_topology as parse_topology
from .placement import Placement as Placement
from .placement import min_leaves as min_leaves
from .placement import place as place
from .yaml import TOPOLOGY_TYPES as TOPOLOGY_TYPES
from .yaml import parse_topology_yaml as parse_topology_yaml
