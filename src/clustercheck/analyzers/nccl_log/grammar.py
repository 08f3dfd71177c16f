"""One NCCL log line -> what it says: the line kinds that decide a verdict, the prefix taken apart,
the transport named by a channel line. Pure functions of one line; no state.

Line formats: domain-facts.md §C.1-C.2 (the package docstring lists them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The longest text after `via NET/` that can name a transport (`IBext_v8/3(2)/GDRDMA`).
MAX_TAIL = 128
#: The longest part of a line kept and parsed (NCCL lines are a few hundred bytes); longer ones are
#: cut there and counted as overlong, so every per-line step has a bounded input.
MAX_KEPT = 4096
#: The bound of every cache of distinct texts (prefixes, tails, lines seen), so memory stays constant.
_SEEN_CAP = 20000

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
# The transports named on one channel line past the exact start: a network one by its whole tail
# (group 1), shared memory with no group.
_VIA = re.compile(rb"via (?:NET/([^\n]*)|SHM)")
#: Past the exact start, the channel line of almost every channel of a healthy job: IB verbs with
#: GPUDirect RDMA, no proxy, the tail ending the line. Such lines are only counted (grep -v leaves
#: them out of what Python reads); every other line holding `via NET/` or `via SHM` is read one by
#: one (`_LEAN_VIA` finds them in the Python scan). The same lines as a POSIX ERE for `grep -E`.
COMMON_ERE = "via NET/IB/[0-9]+/GDRDMA$"
_COMMON = re.compile(rb"via NET/IB/[0-9]+/GDRDMA$", re.MULTILINE)
#: The key and class every common line counts under.
COMMON_KEY = ("IB", True)
# Lines worth a look past the exact start: a network channel that is not the common one, or shared
# memory; a line the lookahead lets through is still checked whole against _COMMON (its tail is the end).
_LEAN_VIA = re.compile(rb"via (?:NET/(?!IB/[0-9]+/GDRDMA$)|SHM)", re.MULTILINE)

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


@dataclass(frozen=True)
class Ref:
    """Where something was read: a file (or '-' for stdin) and a 1-based line number."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


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


#: A LogLine's fields as a tuple (host, dev, level, message): what Scanner.parse reads, for every kept line,
#: without building a LogLine (a frozen dataclass costs microseconds to build).
Parts = tuple[str | None, int | None, str, str]
_GARBLED: Parts = (None, None, "GARBLED", "")
GARBLED = LogLine(*_GARBLED)
_TAIL_PREFIX = re.compile(r"(?<![^\s:|])([^\s:|]+):(\d+):(\d+) \[(-?\d+)\] $")


def _salvage(line: str, marker: re.Match[str]) -> Parts:
    """A spliced line: the last writer's text runs intact to the newline; keep it for a known host."""
    m = _TAIL_PREFIX.search(line[: marker.start()])
    if not m:
        return _GARBLED
    return (m.group(1), int(m.group(4)), "GARBLED", line[marker.end() :].strip())


def split_line(line: str) -> LogLine | None:
    """Take one raw log line apart; None when it is no NCCL line, GARBLED when ranks were spliced.

    Copes with srun ``--label`` (``12: ``), OpenMPI (``[1,7]<stdout>:``), Python logging,
    ``[timestamp]`` and ISO timestamps, CloudWatch (``  | ts | message``, or the message twice
    around `` | ``), and lines without the ``host:pid:tid`` part (``[3] NCCL INFO ...``).
    """
    parts = split_parts(line)
    if parts is None:
        return None
    return GARBLED if parts is _GARBLED else LogLine(*parts)


def split_parts(line: str) -> Parts | None:
    """split_line's LogLine as a tuple of its fields (see Parts)."""
    marker = _MARKER.search(line)
    if marker is None:
        m = _VERSION.search(line)
        if m and "NCCL" not in line[: m.start()]:
            return (None, None, "VERSION", line[m.start() :].strip())
        return None
    if _MARKER.search(line, marker.end()):  # more than one marker (the rare case: find them all)
        markers = list(_MARKER.finditer(line))
        tail = line.rsplit(" | ", 1)[-1] if " | " in line else ""
        if len(_MARKER.findall(tail)) == 1 and _MARKER.search(line.rsplit(" | ", 1)[0]):
            return split_parts(tail)  # CloudWatch shows the message twice: keep the clean copy
        return _salvage(line, markers[-1])
    # What a line's prefix says depends on nothing else, and a log repeats few prefixes
    # (host:pid:tid [dev]): take each apart once.
    what, host, dev = prefix_of(line[: marker.start()])
    if what == "garbled":
        return _GARBLED
    message = line[marker.end() :].strip()
    if what == "salvaged":
        return (host, dev, "GARBLED", message)
    return (host, dev, marker.group(1), message)


#: prefix -> ("ok" | "salvaged" | "garbled", host, dev), bounded like the scanner's caches.
_PREFIX_CACHE: dict[str, tuple[str, str | None, int | None]] = {}


def prefix_of(raw_prefix: str) -> tuple[str, str | None, int | None]:
    """What split_line makes of the text before a line's only `NCCL INFO|WARN`, from its cache."""
    known = _PREFIX_CACHE.get(raw_prefix)
    if known is None:
        known = _split_prefix(raw_prefix)
        if len(_PREFIX_CACHE) >= _SEEN_CAP:
            _PREFIX_CACHE.clear()
        _PREFIX_CACHE[raw_prefix] = known
    return known


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


_HEX = re.compile(rb"0x[0-9a-fA-F]+")
