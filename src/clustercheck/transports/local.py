"""The local node: subprocesses with hard timeouts, real file reads, in-process probes.

Commands run with LC_ALL=C (parsers expect C-locale output), stdin at EOF, and what they
print capped (`host.output_limit()`, 16 MiB): a command that prints more is killed and the
call raises `OutputTooLarge`, never a silently cut answer. A command stuck in
uninterruptible sleep (a hung NFS server) cannot be reaped: it is abandoned, and the result
says it timed out. File reads outside /proc and /sys run in a helper thread for the same
reason: a read on a dead mount blocks forever.

No process is left behind. Commands stay in clustercheck's own process group, so what
stops clustercheck stops them too: slurmd's SIGTERM and SIGKILL to the prolog's process
group at PrologEpilogTimeout, Ctrl-C in a terminal. Every command carries
`CLUSTERCHECK_CMD=<clustercheck's pid>-<transport>-<n>` in its environment, and so does
everything it starts (a `setsid` daemon too, unless it clears its environment): on a
timeout, on `close()` (the end of the host's checks, or the run's --timeout) and on
SIGTERM, SIGHUP or SIGINT, every process that carries a mark, or descends from one, is
killed (`kill_children()`). After `close()` the transport starts nothing. A worker forked
to run the checks (the prolog, `run --timeout`) gets SIGTERM when its parent dies
(host.py), and `kill_worker_on_signal()` lets that parent forward the signals. Keeping
commands in our process group costs nothing; the alternative backstop for a SIGKILL of
clustercheck alone, PR_SET_PDEATHSIG through `preexec_fn`, costs about 1.2 ms per command
(0.66 -> 1.9 ms here), is unsafe with threads, and reaches only the direct child.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from clustercheck.errors import CommandTimeout, HostError, ProbeUnavailable
from clustercheck.host import CommandResult, OutputTooLarge, describe_size, get_probe, in_thread, output_limit

_ENV = {**os.environ, "LC_ALL": "C", "LANG": "C"}
_SAFE_PREFIXES = ("/proc/", "/sys/")  # kernel pseudo-files never block
MARK = "CLUSTERCHECK_CMD"  # the environment variable every command (and its descendants) carries
_READ_CHUNK = 1024 * 1024

# -- every live child of this process, whatever transport started it ------------------------
_LIVE: dict[int, tuple[subprocess.Popen[bytes], str]] = {}  # pid -> (process, its mark)
_LIVE_LOCK = threading.Lock()
_SEQ = itertools.count(1)  # of commands, in this process
_TRANSPORTS = itertools.count(1)
_PREVIOUS: dict[int, Any] = {}  # signal -> the handler ours replaced
_INSTALLED_IN = 0  # the pid that installed our handlers (a forked child installs its own)


def kill_children(owner: int | None = None) -> int:
    """Kill every command this process (or process `owner`) started that still runs, and all
    they started, `setsid` daemons included (by the CLUSTERCHECK_CMD mark they inherit).

    For signal handlers and watchdogs (the prolog's budget, a SIGTERM from slurmd): safe to
    call from any thread or a signal handler, never raises, and takes a few milliseconds
    (one pass over /proc). `owner`: a forked child that ran checks, killed by its parent
    (its commands carry the child's pid). Returns how many processes it signalled.
    """
    with contextlib.suppress(Exception):
        if owner is not None and owner != os.getpid():
            return _kill_marked([f"{owner}-"], [])
        return _kill_marked([f"{os.getpid()}-"], [p.pid for p, _ in list(_LIVE.values())])
    return 0


def install_signal_handlers() -> None:
    """On SIGTERM, SIGHUP and SIGINT, kill our commands, then do what the signal did before.

    Once per process. Only from the main thread (Python's rule; elsewhere it does nothing). A
    signal that was ignored (nohup) stays ignored; a Python handler installed before ours
    still runs after the commands are killed (SIGINT's raises KeyboardInterrupt).
    """
    global _INSTALLED_IN
    if threading.current_thread() is not threading.main_thread() or os.getpid() == _INSTALLED_IN:
        return  # once per process: a handler that chains to ours must not get ours chained to it
    _INSTALLED_IN = os.getpid()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            current = signal.getsignal(signum)
            if current is _on_signal or current == signal.SIG_IGN:
                continue
            _PREVIOUS[signum] = current
            signal.signal(signum, _on_signal)


def kill_worker_on_signal(worker: int) -> Callable[[], None]:
    """In a parent that forked `worker` to run the checks (the prolog's budget): on SIGTERM,
    SIGHUP or SIGINT kill the worker and every command it started, then do what the signal
    did before (by default: die of it). Main thread only. Returns the function that puts the
    previous handlers back, for when the worker is done.
    """
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            os.kill(worker, signal.SIGKILL)
        kill_children(owner=worker)
        kill_children()
        _pass_on(signum, frame, previous.get(signum, signal.SIG_DFL))

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            current = signal.getsignal(signum)
            if current == signal.SIG_IGN:
                continue
            previous[signum] = current
            signal.signal(signum, handler)

    def restore() -> None:
        for signum, before in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, before)

    return restore


def _on_signal(signum: int, frame: FrameType | None) -> None:
    kill_children()
    _pass_on(signum, frame, _PREVIOUS.get(signum, signal.SIG_DFL))


def _pass_on(signum: int, frame: FrameType | None, previous: Any) -> None:
    """Do what the signal did before our handler: call that handler, or the default action
    (end this process by the same signal, as if we had not been here)."""
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


os.register_at_fork(after_in_child=_LIVE.clear)  # a forked worker does not own its parent's commands
# (host.py makes a worker forked from the main thread die with its parent: PR_SET_PDEATHSIG)


class LocalTransport:
    """This node (a `base.Transport`): subprocesses, file reads, in-process probes."""

    kind = "local"
    fixture = None  # a live node, not a recording

    def __init__(self, host: str | None = None) -> None:
        # Under Slurm (srun tasks, prologs) the node's Slurm name is the one admins use.
        self.host = host or os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        self._running: set[int] = set()  # pids of this transport's live commands
        self._id = next(_TRANSPORTS)  # in its commands' marks: <pid>-<transport>-<command>
        self._ran = False
        self._closed = False
        self._lock = threading.Lock()
        install_signal_handlers()

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        argv = tuple(argv)
        start = time.monotonic()
        mark = f"{os.getpid()}-{self._id}-{next(_SEQ)}"
        with self._lock:  # close() either sees this command or keeps it from starting
            self._refuse_if_closed(argv)
            self._ran = True
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={**_ENV, MARK: mark},
                )
            except FileNotFoundError:
                return CommandResult(argv, 127, "", f"{argv[0]}: command not found", time.monotonic() - start)
            except PermissionError as exc:
                return CommandResult(argv, 126, "", f"{argv[0]}: {exc.strerror}", time.monotonic() - start)
            self._running.add(proc.pid)
            _LIVE[proc.pid] = (proc, mark)
        limit = output_limit()
        try:
            out, err, how = _collect(proc, start + max(timeout, 0.0), limit)
            if how != "done":
                _kill_marked([mark + "\0"], [proc.pid])
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)  # a process in D state may not go: abandon it
        finally:
            with self._lock:
                self._running.discard(proc.pid)
            _LIVE.pop(proc.pid, None)
            for stream in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[union-attr]
        duration = time.monotonic() - start
        if how == "cut":
            raise OutputTooLarge.command(self.host, argv, limit)
        if how == "timeout":
            return CommandResult(argv, None, _text(out), _text(err), duration, timed_out=True)
        # a signal death is 128+N, as a shell (and so the SSH transport) reports it, not Popen's -N
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return CommandResult(argv, code, _text(out), _text(err), duration)

    def read(self, path: str, *, timeout: float) -> str:
        self._refuse_if_closed(("read", path))
        if path.startswith(_SAFE_PREFIXES):
            return _read_text(path, self.host)
        try:
            return in_thread(lambda: _read_text(path, self.host), timeout, f"reading {path}")
        except TimeoutError:
            raise CommandTimeout(
                self.host, f"reading {path} did not finish within {timeout:g} s (a hung filesystem?)"
            ) from None

    def probe(self, name: str, *, timeout: float) -> Any:
        self._refuse_if_closed(("probe", name))
        probe = get_probe(name)
        if probe.local is not None:
            try:
                return probe.local()
            except ProbeUnavailable:
                pass  # e.g. libnvidia-ml not loadable: build the same record from commands
        return probe.remote(self, timeout)

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        """Nothing: a local read costs no more one file at a time (Host.read reads each)."""
        return {}

    def connect(self) -> None:
        """Nothing to connect to."""

    def close(self) -> None:
        """Kill commands still running (the run's --timeout expired while they ran) and whatever
        the finished ones left behind (a daemon that holds no pipe of ours); start no more.
        One pass over /proc when commands ran (about 20 us per process on the node)."""
        with self._lock:
            self._closed = True
            pids = list(self._running)
            ran = self._ran
        if ran:
            _kill_marked([f"{os.getpid()}-{self._id}-"], pids)

    def _refuse_if_closed(self, what: Sequence[str]) -> None:
        if self._closed:
            raise HostError(
                self.host,
                f"not started: `{' '.join(what)}`: the transport to {self.host} is closed "
                "(the run's --timeout expired, or the run ended)",
            )


def _collect(proc: subprocess.Popen[bytes], deadline: float, limit: int) -> tuple[bytes, bytes, str]:
    """stdout and stderr until both close and the process exits, the deadline, or the cap.

    Returns (stdout, stderr, how): how is "done", "timeout" or "cut" (more than `limit`
    bytes on both streams together; the rest is not kept).
    """
    assert proc.stdout is not None and proc.stderr is not None
    bufs: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    total = 0
    with selectors.PollSelector() as sel:  # poll, not select: fds above FD_SETSIZE are fine
        for fd in bufs:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(bufs[out_fd]), bytes(bufs[err_fd]), "timeout"
            for key, _ in sel.select(left):
                fd = key.fd
                try:
                    data = os.read(fd, _READ_CHUNK)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(fd)
                    continue
                total += len(data)
                if total > limit:
                    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), "cut"
                bufs[fd] += data
    try:  # both streams closed; the process may still run (it closed them itself)
        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        return bytes(bufs[out_fd]), bytes(bufs[err_fd]), "timeout"
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), "done"


def _kill_marked(marks: Sequence[str], pids: Sequence[int]) -> int:
    """SIGKILL `pids`, every process whose environment has an entry MARK=<one of `marks`>...,
    and every descendant of those. A mark ending in NUL matches one command exactly, else it
    is a prefix ("<pid>-": all of one clustercheck process's commands). Another pass over
    /proc follows one that killed something (one may have forked while we looked), and one
    that saw a process in the middle of execve() (its environment and its command line read
    empty until the new image is set up), for up to a second; the process tree is read only
    when there is a hit."""
    needles = [f"{MARK}={m}".encode() for m in marks]
    me = os.getpid()
    killed: set[int] = set()
    give_up = time.monotonic() + 1.0
    for _ in range(100):  # a bound even against a fork bomb of marked processes
        marked, in_exec = _marked(needles)
        doomed = marked | set(pids)
        if not doomed - killed:
            if not in_exec or time.monotonic() > give_up:
                break
            time.sleep(0.01)
            continue
        children: dict[int, list[int]] = {}  # a process that cleared its environment, a child mid-exec
        for pid, ppid in _parents().items():
            children.setdefault(ppid, []).append(pid)
        todo = list(doomed)
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in doomed:
                    doomed.add(child)
                    todo.append(child)
        doomed.discard(me)
        fresh = doomed - killed
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= fresh
    return len(killed)


def _pids() -> list[str]:
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _marked(needles: Sequence[bytes]) -> tuple[set[int], bool]:
    """The processes with an environment entry that starts with one of `needles`, and whether
    one is in the middle of execve(): alive (it has an executable: no kernel thread, no zombie)
    with an empty environment and an empty command line (a process that cleared its
    environment still has its argv)."""
    hits: set[int] = set()
    in_exec = False
    for name in _pids():
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            if env:
                if any(env.startswith(n) or b"\0" + n in env for n in needles):
                    hits.add(int(name))
            elif not in_exec and os.path.exists(f"/proc/{name}/exe"):
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    in_exec = not f.read(1)
    return hits, in_exec


def _parents() -> dict[int, int]:
    """{pid: its parent's pid} for every process."""
    parents: dict[int, int] = {}
    for name in _pids():
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            parents[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return parents


def _read_text(path: str, host: str) -> str:
    limit = output_limit()
    try:
        with open(path, "rb") as f:  # in chunks: a /proc file refuses one read of the whole cap
            chunks: list[bytes] = []
            size = 0
            while size <= limit and (chunk := f.read(_READ_CHUNK)):
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
    except FileNotFoundError:
        raise
    except NotADirectoryError as exc:
        raise FileNotFoundError(path) from exc
    except OSError as exc:
        raise HostError(host, f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise OutputTooLarge(
            host,
            f"{path} is larger than {describe_size(limit)}, clustercheck's cap on one read: "
            "it was not judged (raise the cap with CLUSTERCHECK_MAX_OUTPUT if it should be read whole)",
        )
    return data.decode("utf-8", errors="replace")


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")
