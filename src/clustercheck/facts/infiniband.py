"""InfiniBand/RoCE on the node: HCAs and their ports, uverbs devices, /dev/infiniband, verbs libraries.

Gathering: one read-only shell command per node (`HOST_SCRIPT`, facts/scripts/rdma_host_gather.sh:
`grep -H .` over /sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer}, fw_ver and
/sys/class/infiniband_verbs/uverbs*/ibdev; `stat` of /dev/infiniband/*; a listing of
libibverbs.so.1 and the verbs providers, rdma_library_scan.sh); only when sysfs shows no HCA, `ibstat`, then
`ibv_devinfo`. The pure parsers below read each part (domain-facts §F).
"""

# Sources: docs/domain-facts.md §F (sysfs formats).

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from clustercheck import Host, fact
from clustercheck.errors import CommandTimeout, HostError
from clustercheck.facts import script_text, shown_with

# -- model --------------------------------------------------------------------------------
# NamedTuples, not dataclasses: eight dataclasses cost tens of ms of import (exec of generated
# methods), and this module may sit on the prolog path.

# Kernel port states and physical states, drivers/infiniband/core/sysfs.c (domain-facts §F).
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}


class Port(NamedTuple):
    """One HCA port as the node reports it (sysfs, ibstat or ibv_devinfo)."""

    hca: str
    port: int
    state: str = ""  # ACTIVE, DOWN, INIT, ARMED ... ("" when not reported)
    phys_state: str = ""  # LinkUp, Disabled, Polling ...
    rate_gbps: float | None = None
    rate: str = ""  # as printed: "400 Gb/sec (4X NDR)"
    link_layer: str = ""  # InfiniBand, Ethernet

    @property
    def label(self) -> str:
        return f"{self.hca} port {self.port}"


def port_selected(port: Port, names: Sequence[str]) -> bool:
    """Whether `names` selects a port, as the rdma and roce checks' `names` do: `HCA` patterns
    take every port of the HCA, `HCA:N` only port N (fnmatch patterns both)."""
    if not names:
        return True
    for name in names:
        hca, colon, number = name.partition(":")
        if fnmatch.fnmatchcase(port.hca, hca) and (not colon or fnmatch.fnmatchcase(str(port.port), number)):
            return True
    return False


class DevNode(NamedTuple):
    """A character device under /dev/infiniband: octal mode bits, owner and group."""

    path: str
    mode: int
    user: str
    group: str

    def usable_by_jobs(self, job_group: str = "") -> bool:
        """Jobs run as ordinary users: read+write for others, or for `job_group` when it owns the node."""
        if self.mode & 0o006 == 0o006:
            return True
        return bool(job_group) and self.group == job_group and self.mode & 0o060 == 0o060

    def describe(self) -> str:
        return f"{self.path} {self.mode:04o} {self.user}:{self.group}"


class RdmaNode:
    """What one node shows of RDMA: HCAs and their ports, uverbs devices, userspace libraries."""

    def __init__(self) -> None:
        self.ports: dict[str, list[Port]] = {}  # HCA -> ports (maybe none)
        self.firmware: dict[str, str] = {}  # HCA -> fw_ver
        self.uverbs: dict[str, str] = {}  # uverbsN -> HCA
        self.devices: dict[str, DevNode] = {}  # /dev/infiniband/x -> node
        self.libraries: list[str] = []
        self.source = "sysfs"  # or "ibstat" / "ibv_devinfo" when sysfs showed no HCA

    @property
    def hcas(self) -> list[str]:
        return sorted(self.ports, key=natural_key)

    def uverbs_of(self, hca: str) -> str | None:
        return next((u for u, h in sorted(self.uverbs.items()) if h == hca), None)


_HCA_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")


def is_hca_name(name: str) -> bool:
    """A name as /sys/class/infiniband lists HCAs (mlx5_0, bnxt_re1, irdma-0): what may be passed
    to perftest's -d or put in a sysfs path."""
    return _HCA_NAME_RE.fullmatch(name) is not None


