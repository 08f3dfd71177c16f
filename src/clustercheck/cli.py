"""The one error boundary and what every command shares: `guarded()` alone prints errors and
picks exit codes (0 ok, 1 warn, 2 fail, 3 error, 64 bad usage or input, 70 internal error; see
result.ExitCode); the entry point (`clustercheck.main`) calls it around everything.

A command returns its exit code (an int or a result.ExitCode; None for 0) and raises for
anything that went wrong: the entry point hands the returned code to `guarded`, which returns
it, and turns an exception into its message and code. No command sets a global.

The Typer application (`app.py`) defines every subcommand. A `clustercheck run` whose
arguments are all plain and valid (`--local`, `--ssh HOSTLIST` or `--replay DIR`, what a
Slurm prolog or a fleet run does) is dispatched here without importing Typer (whose 0.29
series imports pydantic and builds a validator per option, ~0.13 s); anything else, `--help`
and mistakes included, goes through Typer. Both paths end in `execute_run()`.
`clustercheck prolog ...` has the same fast dispatch (`fast_prolog`, into clustercheck.slurm).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from clustercheck import __version__, formats, options
from clustercheck.errors import ClusterCheckError, HostError, UsageError
from clustercheck.result import ExitCode, HostReport, Report

if TYPE_CHECKING:
    from clustercheck.slurm import PrologOptions
    from clustercheck.transports.base import Transport


@dataclass
class State:
    debug: bool = False  # --debug: tracebacks, and the boundary's own-fault mode off


state = State()


def check_output(output: Path | None, option: str = "-o") -> None:
    """Refuse an output path that cannot be written, before any host is contacted (exit 64).

    What write_output will do is tried here: a file of its own beside the report (made and
    removed), or, for /dev/null or a FIFO, opening it for writing is left to the end.
    """
    if output is None:
        return
    if output.is_dir():
        raise UsageError(f"{option} {output}: is a folder; name the report's file, e.g. {output / 'report.json'}")
    if output.exists() and not output.is_file():  # /dev/null, a FIFO: written into at the end
        if not os.access(output, os.W_OK):
            raise UsageError(f"{option} {output}: cannot be written (permission denied)")
        return
    folder = output.parent if str(output.parent) else Path(".")
    if not folder.exists():
        raise UsageError(f"{option} {output}: there is no folder {folder} (make it first, e.g. mkdir -p {folder})")
    if not folder.is_dir():
        raise UsageError(f"{option} {output}: {folder} is not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=folder)
    except OSError as exc:
        raise UsageError(f"{option} {output}: cannot write in {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def _unwritable(output: Path, exc: OSError) -> ClusterCheckError:
    """The user's path named: exit 64 for a path that cannot be written, 3 for a failing disk."""
    import errno

    usage = exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS)
    kind = UsageError if usage else ClusterCheckError
    return kind(f"-o {output}: cannot write the report: {exc.strerror or exc}")


