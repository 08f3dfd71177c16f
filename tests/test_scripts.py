"""Scripts that run on a node: real files in the package, linted, sent byte for byte as recorded;
and how the evidence names such a script instead of spelling it out (`Host.run(shown_as=...)`)."""

from __future__ import annotations

import sys

from clustercheck import Host
from clustercheck.transports.local import LocalTransport


def test_shown_as_names_the_command_in_the_evidence_and_runs_argv_unchanged() -> None:
    host = Host(LocalTransport("n1"))
    script = "echo one; echo two >&2; exit 3"
    result = host.run("sh", "-c", script, shown_as="sh -c '<a test script>'")
    assert result.argv == ("sh", "-c", script) and result.stdout == "one\n" and result.exit_code == 3
    assert len(host.observations) == 1
    line = host.observations[0]
    assert line.startswith("$ sh -c '<a test script>'  (exit 3, ") and line.endswith(" s)  stderr: two")
    assert script not in line
    plain = host.run(sys.executable, "-c", "print(1)")
    assert host.observations[1].startswith(f"$ {plain.command}  (exit 0, ")
