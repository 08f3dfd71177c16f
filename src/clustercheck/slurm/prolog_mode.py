"""`clustercheck prolog`: the verdict on every job start, within a hard budget, and its own
command line, read without Typer and without ever giving up (package docstring: the rules).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from clustercheck import __version__, options
from clustercheck.bounded import Watchdog, run_bounded
from clustercheck.result import ExitCode, Status
from clustercheck.slurm.drain import REASON_PREFIX, _counts, drain_reason, sanitize_reason
from clustercheck.slurm.env import JobContext, NoSlurmCommands, ensure_path, ensure_std_fds, say, set_current_job
from clustercheck.slurm.node_checks import _checks_of, _run_checks, _transports
from clustercheck.slurm.state import (
    DEFAULT_STATE_FILE,
    DEFAULT_SYSLOG,
    LOG_ERR,
    LOG_INFO,
    LOG_WARNING,
    _now,
    set_state_folder,
    state_path,
    syslog,
    write_markers,
    write_state,
)

PROLOG_BUDGET = 10.0


EXIT_INTERNAL = 70  # EX_SOFTWARE: clustercheck could not judge the node (with --on-internal-error fail)


class PrologOptions(NamedTuple):
    profile: str | None = None  # None: the bundled prolog profile; with --replay, the fixture's
    budget: float = PROLOG_BUDGET
    replay: Path | None = None
    checks_dirs: tuple[Path, ...] = ()
    state_file: str | None = None  # None: DEFAULT_STATE_FILE, or none at all with --replay/--dry-run
    on_internal_error: str = "pass"
    syslog_socket: str | None = None  # None: DEFAULT_SYSLOG, or none with --replay/--dry-run
    debug: bool = False
    dry_run: bool = False
    trust_fixture_code: bool = False


def prolog(
    opts: PrologOptions,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    *,
    usage_error: str | None = None,
) -> int:
    """`clustercheck prolog`: judge the node for the job about to start; returns the exit code.

    Only a failed check makes it non-zero. Everything that is clustercheck's own fault - a
    mistake on the Prolog= line (`usage_error`), a closed or broken stdout, a state file it
    cannot write, a crash, the budget - follows --on-internal-error and is said on stderr (when
    it can be written) and in syslog, naming the cause. An exception that escapes is the
    boundary's: run it through cli.run_prolog (`internal_error_policy` says what it does).
    """
    start = time.monotonic()
    ensure_std_fds()
    return _prolog(opts, env, out, start, usage_error)


def internal_error_policy(opts: PrologOptions) -> tuple[int, Callable[[str], None]]:
    """What the one error boundary (cli.guarded's own-fault mode, cli.run_prolog) does with an
    exception that escapes `prolog()`, the last line of defence: a bug must not drain. The exit
    code --on-internal-error asks for, and how to say it loudly (stderr and syslog), given
    "TypeName: message"."""
    policy_code = 0 if opts.on_internal_error == "pass" else EXIT_INTERNAL

    def report(what: str) -> None:
        action = "passing the node" if policy_code == 0 else "failing the node: Slurm drains it"
        message = f"prolog: INTERNAL ERROR, could not judge the node: {what}; {action} (--on-internal-error)"
        say(f"clustercheck: {message}", sys.stderr)
        syslog(message, LOG_ERR, DEFAULT_SYSLOG if opts.syslog_socket is None else opts.syslog_socket)

    return policy_code, report


def _prolog(
    opts: PrologOptions, env: Mapping[str, str] | None, out: TextIO | None, start: float, usage_error: str | None
) -> int:
    out = out or sys.stdout
    job = JobContext.from_env(os.environ if env is None else env)
    set_current_job(job)
    ensure_path()
    # --replay and --dry-run touch nothing of this node unless told where (a fire drill must not
    # leave a verdict that `health` would trust, under this node's name)
    quiet = opts.replay is not None or opts.dry_run
    state_template = opts.state_file if opts.state_file is not None else ("" if quiet else DEFAULT_STATE_FILE)
    if opts.syslog_socket is not None:
        log_socket = opts.syslog_socket
    else:
        log_socket = "" if (opts.dry_run or (opts.replay is not None and opts.state_file is None)) else DEFAULT_SYSLOG
    if opts.dry_run:
        state_template, log_socket = "", ""
    would_state = opts.state_file if opts.state_file is not None else ("" if opts.replay else DEFAULT_STATE_FILE)
    would_log = opts.syslog_socket if opts.syslog_socket is not None else ("" if opts.replay else DEFAULT_SYSLOG)
    node = job.node or (opts.replay.name if opts.replay is not None else os.uname().nodename.split(".")[0])
    policy_code = 0 if opts.on_internal_error == "pass" else EXIT_INTERNAL
    base: dict[str, Any] = {
        "clustercheck": __version__,
        "mode": "prolog",
        "node": node,
        "job": job.to_json(),
        "budget_s": opts.budget,
        "on_internal_error": opts.on_internal_error,
    }
    if opts.replay is not None:
        base["replay"] = str(opts.replay)
    notes: list[str] = []  # clustercheck's own troubles that did not stop the verdict

    def where() -> str:
        return f"node {node}" + (f", job {job.job_id}" if job.job_id else "")

    def replayed() -> str:
        return f"; replayed from {opts.replay}, not this machine" if opts.replay is not None else ""

    def state_file() -> Path | None:
        return state_path(state_template, node) if state_template else None

    def finish(state: dict[str, Any], message: str, severity: int, lines: list[str]) -> None:
        path = state_file()
        if opts.dry_run:
            target = state_path(would_state, node) if would_state else None
            lines.append(f"  dry run: nothing was written; the state file {target or '(none)'} would get:")
            lines += ["    " + line for line in json.dumps(state, indent=1).splitlines()]
            lines.append(f"  dry run: syslog {would_log or '(none)'} would get: {message}")
        elif path is not None:
            try:
                write_state(path, state)
                lines.append(f"  state: {path}")
            except (OSError, ValueError) as exc:
                why = getattr(exc, "strerror", None) or str(exc)
                notes.append(f"the state file {path} could not be written: {why}")
        else:
            lines.append("  state: none written" + (" (a replay names no state file)" if opts.replay else ""))
        for note in notes:
            lines.append(f"  clustercheck's own problem (the verdict stands): {note}")
        full = message + replayed() + "".join(f"; {n}" for n in notes)
        if log_socket:
            syslog(full, severity if not notes else min(severity, LOG_WARNING), log_socket)
        printed = say("\n".join(lines), out)
        if printed and not opts.dry_run:
            problem = f"prolog {where()}: the verdict could not be written to stdout ({printed})"
            say(f"clustercheck: {problem}", sys.stderr)
            if log_socket:
                syslog(problem, LOG_WARNING, log_socket)
        if notes:
            say(f"clustercheck: prolog {where()}: " + "; ".join(notes), sys.stderr)

    def cannot_judge(what: str, code: int) -> int:
        action = (
            "passing the node (--on-internal-error pass)"
            if code == 0
            else "failing the node: Slurm drains it (--on-internal-error fail)"
        )
        message = f"prolog {where()}: INTERNAL ERROR, could not judge the node: {what}; {action}"
        say(f"clustercheck: {message}", sys.stderr)
        stamp, epoch = _now()
        reason = sanitize_reason(f"{REASON_PREFIX} internal error: {what}") if code else ""
        state = {
            **base,
            "node": node,
            "time": stamp,
            "timestamp": epoch,
            "duration_s": round(time.monotonic() - start, 3),
            "verdict": "internal-error",
            "exit_code": code,
            "reason": reason,
            "error": what,
            "checks": [],
        }
        finish(state, message, LOG_ERR, [])
        return code

    def usage_code() -> int:
        return 0 if policy_code == 0 else int(ExitCode.USAGE)

    if usage_error is not None:
        return cannot_judge(f"bad command line: {usage_error}", usage_code())
    if opts.state_file is not None and opts.state_file.strip() and state_path(opts.state_file, node).name == "":
        notes.append(f"--state-file {opts.state_file!r} names no file")
        state_template = ""

    # keep some of the budget for stopping what still runs and writing the verdict
    reserve = min(1.0, opts.budget / 5)
    kill_at = opts.budget - min(0.3, opts.budget / 20) - (time.monotonic() - start)

    def work() -> dict[str, Any]:
        transports = _transports(opts.replay, None if opts.replay else job.node)
        left = opts.budget - (time.monotonic() - start) - reserve
        report = _run_checks(
            opts.profile,
            transports,
            opts.checks_dirs,
            left,
            debug=opts.debug,
            wrap=NoSlurmCommands,
            trust_fixture_code=opts.trust_fixture_code,
        )
        return report.to_json()

    if state_template:
        set_state_folder(state_path(state_template, node).parent, writable=True)
    elif opts.dry_run and would_state:
        set_state_folder(state_path(would_state, node).parent, writable=False)
    outcome = run_bounded(work, kill_at, debug=opts.debug)
    if outcome.killed:
        return cannot_judge(
            f"the {opts.budget:g} s budget ran out before the checks could be judged",
            policy_code,
        )
    if outcome.payload is None:
        if outcome.crash is None:
            return cannot_judge(f"the process running the checks {outcome.died}", policy_code)
        what = outcome.crash.replace("\n", "; ")
        return cannot_judge(what, usage_code() if outcome.crash_kind == "usage" else policy_code)

    def judged() -> int:
        nonlocal node
        host, profile_name, checks = _checks_of(outcome.payload)
        if opts.replay is not None and not job.node and host:
            node = host
            base["node"] = node
        if state_template:
            set_state_folder(state_path(state_template, node).parent, writable=True)
            notes.extend(write_markers(checks))
        failed = [c for c in checks if c.status is Status.FAIL]
        noted = [c for c in checks if c.status in (Status.WARN, Status.ERROR)]
        reason = drain_reason(failed) if failed else ""
        duration = time.monotonic() - start
        code = int(ExitCode.FAIL) if failed else 0
        stamp, epoch = _now()
        state = {
            **base,
            "host": host or node,
            "profile": profile_name,
            "time": stamp,
            "timestamp": epoch,
            "duration_s": round(duration, 3),
            "verdict": "fail" if failed else "pass",
            "exit_code": code,
            "reason": reason,
            "checks": [{"id": c.id, "status": c.status.value, "summary": c.summary} for c in checks],
        }
        if failed:
            message = f"prolog {where()}: FAIL, the node must not run the job: {reason}"
            severity = LOG_ERR
        elif noted:
            details = "; ".join(f"{c.id} {c.status.value}: {sanitize_reason(c.summary, 120)}" for c in noted)
            message = f"prolog {where()}: pass ({_counts(checks)}): {details}"
            severity = LOG_WARNING
        else:
            message = f"prolog {where()}: pass ({_counts(checks)})"
            severity = LOG_INFO
        if job.problems:
            message += "; environment: " + "; ".join(job.problems)
            severity = min(severity, LOG_WARNING)
        message += f" in {duration:.2f} s"
        lines = [f"clustercheck {message}{replayed()}"] + [
            f"  {c.id}: {c.status.value}: {c.summary}" for c in failed + noted
        ]
        finish(state, message, severity, lines)
        return code

    def expired() -> None:
        message = f"prolog {where()}: INTERNAL ERROR: the {opts.budget:g} s budget ran out writing the verdict"
        say(f"clustercheck: {message}", sys.stderr)
        syslog(message, LOG_ERR, log_socket or DEFAULT_SYSLOG)

    with Watchdog(opts.budget - (time.monotonic() - start), expired, policy_code):
        return judged()


# the prolog's options (clustercheck.options, as its Typer command declares them) and the global --debug
PROLOG_OPTIONS = options.with_values(options.PROLOG)
PROLOG_FLAGS = {**options.flags(options.PROLOG), "--debug": "debug"}


def parse_prolog_args(args: Sequence[str]) -> tuple[PrologOptions, str | None]:
    """The prolog's options from its command line, and what was wrong with it (None: nothing).

    A Prolog= line runs on every node at every job start: a mistake in it must not drain the
    cluster, so this never fails. It reads every option it knows, keeps the defaults for what
    it cannot read (the --on-internal-error policy included, when its value is wrong), and
    says what it could not; `prolog()` then follows the policy, naming the mistake.
    """
    values: dict[str, Any] = {}
    checks: list[Path] = []
    problems: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, inline = arg.partition("=")
        if not eq and arg in PROLOG_FLAGS:
            values[PROLOG_FLAGS[arg]] = True
            continue
        if name not in PROLOG_OPTIONS:
            problems.append(f"unknown option {arg!r}" if arg.startswith("-") else f"unexpected argument {arg!r}")
            continue
        if eq:
            value = inline
        elif rest and rest[0].partition("=")[0] not in {**PROLOG_OPTIONS, **PROLOG_FLAGS}:
            value = rest.pop(0)
        else:
            problems.append(f"{name} needs a value")
            continue
        key = PROLOG_OPTIONS[name]
        if key == "checks":
            checks.append(Path(value))
            continue
        if key in values:
            problems.append(f"{name} given twice")
        if key == "budget":
            try:
                budget = float(value)
            except ValueError:
                budget = -1.0
            if not 0.1 <= budget < 1e6:
                problems.append(f"--budget {value!r} is not a number of seconds from 0.1 on")
                continue
            values[key] = budget
        elif key == "on_internal_error":
            if value not in ("pass", "fail"):
                problems.append(f"--on-internal-error {value!r} is not pass or fail")
                continue
            values[key] = value
        elif key == "replay":
            values[key] = Path(value)
        else:
            values[key] = value
    options = PrologOptions(checks_dirs=tuple(checks), **values)
    return options, ("; ".join(problems) or None)
