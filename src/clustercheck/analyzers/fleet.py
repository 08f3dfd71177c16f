"""One report for the fleet: problems grouped, unreachable hosts folded, drift, stragglers.

Pure: it reads a `Report` (one run, or many merged by `clustercheck report`) and says what
500 nodes have in common, in a few lines. Every format that shows a fleet (table, html,
`report --format json`) uses these groupings, so they never disagree.

- groups: one per distinct problem: a check, a bad status (fail, error, warn), the action it
  asks for (result.ACTIONS: RESET_GPU, REBOOT, ...; a different action is a different fix, so a
  different row) and a summary *shape*, with the folded hostlist of the hosts that have it
  (`gpu[003,017-019]`). Different problems of one check are different rows, each with its
  own hosts. Summaries that differ only in their values — numbers, versions, GPU UUIDs,
  PCI addresses — are one problem: "15.2 GiB of memory, expected at least 20 GiB" on one
  node and "15.6 GiB ..." on another need the same fix, and a 500-node fleet must not get
  one row per value. The row shows every value that varies (`{15.2,15.6} GiB`, a range
  `{3..17}` for many numbers), and each host's exact summary stays in `summaries`;
  words never fold (`nvidia_uvm is not loaded` and `nvidia_peermem is not loaded` stay
  two rows);
- unreachable: hosts that could not be reached, one entry per distinct cause
  (`connection refused (port 22)`), instead of one identical error row per check;
- hosts: per host, its problems on one line, each with its action (the `--by host` view);
- drift: facts that should be the same on every node — what checks put under
  `data["facts"]` (kernel release, driver version, GPU count ...) — with the majority value
  and the hosts that differ, even when each of them passes its own thresholds;
- stragglers: hosts whose checks took far longer than the fleet's median (a sick node, a
  slow filesystem, a struggling BMC).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import median
from typing import Any

from clustercheck.hostlist import fold
from clustercheck.result import CheckResult, HostReport, Report, Status

#: A host is a straggler when its checks took this many times the fleet's median ...
STRAGGLER_FACTOR = 3.0
#: ... and at least this long (sub-second differences are noise, not sickness).
STRAGGLER_MIN_S = 1.0

#: What the runner writes for the checks of a host it could not reach.
UNREACHABLE_PREFIXES = ("not run: host unreachable: ", "host unreachable: ")

# The parts of a summary that are values, not words: GPU UUIDs (whole or shortened), PCI
# addresses, numbers and versions (also inside names: gpu012, mlx5_0).
_VALUE = re.compile(
    r"GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
    r"|GPU-[0-9a-fA-F]{4,}(?:\.\.\.|…)"
    r"|\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b"
    r"|\d+(?:\.\d+)*"
)
#: At most this many distinct values are listed in a folded summary; beyond, a range.
MAX_VALUES = 3


@dataclass(frozen=True)
class Group:
    """One distinct problem and the hosts that have it."""

    check: str
    status: Status
    hosts: tuple[str, ...]
    summary: str  # the summary, with values that differ between hosts as {a,b} or {lo..hi}
    summaries: tuple[tuple[str, int], ...]  # (exact summary, how many hosts), most common first
    action: str = ""  # one of result.ACTIONS, "" when the results name none (an error)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "check": self.check,
            "status": self.status.value,
            "hosts": fold(self.hosts),
            "count": len(self.hosts),
            "summary": self.summary,
            "summaries": [{"summary": s, "hosts": n} for s, n in self.summaries],
        }
        if self.action:
            out["action"] = self.action
        return out


@dataclass(frozen=True)
class Unreachable:
    """Hosts that could not be reached for one cause."""

    cause: str  # short and the same for every host: `connection refused (port 22)`
    hosts: tuple[str, ...]
    messages: tuple[tuple[str, str], ...]  # (host, the full message with its advice)

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "hosts": fold(self.hosts),
            "count": len(self.hosts),
            "messages": dict(self.messages),
        }


@dataclass(frozen=True)
class HostProblems:
    """One host with problems: its worst status and each bad check's summary."""

    host: str
    status: Status
    problems: tuple[CheckResult, ...]
    unreachable: str | None  # the cause, when the host could not be reached

    def line(self) -> str:
        """`gpu.count: 7 GPUs visible, expected 8; gpu.xid: XID 79 ...: reboot the node`."""
        parts = [f"unreachable: {self.unreachable}"] if self.unreachable else []
        parts += [f"{c.id}: {c.summary}" + (f" [{c.action}]" if c.action else "") for c in self.problems]
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status.value,
            "unreachable": self.unreachable,
            "problems": [
                {
                    "check": c.id,
                    "status": c.status.value,
                    "summary": c.summary,
                    **({"action": c.action} if c.action else {}),
                }
                for c in self.problems
            ],
        }


