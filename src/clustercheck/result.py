"""Statuses, results and the report: what checks return and what formats render.

Checks make results with `ok() warn() fail() skip()`; only the runner makes `error`
(the check could not tell: timeout, missing tool, unreadable input, a crash).
The exit code comes from the report, never from a format.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


# Worst-status precedence: fail > error > warn > ok = skip.
_SEVERITY = {Status.OK: 0, Status.SKIP: 0, Status.WARN: 1, Status.ERROR: 2, Status.FAIL: 3}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status; ok when there are none."""
    result = Status.OK
    for status in statuses:
        if _SEVERITY[status] > _SEVERITY[result]:
            result = status
    return result


class ExitCode(enum.IntEnum):
    """Nagios plugin convention, so clustercheck serves as a monitoring plugin as it is."""

    OK = 0  # all ok (skips allowed)
    WARN = 1  # worst is warn
    FAIL = 2  # at least one fail
    ERROR = 3  # no fail, at least one error: could not tell
    USAGE = 64  # bad usage or bad input (profile, fixture, hostlist); EX_USAGE of sysexits.h

    @classmethod
    def for_status(cls, status: Status) -> ExitCode:
        return {
            Status.OK: cls.OK,
            Status.SKIP: cls.OK,
            Status.WARN: cls.WARN,
            Status.FAIL: cls.FAIL,
            Status.ERROR: cls.ERROR,
        }[status]


#: What a failing or warning result asks of whoever acts on it (a sweep, a site's drain script):
#: the machine-readable `action` of a result, one of these. A check names its usual one with
#: `@check(action=...)`; a result may name another (`fail(..., action=REBOOT)`).
ACTIONS: dict[str, str] = {
    "RESET_GPU": "reset the GPU (nvidia-smi -r, or a reboot where a reset is refused) and check again",
    "REBOOT": "reboot the node and check again",
    "POWER_CYCLE": "power the node off and on (a cold boot), then check again",
    "REPLACE_HW": "hardware failed a test: open an RMA for the part named",
    "CHECK_CABLE": "reseat or replace the cable or transceiver of the port named",
    "FIX_CONFIG": "correct the node's configuration or software (the remedy names what)",
    "RESTART_SERVICE": "restart the service named, then check again",
    "INVESTIGATE": "no known remedy: an admin must look (the evidence says what was seen)",
}


def checked_action(action: str) -> str:
    """`action` if it is one of ACTIONS (or empty), else ValueError naming the known ones."""
    if action and action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
    return action


@dataclass(frozen=True)
class Result:
    """A check's verdict. `summary` states observed against expected, with units."""

    status: Status
    summary: str
    data: Mapping[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()
    remedy: str = ""
    action: str = ""  # one of ACTIONS, for warn and fail; empty: the check's own (@check(action=))


def ok(summary: str, *, data: Mapping[str, Any] | None = None, evidence: Iterable[str] = ()) -> Result:
    return Result(Status.OK, summary, dict(data or {}), tuple(evidence))


def warn(
    summary: str,
    *,
    remedy: str = "",
    data: Mapping[str, Any] | None = None,
    evidence: Iterable[str] = (),
    action: str = "",
) -> Result:
    return Result(Status.WARN, summary, dict(data or {}), tuple(evidence), remedy, checked_action(action))


def fail(
    summary: str,
    *,
    remedy: str = "",
    data: Mapping[str, Any] | None = None,
    evidence: Iterable[str] = (),
    action: str = "",
) -> Result:
    return Result(Status.FAIL, summary, dict(data or {}), tuple(evidence), remedy, checked_action(action))


def skip(reason: str, *, data: Mapping[str, Any] | None = None, evidence: Iterable[str] = ()) -> Result:
    return Result(Status.SKIP, reason, dict(data or {}), tuple(evidence))


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome on one host, as reported."""

    id: str
    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    remedy: str = ""
    duration_s: float = 0.0
    data: Mapping[str, Any] = field(default_factory=dict)
    action: str = ""  # one of ACTIONS on a warn or fail whose check names one; "" otherwise

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "status": self.status.value,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "remedy": self.remedy,
            "duration_s": round(self.duration_s, 4),
            "data": dict(self.data),
        }
        if self.action:
            out["action"] = self.action
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CheckResult:
        return cls(
            id=str(obj["id"]),
            status=Status(obj["status"]),
            summary=str(obj.get("summary", "")),
            evidence=tuple(str(e) for e in obj.get("evidence", ())),
            remedy=str(obj.get("remedy", "")),
            duration_s=float(obj.get("duration_s", 0.0)),
            data=dict(obj.get("data") or {}),
            action=str(obj.get("action") or "") if str(obj.get("action") or "") in ACTIONS else "",
        )


@dataclass(frozen=True)
class HostReport:
    host: str
    checks: tuple[CheckResult, ...]

    @property
    def status(self) -> Status:
        return worst(c.status for c in self.checks)


@dataclass(frozen=True)
class Report:
    """All hosts' results of one run (or of several merged runs)."""

    version: str
    profile: str
    hosts: tuple[HostReport, ...]

    @property
    def status(self) -> Status:
        return worst(h.status for h in self.hosts)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.for_status(self.status)

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for h in self.hosts:
            for c in h.checks:
                counts[c.status.value] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "clustercheck": self.version,
            "profile": self.profile,
            "hosts": {
                h.host: {"status": h.status.value, "checks": [c.to_json() for c in h.checks]} for h in self.hosts
            },
            "summary": self.counts(),
        }
