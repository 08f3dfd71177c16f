"""NCCL_DEBUG=INFO logs -> which network NCCL used, GPUDirect RDMA, transport errors, per host.

NCCL prints its transport decisions only into its debug log: a job that silently fell back
from InfiniBand/RoCE or EFA to TCP sockets runs, just many times slower. This module reads
such logs (a user's job output: NCCL lines mixed with training output, behind srun, OpenMPI,
Python-logging, timestamp or CloudWatch prefixes, one file per rank or all ranks in one) and
says what NCCL chose and why, and whether that is what a training job needs.

Line formats (domain-facts.md §C.1-C.2, NCCL src/debug.cc and the transport sources):

- prefix ``host:pid:tid [dev] NCCL INFO ...``; the bracket is the CUDA device, not the rank;
  WARN lines put ``file:line`` (newer builds: ``func(args):line``) before ``NCCL WARN``;
- ``Using network IB|Socket|IBext|Libfabric|AWS Libfabric`` (2.3 and 2.5+), the device lines
  ``NET/IB : Using [0]mlx5_0:1/IB ... ; OOB ...``, ``NET/Socket : Using [0]eth0:...``,
  ``NET/OFI Selected provider is efa`` (aws-ofi-nccl);
- channel lines ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`` (``Ring 00 : ...``
  before 2.5; the ``[x]`` after a rank is a PCI bus id up to 2.12, the nvml device later;
  PXN adds ``(proxy)`` after the device; plugins may carry a version: ``NET/IBext_v8/3``);
- NCCL 2.4 printed ``NET/Socket : Using`` for its *bootstrap* interface (there was no
  ``Bootstrap :`` line yet), so in 2.4 that line is no fallback.

Speed: the scanner never parses every line. It reads fixed-size blocks and lets the regex
engine find the few line kinds that decide the verdict (network selection, device lists,
WARN lines, version, communicator sizes); only those are decoded and parsed, and identical
lines (every rank prints the same init lines for every communicator) are parsed once.
Channel lines, the bulk of a large log, are counted by kind in C (``findall`` over short
captures); they are attributed to their host line by line for the first ``EXACT_CHANNELS`` of
every input and, beyond that, only when they are the kind that matters per host (network
channels without GPUDirect RDMA, TCP-socket channels, shared-memory channels). Memory stays
constant: one block, bounded caches, and per-host state bounded by the number of hosts.
Large files are cut into stretches at line boundaries and scanned by several processes; the
raw evidence of each stretch (a `Partial`) is merged back in order, so line numbers hold.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from clustercheck.result import Status, worst

#: Bytes read at a time. Small blocks stay in the CPU cache, which matters more than syscalls.
BLOCK = 1 << 18
#: The longest line kept; longer ones (1 MB of garbage without a newline) are counted and skipped.
MAX_LINE = 4 << 20
#: Channel lines attributed to their host one by one at the start of every input; later ones are
#: counted, and attributed only when they matter per host (no GPUDirect RDMA, TCP, shared memory).
EXACT_CHANNELS = 50_000
#: Files at least this large are scanned in stretches on several processes (`jobs`).
PARALLEL_MIN = 64 << 20
#: The longest text after `via NET/` that can name a transport (`IBext_v8/3(2)/GDRDMA`).
MAX_TAIL = 128
#: The longest part of a line kept and parsed (NCCL lines are a few hundred bytes); longer ones are
#: cut there and counted as overlong, so every per-line step has a bounded input.
MAX_KEPT = 4096
#: Caps that keep memory constant whatever the input holds.
MAX_ERRORS = 50
MAX_HOSTS = 4096
_SEEN_CAP = 20000
_RECORDS_CAP = 200_000

NETWORKS = ("ib", "roce", "ofi", "socket")

# -- what a line says ---------------------------------------------------------------------------

# The few INFO/WARN kinds that decide the verdict; channel lines are handled separately.
_ENV_VARS = (
    rb"IB_DISABLE|NET|NET_PLUGIN|IBEXT_DISABLE|NET_GDR_LEVEL|IB_GDR_LEVEL|NET_GDR_READ|IB_HCA|"
    rb"SOCKET_IFNAME|P2P_DISABLE|P2P_LEVEL|SHM_DISABLE|NVLS_ENABLE|DMABUF_ENABLE|IB_GID_INDEX"
)
_PROCESS_KINDS = (
    rb"Using network |NET/|Net/IB|NET : Using|NCCL version |NCCL_(?:" + _ENV_VARS + rb") set|Count not open|"
    rb"Could not open lib|P2P plugin|Failed to init|Bootstrap ?: |rank [0-9]+ nranks"
)
# Per communicator and rank: printed again for every communicator, so only read near the start.
_COMM_KINDS = (
    rb"comm |[0-9]+ coll channels|NVLS multicast|Connected NVLS|ncclCommInit|\[Rank |"
    rb"Channel [0-9]+/[0-9]+ : +[0-9]+(?: |\r?$)"
)
# INFO first: it is what almost every NCCL line holds, and sre then fails the rest fastest.
_RARE = re.compile(rb"NCCL (?:INFO (?:" + _PROCESS_KINDS + rb"|" + _COMM_KINDS + rb")|WARN|version )", re.MULTILINE)
# Past the start of a large input: what a process prints once when it starts (a restarted or late
# rank), WARN lines, and the settings that change the network; not what repeats per communicator.
# Alternatives grouped by their first character: sre tries a group only when that character
# matches, so the line kinds that are not wanted (most of them "Channel") fail after one or two
# comparisons instead of one per alternative (the same matches as the flat alternation of the kinds).
_RARE_LEAN = re.compile(
    rb"NCCL (?:INFO (?:"
    rb"N(?:CCL(?: version |_(?:IB_DISABLE|NET|NET_PLUGIN|IBEXT_DISABLE) set)|et/IB|ET(?: : Using|/(?:"
    rb"IB ?: ?(?:Using|No device|Unable|GPU Direct)|Socket ?: ?Using|OFI (?:Selected|Could not|"
    rb"Initializing aws|Using aws)|[A-Za-z]+ : (?:Using|GPU Direct))))|"
    rb"Using network |Bootstrap ?: |Co(?:unt not open|uld not open lib)|P2P plugin|Failed to init|"
    rb"rank [0-9]+ nranks)|WARN|version )"
)
#: The same line kinds as a POSIX extended regex, for `grep -E` on a node (checks/nccl.py): only
#: these lines, the channel lines it needs, and counts cross the network, not a whole job log.
GREP_PATTERN = (
    "NCCL (WARN|version |INFO (Using network |NET/|Net/IB|NET : Using|NCCL version |NCCL_("
    + _ENV_VARS.decode()
    + ") set|Count not open|Could not open lib|P2P plugin|Failed to init|Bootstrap ?: |rank [0-9]+ nranks|"
    "comm |[0-9]+ coll channels|NVLS multicast|Connected NVLS|ncclCommInit|\\[Rank ))"
)
# Messages of other libraries that explain a missing network (only looked for near the start).
_FOREIGN = re.compile(
    rb"fi_getinfo: provider \S+ output empty list|libibverbs: Warning: no userspace device-specific driver"
)
# Channel lines, one by one (exact attribution).
# (bounded: an unbounded lazy run rescanned a long line from every "NCCL INFO Channel" in it)
_CHANNEL = re.compile(rb"NCCL INFO (?:Channel|Ring) [^\n]{0,512}? via ")
# Channel lines, counted: the network ones by their whole tail, the others by one byte.
# Network channels by their whole tail; shared-memory ones as b"" (a rare first byte keeps it fast).
_VIA = re.compile(rb"via (?:NET/([^\n]*)|SHM)")

_MARKER = re.compile(r"NCCL (INFO|WARN) ")
# Look-behinds start each run of name characters only once (linear): a match inside a run implies
# one from the run's start, so the leftmost match is the same as without them.
_HOST = re.compile(r"(?:^|(?<=[\s:|]))([^\s:|]+):(\d+):(\d+) \[(-?\d+)\]")
_DEV_ONLY = re.compile(r"\[(-?\d+)\]\s*(?:\S+:\d+\s*)?$")
# Dates and times before the NCCL prefix (logging frameworks, CloudWatch); not digits inside host names.
_TIMESTAMP = re.compile(
    r"(?<![\w-])\d{4}-[01]\d-[0-3]\d(?:[T ][0-2]\d:[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-][0-2]\d:?[0-5]\d)?)?"
    r"|(?<![\w:-])[0-2]\d:[0-5]\d:[0-5]\d(?:[.,]\d+)?"
)
#: How much of the end of a prefix may hold `[dev] file:line` (_DEV_ONLY backtracks over what it is given).
_PREFIX_TAIL = 256
_SPLICED = re.compile(r"(?<![^\s:|\[\]])[^\s:|\[\]]+:\d+:")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")

_TAIL = re.compile(r"NET/(.+?)/(\d+)(?:\((\d+)\))?((?:/[A-Za-z]+|\([A-Za-z]+\))*)\s*$")
_CHANNEL_LINE = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : .*? via (.+?)\s*$")
# `[0]mlx5_0:1/IB`, and (NCCL 2.19+ with merged NICs) `[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}`:
# the physical devices of a virtual NIC come after `[n] `; the single optional space keeps it linear.
_DEVICE = re.compile(r"\[(\d+)\] ?([^\s:\[\]={},]+):(\d+)/(\w+)((?:/\w+)*)")
_IFACE = re.compile(r"\[(\d+)\]([^\s:\[\]]+):([^\s<\[\]]+)<\d+>")

# Messages taken apart by Scanner._info, _net_line and _ofi_line (compiled once: they run per kept line).
_ENV_SET = re.compile(r"(NCCL_\w+) set (?:by environment )?to (.*?)\.?\s*$")
_COMM_SIZES = re.compile(r"comm \S+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_COMM_COMPLETE = re.compile(r"comm \S+ rank (\d+) nranks (\d+) .*Init COMPLETE")
_BOOTSTRAP = re.compile(r"Bootstrap ?: ?Using (?:\[\d+\])?([^\s:<]+)")
_COMM_INIT = re.compile(r"ncclCommInit\w* comm \S+ rank (\d+) nranks (\d+)")
_RANK_NRANKS = re.compile(r"rank (\d+) nranks (\d+)")
_NVLS_CHANNELS = re.compile(r"(?<!\d)(\d+) nvls channels")
_NET_PLUGIN_LINE = re.compile(r"NET/(\w+) ?: ?(.*)$")
_GDR_HCA = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']*)'")
_OOB = re.compile(r"OOB (\S+?)(?::|<|$)")
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([^,;\s]+)")
_OFI_NICS = re.compile(r"found (\d+) nics")
_OFI_PLUGIN = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl (\S+)")

# WARN messages, most specific first: (pattern, kind). Kinds: "runtime" errors always fail;
# "init" failures left the job without a network it was meant to use; "cause" explains a
# fallback but is benign alone; "event" is an IB async event (fabric noise).
_WARN_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Failed to open libibverbs"), "cause"),
    (
        re.compile(
            r"Got async event ?: ?(client reregistration|port active|GID table change|LID change|SM change|"
            r"P_Key change|port error|.*)",
            re.IGNORECASE,
        ),
        "event",
    ),
    (
        re.compile(r"Got completion|completion with error|Call to ibv_\w+ failed|ibv_\w+ failed", re.IGNORECASE),
        "runtime",
    ),
    (
        re.compile(
            r"Unable to open device|NET/OFI .*(?:initiali[sz]\w* (?:plugin )?failed|Failed to initiali[sz]e|"
            r"fi_getinfo\(\) call failed|Creating new endpoint .* failed)|Failed to initiali[sz]e any NET plugin|"
            r"Failed to initiali[sz]e NET plugin",
            re.IGNORECASE,
        ),
        "init",
    ),
    (
        re.compile(
            r"fail|error|unable|cannot|can't|timeout|timed out|abort|refused|reset by|closed by|"
            r"wrong type|mismatch|corrupt|invalid",
            re.IGNORECASE,
        ),
        "runtime",
    ),
)
# IB async events that are failures, not fabric noise (ibv_event_type names, lowercased text).
_BAD_EVENTS = ("port error", "catastrophic", "fatal", "path migration failed", "qp", "cq", "srq")

# What each ibv_wc_status number in "Got completion ... status=N" / "error N" means (verbs.h).
WC_STATUS = {
    1: "local length error",
    2: "local QP operation error",
    4: "local protection error",
    5: "work request flushed",
    9: "remote invalid request",
    10: "remote access error",
    11: "remote operation error",
    12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded",
}

# Causes of a TCP fallback, most telling first.
_CAUSE_ORDER = (
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "init",
    "libibverbs",
    "ibv_open",
    "efa_empty",
    "no_device",
)


@dataclass(frozen=True)
class Ref:
    """Where something was read: a file (or '-' for stdin) and a 1-based line number."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Finding:
    """One conclusion, with the log lines it rests on."""

    status: Status
    message: str
    refs: tuple[Ref, ...] = ()
    remedy: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status.value,
            "message": self.message,
            "lines": [r.line for r in self.refs],
            "refs": [str(r) for r in self.refs],
        }
        if self.remedy:
            out["remedy"] = self.remedy
        return out


