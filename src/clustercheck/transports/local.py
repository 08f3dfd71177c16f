"""The local node: subprocesses with hard timeouts, real file reads, in-process probes.

Commands start in a new session with LC_ALL=C (parsers expect C-locale output) and on
timeout the whole process group is killed, plus any descendant that left it (psutil).
A command stuck in uninterruptible sleep (a hung NFS server) cannot be reaped: it is
abandoned, and the result says it timed out. File reads outside /proc and /sys run in a
helper thread for the same reason: a read on a dead mount blocks forever.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from clustercheck.errors import CommandTimeout, HostError, ProbeUnavailable
from clustercheck.host import CommandResult, get_probe, in_thread

_ENV = {**os.environ, "LC_ALL": "C", "LANG": "C"}
_SAFE_PREFIXES = ("/proc/", "/sys/")  # kernel pseudo-files never block


class LocalTransport:
    kind = "local"

    def __init__(self, host: str | None = None) -> None:
        # Under Slurm (srun tasks, prologs) the node's Slurm name is the one admins use.
        self.host = host or os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        self._running: set[subprocess.Popen[bytes]] = set()

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        argv = tuple(argv)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=_ENV,
            )
        except FileNotFoundError:
            return CommandResult(argv, 127, "", f"{argv[0]}: command not found", time.monotonic() - start)
        except PermissionError as exc:
            return CommandResult(argv, 126, "", f"{argv[0]}: {exc.strerror}", time.monotonic() - start)
        self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            try:  # collect what it printed; a grandchild may hold the pipes open, so bound it
                out, err = proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
            return CommandResult(argv, None, _text(out), _text(err), time.monotonic() - start, timed_out=True)
        finally:
            self._running.discard(proc)
        # a signal death is 128+N, as a shell (and so the SSH transport) reports it, not Popen's -N
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return CommandResult(argv, code, _text(out), _text(err), time.monotonic() - start)

    def read(self, path: str, *, timeout: float) -> str:
        if path.startswith(_SAFE_PREFIXES):
            return _read_text(path, self.host)
        try:
            return in_thread(lambda: _read_text(path, self.host), timeout, f"reading {path}")
        except TimeoutError:
            raise CommandTimeout(
                self.host, f"reading {path} did not finish within {timeout:g} s (a hung filesystem?)"
            ) from None

    def probe(self, name: str, *, timeout: float) -> Any:
        probe = get_probe(name)
        if probe.local is not None:
            try:
                return probe.local()
            except ProbeUnavailable:
                pass  # e.g. libnvidia-ml not loadable: build the same record from commands
        return probe.remote(self, timeout)

    def close(self) -> None:
        """Kill commands still running (the run's --timeout expired while they ran)."""
        for proc in list(self._running):
            _kill_tree(proc)


def _read_text(path: str, host: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise
    except NotADirectoryError as exc:
        raise FileNotFoundError(path) from exc
    except OSError as exc:
        raise HostError(host, f"cannot read {path}: {exc.strerror or exc}") from exc


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    try:
        import psutil

        descendants = psutil.Process(proc.pid).children(recursive=True)
    except Exception:  # psutil missing or the process already gone
        descendants = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in descendants:
        with contextlib.suppress(Exception):
            child.kill()