def natural_key(name: str) -> tuple[tuple[int, str], ...]:
    """Sort mlx5_2 before mlx5_10."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", name) if p)


def span(names: Sequence[str]) -> str:
    """'mlx5_0..mlx5_7' for a list of names, or the names themselves when there are few."""
    if len(names) > 3:
        return f"{names[0]}..{names[-1]}"
    return ", ".join(names)


# -- parsers (pure) ------------------------------------------------------------------------

_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)(?:\s*Gb/sec)?(?:\s*\((.*)\))?\s*$")


def parse_rate(text: str) -> float | None:
    """'400 Gb/sec (4X NDR)' (sysfs), '400' (ibstat), '2.5 Gb/sec (1X SDR)' -> Gb/s."""
    m = _RATE_RE.match(text)
    return float(m.group(1)) if m else None


def parse_state(text: str) -> str:
    """'4: ACTIVE' (sysfs), 'Active' (ibstat), 'PORT_ACTIVE (4)' (ibv_devinfo) -> 'ACTIVE'."""
    text = text.strip()
    m = re.match(r"^(\d+):\s*(\S.*)$", text)
    if m:
        return PORT_STATES.get(int(m.group(1)), m.group(2).strip().upper())
    m = re.match(r"^PORT_(\w+)\s*(?:\((\d+)\))?$", text)
    if m:
        return PORT_STATES.get(int(m.group(2)), m.group(1)) if m.group(2) else m.group(1)
    upper = text.upper()
    return "INIT" if upper == "INITIALIZING" else upper  # ibstat spells INIT out


def parse_phys_state(text: str) -> str:
    """'5: LinkUp' (sysfs), 'LinkUp' (ibstat), 'LINK_UP (5)' (ibv_devinfo -v) -> 'LinkUp'."""
    text = text.strip()
    m = re.match(r"^(\d+):\s*(\S.*)$", text) or re.match(r"^\S.*\((\d+)\)$", text)
    if m:
        return PHYS_STATES.get(int(m.group(1)), m.group(2).strip() if m.lastindex == 2 else text)
    return text


def split_sections(text: str) -> dict[str, list[str]]:
    """Output of a probe script that marks sections with `## name` lines -> {name: lines}.

    Lines before the first marker (an image entrypoint's banner) are dropped.
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"^## ([\w.]+)\s*$", line)
        if m:
            current = sections.setdefault(m.group(1), [])
        elif current is not None and line.strip():
            current.append(line.rstrip())
    return sections


_SYSFS_PORT_RE = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/(state|phys_state|rate|link_layer)$")
_SYSFS_FW_RE = re.compile(r"^/sys/class/infiniband/([^/]+)/fw_ver$")
_SYSFS_UVERBS_RE = re.compile(r"^/sys/class/infiniband_verbs/(uverbs\d+)/ibdev$")


def parse_sysfs(lines: Iterable[str]) -> RdmaNode:
    """`grep -H . <sysfs files>` lines ('PATH:VALUE') -> HCAs, ports, firmware and uverbs map."""
    node = RdmaNode()
    fields: dict[tuple[str, int], dict[str, str]] = {}
    for line in lines:
        path, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        m = _SYSFS_PORT_RE.match(path)
        if m:
            fields.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = value
            continue
        m = _SYSFS_FW_RE.match(path)
        if m:
            node.firmware[m.group(1)] = value
            node.ports.setdefault(m.group(1), [])
            continue
        m = _SYSFS_UVERBS_RE.match(path)
        if m and value:
            node.uverbs[m.group(1)] = value
    for (hca, number), f in sorted(fields.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])):
        node.ports.setdefault(hca, []).append(
            Port(
                hca,
                number,
                parse_state(f["state"]) if "state" in f else "",
                parse_phys_state(f["phys_state"]) if "phys_state" in f else "",
                parse_rate(f["rate"]) if "rate" in f else None,
                f.get("rate", ""),
                f.get("link_layer", ""),
            )
        )
    return node


def parse_stat_devices(lines: Iterable[str]) -> dict[str, DevNode]:
    """`stat -c '%n %a %U %G' /dev/infiniband/*` lines -> {path: DevNode}."""
    devices = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0].startswith("/dev/") and re.fullmatch(r"[0-7]{1,4}", parts[1]):
            devices[parts[0]] = DevNode(parts[0], int(parts[1], 8), parts[2], parts[3])
    return devices


