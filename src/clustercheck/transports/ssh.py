"""Nodes over SSH (paramiko): one connection per host, one session for its commands.

How a command runs, whatever the user's login shell. sshd hands the command line to the
login shell (`$SHELL -c LINE`), and shells disagree on quoting: fish reads a backslash inside
single quotes, tcsh refuses a newline in them. So the line is always the same fixed
one, `exec /bin/sh -s`, which every shell (sh, bash, zsh, fish, tcsh, csh) reads the
same way, and the script (`_SESSION`) comes on the channel's stdin, quoted for /bin/sh alone.

One session runs all of a host's commands, one after the other: a new SSH session, login
shell and `sh` per command cost the node more than most commands do (the fleet benchmark,
bench/FLEET.md). The script is one `{ ... }` block, so sh has read all of it before it runs
any of it; it then reads one request a line from stdin and answers each with the command's
stdout and stderr, each followed by an end line that carries a random token and, on
stdout, the exit status. The first stdout line tells the session id (it is stripped, with
anything a noisy rc file printed before it). A command's stdin is /dev/null, LC_ALL=C, a
command that is not found exits 127 and one killed by a signal exits 128+N, as in a shell.
Requests that end cleanly keep the session for the next command (several threads at once
get a session each); a timeout, output past the cap or a broken channel close it.

A remote command dies with its whole session. Each command carries a mark in its
environment (cc-NONCE-ID.). While it runs, a watcher waits for EOF on the channel's stdin,
which comes when the channel closes: on a timeout (the client closes the session), on
close() (the run's --timeout) and when the connection is gone (the client was killed, the
network broke: sshd exits and stdin closes). It then kills every process that carries the
session's mark (a `setsid` daemon too) or is in the session, and the process group. When a
command of a check ends, whatever it left behind (marked, or still in the session) is
killed before its answer goes out. Finding those reads the environment only of processes
that started since the command did (the PIDs above the one /proc/loadavg named before it),
not of every process on the node. When the connection is alive but frozen,
`timeout -s KILL` (coreutils, when the node has it) is the backstop: it kills the command a
couple of seconds after the deadline. What a command prints is capped
(`host.output_limit()`): past it the command is stopped and the call raises
OutputTooLarge naming the command and the cap.

Files are read with `cat` through the same path (a hung NFS read times out like any
command); read_many (the runner's prefetch of /proc, /sys and /etc files) reads several
with one `head -v` in the session's shell. Host keys are checked against known_hosts as
OpenSSH does; `~/.ssh/config`
(or the file given as with `ssh -F`, plus `/etc/ssh/ssh_config` when none is given) is
honoured for HostName, User, Port, IdentityFile, IdentitiesOnly, UserKnownHostsFile,
GlobalKnownHostsFile, HostKeyAlias, HashKnownHosts, ProxyJump, ProxyCommand,
ServerAliveInterval, ConnectTimeout (10 s when unset: it bounds the TCP connect, the
banner and each authentication step), StrictHostKeyChecking=accept-new, and Include.
close() never waits for a handshake in progress: it aborts it, and after close() the
transport starts nothing.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import getpass
import glob
import hashlib
import hmac
import ipaddress
import logging
import math
import os
import re
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from clustercheck.errors import CommandTimeout, HostError, Unreachable
from clustercheck.host import CommandResult, OutputTooLarge, get_probe, in_thread, output_limit

# paramiko logs tracebacks at ERROR level from its transport thread (e.g. "Exception
# (client): Error reading SSH protocol banner"). With no handler configured anywhere,
# Python's last-resort handler would print them on stderr; our errors say it better.
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
if _PARAMIKO_LOG.level == logging.NOTSET:
    _PARAMIKO_LOG.setLevel(logging.CRITICAL)

_DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
_DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
_SYSTEM_CONFIG = "/etc/ssh/ssh_config"
_WINDOW = 8 * 1024 * 1024  # per channel; paramiko's 2 MiB default slows big outputs
_CHUNK = 1024 * 1024
_HEAD_LIMIT = 64 * 1024  # look this far into stdout for the session's first line
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds, when neither the caller nor ssh_config's ConnectTimeout says
_POLL_S = 0.25  # how often to look at the channel's state while it is silent
_BACKSTOP_S = 2  # the remote `timeout` fires this long after the client's deadline
_KNOWN_HOSTS_LOCK = threading.Lock()
_INCLUDE_RE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+)$", re.IGNORECASE)

_COMMAND_LINE = "exec /bin/sh -s"  # the same in every login shell: no quote, no backslash, no `$`
# One session serves all of a host's commands, one after the other: one `sh` reads one
# request a line from the channel's stdin (the `{ ... }` block itself is read whole before
# any of it runs) and answers it. cc_run runs a command, marked cc-NONCE-ID. in its
# environment, under its own time limit (`timeout -s KILL`, the backstop for a frozen
# connection), with stdin /dev/null; while it runs, a watcher waits for EOF on the channel's
# stdin (the client closed the channel: its deadline, close(), or the client died) and then
# kills every process marked cc-NONCE or in the session that started since, and the process
# group. After a command of a check, what it left behind (marked, or still in the session)
# is killed. cc_files reads files for read_many with one `head`. Each request ends with
# "\nEND-ID RC\n" on stdout and "\nEND-ID\n" on stderr, after everything it printed.
#
# Finding what a command left reads the environment of processes, about 20 us each: not of
# every process on the node, only of those that started since the command began (cc_new:
# the PIDs above the last one /proc/loadavg named before it, that exist now), or of every
# process when the PID counter wrapped in between or too many started.
# A process in the middle of execve() shows an empty environment (the kernel has not yet set
# up the new image's), and one may fork while we look: a pass that killed something, or saw
# a live process (one with an exe) whose environment read empty, is followed by another, at
# most five in all.
_SESSION = """{{
echo "{nonce}:$$"; LC_ALL=C; export LC_ALL; CLUSTERCHECK_RUN=cc-{nonce}; export CLUSTERCHECK_RUN
cc_nl='
'
if command -v timeout >/dev/null 2>&1; then cc_t=1; else cc_t=; fi
cc_me=$$
cc_end() {{ printf '\\n{end}-%s %s\\n' "$1" "$2"; printf '\\n{end}-%s\\n' "$1" >&2; }}
cc_new() {{
cc_n=; read -r cc_x cc_x cc_x cc_x cc_n cc_x </proc/loadavg; cc_p=$1; shift; cc_list=
case $cc_p.$cc_n in *[!0-9.]*|.*|*.) cc_n=0 cc_p=1;; esac
if [ "$cc_n" -lt "$cc_p" ] || [ $((cc_n - cc_p)) -gt 1024 ]; then
for cc_x; do cc_list="$cc_list /proc/[1-9]*/$cc_x"; done; return 0; fi
while [ "$cc_p" -lt "$cc_n" ]; do cc_p=$((cc_p + 1))
if [ -e /proc/$cc_p ]; then for cc_x; do cc_list="$cc_list /proc/$cc_p/$cc_x"; done; fi; done
}}
cc_sweep() {{
cc_k=0 cc_dead=" $cc_me "
while [ "$cc_k" -lt 5 ]; do cc_k=$((cc_k + 1)) cc_again=
cc_new "$1" environ stat
[ -n "$cc_list" ] || return 0
for cc_p in $(grep -lsE -e "$2" -e "^[0-9]+ \\\\(.*\\\\) . [0-9]+ [0-9]+ $$ " $cc_list </dev/null)
do cc_p=${{cc_p#/proc/}}; cc_p=${{cc_p%/*}}; case $cc_dead in *" $cc_p "*) continue;; esac
kill -KILL "$cc_p"; cc_dead="$cc_dead$cc_p " cc_again=1; done 2>/dev/null
for cc_p in $(grep -Ls . $cc_list </dev/null); do cc_p=${{cc_p#/proc/}}; cc_p=${{cc_p%/*}}
[ -e "/proc/$cc_p/exe" ] && cc_again=1; done 2>/dev/null
[ -n "$cc_again" ] || return 0; sleep 0.01 2>/dev/null
done
}}
cc_run() {{
cc_i=$1 cc_l=$2 cc_s=$3; shift 3
cc_b=; read -r cc_x cc_x cc_x cc_x cc_b cc_x </proc/loadavg
{{ read -r cc_x <&3; read -r cc_me cc_x </proc/self/stat
cc_sweep "$cc_b" cc-{nonce}; kill -s KILL -- -$$; }} </dev/null >/dev/null 2>&1 &
cc_w=$!
if ! command -v "$1" >/dev/null 2>&1; then echo "$1: command not found" >&2; cc_r=127
elif [ -n "$cc_t" ]; then CLUSTERCHECK_RUN=cc-{nonce}-$cc_i. timeout -s KILL "$cc_l" "$@" </dev/null 3<&-; cc_r=$?
else CLUSTERCHECK_RUN=cc-{nonce}-$cc_i. "$@" </dev/null 3<&-; cc_r=$?; fi
kill -KILL "$cc_w" 2>/dev/null; wait "$cc_w" 2>/dev/null
[ "$cc_s" = 1 ] && cc_sweep "$cc_b" "cc-{nonce}-$cc_i."
cc_end "$cc_i" "$cc_r"
}}
cc_files() {{
cc_i=$1 cc_c=$2; shift 2; cc_list=
for cc_f; do if [ -f "$cc_f" ] && [ -r "$cc_f" ]; then cc_list=1
elif [ ! -e "$cc_f" ]; then printf '0 %s\\n' "$cc_f"; fi; done
printf '\\n'
if [ -n "$cc_list" ]; then for cc_f; do [ -f "$cc_f" ] && [ -r "$cc_f" ] && set -- "$@" "$cc_f"; shift; done
head -v -c "$cc_c" -- "$@" </dev/null 3<&-; fi
cc_end "$cc_i" $?
}}
exec 3<&0 </dev/null
{first}
while IFS= read -r cc_q <&3; do eval "$cc_q"; done
kill -s KILL -- -$$
}}
"""


@dataclass
class _Target:
    """Where and how to connect to one host (target or jump host), after the ssh config."""

    name: str  # as typed
    hostname: str
    port: int
    user: str
    identity_files: list[str]
    identity_explicit: bool  # given on the command line: a missing file is an error
    identities_only: bool
    known_hosts: list[str]  # UserKnownHostsFile: checked, and the first one gets new keys
    global_known_hosts: list[str]
    host_key_alias: str | None
    hash_known_hosts: bool
    accept_new: bool
    proxy_jump: str | None
    proxy_command: str | None
    keepalive_s: float
    connect_timeout: float | None  # ssh_config ConnectTimeout, None when unset
    jumps: list[_Target] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.hostname}:{self.port}"

    @property
    def key_name(self) -> str:
        """The name of this host in known_hosts, as OpenSSH writes it."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def label(self) -> str:
        """`name (hostname:port)`, or `hostname:port` when the name is the hostname."""
        return self.address if self.name == self.hostname else f"{self.name} ({self.address})"


class _Connection:
    """An authenticated paramiko transport, and the jump hosts' transports under it."""

    def __init__(self, transport: paramiko.Transport, under: list[paramiko.Transport]) -> None:
        self.transport = transport
        self.under = under

    def alive(self) -> bool:
        return self.transport.is_active()

    def close(self) -> None:
        for t in [self.transport, *reversed(self.under)]:
            with contextlib.suppress(Exception):
                t.close()


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
        self._conn: _Connection | None = None
        self._target: _Target | None = None
        self._closed = False
        self._pending: list[Any] = []  # sockets and transports of a handshake in progress
        self._idle: list[_Session] = []  # sessions waiting for their next command
        self._busy: set[_Session] = set()  # sessions running a command now

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
            session = _Session(self._open_channel(conn, deadline, argv))
        session.seq += 1
        rid = session.seq
        if call[0] == "cc_run":
            call = (
                "cc_run",
                str(rid),
                str(math.ceil(max(timeout, 0.0)) + _BACKSTOP_S),
                "1" if scan else "0",
                *call[1:],
            )
        else:
            call = (call[0], str(rid), *call[1:])
        line = " ".join(_sh_word(w) for w in call)
        with self._lock:
            self._busy.add(session)
        how = "closed"
        try:
            self._refuse_if_closed(argv)
            if fresh:
                script = _SESSION.format(nonce=session.nonce, end=session.end, first=line)
                self._exec(conn, session.chan, script.encode("utf-8", errors="surrogateescape"), deadline, argv)
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
                self.host, f"SSH connection to {self._label()} failed during `{shlex.join(argv)}`: {_describe(exc)}"
            ) from exc
        finally:
            with self._lock:
                self._busy.discard(session)
                keep = how == "done" and not self._closed
                if keep:
                    self._idle.append(session)
            if not keep:
                _end(session.chan)  # EOF on its stdin: the node-side watcher kills whatever is left
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

    def _idle_session(self, conn: _Connection) -> _Session | None:
        with self._lock:
            while self._idle:
                session = self._idle.pop()
                if session.chan.get_transport() is conn.transport and session.usable():
                    return session
                _end(session.chan)
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
                spelled[path] = "/." + "".join(secrets.choice(("/.", "/")) for _ in range(40)) + path
        if not spelled:
            return {}
        argv = ("read", *spelled)
        cap = str(output_limit() + 1)
        result = self._request(argv, ("cc_files", cap, *spelled.values()), timeout, scan=False)
        if result.timed_out or result.exit_code is None:
            return {}
        return _parse_files(result.stdout, spelled)

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
            _end(session.chan)
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

    def _connection(self) -> _Connection:
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
                conn = _connect(self._target, timeout, self._pending)
            except HostError:
                if self._closed:
                    raise self._closed_error(["connect"]) from None
                raise
            except Exception as exc:  # never a paramiko traceback: say what broke, in one line
                if self._closed:
                    raise self._closed_error(["connect"]) from None
                raise Unreachable(self.host, f"cannot connect to {self._label()}: {_describe(exc)}") from exc
            finally:
                self._pending.clear()
            if self._closed:  # closed while the handshake ran: keep nothing
                conn.close()
                raise self._closed_error(["connect"])
            self._conn = conn
            return conn

    def _drop(self, conn: _Connection) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.close()

    def _label(self) -> str:
        return self._target.label() if self._target else self.host

    def _resolve(self) -> _Target:
        try:
            config = _load_config(self.ssh_config)
            target = _target(config, self.host, self.user, self.port, self.identity, self.accept_new_host_keys)
            if target.proxy_jump:
                target.jumps = _jumps(config, target.proxy_jump, self.accept_new_host_keys)
        except HostError:
            raise
        except Exception as exc:
            where = self.ssh_config or "~/.ssh/config"
            raise Unreachable(self.host, f"cannot use the ssh config ({where}) for {self.host}: {exc}") from exc
        return target

    # -- channels -------------------------------------------------------------------------
    def _open_channel(self, conn: _Connection, deadline: float, argv: tuple[str, ...]) -> paramiko.Channel:
        budget = max(deadline - time.monotonic(), 0.5)
        try:
            return conn.transport.open_session(window_size=_WINDOW, timeout=budget)
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
        self, conn: _Connection, chan: paramiko.Channel, script: bytes, deadline: float, argv: tuple[str, ...]
    ) -> None:
        # exec_command() waits for the server's reply with no timeout: if the host dies
        # right now it would wait forever. Closing the channel wakes it up.
        watchdog = threading.Timer(max(deadline - time.monotonic(), 0.5), chan.close)
        watchdog.daemon = True
        watchdog.start()
        try:
            chan.exec_command(_COMMAND_LINE)
            chan.sendall(script)  # stdin stays open (and silent) until the command is over
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


def _end(chan: paramiko.Channel) -> None:
    """EOF on the command's stdin, then close its channel: either one wakes its watcher."""
    for step in (chan.shutdown_write, chan.close):
        with contextlib.suppress(Exception):  # a channel of a dead connection raises EOFError
            step()


def _parse_files(text: str, spelled: dict[str, str]) -> dict[str, str | None]:
    """cc_files' answer: "0 SPELLING" lines for absent files, an empty line, then
    `head -v`'s "==> SPELLING <==" blocks (a newline before each block after the first)."""
    found: dict[str, str | None] = {}
    back = {v: k for k, v in spelled.items()}
    head, sep, body = text.partition("\n\n") if not text.startswith("\n") else ("", "\n", text[1:])
    if not sep:
        return {}
    for line in head.splitlines():
        name = back.get(line[2:]) if line.startswith("0 ") else None
        if name is None:
            return {}
        found[name] = None
    order = [(back[s], s) for s in re.findall(r"^==> (.*) <==$", body, re.MULTILINE) if s in back]
    pos = 0
    for i, (path, s) in enumerate(order):
        header = f"==> {s} <==\n"
        if not body.startswith(header, pos):
            return found
        start = pos + len(header)
        if i + 1 < len(order):
            end = body.find(f"\n==> {order[i + 1][1]} <==\n", start)
            if end < 0:
                return found
            found[path], pos = body[start:end], end + 1
        else:
            found[path] = body[start:]
    return found


def _sh_word(word: str) -> str:
    """`word` quoted for the session's sh on one line: a newline becomes "$cc_nl"."""
    return '"$cc_nl"'.join(shlex.quote(part) for part in word.split("\n"))


class _Session:
    """One `exec /bin/sh -s` channel that runs a host's commands one after the other."""

    def __init__(self, chan: paramiko.Channel) -> None:
        self.chan = chan
        self.nonce = secrets.token_hex(8)  # the processes' mark, cc-NONCE (in their environment)
        self.end = secrets.token_hex(8)  # the end-of-reply token (in no process' environment)
        self.seq = 0
        self.head: bytearray | None = bytearray()  # stdout until the session's first line; None once seen

    def usable(self) -> bool:
        c = self.chan
        return not (c.closed or c.eof_received or c.exit_status_ready())

    def drain(self) -> None:
        """Drop what arrived between two replies (a process the watcher has not killed yet)."""
        while self.chan.recv_ready():
            self.chan.recv(_CHUNK)
        while self.chan.recv_stderr_ready():
            self.chan.recv_stderr(_CHUNK)

    def reply(self, rid: int, deadline: float, limit: int) -> tuple[bytes, bytes, int | None, str]:
        """Read request `rid`'s stdout and stderr up to their end lines, the deadline, the cap,
        or the end of the channel. Returns (stdout, stderr, exit status, how): how is "done",
        "timeout", "cut" (stdout and stderr together passed `limit` bytes) or "closed" (the
        channel ended first; the exit status is the channel's, None when none came)."""
        chan = self.chan
        out = bytearray()
        err = bytearray()
        out_mark = b"\n%s-%d " % (self.end.encode(), rid)
        err_mark = b"\n%s-%d\n" % (self.end.encode(), rid)
        hello = self.nonce.encode() + b":"
        out_at = err_at = -1  # where the end lines start, once seen
        status: int | None = None
        out_seen = err_seen = 0  # how far the end lines were looked for
        slack = 2 * (len(out_mark) + 16)
        poller = select.poll()  # not select(): a big fleet can hold fds above FD_SETSIZE
        poller.register(chan.fileno(), select.POLLIN)  # one pipe: data on either stream, or EOF
        while True:
            while chan.recv_ready():
                data = chan.recv(_CHUNK)
                if self.head is not None:
                    self.head += data
                    at = self.head.find(hello)
                    nl = self.head.find(b"\n", at) if at >= 0 else -1
                    if nl >= 0:  # what a noisy rc file printed before it is dropped
                        data, self.head = bytes(self.head[nl + 1 :]), None
                    elif len(self.head) > _HEAD_LIMIT:  # not our script's output: keep it all
                        data, self.head = bytes(self.head), None
                    else:
                        continue
                out += data
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(_CHUNK)
            if out_at < 0 and len(out) > out_seen:
                out_at = out.find(out_mark, max(out_seen - len(out_mark), 0))
                out_seen = len(out)
            if out_at >= 0 and status is None:
                nl = out.find(b"\n", out_at + len(out_mark))
                if nl >= 0:
                    try:
                        status = int(out[out_at + len(out_mark) : nl])
                    except ValueError:
                        status = 255
            if err_at < 0 and len(err) > err_seen:
                err_at = err.find(err_mark, max(err_seen - len(err_mark), 0))
                err_seen = len(err)
            if status is not None and err_at >= 0:
                out, err = out[:out_at], err[:err_at]
                if len(out) + len(err) > limit:
                    return bytes(out), bytes(err), None, "cut"
                return bytes(out), bytes(err), status, "done"
            if len(out) + len(err) > limit + slack:
                return bytes(out), bytes(err), None, "cut"
            if chan.eof_received or chan.closed:
                if chan.recv_ready() or chan.recv_stderr_ready():
                    continue
                if self.head:
                    out[:0] = self.head  # the login shell did not run our script: its output is the answer
                    self.head = None
                chan.status_event.wait(max(min(deadline - time.monotonic(), 1.0), 0.0))
                code = chan.exit_status if chan.status_event.is_set() and chan.exit_status != -1 else None
                return bytes(out), bytes(err), code, "closed"
            now = time.monotonic()
            if now >= deadline:
                if self.head:
                    out[:0] = self.head
                return bytes(out), bytes(err), None, "timeout"
            poller.poll(max(math.ceil(min(deadline - now, _POLL_S) * 1000), 0))


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# -- ssh config -----------------------------------------------------------------------------
def _load_config(path: str | None) -> paramiko.SSHConfig:
    """The user's config (or `path`, as ssh -F) then, without -F, the system-wide one."""
    if path is not None:
        text = _config_text(path, os.path.dirname(os.path.abspath(path)), 0)
    else:
        user = os.path.expanduser("~/.ssh/config")
        text = _config_text(user, os.path.expanduser("~/.ssh"), 0) if os.path.isfile(user) else ""
        if os.path.isfile(_SYSTEM_CONFIG):
            with contextlib.suppress(OSError):
                # "Host *" ends any block the user file left open; first value wins, as in ssh
                text += "\nHost *\n" + _config_text(_SYSTEM_CONFIG, "/etc/ssh", 0)
    config = _CONFIGS.get(text)
    if config is None:  # parsed once per text, per process: every host of a fleet reads the same files
        config = _CONFIGS[text] = paramiko.SSHConfig.from_text(text)
    return config


_CONFIGS: dict[str, paramiko.SSHConfig] = {}


def _config_text(path: str, base: str, depth: int) -> str:
    """The file's text with `Include` lines replaced by the files they name (paramiko lacks Include)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    if depth > 16:
        raise ValueError(f"{path}: too many nested Include")
    out: list[str] = []
    for line in lines:
        m = _INCLUDE_RE.match(line)
        if not m:
            out.append(line)
            continue
        for pattern in shlex.split(m.group(1), comments=True):
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = os.path.join(base, pattern)
            for included in sorted(glob.glob(pattern)):
                if os.path.isfile(included):
                    out.append(_config_text(included, base, depth + 1))
    return "\n".join(out) + "\n"


def _target(
    config: paramiko.SSHConfig,
    name: str,
    user: str | None,
    port: int | None,
    identity: list[str] | None,
    accept_new: bool,
) -> _Target:
    opts = config.lookup(name)
    hostname = str(opts.get("hostname", name))
    the_user = user or opts.get("user") or getpass.getuser()
    the_port = port or int(opts.get("port", 22))
    home = os.path.expanduser("~")

    def expand(p: str) -> str:
        p = p.replace("%d", home).replace("%u", getpass.getuser()).replace("%r", the_user)
        p = p.replace("%h", hostname).replace("%n", name).replace("%p", str(the_port)).replace("%%", "%")
        return os.path.expanduser(p)

    def paths(key: str, default: Sequence[str]) -> list[str]:
        value = opts.get(key)
        if value is None:
            return [os.path.expanduser(p) for p in default]
        if str(value).lower() == "none":
            return []
        return [expand(p) for p in shlex.split(str(value))]

    if identity:
        identity_files = [os.path.expanduser(p) for p in identity]
    else:
        identity_files = [os.path.expanduser(p) for p in opts.get("identityfile", []) if p.lower() != "none"]
    proxy_command = opts.get("proxycommand")
    proxy_jump = opts.get("proxyjump")
    return _Target(
        name=name,
        hostname=hostname,
        port=the_port,
        user=the_user,
        identity_files=identity_files,
        identity_explicit=bool(identity),
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
        known_hosts=paths("userknownhostsfile", _DEFAULT_KNOWN_HOSTS),
        global_known_hosts=paths("globalknownhostsfile", _DEFAULT_GLOBAL_KNOWN_HOSTS),
        host_key_alias=opts.get("hostkeyalias"),
        hash_known_hosts=str(opts.get("hashknownhosts", "no")).lower() == "yes",
        accept_new=accept_new or str(opts.get("stricthostkeychecking", "")).lower() == "accept-new",
        proxy_jump=None if proxy_jump is None or proxy_jump.lower() == "none" else proxy_jump,
        proxy_command=None if proxy_command is None or proxy_command.lower() == "none" else proxy_command,
        keepalive_s=float(opts.get("serveraliveinterval", 0) or 0) or 30.0,
        connect_timeout=_seconds(opts.get("connecttimeout")),
    )


def _seconds(value: Any) -> float | None:
    """ConnectTimeout's value: seconds, or None when unset ("none" or 0: the default)."""
    if value is None or str(value).strip().lower() == "none":
        return None
    number = float(str(value).strip())  # a bad value: _resolve() names the config file
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"ConnectTimeout {value!r} is not a number of seconds")
    return number or None


