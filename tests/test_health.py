"""`clustercheck health`: reading the node's state, and every branch of the drain/resume decision.

The decision is a pure function (slurm.decide) over the node's state as `scontrol show node`
prints it and the checks' results, so each rule is tested here without Slurm, on real
`scontrol show node` output captured from slurm-wlm 22.05.8 on loopback
(tests/slurm_cluster.py). test_slurm_integration.py runs the same rules against real daemons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import FIXTURES, REPO

from clustercheck import slurm
from clustercheck.result import CheckResult, Status

# Captured from slurm-wlm 22.05.8 (tests/slurm_cluster.py): a node drained with a reason
# containing quotes and brackets, and an admin comment after it.
DRAINED_WITH_COMMENT = """\
NodeName=n1 Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.01
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=(null)
   NodeAddr=127.0.0.1 NodeHostName=n1 Port=16818 Version=22.05.8
   OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=500 AllocMem=0 FreeMem=21674 Sockets=1 Boards=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=main 
   BootTime=2026-11-29T22:05:46 SlurmdStartTime=2026-11-29T22:38:48
   LastBusyTime=2026-11-29T22:38:59
   CfgTRES=cpu=1,mem=500M,billing=1
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=clustercheck: node.memory: 15.6 GiB of memory, expected at least 20 GiB; "quoted" [x] [root@2026-11-29T22:39:14]
   Comment=a comment here

"""  # noqa: W291, E501  (scontrol's own trailing blanks and long line)

IDLE = """\
NodeName=n1 Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=3.10
   Gres=gpu:3
   NodeAddr=127.0.0.1 NodeHostName=n1 Port=34509 Version=22.05.8
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=main 
   LastBusyTime=2026-11-29T22:49:31
