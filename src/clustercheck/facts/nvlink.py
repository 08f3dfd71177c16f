"""NVLink, the NVSwitch fabric and the GPU/NIC topology, as nvidia-smi and the kernel print them.

Sources (each a pure parser, linear in its input, tested on real outputs in tests/corpus/):

- `nvidia-smi nvlink -s` (`--status`): per GPU a header `GPU 0: NAME (UUID: GPU-...)` and one
  line per link, `Link 3: 26.562 GB/s` or `Link 3: <inactive>`; a GPU whose links are all down
  prints `NVML: Unable to retrieve NVLink information as all links are inactive` instead; a GPU
  without NVLink (A10) prints nothing at all.
- `nvidia-smi nvlink -e` (`--errorcounters`): `Link 0: Replay Errors: 0`, `... Recovery Errors`,
  `... CRC Errors` per link (cumulative since the driver loaded or the GPU was reset).
- `nvidia-smi -q` (text): the `Fabric` block of each GPU (State, Status, CliqueId, ClusterUUID,
  Health Summary), N/A where the GPU is not attached to an NVSwitch fabric.
- `nvidia-smi topo -m`: the matrix of GPU and NIC relations (X, NV#, PIX, PXB, PHB, NODE, SYS),
  columns separated by tabs or runs of spaces, CPU/NUMA affinity columns, the NIC legend.
- the kernel log: NVSwitch `SXid` lines, classified with NVIDIA's SXid tables (domain-facts §I).
- the GPU record (probe `nvml`): where NVML answered for NVLink and the fabric, `status_from_record`,
  `errors_from_record` and `fabric_from_record` give the same objects the nvidia-smi readers give, so
  gpu.nvlink and gpu.fabric judge either source with one code path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clustercheck.probes.nvml import Gpu

# -- nvidia-smi nvlink -s ---------------------------------------------------------------------------

# Anchored prefixes only; the rest of a line is taken apart with str methods, so a hostile line
# (a long run of spaces without the expected ending) costs linear time, never quadratic.
_GPU_HEADER_RE = re.compile(r"GPU (\d+): ")
_LINK_STATUS_RE = re.compile(r"Link (\d+): ")
_SPEED_RE = re.compile(r"^(\d+(?:\.\d+)?) GB/s$")


@dataclass(frozen=True)
class LinkStatus:
    link: int
    speed_gbs: float | None  # None: the link is not active
    said: str  # what nvidia-smi printed for it ("26.562 GB/s", "<inactive>")


@dataclass
class GpuLinks:
    index: int
    name: str
    uuid: str | None
    line: int  # of its header, 1-based
    links: list[LinkStatus] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # other lines under it ("NVML: Unable to ...")

    @property
    def all_inactive(self) -> bool:
        return any("all links are inactive" in m for m in self.messages)

    @property
    def active(self) -> list[LinkStatus]:
        return [link for link in self.links if link.speed_gbs is not None]

    @property
    def inactive(self) -> list[LinkStatus]:
        return [link for link in self.links if link.speed_gbs is None]


@dataclass
class NvlinkStatus:
    gpus: list[GpuLinks]
    stray: list[tuple[int, str]]  # (line, text) of lines that belong to no GPU and are not a prompt


def _gpu_header(line: str) -> tuple[int, str, str | None] | None:
    """`GPU 0: NAME (UUID: GPU-...)` (a stripped line) -> (index, name, uuid); None for another line."""
    m = _GPU_HEADER_RE.match(line)
    if m is None:
        return None
    rest = line[m.end() :]
    uuid = None
    at = rest.rfind(" (UUID: ")
    if at >= 0 and rest.endswith(")"):
        rest, uuid = rest[:at], rest[at + 8 : -1]
    return int(m.group(1)), rest.strip(), uuid


def parse_nvlink_status(text: str) -> NvlinkStatus:
    """`nvidia-smi nvlink -s` -> each GPU's links, in order. Empty text -> no GPU (no NVLink here)."""
    gpus: list[GpuLinks] = []
    stray: list[tuple[int, str]] = []
    current: GpuLinks | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        header = _gpu_header(line)
        if header:
            current = GpuLinks(header[0], header[1], header[2], number)
            gpus.append(current)
            continue
        m = _LINK_STATUS_RE.match(line)
        if m and current is not None:
            said = line[m.end() :].strip()
            speed = _SPEED_RE.match(said)
            current.links.append(LinkStatus(int(m.group(1)), float(speed.group(1)) if speed else None, said))
            continue
        if current is None:
            if not re.match(r"^\S*[#$] ", line):  # a shell prompt and the command pasted above the output
                stray.append((number, line[:200]))
            continue
        current.messages.append(line[:300])
    return NvlinkStatus(gpus, stray)