def _jumps(config: paramiko.SSHConfig, spec: str, accept_new: bool, depth: int = 0) -> list[_Target]:
    """The jump hosts of a ProxyJump value, in order; the first one's own ProxyJump comes first."""
    if depth > 8:
        raise ValueError("ProxyJump loops")
    hops: list[_Target] = []
    for i, item in enumerate(spec.split(",")):
        item = item.strip().removeprefix("ssh://")
        user, _, rest = item.rpartition("@")
        host, port = rest, None
        m = re.fullmatch(r"\[(.+)\](?::(\d+))?|([^:]+)(?::(\d+))?", rest)
        if m:
            host = m.group(1) or m.group(3)
            port = int(m.group(2) or m.group(4)) if (m.group(2) or m.group(4)) else None
        hop = _target(config, host, user or None, port, None, accept_new)
        hop.proxy_command = None
        if i == 0 and hop.proxy_jump:
            hops.extend(_jumps(config, hop.proxy_jump, accept_new, depth + 1))
        hops.append(hop)
    return hops


# -- connecting -----------------------------------------------------------------------------
def _connect(target: _Target, timeout: float, pending: list[Any]) -> _Connection:
    """Connect through the jump hosts to the target. What it opens is in `pending` while it
    runs, for close() in another thread to abort it."""
    under: list[paramiko.Transport] = []
    try:
        via: paramiko.Transport | None = None
        for hop in target.jumps:
            via = _handshake(hop, via, timeout, target, pending)
            under.append(via)
        return _Connection(_handshake(target, via, timeout, target, pending), under)
    except BaseException:
        for t in reversed(under):
            with contextlib.suppress(Exception):
                t.close()
        raise


