"""Slurm integration: the prolog and health-check modes, and the drain reasons they own.

`clustercheck prolog` runs in slurmd's Prolog on every job start (domain-facts §D.1):

- a hard time budget (`--budget`, default 10 s): checks not done by then are `error`; the
  checks run in a forked child (`run_bounded`), killed with everything it started at the
  budget whatever it is stuck in (code holding the interpreter lock included), and the
  `--on-internal-error` verdict is written;
- it reads the prolog environment (§D.2): `SLURMD_NODENAME`, `SLURM_JOB_ID`, the job's GPUs
  (`SLURM_JOB_GPUS`, `CUDA_VISIBLE_DEVICES` - host-relative indices in the prolog) - and
  gives it to checks as `current_job()`;
- it never runs Slurm's client commands (`scontrol`, `squeue`, ...; slurm.conf(5): prologs
  "should not call Slurm commands"): a check that tries gets an `error`, the command is not run;
- it exits non-zero only when a check *failed*: the node must not run the job, and Slurm then
  drains it ("Prolog error") and requeues the job. warn, skip and error ("could not tell")
  let the job run and are logged. When clustercheck itself cannot judge the node (a mistake on
  its command line, a bug, a broken profile, the budget), `--on-internal-error` decides: `pass`
  (the default: a bug in clustercheck must not drain the whole cluster) or `fail`; a closed or
  broken stdout or an unwritable state file is said loudly and changes no verdict;
- the verdict goes to syslog and to a JSON state file, where admins and `clustercheck health`
  read why.

`clustercheck health` runs as slurm.conf's HealthCheckProgram, whose exit code Slurm ignores
(§D.3): it acts itself, with `scontrol update` (§D.4), following LBNL NHC's owned-reason rule
and Nebius soperator's "only resume what you drained":

- a failed check drains the node with `Reason="clustercheck: <check>: <summary>"`, and the
  reason is kept in a health record file;
- a node drained (or downed) with any other reason is never touched: the prefix alone proves
  nothing, only a reason health recorded setting on that node, at the time scontrol shows;
- a node drained with a recorded reason is resumed once every check passes (ok, warn or skip;
  an `error` keeps the drain: it could not tell; so does a skip because the hardware vanished);
- Slurm's bare `Prolog error` drain is refined into the prolog's own reason when the prolog's
  state file shows clustercheck failed this node for the job the drain followed (a job id, a
  verdict time just before the drain's); from then on it is clustercheck's drain;
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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from clustercheck import __version__
from clustercheck.bounded import Watchdog, run_bounded
from clustercheck.errors import ClusterCheckError, HostError, UsageError
from clustercheck.host import CommandResult, Transport
from clustercheck.result import CheckResult, ExitCode, HostReport, Report, Status

if TYPE_CHECKING:
    from clustercheck.transports.fixture import Fixture

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

    @property
    def fixture(self) -> Fixture | None:
        return self.inner.fixture

    def read(self, path: str, *, timeout: float) -> str:
        return self.inner.read(path, timeout=timeout)

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        return self.inner.read_many(paths, timeout=timeout)

    def probe(self, name: str, *, timeout: float) -> Any:
        return self.inner.probe(name, timeout=timeout)

    def connect(self) -> None:
        self.inner.connect()

    def close(self) -> None:
        self.inner.close()


# -- shared by both modes ---------------------------------------------------------------------------------


def ensure_path() -> None:
    """slurmd starts Prolog and HealthCheckProgram with no PATH (domain-facts §D.1): set a sane one
    before the local transport copies the environment."""
    if not os.environ.get("PATH"):
        os.environ["PATH"] = DEFAULT_PATH


def ensure_std_fds() -> None:
    """Give closed standard descriptors /dev/null, and sys.stdout/stderr a stream to write to.

    A Prolog= line ending in `>&-` starts clustercheck with fd 1 closed: the next file it opened
    (the state file, a pipe) would become fd 1, and Python leaves sys.stdout None.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _detach_fd(fd: int) -> None:
    """After a broken pipe on fd 1 or 2: point it at /dev/null, so nothing else fails writing to it
    (Python's own flush at exit included)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def say(text: str, stream: TextIO | None) -> str:
    """Write text (a line) to stream; '' when written, else why not. Never raises: a closed or
    broken stdout/stderr must not change a prolog's verdict."""
    if stream is None:
        return "no stream"
    try:
        stream.write(text + "\n")
        stream.flush()
        return ""
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fileno = stream.fileno()
            if fileno in (1, 2):
                _detach_fd(fileno)
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _transports(replay: Path | None, node: str | None) -> list[Transport]:
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
    trust_fixture_code: bool = False,
) -> Report:
    """Run the profile (default: the bundled `prolog`; with --replay, the fixture's) on one node.

    A profile taken from a fixture loads no code of its own unless trusted (profile.load's
    allow_code): fixtures are data people send each other, and this runs as root.
    """
    from clustercheck import profile as profiles
    from clustercheck import runner

    allow_code = True
    if profile is None:
        if any(t.fixture is not None for t in transports):
            profile = profiles.recorded_profile(transports)
            allow_code = trust_fixture_code
        else:
            profile = "prolog"
    prof = profiles.load(profile, extra_check_dirs=tuple(checks_dirs), allow_code=allow_code)
    return runner.run_profile(
        prof,
        [wrap(t) for t in transports] if wrap else transports,
        version=__version__,
        jobs=1,
        timeout=max(0.1, timeout),
        command_timeout=max(0.1, min(10.0, timeout)),
        debug=debug,
    )


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


