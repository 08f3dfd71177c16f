"""`clustercheck sweep --pairs` with rdma.bandwidth's pair form (rdma.pairs) on the real loopback Slurm.

After each node's own run, one `srun -w A,B -N2 --label` per pair runs the pair script
(facts/scripts/rdma_pair.sh) on both nodes: the `ib_write_bw` server on A, the client on B to A's
NodeAddr (127.0.0.1 here), per HCA port. This machine has no HCA and no perftest: those are the
stand-ins, and only those.

- The HCAs: each slurmd runs in a mount namespace of its own where /sys/class/infiniband is a copy
  of the real tree in tests/corpus/ib_sysfs (an H100 node's, ConnectX-7 at "400 Gb/sec (4X NDR)"),
  so the node's own rdma.bandwidth and the pair script read the real sysfs path, and every job
  slurmd starts sees its node's tree. The healthy nodes' copy has mlx5_0's port 1 rate edited to
  "200 Gb/sec (4X HDR)" (nothing else changed); the degraded node keeps the real 400 Gb/s.
- `ib_write_bw` on PATH (srun passes the sweep's environment on to the job) behaves as perftest
  does where the orchestration depends on it: the server listens on its out-of-band TCP port
  (`-p`, 18515 by default) and accepts one client; the client connects to the address at the end
  of its command line (perftest's "Couldn't connect to ADDR:PORT" and exit 1 when nothing
  listens); then each prints the REAL recorded run tests/corpus/perftest/
  superbench-ib_write_bw-loopback-8M-hdr.log.txt (201.8 Gb/s at 8 MiB: 100.9% of a 200 Gb/s
  port, 50.5% of a 400 Gb/s one, the MANIFEST's conclusion). A node's flag `noclient` makes its
  client hang without connecting (a client that never comes).

Slurm, its allocations, drains and reasons are real and asserted on what `sinfo -R` and
`scontrol show node` say; what is left running is asserted with pgrep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli
from tests.slurm_cluster import CLUSTERCHECK, SlurmCluster, missing_binaries, running

from clustercheck import sweep as logic
from clustercheck.facts.perftest import read_pair_sides
from clustercheck.result import CheckResult, HostReport, Status

TREE = CORPUS / "ib_sysfs" / "gpud-sys-class-infiniband-h100.0"
HDR8M = CORPUS / "perftest" / "superbench-ib_write_bw-loopback-8M-hdr.log.txt"
NCCL_RUN = CORPUS / "nccl_logs" / "aws-efa-eks-p4d-2node-nccl2.9.9-efa-gdrdma-allreduce.txt"
NODES = ["q1", "q2", "q3"]

# perftest's options that take a value (the ones the pair script passes, and -x / -i / -m)
STANDIN = '''#!{python}
"""ib_write_bw stand-in: perftest's out-of-band TCP handshake, then a real recorded run."""
import os, socket, sys, time

args, port, positional = sys.argv[1:], 18515, []
i = 0
while i < len(args):
    if args[i] in ("-d", "-p", "-s", "-n", "-x", "-i", "-m", "-D", "-q"):
        if args[i] == "-p":
            port = int(args[i + 1])
        i += 2
    else:
        if not args[i].startswith("-"):
            positional.append(args[i])
        i += 1
node = os.environ.get("SLURMD_NODENAME", "")
with open("{flags}/calls", "a") as f:
    f.write(node + " " + " ".join(args) + "\\n")
if positional:  # the client, to the server's address
    if os.path.exists("{flags}/" + node + ".noclient"):
        time.sleep(300)
    try:
        s = socket.create_connection((positional[0], port), timeout=5)
    except OSError:
        print(" Couldn't connect to %s:%d" % (positional[0], port), file=sys.stderr)
        sys.exit(1)
    s.sendall(b"go")
    s.recv(2)
else:  # the server: one client, then the listening socket is closed (as perftest does)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", port))
    listener.listen(1)
    s, _ = listener.accept()
    listener.close()
    s.recv(2)
    s.sendall(b"ok")