def _handshake(
    t: _Target, via: paramiko.Transport | None, timeout: float, final: _Target, pending: list[Any]
) -> paramiko.Transport:
    """Connect, check the host key, authenticate: an active transport, or Unreachable."""
    host = final.name
    through = "" if t is final else f" (jump host for {final.name})"
    sock = _socket(t, via, timeout, host, through, pending)
    pending.append(sock)
    transport: paramiko.Transport | None = None
    try:
        transport = paramiko.Transport(sock, default_window_size=_WINDOW)
        pending.append(transport)
        transport.banner_timeout = timeout
        transport.auth_timeout = timeout
        known = _KnownHosts(t.known_hosts + t.global_known_hosts)
        _prefer_known_key_types(transport, known.key_types(t.key_name))
        try:
            transport.start_client(timeout=timeout)
        except Exception as exc:
            raise Unreachable(host, _handshake_failure(t, exc, timeout) + through) from exc
        try:  # start_client() returns quietly when its timeout expires mid-handshake
            server_key = transport.get_remote_server_key()
        except paramiko.SSHException as exc:
            raise Unreachable(
                host, f"{t.label()}{through} did not complete the SSH handshake within {timeout:g} s"
            ) from exc
        _check_host_key(t, server_key, known, host, through)
        _authenticate(t, transport, host, through)
        transport.set_keepalive(int(t.keepalive_s))
        return transport
    except BaseException:
        if transport is not None:
            transport.close()
        with contextlib.suppress(Exception):
            sock.close()
        raise