# -- nvidia-smi nvlink -e ---------------------------------------------------------------------------

_LINK_COUNTER_RE = re.compile(r"Link (\d+): ([A-Za-z][A-Za-z ]{0,40}?) Errors?: (\S+)$")


@dataclass
class GpuLinkErrors:
    index: int
    name: str
    uuid: str | None
    counters: dict[int, dict[str, int | None]] = field(default_factory=dict)  # link -> {"CRC": 0, ...}


def parse_nvlink_errors(text: str) -> list[GpuLinkErrors]:
    """`nvidia-smi nvlink -e` -> per GPU, per link, each counter by name ("Replay", "Recovery", "CRC"...).

    A value that is not a number (N/A) is None: not readable, never 0."""
    gpus: list[GpuLinkErrors] = []
    current: GpuLinkErrors | None = None
    for raw in text.splitlines():
        line = raw.strip()
        header = _gpu_header(line)
        if header:
            current = GpuLinkErrors(*header)
            gpus.append(current)
            continue
        m = _LINK_COUNTER_RE.match(line)
        if m and current is not None:
            value = m.group(3)
            current.counters.setdefault(int(m.group(1)), {})[m.group(2).strip()] = (
                int(value) if value.isdigit() else None
            )
    return gpus


# -- nvidia-smi -q: the Fabric block ------------------------------------------------------------------

_Q_GPU_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


@dataclass
class GpuFabric:
    bus_id: str | None  # "00000000:19:00.0" from the GPU's header; None in a snippet without one
    line: int  # of the `Fabric` line, 1-based
    state: str | None = None  # Completed, In Progress, Not Started, N/A
    status: str | None = None  # Success, Insufficient Resources, ..., N/A
    clique_id: str | None = None
    cluster_uuid: str | None = None
    health: str | None = None  # Health / Summary on multi-node NVLink systems: Healthy, Unhealthy

    @property
    def supported(self) -> bool:
        """False where NVML says the GPU has no fabric (State N/A: no NVSwitch fabric to join)."""
        return (self.state or "N/A").upper() != "N/A"


def parse_q_fabric(text: str) -> list[GpuFabric]:
    """Every `Fabric` block of `nvidia-smi -q` text, with the GPU it belongs to, in order.

    Reads by indentation: the block is the lines indented deeper than `Fabric`; `Health` is a
    sub-block whose `Summary` is kept. A pasted excerpt (`| grep -C3`, one block alone) reads too."""
    blocks: list[GpuFabric] = []
    bus: str | None = None
    current: GpuFabric | None = None
    depth = -1  # indentation of the current Fabric line
    in_health = -1  # indentation of its Health line, -1 outside
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" \t"))
        line = raw.strip()
        m = _Q_GPU_RE.match(line)
        if m and indent == 0:
            bus, current = m.group(1), None
            continue
        if current is not None and indent <= depth:
            current = None
        if line == "Fabric":
            current = GpuFabric(bus, number)
            blocks.append(current)
            depth, in_health = indent, -1
            continue
        if current is None:
            continue
        if in_health >= 0 and indent <= in_health:
            in_health = -1
        if line == "Health":
            in_health = indent
            continue
        key, colon, value = line.partition(":")
        if not colon:
            continue
        key, value = key.strip(), value.strip()
        if in_health >= 0:
            if key == "Summary":
                current.health = value
            continue
        if key == "State":
            current.state = value
        elif key == "Status":
            current.status = value
        elif key == "CliqueId":
            current.clique_id = value
        elif key == "ClusterUUID":
            current.cluster_uuid = value
    return blocks


