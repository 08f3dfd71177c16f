"""Slurm integration: the prolog and health-check modes, and the drain reasons they own.

`clustercheck prolog` runs in slurmd's Prolog on every job start (domain-facts §D.1):

- a hard time budget (`--budget`, default 10 s): checks not done by then are `error`, and a
  watchdog ends the process at the budget whatever is stuck;
- it reads the prolog environment (§D.2): `SLURMD_NODENAME`, `SLURM_JOB_ID`, the job's GPUs
  (`SLURM_JOB_GPUS`, `CUDA_VISIBLE_DEVICES` - host-relative indices in the prolog) - and
  gives it to checks as `current_job()`;
- it never runs Slurm's client commands (`scontrol`, `squeue`, ...; slurm.conf(5): prologs
  "should not call Slurm commands"): a check that tries gets an `error`, the command is not run;
- it exits non-zero only when a check *failed*: the node must not run the job, and Slurm then
  drains it ("Prolog error") and requeues the job. warn, skip and error ("could not tell")
  let the job run and are logged. When clustercheck itself cannot judge the node (a bug, a
  broken profile, the budget spent before the checks even started), `--on-internal-error`
  decides: `pass` (the default: a bug in clustercheck must not drain the whole cluster) or
  `fail`;
- the verdict goes to syslog and to a JSON state file, where admins and `clustercheck health`
  read why.

`clustercheck health` runs as slurm.conf's HealthCheckProgram, whose exit code Slurm ignores
(§D.3): it acts itself, with `scontrol update` (§D.4), following LBNL NHC's owned-reason rule
and Nebius soperator's "only resume what you drained":

- a failed check drains the node with `Reason="clustercheck: <check>: <summary>"`;
- a node drained (or downed) with any other reason is never touched;
- a node drained with its own prefix is resumed once every check passes (ok, warn or skip;
  an `error` keeps the drain: it could not tell);
- Slurm's bare `Prolog error` drain is refined into the prolog's own reason when the prolog's
  state file says clustercheck failed the node; from then on it is clustercheck's drain;
- a node with a reboot pending is left alone (resuming it would cancel the reboot, as NHC's
  node-mark-online notes).

This module imports only the standard library at the top: the prolog is on every job's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from clustercheck import __version__
from clustercheck.errors import ClusterCheckError, HostError, UsageError
from clustercheck.host import CommandResult, Transport
from clustercheck.result import CheckResult, ExitCode, Report, Status

#: Every drain reason clustercheck sets starts with this: it is how it knows its own drains.
REASON_PREFIX = "clustercheck:"
#: Longest drain reason set (Slurm sets no limit; `sinfo -R` shows 20 characters by default).
REASON_LIMIT = 200
#: Slurm's own drain reason after a failed Prolog (src/slurmctld/node_mgr.c; domain-facts §D.1).
PROLOG_ERROR = "Prolog error"
DEFAULT_STATE_FILE = "/run/clustercheck/prolog.json"
DEFAULT_SYSLOG = "/dev/log"
PROLOG_BUDGET = 10.0
#: HealthCheckProgram is killed after 60 s through Slurm 25.11 (domain-facts §D.3).
HEALTH_BUDGET = 50.0
#: What a prolog or HealthCheckProgram gets when slurmd sets no PATH (domain-facts §D.1).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Slurm's client commands: a prolog must not call them (slurm.conf(5), Prolog).
SLURM_CLIENTS = frozenset(
    {
        *("sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab"),
        *("sdiag", "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger", "sview"),
    }
)

EXIT_INTERNAL = 70  # EX_SOFTWARE: clustercheck could not judge the node (with --on-internal-error fail)


# -- the job, as the prolog environment describes it ---------------------------------------------


class JobContext(NamedTuple):
    """The Slurm job a prolog runs for (domain-facts §D.2); every field may be missing.

    `gpus` are the job's GPU indices as the *node* numbers them (SLURM_JOB_GPUS, else a numeric
    CUDA_VISIBLE_DEVICES): in the prolog, which runs outside the job's cgroup, a job given
    /dev/nvidia1 sees CUDA_VISIBLE_DEVICES=1, while inside the job it sees 0.
    """

    job_id: str | None = None
    node: str | None = None
    nodelist: str | None = None
    user: str | None = None
    partition: str | None = None
    context: str | None = None  # SLURM_SCRIPT_CONTEXT: prolog_slurmd, epilog_slurmd, ...
    gpus: tuple[int, ...] | None = None
    cuda_visible_devices: tuple[str, ...] | None = None
    problems: tuple[str, ...] = ()  # variables that were set but could not be read

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobContext:
        """Read the prolog environment; never raises (a garbled variable becomes a problem)."""
        problems: list[str] = []

        def get(name: str) -> str | None:
            value = env.get(name)
            return value.strip() if value is not None and value.strip() else None

        cuda = get("CUDA_VISIBLE_DEVICES")
        cuda_list = tuple(d.strip() for d in cuda.split(",") if d.strip()) if cuda else None
        gpus: tuple[int, ...] | None = None
        raw = get("SLURM_JOB_GPUS")
        if raw is not None:
            gpus = _indices(raw)
            if gpus is None:
                problems.append(f"SLURM_JOB_GPUS={raw!r} is not a comma-separated list of GPU indices")
        elif cuda_list is not None:
            gpus = _indices(cuda)  # UUIDs (GPU-..., MIG-...) or NoDevFiles: no indices, not a problem
        return cls(
            job_id=get("SLURM_JOB_ID") or get("SLURM_JOBID"),
            node=get("SLURMD_NODENAME"),
            nodelist=get("SLURM_JOB_NODELIST") or get("SLURM_NODELIST"),
            user=get("SLURM_JOB_USER"),
            partition=get("SLURM_JOB_PARTITION"),
            context=get("SLURM_SCRIPT_CONTEXT"),
            gpus=gpus,
            cuda_visible_devices=cuda_list,
            problems=tuple(problems),
        )

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._asdict().items()}


def _indices(text: str | None) -> tuple[int, ...] | None:
    parts = [p.strip() for p in (text or "").split(",")]
    if not parts or not all(re.fullmatch(r"\d{1,6}", p) for p in parts):
        return None
    return tuple(int(p) for p in parts)


_current_job: JobContext | None = None


def set_current_job(job: JobContext | None) -> None:
    global _current_job
    _current_job = job


def current_job() -> JobContext | None:
    """The Slurm job being checked: set by `clustercheck prolog`; elsewhere read from the
    environment when it names a job (a run under `srun`), else None. Checks use it for what is
    about the job rather than the node (its GPUs, its node list)."""
    if _current_job is not None:
        return _current_job
    if os.environ.get("SLURM_JOB_ID"):
        return JobContext.from_env(os.environ)
    return None


# -- reasons ----------------------------------------------------------------------------------------

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


def drain_reason(failed: Sequence[CheckResult], *, suffix: str = "") -> str:
    """`clustercheck: <check>: <summary>` for the first failed check (+ how many more)."""
    if not failed:
        raise ValueError("a drain reason needs at least one failed check")
    first = failed[0]
    more = f" (+{len(failed) - 1} more failed)" if len(failed) > 1 else ""
    tail = more + suffix
    head = f"{REASON_PREFIX} {first.id}: "
    summary = sanitize_reason(first.summary, max(10, REASON_LIMIT - len(head) - len(tail)))
    return sanitize_reason(head + summary + tail)


def owns(reason: str | None) -> bool:
    """Whether a node's drain reason is one clustercheck set."""
    return reason is not None and reason.startswith(REASON_PREFIX)