def _socket(
    t: _Target, via: paramiko.Transport | None, timeout: float, host: str, through: str, pending: list[Any]
) -> Any:
    if via is not None:
        try:
            return via.open_channel("direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0), timeout=timeout)
        except paramiko.ChannelException as exc:
            raise Unreachable(
                host, f"the jump host could not connect to {t.label()}{through}: {exc.text}; check HostName and Port"
            ) from exc
        except Exception as exc:
            raise Unreachable(host, f"the jump host did not open a tunnel to {t.label()}{through}: {exc}") from exc
    if t.proxy_command:
        try:
            return paramiko.ProxyCommand(t.proxy_command)
        except Exception as exc:
            raise Unreachable(host, f"ProxyCommand for {t.label()} failed to start: {exc}") from exc
    try:
        return _tcp_connect(t.hostname, t.port, timeout, pending)
    except socket.gaierror as exc:
        raise Unreachable(
            host,
            f"cannot resolve the host name {t.hostname!r}{through} ({exc.strerror}); check the name or its HostName",
        ) from exc
    except ConnectionRefusedError as exc:
        raise Unreachable(
            host, f"connection refused by {t.label()}{through}: is sshd running there, on port {t.port}?"
        ) from exc
    except TimeoutError as exc:
        raise Unreachable(
            host, f"no answer from {t.label()}{through} within {timeout:g} s: host down, or a firewall drops SSH?"
        ) from exc
    except OSError as exc:
        raise Unreachable(host, f"cannot connect to {t.label()}{through}: {exc.strerror or exc}") from exc


def _tcp_connect(hostname: str, port: int, timeout: float, pending: list[Any]) -> socket.socket:
    """socket.create_connection(), with the name lookup bounded by the timeout too."""
    end = time.monotonic() + timeout
    try:
        ipaddress.ip_address(hostname)
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except ValueError:
        lookup = lambda: socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)  # noqa: E731
        try:
            infos = in_thread(lookup, timeout, f"resolving {hostname}")
        except TimeoutError:
            raise socket.gaierror(errno.ETIMEDOUT, f"no answer from DNS within {timeout:g} s") from None
    error: OSError = OSError(f"no address for {hostname}")
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        pending.append(sock)
        try:
            sock.settimeout(max(end - time.monotonic(), 0.01))
            sock.connect(addr)
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _handshake_failure(t: _Target, exc: BaseException, timeout: float) -> str:
    text = str(exc) or type(exc).__name__
    if "banner" in text.lower() or isinstance(exc, EOFError):
        return (
            f"{t.label()} did not answer as an SSH server within {timeout:g} s ({text}): "
            "wrong port, or sshd overloaded (MaxStartups)?"
        )
    if isinstance(exc, paramiko.ProxyCommandFailure):
        return f"ProxyCommand for {t.label()} failed: {text}"
    return f"SSH handshake with {t.label()} failed: {text}"


