"""`clustercheck health` (slurm.conf's HealthCheckProgram): judge, then drain or resume through
`drain.apply_decision` (package docstring: the rules).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from clustercheck import __version__
from clustercheck.bounded import Watchdog, run_bounded
from clustercheck.errors import ClusterCheckError, UsageError
from clustercheck.host import CommandResult
from clustercheck.result import CheckResult, ExitCode, HostReport, Report, Status
from clustercheck.slurm.drain import Decision, _counts, apply_decision, decide, drain_reason
from clustercheck.slurm.env import ensure_path, ensure_std_fds, say
from clustercheck.slurm.node_checks import _checks_of, _run_checks, _transports
from clustercheck.slurm.scontrol import NodeState, _scontrol, parse_scontrol_show_node
from clustercheck.slurm.state import (
    DEFAULT_STATE_FILE,
    DEFAULT_SYSLOG,
    LOG_ERR,
    LOG_INFO,
    LOG_NOTICE,
    LOG_WARNING,
    read_state,
    set_state_folder,
    state_path,
    syslog,
    write_markers,
)

#: HealthCheckProgram is killed after 60 s through Slurm 25.11 (domain-facts §D.3).
HEALTH_BUDGET = 50.0


class HealthOptions(NamedTuple):
    profile: str | None = None  # None: the bundled prolog profile; with --replay, the fixture's
    budget: float = HEALTH_BUDGET
    replay: Path | None = None
    checks_dirs: tuple[Path, ...] = ()
    node: str | None = None
    state_file: str = DEFAULT_STATE_FILE
    dry_run: bool = False
    scontrol: str = "scontrol"
    scontrol_timeout: float = 10.0
    syslog_socket: str = DEFAULT_SYSLOG
    fmt: str = "table"
    debug: bool = False
    record_file: str | None = None  # None: DEFAULT_RECORD_FILE, or beside a --state-file given
    trust_fixture_code: bool = False


#: The reasons health set (on persistent storage: a drain outlives a reboot, and so must its record).
DEFAULT_RECORD_FILE = "/var/lib/clustercheck/health-{node}.json"


def record_template(opts: HealthOptions) -> str:
    """The health record's path template: --record-file; else beside a --state-file that is not the
    default (`prolog` in its name becomes `health`); else DEFAULT_RECORD_FILE."""
    if opts.record_file:
        return opts.record_file
    if opts.state_file and opts.state_file != DEFAULT_STATE_FILE:
        path = Path(opts.state_file)
        name = path.name.replace("prolog", "health", 1) if "prolog" in path.name else f"health-{path.name}"
        return str(path.with_name(name))
    return DEFAULT_RECORD_FILE


def health(opts: HealthOptions, env: Mapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """`clustercheck health`: run the profile, then drain, resume or leave the node; the exit code
    is the report's (Slurm ignores it)."""
    start = time.monotonic()
    ensure_std_fds()
    out = out or sys.stdout
    env = os.environ if env is None else env
    ensure_path()
    node = opts.node or env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    # scontrol may need two calls after the checks (show, update): keep time for them
    reserve = min(2 * opts.scontrol_timeout + 1.0, opts.budget / 2)
    state_file = state_path(opts.state_file, node) if opts.state_file else None
    record_file = state_path(record_template(opts), node)
    set_state_folder(state_file.parent if state_file else None, writable=not opts.dry_run)

    def work() -> dict[str, Any]:
        transports = _transports(opts.replay, None if opts.replay else node)
        report = _run_checks(
            opts.profile,
            transports,
            opts.checks_dirs,
            opts.budget - reserve - (time.monotonic() - start),
            debug=opts.debug,
            trust_fixture_code=opts.trust_fixture_code,
        )
        return report.to_json()

    outcome = run_bounded(work, opts.budget - reserve + 0.5 - (time.monotonic() - start), debug=opts.debug)
    if outcome.killed:
        message = (
            f"health node {node}: the checks did not finish within the {opts.budget:g} s budget (their process "
            "and everything it started were killed); nothing was changed"
        )
        syslog(message, LOG_ERR, opts.syslog_socket)
        raise ClusterCheckError(message)
    if outcome.payload is None:
        if outcome.crash_kind == "usage":
            raise UsageError(str(outcome.crash))
        if outcome.crash_kind == "error":
            raise ClusterCheckError(str(outcome.crash))
        raise ClusterCheckError(
            f"health node {node}: could not judge the node, so nothing was changed: "
            + (outcome.crash or f"the process running the checks {outcome.died}")
        )
    payload: dict[str, Any] = outcome.payload

    def expired() -> None:
        message = f"health node {node}: the {opts.budget:g} s budget ran out; nothing more was changed"
        say(f"clustercheck: {message}", sys.stderr)
        syslog(message, LOG_ERR, opts.syslog_socket)

    with Watchdog(opts.budget - (time.monotonic() - start), expired, int(ExitCode.ERROR)):
        _, _, checks = _checks_of(payload)
        if not opts.dry_run:
            write_markers(checks)
        left = max(0.5, opts.budget - (time.monotonic() - start) - 0.5)
        shown = _scontrol([opts.scontrol, "show", "node", node], min(opts.scontrol_timeout, left / 2))
        unread: str | None = None  # why the node's Slurm state could not be read
        state: NodeState | None = None
        if not shown.ok:
            said = (shown.stderr or shown.stdout).strip().splitlines()
            unread = f"{shown.describe()}" + (f": {said[0]}" if said else "")
            if not opts.dry_run:
                raise ClusterCheckError(f"cannot read node {node}'s state, so nothing was changed: {unread}")
        else:
            try:
                state = parse_scontrol_show_node(shown.stdout, node)
            except ValueError as exc:
                if not opts.dry_run:
                    raise ClusterCheckError(f"{exc}; nothing was changed") from exc
                unread = str(exc)
        if state is None:  # --dry-run only: what the checks alone decide, said as such
            decision = _decision_without_state(node, checks)
        else:
            prolog_state = read_state(state_file) if state_file else None
            record = read_state(record_file)
            decision = decide(state, checks, prolog_state, record)
        argv = decision.argv(node, opts.scontrol)
        done: CommandResult | None = None
        if argv is not None and not opts.dry_run:
            done = apply_decision(
                decision,
                node,
                record_file=record_file,
                record=record,
                scontrol=opts.scontrol,
                timeout=min(opts.scontrol_timeout, max(0.5, opts.budget - (time.monotonic() - start))),
            )
            assert done is not None
            if done.ok:
                verb = "drained" if decision.action == "drain" else "resumed"
                message = f"health node {node}: {verb}: " + (decision.reason or decision.why)
                syslog(message, LOG_WARNING if decision.action == "drain" else LOG_NOTICE, opts.syslog_socket)
            else:
                detail = (done.stderr or done.stdout).strip()
                message = f"health node {node}: `{shlex.join(argv)}` failed: {done.describe()} {detail}"
                syslog(message, LOG_ERR, opts.syslog_socket)
        elif argv is None and any(c.status is Status.FAIL for c in checks):
            syslog(f"health node {node}: failing checks, but {decision.why}", LOG_INFO, opts.syslog_socket)

        if opts.fmt == "json":
            text = json.dumps(
                {
                    "clustercheck": __version__,
                    "node": node,
                    "state": None if state is None else state.state,
                    "reason": None if state is None else state.reason,
                    **({"state_unreadable": unread} if unread is not None else {}),
                    "action": decision.action,
                    "why": decision.why,
                    "new_reason": decision.reason,
                    "command": argv,
                    "dry_run": opts.dry_run,
                    "done": None if done is None else done.ok,
                    "report": payload,
                },
                indent=2,
            )
            say(text, out)
        else:
            import io

            from clustercheck import formats

            host, profile_name, _ = _checks_of(payload)
            buffer = io.StringIO()
            formats.render(Report(__version__, profile_name, (HostReport(host, tuple(checks)),)), "table", buffer)
            lines = [buffer.getvalue().rstrip("\n")]
            if state is None:
                lines.append(f"{node}: its Slurm state could not be read ({unread})")
                lines.append(f"{node}: the decision below is the checks' alone")
            else:
                lines.append(f"{node}: {state.state}" + (f", reason: {state.reason}" if state.reason else ""))
            if argv is None:
                lines.append(f"{node}: nothing to do: {decision.why}")
            elif opts.dry_run:
                lines.append(f"{node}: would {decision.action} ({decision.why}):\n  {shlex.join(argv)}")
            else:
                lines.append(f"{node}: {decision.action}: {decision.why}\n  {shlex.join(argv)}")
            say("\n".join(lines), out)
    if done is not None and not done.ok:
        detail = (done.stderr or done.stdout).strip()
        raise ClusterCheckError(f"`{shlex.join(argv or [])}` failed: {done.describe()}: {detail}")
    code = Report(__version__, "", (HostReport(node, tuple(checks)),)).exit_code
    if unread is not None:  # the decision could not be finished: an error, unless a check failed
        say(f"clustercheck: cannot read node {node}'s state ({unread}); --dry-run: nothing was changed", sys.stderr)
        return int(ExitCode.FAIL if code is ExitCode.FAIL else ExitCode.ERROR)
    return int(code)


def _decision_without_state(node: str, checks: Sequence[CheckResult]) -> Decision:
    """--dry-run without the node's Slurm state: what the checks alone would have it do.

    The state decides the rest (a drain or down set by others, a reboot pending, clustercheck's own
    drain to resume), so the decision says what it assumes."""
    failed = [c for c in checks if c.status is Status.FAIL]
    errors = [c for c in checks if c.status is Status.ERROR]
    if failed:
        return Decision(
            "drain",
            f"{len(failed)} check(s) failed; if Slurm has {node} up and not drained, down or rebooting "
            "(its state could not be read)",
            drain_reason(failed),
            failed[0].id,
            tuple(c.id for c in failed),
        )
    if errors:
        return Decision(
            "none",
            f"{len(errors)} check(s) could not tell ({errors[0].id}: {errors[0].summary}): no drain, and a drain "
            "clustercheck set would stay",
        )
    return Decision(
        "none",
        f"healthy ({_counts(checks)}): nothing to drain; a drain clustercheck recorded setting would be "
        "resumed, but without the node's Slurm state it cannot tell whether there is one",
    )
