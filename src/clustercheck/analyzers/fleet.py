"""One report for the fleet: failures grouped by check, drift from the majority, stragglers.

Pure: it reads a `Report` (one run, or many merged by `clustercheck report`) and says what
500 nodes have in common, in a few lines:

- groups: for each check and bad status (fail, error, warn), the folded hostlist of the
  hosts that got it (`gpu[003,017-019]`) and their summaries, most common first;
- drift: facts that should be the same on every node — what checks put under
  `data["facts"]` (kernel release, driver version, GPU count ...) — with the majority value
  and the hosts that differ, even when each of them passes its own thresholds;
- stragglers: hosts whose checks took far longer than the fleet's median (a sick node, a
  slow filesystem, a struggling BMC).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import median
from typing import Any

from clustercheck.hostlist import fold
from clustercheck.result import Report, Status

#: A host is a straggler when its checks took this many times the fleet's median ...
STRAGGLER_FACTOR = 3.0
#: ... and at least this long (sub-second differences are noise, not sickness).
STRAGGLER_MIN_S = 1.0


@dataclass(frozen=True)
class Group:
    check: str
    status: Status
    hosts: tuple[str, ...]
    summaries: tuple[tuple[str, int], ...]  # (summary, how many hosts), most common first

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status.value,
            "hosts": fold(self.hosts),
            "count": len(self.hosts),
            "summaries": [{"summary": s, "hosts": n} for s, n in self.summaries],
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
    drift: tuple[Drift, ...]
    stragglers: tuple[Straggler, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": {s: {"count": len(h), "hosts": fold(h) if h else ""} for s, h in self.hosts_by_status.items()},
            "groups": [g.to_json() for g in self.groups],
            "drift": [d.to_json() for d in self.drift],
            "stragglers": [s.to_json() for s in self.stragglers],
        }


_BAD = (Status.FAIL, Status.ERROR, Status.WARN)


def summarize(report: Report) -> Fleet:
    by_status: dict[str, list[str]] = {s.value: [] for s in (Status.OK, Status.WARN, Status.FAIL, Status.ERROR)}
    for host in report.hosts:
        by_status[host.status.value if host.status is not Status.SKIP else "ok"].append(host.host)

    grouped: dict[tuple[str, Status], list[tuple[str, str]]] = defaultdict(list)
    for host in report.hosts:
        for check in host.checks:
            if check.status in _BAD:
                grouped[(check.id, check.status)].append((host.host, check.summary))
    order = {s: i for i, s in enumerate(_BAD)}
    groups = [
        Group(check_id, status, tuple(h for h, _ in items), tuple(Counter(s for _, s in items).most_common()))
        for (check_id, status), items in sorted(
            grouped.items(), key=lambda kv: (order[kv[0][1]], -len(kv[1]), kv[0][0])
        )
    ]
    return Fleet(
        {s: tuple(h) for s, h in by_status.items()},
        tuple(groups),
        tuple(_drift(report)),
        tuple(_stragglers(report)),
    )


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