def _prefer_known_key_types(transport: paramiko.Transport, known_types: list[str]) -> None:
    """Ask the server for a key type we know for it first (as ssh does), so it is comparable."""
    if not known_types:
        return
    options = transport.get_security_options()
    available = list(options.key_types)
    wanted: list[str] = []
    for kt in known_types:
        for candidate in ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if kt == "ssh-rsa" else [kt]:
            if candidate in available and candidate not in wanted:
                wanted.append(candidate)
    options.key_types = wanted + [k for k in available if k not in wanted]


def _check_host_key(t: _Target, key: paramiko.PKey, known: _KnownHosts, host: str, through: str) -> None:
    name = t.key_name
    blob = key.asbytes()
    offered = f"{key.get_name()} {_fingerprint(key)}"
    entries = known.lookup(name)
    for e in entries:
        if e.revoked and e.blob == blob:
            raise Unreachable(host, f"the SSH host key of {t.label()}{through} ({offered}) is REVOKED in {e.where}")
    good = [e for e in entries if not e.revoked]
    if any(e.blob == blob for e in good):
        return
    if good:
        old = good[0]
        raise Unreachable(
            host,
            f"REFUSED: the SSH host key of {t.label()}{through} has CHANGED: the server offers {offered}, "
            f"{old.where} has {old.key_type} {old.fingerprint}. It may be a man-in-the-middle attack, or the "
            f"node was reinstalled. If you trust the new key: `ssh-keygen -R {shlex.quote(name)} -f "
            f"{shlex.quote(old.path)}`, then re-run with --accept-new-host-keys.",
        )
    if not t.accept_new:
        where = t.known_hosts[0] if t.known_hosts else "~/.ssh/known_hosts"
        scan = f"ssh-keyscan {'-p ' + str(t.port) + ' ' if t.port != 22 else ''}{t.hostname} >> {where}"
        raise Unreachable(
            host,
            f"unknown SSH host key for {t.label()}{through} ({offered}): not in "
            f"{', '.join(t.known_hosts + t.global_known_hosts) or 'any known_hosts file'}. "
            f"Check it, then re-run with --accept-new-host-keys, or add it with `{scan}`.",
        )
    if not t.known_hosts:
        raise Unreachable(host, f"cannot record the host key of {t.label()}: UserKnownHostsFile is none")
    _record_host_key(t.known_hosts[0], name, key, t.hash_known_hosts)


