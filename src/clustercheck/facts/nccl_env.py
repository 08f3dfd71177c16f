"""NCCL's own reading of its settings: NCCL_IB_HCA / NCCL_SOCKET_IFNAME lists, numbers, nccl.conf.

Pure functions, shared by the `rdma.nccl_env` check (the node's NCCL settings) and
`clustercheck job` (the settings in a job's own environment): how NCCL parses each value
(domain-facts §C.3) and which values turn RDMA off or name HCAs or interfaces the node lacks.
"""

# Sources: docs/domain-facts.md §C.3 (NCCL variables and the NCCL_IB_HCA syntax).

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from clustercheck.facts.infiniband import Port, natural_key, span

# -- NCCL_IB_HCA / NCCL_SOCKET_IFNAME syntax (domain-facts §C.3) -------------------------------

#: NCCL's MAX_IB_DEVS: entries beyond it are ignored.
MAX_IF_ENTRIES = 32


class IfEntry(NamedTuple):
    name: str  # a prefix, or an exact name when the list is exact
    port: int | None  # None: every port (NCCL's -1)

    def __str__(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


class IfList(NamedTuple):
    """A parsed NCCL_IB_HCA / NCCL_SOCKET_IFNAME value, as NCCL itself reads it."""

    raw: str
    exclude: bool
    exact: bool
    entries: tuple[IfEntry, ...]
    problems: tuple[str, ...]  # things NCCL reads differently from what the writer likely meant

    def selects(self, name: str, port: int | None = None) -> bool:
        """NCCL's `matchIfList(...) ^ searchNot`: is this device (and port) used?"""
        return self.matches_any(name, port) != self.exclude

    def matches_any(self, name: str, port: int | None = None) -> bool:
        if not self.entries:  # NCCL: an empty list matches everything
            return True
        return any(self.entry_matches(e, name, port) for e in self.entries)

    def entry_matches(self, entry: IfEntry, name: str, port: int | None = None) -> bool:
        named = name == entry.name if self.exact else name.startswith(entry.name)
        return named and (entry.port is None or port is None or entry.port == port)


def _atoi(text: str) -> int:
    """C atoi: leading blanks, a sign, digits up to the first non-digit; 0 when there are none."""
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else 0


def parse_nccl_if_list(value: str, max_entries: int = MAX_IF_ENTRIES) -> IfList:
    """Parse NCCL_IB_HCA (or NCCL_SOCKET_IFNAME) exactly as NCCL does, and say what surprises.

    NCCL (src/transport/net_ib/init.cc, src/misc/utils.cc parseStringList): a leading `^`
    makes an exclude list, then a leading `=` makes names exact (so `^=` works and `=^`
    does not); entries are `,`-separated, each `name` or `name:port` (port read with atoi);
    names are prefixes unless exact; empty names are skipped; at most 32 entries.
    Never raises: any string is a value NCCL would accept somehow.
    """
    rest = value
    exclude = rest.startswith("^")
    if exclude:
        rest = rest[1:]
    exact = rest.startswith("=")
    if exact:
        rest = rest[1:]
    problems: list[str] = []
    if rest.startswith("^"):
        problems.append(f"`{value}`: `=^` is read as exact names starting with `^`; write `^=` to exclude exact names")
    entries: list[IfEntry] = []
    for chunk in rest.split(","):
        name, colon, port_text = chunk.partition(":")
        if not name:
            if colon or chunk:
                problems.append(f"`{chunk}` has no device name and is ignored")
            continue
        if len(entries) >= max_entries:
            problems.append(f"more than {max_entries} entries: NCCL ignores `{chunk}` and the rest")
            break
        if name != name.strip() or any(c.isspace() for c in name):
            problems.append(f"`{name}` contains blanks, which NCCL keeps: it matches no device")
        if len(name) > 63:
            problems.append(f"`{name[:20]}...` is longer than NCCL's 63-character names")
        port: int | None = None
        if colon:
            port = _atoi(port_text)
            if not re.fullmatch(r"\s*[+-]?\d+.*", port_text) or port < 1:
                problems.append(
                    f"`{chunk}`: port `{port_text}` is read as {port}, which matches no port (ports count from 1)"
                )
            elif not port_text.strip().isdigit():
                problems.append(f"`{chunk}`: NCCL reads only the leading number of `{port_text}` ({port})")
        entries.append(IfEntry(name, port))
    return IfList(value, exclude, exact, tuple(entries), tuple(problems))


def strtoll(text: str) -> int | None:
    """C strtoll(text, NULL, 0) as NCCL's ncclLoadParam uses it: the leading number, else 0; None if empty."""
    text = text.strip()
    if not text:
        return None
    m = re.match(r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)", text)
    if not m:
        return 0
    sign = -1 if m.group(1) == "-" else 1
    digits = m.group(2)
    if digits.lower().startswith("0x"):
        return sign * int(digits, 16)
    if digits.startswith("0") and len(digits) > 1:
        return sign * int(digits, 8)
    return sign * int(digits)


def parse_nccl_conf(text: str) -> list[tuple[str, str, int]]:
    """/etc/nccl.conf -> [(name, value, line)] as NCCL's setEnvFile reads it.

    Lines starting with `#` are skipped; the rest are split at the first `=`, with nothing
    trimmed (so `NCCL_IB_HCA = mlx5_0` sets a variable named `NCCL_IB_HCA `).
    """
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        found.append((name, value, number))
    return found


#: NCCL_NET_GDR_LEVEL values that turn GPUDirect RDMA off (LOC, or legacy 0) — domain-facts §C.3.
GDR_OFF = {"LOC", "0"}


class Setting(NamedTuple):
    name: str
    value: str
    source: str

    def __str__(self) -> str:
        return f"{self.name}={self.value} ({self.source})"


class Findings(NamedTuple):
    fails: list[str]
    warns: list[str]


def judge_nccl_settings(
    settings: dict[str, Setting],
    ports_of: dict[str, list[Port]],
    interfaces: Callable[[], list[str]],
    *,
    allow_sockets: bool = False,
    allow_no_gdr: bool = False,
) -> Findings:
    """Judge the effective NCCL settings of one context against the node's HCA ports and interfaces."""
    out = Findings([], [])
    sockets = out.warns if allow_sockets else out.fails

    s = settings.get("NCCL_IB_DISABLE")
    if s is not None:
        n = strtoll(s.value)
        if n:
            sockets.append(f"{s} turns the IB/RoCE transport off: NCCL uses TCP sockets")
        elif s.value.strip() and not re.fullmatch(r"\s*[+-]?\d.*", s.value):
            out.warns.append(f"{s}: NCCL reads `{s.value}` as 0, so IB is NOT disabled (write 1 or 0)")

    s = settings.get("NCCL_NET")
    if s is not None and s.value.strip().lower() == "socket":
        sockets.append(f"{s} forces the TCP socket transport")

    s = settings.get("NCCL_IB_HCA")
    if s is not None:
        hca_list = parse_nccl_if_list(s.value)
        out.warns.extend(f"{s}: {p}" for p in hca_list.problems)
        all_ports = [p for h in sorted(ports_of, key=natural_key) for p in ports_of[h]]
        chosen = [p for p in all_ports if hca_list.selects(p.hca, p.port)]
        active = [p for p in chosen if p.state == "ACTIVE"]
        names = [f"{p.hca}:{p.port}" for p in all_ports]
        if not active:
            what = "selects none of" if not chosen else "selects only ports that are not ACTIVE among"
            out.fails.append(
                f"{s} {what} this node's HCA ports ({span(names) or 'none'}): NCCL finds no IB device "
                "and falls back to TCP sockets"
            )
        elif not hca_list.exclude:
            for entry in hca_list.entries:
                hits = [p for p in all_ports if hca_list.entry_matches(entry, p.hca, p.port)]
                if not hits:
                    out.warns.append(f"{s}: entry `{entry}` matches no HCA port of this node")
                elif not hca_list.exact and entry.name in ports_of:
                    extra = sorted({p.hca for p in hits} - {entry.name}, key=natural_key)
                    if extra:
                        out.warns.append(
                            f"{s}: `{entry.name}` is a prefix, so it also selects {', '.join(extra)}; "
                            f"write `={entry.name}` for that HCA alone"
                        )

    s = settings.get("NCCL_SOCKET_IFNAME")
    if s is not None:
        if_list = parse_nccl_if_list(s.value)
        out.warns.extend(f"{s}: {p}" for p in if_list.problems)
        present = interfaces()
        if not [i for i in present if if_list.selects(i)]:
            out.fails.append(
                f"{s} matches none of this node's interfaces ({', '.join(present) or 'none'}): "
                "NCCL cannot bootstrap or find an OOB interface"
            )

    for name in ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL"):
        s = settings.get(name)
        if s is not None and s.value.strip().upper() in GDR_OFF:
            (out.warns if allow_no_gdr else out.fails).append(
                f"{s} turns GPUDirect RDMA off: every transfer is staged through host memory"
            )
    s = settings.get("NCCL_NET_GDR_READ")
    if s is not None and strtoll(s.value) == 0:
        out.warns.append(f"{s}: sends are read from host memory instead of GPU memory (GPUDirect RDMA read is off)")
    return out


def effective_settings(sources: Sequence[tuple[str, Iterable[tuple[str, str]]]]) -> dict[str, Setting]:
    """The effective NCCL_* settings: the first source that sets a variable wins."""
    settings: dict[str, Setting] = {}
    for source, pairs in sources:
        for name, value in pairs:
            if name.startswith("NCCL_") and name not in settings:
                settings[name] = Setting(name, value, source)
    return settings
