"""A hard stop that no Python code can defeat: work runs in a forked child that is killed, with
everything it started, at its deadline (`run_bounded`); `Watchdog` ends this process itself.

Used by `run --timeout` (cli), the prolog and the health check (slurm). Standard library only at
the top: the prolog is on every job's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, NamedTuple

from clustercheck.errors import ClusterCheckError, UsageError

__all__ = ["ChildOutcome", "Watchdog", "descendants", "kill_tree", "run_bounded"]


class ChildOutcome(NamedTuple):
    """How a bounded child ended: its JSON answer, or why there is none."""

    payload: Any = None  # what the work returned (JSON), when it returned
    crash: str | None = None  # the exception the work raised: its message ("TypeError: ..." for a bug)
    crash_kind: str | None = None  # "usage" (UsageError: bad input), "error" (ClusterCheckError), "bug"
    killed: bool = False  # the deadline passed: the child and everything it started were killed
    died: str | None = None  # the child ended without answering ("killed by signal 9")
    exit_status: int | None = None


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid, from /proc (parents before children)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL pid and every process it started, even those in a session of their own: each is
    stopped first (so none forks a new one unseen), then all are killed."""
    import signal

    seen: list[int] = []
    for _ in range(3):  # a process may have forked between the scan and its SIGSTOP
        new = [p for p in [pid, *descendants(pid)] if p not in seen]
        if not new:
            break
        for p in new:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGSTOP)
        seen += new
    for p in seen:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)


def run_bounded(work: Any, seconds: float, *, debug: bool = False) -> ChildOutcome:
    """Run work() in a forked child and wait at most `seconds` for its JSON answer.

    The budget holds whatever the work does: a check stuck in C code or in a regex that never
    lets go of the interpreter lock stops Python threads and timers, not this process, which
    only waits on a pipe. When the time is up the child's whole process tree is killed.
    """
    import select

    deadline = time.monotonic() + max(0.0, seconds)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    from clustercheck.transports.local import kill_children, kill_worker_on_signal  # before the fork: once

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: do the work, answer through the pipe, never return
        os.close(read_end)
        code = 0
        try:
            try:
                reply: dict[str, Any] = {"ok": work()}
            except BaseException as exc:  # everything is reported to the parent
                if debug:
                    import traceback

                    traceback.print_exc()
                if isinstance(exc, UsageError):
                    reply = {"crash": str(exc), "kind": "usage"}
                elif isinstance(exc, ClusterCheckError):
                    reply = {"crash": str(exc), "kind": "error"}
                else:
                    reply = {"crash": f"{type(exc).__name__}: {exc}", "kind": "bug"}
            data = json.dumps(reply, default=str).encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            code = 70
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    # slurmd's SIGTERM (or a Ctrl-C) reaches this process first: it ends the child and its
    # commands too, then does what the signal did before (the child also gets SIGTERM when this
    # process dies, host.py's PR_SET_PDEATHSIG, but a child holding the GIL never handles it)
    restore = kill_worker_on_signal(pid)
    chunks: list[bytes] = []
    killed = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                killed = True
                break
            ready, _, _ = select.select([read_end], [], [], left)
            if not ready:
                continue
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
    if killed:
        kill_tree(pid)
        kill_children(owner=pid)  # what it started that left its tree (a setsid daemon)
    status = 0
    with contextlib.suppress(ChildProcessError):
        _, status = os.waitpid(pid, 0)
    restore()
    if killed:
        return ChildOutcome(killed=True)
    exit_status = os.waitstatus_to_exitcode(status)
    answer: Any = None
    with contextlib.suppress(ValueError):
        answer = json.loads(b"".join(chunks).decode("utf-8"))
    if not isinstance(answer, dict) or not ({"ok", "crash"} & set(answer)):
        died = f"killed by signal {-exit_status}" if exit_status < 0 else f"exited {exit_status} without an answer"
        return ChildOutcome(died=died, exit_status=exit_status)
    if "crash" in answer:
        kind = str(answer.get("kind", "bug"))
        return ChildOutcome(crash=str(answer["crash"]), crash_kind=kind, exit_status=exit_status)
    return ChildOutcome(payload=answer["ok"], exit_status=exit_status)


class Watchdog:
    """Ends the process at a hard deadline, whatever the main thread is stuck in.

    The backstop for the parent's own few steps after its child answered (writing the verdict
    to a stdout nobody reads, a state folder on a hung mount): the checks themselves run in a
    child that `run_bounded` kills.
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
