"""`clustercheck sweep --pairs` (nccl.pairs) on the real loopback Slurm, and its pure decisions.

After the per-node runs, two-node `all_reduce_perf` through `srun -w A,B -N2` on pairs chosen from
Slurm's topology.conf (a ring within each leaf, one pair across each leaf boundary), judged by
nccl.loopback's judge (clustercheck.facts.nccl_run). The stand-in is `all_reduce_perf` on PATH
(srun passes the sweep's environment on to the job): its rank 0 prints a REAL recorded two-node
nccl-tests run with NCCL_DEBUG=INFO from tests/corpus/nccl_logs, picked by the nodes of its
allocation (SLURM_JOB_NODELIST, expanded by `scontrol show hostnames`) as each test arranged:
healthy (EFA with GPUDirect RDMA, 43.8 GB/s peak), slow (EFA without GPUDirect RDMA, 3.4 GB/s
peak) for pairs holding the slow node, or a TCP-socket fallback. This machine has no GPU, HCA
or nccl-tests: that is the one place a stand-in is right; Slurm, its allocations, drains and
reasons are real and asserted on what `sinfo -R` and `scontrol show node` say.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import CORPUS, FIXTURES, cli
from tests.slurm_cluster import CLUSTERCHECK, SlurmCluster, missing_binaries, running

from clustercheck import sweep as logic
from clustercheck.result import Status

LOGS = CORPUS / "nccl_logs"
HEALTHY = LOGS / "aws-efa-eks-p4d-2node-nccl2.9.9-efa-gdrdma-allreduce.txt"  # 2 nodes, EFA + GDRDMA, 43.8 GB/s
SLOW = LOGS / "cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt"  # 2 nodes, EFA without GDR, 3.4 GB/s peak
SOCKET = LOGS / "issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt"  # 2 nodes, NCCL_IB_DISABLE: TCP

NODES = ["p1", "p2", "p3", "p4", "p5"]
TOPOLOGY = "SwitchName=s1 Nodes=p[1-3]\nSwitchName=s2 Nodes=p[4-5]\nSwitchName=top Switches=s[1-2]\n"

SITE = '''"""The per-node profile of the pairs tests: passes, or fails where the test wrote `fail`."""

from clustercheck import Host, Result, check, fail, ok


@check(action="REPLACE_HW")
def whole(host: Host, *, flags: str) -> Result:
    """Fails where the test wrote FLAGS/NODE.fail."""
    node = host.output("sh", "-c", 'echo "$SLURMD_NODENAME"').strip()
    if host.read_optional(f"{flags}/{node}.fail") is not None:
        return fail(f"the test pulled a part from {node}")
    return ok(f"{node} is whole")
'''

# rank 0 prints the recorded run (nccl-tests prints its table from rank 0; the recorded file is the
# whole run as published); FLAGS/NODE.slow holds `always` or how many more runs of NODE are slow
STANDIN = """#!/bin/sh
[ "${{SLURM_PROCID:-0}}" = 0 ] || exit 0
echo "$SLURM_JOB_NODELIST $*" >> {flags}/calls
env | grep '^NCCL_' | sort > {flags}/env
for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  [ -e {flags}/$n.socket ] && exec cat '{socket}'
  [ -e {flags}/$n.hang ] && exec sleep 300
  f={flags}/$n.slow
  if [ -s "$f" ]; then
    left=$(cat "$f")
    [ "$left" = always ] && exec cat '{slow}'
    if [ "$left" -gt 0 ]; then echo $((left - 1)) > "$f"; exec cat '{slow}'; fi
  fi
