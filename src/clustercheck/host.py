"""The host API: the only way a check touches a node.

A check sees one `Host` per node per run. It offers three primitives, whatever the
transport (local, SSH, replay of a fixture, recording):

- `run(*argv)` -> `CommandResult` (never raises for a non-zero exit or a timeout;
  `output()` is the strict variant that does),
- `read(path)` -> text, `FileNotFoundError` when the file is absent on the node,
- `probe(name)` -> JSON-able facts that only an in-process library sees (e.g. NVML).

Every primitive is bounded by a timeout and by the running check's deadline, and by
what it may bring back: one command's output or one file at most `output_limit()`
(16 MiB unless CLUSTERCHECK_MAX_OUTPUT says otherwise), one host's answers in one run at
most `host_output_limit()` (64 MiB, CLUSTERCHECK_MAX_HOST_OUTPUT). Past a cap the call
raises `OutputTooLarge` (an `error` result naming the command or file and the cap), never
a silently cut text that a check would judge as complete. Every call leaves an
observation (what was run or read) that becomes the check's evidence. `@fact` gathers a
subsystem once per host per run.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from clustercheck.errors import CommandTimeout, HostError
from clustercheck.transports.base import CommandResult as CommandResult  # what run() returns (re-exported)
from clustercheck.transports.base import Transport as Transport  # the protocol (re-exported: checks import it here)

T = TypeVar("T")

#: Default time budget of one command, file read or probe, in seconds.
DEFAULT_COMMAND_TIMEOUT = 10.0

#: Default caps, in bytes: one command's stdout and stderr together (or one file), and all a
#: host answers in one run. The environment variables CLUSTERCHECK_MAX_OUTPUT and
#: CLUSTERCHECK_MAX_HOST_OUTPUT override them (bytes, or with a K/M/G suffix: "64M").
DEFAULT_OUTPUT_LIMIT = 16 * 1024 * 1024
DEFAULT_HOST_OUTPUT_LIMIT = 64 * 1024 * 1024

_SIZE_RE = re.compile(r"\s*(\d+)\s*([kmg]?)(?:i?b)?\s*", re.IGNORECASE)


class OutputTooLarge(HostError):
    """A command printed, a file held, or a host sent more than clustercheck keeps: the input
    was cut, so it is not judged."""

    @classmethod
    def command(cls, host: str, argv: Sequence[str], limit: int) -> OutputTooLarge:
        """The error for a command stopped at the per-command cap (every transport says it so)."""
        return cls(
            host,
            f"`{shlex.join(argv)}` printed more than {describe_size(limit)}, clustercheck's cap on one "
            "command's output: it was stopped and its output not judged "
            "(raise the cap with CLUSTERCHECK_MAX_OUTPUT if this much output is expected)",
        )


def _limit(variable: str, default: int) -> int:
    value = os.environ.get(variable)
    if not value:
        return default
    m = _SIZE_RE.fullmatch(value)
    if m is None or int(m.group(1)) == 0:
        raise HostError("clustercheck", f"{variable}={value!r} is not a size such as 16777216, 16M or 1G")
    return int(m.group(1)) * int(1024 ** " kmg".index((m.group(2) or " ").lower()))


def output_limit() -> int:
    """The most bytes one command's output (stdout and stderr together) or one file may hold."""
    return _limit("CLUSTERCHECK_MAX_OUTPUT", DEFAULT_OUTPUT_LIMIT)


def host_output_limit() -> int:
    """The most bytes one host's commands and files may bring back in one run, together."""
    return _limit("CLUSTERCHECK_MAX_HOST_OUTPUT", DEFAULT_HOST_OUTPUT_LIMIT)


