"""Every error clustercheck raises on purpose, and the exit code each one maps to.

`cli.guarded()` is the one place that turns these into messages and exit codes.
Host errors never end a run: the runner turns them into `error` results for the
check (or the host) they hit.
"""

from __future__ import annotations


class ClusterCheckError(Exception):
    """Base of every deliberate clustercheck error; its message is shown as is."""


class UsageError(ClusterCheckError):
    """Bad usage or bad input (profile, fixture, hostlist, option): exit 64."""


class ProfileError(UsageError):
    """A profile that cannot be used; the message lists every problem as FILE:LINE: text."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class FixtureError(UsageError):
    """A fixture folder that cannot be read (missing or malformed manifest, garbage files)."""


class HostError(ClusterCheckError):
    """Something went wrong talking to one host; becomes that host's or check's `error` result."""

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        super().__init__(message)


class Unreachable(HostError):
    """The host could not be reached, authenticated or trusted (connection, auth, host key)."""


class CommandTimeout(HostError):
    """A command, file read or probe did not finish within its time budget."""


class NotRecorded(HostError):
    """Replay was asked for something the fixture does not hold."""


class ProbeUnavailable(HostError):
    """An in-process probe cannot run here (e.g. libnvidia-ml is not installed)."""