done
exec cat '{healthy}'
"""

_missing = missing_binaries()
needs_slurm = pytest.mark.skipif(
    bool(_missing) or os.geteuid() != 0,
    reason=f"needs Debian's slurm-wlm and munge ({', '.join(_missing) or 'found'}) and root (slurmd starts jobs)",
)


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    if _missing or os.geteuid() != 0:
        pytest.skip("needs slurm-wlm, munge and root")
    with running(
        "cc-pairs-", NODES, FIXTURES / "prolog-cluster" / "healthy", cls=SlurmCluster, health_interval=0
    ) as cluster:
        yield cluster


class Site:
    """The per-node profile, the topology, the stand-in all_reduce_perf and its arrangements."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.flags = root / "flags"
        self.flags.mkdir()
        (root / "checks").mkdir()
        (root / "checks" / "pairsite.py").write_text(SITE)
        self.profile = root / "pairs.yaml"
        self.profile.write_text(f"checks:\n  pairsite.whole:\n    flags: {self.flags}\n")
        self.topology = root / "topology.conf"
        self.topology.write_text(TOPOLOGY)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        tool = bin_dir / "all_reduce_perf"
        tool.write_text(STANDIN.format(flags=self.flags, socket=SOCKET, slow=SLOW, healthy=HEALTHY))
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.path = f"{bin_dir}:{os.environ.get('PATH', '')}:/usr/sbin:/sbin"

    def args(self, nodes: str, out: Path, *extra: str | Path, pairs: bool = True) -> list[str | Path]:
        argv: list[str | Path] = [
            "sweep",
            nodes,
            "-p",
            self.profile,
            "--checks",
            self.root / "checks",
            "--record-file",
            f"{self.root}/records/{{node}}.json",
            "--run-timeout",
            "60",
            "--out-json",
            out,
            *extra,
        ]
        return argv + (["--pairs", "--topology", self.topology, "--pairs-timeout", "60"] if pairs else [])

    def sweep(self, slurm: SlurmCluster, nodes: str, *extra: str | Path) -> tuple[int, dict, str]:  # type: ignore[type-arg]
        out = self.root / f"sweep-{time.monotonic_ns()}.json"
        proc = slurm.clustercheck(*self.args(nodes, out, *extra), timeout=240, env={"PATH": self.path})
        assert out.exists(), proc.stdout + proc.stderr + slurm.logs()
        return proc.returncode, json.loads(out.read_text()), proc.stdout


@pytest.fixture
def site(tmp_path: Path) -> Site:
    tmp_path.chmod(0o755)
    return Site(tmp_path)