def describe_size(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Probe:
    """Facts that need an in-process library locally and commands elsewhere.

    `local()` runs in-process on the local node and raises ProbeUnavailable when the
    library is missing; `remote(transport)` builds the same record from commands run
    through any transport (SSH, or locally as the fallback). Recording stores the
    record itself, so replay does not care which side made it.
    """

    name: str
    remote: Callable[[Transport, float], Any]
    local: Callable[[], Any] | None = None


_PROBES: dict[str, Probe] = {}


def register_probe(probe: Probe) -> Probe:
    _PROBES[probe.name] = probe
    return probe


def get_probe(name: str) -> Probe:
    """The probe named `name`, from the registry or the module clustercheck.probes.<name>."""
    if name not in _PROBES:
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(f"clustercheck.probes.{name}")
    if name not in _PROBES:
        raise KeyError(f"no probe named {name!r}")
    return _PROBES[name]


class Host:
    """One node for one run, as checks see it."""

    def __init__(self, transport: Transport, *, command_timeout: float = DEFAULT_COMMAND_TIMEOUT):
        self.transport = transport
        self.name = transport.host
        self.command_timeout = command_timeout
        self.deadline: float | None = None  # monotonic time the running check must end by
        self.observations: list[str] = []  # of the running check; the runner resets it
        self.unreachable: str | None = None  # why, once the transport could not reach the node
        self._prefetched: dict[str, str | None] = {}  # path -> text, None when absent
        self._facts: dict[str, tuple[Any, BaseException | None, list[str]]] = {}
        self.received = 0  # bytes of command output and file text brought back in this run

    # -- primitives ---------------------------------------------------------------
    def run(self, *argv: str, timeout: float | None = None, shown_as: str | None = None) -> CommandResult:
        """Run a command; a non-zero exit or a timeout is in the result, not raised.

        `shown_as`: how the evidence (and a message about the cap or the deadline) writes the
        command instead of spelling out every argument, e.g. `sh -c '<rdma gather script>'` for a
        long script. What runs (and what a fixture records) is `argv` all the same.

        OutputTooLarge (an error) when it printed more than the cap: its output is not judged."""
        shown = shlex.join(argv) if shown_as is None else shown_as
        self._refuse_if_over(shown)
        try:
            result = self.transport.run(argv, timeout=self._budget(timeout, "run " + shown))
        except OutputTooLarge:
            cap = describe_size(output_limit())
            self.observations.append(f"$ {shown}  (stopped: printed more than {cap})")
            raise
        self._count(len(result.stdout) + len(result.stderr), shown)
        line = result.describe()  # "$ COMMAND  (how it ended)"
        if shown_as is not None:
            line = f"$ {shown}{line[len(result.command) + 2 :]}"
        if not result.ok and result.stderr.strip():
            line += "  stderr: " + _first_line(result.stderr)
        self.observations.append(line)
        return result

    def output(self, *argv: str, timeout: float | None = None) -> str:
        """stdout of a command that must succeed; otherwise HostError (an `error` result)."""
        result = self.run(*argv, timeout=timeout)
        if result.timed_out:
            raise CommandTimeout(self.name, f"`{result.command}` did not finish within {result.duration_s:.1f} s")
        if result.exit_code != 0:
            detail = _first_line(result.stderr) or _first_line(result.stdout) or "no output"
            hint = " (command not found on the node)" if result.exit_code == 127 else ""
            raise HostError(self.name, f"`{result.command}` exited {result.exit_code}{hint}: {detail}")
        return result.stdout

    def prefetch(self, paths: Sequence[str]) -> None:
        """Read these files ahead in one round trip where the transport can (`read_many`; SSH does).

        Only for files that never block (kernel pseudo-files, /etc): a batch stuck on one hung
        file would delay all of them. Later read() calls of these paths use what was fetched.
        """
        safe = [p for p in paths if p.startswith(("/proc/", "/sys/", "/etc/")) and p not in self._prefetched]
        if len(safe) < 2:
            return
        try:
            got = self.transport.read_many(safe, timeout=self.command_timeout)
        except OutputTooLarge:
            return  # each read() then meets the cap on its own, and says which file it was
        if not got:  # nothing read ahead (or a transport that reads no faster in a batch)
            return
        self._count(sum(len(t) for t in got.values() if t), "reading " + ", ".join(safe))
        self._prefetched.update(got)

    def read(self, path: str, timeout: float | None = None) -> str:
        """Text of a file on the node; FileNotFoundError when it is absent."""
        if path in self._prefetched:
            text = self._prefetched[path]
            if text is None:
                self.observations.append(f"read {path}: absent")
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
            self.observations.append(f"read {path} ({text.count(chr(10))} lines)")
            return text
        self._refuse_if_over("read " + path)
        try:
            text = self.transport.read(path, timeout=self._budget(timeout, "read " + path))
        except FileNotFoundError:
            self.observations.append(f"read {path}: absent")
            raise
        except OutputTooLarge:
            self.observations.append(f"read {path}: larger than {describe_size(output_limit())}, not read")
            raise
        self._count(len(text), "reading " + path)
        self.observations.append(f"read {path} ({text.count(chr(10))} lines)")
        return text

    def read_optional(self, path: str, timeout: float | None = None) -> str | None:
        """Like read(), but None when the file is absent."""
        try:
            return self.read(path, timeout=timeout)
        except FileNotFoundError:
            return None

    def probe(self, name: str, timeout: float | None = None) -> Any:
        """The JSON-able record of an in-process probe (e.g. "nvml")."""
        record = self.transport.probe(name, timeout=self._budget(timeout, "probe " + name))
        self.observations.append(f"probe {name}")
        return record

    # -- facts ----------------------------------------------------------------------
    def fact(self, key: str, gather: Callable[[Host], T]) -> T:
        """Gather once per host per run; reusing it also reuses its observations."""
        if key not in self._facts:
            outer, self.observations = self.observations, []
            value: Any = None
            error: BaseException | None = None
            try:
                value = gather(self)
            except Exception as exc:  # kept and re-raised to every check that uses the fact
                error = exc
            self._facts[key] = (value, error, self.observations)
            self.observations = outer
        value, error, observed = self._facts[key]
        self.observations.extend(o for o in observed if o not in self.observations)
        if error is not None:
            raise error
        return value  # type: ignore[no-any-return]

    def _count(self, size: int, what: str) -> None:
        self.received += size
        self._refuse_if_over(what)

    def _refuse_if_over(self, what: str) -> None:
        limit = host_output_limit()
        if self.received > limit:
            raise OutputTooLarge(
                self.name,
                f"{self.name} sent more than {describe_size(limit)} in this run (clustercheck's cap per host, "
                f"CLUSTERCHECK_MAX_HOST_OUTPUT), so `{what}` and what follows are not judged",
            )

    def _budget(self, timeout: float | None, what: str) -> float:
        budget = self.command_timeout if timeout is None else timeout
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise CommandTimeout(self.name, f"the check ran out of time before it could {what}")
            budget = min(budget, left)
        return budget


# -- a forked worker (the prolog's, a --timeout run's) dies with its parent ----------------------
# Here, not in the local transport: this module is loaded before such a fork, that one may not be.
_FORK: dict[str, Any] = {}  # the parent at the last os.fork()


def _before_fork() -> None:
    _FORK["parent"] = os.getpid()
    _FORK["from_main"] = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    """In a child of os.fork() from the main thread: get SIGTERM when the parent dies, however
    it dies (SIGKILL included), PR_SET_PDEATHSIG. The local transport's SIGTERM handler then
    kills the worker's commands. Not for a fork from another thread: the kernel sends the
    signal when the forking *thread* ends. Subprocesses (fork+exec in C) never run this."""
    if not _FORK.get("from_main"):
        return
    with contextlib.suppress(Exception):
        import ctypes  # about 3 ms, once per worker (NVML's bindings import it anyway)

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, 15, 0, 0, 0) == 0 and os.getppid() != _FORK.get("parent"):  # 1, 15: PDEATHSIG, TERM
            os.kill(os.getpid(), 15)  # the parent died before we asked: go now


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def in_thread(call: Callable[[], T], timeout: float, name: str) -> T:
    """`call()` in a daemon thread; TimeoutError when it has not returned within `timeout`.

    For what cannot be interrupted (a read on a hung NFS mount, a DNS lookup): the thread is
    abandoned, and a daemon thread never keeps the process alive. `call`'s exception is raised.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"{name} did not finish within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def fact(gather: Callable[[Host], T]) -> Callable[[Host], T]:
    """Decorator: `@fact def gpus(host) -> list[...]` is gathered once per host per run."""
    key = f"{gather.__module__}.{gather.__qualname__}"

    @functools.wraps(gather)
    def cached(host: Host) -> T:
        return host.fact(key, gather)

    return cached


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""