def _record_host_key(path: str, name: str, key: paramiko.PKey, hashed: bool) -> None:
    stored = paramiko.HostKeys.hash_host(name) if hashed else name
    line = f"{stored} {key.get_name()} {key.get_base64()}\n"
    folder = os.path.dirname(path)
    with _KNOWN_HOSTS_LOCK:
        if folder:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.seek(0, os.SEEK_END)
                if f.tell() > 0:
                    f.seek(f.tell() - 1)
                    if f.read(1) != "\n":
                        line = "\n" + line
                f.write(line)
                f.flush()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def _authenticate(t: _Target, transport: paramiko.Transport, host: str, through: str) -> None:
    tried: list[str] = []
    allowed: list[str] | None = None
    for label, key in _keys(t, tried):
        try:
            remaining = transport.auth_publickey(t.user, key)
        except paramiko.BadAuthenticationType as exc:
            allowed = list(exc.allowed_types)
            tried.append(f"{label}: server does not take keys")
            break
        except paramiko.AuthenticationException as exc:
            if not transport.is_active() or "timeout" in str(exc).lower():
                raise Unreachable(
                    host, f"SSH authentication with {t.label()}{through} got no answer ({_describe(exc)})"
                ) from exc
            tried.append(f"{label}: rejected")
            continue
        except Exception as exc:
            raise Unreachable(host, f"SSH authentication with {t.label()}{through} broke off: {exc}") from exc
        if transport.is_authenticated():
            return
        allowed = list(remaining)
        tried.append(f"{label}: accepted, but the server wants more ({', '.join(remaining)})")
        break
    detail = "; ".join(tried) or "no key to try (no IdentityFile, no agent, no ~/.ssh/id_*)"
    more = f"; the server accepts only: {', '.join(allowed)}" if allowed else ""
    raise Unreachable(
        host,
        f"SSH authentication failed as {t.user}@{t.label()}{through} ({detail}{more}). "
        "Check the user (--user), the key (--identity, IdentityFile, ssh-agent) and the node's authorized_keys.",
    )


