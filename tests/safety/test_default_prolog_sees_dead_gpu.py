"""Promise: the bundled `prolog` profile (also `health`'s default) sees a dead GPU.

A node that lost a GPU (XID 79, NVML "GPU is lost") and a node whose NVIDIA driver is gone
where its slurm.conf gives it GPUs both fail the prolog; a healthy GPU node of the same
cluster passes; the CPU-node profile does not ask a CPU node for GPUs. Replayed fixtures,
through the CLI; health's verdict on the real loopback Slurm, as a dry run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import FIXTURES, REPO
from tests.slurm_cluster import SlurmCluster

GPU012 = FIXTURES / "demo-cluster" / "gpu012"  # GPU 3 fell off the bus: XID 79, NVML "GPU is lost"
GPU001 = FIXTURES / "demo-cluster" / "gpu001"  # the same node, healthy
DRIVER_GONE = FIXTURES / "prolog-gpu" / "driver-gone"  # no NVIDIA driver; slurm.conf: Gres=gpu:volta:2


def prolog(fixture: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "prolog", "--replay", str(fixture), *extra,
         "--state-file", str(tmp_path / "s.json"), "--syslog-socket", ""],
        capture_output=True, text=True, cwd=REPO, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM")},
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    state = json.loads((tmp_path / "s.json").read_text())
    return proc.returncode, {c["id"]: f"{c['status']}: {c['summary']}" for c in state["checks"]}


def test_a_lost_gpu_with_xid_79_fails_the_default_prolog(tmp_path: Path) -> None:
    code, checks = prolog(GPU012, tmp_path, "--profile", "prolog")
    assert code == 2
    assert checks["gpu.count"] == "fail: 7 GPUs visible, expected at least 1: GPU 3: GPU is lost"
    assert checks["gpu.xid"].startswith("fail: XID 79 on GPU 0000:5d:00 (GPU has fallen off the bus)")


def test_the_same_node_healthy_passes_it(tmp_path: Path) -> None:
    code, checks = prolog(GPU001, tmp_path, "--profile", "prolog")
    assert code == 0, checks
    for check in ("gpu.count", "gpu.ecc", "gpu.xid", "gpu.persistence_mode", "storage.mounts"):
        assert checks[check].startswith("ok: "), checks[check]


def test_a_gpu_node_whose_driver_is_gone_fails_it(tmp_path: Path) -> None:
    code, checks = prolog(DRIVER_GONE, tmp_path)  # the fixture was recorded with the bundled profile
    assert code == 2
    assert checks["gpu.count"].startswith("fail: 0 GPUs visible, expected 2 (the node's Slurm configuration)")
    assert checks["gpu.ecc"].startswith("skip: no GPUs visible")


def test_the_cpu_profile_asks_a_cpu_node_for_no_gpu(tmp_path: Path) -> None:
    code, checks = prolog(DRIVER_GONE, tmp_path, "--profile", "prolog-cpu")
    assert code == 0 and not [c for c in checks if c.startswith("gpu.")]


def test_health_on_the_prolog_profile_would_drain_the_lost_gpu(safety_slurm: SlurmCluster) -> None:
    proc = safety_slurm.health("s2", GPU012, "--profile", "prolog", "--dry-run", "--format", "json")
    out = json.loads(proc.stdout)
    assert out["action"] == "drain" and out["dry_run"] is True
    assert out["new_reason"].startswith("clustercheck: gpu.count: 7 GPUs visible, expected at least 1")
    assert "DRAIN" not in safety_slurm.state("s2")
