"""Promise: over SSH clustercheck runs exactly the command it means, whatever the user's
login shell; no argument is ever parsed by it (fish reads a backslash inside single quotes,
tcsh refuses a newline in them), so no argument can run a command.

Each test logs in, on the real sshd of tests/sshd.py, as a real throwaway user whose login
shell is fish, tcsh or bash (needs root and Debian's fish and tcsh packages).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sshd import SSHServer, login_user

from clustercheck import Host
from clustercheck.transports.ssh import SSHTransport

SHELLS = ["/usr/bin/fish", "/usr/bin/tcsh", "/bin/bash"]

# Arguments each shell gets wrong when it parses them: a trailing backslash (fish: the quote
# is escaped and what follows runs), newlines (tcsh: "Unmatched '"), history `!`, `$`,
# backquotes, globs, quotes of both kinds, an empty string.
HOSTILE = [
    "a\\",
    "; echo INJECTED; : ",
    "end\\",
    "'; echo INJECTED; '",
    "two\nlines",
    "!!",
    "!echo",
    "$HOME $(echo INJECTED) `echo INJECTED`",
    "*",
    "~",
    '"d"',
    "'q'",
    "",
    "back\\slash\\\\",
    "%s {} [a] #not a comment",
]


@pytest.fixture(params=SHELLS, ids=lambda s: s.rsplit("/", 1)[1])
def node(request: pytest.FixtureRequest, sshd: SSHServer, tmp_path: Path) -> Iterator[SSHTransport]:
    with login_user(request.param, Path(f"{sshd.client_key}.pub")) as user:
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host shellnode\n    HostName 127.0.0.1\n    Port {sshd.port}\n    User {user}\n"
            f"    IdentityFile {sshd.client_key}\n    IdentitiesOnly yes\n    UserKnownHostsFile {sshd.known_hosts}\n"
        )
        t = SSHTransport("shellnode", ssh_config=str(config))
        assert t.run(["id", "-un"], timeout=10).stdout == f"{user}\n"  # really that user
        yield t
        t.close()


def test_arguments_reach_the_command_verbatim(node: SSHTransport) -> None:
    r = node.run(["printf", "[%s]\\n", *HOSTILE], timeout=10)
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == "".join(f"[{a}]\n" for a in HOSTILE)
    assert "INJECTED" not in r.stdout.replace("echo INJECTED", "")


def test_multi_line_scripts_run(node: SSHTransport) -> None:
    r = node.run(["sh", "-c", 'echo one\nfor w in two three; do\n  echo "$w"\ndone\nexit 3'], timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "one\ntwo\nthree\n", "")


def test_environment_timeouts_and_reads_are_the_same(node: SSHTransport) -> None:
    r = node.run(["sh", "-c", 'echo "$LC_ALL"; [ -t 0 ] || echo notty; cat; echo done'], timeout=5)
    assert r.stdout == "C\nnotty\ndone\n"
    assert node.run(["no-such-command-xyz"], timeout=5).exit_code == 127
    marker = f"{60 + uuid.uuid4().int % 1000 / 1000:.3f}"
    start = time.monotonic()
    r = node.run(["sleep", marker], timeout=1)
    assert r.timed_out and time.monotonic() - start < 3
    end = time.monotonic() + 2
    while subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode == 0:
        assert time.monotonic() < end, "the timed-out command survived"
        time.sleep(0.05)
    host = Host(node)
    host.prefetch(["/proc/sys/kernel/osrelease", "/proc/no-such-file"])
    assert host.read("/proc/sys/kernel/osrelease").strip()
    with pytest.raises(FileNotFoundError):
        host.read("/proc/no-such-file")