# -- syslog -------------------------------------------------------------------------------------------

LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO = 3, 4, 5, 6
_LOG_DAEMON = 3 << 3


def syslog(message: str, severity: int, socket_path: str = DEFAULT_SYSLOG) -> bool:
    """Send one RFC 3164 line (facility daemon, tag clustercheck[PID]) to the syslog socket.

    The same datagram libc's syslog(3) sends, but to a socket we can name (tests, containers).
    Returns False when there is no syslog to send to; never raises and never blocks.
    """
    if not socket_path:
        return False
    import socket  # here, not at the top: ~2 ms the prolog spends only when it logs

    stamp = time.strftime("%b %e %H:%M:%S")
    line = f"<{_LOG_DAEMON | severity}>{stamp} clustercheck[{os.getpid()}]: {message}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.connect(socket_path)
            sock.send(line.encode("utf-8", "replace")[:8192])
        return True
    except OSError:
        return False


# -- state file ----------------------------------------------------------------------------------------


def state_path(template: str, node: str) -> Path:
    """The state file for `node`: `{node}` in the template is replaced by the node's name."""
    return Path(template.replace("{node}", node.replace("/", "_")))


def write_state(path: Path, state: Mapping[str, Any]) -> None:
    """Write the JSON state atomically (a reader never sees half a file); folders are made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_state(path: Path) -> dict[str, Any] | None:
    """The prolog's last state, or None when absent or unreadable (never raises)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# -- the prolog's guard: no Slurm commands ---------------------------------------------------------


