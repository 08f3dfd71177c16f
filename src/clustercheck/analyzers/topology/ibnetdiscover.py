"""An `ibnetdiscover` dump (the InfiniBand fabric's cables) -> `Fabric`, and HCA -> Slurm node names.

`parse_ibnetdiscover()` reads the default form (`Switch`/`Ca` blocks of port lines) and the
ports report of `ibnetdiscover -p`; a line of no known form raises TopologyError naming the file
and line. `parse_node_map()` reads a GUID -> node name map (ibmap2slurm, node-name-map);
`hca_host()` names an HCA from the map or from its rdma-ndd node description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from clustercheck.hostlist import SLURM_MAX_NAME
from clustercheck.result import Status

from .model import Finding, TopologyError, _plural

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
