"""Promise: `clustercheck health` never resumes (or takes over) a drain it did not set.

On real slurmctld and slurmd daemons on loopback (tests/slurm_cluster.py): only a reason that
health itself set on that node, and kept a record of, is ever resumed; a `Prolog error` drain
becomes clustercheck's only on the failing verdict its prolog wrote for that node's job just
before the drain; a check that skipped because its hardware vanished is no pass. Each case
ends with the node as the admin (or Slurm) left it; a positive control shows the same runs
resume clustercheck's own drain.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.helpers import FIXTURES
from tests.slurm_cluster import SlurmCluster

PROLOG = FIXTURES / "prolog-cluster"
HEALTHY = PROLOG / "healthy"
DIMM_LOST = PROLOG / "dimm-lost"
MEMORY_REASON = "clustercheck: node.memory: 15.7 GiB of memory, expected at least 20 GiB"
HOLD = "clustercheck: gpu.count: 7 GPUs visible - HOLD for RMA, do not resume"


def health(slurm: SlurmCluster, node: str, fixture: Path, *extra: str | Path) -> dict[str, object]:
    proc = slurm.health(node, fixture, "--format", "json", *map(str, extra))
    assert proc.stdout, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def drain(slurm: SlurmCluster, node: str, reason: str) -> None:
    assert slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}").returncode == 0


def resume(slurm: SlurmCluster, node: str) -> None:
    slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    slurm.wait_for(lambda: "DRAIN" not in slurm.state(node), 20, f"{node} to be resumed")


def test_an_admin_hold_in_clustercheck_words_is_never_resumed(safety_slurm: SlurmCluster) -> None:
    drain(safety_slurm, "s2", HOLD)
    try:
        for _ in range(2):
            out = health(safety_slurm, "s2", HEALTHY)
            assert out["action"] == "none" and "keeps no record of setting them" in str(out["why"])
            assert safety_slurm.reason("s2") == HOLD and "DRAIN" in safety_slurm.state("s2")
    finally:
        resume(safety_slurm, "s2")


def test_its_own_drain_edited_by_an_admin_is_no_longer_its_own(safety_slurm: SlurmCluster) -> None:
    assert health(safety_slurm, "s3", DIMM_LOST)["action"] == "drain"
    assert safety_slurm.reason("s3") == MEMORY_REASON
    drain(safety_slurm, "s3", MEMORY_REASON + " - HOLD for RMA, do not resume")
    try:
        out = health(safety_slurm, "s3", HEALTHY)
        assert out["action"] == "none" and "DRAIN" in safety_slurm.state("s3")
        # a day later the admin sets clustercheck's very words again: scontrol's time for the
        # reason is not the time clustercheck recorded setting it, so it is the admin's drain
        record_path = safety_slurm.root / "state" / "health-s3.json"
        record = json.loads(record_path.read_text())
        assert [d["reason"] for d in record["drains"]] == [MEMORY_REASON]
        record["drains"][0]["timestamp"] -= 86400
        record_path.write_text(json.dumps(record))
        drain(safety_slurm, "s3", MEMORY_REASON)
        out = health(safety_slurm, "s3", HEALTHY)
        assert out["action"] == "none" and "keeps no record of setting them" in str(out["why"])
        assert safety_slurm.reason("s3") == MEMORY_REASON and "DRAIN" in safety_slurm.state("s3")
    finally:
        resume(safety_slurm, "s3")


def test_a_prolog_error_after_an_old_failing_verdict_is_left_alone(safety_slurm: SlurmCluster) -> None:
    node = "s4"
    state = safety_slurm.root / "state" / f"prolog-{node}.json"
    hour_ago = time.time() - 3600
    state.write_text(
        json.dumps(
            {
                "mode": "prolog",
                "node": node,
                "job": {"job_id": "12"},
                "verdict": "fail",
                "exit_code": 2,
                "reason": MEMORY_REASON,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(hour_ago)),
                "timestamp": hour_ago,
                "checks": [{"id": "node.memory", "status": "fail", "summary": "15.7 GiB"}],
            }
        )
    )
    drain(safety_slurm, node, "Prolog error")  # another prolog script failed this job
    try:
        out = health(safety_slurm, node, HEALTHY)
        assert out["action"] == "none" and "is not from the job the drain followed" in str(out["why"])
        assert safety_slurm.reason(node) == "Prolog error"
    finally:
        resume(safety_slurm, node)


def test_a_prolog_error_its_prolog_caused_is_named_then_resumed(safety_slurm: SlurmCluster) -> None:
    # the positive control for the two above: the real prolog fails a real job's start
    node = "s4"
    safety_slurm.link("prolog", node, DIMM_LOST)
    try:
        assert safety_slurm.run("srun", "-w", node, "-N1", "true", timeout=60).returncode != 0
        safety_slurm.wait_for(lambda: safety_slurm.reason(node) == "Prolog error", 20, "the Prolog error drain")
        job = safety_slurm.prolog_state(node)["job"]["job_id"]
        out = health(safety_slurm, node, HEALTHY)
        assert out["action"] == "drain" and safety_slurm.reason(node) == f"{MEMORY_REASON} (prolog of job {job})"
        assert health(safety_slurm, node, HEALTHY)["action"] == "resume"
        safety_slurm.wait_for(lambda: "DRAIN" not in safety_slurm.state(node), 20, f"{node} to be resumed")
    finally:
        safety_slurm.link("prolog", node, HEALTHY)


def test_a_gpu_check_skipped_for_vanished_gpus_is_no_pass(safety_slurm: SlurmCluster, tmp_path: Path) -> None:
    node = "s1"
    assert health(safety_slurm, node, DIMM_LOST)["action"] == "drain"
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.cpu:\n  gpu.ecc:\n")  # ecc skips where no GPU answers
    try:
        out = health(safety_slurm, node, FIXTURES / "prolog-gpu" / "driver-gone", "--profile", profile)
        assert out["action"] == "none" and "gpu.ecc skipped because the hardware it judges is not visible" in str(
            out["why"]
        )
        assert "DRAIN" in safety_slurm.state(node)
        assert health(safety_slurm, node, HEALTHY)["action"] == "resume"  # its own drain, every check passing
        safety_slurm.wait_for(lambda: "DRAIN" not in safety_slurm.state(node), 20, f"{node} to be resumed")
    finally:
        if "DRAIN" in safety_slurm.state(node):
            resume(safety_slurm, node)
