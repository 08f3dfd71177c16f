"""Nodes over SSH (paramiko): one connection per host, one session for its commands.

The package, by concern:

- transport.py: `SSHTransport`, the `Transport` protocol over SSH (run, read, read_many, probe,
  connect, close), and how a request and its answer travel on a session;
- session.py and session.sh: the node-side shell session that runs the commands, and its
  protocol (one request a line, end lines with a random token);
- connection.py: TCP, ProxyCommand and ProxyJump, the handshake, authentication;
- config.py: ssh_config (paramiko's SSHConfig, plus Include and what else it lacks);
- known_hosts.py: host keys (paramiko's hashing, OpenSSH's known_hosts rules).

One session runs all of a host's commands, one after the other: a new SSH session, login
shell and `sh` per command cost the node more than most commands do (the fleet benchmark,
bench/FLEET.md). A command's stdin is /dev/null, LC_ALL=C, a command that is not found exits
127 and one killed by a signal exits 128+N, as in a shell. Requests that end cleanly keep the
session for the next command (several threads at once get a session each); a timeout, output
past the cap or a broken channel close it.

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
OpenSSH does; `~/.ssh/config` (or the file given as with `ssh -F`, plus `/etc/ssh/ssh_config`
when none is given) is honoured for HostName, User, Port, IdentityFile, IdentitiesOnly,
UserKnownHostsFile, GlobalKnownHostsFile, HostKeyAlias, HashKnownHosts, ProxyJump,
ProxyCommand, ServerAliveInterval, ConnectTimeout (10 s when unset: it bounds the TCP
connect, the banner and each authentication step), StrictHostKeyChecking=accept-new, and
Include. close() never waits for a handshake in progress: it aborts it, and after close() the
transport starts nothing.
"""

import sys

# paramiko.config imports `invoke` (with asyncio, unittest.mock and a yaml copy: 50 ms of every
# run's start-up) only to run an ssh_config's `Match exec` lines. Keep it out while paramiko
# loads (None in sys.modules stops an import); config.py imports it for a config that has one.
_HALT = "invoke" not in sys.modules and "paramiko" not in sys.modules
if _HALT:
    sys.modules["invoke"] = None  # type: ignore[assignment]
try:
    import paramiko  # noqa: F401  (first, under the halt)
finally:
    if _HALT and sys.modules.get("invoke", 0) is None:
        del sys.modules["invoke"]

from clustercheck.transports.ssh.connection import DEFAULT_CONNECT_TIMEOUT  # noqa: E402
from clustercheck.transports.ssh.transport import SSHTransport  # noqa: E402

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "SSHTransport"]