def _keys(t: _Target, tried: list[str]) -> Iterator[tuple[str, paramiko.PKey]]:
    """Keys to offer, in ssh's order: identity files, then agent keys; else the default id_* files."""
    files = list(t.identity_files)
    if not files:
        files = [os.path.expanduser(f"~/.ssh/id_{kind}") for kind in ("rsa", "ecdsa", "ed25519")]
    for path in files:
        if not os.path.exists(path):
            if t.identity_explicit:
                tried.append(f"{path}: no such file")
            continue
        try:
            key = _load_key(path)
        except paramiko.PasswordRequiredException:
            tried.append(f"{path}: encrypted (add it to ssh-agent)")
            continue
        except Exception as exc:
            tried.append(f"{path}: unreadable ({exc})")
            continue
        yield path, key
    if t.identities_only and t.identity_files:
        return
    agent: paramiko.Agent | None = None
    try:
        agent = paramiko.Agent()
        for i, key in enumerate(agent.get_keys()):
            yield f"agent key {i + 1} ({key.get_name()})", key
    except paramiko.SSHException as exc:
        tried.append(f"ssh-agent: {exc}")
    finally:
        if agent is not None:
            agent.close()


_KEYS: dict[tuple[str, int, int, int], paramiko.PKey] = {}


def _load_key(path: str) -> paramiko.PKey:
    """A private key file, parsed once per file version, per process (not once per host)."""
    st = os.stat(path)
    stamp = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    key = _KEYS.get(stamp)
    if key is None:
        key = _KEYS[stamp] = paramiko.PKey.from_path(path)
    return key