def _checks_of(payload: Mapping[str, Any]) -> tuple[str, str, list[CheckResult]]:
    """(host, profile, results) from a child's report JSON (Report.to_json of one host)."""
    hosts = payload.get("hosts") or {}
    host, entry = next(iter(hosts.items())) if hosts else ("", {"checks": []})
    return str(host), str(payload.get("profile", "")), [CheckResult.from_json(c) for c in entry.get("checks", [])]


# -- state kept between runs: markers (e.g. how far gpu.xid read the kernel log) ----------------------

_state_folder: Path | None = None
_state_writable = False


def set_state_folder(folder: Path | None, *, writable: bool) -> None:
    global _state_folder, _state_writable
    _state_folder, _state_writable = folder, writable


def read_marker(name: str) -> dict[str, Any] | None:
    """A check's marker from the previous prolog/health run (None: none, or not in those modes)."""
    if _state_folder is None:
        return None
    return read_state(_state_folder / f"{name}.marker.json")


def marker_folder() -> Path | None:
    """Where prolog/health keep markers between runs (None elsewhere: a check then looks at all)."""
    return _state_folder


def write_markers(checks: Sequence[CheckResult]) -> list[str]:
    """Write the markers the checks returned (data["marker"] = {"name": ..., ...}); problems."""
    problems: list[str] = []
    if _state_folder is None or not _state_writable:
        return problems
    for c in checks:
        marker = c.data.get("marker") if isinstance(c.data, Mapping) else None
        if isinstance(marker, Mapping) and re.fullmatch(r"[a-z0-9_.-]{1,40}", str(marker.get("name", ""))):
            try:
                write_state(_state_folder / f"{marker['name']}.marker.json", marker)
            except OSError as exc:
                problems.append(f"{c.id}'s marker could not be written: {exc.strerror or exc}")
    return problems


# -- prolog ------------------------------------------------------------------------------------------------


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
    it can be written) and in syslog, naming the cause.
    """
    start = time.monotonic()
    ensure_std_fds()
    policy_code = 0 if opts.on_internal_error == "pass" else EXIT_INTERNAL
    try:
        return _prolog(opts, env, out, start, usage_error)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the last line of defence: a bug must not drain
        if opts.debug:
            raise
        what = f"{type(exc).__name__}: {exc}"
        action = "passing the node" if policy_code == 0 else "failing the node: Slurm drains it"
        message = f"prolog: INTERNAL ERROR, could not judge the node: {what}; {action} (--on-internal-error)"
        say(f"clustercheck: {message}", sys.stderr)
        syslog(message, LOG_ERR, DEFAULT_SYSLOG if opts.syslog_socket is None else opts.syslog_socket)
        return policy_code


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


# -- the prolog's command line, read without Typer (and without ever giving up) -----------------------

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
PROLOG_FLAGS = {"--dry-run": "dry_run", "--trust-fixture-code": "trust_fixture_code", "--debug": "debug"}


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


def _scontrol(argv: list[str], timeout: float) -> CommandResult:
    from clustercheck.transports.local import LocalTransport

    return LocalTransport().run(argv, timeout=timeout)


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