# -- the same, from the GPU record (NVML) ---------------------------------------------------------------

#: what nvidia-smi prints for a GPU whose links are all down; NVML says it by every link's state
ALL_INACTIVE = "all links are inactive (NVML: no link of this GPU is in state active)"


def status_from_record(gpus: Sequence[Gpu]) -> NvlinkStatus | None:
    """The NVLink state NVML put in the record, as `parse_nvlink_status` reads `nvidia-smi nvlink -s`;
    None unless every GPU carries it (nvlinks asked, a speed for every active link): then nvidia-smi is asked.

    A GPU without NVLink (nvlinks `()`) is left out, as nvidia-smi prints nothing for it; speeds are
    NVML's MBps as GB/s (26562 -> 26.562, the figure `nvidia-smi nvlink -s` prints)."""
    out: list[GpuLinks] = []
    for g in gpus:
        if g.nvlinks is None or any(link.active and link.speed_mbps is None for link in g.nvlinks):
            return None
        if not g.nvlinks:
            continue
        entry = GpuLinks(g.index, g.name or "", g.uuid, 0)
        if not any(link.active for link in g.nvlinks):
            entry.messages.append(ALL_INACTIVE)
        else:
            for link in sorted(g.nvlinks, key=lambda x: x.link):
                speed = link.speed_mbps / 1000 if link.active and link.speed_mbps is not None else None
                entry.links.append(
                    LinkStatus(link.link, speed, f"{speed:g} GB/s" if speed is not None else "<inactive>")
                )
        out.append(entry)
    return NvlinkStatus(out, [])


def errors_from_record(gpus: Sequence[Gpu]) -> list[GpuLinkErrors] | None:
    """NVML's error counters in the record, as `parse_nvlink_errors` reads `nvidia-smi nvlink -e`
    (Replay, Recovery, CRC); None when NVML reported none."""
    out: list[GpuLinkErrors] = []
    known = False
    for g in gpus:
        if not g.nvlinks:
            continue
        entry = GpuLinkErrors(g.index, g.name or "", g.uuid)
        for link in sorted(g.nvlinks, key=lambda x: x.link):
            values = {"Replay": link.replay_errors, "Recovery": link.recovery_errors, "CRC": link.crc_errors}
            if any(v is not None for v in values.values()):
                known = True
                entry.counters[link.link] = values
        out.append(entry)
    return out if known else None


def fabric_from_record(gpus: Sequence[Gpu]) -> list[GpuFabric] | None:
    """The fabric NVML (or `-q -x`) put in the record, as `parse_q_fabric` reads `nvidia-smi -q`; None
    unless every GPU carries a fabric state (then `nvidia-smi -q` is asked)."""
    if not gpus or any(g.fabric_state is None for g in gpus):
        return None
    return [
        GpuFabric(
            g.pci_bus_id,
            0,
            state=g.fabric_state,
            status=g.fabric_status or ("N/A" if g.fabric_state else None),
            clique_id=str(g.fabric_clique_id) if g.fabric_clique_id is not None else None,
            cluster_uuid=g.fabric_cluster_uuid,
            health=g.fabric_health,
        )
        for g in gpus
    ]


# -- nvidia-smi topo -m -------------------------------------------------------------------------------

_DEVICE_RE = re.compile(r"^(GPU|NIC|NV[A-Z]*)\d+$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


@dataclass
class TopoMatrix:
    devices: list[str]  # matrix columns in order: GPU0.., NIC0..
    relation: dict[str, dict[str, str]]  # row device -> column device -> X, NV18, PIX, PXB, PHB, NODE, SYS
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, str]  # "0", "0-1", "N/A"
    nic_names: dict[str, str]  # NIC0 -> mlx5_0 (the NIC Legend; empty when the output was cut before it)
    cut_rows: list[str]  # devices with a column but no row (an excerpt cut short)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if d.startswith("NIC")]


