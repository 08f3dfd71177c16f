"""Drain reasons and the drain/resume decisions: pure functions of what the checks found, what
scontrol shows and what clustercheck recorded (`decide`), and `apply_decision`, the one drain and
resume path of `health` and `sweep`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from clustercheck import __version__
from clustercheck.errors import ClusterCheckError
from clustercheck.host import CommandResult
from clustercheck.result import CheckResult, Status
from clustercheck.slurm.scontrol import NodeState, _scontrol
from clustercheck.slurm.state import _now, write_state

#: Every drain reason clustercheck sets starts with this: it is how it knows its own drains.
REASON_PREFIX = "clustercheck:"


#: Longest drain reason set (Slurm sets no limit; `sinfo -R` shows 20 characters by default).
REASON_LIMIT = 200


#: Slurm's own drain reason after a failed Prolog (src/slurmctld/node_mgr.c; domain-facts §D.1).
PROLOG_ERROR = "Prolog error"


# what summaries use beyond ASCII: >= <= != x (times) ... (ellipsis) en/em dash, micro, middle dot
_ASCII = {
    "\u2265": ">=",
    "\u2264": "<=",
    "\u2260": "!=",
    "\u00d7": "x",
    "\u2026": "...",
    "\u2013": "-",
    "\u2014": "-",
    "\u00b5": "u",
    "\u00b7": "-",
}


def sanitize_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """One line of printable ASCII, at most `limit` characters (`...` marks a cut).

    The reason travels through scontrol, slurmctld's state files, sinfo's columns and often
    slurmdbd: control characters, newlines and non-ASCII text have no business there.
    """
    chars = []
    for ch in text:
        if " " <= ch <= "~":
            chars.append(ch)
        elif ch in _ASCII:
            chars.append(_ASCII[ch])
        else:
            chars.append(" " if not ch.isprintable() or ch.isspace() else "?")
    line = " ".join("".join(chars).split())
    if len(line) > limit:
        line = line[: max(0, limit - 3)].rstrip() + "..."
    return line


def drain_reason(failed: Sequence[CheckResult], *, suffix: str = "", with_action: bool = False) -> str:
    """`clustercheck: <check>: <summary>` for the first failed check (+ how many more); with
    `with_action`, ` action=<ACTION>` after it when that check names one (result.ACTIONS), so
    whoever reads `sinfo -R` (or a script) knows what the node asks for."""
    if not failed:
        raise ValueError("a drain reason needs at least one failed check")
    first = failed[0]
    more = f" (+{len(failed) - 1} more failed)" if len(failed) > 1 else ""
    tail = more + (f" action={first.action}" if with_action and first.action else "") + suffix
    head = f"{REASON_PREFIX} {first.id}: "
    summary = sanitize_reason(first.summary, max(10, REASON_LIMIT - len(head) - len(tail)))
    return sanitize_reason(head + summary + tail)


def owns(reason: str | None) -> bool:
    """Whether a node's drain reason is one clustercheck set."""
    return reason is not None and reason.startswith(REASON_PREFIX)


#: A `Prolog error` drain is clustercheck's when its prolog failed the node at most this long before
#: Slurm drained it (the verdict is written as the prolog exits; slurmctld drains on its report)...
PROLOG_EVIDENCE_WINDOW = 600.0


#: ...and at most this long after it (scontrol's reason time has whole seconds; clocks drift a little).
CLOCK_SLACK = 60.0


#: How many reasons the health record keeps per node.
RECORD_KEEP = 20