def network_kind(name: str) -> str:
    """A NET plugin name as NCCL prints it -> ib, socket, ofi, or the name lowercased.

    ``IB``, ``IBext``, ``IBext_v8`` and the SHARP plugin are NCCL's IB verbs transport (over
    InfiniBand or RoCE); ``Libfabric``/``AWS Libfabric``/``OFI`` are aws-ofi-nccl; ``Socket``
    and Google's ``FastSocket`` are TCP.
    """
    low = name.strip().lower()
    if low.startswith("ib") or "sharp" in low:
        return "ib"
    if "libfabric" in low or low.startswith("ofi") or low.startswith("aws"):
        return "ofi"
    if low.endswith("socket"):
        return "socket"
    return low or "unknown"


@dataclass(frozen=True)
class NetTail:
    """The part of a channel line after ``via NET/``."""

    name: str
    device: int
    proxy: int | None
    gdr: bool

    @property
    def kind(self) -> str:
        return network_kind(self.name)


def parse_net_tail(tail: str) -> NetTail | None:
    """'IB/0(8)/GDRDMA' (after 'via NET/') -> NetTail; None for anything else."""
    tail = tail.strip()
    if len(tail) > MAX_TAIL:  # no transport name is this long; _TAIL backtracks over what it is given
        return None
    m = _TAIL.match("NET/" + tail)
    if not m:
        return None
    flags = m.group(4) or ""
    return NetTail(m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else None, "GDRDMA" in flags)


def _tail_class(tail: str) -> tuple[str, NetTail | None] | tuple[()]:
    """A channel line's text after 'via ' -> (class name, NetTail for network channels); () if unknown."""
    tail = tail.strip()
    if tail.startswith("NET/"):
        net = parse_net_tail(tail[4:])
        if net is None:
            return ()
        return (f"NET/{net.name}" + ("/GDRDMA" if net.gdr else ""), net)
    cls = intra_class(tail)
    return (cls, None) if cls else ()


def intra_class(tail: str) -> str | None:
    """'P2P/IPC/read' -> 'P2P/IPC'; 'SHM/direct/direct' -> 'SHM'; 'P2P/direct pointer' kept whole."""
    tail = tail.strip()
    if tail.startswith("SHM"):
        return "SHM"
    if tail.startswith("P2P/"):
        rest = tail[4:]
        if rest.startswith("direct pointer"):
            return "P2P/direct pointer"
        return "P2P/" + re.split(r"[/\s(\[]", rest, maxsplit=1)[0]
    return None


@dataclass(frozen=True)
class LogLine:
    """One NCCL line, its prefix taken apart."""

    host: str | None
    dev: int | None
    level: str  # INFO, WARN or VERSION
    message: str


GARBLED = LogLine(None, None, "GARBLED", "")
_TAIL_PREFIX = re.compile(r"(?<![^\s:|])([^\s:|]+):(\d+):(\d+) \[(-?\d+)\] $")


def _salvage(line: str, marker: re.Match[str]) -> LogLine:
    """A spliced line: the last writer's text runs intact to the newline; keep it for a known host."""
    m = _TAIL_PREFIX.search(line[: marker.start()])
    if not m:
        return GARBLED
    return LogLine(m.group(1), int(m.group(4)), "GARBLED", line[marker.end() :].strip())


def split_line(line: str) -> LogLine | None:
    """Take one raw log line apart; None when it is no NCCL line, GARBLED when ranks were spliced.

    Copes with srun ``--label`` (``12: ``), OpenMPI (``[1,7]<stdout>:``), Python logging,
    ``[timestamp]`` and ISO timestamps, CloudWatch (``  | ts | message``, or the message twice
    around `` | ``), and lines without the ``host:pid:tid`` part (``[3] NCCL INFO ...``).
    """
    markers = list(_MARKER.finditer(line))
    if not markers:
        m = _VERSION.search(line)
        if m and "NCCL" not in line[: m.start()]:
            return LogLine(None, None, "VERSION", line[m.start() :].strip())
        return None
    if len(markers) > 1:
        tail = line.rsplit(" | ", 1)[-1] if " | " in line else ""
        if len(_MARKER.findall(tail)) == 1 and _MARKER.search(line.rsplit(" | ", 1)[0]):
            return split_line(tail)  # CloudWatch shows the message twice: keep the clean copy
        return _salvage(line, markers[-1])
    marker = markers[0]
    # What a line's prefix says depends on nothing else, and a log repeats few prefixes
    # (host:pid:tid [dev]): take each apart once.
    raw_prefix = line[: marker.start()]
    known = _PREFIX_CACHE.get(raw_prefix)
    if known is None:
        known = _split_prefix(raw_prefix)
        if len(_PREFIX_CACHE) >= _SEEN_CAP:
            _PREFIX_CACHE.clear()
        _PREFIX_CACHE[raw_prefix] = known
    what, host, dev = known
    if what == "garbled":
        return GARBLED
    message = line[marker.end() :].strip()
    if what == "salvaged":
        return LogLine(host, dev, "GARBLED", message)
    return LogLine(host, dev, marker.group(1), message)


#: prefix -> ("ok" | "salvaged" | "garbled", host, dev), bounded like the scanner's caches.
_PREFIX_CACHE: dict[str, tuple[str, str | None, int | None]] = {}


def _split_prefix(raw_prefix: str) -> tuple[str, str | None, int | None]:
    """The text before a line's only `NCCL INFO|WARN` -> what split_line makes of it."""
    prefix = raw_prefix
    if " | " in prefix:
        prefix = prefix.rsplit(" | ", 1)[-1]
    prefix = _TIMESTAMP.sub(" ", prefix)
    host = dev = None
    m = _HOST.search(prefix)
    if m:
        if _SPLICED.search(prefix[: m.start()]) or "NCCL" in prefix:
            return _salvage_prefix(raw_prefix)
        host, dev = m.group(1), int(m.group(4))
    else:
        d = _DEV_ONLY.search(prefix[-_PREFIX_TAIL:])  # it ends the prefix: a bounded window stays linear
        if d:
            dev = int(d.group(1))
        if _SPLICED.search(prefix):
            return ("garbled", None, None)
    return ("ok", host, dev)


def _salvage_prefix(raw_prefix: str) -> tuple[str, str | None, int | None]:
    """_salvage for a line with one marker, from its prefix alone."""
    m = _TAIL_PREFIX.search(raw_prefix)
    if not m:
        return ("garbled", None, None)
    return ("salvaged", m.group(1), int(m.group(4)))


# -- accumulated state --------------------------------------------------------------------------