def parse_ibstat(text: str) -> dict[str, list[Port]]:
    """`ibstat` output -> {HCA: ports}. Tolerates lost indentation, `ibwarn:`/`+ ` debug lines and
    a trailing `ibpanic:` (ibstat exits non-zero when one CA disappears, corpus pr-gpud-752)."""
    hcas: dict[str, list[Port]] = {}
    hca: str | None = None
    number: int | None = None
    f: dict[str, str] = {}

    def flush() -> None:
        if hca is not None and number is not None:
            hcas[hca].append(
                Port(
                    hca,
                    number,
                    parse_state(f["State"]) if "State" in f else "",
                    parse_phys_state(f["Physical state"]) if "Physical state" in f else "",
                    parse_rate(f["Rate"]) if "Rate" in f else None,
                    f"{f['Rate']} Gb/sec" if "Rate" in f else "",
                    f.get("Link layer", ""),
                )
            )

    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^CA '([^']+)'$", line)
        if m:
            flush()
            hca, number, f = m.group(1), None, {}
            hcas.setdefault(hca, [])
            continue
        m = re.match(r"^Port (\d+):$", line)
        if m and hca is not None:
            flush()
            number, f = int(m.group(1)), {}
            continue
        key, sep, value = line.partition(":")
        if sep and number is not None:
            f[key.strip()] = value.strip()
    flush()
    return hcas


def parse_ibv_devinfo(text: str) -> dict[str, list[Port]]:
    """`ibv_devinfo` (or `-v`) output -> {HCA: ports}. State and link layer only (no rate without -v)."""
    hcas: dict[str, list[Port]] = {}
    hca: str | None = None
    number: int | None = None
    f: dict[str, str] = {}

    def flush() -> None:
        if hca is not None and number is not None:
            rate = None
            width = re.match(r"(\d+)X", f.get("active_width", ""))
            speed = re.match(r"([\d.]+) Gbps", f.get("active_speed", ""))
            if width and speed:
                rate = int(width.group(1)) * float(speed.group(1))
            hcas[hca].append(
                Port(
                    hca,
                    number,
                    parse_state(f["state"]) if "state" in f else "",
                    parse_phys_state(f["phys_state"]) if "phys_state" in f else "",
                    rate,
                    f"{rate:g} Gb/sec" if rate is not None else "",
                    f.get("link_layer", ""),
                )
            )

    for raw in text.splitlines():
        line = raw.strip()
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if key == "hca_id":
            flush()
            hca, number, f = value, None, {}
            hcas.setdefault(hca, [])
        elif key == "port" and hca is not None and value.isdigit():
            flush()
            number, f = int(value), {}
        elif number is not None:
            f[key] = value
    flush()
    return hcas


_PROVIDER_RE = re.compile(r"^lib(.+)-rdmav\d+\.so$")


def verbs_libraries(paths: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Paths from the library listing -> (libibverbs.so.1 paths, {provider name: path})."""
    core: list[str] = []
    providers: dict[str, str] = {}
    for path in paths:
        base = path.rsplit("/", 1)[-1]
        if base == "libibverbs.so.1":
            core.append(path)
        m = _PROVIDER_RE.match(base)
        if m and "/libibverbs/" in path:
            providers.setdefault(m.group(1), path)
    return core, providers


# -- gathering -------------------------------------------------------------------------------

# The scripts are facts/scripts/rdma_library_scan.sh (where libibverbs.so.1 and the verbs
# providers are: a part of this gather and of facts/image.py's probe inside a job's image) and
# rdma_host_gather.sh: real files, linted (tests/test_scripts.py), sent as these texts.
LIBRARY_SCAN = script_text("rdma_library_scan.sh").removesuffix("\n")
HOST_SCRIPT = script_text("rdma_host_gather.sh", LIBRARY_SCAN=LIBRARY_SCAN).removesuffix("\n")


@fact
def rdma(host: Host) -> RdmaNode:
    """HCAs, ports, /dev/infiniband and verbs libraries of the node, in one command."""
    argv = ("sh", "-c", HOST_SCRIPT)
    result = host.run(*argv, shown_as=shown_with(argv, HOST_SCRIPT, "'<rdma gather script>'"))
    if result.timed_out:
        raise CommandTimeout(host.name, f"reading RDMA sysfs did not finish within {result.duration_s:.1f} s")
    sections = split_sections(result.stdout)
    if "sysfs" not in sections:
        raise HostError(host.name, f"the RDMA gather printed no sections: {result.describe()}")
    node = parse_sysfs(sections.get("sysfs", []))
    node.devices = parse_stat_devices(sections.get("devices", []))
    node.libraries = sorted(set(sections.get("libraries", [])))
    if not node.ports:  # sysfs unreadable (a restricted container, an odd kernel): ask the tools
        for tool, parser in (("ibstat", parse_ibstat), ("ibv_devinfo", parse_ibv_devinfo)):
            answer = host.run(tool)
            found = parser(answer.stdout) if answer.exit_code != 127 and not answer.timed_out else {}
            if found:
                node.ports, node.source = found, tool
                break
    return node


def library_problems(libraries: Iterable[str], providers: Sequence[str], where: str) -> list[str]:
    core, found = verbs_libraries(libraries)
    problems = []
    if not core:
        problems.append(f"no libibverbs.so.1 {where}")
    for name in providers:
        if name not in found:
            problems.append(f"no {name} verbs provider (lib{name}-rdmav*.so) {where}")
    return problems


# -- port error counters and link flaps (rdma.counters) ------------------------------------------
# Widths of the PortCounters attributes the kernel shows under counters/ (drivers/infiniband/core/
# sysfs.c, PORT_PMA_ATTR(name, counter, width, offset)): IBA error counters do not wrap, they stop
# at all ones, so a counter at its maximum can no longer count (saturated). hw_counters/ (mlx5 Q
# counters and the like) are 32-bit and wrap.
PMA_WIDTHS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}
HW_COUNTER_BITS = 32


class PortCounters(NamedTuple):
    """One port's counters as read from sysfs: counters/ (IB PMA) and hw_counters/ (driver)."""

    hca: str
    port: int
    counters: dict[str, int]
    hw_counters: dict[str, int]

    @property
    def label(self) -> str:
        return f"{self.hca} port {self.port}"

    def value(self, name: str) -> int | None:
        if name in self.counters:
            return self.counters[name]
        return self.hw_counters.get(name)


_COUNTER_RE = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d{1,4})/(counters|hw_counters)/([A-Za-z0-9_]{1,80})$")
_PORT_ATTR_RE = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d{1,4})/(link_layer|state)$")