def slurm_command(argv: Sequence[str]) -> str | None:
    """The Slurm client command argv would run (directly or in a `sh -c` script), else None."""
    if not argv:
        return None
    name = os.path.basename(str(argv[0]))
    if name in SLURM_CLIENTS:
        return name
    if name in ("sh", "bash", "dash", "zsh") and "-c" in argv:
        script = " ".join(argv[argv.index("-c") + 1 :])
        for word in re.findall(r"[A-Za-z0-9_./-]+", script):
            base: str = os.path.basename(word)
            if base in SLURM_CLIENTS:
                return base
    return None


class NoSlurmCommands:
    """Wraps the prolog's transport: a Slurm client command is refused (an `error` result).

    slurm.conf(5): prolog scripts "should not call Slurm commands" - every node of a large job
    would hit slurmctld at once, while it waits for them.
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.host = inner.host
        self.kind = inner.kind

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        name = slurm_command(argv)
        if name is not None:
            raise HostError(
                self.host,
                f"`{shlex.join(argv)}` was not run: a prolog must not call Slurm commands such as {name} "
                "(slurm.conf(5), Prolog); move this check to `clustercheck health`",
            )
        return self.inner.run(argv, timeout=timeout)

    def read(self, path: str, *, timeout: float) -> str:
        return self.inner.read(path, timeout=timeout)

    def probe(self, name: str, *, timeout: float) -> Any:
        return self.inner.probe(name, timeout=timeout)

    def close(self) -> None:
        self.inner.close()


# -- shared by both modes ---------------------------------------------------------------------------------


def ensure_path() -> None:
    """slurmd starts Prolog and HealthCheckProgram with no PATH (domain-facts §D.1): set a sane one
    before the local transport copies the environment."""
    if not os.environ.get("PATH"):
        os.environ["PATH"] = DEFAULT_PATH


def _transports(replay: Path | None, node: str | None) -> list[Any]:
    if replay is not None:
        from clustercheck.transports.fixture import ReplayTransport, find_fixtures

        fixtures = find_fixtures([replay])
        if len(fixtures) != 1:
            raise UsageError(f"--replay {replay}: holds {len(fixtures)} fixtures; give the folder of one node")
        return [ReplayTransport(fixtures[0])]
    from clustercheck.transports.local import LocalTransport

    return [LocalTransport(node)]


def _run_checks(
    profile: str | None,
    transports: Sequence[Any],
    checks_dirs: Sequence[Path],
    timeout: float,
    *,
    debug: bool,
    wrap: Any = None,
) -> Report:
    """Run the profile (default: the bundled `prolog`; with --replay, the fixture's) on one node."""
    from clustercheck import profile as profiles
    from clustercheck import runner
    from clustercheck.cli import recorded_profile

    if profile is None:
        profile = "prolog" if not any(hasattr(t, "fixture") for t in transports) else recorded_profile(transports)
    prof = profiles.load(profile, extra_check_dirs=tuple(checks_dirs))
    return runner.run_profile(
        prof,
        [wrap(t) for t in transports] if wrap else transports,
        version=__version__,
        jobs=1,
        timeout=max(0.1, timeout),
        command_timeout=max(0.1, min(10.0, timeout)),
        debug=debug,
    )


class Watchdog:
    """Ends the process at a hard deadline, whatever the main thread is stuck in.

    A check stuck in a hung read is abandoned by the runner's own timeout; this is the backstop
    for what runs outside the checks (a profile or a site check module on a hung NFS mount).
    """

    def __init__(self, seconds: float, on_expire: Any, exit_code: int) -> None:
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True
        self._on_expire = on_expire
        self._exit_code = exit_code

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        # the last words must not hang either: a second timer ends the process regardless
        hard = threading.Timer(1.0, os._exit, args=(self._exit_code,))
        hard.daemon = True
        hard.start()
        with contextlib.suppress(BaseException):
            self._on_expire()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(self._exit_code)


def _now() -> tuple[str, float]:
    """ISO 8601 local time with its UTC offset, and the epoch (no datetime import: prolog path)."""
    stamp = time.time()
    local = time.localtime(stamp)
    offset = local.tm_gmtoff or 0
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return time.strftime("%Y-%m-%dT%H:%M:%S", local) + f"{sign}{hours:02d}:{minutes:02d}", stamp


def _counts(checks: Sequence[CheckResult]) -> str:
    counts: dict[str, int] = {}
    for c in checks:
        counts[c.status.value] = counts.get(c.status.value, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items()) or "no checks"


# -- prolog ------------------------------------------------------------------------------------------------


class PrologOptions(NamedTuple):
    profile: str | None = None  # None: the bundled prolog profile; with --replay, the fixture's
    budget: float = PROLOG_BUDGET
    replay: Path | None = None
    checks_dirs: tuple[Path, ...] = ()
    state_file: str = DEFAULT_STATE_FILE
    on_internal_error: str = "pass"
    syslog_socket: str = DEFAULT_SYSLOG
    debug: bool = False


def prolog(opts: PrologOptions, env: Mapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """`clustercheck prolog`: judge the node for the job about to start; returns the exit code."""
    start = time.monotonic()
    out = out or sys.stdout
    job = JobContext.from_env(os.environ if env is None else env)
    set_current_job(job)
    ensure_path()
    node = job.node or os.uname().nodename.split(".")[0]
    where = f"node {node}" + (f", job {job.job_id}" if job.job_id else "")
    policy_code = 0 if opts.on_internal_error == "pass" else EXIT_INTERNAL
    state_file = state_path(opts.state_file, node)
    base: dict[str, Any] = {
        "clustercheck": __version__,
        "mode": "prolog",
        "node": node,
        "job": job.to_json(),
        "budget_s": opts.budget,
        "on_internal_error": opts.on_internal_error,
    }

    def cannot_judge(what: str, code: int) -> int:
        action = (
            "passing the node (--on-internal-error pass)"
            if code == 0
            else "failing the node: Slurm drains it (--on-internal-error fail)"
        )
        message = f"prolog {where}: INTERNAL ERROR, could not judge the node: {what}; {action}"
        print(f"clustercheck: {message}", file=sys.stderr)
        syslog(message, LOG_ERR, opts.syslog_socket)
        stamp, epoch = _now()
        reason = sanitize_reason(f"{REASON_PREFIX} internal error: {what}") if code else ""
        state = {
            **base,
            "time": stamp,
            "timestamp": epoch,
            "duration_s": round(time.monotonic() - start, 3),
            "verdict": "internal-error",
            "exit_code": code,
            "reason": reason,
            "error": what,
            "checks": [],
        }
        with contextlib.suppress(OSError):
            write_state(state_file, state)
        return code

    def expired() -> None:
        # the runner stops the checks before the budget: what is stuck is outside them (a profile
        # or site module on a hung mount), or the machine is too busy to finish in time
        cannot_judge(f"the {opts.budget:g} s budget ran out before the checks could be judged", policy_code)

    with Watchdog(opts.budget, expired, policy_code):
        try:
            transports = _transports(opts.replay, None if opts.replay else job.node)
            # keep some of the budget for stopping what still runs and writing the verdict
            left = opts.budget - (time.monotonic() - start) - min(1.0, opts.budget / 5)
            report = _run_checks(
                opts.profile, transports, opts.checks_dirs, left, debug=opts.debug, wrap=NoSlurmCommands
            )
        except KeyboardInterrupt:
            raise
        except UsageError as exc:
            return cannot_judge(str(exc).replace("\n", "; "), 0 if policy_code == 0 else int(ExitCode.USAGE))
        except ClusterCheckError as exc:
            return cannot_judge(str(exc), policy_code)
        except Exception as exc:
            if opts.debug:
                raise
            return cannot_judge(f"{type(exc).__name__}: {exc}", policy_code)

        checks = list(report.hosts[0].checks) if report.hosts else []
        failed = [c for c in checks if c.status is Status.FAIL]
        noted = [c for c in checks if c.status in (Status.WARN, Status.ERROR)]
        reason = drain_reason(failed) if failed else ""
        duration = time.monotonic() - start
        code = int(ExitCode.FAIL) if failed else 0
        stamp, epoch = _now()
        state = {
            **base,
            "host": report.hosts[0].host if report.hosts else node,
            "profile": report.profile,
            "time": stamp,
            "timestamp": epoch,
            "duration_s": round(duration, 3),
            "verdict": "fail" if failed else "pass",
            "exit_code": code,
            "reason": reason,
            "checks": [{"id": c.id, "status": c.status.value, "summary": c.summary} for c in checks],
        }
        state_error = ""
        try:
            write_state(state_file, state)
        except OSError as exc:
            state_error = f"; the state file {state_file} could not be written: {exc.strerror or exc}"
        if failed:
            message = f"prolog {where}: FAIL, the node must not run the job: {reason}"
            severity = LOG_ERR
        elif noted:
            details = "; ".join(f"{c.id} {c.status.value}: {sanitize_reason(c.summary, 120)}" for c in noted)
            message = f"prolog {where}: pass ({_counts(checks)}): {details}"
            severity = LOG_WARNING
        else:
            message = f"prolog {where}: pass ({_counts(checks)})"
            severity = LOG_INFO
        if job.problems:
            message += "; environment: " + "; ".join(job.problems)
            severity = min(severity, LOG_WARNING)
        syslog(message + f" in {duration:.2f} s" + state_error, severity, opts.syslog_socket)
        print(f"clustercheck {message}", file=out)
        for c in failed + noted:
            print(f"  {c.id}: {c.status.value}: {c.summary}", file=out)
        print(f"  state: {state_file}{state_error}", file=out)
        out.flush()
        return code


# -- the fast path: `clustercheck prolog ...` without Typer --------------------------------------------

PROLOG_OPTIONS = {
    "--profile": "profile",
    "-p": "profile",
    "--budget": "budget",
    "--replay": "replay",
    "--checks": "checks",
    "--state-file": "state_file",
    "--on-internal-error": "on_internal_error",
    "--syslog-socket": "syslog_socket",
}


def prolog_options(opts: dict[str, Any]) -> PrologOptions | None:
    """PrologOptions from `cli.plain_options(args, PROLOG_OPTIONS)`; None when a value is not
    plainly valid (Typer then parses the arguments and reports the mistake its usual way)."""
    values: dict[str, Any] = {k: v for k, v in opts.items() if k != "checks"}
    if "budget" in values:
        try:
            values["budget"] = float(values["budget"])
        except ValueError:
            return None
        if not 0.1 <= values["budget"] < 1e6:
            return None
    if "replay" in values:
        values["replay"] = Path(values["replay"])
    if values.get("on_internal_error", "pass") not in ("pass", "fail"):
        return None
    return PrologOptions(checks_dirs=tuple(Path(c) for c in opts["checks"]), **values)


# -- the node as slurmctld sees it ---------------------------------------------------------------------


class NodeState(NamedTuple):
    """A node's state and drain reason, from `scontrol show node NAME`."""

    name: str
    state: str  # e.g. IDLE+DRAIN, MIXED+DRAIN, DOWN+NOT_RESPONDING
    reason: str | None = None  # without the " [user@time]" scontrol appends
    reason_set_by: str | None = None  # "root@2026-11-29T22:39:01"

    @property
    def base(self) -> str:
        return self.state.split("+")[0].rstrip("*~#%$@^-!")

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.split("+")[1:])

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.base in ("DRAIN", "DRAINED", "DRAINING")

    @property
    def down(self) -> bool:
        return self.base == "DOWN"

    @property
    def reboot_pending(self) -> bool:
        return any(f.startswith("REBOOT") for f in self.flags)


_REASON_BY = re.compile(r"(.*?)\s*\[([^\[\]\s]*@[^\[\]\s]*)\]")


def parse_scontrol_show_node(text: str, node: str) -> NodeState:
    """The node's State= and Reason= from `scontrol show node NODE` (the multi-line format).

    Reason= has its own line, "Reason=<text> [<user>@<time>]" (scontrol's node printer); State=
    is a word on another line. Raises ValueError naming what is missing.
    """
    name_m = re.search(r"(?m)^NodeName=(\S+)", text)
    if name_m is None:
        raise ValueError(f"no NodeName= in `scontrol show node {node}` output")
    if name_m.group(1) != node:
        raise ValueError(f"`scontrol show node {node}` described node {name_m.group(1)}")
    state_m = re.search(r"(?m)(?:^|\s)State=(\S+)", text)
    if state_m is None:
        raise ValueError(f"no State= in `scontrol show node {node}` output")
    reason: str | None = None
    set_by: str | None = None
    reason_m = re.search(r"(?m)^\s*Reason=(.*)$", text)
    if reason_m is not None:
        value = reason_m.group(1).rstrip()
        by = _REASON_BY.fullmatch(value)
        reason, set_by = (by.group(1), by.group(2)) if by else (value, None)
        if reason in ("", "(null)"):
            reason = None
    return NodeState(node, state_m.group(1), reason, set_by)


# -- health: what to do ----------------------------------------------------------------------------------


class Decision(NamedTuple):
    """What `clustercheck health` does to a node: drain (with `reason`), resume, or nothing."""

    action: str  # "drain", "resume", "none"
    why: str
    reason: str | None = None

    def argv(self, node: str, scontrol: str = "scontrol") -> list[str] | None:
        """The scontrol command that carries the decision out (None for "none")."""
        if self.action == "drain":
            return [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={self.reason}"]
        if self.action == "resume":
            return [scontrol, "update", f"NodeName={node}", "State=RESUME"]
        return None


def decide(node: NodeState, checks: Sequence[CheckResult], prolog_state: Mapping[str, Any] | None) -> Decision:
    """The health decision for one node: pure, so every branch is tested without Slurm."""
    failed = [c for c in checks if c.status is Status.FAIL]
    errors = [c for c in checks if c.status is Status.ERROR]
    want = drain_reason(failed) if failed else None
    shown = f"{node.state}" + (f", reason {node.reason!r}" if node.reason else "")

    if node.reboot_pending:
        return Decision("none", f"{node.name} has a reboot pending ({shown}): draining or resuming could cancel it")
    if node.drained and owns(node.reason):
        if want is not None:
            if want == node.reason:
                return Decision("none", f"already drained by clustercheck for this: {node.reason}")
            return Decision("drain", f"still failing; the reason changes from {node.reason!r}", want)
        if errors:
            return Decision(
                "none",
                f"drained by clustercheck; {len(errors)} check(s) could not tell "
                f"({errors[0].id}: {errors[0].summary}): the drain stays until every check passes",
            )
        return Decision("resume", f"every check passes ({_counts(checks)}): resuming clustercheck's own drain")
    if node.drained and node.reason == PROLOG_ERROR and _prolog_failed(prolog_state, node.name):
        assert prolog_state is not None
        job = (prolog_state.get("job") or {}).get("job_id") if isinstance(prolog_state.get("job"), dict) else None
        prolog_reason = str(prolog_state.get("reason") or f"{REASON_PREFIX} the prolog failed the node")
        refined = sanitize_reason(prolog_reason + (f" (prolog of job {job})" if job else " (prolog)"))
        if want is not None:
            return Decision("drain", "Slurm drained it for the clustercheck prolog's failure; it still fails", want)
        return Decision(
            "drain",
            f"Slurm drained it as {PROLOG_ERROR!r} for the clustercheck prolog's failure: naming the reason "
            "(a later run resumes it if every check still passes)",
            refined,
        )
    if node.drained or node.down or "FAIL" in node.flags or node.base in ("FAIL", "FAILING", "MAINT"):
        why = f"{node.name} is {shown}, not set by clustercheck: left alone"
        if node.reason == PROLOG_ERROR:
            why += " (the clustercheck prolog did not fail it: another prolog script did, or its state file is gone)"
        return Decision("none", why)
    if want is not None:
        return Decision("drain", f"{len(failed)} check(s) failed", want)
    return Decision("none", f"healthy ({_counts(checks)}); {node.name} is {shown}")


def _prolog_failed(state: Mapping[str, Any] | None, node: str) -> bool:
    """Whether the prolog's state file says clustercheck made this node's prolog fail.

    After a `Prolog error` drain no job starts on the node, so its last prolog state is from the
    job whose prolog drained it: if clustercheck passed that one, another prolog script failed.
    """
    if not state or state.get("node") != node or state.get("mode") != "prolog":
        return False
    return state.get("verdict") == "fail" or (state.get("verdict") == "internal-error" and state.get("exit_code") != 0)


# -- health: doing it --------------------------------------------------------------------------------------


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


def _scontrol(argv: list[str], timeout: float) -> CommandResult:
    from clustercheck.transports.local import LocalTransport

    return LocalTransport().run(argv, timeout=timeout)


def health(opts: HealthOptions, env: Mapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """`clustercheck health`: run the profile, then drain, resume or leave the node; the exit code
    is the report's (Slurm ignores it)."""
    start = time.monotonic()
    out = out or sys.stdout
    env = os.environ if env is None else env
    ensure_path()
    node = opts.node or env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    # scontrol may need two calls after the checks (show, update): keep time for them
    reserve = min(2 * opts.scontrol_timeout + 1.0, opts.budget / 2)

    def expired() -> None:
        message = f"health node {node}: the {opts.budget:g} s budget ran out; nothing was changed"
        print(f"clustercheck: {message}", file=sys.stderr)
        syslog(message, LOG_ERR, opts.syslog_socket)

    with Watchdog(opts.budget, expired, int(ExitCode.ERROR)):
        transports = _transports(opts.replay, None if opts.replay else node)
        report = _run_checks(
            opts.profile,
            transports,
            opts.checks_dirs,
            opts.budget - reserve - (time.monotonic() - start),
            debug=opts.debug,
        )
        checks = list(report.hosts[0].checks) if report.hosts else []
        left = max(0.5, opts.budget - (time.monotonic() - start) - 0.5)
        shown = _scontrol([opts.scontrol, "show", "node", node], min(opts.scontrol_timeout, left / 2))
        if not shown.ok:
            said = (shown.stderr or shown.stdout).strip().splitlines()
            raise ClusterCheckError(
                f"cannot read node {node}'s state, so nothing was changed: {shown.describe()}"
                + (f": {said[0]}" if said else "")
            )
        try:
            state = parse_scontrol_show_node(shown.stdout, node)
        except ValueError as exc:
            raise ClusterCheckError(f"{exc}; nothing was changed") from exc
        prolog_state = read_state(state_path(opts.state_file, node))
        decision = decide(state, checks, prolog_state)
        argv = decision.argv(node, opts.scontrol)
        done: CommandResult | None = None
        if argv is not None and not opts.dry_run:
            done = _scontrol(argv, min(opts.scontrol_timeout, max(0.5, opts.budget - (time.monotonic() - start))))
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
        json.dump(
            {
                "clustercheck": __version__,
                "node": node,
                "state": state.state,
                "reason": state.reason,
                "action": decision.action,
                "why": decision.why,
                "new_reason": decision.reason,
                "command": argv,
                "dry_run": opts.dry_run,
                "done": None if done is None else done.ok,
                "report": report.to_json(),
            },
            out,
            indent=2,
        )
        print(file=out)
    else:
        from clustercheck import formats

        formats.render(report, "table", out)
        print(f"{node}: {state.state}" + (f", reason: {state.reason}" if state.reason else ""), file=out)
        if argv is None:
            print(f"{node}: nothing to do: {decision.why}", file=out)
        elif opts.dry_run:
            print(f"{node}: would {decision.action} ({decision.why}):\n  {shlex.join(argv)}", file=out)
        else:
            print(f"{node}: {decision.action}: {decision.why}\n  {shlex.join(argv)}", file=out)
    out.flush()
    if done is not None and not done.ok:
        detail = (done.stderr or done.stdout).strip()
        raise ClusterCheckError(f"`{shlex.join(argv or [])}` failed: {done.describe()}: {detail}")
    return int(report.exit_code)