@dataclass
class _Host:
    name: str
    networks: dict[str, Ref] = field(default_factory=dict)  # "Using network X": X -> first line
    devices: dict[str, tuple[str, Ref]] = field(default_factory=dict)  # HCA -> (link layer, line)
    ib_line: Ref | None = None
    sockets: dict[str, Ref] = field(default_factory=dict)  # NET/Socket interfaces (transport)
    socket_lines_24: dict[str, Ref] = field(default_factory=dict)  # NET/Socket lines of NCCL <= 2.4
    other_nets: dict[str, Ref] = field(default_factory=dict)  # NET/<plugin> : Using
    oob: str | None = None
    bootstrap: str | None = None
    seen: int = 0
    first: Ref | None = None
    ofi_provider: tuple[str, Ref] | None = None
    ofi_nics: int | None = None
    ofi_plugin: tuple[str, Ref] | None = None
    ibext_plugin: Ref | None = None
    gdr_hca: dict[str, tuple[bool, Ref]] = field(default_factory=dict)
    causes: dict[str, tuple[str, Ref]] = field(default_factory=dict)
    env: dict[str, tuple[str, Ref]] = field(default_factory=dict)
    version: tuple[str, Ref] | None = None
    devs: set[int] = field(default_factory=set)
    ranks: set[tuple[int, int]] = field(default_factory=set)  # (rank, nranks) of Init COMPLETE lines
    nnodes: set[int] = field(default_factory=set)
    local_ranks: set[int] = field(default_factory=set)
    nvls_channels: int | None = None
    nvls: dict[str, Ref] = field(default_factory=dict)
    channels: dict[str, list[Any]] = field(default_factory=dict)  # class -> [count, first Ref]
    net_gdr: list[Any] = field(default_factory=lambda: [0, 0, None, None])  # gdr, nogdr, ref gdr, ref nogdr
    errors: int = 0
    events: int = 0
    error_nets: dict[str, Ref] = field(default_factory=dict)  # NET/<x> named by a transport error
    roce_gid: bool = False  # an IPv4-mapped GID (::ffff:a.b.c.d) in an error: RoCE v2


@dataclass
class _Job:
    hosts: dict[str, _Host] = field(default_factory=dict)
    net: dict[tuple[str, bool], list[Any]] = field(default_factory=dict)  # (name, gdr) -> [count, Ref]
    pxn: int = 0
    intra: dict[str, list[Any]] = field(default_factory=dict)  # class -> [count, Ref]
    errors: list[tuple[Ref, str, str | None]] = field(default_factory=list)  # (ref, text, host)
    error_count: int = 0
    init_failures: list[tuple[Ref, str, str | None]] = field(default_factory=list)
    events: list[tuple[Ref, str]] = field(default_factory=list)
    event_count: int = 0
    garbled: int = 0
    overlong: int = 0
    cut: int = 0  # lines cut at MAX_KEPT
    cut_ref: Ref | None = None
    nccl_lines: int = 0
    lines: int = 0
    sources: list[str] = field(default_factory=list)
    versions: dict[str, Ref] = field(default_factory=dict)
    foreign: dict[str, Ref] = field(default_factory=dict)
    has_bootstrap: bool = False
    garbled_refs: set[Ref] = field(default_factory=set)
    remote_peer: Ref | None = None  # a completion error from a peer on another address


@dataclass
class Partial:
    """Raw evidence from one stretch of one input, before interpretation; picklable and mergeable.

    Line numbers are relative to the stretch (its first line is 1); `lines` is how many lines
    it holds, so the stretches of a file can be scanned apart and put back together in order.
    """

    name: str
    lines: int = 0
    records: list[tuple[int, str]] = field(default_factory=list)  # the few lines worth parsing
    channels: dict[tuple[str | None, str, bool], list[Any]] = field(default_factory=dict)  # attributed
    net: dict[tuple[str, bool], list[int]] = field(default_factory=dict)  # (name, gdr) -> [count, line]
    intra: dict[str, list[int]] = field(default_factory=dict)  # class -> [count, line]
    tails: dict[str, NetTail] = field(default_factory=dict)
    pxn: int = 0
    foreign: dict[str, int] = field(default_factory=dict)
    overlong: int = 0
    cut: int = 0  # lines longer than MAX_KEPT, kept only up to it
    cut_line: int = 0  # the first of them (relative to the stretch)


