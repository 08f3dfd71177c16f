"""RoCE QoS of a node: what `mlnx_qos -i <if>` prints (trust, DSCP->priority map, PFC), the ECN sysfs.

Pure parsers, one pass over the text each. Real formats: corpus roce_qos/ (att/netarbiter's
`mlnx_qos --trust dscp` and `--pfc` run under `set -x`, spiderpool's `rdma-qos.sh q` query with
the ECN files /sys/class/net/<if>/ecn/roce_np/enable/<prio> and roce_rp/enable/<prio>);
domain-facts §F (ECN sysfs of MLNX_OFED; PFC only through mlnx_qos).
"""

from __future__ import annotations

import re
from typing import NamedTuple

PRIORITIES = range(8)


class QosReading(NamedTuple):
    """One `mlnx_qos` answer for one interface."""

    trust: str  # "dscp", "pcp" ("" when not printed)
    pfc: tuple[bool, ...] | None  # PFC enabled per priority 0..7 (None when the table is missing)
    dscp2prio: dict[int, int]  # DSCP -> priority (only with trust dscp, where mlnx_qos prints it)
    tc_of_prio: dict[int, int]  # priority -> traffic class
    dcbx: str  # "OS controlled", "firmware controlled" ...

    def pfc_priorities(self) -> list[int]:
        return [p for p, on in enumerate(self.pfc or ()) if on]

    def dscps_of(self, priority: int) -> list[int]:
        return sorted(d for d, p in self.dscp2prio.items() if p == priority)


_PRIO_DSCP_RE = re.compile(r"^prio:\s{0,4}([0-7])\s{1,8}dscp:\s{0,4}([0-9,\s]{0,400})$")
_TC_RE = re.compile(r"^tc:\s{0,4}(\d{1,2})\b")
_ROW_RE = re.compile(r"^(priority|enabled|buffer)((?:\s{1,16}\d{1,3}){1,16})\s*$")
_PRIO_LIST_RE = re.compile(r"^priority:((?:\s{1,16}\d{1,2}){1,8})\s*$")


def parse_mlnx_qos(text: str) -> list[QosReading]:
    """Every `mlnx_qos` answer in a text, in order (one per run; a log of several runs gives several).

    Lines that are not mlnx_qos's (`+ ` shell trace lines, other commands' output) are skipped;
    a new answer starts where `DCBX mode:` or `Priority trust state:` comes again.
    """
    readings: list[QosReading] = []
    fields: dict[str, str] = {}
    pfc: list[bool] | None = None
    dscp: dict[int, int] = {}
    tcs: dict[int, int] = {}
    tc: int | None = None
    started = False

    def flush() -> None:
        if started:
            readings.append(
                QosReading(
                    fields.get("trust", ""), tuple(pfc) if pfc is not None else None, dscp, tcs, fields.get("dcbx", "")
                )
            )

    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("+ "):
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if sep and key in ("DCBX mode", "Priority trust state"):
            name = "dcbx" if key == "DCBX mode" else "trust"
            if name in fields or (name == "dcbx" and "trust" in fields):
                flush()
                fields, pfc, dscp, tcs, tc = {}, None, {}, {}, None
            started = True
            fields[name] = value.lower() if name == "trust" else value
            continue
        if not started:
            continue
        m = _PRIO_DSCP_RE.match(line)
        if m:
            for item in m.group(2).split(","):
                item = item.strip()
                if item.isdigit() and int(item) < 64:
                    dscp[int(item)] = int(m.group(1))
            continue
        m = _ROW_RE.match(line)
        if m:
            values = [int(v) for v in m.group(2).split()]
            if m.group(1) == "enabled" and len(values) == 8:
                pfc = [v == 1 for v in values]
            continue
        m = _TC_RE.match(line)
        if m:
            tc = int(m.group(1))
            continue
        m = _PRIO_LIST_RE.match(line)
        if m and tc is not None:
            for p in m.group(1).split():
                if int(p) in PRIORITIES:
                    tcs[int(p)] = tc
    flush()
    return readings


def ranges(numbers: list[int]) -> str:
    """[24, 25, 26, 27, 28, 29, 30, 31] -> '24-31'; [3] -> '3'; [] -> 'none'."""
    if not numbers:
        return "none"
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if n is not None:
            start = prev = n
    return ",".join(out)


class NetSysfs(NamedTuple):
    """ECN switches per priority and the MTU of one interface, from `grep -H .` over its sysfs files."""

    ecn: dict[tuple[str, int], bool]  # ("roce_np" | "roce_rp", priority) -> enabled
    mtu: int | None


_ECN_LINE_RE = re.compile(r"^/sys/class/net/[^/\s]{1,32}/ecn/(roce_np|roce_rp)/enable/([0-7]):\s*([01])\s*$")
_MTU_LINE_RE = re.compile(r"^/sys/class/net/[^/\s]{1,32}/mtu:\s*(\d{1,9})\s*$")


def parse_net_sysfs(lines: list[str]) -> NetSysfs:
    """`grep -H . /sys/class/net/IF/ecn/roce_np/enable/* .../roce_rp/enable/* /sys/class/net/IF/mtu` -> NetSysfs."""
    ecn: dict[tuple[str, int], bool] = {}
    mtu = None
    for line in lines:
        m = _ECN_LINE_RE.match(line)
        if m:
            ecn[(m.group(1), int(m.group(2)))] = m.group(3) == "1"
            continue
        m = _MTU_LINE_RE.match(line)
        if m:
            mtu = int(m.group(1))
    return NetSysfs(ecn, mtu)