def _fingerprint(key: paramiko.PKey) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


# -- known_hosts --------------------------------------------------------------------------
@dataclass(frozen=True)
class _KnownKey:
    patterns: tuple[str, ...]
    key_type: str
    blob: bytes
    revoked: bool
    path: str
    lineno: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"

    @property
    def fingerprint(self) -> str:
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")

    def matches(self, name: str) -> bool:
        hit = False
        for p in self.patterns:
            if p.startswith("|1|"):
                hit = hit or _hashed_match(p, name)
            elif p.startswith("!"):
                if _glob_match(p[1:], name):
                    return False
            elif _glob_match(p, name):
                hit = True
        return hit


def _glob_match(pattern: str, name: str) -> bool:
    """known_hosts patterns: only `*` and `?` are special (not `[`, as in "[host]:port")."""
    if "*" not in pattern and "?" not in pattern:
        return pattern.lower() == name.lower()
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.IGNORECASE) is not None


_PARSED: dict[str, tuple[tuple[int, int, int], list[_KnownKey]]] = {}


class _KnownHosts:
    """The keys of several known_hosts files (parsed once per file version, per process)."""

    def __init__(self, paths: list[str]) -> None:
        self.entries: list[_KnownKey] = []
        self._found: dict[str, list[_KnownKey]] = {}
        for path in paths:
            self.entries.extend(_parse_known_hosts(path))

    def lookup(self, name: str) -> list[_KnownKey]:
        found = self._found.get(name)
        if found is None:
            found = self._found[name] = [e for e in self.entries if e.matches(name)]
        return found

    def key_types(self, name: str) -> list[str]:
        types: list[str] = []
        for e in self.lookup(name):
            if not e.revoked and e.key_type not in types:
                types.append(e.key_type)
        return types


def _parse_known_hosts(path: str) -> list[_KnownKey]:
    try:
        st = os.stat(path)
    except OSError:
        return []
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _PARSED.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    entries: list[_KnownKey] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = ""
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3 or marker == "@cert-authority":
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except ValueError:
            continue
        entries.append(_KnownKey(tuple(fields[0].split(",")), fields[1], blob, marker == "@revoked", path, lineno))
    _PARSED[path] = (stamp, entries)
    return entries


def _hashed_match(pattern: str, name: str) -> bool:
    try:
        _, _, salt64, hash64 = pattern.split("|", 3)
        salt = base64.b64decode(salt64)
        want = base64.b64decode(hash64)
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)