@dataclass(frozen=True)
class Drift:
    fact: str
    majority: str
    majority_hosts: int
    others: tuple[tuple[str, tuple[str, ...]], ...]  # (value, hosts) for each minority value

    def to_json(self) -> dict[str, Any]:
        return {
            "fact": self.fact,
            "majority": self.majority,
            "majority_hosts": self.majority_hosts,
            "others": [{"value": v, "hosts": fold(h), "count": len(h)} for v, h in self.others],
        }


@dataclass(frozen=True)
class Straggler:
    host: str
    duration_s: float
    median_s: float

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "duration_s": round(self.duration_s, 3), "median_s": round(self.median_s, 3)}


@dataclass(frozen=True)
class Fleet:
    hosts_by_status: dict[str, tuple[str, ...]]
    groups: tuple[Group, ...]
    unreachable: tuple[Unreachable, ...]
    hosts: tuple[HostProblems, ...]  # the hosts with problems, worst first
    drift: tuple[Drift, ...]
    stragglers: tuple[Straggler, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": {s: {"count": len(h), "hosts": fold(h) if h else ""} for s, h in self.hosts_by_status.items()},
            "groups": [g.to_json() for g in self.groups],
            "unreachable": [u.to_json() for u in self.unreachable],
            "problem_hosts": [h.to_json() for h in self.hosts],
            "drift": [d.to_json() for d in self.drift],
            "stragglers": [s.to_json() for s in self.stragglers],
        }


_BAD = (Status.FAIL, Status.ERROR, Status.WARN)
_ORDER = {s: i for i, s in enumerate(_BAD)}


def unreachable_message(check: CheckResult) -> str | None:
    """The connection error, when this result only says the host could not be reached."""
    if check.status is not Status.ERROR:
        return None
    for prefix in UNREACHABLE_PREFIXES:
        if check.summary.startswith(prefix):
            return check.summary[len(prefix) :]
    return None


# The SSH transport's messages (transports/ssh/), shortened to what hosts share.
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.S), cause)
    for pattern, cause in (
        (r"connection refused by .* on port (\d+)\?", r"connection refused (port \1)"),
        (r"no answer from .* within (\S+) s", r"no answer within \1 s (host down, or a firewall drops SSH?)"),
        (r"cannot resolve the host name", "the host name does not resolve (check the name or its HostName)"),
        (
            r"unknown SSH host key",
            "unknown SSH host key (check it, then re-run with --accept-new-host-keys; -v shows each key)",
        ),
        (r"host key of .* has CHANGED", "REFUSED: the SSH host key has CHANGED (-v shows what to do)"),
        (r"host key of .* is REVOKED", "the SSH host key is REVOKED"),
        (r"SSH authentication failed as ([^@\s]+)@", r"SSH authentication failed as \1 (-v shows the details)"),
        (r"SSH authentication with .* got no answer", "SSH authentication got no answer"),
        (r"did not answer as an SSH server within (\S+) s", r"no SSH server answered within \1 s (wrong port?)"),
        (r"did not complete the SSH handshake within (\S+) s", r"the SSH handshake did not complete within \1 s"),
        (r"SSH connection to .* is broken", "the SSH connection broke during the checks"),
    )
)


def unreachable_cause(message: str, host: str) -> str:
    """What a connection error says, without what differs between hosts (names, addresses)."""
    for pattern, cause in _CAUSES:
        match = pattern.search(message)
        if match:
            return match.expand(cause)
    return message.replace(host, "HOST") if host else message


def _shape(summary: str) -> tuple[str, ...]:
    """The words of a summary, with its values left out: what a problem is, not its values."""
    return tuple(_VALUE.split(summary))


def _sort_key(value: str) -> tuple[int, tuple[float, ...], str]:
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return (0, (float(value),), value)
    if re.fullmatch(r"\d+(?:\.\d+)+", value):
        return (0, tuple(float(p) for p in value.split(".")), value)
    return (1, (), value)


def _folded(values: list[str]) -> str:
    distinct = sorted(set(values), key=_sort_key)
    if len(distinct) == 1:
        return distinct[0]
    if len(distinct) <= MAX_VALUES and all(len(v) <= 12 for v in distinct):  # not a list of UUIDs
        return "{" + ",".join(distinct) + "}"
    if all(_sort_key(v)[0] == 0 for v in distinct):
        return "{" + f"{distinct[0]}..{distinct[-1]}" + "}"
    return "{" + f"{len(distinct)} values" + "}"


