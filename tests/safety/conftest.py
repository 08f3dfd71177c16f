"""Shared by the safety tests: a real Slurm cluster on loopback and a node sandbox (the syslog
`sink` is tests/conftest.py's).

- `safety_slurm`: munged, slurmctld and slurmd for nodes s1..s4 on 127.0.0.1 (tests/slurm_cluster.py),
  whose Prolog= and HealthCheckProgram= are clustercheck replaying the fixture linked per node;
- `sandbox`: runs clustercheck as root with this machine's / but its own /run, /var/lib and
  /dev/log (bubblewrap), so a test sees every file it writes at the default paths and every
  syslog line it sends, without touching the machine's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import FIXTURES, REPO
from tests.slurm_cluster import SlurmCluster, SyslogSink, missing_binaries, running, short_tmpdir

SAFETY_NODES = ["s1", "s2", "s3", "s4"]


@pytest.fixture(scope="session")
def safety_slurm() -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"needs Debian's slurm-wlm and munge ({', '.join(missing)} not found)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start jobs as their users")
    with running(
        "cc-safe-", SAFETY_NODES, FIXTURES / "prolog-cluster" / "healthy", cls=SlurmCluster, health_interval=2
    ) as cluster:
        yield cluster


class Sandbox:
    """clustercheck as root on this machine, with /run, /var/lib and /dev/log of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_dir = root / "run"
        self.lib_dir = root / "varlib"
        for d in (self.run_dir, self.lib_dir):
            d.mkdir()
        self.syslog = SyslogSink(root / "log.sock")

    def clustercheck(self, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = ["bwrap", "--dev-bind", "/", "/", "--bind", str(self.run_dir), "/run"]
        argv += ["--bind", str(self.lib_dir), "/var/lib", "--bind", str(self.syslog.path), "/dev/log"]
        argv += ["--chdir", str(REPO), "--", sys.executable, "-m", "clustercheck", *map(str, args)]
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_"))}
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**base, **(env or {})})

    def written(self) -> list[str]:
        """Every file under the sandbox's /run and /var/lib, as paths inside it."""
        found = []
        for base, inside in ((self.run_dir, "/run"), (self.lib_dir, "/var/lib")):
            found += [inside + "/" + str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()]
        return sorted(found)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (bwrap) for a private /run and /dev/log")
    probe = subprocess.run(["bwrap", "--dev-bind", "/", "/", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"bwrap cannot run here: {probe.stderr.strip()}")
    root = short_tmpdir("cc-box-")
    box = Sandbox(root)
    yield box
    box.syslog.close()
    shutil.rmtree(root, ignore_errors=True)
