"""Promise: a fire drill changes nothing: `prolog --replay FIXTURE` and `prolog --dry-run` write
no state file and no syslog line unless told where, and a replay's verdict names the fixture's
host, never this machine.

Runs clustercheck as root with this machine's / but a private /run, /var/lib and /dev/log
(bubblewrap), so the default paths can be watched: the control run (a real prolog of this
machine) writes /run/clustercheck/prolog.json and logs one line; the drills write nothing.
"""

from __future__ import annotations

import json
import os

from tests.helpers import FIXTURES

from .conftest import Sandbox

DIMM_LOST = FIXTURES / "prolog-cluster" / "dimm-lost"  # host gpu102, node.memory fails
NODE = os.uname().nodename.split(".")[0]


def test_the_real_prolog_writes_its_state_and_logs(sandbox: Sandbox) -> None:
    # the control: what the drills must not do
    proc = sandbox.clustercheck("prolog", "--profile", "prolog-cpu")
    assert proc.returncode in (0, 2), proc.stderr
    assert sandbox.written() == ["/run/clustercheck/prolog.json"]
    assert json.loads((sandbox.run_dir / "clustercheck" / "prolog.json").read_text())["node"] == NODE
    assert len(sandbox.syslog.read()) == 1


def test_a_replay_writes_nothing_and_names_the_fixtures_host(sandbox: Sandbox) -> None:
    proc = sandbox.clustercheck("prolog", "--replay", DIMM_LOST)
    assert proc.returncode == 2  # the fixture's verdict
    assert "prolog node gpu102: FAIL" in proc.stdout and f"node {NODE}" not in proc.stdout
    assert "replayed from" in proc.stdout and "state: none written" in proc.stdout
    assert sandbox.written() == [] and sandbox.syslog.read() == []


def test_a_replay_with_a_state_file_writes_only_there(sandbox: Sandbox) -> None:
    target = sandbox.root / "drill.json"
    proc = sandbox.clustercheck("prolog", "--replay", DIMM_LOST, "--state-file", target, "--syslog-socket", "")
    assert proc.returncode == 2
    state = json.loads(target.read_text())
    assert (state["node"], state["host"], state["replay"]) == ("gpu102", "gpu102", str(DIMM_LOST))
    assert sandbox.written() == []


def test_a_dry_run_of_this_node_says_what_it_would_write_and_writes_nothing(sandbox: Sandbox) -> None:
    env = {"SLURMD_NODENAME": "n9", "SLURM_JOB_ID": "5"}
    proc = sandbox.clustercheck("prolog", "--dry-run", "--profile", "prolog-cpu", env=env)
    assert proc.returncode in (0, 2), proc.stderr
    assert "dry run: nothing was written; the state file /run/clustercheck/prolog.json would get:" in proc.stdout
    assert '"node": "n9"' in proc.stdout and "dry run: syslog /dev/log would get: prolog node n9, job 5" in proc.stdout
    assert sandbox.written() == [] and sandbox.syslog.read() == []


def test_a_dry_run_with_a_state_file_named_still_writes_nothing(sandbox: Sandbox) -> None:
    target = sandbox.root / "s.json"
    proc = sandbox.clustercheck("prolog", "--dry-run", "--replay", DIMM_LOST, "--state-file", target)
    assert proc.returncode == 2
    assert f"the state file {target} would get:" in proc.stdout
    assert not target.exists() and sandbox.written() == [] and sandbox.syslog.read() == []