def fold_summaries(summaries: list[str]) -> str:
    """Summaries of one shape as one: the shared words, each varying value as {a,b} or {lo..hi}."""
    words = _VALUE.split(summaries[0])
    values = [_VALUE.findall(s) for s in summaries]
    out = [words[0]]
    for i, word in enumerate(words[1:]):
        out.append(_folded([v[i] for v in values]))
        out.append(word)
    return "".join(out)


def problem_groups(report: Report) -> list[Group]:
    """One group per (check, bad status, action, summary shape), worst and most common first."""
    grouped: dict[tuple[str, Status, str, tuple[str, ...]], list[tuple[str, str]]] = defaultdict(list)
    for host in report.hosts:
        for check in host.checks:
            if check.status in _BAD and unreachable_message(check) is None:
                key = (check.id, check.status, check.action, _shape(check.summary))
                grouped[key].append((host.host, check.summary))
    first = {h.host: i for i, h in reversed(list(enumerate(report.hosts)))}
    groups = []
    for (check_id, status, action, _), items in grouped.items():
        hosts = tuple(dict.fromkeys(h for h, _ in items))
        summaries = [s for _, s in items]
        counted = tuple(Counter(summaries).most_common())
        groups.append(Group(check_id, status, hosts, fold_summaries(summaries), counted, action))
    return sorted(groups, key=lambda g: (_ORDER[g.status], -len(g.hosts), g.check, first[g.hosts[0]]))


def unreachable_hosts(report: Report) -> list[Unreachable]:
    """Hosts that could not be reached, one entry per distinct cause, most hosts first."""
    by_cause: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for host in report.hosts:
        message = next((m for m in map(unreachable_message, host.checks) if m is not None), None)
        if message is not None:
            by_cause[unreachable_cause(message, host.host)].append((host.host, message))
    found = [Unreachable(cause, tuple(h for h, _ in items), tuple(items)) for cause, items in by_cause.items()]
    return sorted(found, key=lambda u: (-len(u.hosts), u.cause))


def host_problems(report: Report) -> list[HostProblems]:
    """Each host with a problem, one entry each: worst status first, then by name order given."""
    found = []
    for host in report.hosts:
        message = next((m for m in map(unreachable_message, host.checks) if m is not None), None)
        bad = tuple(c for c in host.checks if c.status in _BAD and unreachable_message(c) is None)
        if bad or message is not None:
            cause = unreachable_cause(message, host.host) if message is not None else None
            found.append(HostProblems(host.host, host.status, bad, cause))
    rank = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2}
    return sorted(found, key=lambda h: rank.get(h.status, 3))


def summarize(report: Report) -> Fleet:
    by_status: dict[str, list[str]] = {s.value: [] for s in (Status.OK, Status.WARN, Status.FAIL, Status.ERROR)}
    for host in report.hosts:
        by_status[host.status.value if host.status is not Status.SKIP else "ok"].append(host.host)
    return Fleet(
        {s: tuple(h) for s, h in by_status.items()},
        tuple(problem_groups(report)),
        tuple(unreachable_hosts(report)),
        tuple(host_problems(report)),
        tuple(_drift(report)),
        tuple(_stragglers(report)),
    )


def is_unreachable(host: HostReport) -> bool:
    """Every check of the host says only that the host could not be reached."""
    return bool(host.checks) and all(unreachable_message(c) is not None for c in host.checks)


def _drift(report: Report) -> list[Drift]:
    values: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for host in report.hosts:
        for check in host.checks:
            facts = check.data.get("facts") if isinstance(check.data, dict) else None
            if not isinstance(facts, dict):
                continue
            for name, value in facts.items():
                if isinstance(value, (str, int, float, bool)):
                    values[str(name)][str(value)].append(host.host)
    drift = []
    for name in sorted(values):
        seen = values[name]
        if len(seen) < 2:
            continue
        ranked = sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        (majority, majority_hosts), *others = ranked
        drift.append(Drift(name, majority, len(majority_hosts), tuple((v, tuple(h)) for v, h in others)))
    return drift


def _stragglers(report: Report) -> list[Straggler]:
    durations = {h.host: sum(c.duration_s for c in h.checks) for h in report.hosts}
    if len(durations) < 4:
        return []
    mid = median(durations.values())
    slow = [
        Straggler(host, d, mid)
        for host, d in durations.items()
        if d >= STRAGGLER_MIN_S and d >= STRAGGLER_FACTOR * max(mid, 1e-9)
    ]
    return sorted(slow, key=lambda s: -s.duration_s)