"""  # noqa: W291


DRAINED_AT = "2026-11-29T22:49:32"  # the time scontrol shows after every reason below


def epoch(stamp: str = DRAINED_AT) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def node(state: str, reason: str | None = None, name: str = "n1", at: str = DRAINED_AT) -> slurm.NodeState:
    """The IDLE capture with its State= (and Reason=) replaced: one edit per scenario."""
    text = IDLE.replace("State=IDLE ", f"State={state} ")
    if reason is not None:
        text += f"   Reason={reason} [root@{at}]\n"
    return slurm.parse_scontrol_show_node(text.replace("NodeName=n1", f"NodeName={name}"), name)


def recorded(*reasons: str, at: str = DRAINED_AT, check: str | None = "node.memory") -> dict[str, Any]:
    """The health record after clustercheck set these reasons on n1 (scontrol then shows `at`)."""
    return {"node": "n1", "drains": [{"reason": r, "check": check, "timestamp": epoch(at) - 1} for r in reasons]}


OK = [CheckResult("node.kernel", Status.OK, "kernel 6.18.44, no crash taint")]
FAILED = [
    CheckResult("node.kernel", Status.OK, "kernel 6.18.44, no crash taint"),
    CheckResult("node.memory", Status.FAIL, "15.7 GiB of memory, expected at least 20 GiB"),
]
MEMORY_REASON = "clustercheck: node.memory: 15.7 GiB of memory, expected at least 20 GiB"
UNSURE = [*OK, CheckResult("node.modules", Status.ERROR, "cannot tell: /proc/modules is absent on the node")]
WARNED = [*OK, CheckResult("node.kernel", Status.WARN, "tainted: W")]
PROLOG_FAILED = {
    "mode": "prolog",
    "node": "n1",
    "verdict": "fail",
    "exit_code": 2,
    "reason": "clustercheck: node.kernel: kernel 6.18.44 is tainted: D",
    "job": {"job_id": "31"},
    "timestamp": epoch() - 2,  # written as the prolog exited, just before Slurm drained the node
    "checks": [{"id": "node.kernel", "status": "fail", "summary": "kernel 6.18.44 is tainted: D"}],
}


# -- reading scontrol -----------------------------------------------------------------------------


def test_reason_is_read_without_slurms_user_and_time_and_stops_at_its_line() -> None:
    state = slurm.parse_scontrol_show_node(DRAINED_WITH_COMMENT, "n1")
    assert state.state == "IDLE+DRAIN" and state.base == "IDLE" and state.flags == {"DRAIN"}
    assert state.reason == ('clustercheck: node.memory: 15.6 GiB of memory, expected at least 20 GiB; "quoted" [x]')
    assert state.reason_set_by == "root@2026-11-29T22:39:14"
    assert state.drained and not state.down and not state.reboot_pending


def test_an_idle_node_has_no_reason() -> None:
    state = slurm.parse_scontrol_show_node(IDLE, "n1")
    assert (state.state, state.reason, state.drained) == ("IDLE", None, False)


def test_state_flags() -> None:
    assert node("MIXED+DRAIN", "x").drained
    assert node("DOWN+NOT_RESPONDING", "Not responding").down
    assert node("IDLE+DRAIN+REBOOT_REQUESTED", "Reboot ASAP").reboot_pending
    assert not node("IDLE+NOT_RESPONDING").drained


def test_scontrol_output_for_another_node_or_garbage_is_refused() -> None:
    with pytest.raises(ValueError, match="described node n1"):
        slurm.parse_scontrol_show_node(IDLE, "n2")
    with pytest.raises(ValueError, match="no NodeName="):
        slurm.parse_scontrol_show_node("Node n9 not found\n", "n9")
    with pytest.raises(ValueError, match="no State="):
        slurm.parse_scontrol_show_node("NodeName=n1 Arch=x86_64\n", "n1")


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_any_scontrol_output_parses_or_says_why(text: str) -> None:
    try:
        slurm.parse_scontrol_show_node(text, "n1")
    except ValueError as exc:
        assert "scontrol show node n1" in str(exc) or "described node" in str(exc)


# -- the decision ---------------------------------------------------------------------------------


def test_a_failing_healthy_node_is_drained_with_the_owned_reason() -> None:
    d = slurm.decide(node("IDLE"), FAILED, None)
    assert (d.action, d.reason) == ("drain", MEMORY_REASON)
    assert d.argv("n1") == ["scontrol", "update", "NodeName=n1", "State=DRAIN", f"Reason={MEMORY_REASON}"]


def test_a_passing_idle_node_is_left_alone() -> None:
    for checks in (OK, WARNED, UNSURE):
        d = slurm.decide(node("IDLE"), checks, None)
        assert d.action == "none" and d.argv("n1") is None


def test_its_own_drain_is_kept_without_a_new_command_while_the_same_check_fails() -> None:
    d = slurm.decide(node("IDLE+DRAIN", MEMORY_REASON), FAILED, None, recorded(MEMORY_REASON))
    assert d.action == "none" and "already drained by clustercheck" in d.why


def test_its_own_drain_follows_a_different_failure() -> None:
    oops = [CheckResult("node.kernel", Status.FAIL, "kernel is tainted: D")]
    d = slurm.decide(node("MIXED+DRAIN", MEMORY_REASON), oops, None, recorded(MEMORY_REASON))
    assert (d.action, d.reason, d.check) == ("drain", "clustercheck: node.kernel: kernel is tainted: D", "node.kernel")


def test_its_own_drain_is_resumed_once_every_check_passes_warnings_included() -> None:
    for checks in (OK, WARNED):
        d = slurm.decide(node("IDLE+DRAIN", MEMORY_REASON), checks, None, recorded("x", MEMORY_REASON))
        assert d.action == "resume"
        assert d.argv("n1", "/usr/bin/scontrol") == ["/usr/bin/scontrol", "update", "NodeName=n1", "State=RESUME"]


def test_a_check_that_cannot_tell_keeps_its_own_drain() -> None:
    d = slurm.decide(node("IDLE+DRAIN", MEMORY_REASON), UNSURE, None, recorded(MEMORY_REASON))
    assert d.action == "none" and "could not tell" in d.why and "node.modules" in d.why


# -- only a drain it set and recorded is its own ------------------------------------------------------

HOLD = "clustercheck: gpu.count: 7 GPUs visible - HOLD for RMA, do not resume"


@pytest.mark.parametrize(
    ("shown", "record"),
    [
        (node("IDLE+DRAIN", HOLD), None),  # an admin's words in clustercheck's style: no record at all
        (node("IDLE+DRAIN", HOLD), recorded(MEMORY_REASON)),  # a record, of another reason
        (node("IDLE+DRAIN", MEMORY_REASON), {**recorded(MEMORY_REASON), "node": "n2"}),  # another node's record
        # the very words clustercheck once set, set again by an admin a day later
        (node("IDLE+DRAIN", MEMORY_REASON, at="2026-11-30T22:49:32"), recorded(MEMORY_REASON)),
        (node("IDLE+DRAIN", MEMORY_REASON), {"node": "n1", "drains": "garbage"}),
    ],
)
def test_a_drain_it_has_no_record_of_setting_is_never_resumed(
    shown: slurm.NodeState, record: dict[str, Any] | None
) -> None:
    for checks in (OK, FAILED):
        d = slurm.decide(shown, checks, PROLOG_FAILED, record)
        assert d.action == "none" and "not set by clustercheck: left alone" in d.why, d


def test_a_skip_because_the_gpus_vanished_is_not_a_pass_for_a_resume() -> None:
    vanished = [
        *OK,
        CheckResult("gpu.ecc", Status.SKIP, "no GPUs visible (NVML: no GPU)", data={"hardware_absent": True}),
    ]
    d = slurm.decide(node("IDLE+DRAIN", MEMORY_REASON), vanished, None, recorded(MEMORY_REASON))
    assert d.action == "none" and "gpu.ecc skipped because the hardware it judges is not visible" in d.why
    unrelated = [*OK, CheckResult("rdma.ports", Status.SKIP, "no HCA on this node")]
    assert slurm.decide(node("IDLE+DRAIN", MEMORY_REASON), unrelated, None, recorded(MEMORY_REASON)).action == "resume"


def test_an_xid_drain_is_not_resumed_on_a_look_at_only_the_latest_log_lines() -> None:
    reason = "clustercheck: gpu.xid: XID 95 on GPU 0000:5d:00 (Uncontained error): reset the GPU"
    since = [
        *OK,
        CheckResult(
            "gpu.xid", Status.OK, "no XID events since the previous run", data={"window": "since the previous run"}
        ),
    ]
    d = slurm.decide(node("IDLE+DRAIN", reason), since, None, recorded(reason, check="gpu.xid"))
    assert d.action == "none" and "only after a reboot or a reset" in d.why
    # the XID was not the first failure: the record keeps every check that failed
    both = {
        "node": "n1",
        "drains": [{"reason": reason, "check": "gpu.ecc", "checks": ["gpu.ecc", "gpu.xid"], "timestamp": epoch() - 1}],
    }
    assert slurm.decide(node("IDLE+DRAIN", reason), since, None, both).action == "none"
    rebooted = [*OK, CheckResult("gpu.xid", Status.OK, "no XID events since boot", data={"window": "boot"})]
    assert (
        slurm.decide(node("IDLE+DRAIN", reason), rebooted, None, recorded(reason, check="gpu.xid")).action == "resume"
    )


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("IDLE+DRAIN", "DIMM B2 swap scheduled"),
        ("MIXED+DRAIN", "NHC: check_hw_physmem: Actual RAM size 16 GB"),
        ("DOWN+NOT_RESPONDING", "Not responding"),
        ("DOWN", "power supply replaced"),
        ("IDLE+DRAIN", "Epilog error"),
        ("IDLE+DRAIN", "Kill task failed"),
        ("IDLE+FAIL", "fan failing"),
        ("IDLE+DRAIN", "Clustercheck: a look-alike an admin typed"),
    ],
)
def test_a_drain_or_down_it_did_not_set_is_never_touched(state: str, reason: str) -> None:
    for checks in (FAILED, OK, UNSURE):
        d = slurm.decide(node(state, reason), checks, PROLOG_FAILED)
        assert d.action == "none" and "not set by clustercheck: left alone" in d.why


def test_a_pending_reboot_is_never_touched() -> None:
    for reason in (MEMORY_REASON, "Reboot ASAP"):
        for checks in (FAILED, OK):
            d = slurm.decide(node("IDLE+DRAIN+REBOOT_REQUESTED", reason), checks, None)
            assert d.action == "none" and "reboot pending" in d.why


def test_prolog_error_caused_by_its_prolog_is_named_from_the_state_file() -> None:
    d = slurm.decide(node("IDLE+DRAIN", "Prolog error"), OK, PROLOG_FAILED)
    assert d.action == "drain"
    assert d.reason == "clustercheck: node.kernel: kernel 6.18.44 is tainted: D (prolog of job 31)"
    assert d.check == "node.kernel"
    # and from then on it is its own drain (health records what it sets): the next run resumes it
    record = slurm.add_to_record(None, "n1", d.reason or "", d.check)
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    assert slurm.decide(node("IDLE+DRAIN", d.reason, at=now), OK, PROLOG_FAILED, record).action == "resume"


def test_prolog_error_still_failing_takes_the_current_reason() -> None:
    d = slurm.decide(node("IDLE+DRAIN", "Prolog error"), FAILED, PROLOG_FAILED)
    assert (d.action, d.reason) == ("drain", MEMORY_REASON)


def test_prolog_error_after_an_internal_error_with_policy_fail_is_its_own() -> None:
    state = {**PROLOG_FAILED, "verdict": "internal-error", "exit_code": 70, "reason": "clustercheck: internal error: x"}
    d = slurm.decide(node("IDLE+DRAIN", "Prolog error"), OK, state)
    assert d.action == "drain" and d.reason == "clustercheck: internal error: x (prolog of job 31)"


@pytest.mark.parametrize(
    "prolog_state",
    [
        None,  # no state file: clustercheck may not even be the prolog
        {**PROLOG_FAILED, "verdict": "pass", "exit_code": 0},  # its prolog passed: another script failed
        {**PROLOG_FAILED, "verdict": "internal-error", "exit_code": 0},  # it passed the node (policy pass)
        {**PROLOG_FAILED, "node": "n2"},  # another node's state file
        {**PROLOG_FAILED, "mode": "health"},
        {**PROLOG_FAILED, "timestamp": epoch() - 3600},  # an earlier job's failure, an hour before this drain
        {**PROLOG_FAILED, "timestamp": epoch() + 300},  # written after the drain: not what Slurm drained for
        {**PROLOG_FAILED, "job": {"job_id": None}},  # a prolog run by hand, not by slurmd for a job
        {k: v for k, v in PROLOG_FAILED.items() if k != "timestamp"},
    ],
)
def test_prolog_error_it_did_not_cause_is_left_alone(prolog_state: dict[str, object] | None) -> None:
    d = slurm.decide(node("IDLE+DRAIN", "Prolog error"), FAILED, prolog_state)
    assert d.action == "none" and "not set by clustercheck" in d.why


# -- the command line -----------------------------------------------------------------------------------


def health(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clustercheck", "health", "--syslog-socket", "", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_no_scontrol_means_nothing_is_changed(tmp_path: Path) -> None:
    proc = health("--replay", FIXTURES / "prolog-cluster" / "dimm-lost", "--node", "n1", "--scontrol", tmp_path / "no")
    assert proc.returncode == 3
    assert "cannot read node n1's state, so nothing was changed" in proc.stderr
    assert "command not found" in proc.stderr and "Traceback" not in proc.stderr


def test_node_defaults_to_slurmd_nodename(tmp_path: Path) -> None:
    proc = health(
        "--replay",
        FIXTURES / "prolog-cluster" / "healthy",
        "--scontrol",
        tmp_path / "no",
        env={"SLURMD_NODENAME": "gpu9"},
    )
    assert "cannot read node gpu9's state" in proc.stderr


def test_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    assert health("--replay", tmp_path / "nothing-here").returncode == 64
    assert health("--budget", "0").returncode == 64
    assert health("--format", "yaml").returncode == 64


def test_health_has_help() -> None:
    proc = health("--help")
    assert proc.returncode == 0
    for option in ("--dry-run", "--node", "--state-file", "--scontrol"):
        assert option in proc.stdout


def test_a_dry_run_without_slurmctld_prints_the_checks_and_the_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It exited 3 and printed nothing (`-f json` nothing): no scontrol, or one that cannot reach
    slurmctld (the real scontrol, pointed at a controller port where nothing listens)."""
    from tests.helpers import cli

    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=2\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=main Nodes=n1 Default=YES\n"
    )
    state = tmp_path / "state"
    state.mkdir()
    common = (
        "--node",
        "n1",
        "--dry-run",
        "--state-file",
        state / "prolog-{node}.json",
        "--record-file",
        state / "health-{node}.json",
        "--syslog-socket",
        state / "log",
    )
    no_scontrol = ("--scontrol", tmp_path / "no-scontrol")
    real = ("--scontrol", "scontrol")  # fails: slurmctld is not there
    monkeypatch.setenv("SLURM_CONF", str(conf))  # cli() passes the environment on
    dimm_lost = FIXTURES / "prolog-cluster" / "dimm-lost"
    dimm = [cli("health", "--replay", dimm_lost, *common, *scontrol) for scontrol in (no_scontrol, real)]
    healthy = cli("health", "--replay", FIXTURES / "prolog-cluster" / "healthy", *common, *real, "-f", "json")
    for proc, why in zip(dimm, ("command not found", "Unable to contact slurm controller"), strict=True):
        assert proc.returncode == 2, proc.stderr  # a check failed, as the report says
        out = proc.stdout
        assert "node.memory  │ fail   │ REPLACE_HW │ 15.7 GiB of memory, expected at least 20 GiB" in out
        assert "n1: its Slurm state could not be read (" in out and why in out
        assert "n1: would drain (1 check(s) failed; if Slurm has n1 up and not drained" in out
        assert "update NodeName=n1 State=DRAIN 'Reason=clustercheck: node.memory: 15.7 GiB" in out
        assert "--dry-run: nothing was changed" in proc.stderr and "Traceback" not in proc.stderr
    assert healthy.returncode == 3, healthy.stderr  # every check passed, but the decision is not whole
    doc = json.loads(healthy.stdout)
    assert doc["state"] is None and "Unable to contact slurm controller" in doc["state_unreadable"]
    assert doc["action"] == "none" and doc["command"] is None and doc["dry_run"] is True
    assert doc["why"].startswith("healthy (") and "cannot tell whether there is one" in doc["why"]
    assert {c["status"] for c in doc["report"]["hosts"]["gpu101"]["checks"]} == {"ok"}
    assert list(state.iterdir()) == []  # nothing written, nothing logged
    # without --dry-run it still changes nothing and says why, as before
    real_run = cli("health", "--replay", FIXTURES / "prolog-cluster" / "dimm-lost", *common[:2], *no_scontrol)
    assert real_run.returncode == 3 and "cannot read node n1's state, so nothing was changed" in real_run.stderr