def quiet_stdout() -> None:
    """After the reader closed stdout (EPIPE): what is still written goes nowhere, so neither the
    rest of the run nor the interpreter's last flush fails on it."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def write_output(render: Callable[[TextIO], None], output: Path | None) -> None:
    """Render to stdout, or atomically to a file (a textfile collector must never read half a file)."""
    if output is None:
        try:
            render(sys.stdout)
            sys.stdout.flush()
        except BrokenPipeError:  # `| head`: the reader has what it wanted; the exit code stays the verdict
            quiet_stdout()
        return
    try:
        if output.exists() and not output.is_file():  # /dev/null, a FIFO: write into it, never replace it
            with output.open("w", encoding="utf-8") as out:
                render(out)
            return
        folder = output.parent if str(output.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=folder)
    except OSError as exc:  # checked before a run; `report` and a folder changed since come here
        raise _unwritable(output, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            render(out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _unwritable(output, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def execute_run(
    profile: str | None,
    transports: Sequence[Transport],
    *,
    checks_dirs: tuple[Path, ...] = (),
    fmt: str = "table",
    output: Path | None = None,
    verbose: bool = False,
    timeout: float | None = None,
    command_timeout: float = 10.0,
    host_timeout: float | None = None,
    jobs: int = 32,
    by: str = "check",
    all_hosts: bool = False,
    trust_fixture_code: bool = False,
) -> int:
    """`clustercheck run`: load the profile, run it, render the report; its exit code.

    A profile taken from the replayed fixtures (no --profile) loads no code of its own
    (check_dirs, extends outside the bundled profiles) unless `trust_fixture_code`.

    With a --timeout the run happens in a child process that is killed, with everything it
    started, when it outlives the timeout by HARD_STOP_GRACE: the runner's own timeout cannot
    stop a check whose code never lets go of the interpreter lock.
    """
    if timeout is not None and not _in_bounded_child:
        arguments = dict(locals())
        arguments.pop("arguments", None)
        return _bounded(lambda: execute_run(**arguments), timeout)
    from clustercheck import profile as profiles
    from clustercheck import runner

    formats.check_view(fmt, by=by, all_hosts=all_hosts)  # before any host is contacted
    check_output(output)
    ref = profile or profiles.recorded_profile(transports)
    prof = profiles.load(ref, extra_check_dirs=checks_dirs, allow_code=profile is not None or trust_fixture_code)
    replays = [t for t in transports if t.fixture is not None]
    if replays:  # a replay's "re-record it with ..." hint names what this run uses
        from clustercheck.transports.fixture import ReplayTransport

        for t in replays:
            if isinstance(t, ReplayTransport):
                t.profile_in_use = _from_here(ref)
                t.checks_in_use = tuple(str(d) for d in checks_dirs)
    stream = fmt == "jsonl" and output is None  # each host's lines as soon as it is done
    progress = None
    if len(transports) > 1 and any(t.kind != "replay" for t in transports):  # replays are instant
        from clustercheck.progress import Progress

        progress = Progress(len(transports))

    reader_gone = False

    def on_host_done(host: HostReport) -> None:
        nonlocal reader_gone
        if progress is not None:
            progress.host_done(host)
        if stream and not reader_gone:
            try:
                formats.render(Report(__version__, prof.name, (host,)), "jsonl", sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:  # `| head -1`: the reader has what it wanted; finish the run quietly
                reader_gone = True
                quiet_stdout()

    report = runner.run_profile(
        prof,
        transports,
        version=__version__,
        jobs=jobs,
        timeout=timeout,
        command_timeout=command_timeout,
        host_timeout=host_timeout,
        debug=state.debug,
        on_host_done=on_host_done,
    )
    if progress is not None:
        progress.close()
    if not stream:
        write_output(lambda out: formats.render(report, fmt, out, verbose=verbose, by=by, all_hosts=all_hosts), output)
    return int(report.exit_code)


def _from_here(ref: str) -> str:
    """A profile path as the current folder reaches it (relative under it); a bundled name as it is."""
    path = Path(ref)
    try:
        if not path.is_absolute() or not path.is_file():
            return ref
        relative = os.path.relpath(path)
    except (OSError, ValueError):
        return ref
    return ref if relative.startswith("..") else relative


_in_bounded_child = False


def hard_stop_grace(timeout: float) -> float:
    """How long past --timeout a run may take to report before it is killed."""
    return 2.0 + 0.05 * timeout


def _bounded(body: Callable[[], int], timeout: float) -> int:
    """Run body in a child (its own error boundary, its own output), killed past the deadline."""
    from clustercheck.bounded import run_bounded

    def work() -> int:
        global _in_bounded_child
        _in_bounded_child = True
        code = guarded(body)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        return code

    limit = timeout + hard_stop_grace(timeout)
    outcome = run_bounded(work, limit, debug=state.debug)
    if outcome.killed:
        raise ClusterCheckError(
            f"the run did not end within --timeout {timeout:g} s (+{hard_stop_grace(timeout):g} s to report): "
            "a check's own code is stuck; it was killed with everything it started, and no report was written"
        )
    if outcome.payload is None:
        raise RuntimeError(outcome.crash or f"the process running the checks {outcome.died}")
    return int(outcome.payload)


# -- the fast path --------------------------------------------------------------------------------


def run_arguments(opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`run`'s options as options.parse read them -> (make_transports' arguments, execute_run's
    but the profile); a UsageError naming the option for a value Typer would refuse too."""
    where = {
        "local": bool(opts.get("local")),
        "ssh": opts.get("ssh"),
        "replay": [Path(r) for r in opts.get("replay", ())],
        "ssh_config": Path(opts["ssh_config"]) if "ssh_config" in opts else None,
        "user": opts.get("user"),
        "identity": list(opts.get("identity", ())) or None,
        "port": options.number("run", "--port", opts.get("port"), 1, int),
        "accept_new_host_keys": bool(opts.get("accept_new_host_keys")),
    }
    how = {
        "checks_dirs": tuple(Path(c) for c in opts["checks"]),
        "fmt": options.choice("run", "--format", opts.get("format", "table"), formats.FORMATS),
        "output": Path(opts["output"]) if "output" in opts else None,
        "verbose": bool(opts.get("verbose")),
        "timeout": options.number("run", "--timeout", opts.get("timeout"), 0.1),
        "command_timeout": options.number("run", "--command-timeout", opts.get("command_timeout", "10"), 0.1),
        "host_timeout": options.number("run", "--host-timeout", opts.get("host_timeout"), 0.1),
        "jobs": options.number("run", "--jobs", opts.get("jobs", "32"), 1, int),
        "by": options.choice("run", "--by", opts.get("by", "check"), ("check", "host")),
        "all_hosts": bool(opts.get("all_hosts")),
        "trust_fixture_code": bool(opts.get("trust_fixture_code")),
    }
    return where, how