class _Collector:
    """Scans blocks of one input for the line kinds that matter (see the module docstring)."""

    def __init__(self, name: str, *, exact_channels: int = EXACT_CHANNELS) -> None:
        self.out = Partial(name)
        self.exact_left = exact_channels  # channel lines still to attribute one by one
        self._seen: set[bytes] = set()
        self._prefixes: dict[bytes, str | None] = {}
        self._classes: dict[bytes, tuple[str, NetTail | None] | tuple[()]] = {}
        self._patterns: dict[bytes, re.Pattern[bytes]] = {}

    def feed_block(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        """Lines buf[:end] (whole lines); the first is line `first_line` of the stretch."""
        if buf.find(b"NCCL", 0, end) < 0:
            return
        if self.exact_left > 0:
            self._rare(buf, end, first_line, _RARE)
            self._foreign(buf, end, first_line)
            self._channels_exact(buf, end, first_line)
        else:
            self._rare(buf, end, first_line, _RARE_LEAN)
            self._channels_fast(buf, end, first_line)

    def _record(self, buf: bytes | bytearray, start: int, end: int, line: int) -> None:
        out = self.out
        if end - start > MAX_KEPT:  # keep the head of an overlong line, and say it was cut
            end = start + MAX_KEPT
            out.cut += 1
            out.cut_line = out.cut_line or line
        if len(out.records) < _RECORDS_CAP:
            out.records.append((line, buf[start:end].decode("utf-8", "replace")))

    def _rare(self, buf: bytes | bytearray, end: int, first_line: int, pattern: re.Pattern[bytes]) -> None:
        rfind, find, count = buf.rfind, buf.find, buf.count
        seen = self._seen
        line_no, last_line_start, last_stop = first_line, 0, -1
        for m in pattern.finditer(buf, 0, end):
            if m.start() <= last_stop:
                continue  # a second kind on the same (spliced) line: no rescan of a long line
            start = rfind(b"\n", 0, m.start()) + 1
            stop = find(b"\n", m.end(), end)
            if stop < 0:
                stop = end
            last_stop = stop
            raw = bytes(buf[start:stop])
            if b"0x" in raw:  # communicator pointers and ids differ; the rest repeats per communicator
                raw = _HEX.sub(b"", raw)
            if raw in seen:
                continue  # every rank prints the same lines, often for every communicator
            if len(seen) >= _SEEN_CAP:
                seen.clear()
            seen.add(raw)
            line_no += count(b"\n", last_line_start, start)
            last_line_start = start
            self._record(buf, start, stop, line_no)

    def _foreign(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        if buf.find(b"fi_getinfo", 0, end) < 0 and buf.find(b"libibverbs: Warning", 0, end) < 0:
            return
        for m in _FOREIGN.finditer(buf, 0, end):
            key = "efa_empty" if m.group(0).startswith(b"fi_getinfo") else "ibverbs_driver"
            if key not in self.out.foreign:
                self.out.foreign[key] = first_line + buf.count(b"\n", 0, m.start())

    def _classify(self, tail: bytes) -> tuple[str, NetTail | None] | tuple[()]:
        cls = self._classes.get(tail)
        if cls is None:
            cls = _tail_class(tail.decode("utf-8", "replace"))
            if len(self._classes) > _SEEN_CAP:
                self._classes.clear()
            self._classes[tail] = cls
        return cls

    def _channels_exact(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        if buf.find(b" via ", 0, end) < 0:
            return
        rfind, find, count = buf.rfind, buf.find, buf.count
        prefixes = self._prefixes
        line_no, last_line_start, done = first_line, 0, 0
        start, stop = 0, -1
        for m in _CHANNEL.finditer(buf, 0, end):
            if m.start() > stop:  # a new line (several matches on one spliced line reuse its bounds)
                start = rfind(b"\n", 0, m.start()) + 1
                stop = find(b"\n", m.end(), end)
                if stop < 0:
                    stop = end
            line_no += count(b"\n", last_line_start, start)
            last_line_start = start
            done += 1
            # the prefix (host:pid:tid [dev] ) and the tail repeat: take each distinct one apart once
            prefix = bytes(buf[start : m.start()])
            host = prefixes.get(prefix, _UNSET)
            if host is _UNSET:
                parsed = split_line(buf[start : min(stop, start + MAX_KEPT)].decode("utf-8", "replace"))
                if parsed is None or parsed.level == "GARBLED":
                    self._record(buf, start, stop, line_no)  # the judge counts (and salvages) it
                    continue
                host = parsed.host
                if len(prefixes) > _SEEN_CAP:
                    prefixes.clear()
                prefixes[prefix] = host
            cls = self._classify(bytes(buf[m.end() : stop]))  # the text after " via "
            if cls:
                self._count(host, cls, line_no, True)
        self.exact_left -= done

    def _count(self, host: str | None, cls: tuple[str, NetTail | None], line: int, job_counts: bool) -> None:
        out = self.out
        name, net = cls
        key = (host, name, job_counts)
        entry = out.channels.get(key)
        if entry is None:
            out.channels[key] = [1, line]
            if net is not None:
                out.tails[name] = net
        else:
            entry[0] += 1

    def _channels_fast(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        # Network channels: counted by their whole tail (name, device, GPUDirect RDMA).
        out = self.out
        attribute: list[bytes] = []
        counts = Counter(_VIA.findall(buf, 0, end))
        shm = counts.pop(b"", 0)
        for raw_tail, n in counts.items():
            cls = self._classify(b"NET/" + raw_tail)
            if not cls or cls[1] is None:
                continue
            tail = cls[1]
            key = (tail.name, tail.gdr)
            entry = out.net.get(key)
            if entry is None:
                pos = buf.find(b"via NET/" + raw_tail, 0, end)
                entry = out.net[key] = [0, first_line + buf.count(b"\n", 0, pos)]
                out.tails[cls[0]] = tail
            entry[0] += n
            if tail.proxy is not None:
                out.pxn += n
            if not tail.gdr:
                attribute.append(raw_tail)
        if attribute:  # network channels without GPUDirect RDMA: which hosts, exactly
            # whole tails only: "IB/0" must not match the start of "IB/0/GDRDMA"
            alternatives = b"|".join(map(re.escape, attribute))
            self._attribute(buf, end, first_line, rb"via NET/(?:" + alternatives + rb")(?=\n)")
        # Intra-node channels are the bulk of a log and say the same thing for every communicator:
        # past the exact start only shared memory (no P2P between local GPUs) is looked for.
        if shm:
            self._attribute(buf, end, first_line, rb"via SHM", job_counts=True)

    def _attribute(
        self, buf: bytes | bytearray, end: int, first_line: int, pattern: bytes, *, job_counts: bool = False
    ) -> None:
        """Attribute the channel lines matching `pattern` to their hosts."""
        compiled = self._patterns.get(pattern)
        if compiled is None:
            if len(self._patterns) > 64:
                self._patterns.clear()
            compiled = self._patterns[pattern] = re.compile(pattern)
        rfind, find, count = buf.rfind, buf.find, buf.count
        prefixes = self._prefixes
        line_no, last_line_start = first_line, 0
        start, stop = 0, -1
        for m in compiled.finditer(buf, 0, end):
            if m.start() > stop:  # a new line (several matches on one spliced line reuse its bounds)
                start = rfind(b"\n", 0, m.start()) + 1
                stop = find(b"\n", m.end(), end)
                if stop < 0:
                    stop = end
            line_no += count(b"\n", last_line_start, start)
            last_line_start = start
            marker = find(b"NCCL INFO ", start, m.start())
            if marker < 0:
                continue
            prefix = bytes(buf[start:marker])
            host = prefixes.get(prefix, _UNSET)
            if host is _UNSET:
                parsed = split_line(buf[start : min(stop, start + MAX_KEPT)].decode("utf-8", "replace"))
                if parsed is None or parsed.level == "GARBLED":
                    continue
                host = prefixes[prefix] = parsed.host
            via = find(b" via ", marker, stop)
            cls = self._classify(bytes(buf[via + 5 : stop])) if via >= 0 else ()
            if cls:
                self._count(host, cls, line_no, job_counts)


_UNSET: Any = object()
_HEX = re.compile(rb"0x[0-9a-fA-F]+")


def _scan_stream(stream: IO[bytes], name: str, limit: int | None = None, exact: int = EXACT_CHANNELS) -> Partial:
    """Scan a stream (up to `limit` bytes) into a Partial."""
    collector = _Collector(name, exact_channels=exact)
    out = collector.out
    line = 1
    for buf, end, n in _blocks(stream, out, limit):
        collector.feed_block(buf, end, line)
        line += n
    out.lines = line - 1
    return out


def _scan_range(task: tuple[str, int, int, bool]) -> Partial:
    """Worker: the lines that start in [start, end) of a file (a line crossing `end` is read whole)."""
    path, start, end, first = task
    with open(path, "rb", buffering=0) as stream:
        begin = 0 if start == 0 else _next_line_start(stream, start)
        stop = _next_line_start(stream, end)
        stream.seek(begin)
        return _scan_stream(stream, path, max(0, stop - begin), EXACT_CHANNELS if first else 0)


def _next_line_start(stream: IO[bytes], pos: int) -> int:
    """The offset of the first line that starts at or after `pos` (the file's size at the end)."""
    stream.seek(pos - 1)
    while True:
        data = stream.read(1 << 16)
        if not data:
            return stream.tell()
        nl = data.find(b"\n")
        if nl >= 0:
            return stream.tell() - len(data) + nl + 1


def _blocks(stream: IO[bytes], out: Partial, limit: int | None = None) -> Iterator[tuple[bytearray, int, int]]:
    """(buffer, end, lines): buffer[:end] holds whole lines, `lines` of them.

    One buffer is reused (read into, never copied whole): the part of a line cut by a block
    boundary moves to its front. A line longer than MAX_LINE is counted, skipped, and still
    numbered as one line.
    """
    buf = bytearray(BLOCK)
    keep = 0  # bytes of an unfinished line at the front of buf
    skipping = False
    left = limit
    readinto = getattr(stream, "readinto", None)
    while True:
        size = BLOCK if left is None else min(BLOCK, left)
        if size <= 0:
            break
        if len(buf) < keep + size:
            buf.extend(bytes(keep + size - len(buf)))
        if readinto is not None:
            with memoryview(buf) as view:
                got = readinto(view[keep : keep + size]) or 0
        else:
            data = stream.read(size)
            got = len(data)
            buf[keep : keep + got] = data
        if not got:
            break
        if left is not None:
            left -= got
        filled = keep + got
        if skipping:
            nl = buf.find(b"\n", keep, filled)
            if nl < 0:
                continue
            del buf[: nl + 1]
            filled -= nl + 1
            skipping = False
            yield bytearray(b"\n"), 1, 1  # the skipped line still counts as a line
        cut = buf.rfind(b"\n", 0, filled) + 1
        if cut == 0:
            if filled > MAX_LINE:
                out.overlong += 1
                keep, skipping = 0, True
                del buf[BLOCK:]
            else:
                keep = filled
            continue
        yield buf, cut, buf.count(b"\n", 0, cut)
        keep = filled - cut
        if keep:
            buf[:keep] = buf[cut:filled]
    if skipping:
        yield bytearray(b"\n"), 1, 1
    elif keep:
        buf[keep : keep + 1] = b"\n"
        yield buf, keep + 1, 1


class Scanner:
    """What NCCL logs say, accumulated over inputs; then `report()` judges it."""

    def __init__(self) -> None:
        self.job = _Job()
        self._count_job_channels = True

    def host(self, name: str | None) -> _Host:
        key = name if name else "unknown"
        h = self.job.hosts.get(key)
        if h is None:
            if len(self.job.hosts) >= MAX_HOSTS:
                key = "(more hosts)"
                h = self.job.hosts.get(key)
                if h is not None:
                    return h
            h = self.job.hosts[key] = _Host(key)
        return h

    # -- input ---------------------------------------------------------------------------------
    def feed_stream(self, stream: IO[bytes], name: str) -> None:
        """Scan a whole binary stream (a file or stdin)."""
        self.job.sources.append(name)
        self.add(_scan_stream(stream, name))

    def feed_path(self, path: str, *, jobs: int = 1) -> None:
        """Scan a file; a large one in stretches on up to `jobs` processes."""
        size = Path(path).stat().st_size
        if jobs <= 1 or size < PARALLEL_MIN or not _fork_available():
            with open(path, "rb", buffering=0) as stream:
                self.feed_stream(stream, path)
            return
        import multiprocessing

        self.job.sources.append(path)
        pieces = max(jobs * 4, size // (64 << 20))
        step = -(-size // pieces)
        tasks = [(path, start, min(size, start + step), start == 0) for start in range(0, size, step)]
        offset = 0
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for part in pool.imap(_scan_range, tasks):
                self.add(part, offset)
                offset += part.lines

    def add(self, part: Partial, offset: int = 0) -> None:
        """Merge the evidence of one stretch whose first line is line `offset + 1` of its input."""
        job, name = self.job, part.name
        job.lines = max(job.lines, offset + part.lines)
        job.overlong += part.overlong
        if part.cut:
            job.cut += part.cut
            job.cut_ref = job.cut_ref or Ref(name, offset + part.cut_line)
        for line, raw in part.records:
            self.parse(raw, Ref(name, offset + line))
        for (host, cls_name, job_counts), (n, line) in part.channels.items():
            self._count_channel(host, (cls_name, part.tails.get(cls_name)), Ref(name, offset + line), n, job_counts)
        for key, (n, line) in part.net.items():
            entry = job.net.get(key)
            if entry is None:
                job.net[key] = [n, Ref(name, offset + line)]
            else:
                entry[0] += n
        job.pxn += part.pxn
        for cls_name, (n, line) in part.intra.items():
            entry = job.intra.get(cls_name)
            if entry is None:
                job.intra[cls_name] = [n, Ref(name, offset + line)]
            else:
                entry[0] += n
        for what, line in part.foreign.items():
            job.foreign.setdefault(what, Ref(name, offset + line))

    def feed_lines(self, lines: Iterable[tuple[int, str]], name: str, *, count_channels: bool = True) -> None:
        """Lines already picked out (e.g. by grep on a node), with their line numbers.

        With `count_channels=False` channel lines are attributed to their hosts but not counted
        job-wide (the counts come from `add_channel_totals`).
        """
        if name not in self.job.sources:
            self.job.sources.append(name)
        self._count_job_channels = count_channels
        try:
            for number, text in lines:
                self.job.lines = max(self.job.lines, number)
                if len(text) > MAX_KEPT:  # keep the head of an overlong line, and say it was cut
                    text = text[:MAX_KEPT]
                    self.job.cut += 1
                    self.job.cut_ref = self.job.cut_ref or Ref(name, number)
                self.parse(text, Ref(name, number))
        finally:
            self._count_job_channels = True

    def add_channel_totals(self, *, net: int, gdr: int, p2p: int = 0, shm: int = 0) -> None:
        """Job-wide channel line counts (``grep -c`` on a node); names and first lines come from the
        channel lines attributed with `feed_lines(..., count_channels=False)`."""
        job = self.job
        seen: dict[tuple[str, bool], Ref] = {}
        intra: dict[str, list[Any]] = {}
        for h in job.hosts.values():
            for cls, (n, ref) in h.channels.items():
                if cls.startswith("NET/"):
                    key = (cls[4:].removesuffix("/GDRDMA"), cls.endswith("/GDRDMA"))
                    if key not in seen or ref.line < seen[key].line:
                        seen[key] = ref
                else:
                    entry = intra.setdefault(cls, [0, ref])
                    entry[0] += n
        for with_gdr, total in ((True, gdr), (False, max(0, net - gdr))):
            names = [k for k in seen if k[1] is with_gdr]
            if total and names:
                job.net[names[0]] = [total, seen[names[0]]]
            elif total:
                job.net[("?", with_gdr)] = [total, None]
        p2p_classes = {c: v for c, v in intra.items() if c.startswith("P2P/")}
        if p2p:
            top = max(p2p_classes.items(), key=lambda kv: kv[1][0]) if p2p_classes else ("P2P", [0, None])
            job.intra[top[0]] = [p2p, top[1][1]]
            for cls, (n, ref) in p2p_classes.items():
                if cls != top[0]:
                    job.intra[cls] = [n, ref]
        if shm:
            job.intra["SHM"] = [shm, intra.get("SHM", [0, None])[1]]

    def add_channel_counts(self, counts: dict[str, int], ref: Ref | None = None) -> None:
        """Job-wide channel counts gathered elsewhere (grep -c on a node): 'NET/IB/0/GDRDMA' or 'SHM' -> lines."""
        for cls, n in counts.items():
            if n <= 0:
                continue
            if cls.startswith("NET/"):
                tail = parse_net_tail(cls[4:])
                if tail is not None:
                    entry = self.job.net.setdefault((tail.name, tail.gdr), [0, ref])
                    entry[0] += n
            else:
                entry = self.job.intra.setdefault(cls, [0, ref])
                entry[0] += n

    # -- one line --------------------------------------------------------------------------------
    def parse(self, raw: str, ref: Ref) -> None:
        """Parse one raw line (any kind) into the job's state."""
        line = split_line(raw.rstrip("\r\n"))
        if line is None:
            if "fi_getinfo: provider" in raw and "output empty list" in raw:
                self.job.foreign.setdefault("efa_empty", ref)
            elif "libibverbs: Warning: no userspace device-specific driver" in raw:
                self.job.foreign.setdefault("ibverbs_driver", ref)
            return
        job = self.job
        if line.level == "GARBLED":
            if ref not in job.garbled_refs:
                job.garbled += 1
                if len(job.garbled_refs) < _SEEN_CAP:
                    job.garbled_refs.add(ref)
            known = [n for n in job.hosts if line.host and line.host.endswith(n) and n != "unknown"]
            if not known:
                return
            line = LogLine(max(known, key=len), line.dev, "INFO", line.message)
        job.nccl_lines += 1
        if line.level == "VERSION":
            m = _VERSION.search(line.message)
            if m:
                job.versions.setdefault(m.group(1), ref)
            return
        if line.level == "INFO" and _CHANNEL_LINE.match(line.message):
            self._channel(line, ref)
            return
        h = self.host(line.host)
        h.seen += 1
        h.first = h.first or ref
        if line.dev is not None and len(h.devs) < 1024:
            h.devs.add(line.dev)
        if line.level == "WARN":
            self._warn(h, line.message, ref)
        else:
            self._info(h, line.message, ref)

    def _channel(self, line: LogLine, ref: Ref) -> None:
        m = _CHANNEL_LINE.match(line.message)
        cls = _tail_class(m.group(1)) if m else ()
        if cls:
            self._count_channel(line.host, cls, ref, 1, self._count_job_channels)

    def _count_channel(
        self, host: str | None, cls: tuple[str, NetTail | None], ref: Ref, n: int, job_counts: bool
    ) -> None:
        name, net = cls
        job = self.job
        h = self.host(host)
        h.seen += n
        h.first = h.first or ref
        if net is not None:
            if job_counts:
                entry = job.net.get((net.name, net.gdr))
                if entry is None:
                    job.net[(net.name, net.gdr)] = [n, ref]
                else:
                    entry[0] += n
                if net.proxy is not None:
                    job.pxn += n
            g = h.net_gdr
            g[0 if net.gdr else 1] += n
            if net.gdr:
                g[2] = g[2] or ref
            else:
                g[3] = g[3] or ref
        elif job_counts:
            entry = job.intra.get(name)
            if entry is None:
                job.intra[name] = [n, ref]
            else:
                entry[0] += n
        hc = h.channels.get(name)
        if hc is None:
            h.channels[name] = [n, ref]
        else:
            hc[0] += n

    def _info(self, h: _Host, msg: str, ref: Ref) -> None:
        job = self.job
        if msg.startswith("Using network "):
            net = msg[len("Using network ") :].strip()
            h.networks.setdefault(net, ref)
        elif msg.startswith(("NET/", "Net/IB")):
            self._net_line(h, msg, ref)
        elif msg.startswith("NCCL version "):
            m = _VERSION.match(msg)
            if m:
                job.versions.setdefault(m.group(1), ref)
                if h.version is None:
                    h.version = (m.group(1), ref)
        elif msg.startswith("NCCL_"):
            m = _ENV_SET.match(msg)
            if m:
                h.env.setdefault(m.group(1), (m.group(2).strip(), ref))
        elif msg.startswith("comm "):
            m = _COMM_SIZES.match(msg)
            if m:
                h.nnodes.add(int(m.group(3)))
                h.local_ranks.add(int(m.group(4)))
                if len(h.ranks) < 4096:
                    h.ranks.add((int(m.group(1)), int(m.group(2))))
                return
            m = _COMM_COMPLETE.match(msg)
            if m and len(h.ranks) < 4096:
                h.ranks.add((int(m.group(1)), int(m.group(2))))
        elif msg.startswith("Bootstrap"):
            job.has_bootstrap = True
            m = _BOOTSTRAP.match(msg)
            if m and h.bootstrap is None:
                h.bootstrap = m.group(1)
        elif msg.startswith(("ncclCommInit", "[Rank ")):
            m = _COMM_INIT.search(msg)
            if m and len(h.ranks) < 4096:
                h.ranks.add((int(m.group(1)), int(m.group(2))))
        elif msg.startswith("rank "):
            m = _RANK_NRANKS.match(msg)
            if m and len(h.ranks) < 4096:
                h.ranks.add((int(m.group(1)), int(m.group(2))))
        elif msg[:1].isdigit():
            m = _NVLS_CHANNELS.search(msg)
            if m:
                n = int(m.group(1))
                h.nvls_channels = n if h.nvls_channels is None else max(h.nvls_channels, n)
                if n:
                    h.nvls.setdefault("used", ref)
        elif msg.startswith("NVLS multicast support is "):
            h.nvls.setdefault("not available" if " not " in msg[:30] else "available", ref)
        elif msg.startswith("Connected NVLS"):
            h.nvls.setdefault("used", ref)
        elif msg.startswith(("Count not open libibverbs", "Could not open libibverbs")):
            h.causes.setdefault("libibverbs", (msg, ref))
        elif msg.startswith("P2P plugin IBext"):
            h.ibext_plugin = h.ibext_plugin or ref
        elif msg.startswith("Failed to init") and "net plugin" in msg.lower():
            h.causes.setdefault("init", (msg, ref))

    def _net_line(self, h: _Host, msg: str, ref: Ref) -> None:
        m = _NET_PLUGIN_LINE.match(msg)
        if not m:
            if msg.startswith("NET : Using interface"):  # NCCL 2.3: the socket interfaces
                iface = msg.split("interface", 1)[1].strip().split(":", 1)[0]
                h.sockets.setdefault(iface, ref)
            elif msg.startswith("Net/IB") and "returned 0 devices" in msg:
                h.causes.setdefault("no_device", (msg, ref))
            elif msg.startswith("NET/OFI "):
                self._ofi_line(h, msg, ref)
            return
        plugin, rest = m.group(1), m.group(2).strip()
        if plugin == "OFI":
            self._ofi_line(h, msg, ref)
            return
        g = _GDR_HCA.match(rest)
        if g:
            h.gdr_hca[g.group(3)] = (g.group(1) == "Enabled", ref)
            return
        if plugin == "IB":
            if rest.startswith("No device found"):
                h.causes.setdefault("no_device", (msg, ref))
            elif rest.startswith("Unable to open device"):
                h.causes.setdefault("ibv_open", (msg, ref))
            elif rest.startswith("Using") and "[" in rest:
                for dev in _DEVICE.finditer(rest):
                    link = dev.group(4)
                    name = f"{dev.group(2)}:{dev.group(3)}"
                    h.devices.setdefault(name, (link + (dev.group(5) or ""), ref))
                h.ib_line = h.ib_line or ref
                oob = _OOB.search(rest)
                if oob:
                    h.oob = oob.group(1)
            return
        if plugin == "Socket":
            if rest.startswith("Using") and "[" in rest:
                for found in _IFACE.finditer(rest):
                    h.socket_lines_24.setdefault(found.group(2), ref)
            return
        if plugin == "Plugin":
            return
        if rest.startswith("Using"):  # another plugin's device line, e.g. NET/FastSocket
            h.other_nets.setdefault(plugin, ref)

    def _ofi_line(self, h: _Host, msg: str, ref: Ref) -> None:
        m = _OFI_PROVIDER.match(msg)
        if m:
            if h.ofi_provider is None:
                h.ofi_provider = (m.group(1), ref)
                nics = _OFI_NICS.search(msg)
                if nics:
                    h.ofi_nics = int(nics.group(1))
            return
        m = _OFI_PLUGIN.match(msg)
        if m:
            if h.ofi_plugin is None:
                h.ofi_plugin = (m.group(1), ref)
            return
        if "disabling GDR" in msg or "GDR not supported" in msg:
            h.causes.setdefault("ofi_nogdr", (msg, ref))

    def _warn(self, h: _Host, msg: str, ref: Ref) -> None:
        job = self.job
        kind = "benign"
        for pattern, k in _WARN_KINDS:  # on a message of at most MAX_KEPT characters
            if pattern.search(msg):
                kind = k
                break
        if kind == "event":
            m = re.search(r"Got async event ?: ?(.*)$", msg)
            event = (m.group(1) if m else msg).strip().lower()
            if any(bad in event for bad in _BAD_EVENTS):
                kind = "runtime"
            else:
                job.event_count += 1
                h.events += 1
                if len(job.events) < MAX_ERRORS:
                    job.events.append((ref, msg))
                return
        if kind == "cause":
            h.causes.setdefault("libibverbs", (msg, ref))
            return
        if kind == "init":
            if "Unable to open device" in msg:
                h.causes.setdefault("ibv_open", (msg, ref))
            else:
                h.causes.setdefault("init", (msg, ref))
            if len(job.init_failures) < MAX_ERRORS:
                job.init_failures.append((ref, msg, h.name))
            return
        if kind == "runtime":
            if "ibv_open_device" in msg:
                h.causes.setdefault("ibv_open", (msg, ref))
                if len(job.init_failures) < MAX_ERRORS:
                    job.init_failures.append((ref, msg, h.name))
                return
            job.error_count += 1
            h.errors += 1
            if len(job.errors) < MAX_ERRORS:
                job.errors.append((ref, msg, h.name))
            net = re.match(r"NET/(\w+)\s*:", msg)
            if net:
                h.error_nets.setdefault(net.group(1), ref)
            gid = re.search(r"localGid (\S+)", msg)
            if gid and gid.group(1).startswith("::ffff:"):
                h.roce_gid = True  # IPv4-mapped GID: RoCE v2
            peer = re.search(r"from peer (\d+\.\d+\.\d+\.\d+)<", msg)
            if peer and gid and gid.group(1).startswith("::ffff:") and gid.group(1)[7:] != peer.group(1):
                job.remote_peer = job.remote_peer or ref

    # -- the verdict -------------------------------------------------------------------------------
    def report(self, *, expect: str | None = None, expect_gdr: bool = False) -> LogReport:
        return _judge(self.job, expect=expect, expect_gdr=expect_gdr)


# -- judging ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogReport:
    """What the logs show, and the verdict. `to_json()` is the documented, stable shape."""

    nccl_version: str | None
    network: str | None
    link_layer: str | None
    gpudirect_rdma: bool | None
    net_channels: int
    single_node: bool | None
    errors: tuple[tuple[Ref, str], ...]
    error_count: int
    hosts: dict[str, dict[str, Any]]
    status: Status
    findings: tuple[Finding, ...]
    intra_node: dict[str, int]
    net_plugins: tuple[str, ...]
    sources: tuple[str, ...]
    lines: int
    nccl_lines: int
    garbled_lines: int
    skipped_long_lines: int
    cut_lines: int = 0  # lines longer than MAX_KEPT, read only up to it
    first_cut: Ref | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "nccl_version": self.nccl_version,
            "network": self.network,
            "link_layer": self.link_layer,
            "gpudirect_rdma": self.gpudirect_rdma,
            "net_channels": self.net_channels,
            "errors": [{"line": r.line, "file": r.file, "text": t} for r, t in self.errors],
            "hosts": self.hosts,
            "status": self.status.value,
            "findings": [f.to_json() for f in self.findings],
            "single_node": self.single_node,
            "intra_node": self.intra_node,
            "net_plugins": list(self.net_plugins),
            "error_count": self.error_count,
            "files": list(self.sources),
            "garbled_lines": self.garbled_lines,
            "skipped_long_lines": self.skipped_long_lines,
            "cut_lines": self.cut_lines,
        }


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+", 1)[0])[:3])


def _host_network(h: _Host, bootstrap_24: bool) -> tuple[str | None, str | None, Ref | None]:
    """(kind, NCCL's own name, line) of the network a host selected for inter-node traffic."""
    if h.networks:
        # several communicators may have chosen differently; a socket choice is the one to report
        ordered = sorted(h.networks.items(), key=lambda kv: (network_kind(kv[0]) != "socket", kv[1].line))
        name, ref = ordered[0]
        return network_kind(name), name, ref
    if h.devices and h.ib_line:
        return "ib", "IB", h.ib_line
    if h.ofi_provider:
        return "ofi", f"OFI ({h.ofi_provider[0]})", h.ofi_provider[1]
    if h.other_nets:
        name, ref = next(iter(h.other_nets.items()))
        return network_kind(name), name, ref
    if h.socket_lines_24 and not bootstrap_24:
        ref = next(iter(h.socket_lines_24.values()))
        return "socket", "Socket", ref
    if h.sockets:
        return "socket", "Socket", next(iter(h.sockets.values()))
    if h.error_nets:  # only a transport error names the network (an excerpt of a failure)
        name, ref = next(iter(h.error_nets.items()))
        return network_kind(name), name, ref
    return None, None, None


def _link_layer(links: set[str]) -> str | None:
    kinds = {"infiniband" if link.upper().startswith("IB") else "roce" for link in links if link}
    kinds.discard("")
    links_known = {k for k in kinds if k in ("infiniband", "roce")}
    if not links_known:
        return None
    return links_known.pop() if len(links_known) == 1 else "mixed"


def _judge(job: _Job, *, expect: str | None, expect_gdr: bool) -> LogReport:
    findings: list[Finding] = []
    hosts = {
        k: h
        for k, h in job.hosts.items()
        # a paste that lost the first characters of line 1 ('pgds-aihub0007' for 'tpgds-aihub0007')
        if not (h.seen <= 1 and h.first and h.first.line == 1 and any(o != k and o.endswith(k) for o in job.hosts))
    }
    # NCCL version: from any line; NCCL <= 2.4 prints its bootstrap interface as NET/Socket.
    version = None
    if job.versions:
        version = min(job.versions, key=_version_key)
        if len(job.versions) > 1:
            refs = tuple(job.versions[v] for v in sorted(job.versions, key=_version_key))
            findings.append(
                Finding(
                    Status.WARN,
                    "different NCCL versions in one job: " + ", ".join(sorted(job.versions, key=_version_key)),
                    refs[:4],
                    "Use one container image / NCCL build for every rank.",
                )
            )
    for h in hosts.values():
        if h.version is None and version is not None and len(job.versions) == 1:
            h.version = (version, job.versions[version])
    old = version is not None and _version_key(version) < (2, 5)
    any_bootstrap_24 = old or (
        version is None
        and not job.has_bootstrap
        and any(h.socket_lines_24 for h in hosts.values())
        and (any(h.devices or h.ofi_provider for h in hosts.values()) or any(not g[1] for g in job.net))
    )

    # Per-host network selection.
    per_host: dict[str, tuple[str | None, str | None, Ref | None]] = {}
    for name, h in hosts.items():
        bootstrap_24 = any_bootstrap_24 and not h.networks
        per_host[name] = _host_network(h, bootstrap_24)
        transport = (not bootstrap_24 and not h.networks and not h.sockets) or (
            h.networks and any(network_kind(n) == "socket" for n in h.networks)
        )
        if h.socket_lines_24 and transport:
            h.sockets.update(h.socket_lines_24)

    # Channels: trusted over the init lines.
    net_channels = sum(c for c, _ in job.net.values())
    by_kind: Counter[str] = Counter()
    for (name, _gdr), (n, _ref) in job.net.items():
        by_kind[network_kind(name)] += n
    chosen = [k for k, _, _ in per_host.values() if k]
    network: str | None = None
    if by_kind:
        network = by_kind.most_common(1)[0][0]
        if "socket" in by_kind:
            network = "socket" if by_kind["socket"] >= by_kind[network] else network
    elif chosen:
        kinds = Counter(chosen)
        network = "socket" if kinds.get("socket", 0) == len(chosen) else kinds.most_common(1)[0][0]
        if "socket" in kinds and network != "socket":
            pass  # a host-level fallback: reported below per host
    gdr_yes = sum(c for (_, gdr), (c, _) in job.net.items() if gdr)
    gdr_no = net_channels - gdr_yes
    gpudirect_rdma = None if net_channels == 0 else gdr_no == 0

    links: set[str] = set()
    for h in hosts.values():
        links |= {link.split("/", 1)[0] for link, _ in h.devices.values()}
        if h.roce_gid and not h.devices:
            links.add("RoCE")
    link_layer = _link_layer(links) if network in ("ib", None) else None
    if network is None and not links:
        link_layer = None

    # Single node or not, as NCCL saw it.
    nnodes = set().union(*(h.nnodes for h in hosts.values())) if hosts else set()
    named = [n for n in hosts if n not in ("unknown", "(more hosts)")]
    single_node: bool | None
    if (nnodes and max(nnodes) > 1) or net_channels > 0 or len(named) > 1 or job.remote_peer:
        single_node = False
    elif nnodes:
        single_node = True
    else:
        single_node = None
        if len(named) == 1:
            ranks = hosts[named[0]].ranks
            sizes = {n for _, n in ranks}
            if len(sizes) == 1:
                size = sizes.pop()
                if {r for r, _ in ranks} >= set(range(size)):
                    single_node = True  # every rank of the communicator printed from this host
    inter_node = single_node is False

    # -- per-host view -----------------------------------------------------------------------------
    host_json: dict[str, dict[str, Any]] = {}
    for name, h in hosts.items():
        kind, net_name, net_ref = per_host[name]
        g_yes, g_no = h.net_gdr[0], h.net_gdr[1]
        if g_yes or g_no:
            host_gdr: bool | None = g_no == 0
        elif gpudirect_rdma is not None and kind not in (None, "socket") and inter_node and h.networks:
            host_gdr = gpudirect_rdma if gdr_no == 0 else None
        else:
            host_gdr = None
        devices = [f"{d}/{link}" for d, (link, _) in h.devices.items()]
        if not devices and h.ofi_provider and kind == "ofi":
            devices = [f"{h.ofi_provider[0]}" + (f" ({h.ofi_nics} NICs)" if h.ofi_nics else "")]
        chan_nets = [c[4:].removesuffix("/GDRDMA") for c in h.channels if c.startswith("NET/")]
        if chan_nets and (net_name is None or kind != "socket"):
            net_name = chan_nets[0]
            kind = kind or network_kind(net_name)
        host_json[name] = {
            "network": kind,
            "net_plugin": net_name,
            "reason": None,
            "devices": devices,
            "interfaces": sorted(h.sockets) if kind == "socket" else [],
            "oob": h.oob,
            "link_layer": _link_layer({link.split("/", 1)[0] for link, _ in h.devices.values()}),
            "gpudirect_rdma": host_gdr,
            "gdr_hcas": {hca: enabled for hca, (enabled, _) in h.gdr_hca.items()},
            "intra_node": sorted(c for c in h.channels if not c.startswith("NET/")),
            "nvls_channels": h.nvls_channels,
            "nccl_version": h.version[0] if h.version else None,
            "cuda_devices": sorted(h.devs),
            "errors": h.errors,
            "line": net_ref.line if net_ref else None,
        }

    # -- findings --------------------------------------------------------------------------------
    expected_net = None if expect in (None, "") else ("ib" if expect == "roce" else expect)
    runtime_errors = [(r, t) for r, t, _ in job.errors]
    if job.error_count:
        first = job.errors[0]
        more = ""
        findings.append(
            Finding(
                Status.FAIL,
                f"NCCL reported {job.error_count} transport error{'s' if job.error_count > 1 else ''}: "
                f"{_explain_warn(first[1])}{more}",
                tuple(r for r, _, _ in job.errors[:5]),
                _error_remedy(first[1]),
            )
        )
    if job.event_count:
        first_event = job.events[0]
        findings.append(
            Finding(
                Status.WARN,
                f"InfiniBand async events ({job.event_count}): {first_event[1]} - the subnet manager or a port "
                "changed state during the job (fabric instability, not a NCCL failure by itself)",
                tuple(r for r, _ in job.events[:5]),
                "Check the subnet manager log and the port counters of the hosts' HCAs (ibdiagnet, perfquery).",
            )
        )

    socket_hosts = [n for n, (k, _, _) in per_host.items() if k == "socket"]
    rdma_hosts = [n for n, (k, _, _) in per_host.items() if k in ("ib", "ofi")]
    init_failed = [(r, t) for r, t, hn in job.init_failures]

    if network is None:
        if single_node is True:
            findings.append(Finding(Status.OK, _single_note(job, hosts), _first_intra_refs(job)))
        else:
            findings.append(
                Finding(
                    Status.WARN,
                    "insufficient evidence: the log shows no network selection ('Using network', NET/... device "
                    "lines) and no network channel lines",
                    (),
                    "Run with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS including INIT and NET) and keep the whole log.",
                )
            )
            if init_failed:
                findings.append(_init_failure_finding(init_failed, Status.WARN))
    elif network == "socket" or socket_hosts:
        findings.extend(
            _socket_findings(
                job,
                hosts,
                per_host,
                network,
                socket_hosts,
                rdma_hosts,
                single_node,
                expected_net,
                init_failed,
                host_json,
            )
        )
    else:
        if init_failed:
            # e.g. aws-ofi-nccl failed but NCCL went on with its own IB: worth knowing, not a fallback
            findings.append(_init_failure_finding(init_failed, Status.WARN, recovered=network))
        net_ref = next((ref for k, _, ref in per_host.values() if k == network and ref), None)
        chan_ref = min((ref for (nm, _), (_, ref) in job.net.items() if ref), key=lambda r: r.line, default=None)
        what = _describe_network(network, link_layer, job, hosts)
        if inter_node:
            findings.append(Finding(Status.OK, f"inter-node traffic over {what}", _refs(net_ref, chan_ref)))
        elif single_node is True and net_channels == 0:
            findings.append(
                Finding(
                    Status.OK,
                    _single_note(job, hosts) + f" ({what} was set up)",
                    _refs(net_ref),
                )
            )
        else:
            findings.append(
                Finding(
                    Status.OK,
                    f"network {what} selected; the log does not show whether traffic crossed nodes",
                    _refs(net_ref),
                )
            )

    # GPUDirect RDMA.
    if net_channels and network not in ("socket",):
        no_gdr = [(ref, nm) for (nm, gdr), (_, ref) in job.net.items() if not gdr and network_kind(nm) != "socket"]
        if no_gdr:
            hosts_without = sorted(n for n, hj in host_json.items() if hj["gpudirect_rdma"] is False)
            why = _gdr_causes(hosts, job)
            partial = gdr_yes > 0
            status = Status.FAIL if expect_gdr else Status.WARN
            msg = (
                f"{gdr_no} of {net_channels} network channels do not use GPUDirect RDMA (no /GDRDMA)"
                if partial
                else "inter-node channels do not use GPUDirect RDMA: "
                f"none of {net_channels} network channels has /GDRDMA"
            )
            if hosts_without and (partial or len(hosts_without) < len(host_json)):
                msg += " on " + _hostlist(hosts_without)
            if why:
                msg += f"; {why[0]}"
            findings.append(
                Finding(
                    status,
                    msg,
                    _refs(*(ref for ref, _ in no_gdr[:3]), *why[1:2]),
                    "Load nvidia_peermem (or use DMA-BUF: open kernel modules, CUDA >= 11.7, kernel >= 5.12), "
                    "expose the RDMA devices to the container, and check NCCL_NET_GDR_LEVEL.",
                )
            )
        elif gdr_yes:
            first_gdr = min((ref for (_, gdr), (_, ref) in job.net.items() if gdr and ref), key=lambda r: r.line)
            findings.append(
                Finding(Status.OK, f"GPUDirect RDMA on all {net_channels} network channels", _refs(first_gdr))
            )
    elif expect_gdr and network not in ("socket",) and inter_node:
        findings.append(
            Finding(
                Status.WARN,
                "GPUDirect RDMA expected but the log has no network channel lines to confirm it",
                (),
                "Keep NCCL_DEBUG_SUBSYS at its default (INIT) so the 'Channel ... via NET/...' lines are printed.",
            )
        )
    # HCAs that report GPU Direct RDMA disabled (printed with NCCL_DEBUG_SUBSYS including NET/GRAPH).
    disabled = sorted({hca for h in hosts.values() for hca, (on, _) in h.gdr_hca.items() if not on})
    if disabled and network not in ("socket",) and not (net_channels and gdr_no):
        refs = tuple(ref for h in hosts.values() for _, (on, ref) in h.gdr_hca.items() if not on)[:2]
        findings.append(
            Finding(
                Status.FAIL if expect_gdr else Status.WARN,
                f"GPU Direct RDMA Disabled for HCA {', '.join(disabled)}: inter-node traffic from "
                f"{'this host' if len(hosts) == 1 else 'these hosts'} would not use GPUDirect RDMA",
                refs,
                "Load nvidia_peermem (or use DMA-BUF with the open kernel modules) and check the GPU and HCA share "
                "a PCIe switch (NCCL_NET_GDR_LEVEL).",
            )
        )

    # Link layers.
    if link_layer == "mixed":
        per_link: dict[str, list[str]] = {}
        for h in hosts.values():
            for dev, (link, _) in h.devices.items():
                per_link.setdefault(link.split("/", 1)[0], []).append(dev.split(":", 1)[0])
        minority = min(per_link.items(), key=lambda kv: len(kv[1]))
        ref = next((h.ib_line for h in hosts.values() if h.ib_line), None)
        findings.append(
            Finding(
                Status.WARN,
                "NCCL uses InfiniBand and RoCE HCAs together: "
                + ", ".join(f"{len(set(v))} {k}" for k, v in sorted(per_link.items()))
                + f"; traffic over {', '.join(sorted(set(minority[1])))} ({minority[0]}) lowers bandwidth",
                _refs(ref),
                f"Restrict NCCL to the intended HCAs, e.g. NCCL_IB_HCA=^{sorted(set(minority[1]))[0]}.",
            )
        )
    # NCCL_IB_HCA narrowed to one HCA for several GPUs: every GPU's inter-node traffic shares it.
    if inter_node and network == "ib":
        for h in hosts.values():
            hca_env = h.env.get("NCCL_IB_HCA")
            if hca_env and len(h.devices) == 1 and len(h.devs) > 1:
                dev = next(iter(h.devices))
                findings.append(
                    Finding(
                        Status.WARN,
                        f"{h.name}: NCCL_IB_HCA={hca_env[0]} leaves one HCA ({dev}) for {len(h.devs)} GPUs: "
                        f"expect about 1/{len(h.devs)} of the node's inter-node bandwidth"
                        + (" (PXN routes channels through the GPU nearest the NIC)" if job.pxn else ""),
                        _refs(hca_env[1], h.ib_line),
                        "List every HCA the node should use in NCCL_IB_HCA (or unset it).",
                    )
                )
                break
    if expect == "roce" and link_layer == "infiniband":
        findings.append(Finding(Status.FAIL, "expected RoCE, but the HCAs NCCL uses are InfiniBand", ()))
    if expected_net and network and network != expected_net and network != "socket":
        findings.append(
            Finding(
                Status.FAIL,
                f"expected {expect}, but inter-node traffic uses {_describe_network(network, link_layer, job, hosts)}",
                (),
            )
        )
    # Single-process logs where IBext was disabled by hand do not disable NCCL's own IB (NVIDIA/nccl#676).
    for h in hosts.values():
        env = h.env.get("NCCL_IBEXT_DISABLE")
        if env and env[0].strip() == "1" and "NCCL_IB_DISABLE" not in h.env and network is None:
            findings.append(
                Finding(
                    Status.OK,
                    "NCCL_IBEXT_DISABLE=1 disables only the external IBext plugin; NCCL's internal IB transport "
                    "still initializes (NCCL_IB_DISABLE=1 forces sockets)",
                    (env[1],),
                )
            )
            break
    if "efa_empty" in job.foreign and network != "ofi":
        findings.append(
            Finding(
                Status.WARN if network is None else Status.FAIL,
                "libfabric found no EFA device (fi_getinfo: provider efa output empty list): aws-ofi-nccl cannot "
                "use EFA here, so NCCL falls back to another network",
                (job.foreign["efa_empty"],),
                "Expose the EFA devices (/dev/infiniband/uverbs*) to the container (the EFA device plugin on "
                "Kubernetes, --device on Docker).",
            )
        )
    if job.garbled:
        findings.append(
            Finding(
                Status.OK,
                f"{job.garbled} garbled line{'s' if job.garbled > 1 else ''} skipped "
                "(output of two ranks spliced into one line)",
                (),
            )
        )

    status = worst(f.status for f in findings)
    nvls = {k: v[0] for k, v in sorted(job.intra.items())}
    plugins = sorted({nm for (nm, _) in job.net} | {n for h in hosts.values() for n in h.networks})
    return LogReport(
        nccl_version=version,
        network=network,
        link_layer=link_layer,
        gpudirect_rdma=gpudirect_rdma,
        net_channels=net_channels,
        single_node=single_node,
        errors=tuple(runtime_errors) + tuple(init_failed if network in ("socket", None) and init_failed else ()),
        error_count=job.error_count + (len(init_failed) if network in ("socket", None) else 0),
        hosts=host_json,
        status=status,
        findings=tuple(findings),
        intra_node=nvls,
        net_plugins=tuple(plugins),
        sources=tuple(job.sources),
        lines=job.lines,
        nccl_lines=job.nccl_lines,
        garbled_lines=job.garbled,
        skipped_long_lines=job.overlong,
        cut_lines=job.cut,
        first_cut=job.cut_ref,
    )


def _refs(*refs: Ref | None) -> tuple[Ref, ...]:
    out: list[Ref] = []
    for r in refs:
        if r is not None and r not in out:
            out.append(r)
    return tuple(out)


def _first_intra_refs(job: _Job) -> tuple[Ref, ...]:
    return _refs(*(ref for _, ref in list(job.intra.values())[:2]))


def _single_note(job: _Job, hosts: dict[str, _Host]) -> str:
    intra = ", ".join(f"{k} ({v[0]} channels)" for k, v in sorted(job.intra.items())) or "no channel lines"
    return f"single node, no network was exercised; GPU-to-GPU traffic: {intra}"


def _hostlist(names: Sequence[str]) -> str:
    try:
        from clustercheck.hostlist import fold

        return str(fold(list(names)))
    except Exception:
        return ",".join(names)


def _describe_network(network: str, link_layer: str | None, job: _Job, hosts: dict[str, _Host]) -> str:
    if network == "ib":
        plugins = sorted({nm for (nm, _) in job.net if network_kind(nm) == "ib"})
        if not plugins:
            plugins = sorted({n for h in hosts.values() for n in h.networks if network_kind(n) == "ib"})
        name = "/".join(plugins) if plugins else "IB"
        what = {"infiniband": "InfiniBand", "roce": "RoCE", "mixed": "InfiniBand and RoCE"}.get(link_layer or "", "")
        return f"NCCL's IB verbs transport ({name}{', ' + what if what else ''})"
    if network == "ofi":
        providers = sorted({h.ofi_provider[0] for h in hosts.values() if h.ofi_provider})
        return "aws-ofi-nccl (libfabric" + (f", provider {', '.join(providers)}" if providers else "") + ")"
    if network == "socket":
        return "TCP sockets"
    return network


def _socket_findings(
    job: _Job,
    hosts: dict[str, _Host],
    per_host: dict[str, tuple[str | None, str | None, Ref | None]],
    network: str | None,
    socket_hosts: list[str],
    rdma_hosts: list[str],
    single_node: bool | None,
    expected_net: str | None,
    init_failed: list[tuple[Ref, str]],
    host_json: dict[str, dict[str, Any]],
) -> list[Finding]:
    findings: list[Finding] = []
    cause, cause_ref = _fallback_cause(hosts, socket_hosts, job)
    for n in socket_hosts:
        host_json[n]["reason"] = cause
    sock_ref = next((per_host[n][2] for n in socket_hosts if per_host[n][2]), None)
    socket_chan = min(
        (ref for (nm, _), (_, ref) in job.net.items() if network_kind(nm) == "socket" and ref),
        key=lambda r: r.line,
        default=None,
    )
    refs = _refs(cause_ref, sock_ref, socket_chan)
    ifaces = sorted({i for n in socket_hosts for i in hosts[n].sockets})
    on_lo = ifaces == ["lo"]
    where = f" on {_hostlist(socket_hosts)}" if rdma_hosts and socket_hosts else ""
    if expected_net == "socket":
        findings.append(Finding(Status.OK, "TCP sockets, as expected" + (f" ({cause})" if cause else ""), refs))
    elif single_node is False or (network == "socket" and job.net):
        msg = "fell back to TCP sockets" + where
        msg += f": {cause}" if cause else ": inter-node traffic goes over TCP"
        findings.append(
            Finding(
                Status.FAIL,
                msg + (f" (line {cause_ref.line})" if cause_ref else ""),
                refs,
                _socket_remedy(cause),
            )
        )
    elif single_node is True:
        findings.append(
            Finding(
                Status.WARN if init_failed or on_lo else Status.OK,
                _single_note(job, hosts)
                + "; NCCL selected TCP sockets"
                + (f" ({cause})" if cause else "")
                + ", so a multi-node job from this host would not use RDMA"
                + ("; and over the loopback interface lo a multi-node job cannot work at all" if on_lo else ""),
                refs,
                _socket_remedy(cause) if init_failed or on_lo else "",
            )
        )
    else:
        findings.append(
            Finding(
                Status.WARN,
                "NCCL selected TCP sockets"
                + (f" ({cause})" if cause else "")
                + "; the log does not show whether traffic crossed nodes, but a multi-node job would use TCP"
                + ("; over the loopback interface lo it cannot work at all" if on_lo else ""),
                refs,
                _socket_remedy(cause),
            )
        )
    if expected_net and expected_net != "socket" and findings[-1].status is not Status.FAIL:
        findings.append(
            Finding(
                Status.FAIL,
                f"expected {expected_net}, but NCCL selected TCP sockets" + (f": {cause}" if cause else ""),
                refs,
                _socket_remedy(cause),
            )
        )
    if init_failed and expected_net != "socket":
        status = Status.FAIL if single_node is False else Status.WARN
        findings.append(_init_failure_finding(init_failed, status))
    return findings


def _init_failure_finding(failed: list[tuple[Ref, str]], status: Status, recovered: str | None = None) -> Finding:
    text = failed[0][1]
    if recovered:
        msg = f"a network plugin failed to initialize ({text}); NCCL went on with {recovered}"
    else:
        msg = f"the network NCCL was meant to use failed to initialize: {text}"
    return Finding(
        status,
        msg,
        tuple(r for r, _ in failed[:3]),
        "Check the plugin's requirements (for aws-ofi-nccl: /dev/infiniband inside the container, the EFA "
        "driver and libfabric) and the library path.",
    )


def _fallback_cause(hosts: dict[str, _Host], socket_hosts: list[str], job: _Job) -> tuple[str | None, Ref | None]:
    """The most telling reason the log gives for a socket selection."""
    best: tuple[int, str, Ref] | None = None
    for n in socket_hosts:
        h = hosts[n]
        candidates: list[tuple[str, str, Ref]] = []
        env = h.env.get("NCCL_IB_DISABLE")
        if env and env[0].strip() not in ("0", ""):
            candidates.append(("NCCL_IB_DISABLE", f"NCCL_IB_DISABLE set by environment to {env[0]}", env[1]))
        env = h.env.get("NCCL_NET")
        if env and network_kind(env[0]) == "socket":
            candidates.append(("NCCL_NET", f"NCCL_NET={env[0]} set by environment", env[1]))
        for key, (text, ref) in h.causes.items():
            if key in _CAUSE_ORDER:
                candidates.append((key, text, ref))
        for cand in candidates:
            rank = _CAUSE_ORDER.index(cand[0])
            if best is None or rank < best[0]:
                best = (rank, cand[1], cand[2])
    if best is None and "efa_empty" in job.foreign:
        return "libfabric: provider efa output empty list (no EFA device in the container)", job.foreign["efa_empty"]
    if best is None:
        return None, None
    return best[1], best[2]


def _socket_remedy(cause: str | None) -> str:
    if cause and "IB_DISABLE" in cause:
        return "Unset NCCL_IB_DISABLE (or set it to 0) unless TCP is intended."
    if cause and "NCCL_NET=" in cause:
        return "Unset NCCL_NET or set it to the RDMA network (IB, or the plugin's name)."
    if cause and "libibverbs" in cause:
        return "Install rdma-core (libibverbs and the provider, e.g. libmlx5) in the image, or mount it from the host."
    if cause and ("open device" in cause or "ibv_open" in cause):
        return "Expose /dev/infiniband (and the uverbs devices) to the container; check permissions and memlock."
    if cause and "No device found" in cause:
        return (
            "Check the HCAs are up (ibstat, port State Active) and visible in the container (/dev/infiniband, "
            "/sys/class/infiniband); check NCCL_IB_HCA."
        )
    return (
        "Check the RDMA devices are visible (/dev/infiniband, ibv_devinfo), the plugin loads, and NCCL_IB_DISABLE/"
        "NCCL_NET are not set."
    )


def _gdr_causes(hosts: dict[str, _Host], job: _Job) -> list[Any]:
    for h in hosts.values():
        if "ofi_nogdr" in h.causes:
            text, ref = h.causes["ofi_nogdr"]
            return [f"aws-ofi-nccl says: {text.replace('NET/OFI ', '')}", ref]
        env = h.env.get("NCCL_NET_GDR_LEVEL") or h.env.get("NCCL_IB_GDR_LEVEL")
        if env and env[0].strip().upper() in ("LOC", "0"):
            return [f"NCCL_NET_GDR_LEVEL={env[0]} forbids it", env[1]]
        off = [(hca, ref) for hca, (on, ref) in h.gdr_hca.items() if not on]
        if off:
            return [f"GPU Direct RDMA Disabled for HCA {off[0][0]}", off[0][1]]
    return []


def _explain_warn(text: str) -> str:
    m = re.search(r"(?:status=|with error )(\d+)", text)
    if m and int(m.group(1)) in WC_STATUS:
        return f"{text} (status {m.group(1)} = {WC_STATUS[int(m.group(1))]})"
    return text


def _error_remedy(text: str) -> str:
    m = re.search(r"(?:status=|with error )(\d+)", text)
    code = int(m.group(1)) if m else None
    if code == 12:
        return (
            "Retry counter exceeded: the peer stopped answering or the fabric drops packets; check links, "
            "PFC/ECN on RoCE, and the peer's health."
        )
    if code == 4:
        return (
            "Local protection error: a memory registration problem (GPUDirect RDMA / nvidia_peermem, DMA-BUF) "
            "or a wrong GID index on RoCE (NCCL_IB_GID_INDEX)."
        )
    return "Read the lines around it; check the HCAs' port state and counters and the peer host."


# -- entry points --------------------------------------------------------------------------------


def analyze_streams(
    streams: Sequence[tuple[str, IO[bytes]]], *, expect: str | None = None, expect_gdr: bool = False
) -> LogReport:
    """Scan (name, binary stream) pairs as one job and judge it."""
    scanner = Scanner()
    for name, stream in streams:
        scanner.feed_stream(stream, name)
    return scanner.report(expect=expect, expect_gdr=expect_gdr)


def analyze_paths(
    paths: Sequence[str | Path], *, expect: str | None = None, expect_gdr: bool = False, jobs: int = 1
) -> LogReport:
    """Scan log files (one per rank, or all ranks in one) as one job; OSError for an unreadable file."""
    scanner = Scanner()
    for path in paths:
        scanner.feed_path(str(path), jobs=jobs)
    return scanner.report(expect=expect, expect_gdr=expect_gdr)


def default_jobs() -> int:
    """Processes for a large file: the CPUs this process may use, at most 4 (memory stays small)."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _fork_available() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def analyze_text(text: str | bytes, name: str = "-", **kwargs: Any) -> LogReport:
    """Scan a log held in memory (tests, small inputs)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return analyze_streams([(name, io.BytesIO(data))], **kwargs)