def parse_counters(lines: Iterable[str]) -> dict[tuple[str, int], PortCounters]:
    """`grep -H . .../ports/*/counters/* .../hw_counters/*` lines -> {(HCA, port): counters}.

    A value that is not a decimal number (a driver's odd file, a cut line) is left out: what
    was not read is not a zero.
    """
    ports: dict[tuple[str, int], PortCounters] = {}
    for line in lines:
        path, sep, value = line.partition(":")
        if not sep:
            continue
        m = _COUNTER_RE.match(path)
        value = value.strip()
        if not m or not value.isascii() or not value.isdigit() or len(value) > 20:
            continue
        key = (m.group(1), int(m.group(2)))
        entry = ports.get(key)
        if entry is None:
            entry = ports[key] = PortCounters(key[0], key[1], {}, {})
        (entry.counters if m.group(3) == "counters" else entry.hw_counters)[m.group(4)] = int(value)
    return dict(sorted(ports.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])))


def parse_port_attrs(lines: Iterable[str]) -> dict[tuple[str, int], dict[str, str]]:
    """`grep -H . .../ports/*/link_layer .../ports/*/state` lines -> {(HCA, port): {attr: value}}."""
    ports: dict[tuple[str, int], dict[str, str]] = {}
    for line in lines:
        path, sep, value = line.partition(":")
        m = _PORT_ATTR_RE.match(path) if sep else None
        if m:
            ports.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = value.strip()
    return dict(sorted(ports.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])))


class Delta(NamedTuple):
    """How a counter moved between two readings."""

    name: str
    before: int
    after: int
    increase: int | None  # None when it went backwards (a reset, or a 32-bit counter that wrapped)
    saturated: bool  # at its maximum (an IB error counter stops there): it can no longer count

    @property
    def backwards(self) -> bool:
        return self.increase is None


def counter_width(name: str, hw: bool) -> int | None:
    """Bits of a counter: the PMA width for counters/, 32 for hw_counters/, None when unknown."""
    if hw:
        return HW_COUNTER_BITS
    return PMA_WIDTHS.get(name)


def counter_delta(name: str, before: int, after: int, *, hw: bool = False) -> Delta:
    """The increase of one counter from `before` to `after`.

    Backwards is never an error burst: the counters were cleared (`perfquery -R`, a driver
    reload, a firmware reset) or a 32-bit hw counter wrapped; the caller says so and takes
    `after` as the new base. A PMA counter at all ones is saturated (IBA counters stop there).
    """
    return Delta(name, before, after, after - before if after >= before else None, is_saturated(name, after, hw=hw))