class TopoError(ValueError):
    """`nvidia-smi topo -m` output that is not the matrix (garbage, an error message, a cut header)."""


def parse_topo_matrix(text: str) -> TopoMatrix:
    """`nvidia-smi topo -m` -> the relation of every GPU and NIC pair, the affinities, the NIC names.

    Columns are tab- or space-separated; cells never hold spaces, so a row splits on whitespace,
    its first len(devices) cells are relations and the rest fill the trailing columns (CPU
    Affinity, NUMA Affinity, GPU NUMA ID) in order; the underline escapes nvidia-smi writes on a
    terminal are dropped. TopoError when no header with GPU0 is found."""
    lines = _ANSI_RE.sub("", text).splitlines()
    header_at = -1
    devices: list[str] = []
    trailing: list[str] = []
    for i, raw in enumerate(lines):
        names = [n for n in re.split(r"\t| {2,}", raw.strip()) if n.strip()]
        names = [n.strip() for n in names]
        if names and names[0] == "GPU0" and all(_DEVICE_RE.match(n) or not n[-1:].isdigit() for n in names):
            k = 0
            while k < len(names) and _DEVICE_RE.match(names[k]):
                k += 1
            devices, trailing, header_at = names[:k], names[k:], i
            break
    if header_at < 0:
        raise TopoError("no `GPU0 GPU1 ...` header line: not `nvidia-smi topo -m` output")
    relation: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    rows_done = False
    for raw in lines[header_at + 1 :]:
        stripped = raw.strip()
        if not stripped:
            rows_done = bool(relation)
            continue
        legend = _NIC_LEGEND_RE.match(raw)
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
            continue
        if rows_done:
            continue
        cells = stripped.split()
        if not cells or cells[0] not in devices:
            if relation:
                rows_done = True
            continue
        row = cells[0]
        values = cells[1 : 1 + len(devices)]
        relation[row] = dict(zip(devices, values, strict=False))
        rest = cells[1 + len(devices) :]
        for name, value in zip(trailing, rest, strict=False):
            if name == "CPU Affinity":
                cpu[row] = value
            elif name == "NUMA Affinity":
                numa[row] = value
    cut = [d for d in devices if d not in relation]
    return TopoMatrix(devices, relation, cpu, numa, nic_names, cut)


#: The order of closeness nvidia-smi's legend gives (first is nearest).
RELATION_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")


def closeness(relation: str) -> int:
    """A rank for a topo -m cell: smaller is nearer (NV# counts as NVLink); unknown cells rank last."""
    key = "NV" if re.fullmatch(r"NV\d+", relation) else relation
    return RELATION_ORDER.index(key) if key in RELATION_ORDER else len(RELATION_ORDER)


# -- SXid lines in the kernel log -------------------------------------------------------------------

_SXID_RE = re.compile(r"(nvidia-nvswitch\d{0,4}): SXid \(PCI:([0-9A-Fa-f:.]{1,20})\): (\d{1,9}),\s*(.*)")
_STAMP_RE = re.compile(r"^\[\s*(\d+\.\d+)\]")

# NVIDIA Fabric Manager User Guide (DU-09883-001 v1.3), appendix "NVSwitch SXid Errors", as
# encoded by leptonai/gpud (domain-facts §I.2): the non-fatal, fatal and always-fatal tables.
_SXID_NONFATAL = (
    "11004 11012 11021 11022 11023 12021 12023 12028 15008 15011 19049 19055 19057 19059 19062 19065 "
    "19068 19071 19084 20001 20009 20012 22013 24001 24002 24003"
)
_SXID_FATAL = (
    "10001 10002 10004 10005 11001 11009 11013 11018 11019 11020 12001 12002 12022 12024 12025 12026 12027 "
    "12030 12031 12032 14017 15001 15006 15009 15010 15012 15013 19047 19048 19054 19056 19058 19060 "
    "19061 19063 19064 19066 19067 19069 19070 20034 22012 24004 24005 24006 24007"
)
_SXID_ALWAYS_FATAL = (
    "10003 12020 22003 22011 23001 23002 23003 23004 23005 23006 23007 23008 23009 23010 23011 23012 23013 "
    "23014 23015 23016 23017"
)
SXID_CLASS: dict[int, str] = {
    **{int(c): "non-fatal" for c in _SXID_NONFATAL.split()},
    **{int(c): "fatal" for c in _SXID_FATAL.split()},
    **{int(c): "always fatal" for c in _SXID_ALWAYS_FATAL.split()},
}