class Decision(NamedTuple):
    """What `clustercheck health` does to a node: drain (with `reason`), resume, or nothing."""

    action: str  # "drain", "resume", "none"
    why: str
    reason: str | None = None
    check: str | None = None  # the (first) check the drain is for (kept in the health record)
    checks: tuple[str, ...] = ()  # every check that failed then

    def argv(self, node: str, scontrol: str = "scontrol") -> list[str] | None:
        """The scontrol command that carries the decision out (None for "none")."""
        if self.action == "drain":
            return [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={self.reason}"]
        if self.action == "resume":
            return [scontrol, "update", f"NodeName={node}", "State=RESUME"]
        return None


def reason_time(node: NodeState) -> float | None:
    """The epoch at which the node's reason was set (scontrol's `[user@2026-11-29T22:39:14]`,
    local time), or None when scontrol did not say."""
    if not node.reason_set_by or "@" not in node.reason_set_by:
        return None
    stamp = node.reason_set_by.rsplit("@", 1)[1]
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def recorded_drain(node: NodeState, record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The entry of the health record for the node's current reason, when clustercheck set it.

    Owning a drain takes more than the `clustercheck:` prefix (an admin may write `clustercheck:
    ... HOLD for RMA, do not resume`): the very reason must be one clustercheck set on this node
    and kept a record of, and scontrol's time for it must be the time it was set then.
    """
    if not record or record.get("node") != node.name or not owns(node.reason):
        return None
    drains = record.get("drains")
    if not isinstance(drains, list):
        return None
    shown_at = reason_time(node)
    for entry in reversed(drains):
        if not isinstance(entry, dict) or entry.get("reason") != node.reason:
            continue
        stamp = entry.get("timestamp")
        if shown_at is None or not isinstance(stamp, (int, float)) or abs(shown_at - stamp) > CLOCK_SLACK:
            continue  # the same words, set again later by someone else
        return entry
    return None


def _why_not_resume(checks: Sequence[CheckResult], entry: Mapping[str, Any]) -> str | None:
    """Why passing checks are not yet evidence the drain's cause is gone (None: they are)."""
    for c in checks:
        data = c.data if isinstance(c.data, Mapping) else {}
        if c.status is Status.SKIP and data.get("hardware_absent"):
            return f"{c.id} skipped because the hardware it judges is not visible ({c.summary}): that is not a pass"
    drained_for = {entry.get("check"), *(entry.get("checks") or [])}
    for c in checks:
        data = c.data if isinstance(c.data, Mapping) else {}
        window = data.get("window")
        if c.id in drained_for and isinstance(window, str) and window != "boot":
            return (
                f"{c.id} looked only {window}: what it drained for is gone only after a reboot or a reset "
                "(resume by hand once fixed: scontrol update NodeName=... State=RESUME)"
            )
    return None


def decide(
    node: NodeState,
    checks: Sequence[CheckResult],
    prolog_state: Mapping[str, Any] | None,
    record: Mapping[str, Any] | None = None,
    *,
    with_action: bool = False,
) -> Decision:
    """The health decision for one node: pure, so every branch is tested without Slurm.

    `record` is what the health record file holds: the reasons clustercheck set on this node.
    `with_action` puts the failed check's action in a new drain reason (`clustercheck sweep`).
    """
    failed = [c for c in checks if c.status is Status.FAIL]
    errors = [c for c in checks if c.status is Status.ERROR]
    want = drain_reason(failed, with_action=with_action) if failed else None
    first = failed[0].id if failed else None
    ids = tuple(c.id for c in failed)
    shown = f"{node.state}" + (f", reason {node.reason!r}" if node.reason else "")

    if node.reboot_pending:
        return Decision("none", f"{node.name} has a reboot pending ({shown}): draining or resuming could cancel it")
    entry = recorded_drain(node, record) if node.drained else None
    if entry is not None:
        if want is not None:
            if want == node.reason:
                return Decision("none", f"already drained by clustercheck for this: {node.reason}")
            return Decision("drain", f"still failing; the reason changes from {node.reason!r}", want, first, ids)
        if errors:
            return Decision(
                "none",
                f"drained by clustercheck; {len(errors)} check(s) could not tell "
                f"({errors[0].id}: {errors[0].summary}): the drain stays until every check passes",
            )
        blocked = _why_not_resume(checks, entry)
        if blocked is not None:
            return Decision("none", f"drained by clustercheck; the drain stays: {blocked}")
        return Decision("resume", f"every check passes ({_counts(checks)}): resuming clustercheck's own drain")
    if node.drained and node.reason == PROLOG_ERROR:
        evidence, why_not = _prolog_evidence(prolog_state, node)
        if evidence:
            assert prolog_state is not None
            job = _job_id(prolog_state)
            prolog_reason = str(prolog_state.get("reason") or f"{REASON_PREFIX} the prolog failed the node")
            refined = sanitize_reason(prolog_reason + f" (prolog of job {job})")
            prolog_ids = tuple(
                str(c.get("id"))
                for c in prolog_state.get("checks") or []
                if isinstance(c, dict) and c.get("status") == "fail"
            )
            if want is not None:
                return Decision(
                    "drain", "Slurm drained it for the clustercheck prolog's failure; it still fails", want, first, ids
                )
            return Decision(
                "drain",
                f"Slurm drained it as {PROLOG_ERROR!r} for the clustercheck prolog's failure: naming the reason "
                "(a later run resumes it if every check still passes)",
                refined,
                prolog_ids[0] if prolog_ids else None,
                prolog_ids,
            )
        return Decision(
            "none",
            f"{node.name} is {shown}, not set by clustercheck: left alone (the clustercheck prolog "
            f"did not fail it, as far as it can tell: {why_not})",
        )
    if node.drained or node.down or "FAIL" in node.flags or node.base in ("FAIL", "FAILING", "MAINT"):
        why = f"{node.name} is {shown}, not set by clustercheck: left alone"
        if owns(node.reason):
            why += " (its words look like clustercheck's, but clustercheck keeps no record of setting them)"
        return Decision("none", why)
    if want is not None:
        return Decision("drain", f"{len(failed)} check(s) failed", want, first, ids)
    return Decision("none", f"healthy ({_counts(checks)}); {node.name} is {shown}")


def _job_id(state: Mapping[str, Any]) -> str | None:
    job = state.get("job")
    value = job.get("job_id") if isinstance(job, dict) else None
    return str(value) if value else None


def _prolog_evidence(state: Mapping[str, Any] | None, node: NodeState) -> tuple[bool, str]:
    """Whether the prolog's state file shows clustercheck's prolog made this `Prolog error` drain:
    written for this node, by the prolog of a job (slurmd sets SLURM_JOB_ID), with a failing
    verdict, just before the drain's time. (True, "") or (False, why not)."""
    if not state:
        return False, "no prolog state file"
    if state.get("mode") != "prolog" or state.get("node") != node.name:
        return False, f"the prolog state file is for {state.get('mode')} of node {state.get('node')}"
    if not (
        state.get("verdict") == "fail" or (state.get("verdict") == "internal-error" and state.get("exit_code") != 0)
    ):
        return False, f"its last verdict was {state.get('verdict')!r} (another prolog script failed it?)"
    if _job_id(state) is None:
        return False, "the failing verdict names no job: it was not a Slurm prolog"
    drained_at = reason_time(node)
    stamp = state.get("timestamp")
    if drained_at is None or not isinstance(stamp, (int, float)):
        return False, "the drain's time or the verdict's time is unknown"
    if not drained_at - PROLOG_EVIDENCE_WINDOW <= stamp <= drained_at + CLOCK_SLACK:
        return False, (
            f"its failing verdict (job {_job_id(state)}, {state.get('time')}) is not from the job the drain "
            f"followed (drained {node.reason_set_by})"
        )
    return True, ""


def add_to_record(
    record: Mapping[str, Any] | None, node: str, reason: str, check: str | None, checks: Sequence[str] = ()
) -> dict[str, Any]:
    stamp, epoch = _now()
    drains = [d for d in (record or {}).get("drains") or [] if isinstance(d, dict)] if record else []
    drains.append({"reason": reason, "check": check, "checks": list(checks), "time": stamp, "timestamp": epoch})
    return {"clustercheck": __version__, "mode": "health", "node": node, "drains": drains[-RECORD_KEEP:]}


def apply_decision(
    decision: Decision,
    node: str,
    *,
    record_file: Path,
    record: Mapping[str, Any] | None,
    scontrol: str = "scontrol",
    timeout: float = 10.0,
    who: str = "health",
) -> CommandResult | None:
    """Carry a decision out with scontrol (None: nothing to do). The one drain and resume path of
    `health` and `sweep`: a drain's reason goes into the record first - a drain clustercheck set
    but did not record stays (safe), never the other way round - and a record that cannot be
    written changes nothing (ClusterCheckError)."""
    argv = decision.argv(node, scontrol)
    if argv is None:
        return None
    if decision.action == "drain":
        try:
            entry = add_to_record(record, node, decision.reason or "", decision.check, decision.checks)
            write_state(record_file, entry)
        except OSError as exc:
            raise ClusterCheckError(
                f"{who} node {node}: would drain ({decision.reason}), but cannot keep its record in "
                f"{record_file} ({exc.strerror or exc}), without which it could never resume it; "
                "nothing was changed"
            ) from exc
    return _scontrol(argv, timeout)


def _counts(checks: Sequence[CheckResult]) -> str:
    counts: dict[str, int] = {}
    for c in checks:
        counts[c.status.value] = counts.get(c.status.value, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items()) or "no checks"