def is_saturated(name: str, value: int, *, hw: bool = False) -> bool:
    """An IB PMA error counter at all ones: it stopped there and counts nothing more until cleared."""
    width = counter_width(name, hw)
    return not hw and width is not None and value >= (1 << width) - 1


class LinkEvent(NamedTuple):
    """A link going down or up, from a kernel or syslog line."""

    line: int  # 1-based line number in its log
    interface: str  # netdev name (enp157s0f1np1, ib6)
    pci: str  # PCI address when the line names one (mlx5_core), else ""
    up: bool
    uptime_s: float | None  # the `[ 1234.567890]` stamp of dmesg / journalctl -o short-monotonic
    source: str  # "mlx5" (kernel netdev line) or "carrier" (systemd-networkd)
    text: str


# mlx5_core's netdev_info: "mlx5_core 0000:9d:00.1 enp157s0f1np1: Link down" (corpus kernel_log/
# gpud-dmesg-decode-iso-boot-mlx5-nvswitch-h100); systemd-networkd: "ib6: lost carrier" /
# "ib6: Gained carrier" (corpus kernel_log/azurehpc-syslog-ib6-lost-gained-carrier-6flaps).
_MLX5_LINK_RE = re.compile(
    r"\bmlx5_core ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ([^\s:]{1,32}): Link (up|down)\b"
)
_CARRIER_RE = re.compile(r"\bsystemd-networkd(?:\[\d{1,10}\])?: ([^\s:]{1,32}): ([Ll]ost|[Gg]ained) carrier\b")
_UPTIME_RE = re.compile(r"^\s{0,40}\[\s{0,12}(\d{1,10}\.\d{1,9})\]")


def parse_link_events(text: str) -> list[LinkEvent]:
    """mlx5 `Link up`/`Link down` netdev lines and networkd carrier lines of a log, in order.

    Other "link down" lines (`ata6: SATA link down`) are not NIC links and are not taken.
    """
    events: list[LinkEvent] = []
    for number, line in enumerate(text.splitlines(), 1):
        if "carrier" not in line and "Link " not in line:
            continue  # the quick test keeps a long log cheap
        stamp = _UPTIME_RE.match(line)
        uptime = float(stamp.group(1)) if stamp else None
        m = _MLX5_LINK_RE.search(line)
        if m:
            events.append(LinkEvent(number, m.group(2), m.group(1), m.group(3) == "up", uptime, "mlx5", line.strip()))
            continue
        m = _CARRIER_RE.search(line)
        if m:
            up = m.group(2).lower() == "gained"
            events.append(LinkEvent(number, m.group(1), "", up, uptime, "carrier", line.strip()))
    return events


class Flaps(NamedTuple):
    interface: str
    pci: str
    downs: int  # times an up link went down (in the judged part of the log)
    up_now: bool | None  # the last state the log shows (None: no line for it)
    lines: tuple[int, ...]  # the lines of the counted downs


def count_flaps(
    events: Sequence[LinkEvent], after_uptime: float | None = None, skip: Mapping[str, int] | None = None
) -> list[Flaps]:
    """Per interface, how often a link that was up went down.

    An mlx5 `Link down` counts only after a `Link up` of the same interface: the driver logs a
    port's first state when it brings the interface up (a port without a cable logs `Link
    down` at boot), and that is no flap. networkd logs `lost carrier` only on a loss, so each
    counts. `after_uptime` leaves out events stamped at or before it (judged by an earlier
    run); `skip` ({interface: n}) leaves out the first n carrier losses of an interface (a log
    file already judged up to there).
    """
    state: dict[str, bool] = {}
    pcis: dict[str, str] = {}
    downs: dict[str, list[int]] = {}
    seen_carrier: dict[str, int] = {}
    for e in events:
        pcis.setdefault(e.interface, e.pci)
        downs.setdefault(e.interface, [])
        was_up = state.get(e.interface)
        state[e.interface] = e.up
        if e.up:
            continue
        if e.source == "mlx5" and not was_up:
            continue
        if e.source == "carrier":
            seen_carrier[e.interface] = seen_carrier.get(e.interface, 0) + 1
            if seen_carrier[e.interface] <= (skip or {}).get(e.interface, 0):
                continue
        if after_uptime is not None and e.uptime_s is not None and e.uptime_s <= after_uptime:
            continue
        downs[e.interface].append(e.line)
    return [
        Flaps(name, pcis.get(name, ""), len(lines), state.get(name), tuple(lines))
        for name, lines in sorted(downs.items(), key=lambda kv: natural_key(kv[0]))
    ]
