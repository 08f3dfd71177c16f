"""The Transport protocol: how bytes reach one node, whatever carries them.

Implementations: `local.LocalTransport` (this node: subprocesses, file reads, in-process
probes), `ssh.SSHTransport` (a node over SSH), `fixture.ReplayTransport` (a recorded
fixture, strictly), `fixture.RecordingTransport` (wraps another and writes a fixture), and
`slurm.NoSlurmCommands` (the prolog's wrapper). Checks never see a transport: `host.Host`
wraps one, and adds deadlines, caps and evidence.

Every member below is part of the protocol; a transport without a connection or without a
faster batch read implements `connect()` and `read_many()` as the trivial answers their
docstrings give, so callers never have to ask whether a method is there.

What each call must do:

- `run`: argv (no shell), stdin at EOF, LC_ALL=C; a command that is not found exits 127;
  one past `timeout` is killed and comes back with `timed_out` (never raised); output past
  `host.output_limit()` raises `host.OutputTooLarge`; a node that cannot be reached raises
  `errors.Unreachable`, any other failure of the transport `errors.HostError`.
- `read`: a file's text; FileNotFoundError when it is absent on the node, HostError otherwise.
- `read_many`: several files in one round trip, {path: text, or None when absent}; a path it
  could not read (or could not tell) is left out, and `read()` then reports it. {} from a
  transport for which one read per file costs no more (local, replay).
- `probe`: the JSON-able record of the named `host.Probe`.
- `connect`: open the connection now, bounded by the connect timeout (Unreachable when it
  cannot), so the handshake does not eat the first check's budget; nothing for a transport
  with no connection.
- `close`: stop whatever still runs (never wait for it) and start nothing after; safe to call
  from another thread, and more than once.
- `fixture`: the recording this transport replays (a `Recording`: `fixture.Fixture`), None for a live node.

A new transport: a module in this package whose class has these members (mypy checks it
where it is passed as a Transport), a way to choose it in `clustercheck.transports.make_transports`, and its
tests; see the README's contributors section.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class CommandResult:
    """What one command did on a node. `exit_code` is None when it was killed on timeout."""

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def describe(self) -> str:
        """One line for evidence and messages: the command and how it ended."""
        if self.timed_out:
            how = f"timed out after {self.duration_s:.1f} s"
        else:
            how = f"exit {self.exit_code}, {self.duration_s:.3f} s"
        return f"$ {self.command}  ({how})"


class Recording(Protocol):
    """What callers read of the fixture a transport replays (`fixture.Fixture` is one)."""

    @property
    def path(self) -> Path: ...  # the fixture's folder

    @property
    def host(self) -> str: ...  # the host it recorded

    @property
    def profile(self) -> str | None: ...  # the profile it was recorded for, as its manifest names it


class Transport(Protocol):
    """How bytes reach one node: run, read, read_many, probe, connect, close."""

    host: str  # the node's name as the user gave it (the report's host)
    kind: str  # "local", "ssh", "replay", "recording"... (a recording's manifest says which)

    @property
    def fixture(self) -> Recording | None:
        """The fixture this transport replays; None for a live node."""
        ...

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run argv (no shell) and return its result; a command that is not found exits 127."""
        ...

    def read(self, path: str, *, timeout: float) -> str:
        """Return the file's text; raise FileNotFoundError when absent, HostError otherwise."""
        ...

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        """Several files in one round trip: {path: text, None when absent}; {} when not faster."""
        ...

    def probe(self, name: str, *, timeout: float) -> Any:
        """Return the JSON-able record of the named probe (see `host.Probe`)."""
        ...

    def connect(self) -> None:
        """Connect now where there is a connection to make (Unreachable when it fails)."""
        ...

    def close(self) -> None:
        """Stop what still runs and start nothing after."""
        ...