def fast_run(argv: Sequence[str]) -> int | None:
    """Run `run ...` without Typer when every argument is a plain, valid one: its exit code, or
    None (nothing done) for anything else (`--help`, a mistake), which Typer then handles its
    usual way. A fleet run (`--ssh`) saves Typer's ~0.13 s of start-up before its first
    connection; a prolog's `run --local` saves it on every job start."""
    if not argv or argv[0] != "run":
        return None
    try:
        opts, positional = options.parse("run", argv[1:], options.COMMANDS["run"])
        if positional:
            return None
        where, how = run_arguments(opts)
    except UsageError:
        return None
    from clustercheck.transports import make_transports

    return execute_run(opts.get("profile"), make_transports(**where), **how)


def fast_prolog(argv: Sequence[str]) -> int | None:
    """Run `prolog ...` (slurm.conf's Prolog, on every job start) without Typer: its exit code,
    or None (nothing done) for `--help` and for another command.

    Every prolog command line is handled here, mistakes included, and only `--help` goes to
    Typer: Typer's answer to a mistake is exit 64, which drains the node (every node, for a
    typo on the Prolog= line). The prolog follows --on-internal-error instead, saying why.
    """
    args = list(argv)
    debug = False
    if args[:1] == ["--debug"]:  # the one global option, before the subcommand
        debug, args = True, args[1:]
    if not args or args[0] != "prolog" or "--help" in args[1:]:
        return None
    from clustercheck import slurm

    options, problem = slurm.parse_prolog_args(args[1:])
    if debug:
        options = options._replace(debug=True)
    state.debug = options.debug
    return run_prolog(options, usage_error=problem)


def run_prolog(options: PrologOptions, *, usage_error: str | None = None) -> int:
    """slurm.prolog inside the boundary's own-fault mode (fast path and Typer command alike): an
    exception that escapes it follows --on-internal-error, said loudly, never exit 64 or 70."""
    from clustercheck import slurm

    code, report = slurm.internal_error_policy(options)
    return guarded(lambda: slurm.prolog(options, usage_error=usage_error), own_fault=OwnFault(code, report))


# -- the error boundary -------------------------------------------------------------------------


@dataclass(frozen=True)
class OwnFault:
    """The boundary's mode for a command that must never exit non-zero for clustercheck's own
    fault (the prolog: a bug must not drain the node): every exception but an interrupt is
    said by `report` (given "TypeName: message") and ends in `code` (--on-internal-error's).
    --debug turns the mode off: the traceback and the usual exit code, as for any command."""

    code: int
    report: Callable[[str], None]


def guarded(body: Callable[[], int | None], *, own_fault: OwnFault | None = None) -> int:
    """Run body and map everything to a documented exit code, printing the error (the boundary).

    The exit code is what body returns (None: 0), or the code of the exception it raised.
    """
    try:
        code = body()
    except KeyboardInterrupt:
        print("clustercheck: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:
        if own_fault is not None and not state.debug:  # the last line of defence
            own_fault.report(f"{type(exc).__name__}: {exc}")
            return own_fault.code
        if reader_gone(exc):
            quiet_stdout()
            return READER_GONE
        if not isinstance(exc, Exception):  # SystemExit and the like: not an error
            raise
        return _exit_code_of(exc)
    return 0 if code is None else int(code)


#: the exit code of a command cut off while writing by a reader that closed its output (`| head`):
#: 128 + SIGPIPE, what cat or grep exit with in a shell; never 0, never a traceback
READER_GONE = 141


def reader_gone(exc: BaseException | None) -> bool:
    """Whether `exc` is a broken pipe, or was raised while handling one: rich's console and click
    exit 1 when stdout's reader has gone."""
    while exc is not None:
        if isinstance(exc, BrokenPipeError):
            return True
        exc = exc.__context__
    return False


def flush_stdout() -> None:
    """The last flush before exit: a reader gone by then (a buffered report it never read) leaves
    the command's exit code as it is, with no 'Exception ignored' from the interpreter."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    except (OSError, ValueError):  # stdout closed by a command, or not a file
        pass


def _exit_code_of(exc: Exception) -> int:
    """Print what went wrong and give its exit code: usage 64, a host or a run's error 3, a bug 70."""
    if isinstance(exc, UsageError):
        print(f"clustercheck: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    if isinstance(exc, HostError):
        print(f"clustercheck: {exc.host}: {exc}", file=sys.stderr)
        return int(ExitCode.ERROR)
    if isinstance(exc, ClusterCheckError):
        print(f"clustercheck: error: {exc}", file=sys.stderr)
        return int(ExitCode.ERROR)
    if state.debug:  # the traceback, and the same exit code: --debug never changes what a run means
        import traceback

        traceback.print_exception(exc)
        print(f"clustercheck: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 70
    print(
        f"clustercheck: internal error: {type(exc).__name__}: {exc} (run `{_debug_command()}` for the traceback)",
        file=sys.stderr,
    )
    return 70


_command: list[str] = []  # the command line (main.main sets it), for the --debug hint


def _debug_command() -> str:
    """The command line again with --debug in its place, before the subcommand."""
    words = [a for a in _command if a != "--debug"]
    sub = next((a for a in words if not a.startswith("-")), None)
    return f"clustercheck --debug {sub} ..." if sub else "clustercheck --debug ..."