def _pairs(doc: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {"+".join(p["nodes"]): p for p in doc["pairs"]["pairs"]}


def _check(doc: dict, node: str) -> dict:  # type: ignore[type-arg]
    return next(c for c in doc["hosts"][node]["checks"] if c["id"] == logic.PAIRS_CHECK)


@needs_slurm
def test_pairs_name_each_pairs_transport_and_drain_the_straggler_after_the_second_pass(
    slurm: SlurmCluster, site: Site
) -> None:
    (site.flags / "p1.slow").write_text("always")
    (site.flags / "p5.socket").write_text("")
    page = site.root / "sweep.html"
    try:
        code, doc, stdout = site.sweep(slurm, "p[1-5]", "--out-html", page)
        assert code == 2, (doc["sweep"], doc.get("pairs"))
        pairs = _pairs(doc)
        # a ring within leaf s1, one pair in leaf s2, one across the boundary
        assert sorted(pairs) == ["p1+p2", "p2+p3", "p3+p1", "p3+p4", "p4+p5"]
        assert pairs["p3+p4"]["across"] and pairs["p3+p4"]["leaf"] == "s1|s2" and not pairs["p1+p2"]["across"]
        healthy = pairs["p2+p3"]
        assert (healthy["status"], healthy["transport"], healthy["gdr"], healthy["busbw"]) == ("ok", "ofi", True, 43.81)
        assert "GPUDirect RDMA on all 64 network channels" in healthy["summary"]
        for name in ("p1+p2", "p3+p1"):  # the slow node's pairs: the recorded slow run, measured twice
            slow = pairs[name]
            assert (slow["status"], slow["transport"], slow["gdr"], slow["passes"]) == ("fail", "ofi", False, 2)
            assert slow["busbw"] < 20 and slow["first_pass"]["busbw"] == slow["busbw"]
        assert pairs["p3+p4"]["passes"] == 1
        socket = pairs["p4+p5"]
        assert (socket["status"], socket["transport"], socket["action"]) == ("fail", "socket", "FIX_CONFIG")
        assert "NCCL fell back to TCP sockets" in socket["summary"]
        assert doc["pairs"]["stragglers"] == ["p1"]
        # the straggler drained with INVESTIGATE, as Slurm shows it; its partners pass
        assert doc["sweep"]["p1"]["done"] == "drained" and "DRAIN" in slurm.state("p1")
        reason = slurm.reason("p1") or ""
        assert reason.startswith("clustercheck: nccl.pairs: p1 is slow in every pair it is in (measured twice)")
        assert reason.endswith("action=INVESTIGATE")
        p1 = _check(doc, "p1")
        assert (p1["status"], p1["action"]) == ("fail", "INVESTIGATE") and "with p2 (leaf s1): ofi, no GDR" in p1[
            "summary"
        ]
        for node in ("p2", "p3"):
            assert _check(doc, node)["status"] == "ok" and doc["sweep"][node]["done"] == "passed"
            assert "DRAIN" not in slurm.state(node)
        assert "with p4 (across leaves): ofi, GDR, 43.81 GB/s" in _check(doc, "p3")["summary"]
        # the socket pair fails both of its nodes with FIX_CONFIG: an image's or a job's setting, no drain
        for node in ("p4", "p5"):
            check = _check(doc, node)
            assert (check["status"], check["action"]) == ("fail", "FIX_CONFIG"), check
            assert doc["sweep"][node]["done"] == "left" and slurm.reason(node) is None
        # NCCL_DEBUG=INFO, every GPU of each node (gres gpu:3 where the cluster has GRES), the run's sizes
        assert "NCCL_DEBUG=INFO" in (site.flags / "env").read_text().splitlines()
        gpus = "3" if slurm.gres else "1"
        calls = (site.flags / "calls").read_text().splitlines()
        assert len(calls) == 7 and all(c.endswith(f"-b 8M -e 1G -f 2 -g {gpus}") for c in calls), calls
        assert doc["pairs"]["topology"] == str(site.topology) and doc["pairs"]["srun_s"] > 0
        # the table and the page show the pairs' results beside the per-node ones
        assert "straggler (slow in every pair it is in): p1" in stdout and "pair p4+p5 (s2): fail: socket" in stdout
        assert page.read_text().count("nccl.pairs") >= 5
        assert slurm.reservations() == []
    finally:
        slurm.resume("p1")


@needs_slurm
def test_a_pair_slow_once_is_not_drained_and_a_failed_node_is_not_paired(slurm: SlurmCluster, site: Site) -> None:
    (site.flags / "p2.slow").write_text("1")  # its first run only
    (site.flags / "p5.fail").write_text("")  # fails its own profile: drained for that, in no pair
    try:
        code, doc, _ = site.sweep(slurm, "p[2-5]")
        assert code == 2, doc["sweep"]
        assert doc["sweep"]["p5"]["done"] == "drained" and "pairsite.whole" in (slurm.reason("p5") or "")
        pairs = _pairs(doc)
        assert sorted(pairs) == ["p2+p3", "p3+p4"]  # p4 alone in s2: only the pair across
        again = pairs["p2+p3"]
        assert (again["status"], again["passes"], again["first_pass"]["status"]) == ("ok", 2, "fail")
        assert doc["pairs"]["stragglers"] == [] and doc["pairs"]["measured_slow_once"] == ["p2"]
        assert doc["sweep"]["p2"]["done"] == "passed" and "DRAIN" not in slurm.state("p2")
        assert _check(doc, "p2")["status"] == "ok"
    finally:
        slurm.resume("p5")


@needs_slurm
def test_sigterm_during_the_pairs_stops_their_jobs_and_deletes_the_reservation(slurm: SlurmCluster, site: Site) -> None:
    (site.flags / "p2.hang").write_text("")
    argv = [*CLUSTERCHECK, *map(str, site.args("p[2-3]", site.root / "out.json", "--reservation", "cc-pairs-term"))]
    env = {**slurm.env, "PATH": site.path}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        slurm.wait_for(lambda: (site.flags / "calls").exists() and len(slurm.jobs()) == 1, 60, "the pair's run")
        assert slurm.reservations() == ["cc-pairs-term"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3 and "interrupted by SIGTERM" in err and "Traceback" not in err, out + err
    slurm.wait_for(lambda: slurm.jobs() == [], 20, "the pair's job to be gone")
    assert slurm.reservations() == []
    for node in ("p2", "p3"):  # passed their own runs, interrupted in the pairs: nothing drained
        assert "DRAIN" not in slurm.state(node) and slurm.reason(node) is None
    doc = json.loads((site.root / "out.json").read_text())
    assert doc["hosts"]["p2"]["checks"][0]["status"] == "ok"
    slurm.resume()


@needs_slurm
def test_the_sweep_measures_a_slow_nccl_loopback_twice_and_a_socket_fallback_once(
    slurm: SlurmCluster, site: Site
) -> None:
    # the real nccl.loopback inside each node's allocation: slow (below 40 GB/s) and nothing else is
    # `performance: true` (the slow recording has no GPUDirect RDMA: not required here, else that fails it)
    site.profile.write_text("checks:\n  nccl.loopback:\n    min_busbw: 40\n    gpus: 8\n    require_gdr: false\n")
    (site.flags / "p1.slow").write_text("always")
    (site.flags / "p2.socket").write_text("")
    out = site.root / "loop.json"
    proc = slurm.clustercheck(*site.args("p[1-3]", out, pairs=False), timeout=240, env={"PATH": site.path})
    try:
        doc = json.loads(out.read_text())
        assert proc.returncode == 2, proc.stdout + proc.stderr
        done = {n: (o["done"], o["passes"]) for n, o in doc["sweep"].items()}
        assert done == {"p1": ("drained", 2), "p2": ("drained", 1), "p3": ("passed", 1)}, done
        assert (slurm.reason("p1") or "").endswith("action=INVESTIGATE") and "3.41 GB/s" in (slurm.reason("p1") or "")
        assert "TCP sockets" in (slurm.reason("p2") or "") and (slurm.reason("p2") or "").endswith("action=FIX_CONFIG")
        loop = doc["hosts"]["p1"]["checks"][0]
        assert loop["data"]["performance"] is True and loop["data"]["first_pass"]["status"] == "fail"
    finally:
        slurm.resume("p1", "p2")


@needs_slurm
def test_all_reduce_perf_missing_is_an_error_naming_nccl_tests(slurm: SlurmCluster, site: Site) -> None:
    code, doc, _ = site.sweep(slurm, "p[2-3]", "--pairs-binary", str(site.root / "nowhere" / "all_reduce_perf"))
    assert code == 3, doc["pairs"]
    (pair,) = doc["pairs"]["pairs"]
    assert pair["status"] == "error" and "is not installed on p2 or p3" in pair["summary"], pair
    check = _check(doc, "p2")
    assert check["status"] == "error" and "nccl-tests" in check["remedy"], check
    assert "DRAIN" not in slurm.state("p2") and doc["sweep"]["p2"]["done"] == "left"
    slurm.resume()
    code, doc, stdout = site.sweep(slurm, "p2")  # one node: nothing to pair, and it says so
    assert code == 0 and doc["pairs"]["pairs"] == [] and "pairs: none measured" in stdout, stdout


@needs_slurm
def test_dry_run_lists_the_pairs_it_would_run(slurm: SlurmCluster, site: Site) -> None:
    out = site.root / "dry.json"
    proc = slurm.clustercheck(*site.args("p[1-5]", out, "--dry-run"), env={"PATH": site.path})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in ("pair p1+p2 (s1): would run", "pair p4+p5 (s2): would run", "pair p3+p4 (across s1|s2): would run"):
        assert line in proc.stdout, proc.stdout
    assert len(json.loads(out.read_text())["pairs"]["planned"]) == 5
    assert not (site.flags / "calls").exists() and slurm.jobs() == []


@needs_slurm
def test_a_bad_topology_stops_the_sweep_before_any_node(slurm: SlurmCluster, site: Site) -> None:
    site.topology.write_text("SwitchName=s1 Nodes=p[1-3]\nSwitchName=s1 Nodes=p4\nSwitchName=x Bogus=1\n")
    out = site.root / "out.json"
    proc = slurm.clustercheck(
        "sweep", "p[1-2]", "-p", site.profile, "--checks", site.root / "checks", "--pairs", "--topology",
        site.topology, "--out-json", out, env={"PATH": site.path},
    )  # fmt: skip
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert str(site.topology) in proc.stderr and "Traceback" not in proc.stderr
    assert not (site.flags / "calls").exists() and slurm.jobs() == []


def test_pair_options_without_pairs_are_usage_errors() -> None:
    proc = cli("sweep", "n1", "--pairs-image", "nvcr.io#nvidia/pytorch:24.05-py3")
    assert proc.returncode == 64 and "need --pairs" in proc.stderr
    proc = cli("sweep", "n1", "--pairs", "--pairs-runtime", "docker")
    assert proc.returncode == 64 and "pyxis or apptainer" in proc.stderr
    proc = cli("sweep", "--ssh", "127.0.0.1", "--pairs")
    assert proc.returncode == 64 and "--pairs" in proc.stderr


# -- the pure decisions --------------------------------------------------------------------------


def test_pairs_ring_each_leaf_and_cross_each_boundary() -> None:
    groups = logic.leaf_groups({"a": ["s1"], "b": ["s1"], "c": ["s1"], "d": ["s2"]}, ["s1", "s2", "s3"], "abcde")
    assert groups == [("s1", ["a", "b", "c"]), ("s2", ["d"]), (logic.NO_LEAF, ["e"])]
    pairs = logic.choose_pairs(groups)
    assert [(p.name, p.across) for p in pairs] == [
        ("a+b", False),
        ("b+c", False),
        ("c+a", False),
        ("c+d", True),
        ("d+e", True),
    ]
    rounds = logic.schedule(pairs)
    assert all(len({n for p in r for n in p.nodes}) == 2 * len(r) for r in rounds)  # no node twice in a round
    assert sorted(p.name for r in rounds for p in r) == sorted(p.name for p in pairs)
    assert logic.choose_pairs(logic.leaf_groups(None, [], ["x"])) == []  # one node: nothing to pair


def _run(a: str, b: str, busbw: float | None) -> logic.PairRun:
    status = Status.ERROR if busbw is None else Status.OK if busbw >= 20 else Status.FAIL
    return logic.PairRun(logic.Pair(a, b, "s1"), status, "", busbw=busbw)


def test_the_straggler_is_slow_everywhere_and_proven_by_a_fast_partner() -> None:
    ring = [_run("a", "b", 3), _run("b", "c", 40), _run("c", "a", 4)]
    assert logic.stragglers(ring, 20) == ["a"]
    assert logic.stragglers([_run("a", "b", 3), _run("b", "c", 4), _run("c", "a", 5)], 20) == []  # all slow: none
    assert logic.stragglers([_run("a", "b", 3)], 20) == []  # one pair: a or b, not told apart
    assert logic.stragglers([_run("a", "b", 3), _run("b", "c", None)], 20) == []  # an unmeasured pair proves nothing
    results = logic.pair_results("abc", ring, ["a"], 20, confirmed=True)
    assert results["a"].status is Status.FAIL and results["a"].action == "INVESTIGATE"
    assert results["b"].status is Status.OK and results["c"].status is Status.OK  # the slow pairs are a's
    # a pair Slurm did not give (a job took a node): skipped alone, beside a measured one the node stands on it
    refused = logic.PairRun(logic.Pair("c", "d", "s1"), Status.SKIP, "Slurm did not give c and d")
    results = logic.pair_results("cd", [_run("b", "c", 40), refused], [], 20, confirmed=False)
    assert results["c"].status is Status.OK and results["d"].status is Status.SKIP
    # a pair that could not be judged is an error for both nodes, never a pass
    results = logic.pair_results("ab", [_run("a", "b", None)], [], 20, confirmed=False)
    assert results["a"].status is Status.ERROR and results["b"].status is Status.ERROR


def test_the_pair_runs_inside_the_sites_image() -> None:
    pair = logic.Pair("gpu1", "gpu2", "s1")
    command = ["env", "NCCL_DEBUG=INFO", "all_reduce_perf", "-g", "8"]
    argv = logic.pair_srun_argv(
        pair, command, job_name="j", seconds=300, gpus=8, image="nvcr.io#nvidia/pytorch:24.05-py3",
        mounts="/etc/nccl.conf:/etc/nccl.conf", extra=["--mpi=pmix"],
    )  # fmt: skip
    assert argv[:6] == ["srun", "-w", "gpu1,gpu2", "-N2", "--ntasks-per-node=1", "--exclusive"]
    assert "--gres=gpu:8" in argv and "--mpi=pmix" in argv
    assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in argv
    assert "--container-mounts=/etc/nccl.conf:/etc/nccl.conf" in argv and argv[-5:] == command
    argv = logic.pair_srun_argv(
        pair, command, job_name="j", seconds=300, image="/images/pytorch.sif", runtime="apptainer", mounts="/data"
    )
    at = argv.index("apptainer")
    assert argv[at : at + 6] == ["apptainer", "exec", "--nv", "--bind", "/data", "/images/pytorch.sif"]
    assert argv[at + 6 :] == command and not any(a.startswith("--container") for a in argv)
