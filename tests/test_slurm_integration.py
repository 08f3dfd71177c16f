"""clustercheck inside real Slurm: Prolog= and HealthCheckProgram= of slurmctld + slurmd on loopback.

One cluster for the whole module (tests/slurm_cluster.py): munged, slurmctld and five slurmd
(n1..n6), each node's prolog and health check replaying the fixture its symlink points at. Each
test owns one node, so the order of the tests does not matter.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import FIXTURES
from tests.slurm_cluster import CLUSTERCHECK, SlurmCluster, missing_binaries, running

PROLOG = FIXTURES / "prolog-cluster"
HEALTHY = PROLOG / "healthy"
DIMM_LOST = PROLOG / "dimm-lost"
KERNEL_OOPS = PROLOG / "kernel-oops"
MEMORY_REASON = "clustercheck: node.memory: 15.7 GiB of memory, expected at least 20 GiB"

_missing = missing_binaries()
pytestmark = [
    pytest.mark.skipif(
        bool(_missing),
        reason=f"needs Debian's slurm-wlm and munge ({', '.join(_missing)} not found; .ci/run installs them)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="slurmd must run as root to start jobs as their users"),
]


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    with running(
        "cc-slurm-", ["n1", "n2", "n3", "n4", "n5", "n6"], HEALTHY, cls=SlurmCluster, health_interval=2
    ) as cluster:
        yield cluster


def test_healthy_prolog_lets_the_job_run(slurm: SlurmCluster) -> None:
    proc = slurm.run("srun", "-w", "n1", "-N1", "hostname", timeout=60)
    assert proc.returncode == 0, proc.stderr + slurm.logs()
    assert proc.stdout.strip() == os.uname().nodename
    state = slurm.prolog_state("n1")
    assert state["verdict"] == "pass" and state["exit_code"] == 0
    assert state["node"] == "n1" and state["job"]["context"] == "prolog_slurmd"
    job = state["job"]["job_id"]
    assert job and job.isdigit()
    assert slurm.syslog is not None  # the cluster listens for the prolog's syslog lines
    assert any(f"prolog node n1, job {job}: pass" in line for line in slurm.syslog.read()), slurm.syslog.lines
    assert slurm.state("n1").startswith("IDLE") and "DRAIN" not in slurm.state("n1")


def test_prolog_reads_the_jobs_gpus_host_relative(slurm: SlurmCluster) -> None:
    if not slurm.gres:
        pytest.skip("fake GPUs for gres/gpu need device nodes, and this sandbox refuses mknod (no CAP_MKNOD)")
    # a first job holds GPU 0; the second is given GPUs 1 and 2, and its prolog must say so (§D.2)
    first = subprocess.Popen(  # holds GPU 0 until the test cancels it, not for a fixed time
        ["srun", "-w", "n1", "--gres=gpu:1", "-J", "holds-gpu0", "sleep", "60"],
        env=slurm.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        slurm.wait_for(lambda: "ALLOC" in slurm.state("n1") or "MIX" in slurm.state("n1"), 20, "the first job")
        time.sleep(0.3)
        proc = slurm.run("srun", "-w", "n1", "--gres=gpu:2", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES", timeout=60)
        assert proc.returncode == 0, proc.stderr
        job = slurm.prolog_state("n1")["job"]
        assert job["gpus"] == [1, 2]
        assert job["cuda_visible_devices"] == ["1", "2"]
    finally:
        slurm.run("scancel", "-n", "holds-gpu0")
        first.wait(30)


def test_broken_prolog_drains_the_node_then_health_names_the_reason_and_resumes_it(slurm: SlurmCluster) -> None:
    slurm.link("prolog", "n2", DIMM_LOST)
    proc = slurm.run("srun", "-w", "n2", "-N1", "hostname", timeout=60)
    assert proc.returncode != 0
    assert "prolog failed" in proc.stderr.lower()
    slurm.wait_for(lambda: slurm.reason("n2") == "Prolog error", 20, "Slurm to drain n2 for its prolog")
    assert "DRAIN" in slurm.state("n2")
    state = slurm.prolog_state("n2")
    assert state["verdict"] == "fail" and state["exit_code"] == 2
    assert state["reason"] == MEMORY_REASON
    assert slurm.syslog is not None
    assert any(line.startswith("<27>") and MEMORY_REASON in line for line in slurm.syslog.read())

    # health, still failing: Slurm's bare "Prolog error" becomes clustercheck's own reason
    proc = slurm.health("n2", DIMM_LOST, "--format", "json")
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["action"], out["done"]) == ("drain", True)
    assert slurm.reason("n2") == MEMORY_REASON

    # the DIMM is replaced: health resumes its own drain, and jobs run again
    slurm.link("prolog", "n2", HEALTHY)
    proc = slurm.health("n2", HEALTHY)
    assert proc.returncode == 0, proc.stderr
    assert "resume" in proc.stdout
    slurm.wait_for(lambda: "DRAIN" not in slurm.state("n2"), 20, "n2 to be resumed")
    assert slurm.reason("n2") is None
    assert slurm.run("srun", "-w", "n2", "-N1", "true", timeout=60).returncode == 0


def test_prolog_error_is_refined_from_the_state_file_before_it_is_resumed(slurm: SlurmCluster) -> None:
    slurm.link("prolog", "n3", KERNEL_OOPS)
    assert slurm.run("srun", "-w", "n3", "-N1", "true", timeout=60).returncode != 0
    slurm.wait_for(lambda: slurm.reason("n3") == "Prolog error", 20, "Slurm to drain n3 for its prolog")
    job = slurm.prolog_state("n3")["job"]["job_id"]
    slurm.link("prolog", "n3", HEALTHY)

    # the node passes now, but Slurm's reason says only "Prolog error": first say why
    proc = slurm.health("n3", HEALTHY)
    assert proc.returncode == 0, proc.stderr
    reason = slurm.reason("n3")
    assert reason is not None and reason.startswith("clustercheck: node.kernel: kernel 6.18.44-fc-v595 is tainted: D")
    assert reason.endswith(f"(prolog of job {job})")
    assert "DRAIN" in slurm.state("n3")
    # then, its own drain, passing: resumed
    proc = slurm.health("n3", HEALTHY)
    assert "resume" in proc.stdout
    slurm.wait_for(lambda: "DRAIN" not in slurm.state("n3"), 20, "n3 to be resumed")


def test_health_drains_with_its_reason_idempotently_and_resumes_only_when_all_pass(slurm: SlurmCluster) -> None:
    node = "n4"
    first = slurm.health(node, DIMM_LOST, "--format", "json")
    assert json.loads(first.stdout)["action"] == "drain"
    assert slurm.reason(node) == MEMORY_REASON
    before = slurm.show(node)
    again = json.loads(slurm.health(node, DIMM_LOST, "--format", "json").stdout)
    assert again["action"] == "none" and again["command"] is None
    assert "already drained by clustercheck" in again["why"]
    assert slurm.show(node) == before  # not even the reason's timestamp moved

    # another failure: the reason follows it
    slurm.health(node, KERNEL_OOPS)
    assert (slurm.reason(node) or "").startswith("clustercheck: node.kernel:")

    # --dry-run says what it would do and does nothing
    dry = slurm.health(node, HEALTHY, "--dry-run")
    assert "would resume" in dry.stdout and f"scontrol update NodeName={node} State=RESUME" in dry.stdout
    assert "DRAIN" in slurm.state(node)

    # a check that cannot tell keeps the drain
    unsure = json.loads(slurm.health(node, PROLOG / "vm-no-modules", "--format", "json").stdout)
    assert unsure["action"] == "none" and "could not tell" in unsure["why"]
    assert "DRAIN" in slurm.state(node)

    resumed = json.loads(slurm.health(node, HEALTHY, "--format", "json").stdout)
    assert (resumed["action"], resumed["done"]) == ("resume", True)
    slurm.wait_for(lambda: "DRAIN" not in slurm.state(node), 20, f"{node} to be resumed")
    assert json.loads(slurm.health(node, HEALTHY, "--format", "json").stdout)["action"] == "none"


def test_health_never_touches_a_drain_it_did_not_set(slurm: SlurmCluster) -> None:
    node = "n6"
    admin = "DIMM B2 swap scheduled - ticket 4711"
    assert slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={admin}").returncode == 0
    try:
        for fixture in (DIMM_LOST, HEALTHY):
            out = json.loads(slurm.health(node, fixture, "--format", "json").stdout)
            assert out["action"] == "none" and "not set by clustercheck: left alone" in out["why"]
            assert slurm.reason(node) == admin
        # a bare "Prolog error" that clustercheck's prolog did not cause (its last verdict: pass)
        assert slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=Prolog error").returncode == 0
        (slurm.root / "state" / f"prolog-{node}.json").write_text(
            json.dumps({"mode": "prolog", "node": node, "verdict": "pass", "exit_code": 0, "reason": ""})
        )
        out = json.loads(slurm.health(node, HEALTHY, "--format", "json").stdout)
        assert out["action"] == "none" and "another prolog script" in out["why"]
        assert slurm.reason(node) == "Prolog error"
    finally:
        slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")


def test_slurmd_runs_clustercheck_health_as_its_health_check_program(slurm: SlurmCluster) -> None:
    node = "n5"
    log = slurm.root / "log" / f"health-{node}.out"  # what health.sh's clustercheck printed

    def said(what: str) -> bool:
        return log.exists() and what in log.read_text()

    slurm.link("health", node, DIMM_LOST)
    try:
        slurm.wait_for(lambda: slurm.reason(node) == MEMORY_REASON, 30, "HealthCheckProgram to drain n5")
        slurm.wait_for(lambda: said(f"{node}: drain: 1 check(s) failed"), 10, "its output")
        slurm.link("health", node, HEALTHY)
        slurm.wait_for(lambda: "DRAIN" not in slurm.state(node), 30, "HealthCheckProgram to resume n5")
        slurm.wait_for(lambda: said(f"{node}: resume: every check passes"), 10, "its output")
    finally:
        slurm.link("health", node, None)


def test_the_srun_recipe_then_report(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The README's recipe for big fleets: clustercheck on every node through srun, merged by report."""
    proc = slurm.run(
        "srun",
        "-w",
        "n[1-3]",
        "-N3",
        "--ntasks-per-node=1",
        *CLUSTERCHECK,
        "run",
        "--local",
        "--profile",
        "base",
        "--format",
        "jsonl",
        timeout=120,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {line["host"] for line in lines} == {"n1", "n2", "n3"}, proc.stderr + slurm.logs()
    results = tmp_path / "results.jsonl"
    results.write_text(proc.stdout)
    merged = slurm.clustercheck("report", results, "--format", "json")
    report = json.loads(merged.stdout)
    assert sorted(report["hosts"]) == ["n1", "n2", "n3"]
    assert report["fleet"]["hosts"]["ok"]["count"] + report["fleet"]["hosts"]["fail"]["count"] == 3
    table = slurm.clustercheck("report", results)
    assert "3 hosts" in table.stdout and merged.returncode == table.returncode
