"""One SSH channel that runs a host's commands one after the other (the node side: session.sh).

How a command runs, whatever the user's login shell. sshd hands the command line to the
login shell (`$SHELL -c LINE`), and shells disagree on quoting: fish reads a backslash inside
single quotes, tcsh refuses a newline in them. So the line is always the same fixed one,
`exec /bin/sh -s` (COMMAND_LINE), which every shell (sh, bash, zsh, fish, tcsh, csh) reads
the same way, and the script (session.sh, a file of this package) comes on the channel's
stdin, quoted for /bin/sh alone. Its first stdout line tells the session id (it is stripped,
with anything a noisy rc file printed before it); then one request a line, each answered with
the command's stdout and stderr, each followed by an end line with a random token and, on
stdout, the exit status.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import math
import re
import secrets
import select
import shlex
import time

import paramiko

WINDOW = 8 * 1024 * 1024  # per channel; paramiko's 2 MiB default slows big outputs
CHUNK = 1024 * 1024
_HEAD_LIMIT = 64 * 1024  # look this far into stdout for the session's first line
_POLL_S = 0.25  # how often to look at the channel's state while it is silent
BACKSTOP_S = 2  # the remote `timeout` fires this long after the client's deadline
COMMAND_LINE = "exec /bin/sh -s"  # the same in every login shell: no quote, no backslash, no `$`


@functools.cache
def _template() -> str:
    """session.sh without its full-line comments (they document it; the node needs none of them)."""
    text = importlib.resources.files(__package__).joinpath("session.sh").read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))


def script(nonce: str, end: str, first: str) -> str:
    """The session script for one channel: its tokens and its first request filled in, in one pass
    (so nothing in the request line is read as a placeholder)."""
    values = {"NONCE": nonce, "END": end, "FIRST": first}
    return re.sub(r"@(NONCE|END|FIRST)@", lambda m: values[m.group(1)], _template())


def end_channel(chan: paramiko.Channel) -> None:
    """EOF on the command's stdin, then close its channel: either one wakes its watcher."""
    for step in (chan.shutdown_write, chan.close):
        with contextlib.suppress(Exception):  # a channel of a dead connection raises EOFError
            step()


def parse_files(text: str, spelled: dict[str, str]) -> dict[str, str | None]:
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


def sh_word(word: str) -> str:
    """`word` quoted for the session's sh on one line: a newline becomes "$cc_nl"."""
    return '"$cc_nl"'.join(shlex.quote(part) for part in word.split("\n"))


class Session:
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
            self.chan.recv(CHUNK)
        while self.chan.recv_stderr_ready():
            self.chan.recv_stderr(CHUNK)

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
                data = chan.recv(CHUNK)
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
                err += chan.recv_stderr(CHUNK)
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