s.close()
sys.stdout.write(open("{corpus}").read())
'''

_missing = missing_binaries()


def _namespaces_work() -> bool:
    """A private mount namespace with a tmpfs over /sys/class (root, CAP_SYS_ADMIN)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs none /sys/class"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    return probe.returncode == 0


needs_slurm = pytest.mark.skipif(
    bool(_missing) or not _namespaces_work(),
    reason=f"needs slurm-wlm and munge ({', '.join(_missing) or 'found'}), root and mount namespaces (unshare -m)",
)


class HcaCluster(SlurmCluster):
    """The loopback cluster, each slurmd in a mount namespace showing its node's sysfs tree."""

    def _spawn(self, name: str, argv: list[str]) -> None:
        if name.startswith("slurmd-"):
            tree = self.root / "sysfs" / name.removeprefix("slurmd-")
            shutil.copytree(TREE, tree)
            mount = (
                'mount -t tmpfs none /sys/class && mkdir /sys/class/infiniband && mount --bind "$0"'
                ' /sys/class/infiniband && exec "$@"'
            )
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount, str(tree), *argv]
        super()._spawn(name, argv)

    def rate(self, node: str, text: str) -> None:
        """The node's mlx5_0 port 1 rate file (its bind mount shows the change at once)."""
        (self.root / "sysfs" / node / "mlx5_0" / "ports" / "1" / "rate").write_text(text + "\n")


@pytest.fixture(scope="module")
def slurm() -> Iterator[HcaCluster]:
    if _missing or not _namespaces_work():
        pytest.skip("needs slurm-wlm, munge, root and mount namespaces")
    with running(
        "cc-rdma-", NODES, FIXTURES / "prolog-cluster" / "healthy", cls=HcaCluster, health_interval=0
    ) as cluster:
        for node in NODES:
            cluster.rate(node, "200 Gb/sec (4X HDR)")
        yield cluster


class Site:
    """The profile (rdma.bandwidth judging the ports, the bandwidth left to the pairs), the stand-in."""

    def __init__(self, root: Path, run_timeout: float = 10, budget: float = 60, cuda: str = "") -> None:
        self.root = root
        self.flags = root / "flags"
        self.flags.mkdir()
        self.profile = root / "rdma.yaml"
        self.profile.write_text(
            "checks:\n  rdma.bandwidth:\n    devices: [mlx5_0]\n    loopback: false\n"
            f"    run_timeout: {run_timeout}\n    timeout: {budget}\n" + (f"    cuda: [{cuda}]\n" if cuda else "")
        )
        self.bin = root / "bin"
        self.bin.mkdir()
        tool = self.bin / "ib_write_bw"
        tool.write_text(STANDIN.format(python=sys.executable, flags=self.flags, corpus=HDR8M))
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.path = f"{self.bin}:{os.environ.get('PATH', '')}:/usr/sbin:/sbin"

    def args(self, nodes: str, out: Path, *extra: str | Path) -> list[str]:
        return [
            "sweep", nodes, "-p", str(self.profile), "--record-file", f"{self.root}/records/{{node}}.json",
            "--run-timeout", "60", "--out-json", str(out), "--pairs", "--pairs-checks", "rdma.bandwidth",
            *map(str, extra),
        ]  # fmt: skip

    def sweep(self, slurm: SlurmCluster, nodes: str, *extra: str, path: str | None = None) -> tuple[int, dict, str]:  # type: ignore[type-arg]
        out = self.root / f"sweep-{time.monotonic_ns()}.json"
        proc = slurm.clustercheck(*self.args(nodes, out, *extra), timeout=240, env={"PATH": path or self.path})
        assert out.exists(), proc.stdout + proc.stderr + slurm.logs()
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, json.loads(out.read_text()), proc.stdout

    def left_running(self) -> list[str]:
        found = subprocess.run(["pgrep", "-af", str(self.bin)], capture_output=True, text=True, check=False)
        return [line for line in found.stdout.splitlines() if "pgrep" not in line]


@pytest.fixture
def site(tmp_path: Path) -> Site:
    tmp_path.chmod(0o755)
    return Site(tmp_path)


def _rdma(doc: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {"+".join(p["nodes"]): p for p in doc["pairs"]["rdma"]["pairs"]}


def _check(doc: dict, node: str) -> dict:  # type: ignore[type-arg]
    return next(c for c in doc["hosts"][node]["checks"] if c["id"] == logic.RDMA_PAIRS_CHECK)


@needs_slurm
def test_a_healthy_pair_passes_and_the_node_with_a_degraded_port_is_drained(slurm: HcaCluster, site: Site) -> None:
    slurm.rate("q1", "400 Gb/sec (4X NDR)")  # the real tree's rate: the recorded 201.8 Gb/s is half of it
    page = site.root / "sweep.html"
    try:
        code, doc, stdout = site.sweep(slurm, "q[1-3]", "--out-html", str(page))
        assert code == 2, (doc["sweep"], doc["pairs"])
        pairs = _rdma(doc)
        assert sorted(pairs) == ["q1+q2", "q2+q3", "q3+q1"]  # no topology: one ring
        healthy = pairs["q2+q3"]
        assert (healthy["status"], healthy["passes"]) == ("ok", 1), healthy
        (port,) = healthy["ports"]
        assert (port["hca"], port["port"], port["memory"], port["status"]) == ("mlx5_0", 1, "host", "ok")
        assert [(port[r]["node"], port[r]["gbps"], port[r]["rate_gbps"]) for r in ("server", "client")] == [
            ("q2", 201.8, 200.0),
            ("q3", 201.8, 200.0),
        ]
        assert "lowest 201.8 Gb/s = 100.9% of q2's 200 Gb/s" in healthy["summary"]
        for name in ("q1+q2", "q3+q1"):  # the degraded port's pairs: slow twice, the port and both nodes named
            slow = pairs[name]
            assert (slow["status"], slow["action"], slow["passes"]) == ("fail", "CHECK_CABLE", 2), slow
            a, b = slow["nodes"]
            assert slow["summary"].startswith(
                f"mlx5_0 port 1 between {a} (server) and {b} (client): q1: 201.8 Gb/s at 8388608 bytes = 50.5% of "
                "the port's 400 Gb/s (at least 90% expected)"
            ), slow["summary"]
        assert doc["pairs"]["rdma"]["stragglers"] == ["q1"]
        # the straggler drained with CHECK_CABLE, as Slurm shows it; its partners pass
        assert doc["sweep"]["q1"]["done"] == "drained" and "DRAIN" in slurm.state("q1")
        reason = slurm.reason("q1") or ""
        assert reason.startswith(
            "clustercheck: rdma.pairs: q1: mlx5_0 port 1 slow in every pair it is in (measured twice): with q2 "
            "(leaf (no leaf)): fail, lowest 201.8 Gb/s = 50.5% of 400 Gb/s (q1 mlx5_0 port 1)"
        ), reason
        assert reason.endswith("action=CHECK_CABLE")
        for node in ("q2", "q3"):
            check = _check(doc, node)
            assert check["status"] == "ok" and doc["sweep"][node]["done"] == "passed", check
            assert "DRAIN" not in slurm.state(node)
        # each pair: the server on its first node, the client on the second to its NodeAddr, run 0 on 18515
        calls = (site.flags / "calls").read_text().splitlines()
        assert "q2 -d mlx5_0 -p 18515 --report_gbits -s 8388608 -n 5000" in calls
        assert "q3 -d mlx5_0 -p 18515 --report_gbits -s 8388608 -n 5000 127.0.0.1" in calls
        # 3 pairs, the 2 slow ones again: 5 servers (a client that came first was tried again)
        assert len([c for c in calls if not c.endswith(" 127.0.0.1")]) == 5
        # the report: the table's lines, the page's rows, the node's own rdma.bandwidth beside
        assert "rdma straggler (ports slow in every pair it is in): q1" in stdout
        assert "rdma pair q2+q3 (" in stdout and page.read_text().count("rdma.pairs") >= 3
        own = doc["hosts"]["q1"]["checks"][0]
        assert own["id"] == "rdma.bandwidth" and own["status"] == "ok" and "400 Gb/s" in own["summary"]
        assert slurm.reservations() == [] and slurm.jobs() == [] and site.left_running() == []
    finally:
        slurm.rate("q1", "200 Gb/sec (4X HDR)")
        slurm.resume("q1")


@needs_slurm
def test_gpu_memory_runs_at_both_ends_after_host_memory(slurm: HcaCluster, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    site = Site(tmp_path, cuda="mlx5_0:1")
    code, doc, _ = site.sweep(slurm, "q[2-3]")
    assert code == 0, doc["pairs"]
    (pair,) = doc["pairs"]["rdma"]["pairs"]
    assert [(p["memory"], p["status"]) for p in pair["ports"]] == [("host", "ok"), ("gpu 1", "ok")], pair
    calls = (site.flags / "calls").read_text().splitlines()
    # the second run on the next out-of-band port, from GPU 1's memory at both ends
    assert "q2 -d mlx5_0 -p 18516 --report_gbits -s 8388608 -n 5000 --use_cuda=1" in calls
    assert "q3 -d mlx5_0 -p 18516 --report_gbits -s 8388608 -n 5000 --use_cuda=1 127.0.0.1" in calls
    if slurm.gres:  # every GPU of the nodes asked for (an exclusive allocation gets none otherwise)
        assert "--gres=gpu:3" in pair["command"], pair["command"]
    assert _check(doc, "q2")["status"] == "ok" and site.left_running() == []


@needs_slurm
def test_both_pair_forms_side_by_side_in_the_report(slurm: HcaCluster, site: Site) -> None:
    # nccl.pairs beside rdma.pairs: the stand-in all_reduce_perf prints, from rank 0, the corpus's
    # real two-node EFA run with GPUDirect RDMA (tests/test_sweep_pairs.py's healthy run)
    tool = site.bin / "all_reduce_perf"
    tool.write_text(f"#!/bin/sh\n[ \"${{SLURM_PROCID:-0}}\" = 0 ] || exit 0\nexec cat '{NCCL_RUN}'\n")
    tool.chmod(0o755)
    code, doc, stdout = site.sweep(slurm, "q[2-3]", "--pairs-checks", "nccl.pairs,rdma.bandwidth")
    assert code == 0, doc["pairs"]
    assert doc["pairs"]["checks"] == ["nccl.pairs", "rdma.pairs"]
    (nccl,) = doc["pairs"]["pairs"]
    assert (nccl["status"], nccl["transport"], nccl["gdr"], nccl["busbw"]) == ("ok", "ofi", True, 43.81)
    (rdma,) = doc["pairs"]["rdma"]["pairs"]
    assert rdma["status"] == "ok" and rdma["nodes"] == nccl["nodes"] == ["q2", "q3"]
    assert [c["id"] for c in doc["hosts"]["q2"]["checks"]] == ["rdma.bandwidth", "nccl.pairs", "rdma.pairs"]
    assert "pair q2+q3 ((no leaf)): ok: ofi, GDR, 43.81 GB/s" in stdout and "rdma pair q2+q3 ((no leaf)): ok" in stdout


@needs_slurm
def test_a_server_whose_client_never_connects_is_an_error_within_the_budget(slurm: HcaCluster, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    site = Site(tmp_path, run_timeout=3, budget=30)
    (site.flags / "q3.noclient").write_text("")  # the client on q3 hangs before it connects
    start = time.monotonic()
    code, doc, _ = site.sweep(slurm, "q[2-3]")
    took = time.monotonic() - start
    assert code == 3, doc["pairs"]
    (pair,) = doc["pairs"]["rdma"]["pairs"]
    assert pair["status"] == "error" and pair["passes"] == 1, pair
    assert (
        "mlx5_0 port 1 between q2 (server) and q3 (client): the server on q2 and the client on q3 did not finish "
        "within 3 s and were stopped (a server whose client never connected)"
    ) in pair["summary"], pair["summary"]
    assert pair["srun_s"] < 30 and took < 90, (pair["srun_s"], took)
    assert site.left_running() == [] and slurm.jobs() == []
    for node in ("q2", "q3"):  # not proven: an error in the report, nothing drained
        assert _check(doc, node)["status"] == "error" and doc["sweep"][node]["done"] == "left"
        assert slurm.reason(node) is None


@needs_slurm
def test_perftest_missing_is_an_error_naming_it(slurm: HcaCluster, site: Site) -> None:
    code, doc, _ = site.sweep(slurm, "q[2-3]", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    assert code == 3, doc["pairs"]
    (pair,) = doc["pairs"]["rdma"]["pairs"]
    assert pair["status"] == "error", pair
    assert pair["summary"] == "ib_write_bw is not installed on q2 and q3 (not found): the perftest package holds it"
    check = _check(doc, "q2")
    assert check["status"] == "error" and "install the perftest package" in check["remedy"], check
    assert "DRAIN" not in slurm.state("q2") and doc["sweep"]["q2"]["done"] == "left"
    assert site.left_running() == [] and slurm.jobs() == []
    code, doc, stdout = site.sweep(slurm, "q2")  # one node: nothing to pair, and it says so
    assert code == 0 and doc["pairs"]["rdma"]["pairs"] == [] and "rdma pairs: none measured" in stdout, stdout


@needs_slurm
def test_sigterm_during_a_pairs_run_leaves_no_job_reservation_or_process(slurm: HcaCluster, site: Site) -> None:
    (site.flags / "q3.noclient").write_text("")  # the pair waits (run_timeout 10 s) until the signal
    argv = [*CLUSTERCHECK, *site.args("q[2-3]", site.root / "out.json", "--reservation", "cc-rdma-term")]
    env = {**slurm.env, "PATH": site.path}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        slurm.wait_for(lambda: len(site.left_running()) == 2, 60, "the pair's server and client")
        assert slurm.reservations() == ["cc-rdma-term"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3 and "interrupted by SIGTERM" in err and "Traceback" not in err, out + err
    slurm.wait_for(lambda: slurm.jobs() == [] and site.left_running() == [], 20, "the pair's job and tools to be gone")
    assert slurm.reservations() == []
    for node in ("q2", "q3"):
        assert "DRAIN" not in slurm.state(node) and slurm.reason(node) is None


def test_pairs_checks_are_checked_before_any_node(tmp_path: Path) -> None:
    proc = cli("sweep", "n1", "--pairs", "--pairs-checks", "ib_read_lat")
    assert proc.returncode == 64 and "--pairs-checks takes nccl.pairs and/or rdma.bandwidth" in proc.stderr
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  nccl.loopback: {min_busbw: 20}\n")
    proc = cli("sweep", "n1", "-p", profile, "--pairs", "--pairs-checks", "rdma.bandwidth")
    assert proc.returncode == 64 and "does not run rdma.bandwidth" in proc.stderr, proc.stderr
    proc = cli("sweep", "n1", "--pairs-checks", "rdma.bandwidth")
    assert proc.returncode == 64 and "need --pairs" in proc.stderr
    profile.write_text("checks:\n  rdma.bandwidth: {devices: ['mlx5_*', 'mlx5_0 mlx5_1']}\n")
    proc = cli("sweep", "n1", "-p", profile, "--pairs")
    assert proc.returncode == 64 and "devices entry 'mlx5_*' is not an HCA name" in proc.stderr, proc.stderr
    assert "devices entry 'mlx5_0 mlx5_1' is not an HCA name" in proc.stderr


# -- the pure parts: the script's argv, its output read, the verdicts -----------------------------------


SPEC = logic.RdmaSpec(devices=("mlx5_0",), cuda=("mlx5_0:3",), run_timeout=7.5)
PAIR = logic.Pair("g1", "g2", "s1")


def _ends(state_a: str, rate_a: str, body_a: str, state_b: str = "4: ACTIVE", rate_b: str = "") -> str:
    """What srun --label prints for one host-memory run of mlx5_0 (task 0: g1 the server, 1: g2)."""
    lines = ["0: @@cc node=g1 role=server", "1: @@cc node=g2 role=client"]
    for task, state, rate, body in (("0", state_a, rate_a, body_a), ("1", state_b, rate_b or rate_a, body_a)):
        lines.append(f"{task}: @@cc run mlx5_0:host state={state} rate={rate}")
        lines += [f"{task}: {line}" for line in body.splitlines()]
        lines.append(f"{task}: @@cc end mlx5_0:host rc=0")
    return "\n".join(lines) + "\n"


def test_the_pair_script_runs_the_server_on_the_first_node_and_the_client_to_its_address() -> None:
    runs = logic.rdma_runs(SPEC, ["mlx5_0", "mlx5_1"])
    assert runs == ["mlx5_0:host", "mlx5_0:3", "mlx5_1:host"]
    argv = logic.rdma_pair_argv(SPEC, PAIR, "10.0.0.1", runs)
    assert argv[:3] == ["sh", "-c", logic.RDMA_PAIR_SCRIPT]
    assert argv[3:] == [
        "sh", "g1", "10.0.0.1", "ib_write_bw", "1", "8", "18515", "mlx5_0:host mlx5_0:3 mlx5_1:host",
        "--report_gbits", "-s", "8388608", "-n", "5000",
    ]  # fmt: skip


def test_the_two_ends_are_read_and_each_judged_against_its_own_port() -> None:
    text = _ends("4: ACTIVE", "400 Gb/sec (4X NDR)", HDR8M.read_text(), rate_b="200 Gb/sec (4X HDR)")
    sides = read_pair_sides(text)
    assert {n: (s.role, list(s.runs)) for n, s in sides.items()} == {
        "g1": ("server", ["mlx5_0:host"]),
        "g2": ("client", ["mlx5_0:host"]),
    }
    spec = SPEC._replace(cuda=())
    run = logic.judge_rdma_pair(PAIR, text, "", spec, ["mlx5_0:host"], server_addr="10.0.0.1")
    assert (run.status, run.action, run.slow, run.measured) == (Status.FAIL, "CHECK_CABLE", True, True)
    assert run.summary.startswith("mlx5_0 port 1 between g1 (server) and g2 (client): g1: 201.8 Gb/s")
    ok = logic.judge_rdma_pair(PAIR, text, "", spec._replace(expected_rate=200.0), ["mlx5_0:host"], server_addr="x")
    assert ok.status is Status.OK, ok.summary  # both ends against the profile's expected rate


def test_a_port_down_fails_and_an_hca_missing_at_one_end_is_an_error() -> None:
    spec = SPEC._replace(cuda=())
    down = _ends("1: DOWN", "400 Gb/sec (4X NDR)", "", state_b="4: ACTIVE")
    run = logic.judge_rdma_pair(PAIR, down, "", spec, ["mlx5_0:host"], server_addr="x")
    assert (run.status, run.action, run.slow) == (Status.FAIL, "CHECK_CABLE", False)
    assert "g1: mlx5_0 port 1 is DOWN" in run.summary and not run.measured  # no straggler rule on it
    absent = _ends("4: ACTIVE", "200 Gb/sec (4X HDR)", HDR8M.read_text(), state_b="")
    run = logic.judge_rdma_pair(PAIR, absent, "", spec, ["mlx5_0:host"], server_addr="x")
    assert run.status is Status.ERROR and "the client on g2: mlx5_0 has no port 1" in run.summary, run.summary
    cut = "\n".join(_ends("4: ACTIVE", "200 Gb/sec (4X HDR)", HDR8M.read_text()).splitlines()[:-1])
    run = logic.judge_rdma_pair(PAIR, cut, "", spec, ["mlx5_0:host"], server_addr="x")
    assert run.status is Status.ERROR and "its output was cut" in run.summary, run.summary
    none = logic.judge_rdma_pair(PAIR, "", "srun: error: Unable to create step", spec, ["mlx5_0:host"], server_addr="x")
    assert none.status is Status.ERROR and "printed nothing" in none.summary


def test_a_port_other_than_1_is_named_to_perftest_at_both_ends() -> None:
    # -p is perftest's TCP port (the script sets it per run); the HCA port is -i (default 1): a
    # profile's `port: 2` must measure port 2, not judge port 2's sysfs rate on port 1's traffic
    argv = logic.rdma_pair_argv(SPEC._replace(port=2), PAIR, "10.0.0.1", ["mlx5_0:host"])
    assert argv[7] == "2" and argv[-2:] == ["-i", "2"], argv
    assert "-i" not in logic.rdma_pair_argv(SPEC, PAIR, "10.0.0.1", ["mlx5_0:host"])  # 1: perftest's default


@pytest.mark.parametrize(
    ("rc", "words"), [(139, "crashed: killed by signal 11 (SIGSEGV)"), (127, "could not be started")]
)
def test_a_tool_that_crashes_is_not_called_a_timeout(rc: int, words: str) -> None:
    text = _ends("4: ACTIVE", "200 Gb/sec (4X HDR)", "").replace(
        "@@cc end mlx5_0:host rc=0", f"@@cc end mlx5_0:host rc={rc}"
    )
    run = logic.judge_rdma_pair(PAIR, text, "", SPEC._replace(cuda=()), ["mlx5_0:host"], server_addr="x")
    assert run.status is Status.ERROR and words in run.summary and "did not finish" not in run.summary, run.summary
    for stopped in logic.TIMED_OUT:  # timeout's own codes: after TERM, after -k's KILL
        text = _ends("4: ACTIVE", "200 Gb/sec (4X HDR)", "").replace("rc=0", f"rc={stopped}")
        run = logic.judge_rdma_pair(PAIR, text, "", SPEC._replace(cuda=()), ["mlx5_0:host"], server_addr="x")
        assert "did not finish within 7.5 s" in run.summary, run.summary


def test_hca_names_from_a_nodes_report_are_refused_unless_sysfs_could_list_them() -> None:
    # the HCAs measured between nodes come from the first node's own rdma.bandwidth result (data a
    # node wrote): a name with a blank or a ':' would split the pair script's runs, so none goes on
    from clustercheck.app import app  # noqa: F401  (the command modules load through the app)
    from clustercheck.commands import sweep as sweep_cmd

    sweeper = sweep_cmd.Sweeper(sweep_cmd.Options(rdma=SPEC._replace(devices=()), srun="/bin/false"))
    try:
        ports: dict[str, dict[str, str]] = {"mlx5_0": {}, "mlx5_1 mlx5_9:host": {}}
        result = CheckResult(logic.RDMA_CHECK, Status.OK, "ok", data={"ports": ports})
        sweeper.reports[PAIR.a] = HostReport(PAIR.a, (result,))
        run = sweeper.run_rdma_pair(PAIR, None, 1)
        assert run.status is Status.ERROR and "'mlx5_1 mlx5_9:host'" in run.summary, run.summary
        assert sweeper.rdma_srun_s == [] and not sweeper.procs  # nothing was started
    finally:
        shutil.rmtree(sweeper.folder, ignore_errors=True)


def test_the_rdma_straggler_is_slow_everywhere_and_proven_by_a_fast_partner() -> None:
    def run(a: str, b: str, status: Status, slow: bool = True) -> logic.RdmaPairRun:
        return logic.RdmaPairRun(logic.Pair(a, b, "s1"), status, "", slow=slow and status is Status.FAIL)

    ring = [run("a", "b", Status.FAIL), run("b", "c", Status.OK), run("c", "a", Status.FAIL)]
    assert logic.rdma_stragglers(ring) == ["a"]
    results = logic.rdma_pair_results("abc", ring, ["a"], confirmed=True)
    assert results["a"].status is Status.FAIL and results["a"].action == "CHECK_CABLE"
    assert results["b"].status is Status.OK and results["c"].status is Status.OK
    down = [run("a", "b", Status.FAIL, slow=False), run("b", "c", Status.OK), run("c", "a", Status.FAIL, slow=False)]
    assert logic.rdma_stragglers(down) == []  # a port down is not a measurement: both nodes fail, none drained
    results = logic.rdma_pair_results("abc", down, [], confirmed=False)
    assert [results[n].status for n in "abc"] == [Status.FAIL, Status.FAIL, Status.FAIL]


def test_explain_says_what_the_pair_form_runs_and_for_how_long() -> None:
    proc = cli("explain", "rdma.bandwidth")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    for words in (
        "clustercheck sweep --pairs",
        "srun -w A,B -N2 --exclusive",
        "server on A and the same client on B to A's NodeAddr",
        "matched by HCA name and port number",
        "TCP port 18515+k",
        "`run_timeout` (60 s; a server whose client never connects is stopped there",
        "the pair's whole srun the check's `timeout` (600 s)",
        "--pairs-checks rdma.bandwidth",
    ):
        assert words in out, words


WHOLE = _ends("4: ACTIVE", "200 Gb/sec (4X HDR)", HDR8M.read_text())


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=len(WHOLE.splitlines()) - 1))
def test_a_cut_pair_output_is_never_a_pass(lines: int) -> None:
    spec = SPEC._replace(cuda=())
    assert logic.judge_rdma_pair(PAIR, WHOLE, "", spec, ["mlx5_0:host"], server_addr="x").status is Status.OK
    cut = "\n".join(WHOLE.splitlines()[:lines])
    run = logic.judge_rdma_pair(PAIR, cut, "", spec, ["mlx5_0:host"], server_addr="x")
    assert run.status is Status.ERROR, (lines, run.summary)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WHOLE.splitlines()) | st.text(max_size=80), max_size=40))
def test_garbage_pair_output_is_never_a_pass_and_never_raises(lines: list[str]) -> None:
    text = "\n".join(lines)
    read_pair_sides(text)
    run = logic.judge_rdma_pair(PAIR, text, "", SPEC, logic.rdma_runs(SPEC, ["mlx5_0"]), server_addr="x")
    # a pass needs both ends of both runs (host memory and GPU 3): the lines of a host-memory run never are
    assert run.status is not Status.OK, run.summary
