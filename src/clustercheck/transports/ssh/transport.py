"""SSHTransport: one host over SSH, one connection, one session at a time per thread."""

from __future__ import annotations

import contextlib
import errno
import math
import secrets
import shlex
import threading
import time
from collections.abc import Sequence
from typing import Any

import paramiko

from clustercheck.errors import CommandTimeout, HostError, Unreachable
from clustercheck.host import CommandResult, OutputTooLarge, get_probe, output_limit
from clustercheck.transports.ssh.config import Target, jump_hosts, load_config, target_for
from clustercheck.transports.ssh.connection import DEFAULT_CONNECT_TIMEOUT, Connection, describe, open_connection
from clustercheck.transports.ssh.session import (
    BACKSTOP_S,
    COMMAND_LINE,
    WINDOW,
    Session,
    end_channel,
    parse_files,
    script,
    sh_word,
)


class SSHTransport:
    """Run commands on, and read files of, one host over SSH. Connects on first use."""

    kind = "ssh"
    fixture = None  # a live node, not a recording

    def __init__(
        self,
        host: str,
        *,
        ssh_config: str | None = None,
        user: str | None = None,
        identity: list[str] | None = None,
        port: int | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout: float | None = None,
    ) -> None:
        self.host = host
        self.ssh_config = ssh_config
        self.user = user
        self.identity = list(identity) if identity else None
        self.port = port
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout = connect_timeout  # None: ssh_config's ConnectTimeout, else 10 s
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._target: Target | None = None
        self._closed = False
        self._pending: list[Any] = []  # sockets and transports of a handshake in progress
        self._idle: list[Session] = []  # sessions waiting for their next command
        self._busy: set[Session] = set()  # sessions running a command now

    def __repr__(self) -> str:
        return f"SSHTransport({self.host!r})"

    # -- the Transport protocol ---------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        argv = tuple(argv)
        if not argv:
            raise ValueError("run() needs a command")
        return self._request(argv, ("cc_run", *argv), timeout, scan=True)

    def _request(self, argv: tuple[str, ...], call: tuple[str, ...], timeout: float, *, scan: bool) -> CommandResult:
        """Send one request (`call`: cc_run's or cc_files' arguments) for `argv` on a session of
        this host's connection: an idle one, else a new one. The session is kept for the next
        command when the request ended cleanly, and closed (its watcher then kills all it ran)
        when it did not: a timeout, output past the cap, a broken channel."""
        self._refuse_if_closed(argv)
        conn = self._connection()
        start = time.monotonic()
        deadline = start + max(timeout, 0.0)
        limit = output_limit()
        session = self._idle_session(conn)
        fresh = session is None
        if session is None:
            session = Session(self._open_channel(conn, deadline, argv))
        session.seq += 1
        rid = session.seq
        if call[0] == "cc_run":
            call = (
                "cc_run",
                str(rid),
                str(math.ceil(max(timeout, 0.0)) + BACKSTOP_S),
                "1" if scan else "0",
                *call[1:],
            )
        else:
            call = (call[0], str(rid), *call[1:])
        line = " ".join(sh_word(w) for w in call)
        with self._lock:
            self._busy.add(session)
        how = "closed"
        try:
            self._refuse_if_closed(argv)
            if fresh:
                text = script(session.nonce, session.end, line)
                self._exec(conn, session.chan, text.encode("utf-8", errors="surrogateescape"), deadline, argv)
            else:
                session.drain()
                session.chan.sendall((line + "\n").encode("utf-8", errors="surrogateescape"))
            out, err, status, how = session.reply(rid, deadline, limit)
        except HostError:
            raise
        except Exception as exc:  # paramiko or socket trouble: the connection is suspect
            if self._closed:
                raise self._closed_error(argv) from exc
            self._drop(conn)
            raise Unreachable(
                self.host, f"SSH connection to {self._label()} failed during `{shlex.join(argv)}`: {describe(exc)}"
            ) from exc
        finally:
            with self._lock:
                self._busy.discard(session)
                keep = how == "done" and not self._closed
                if keep:
                    self._idle.append(session)
            if not keep:
                end_channel(session.chan)  # EOF on its stdin: the node-side watcher kills whatever is left
        duration = time.monotonic() - start
        if how == "cut":
            raise OutputTooLarge.command(self.host, argv, limit)
        if how == "closed":
            # The session ended before the command did: the connection broke, or the shell
            # itself was killed (sshd then sends exit-signal, which paramiko drops), or the
            # login shell did not run our script (then its exit status is the answer).
            if self._closed:
                raise self._closed_error(argv)
            if not conn.alive():
                self._drop(conn)
                what = f"lost the SSH connection to {self._label()} while running `{shlex.join(argv)}`"
                raise Unreachable(self.host, what)
            if status is None:
                status = 255  # what ssh(1) reports for a remote command killed by a signal
        if how == "timeout":
            return CommandResult(argv, None, _text(out), _text(err), duration, timed_out=True)
        return CommandResult(argv, status, _text(out), _text(err), duration)

    def _idle_session(self, conn: Connection) -> Session | None:
        with self._lock:
            while self._idle:
                session = self._idle.pop()
                if session.chan.get_transport() is conn.transport and session.usable():
                    return session
                end_channel(session.chan)
        return None

    def read(self, path: str, *, timeout: float) -> str:
        argv = ("cat", "--", path)
        result = self._request(argv, ("cc_run", *argv), timeout, scan=False)  # our `cat` leaves nothing behind
        if result.timed_out:
            raise CommandTimeout(self.host, f"reading {path} did not finish within {timeout:g} s (a hung filesystem?)")
        if result.exit_code == 0:
            return result.stdout
        detail = next((line.strip() for line in result.stderr.splitlines() if line.strip()), "")
        if "No such file or directory" in detail or "Not a directory" in detail:
            raise FileNotFoundError(errno.ENOENT, f"No such file or directory on {self.host}", path)
        if result.exit_code == 127:
            detail = f"`cat` is not available on the node ({detail or 'exit 127'})"
        # strip "cat: PATH: " so the message reads "cannot read PATH: Permission denied"
        detail = detail.removeprefix("cat: ").removeprefix(f"{path}: ")
        raise HostError(self.host, f"cannot read {path}: {detail or f'cat exited {result.exit_code}'}")

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        """Several files in one request: one `head -v` for all of them, run by the session's
        shell (no session, no `sh`, no `cat` per file). Only for files that never block
        (kernel pseudo-files, /etc): the read runs without the remote `timeout` backstop
        (the client's deadline still holds).

        Each path is sent as an equivalent spelling with a random run of "/." and "/" in
        front ("/././/./proc/meminfo"), so that head's "==> NAME <==" lines cannot be forged
        by what a file holds. Returns {path: text, or None when absent}; a path it could not
        read either way (permission denied, not a regular file, or any surprise in the
        answer) is left out, for read() to report.
        """
        spelled: dict[str, str] = {}
        for path in paths:
            if path.startswith("/") and "\n" not in path and path not in spelled:
                bits = secrets.randbits(40)  # one draw, not 40 secrets.choice() calls (1 ms a host)
                spelled[path] = "/." + "".join("/." if bits >> i & 1 else "/" for i in range(40)) + path
        if not spelled:
            return {}
        argv = ("read", *spelled)
        cap = str(output_limit() + 1)
        result = self._request(argv, ("cc_files", cap, *spelled.values()), timeout, scan=False)
        if result.timed_out or result.exit_code is None:
            return {}
        return parse_files(result.stdout, spelled)

    def probe(self, name: str, *, timeout: float) -> Any:
        return get_probe(name).remote(self, timeout)

    def close(self) -> None:
        """End the connection and every command on it; abort a handshake in progress (never
        wait for it); start nothing after. Each command's node-side watcher then kills it."""
        self._closed = True
        for thing in list(self._pending):  # paramiko transports and sockets: closing is thread-safe
            with contextlib.suppress(Exception):
                thing.close()
        with self._lock:
            sessions = [*self._busy, *self._idle]
            self._idle.clear()
        for session in sessions:
            end_channel(session.chan)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- connection ---------------------------------------------------------------------
    def connect(self) -> None:
        """Connect now (bounded by the connect timeout): the runner does so before the host's first
        check, so the handshake does not eat that check's time budget. Unreachable otherwise."""
        self._connection()

    def _refuse_if_closed(self, argv: Sequence[str]) -> None:
        if self._closed:
            raise self._closed_error(argv)

    def _closed_error(self, argv: Sequence[str]) -> HostError:
        return HostError(
            self.host,
            f"not started: `{shlex.join(argv)}`: the connection to {self.host} was closed "
            "(the run's --timeout expired, or the run ended)",
        )

    def _connection(self) -> Connection:
        with self._lock:
            if self._closed:
                raise self._closed_error(["connect"])
            if self._conn is not None and self._conn.alive():
                return self._conn
            if self._conn is not None:  # died since the last call: try once more, afresh
                self._conn.close()
                self._conn = None
            if self._target is None:
                self._target = self._resolve()
            timeout = self.connect_timeout or self._target.connect_timeout or DEFAULT_CONNECT_TIMEOUT
            try:
                conn = open_connection(self._target, timeout, self._pending)
            except HostError:
                if self._closed:
                    raise self._closed_error(["connect"]) from None
                raise
            except Exception as exc:  # never a paramiko traceback: say what broke, in one line
                if self._closed:
                    raise self._closed_error(["connect"]) from None
                raise Unreachable(self.host, f"cannot connect to {self._label()}: {describe(exc)}") from exc
            finally:
                self._pending.clear()
            if self._closed:  # closed while the handshake ran: keep nothing
                conn.close()
                raise self._closed_error(["connect"])
            self._conn = conn
            return conn

    def _drop(self, conn: Connection) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.close()

    def _label(self) -> str:
        return self._target.label() if self._target else self.host

    def _resolve(self) -> Target:
        try:
            config = load_config(self.ssh_config)
            target = target_for(config, self.host, self.user, self.port, self.identity, self.accept_new_host_keys)
            if target.proxy_jump:
                target.jumps = jump_hosts(config, target.proxy_jump, self.accept_new_host_keys)
        except HostError:
            raise
        except Exception as exc:
            where = self.ssh_config or "~/.ssh/config"
            raise Unreachable(self.host, f"cannot use the ssh config ({where}) for {self.host}: {exc}") from exc
        return target

    # -- channels -------------------------------------------------------------------------
    def _open_channel(self, conn: Connection, deadline: float, argv: tuple[str, ...]) -> paramiko.Channel:
        budget = max(deadline - time.monotonic(), 0.5)
        try:
            return conn.transport.open_session(window_size=WINDOW, timeout=budget)
        except paramiko.ChannelException as exc:
            raise HostError(
                self.host,
                f"{self._label()} refused a new SSH session for `{shlex.join(argv)}` ({exc.text}); "
                "too many commands at once on it (sshd MaxSessions)?",
            ) from exc
        except Exception as exc:
            self._drop(conn)
            if "Timeout opening channel" in str(exc):
                why = f"no answer within {budget:.1f} s; the host stopped answering"
            else:
                why = str(exc) or type(exc).__name__
            raise Unreachable(self.host, f"SSH connection to {self._label()} is broken ({why}); dropped it") from exc

    def _exec(
        self, conn: Connection, chan: paramiko.Channel, payload: bytes, deadline: float, argv: tuple[str, ...]
    ) -> None:
        # exec_command() waits for the server's reply with no timeout: if the host dies
        # right now it would wait forever. Closing the channel wakes it up.
        watchdog = threading.Timer(max(deadline - time.monotonic(), 0.5), chan.close)
        watchdog.daemon = True
        watchdog.start()
        try:
            chan.exec_command(COMMAND_LINE)
            chan.sendall(payload)  # stdin stays open (and silent) until the command is over
        except Exception as exc:
            if not conn.alive():
                self._drop(conn)
                raise Unreachable(
                    self.host, f"SSH connection to {self._label()} broke starting `{shlex.join(argv)}`; dropped it"
                ) from exc
            if watchdog.finished.is_set():  # our deadline, not a dead host: keep the connection
                raise CommandTimeout(
                    self.host, f"`{shlex.join(argv)}` could not start on {self._label()} within its time budget"
                ) from exc
            raise HostError(self.host, f"{self._label()} refused to run `{shlex.join(argv)}`: {exc}") from exc
        finally:
            watchdog.cancel()


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
