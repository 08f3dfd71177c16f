"""`clustercheck job` inside real Slurm jobs: sbatch scripts on the loopback cluster (tests/slurm_cluster.py).

Two nodes (ccjob1, ccjob2: names no resolver knows, as a test cluster's are), two tasks each.
Every job is a training script's first lines as a site would write them: #SBATCH lines with
--signal, then `srun clustercheck job`; the assertions are on what each task reported, as
srun collected it into the job's output file.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import FIXTURES
from tests.slurm_cluster import SlurmCluster, free_ports, missing_binaries, running
from tests.test_job import make_node

_missing = missing_binaries()
pytestmark = [
    pytest.mark.skipif(
        bool(_missing),
        reason=f"needs Debian's slurm-wlm and munge ({', '.join(_missing)} not found; .ci/run installs them)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="slurmd must run as root to start jobs as their users"),
]

NODES = ["ccjob1", "ccjob2"]
JOB = [sys.executable, "-m", "clustercheck", "job"]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with running(
        "cc-job-", NODES, FIXTURES / "prolog-cluster" / "healthy", cls=SlurmCluster, health_interval=0, gpus=3
    ) as cluster:
        yield cluster


def sbatch(slurm: SlurmCluster, name: str, body: str, *, header: str = "") -> tuple[str, str]:
    """Submit a batch script, wait for the job to end; (job id, its output)."""
    out = slurm.root / f"{name}.out"
    script = slurm.root / f"{name}.sh"
    script.write_text(
        f"#!/bin/sh\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n#SBATCH --time=10\n{header}#SBATCH -o {out}\n\n{body}\n"
    )
    proc = slurm.run("sbatch", "--parsable", str(script), timeout=30)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]

    def ended() -> bool:
        state = re.search(r"JobState=(\S+)", slurm.run("scontrol", "show", "job", job).stdout)
        return state is not None and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")

    slurm.wait_for(ended, 90, f"job {job} ({name}) to end")
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return job, out.read_text()


def nodes_of(output: str) -> dict[str, dict[str, Any]]:
    documents = (json.loads(line) for line in output.splitlines() if line.startswith("{"))
    return {n["node"]: n for n in documents if "node" in n}


def records_of(output: str) -> dict[int, dict[str, Any]]:
    return {int(r["rank"]): r for n in nodes_of(output).values() for r in n["records"]}


def messages(record: dict[str, Any], status: str | None = None) -> list[str]:
    return [f["message"] for f in record["findings"] if status is None or f["status"] == status]


def srun_exit(output: str) -> int:
    m = re.search(r"^srun exit (\d+)$", output, re.MULTILINE)
    assert m, output
    return int(m.group(1))


def test_every_task_reports_and_rank_0_judges_the_warning(slurm: SlurmCluster) -> None:
    job, output = sbatch(
        slurm,
        "ready",
        "export MASTER_ADDR=127.0.0.1\n"
        f"srun {' '.join(JOB)} --format json --checkpoint-size 100GB --checkpoint-bandwidth 1GB/s "
        f"--gather {slurm.root}/gather --summary\n"
        'echo "srun exit $?"',
        header="#SBATCH --signal=B:USR1@120\n",
    )
    nodes = nodes_of(output)
    assert sorted(nodes) == NODES, output + slurm.logs()
    assert all((n["tasks"], n["expected"], n["ntasks"], n["step"]) == (2, 2, 4, "0") for n in nodes.values())
    records = records_of(output)
    assert sorted(records) == [0, 1, 2, 3]
    for rank, r in records.items():
        assert (r["node"], r["local_id"], r["job"]) == (NODES[rank // 2], rank % 2, job)
        env = {k: (v["value"], v["source"]) for k, v in r["env"].items()}
        assert env["RANK"] == (str(rank), "derived") and env["WORLD_SIZE"] == ("4", "derived")
        assert env["LOCAL_RANK"] == (str(rank % 2), "derived")
        assert env["MASTER_PORT"] == (str(15000 + int(job[-4:])), "derived")
        assert env["MASTER_ADDR"] == ("127.0.0.1", "set")
        assert any("resolves to loopback (127.0.0.1) in a 2-node job" in m for m in messages(r, "warn"))
        if rank:  # only rank 0 asks slurmctld
            assert not [f for f in r["findings"] if f["topic"] == "signal"]
    signal = [f for f in records[0]["findings"] if f["topic"] == "signal"]
    # 100 GB over 2 nodes at 1 GB/s each is 50 s, and the warning comes 120 s ahead: from the script's line 5
    assert signal[0]["status"] == "ok", signal
    assert signal[0]["message"].startswith("--signal=B:USR1@120 (batch script line 5): SIGUSR1 120 s before the limit")
    assert "the checkpoint needs 50 s" in signal[0]["message"] and "70 s to spare" in signal[0]["message"]
    assert signal[1]["status"] == "warn" and "goes to the batch shell only" in signal[1]["message"]
    port = records[0]["env"]["MASTER_PORT"]["value"]
    assert f"MASTER_ADDR=127.0.0.1 (127.0.0.1) is this node and port {port} is free on it" in messages(records[0])
    (summary,) = [json.loads(line) for line in output.splitlines() if line.startswith('{"summary"')]
    assert (summary["tasks"], summary["expected"], summary["nodes"], summary["status"]) == (4, 4, NODES, "warn")
    assert [f["message"] for f in summary["findings"]] == [
        "4 tasks agree on MASTER_ADDR, MASTER_PORT, WORLD_SIZE, container"
    ]
    assert srun_exit(output) == 0  # warnings do not stop the training script


def test_a_taken_port_and_a_rank_exported_for_all_tasks_fail_the_step(slurm: SlurmCluster) -> None:
    (port,) = free_ports(1)
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    profile = slurm.root / "site.yaml"  # the site's profile names the checkpoint storage.checkpoint_write judges
    profile.write_text(
        "name: site\ndescription: the site's nodes\nchecks:\n"
        "  storage.checkpoint_write:\n    path: /tmp\n    checkpoint_size: 2TB\n"
    )
    try:
        _, output = sbatch(
            slurm,
            "broken",
            f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={port} RANK=0\n"
            f"srun {' '.join(JOB)} --profile {profile} --checkpoint-bandwidth 1GB/s\n"
            'echo "srun exit $?"',
        )
    finally:
        holder.close()
    # one table per node, from each node's local task 0
    assert output.count("clustercheck job: job ") == 2, output
    assert "node ccjob1: 2 of 2 tasks (of 4)" in output and "node ccjob2: 2 of 2 tasks (of 4)" in output
    assert f"rank 0: MASTER_PORT {port} is in use on ccjob1 (127.0.0.1), rank 0's node" in output
    for rank in (1, 2, 3):
        assert f"rank {rank}: RANK=0 but SLURM_PROCID={rank}: this task would join as rank 0" in output
    assert "rank 0: no --signal: the only warning is SIGTERM at the time limit, KillWait=30 s before SIGKILL" in output
    # 2 TB over 2 nodes at 1 GB/s each: 1000 s, and only KillWait's 30 s after SIGTERM
    assert (
        "the checkpoint needs 16.7 min (2 TB over 2 nodes at 1 GB/s each): the checkpoint cannot be written" in output
    )
    assert "fix: Ask for a longer warning: #SBATCH --signal=USR1@1260" in output
    rows = [line.split() for line in output.splitlines() if re.match(r"^[0-3]\s+[01]\s", line)]
    assert sorted((r[0], r[1], r[-1]) for r in rows) == [
        ("0", "0", "fail"),
        ("1", "1", "fail"),
        ("2", "0", "fail"),
        ("3", "1", "fail"),
    ]
    assert srun_exit(output) == 2  # `srun clustercheck job || exit 1` stops this job before it trains


def test_in_the_batch_script_the_derived_master_addr_must_resolve(slurm: SlurmCluster) -> None:
    try:
        socket.getaddrinfo(NODES[0], None)
        pytest.skip(f"{NODES[0]} resolves on this machine")
    except OSError:
        pass
    _, output = sbatch(slurm, "batch", f'{" ".join(JOB)} --format json\necho "srun exit $?"')
    (node,) = nodes_of(output).values()
    assert (node["node"], node["step"]) == (NODES[0], None)  # the batch script runs on the first node
    (record,) = node["records"]
    assert len(record["rows"]) == 2  # the two tasks srun will start on this node
    assert record["env"]["MASTER_ADDR"] == {"value": NODES[0], "source": "derived"}
    (fail,) = messages(record, "fail")
    assert fail.startswith(f"MASTER_ADDR={NODES[0]} does not resolve on {NODES[0]}")
    assert srun_exit(output) == 2


def test_each_task_its_gpu_from_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    if not slurm.gres:
        pytest.skip("fake GPUs for gres/gpu need device nodes, and this sandbox refuses mknod (no CAP_MKNOD)")
    node = make_node(tmp_path / "node")  # the same stand-in files for both nodes: they are this machine
    _, output = sbatch(
        slurm,
        "gpus",
        "export MASTER_ADDR=127.0.0.1\n"
        f"srun {' '.join(JOB)} --format json --root {node} --gather {slurm.root}/gather --summary\n"
        'echo "srun exit $?"',
        header="#SBATCH --gpus-per-task=1\n",
    )
    records = records_of(output)
    assert sorted(records) == [0, 1, 2, 3], output + slurm.logs()
    for rank, r in records.items():
        (row,) = r["rows"]
        cvd = row["cuda_visible_devices"]
        assert cvd is not None and cvd.isdigit(), row  # Slurm set it for this task
        gpu = int(cvd)
        assert (row["gpu"], row["nic"], row["path"]) == (str(gpu), f"mlx5_{gpu if gpu < 3 else 4}:1", "PIX")
        if rank % 2:
            assert any("invalid device ordinal" in m for m in messages(r, "warn"))
    per_node = {
        n: sorted(r["rows"][0]["cuda_visible_devices"] for r in records.values() if r["node"] == n) for n in NODES
    }
    assert all(len(set(v)) == 2 for v in per_node.values()), per_node  # two tasks, two GPUs
    assert srun_exit(output) == 0