@dataclass(frozen=True)
class SxidEvent:
    switch: str  # nvidia-nvswitch0
    pci: str  # 0000:06:00.0
    sxid: int
    message: str  # "Fatal, Link 48 LTSSM Fault Up"
    line: int
    uptime_s: float | None

    @property
    def severity(self) -> str:
        """always fatal, fatal, non-fatal (NVIDIA's tables), else what the line itself says, else unknown."""
        known = SXID_CLASS.get(self.sxid)
        if known:
            return known
        head = self.message.split(",", 1)[0].strip().lower()
        if head in ("fatal", "non-fatal", "nonfatal"):
            return "fatal" if head == "fatal" else "non-fatal"
        return "unknown"


def parse_sxids(log: str) -> list[SxidEvent]:
    """NVSwitch SXid events in a kernel log, in order; the `Severity ...` and `Data {...}` lines the
    driver prints after an event are its detail, not events of their own."""
    events: list[SxidEvent] = []
    for number, line in enumerate(log.splitlines(), 1):
        if "SXid" not in line:
            continue
        m = _SXID_RE.search(line)
        if m is None:
            continue
        message = m.group(4).strip()
        if message.startswith(("Severity ", "Data {")):
            continue
        stamp = _STAMP_RE.search(line)
        events.append(
            SxidEvent(
                m.group(1),
                m.group(2).lower(),
                int(m.group(3)),
                message[:300],
                number,
                float(stamp.group(1)) if stamp else None,
            )
        )
    return events


def nvswitches_in_log(log: str) -> list[str]:
    """The NVSwitch devices the kernel log names (`nvidia-nvswitch0: ...`, else the devices of
    `nvidia-nvswitch: Probing device 0000:83:00.0` lines): evidence that the node has NVSwitches
    even where the GPUs report no fabric."""
    numbered: dict[str, None] = {}
    probed: dict[str, None] = {}
    for line in log.splitlines():
        if "nvidia-nvswitch" not in line:
            continue
        m = re.search(r"nvidia-nvswitch(\d+): ", line)
        if m:
            numbered.setdefault("nvswitch" + m.group(1), None)
            continue
        m = re.search(r"nvidia-nvswitch: Probing device ([0-9A-Fa-f:.]+)", line)
        if m:
            probed.setdefault(m.group(1).lower(), None)
    return list(numbered or probed)


# -- what a GPU model should show ---------------------------------------------------------------------

#: NVLinks per GPU and the per-link speed `nvidia-smi nvlink -s` prints, by a substring of the GPU's
#: name (domain-facts §I.1): only models whose numbers are in public outputs and NVIDIA's datasheets.
NVLINK_MODELS: tuple[tuple[str, int, float], ...] = (
    ("V100-SXM2", 6, 25.781),
    ("A100-SXM4", 12, 25.0),
    ("A800-SXM4", 8, 0.0),  # count only (NV8 in topo -m, NVIDIA/nccl#933); speed not sourced
    ("H100 80GB HBM3", 18, 26.562),
)


def expected_for(name: str) -> tuple[int, float]:
    """(links, GB/s per link) a GPU of this name should show; (0, 0.0) for a model not in the table."""
    for key, links, speed in NVLINK_MODELS:
        if key.lower() in name.lower():
            return links, speed
    return 0, 0.0
