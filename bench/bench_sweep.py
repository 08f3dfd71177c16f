#!/usr/bin/env python3
"""clustercheck sweep's own cost over a real loopback Slurm: its overhead per node and its fan-out.

Starts munged, slurmctld and --nodes slurmd on 127.0.0.1 (tests/slurm_cluster.py, as root; every
job runs the cluster's Prolog, a `clustercheck prolog` replay, as a site's would), and sweeps them
with a profile of one site check that does nothing, so everything measured is the sweep's:

- overhead per node: a node's whole turn (its state read right before, the srun allocation with
  the Prolog, `clustercheck run --local` starting and reporting, the state read after, the
  decision) minus the checks' own run time, from the sweep's --out-json (`seconds`, `srun_s` and
  each check's `duration_s`); split into what srun takes and what the sweep itself does;
- fan-out: the wall time of one `clustercheck sweep` over all nodes at -j N against -j 1 (each
  node one exclusive allocation either way);
- the pairs phase (`--pairs`, nccl.pairs): its wall time, and the sweep's own part of it (the
  phase minus, per round of pairs that share no node, the longest srun of the round), with a
  stand-in all_reduce_perf on PATH that prints a real recorded two-node run at once (the
  corpus's EFA GPUDirect RDMA run), so what is measured is srun -N2, the Prolog and the judge.

Targets (this machine's loopback Slurm, 2 shared CPUs): the sweep's own part (outside srun) at
most 1 s per node, and the fan-out at -j N at least 2x faster than -j 1, or else as fast as this
machine's CPUs allow: every node's turn (srun, the Prolog, an interpreter) runs on the same few
CPUs here, not on a node of its own, so -j N cannot beat the CPU time all the turns take over the
CPUs. The CPU time is read from /proc/stat around each sweep (busy: all but idle and I/O wait;
steal counts as busy, time the hypervisor gave to others); the fan-out is held to that ceiling
where it is below 2x: within 10% of it. /proc/stat counts every process of the machine, so the
ceiling is judged only where the -j 1 sweep, which runs one turn at a time, kept the CPUs no busier
than one turn can (SERIAL_BUSY_MAX): else other work was running, and only 2x counts. Writes its
section into --markdown FILE between <!-- bench_sweep --> markers (bench/summary.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.slurm_cluster import CLUSTERCHECK, SlurmCluster, missing_binaries, short_tmpdir  # noqa: E402

NOOP = '''from clustercheck import Host, Result, check, ok


@check(action="INVESTIGATE")
def noop(host: Host) -> Result:
    """Does nothing: what a sweep costs beyond its checks."""
    return ok("nothing checked")
'''
OVERHEAD_TARGET_S = 1.0  # the sweep's own part per node (outside srun)
FANOUT_TARGET = 2.0  # -j N at least this much faster than -j 1 ...
CEILING_SHARE = 0.9  # ... or at least this share of the ceiling this machine's CPUs set
SERIAL_BUSY_MAX = 1.25  # CPUs the -j 1 sweep may keep busy on average for the ceiling to be judged


PAIRS_RUN = REPO / "tests" / "corpus" / "nccl_logs" / "aws-efa-eks-p4d-2node-nccl2.9.9-efa-gdrdma-allreduce.txt"


def cpu_busy_s() -> float:
    """CPU seconds this machine's CPUs spent on anything but idle and I/O wait since boot (all CPUs)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already counted in user and nice
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


def sweep(
    cluster: SlurmCluster, work: Path, nodes: list[str], jobs: int, tag: str, *extra: str
) -> tuple[float, float, dict]:  # type: ignore[type-arg]
    """(wall s, CPU s the machine was busy meanwhile (cpu_busy_s), --out-json) of one sweep."""
    out = work / f"{tag}.json"
    argv = [
        *CLUSTERCHECK,
        "sweep",
        ",".join(nodes),
        "-p",
        str(work / "bench.yaml"),
        "--checks",
        str(work / "checks"),
        "--record-file",
        f"{work}/records/{{node}}.json",
        "-j",
        str(jobs),
        "--run-timeout",
        "60",
        "--out-json",
        str(out),
        *extra,
    ]
    env = {**cluster.env, "PATH": f"{work / 'bin'}:{cluster.env['PATH']}"}  # the stand-in all_reduce_perf
    busy = cpu_busy_s()
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall = time.monotonic() - start
    busy = cpu_busy_s() - busy
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"bench_sweep: the sweep failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    doc = json.loads(out.read_text())
    bad = {n: o["done"] for n, o in doc["sweep"].items() if o["done"] != "passed"}
    if bad:
        raise SystemExit(f"bench_sweep: nodes not passed: {bad}")
    return wall, busy, doc


def per_node(doc: dict) -> list[tuple[float, float, float]]:  # type: ignore[type-arg]
    """(whole turn, inside srun, checks) seconds of each node."""
    rows = []
    for node, o in doc["sweep"].items():
        checks = sum(c["duration_s"] for c in doc["hosts"][node]["checks"])
        rows.append((o["seconds"], o["srun_s"], checks))
    return rows


def pairs_phase(doc: dict) -> tuple[float, float, int, int]:  # type: ignore[type-arg]
    """(phase wall s, the sweep's own part s, pairs, rounds) of a sweep --pairs."""
    pairs = doc["pairs"]["pairs"]
    bad = [p for p in pairs if p["status"] != "ok"]
    if bad:
        raise SystemExit(f"bench_sweep: pairs not ok: {bad}")
    longest: dict[int, float] = {}
    for p in pairs:
        longest[p["round"]] = max(longest.get(p["round"], 0.0), p["srun_s"])
    return doc["pairs"]["seconds"], doc["pairs"]["seconds"] - sum(longest.values()), len(pairs), len(longest)


def main() -> int:
    # The children write bytecode as an installed package has it (pip compiles at install time): a
    # sandbox's PYTHONDONTWRITEBYTECODE=1 made every timed run compile clustercheck's modules anew
    # (~50 ms of the nccl-log package, counted against grep).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8, help="loopback slurmd daemons (default 8)")
    ap.add_argument("--rounds", "-n", type=int, default=3, help="measured rounds (default 3)")
    ap.add_argument("--markdown", metavar="FILE", help="write the section into FILE (default: stdout only)")
    args = ap.parse_args()
    missing = missing_binaries()
    if missing or os.geteuid() != 0:
        why = f"missing {', '.join(missing)}" if missing else "not root (slurmd must start jobs)"
        print(f"bench_sweep: skipped: {why}", file=sys.stderr)
        return 0
    root = short_tmpdir("cc-bsweep-")
    work = root / "work"
    (work / "checks").mkdir(parents=True)
    (work / "checks" / "bench.py").write_text(NOOP)
    (work / "bench.yaml").write_text("checks:\n  bench.noop:\n")
    (work / "bin").mkdir()
    standin = work / "bin" / "all_reduce_perf"
    standin.write_text(f"#!/bin/sh\n[ \"${{SLURM_PROCID:-0}}\" = 0 ] || exit 0\nexec cat '{PAIRS_RUN}'\n")
    standin.chmod(0o755)
    work.chmod(0o755)
    nodes = [f"b{i:02d}" for i in range(1, args.nodes + 1)]
    cluster = SlurmCluster(root, nodes, health_interval=0)
    try:
        cluster.start(REPO / "fixtures" / "prolog-cluster" / "healthy")
        sweep(cluster, work, nodes[:1], 1, "warmup")
        one, fan1, fann, busy_1, busy_n = [], [], [], [], []
        phases: list[tuple[float, float, int, int]] = []
        turns: list[tuple[float, float, float]] = []
        for r in range(args.rounds):
            wall, _, doc = sweep(cluster, work, nodes[:1], 1, f"one-{r}")
            one.append(wall)
            turns += per_node(doc)
            wall, busy, doc = sweep(cluster, work, nodes, 1, f"serial-{r}")
            fan1.append(wall)
            busy_1.append(busy / wall)
            turns += per_node(doc)
            wall, busy, doc = sweep(cluster, work, nodes, len(nodes), f"fanout-{r}")
            fann.append(wall)
            busy_n.append(busy)
            _, _, doc = sweep(cluster, work, nodes, len(nodes), f"pairs-{r}", "--pairs")
            phases.append(pairs_phase(doc))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    whole = med(t for t, _, _ in turns)
    in_srun = med(s - c for _, s, c in turns)
    own = med(t - s for t, s, _ in turns)
    overhead = med(t - c for t, _, c in turns)
    speedup = med(fan1) / med(fann)
    fixed = med(one) - whole  # interpreter and CLI start, profile load, report, cleanup
    phase, phase_own = med(p[0] for p in phases), med(p[1] for p in phases)
    n_pairs, n_rounds = phases[0][2], phases[0][3]
    cpus = os.cpu_count() or 1
    floor = med(busy_n) / cpus  # the -j N sweep cannot take less wall time on these CPUs
    ceiling = med(fan1) / floor if floor > 0 else float("inf")
    used = med(b / (cpus * w) for b, w in zip(busy_n, fann, strict=True))
    serial_busy = med(busy_1)  # CPUs busy on average during the -j 1 sweep
    quiet = serial_busy <= SERIAL_BUSY_MAX
    own_ok = own <= OVERHEAD_TARGET_S
    fan_ok = speedup >= FANOUT_TARGET or (quiet and speedup >= CEILING_SHARE * ceiling)
    fan_target = (
        f"(at least {FANOUT_TARGET:g}x, or {CEILING_SHARE:.0%} of this machine's ceiling {ceiling:.2f}x)"
        if quiet
        else f"(at least {FANOUT_TARGET:g}x; the ceiling not judged: other work kept the CPUs busy)"
    )
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = f"python bench/bench_sweep.py --nodes {args.nodes} --rounds {args.rounds}"
    text = f"""## Sweep over the loopback Slurm (bench/bench_sweep.py)

Date: {date}
Command: `{command}`

{args.nodes} slurmd on 127.0.0.1, each job with the cluster's Prolog (a `clustercheck prolog` replay); the
profile is one site check that does nothing, so every second below is the sweep's. Medians of
{args.rounds} rounds; {len(turns)} node turns.

| per node | seconds |
| --- | ---: |
| whole turn (state reads, srun, run --local, decision) | {whole:.2f} |
| overhead: whole turn minus the checks' run time | {overhead:.2f} |
| of which inside srun (allocation, Prolog, interpreter start, report) | {in_srun:.2f} |
| of which the sweep's own (scontrol before and after, decision, report) | {own:.2f} |

| sweep of | -j | wall s |
| --- | ---: | ---: |
| 1 node | 1 | {med(one):.2f} |
| {args.nodes} nodes | 1 | {med(fan1):.2f} |
| {args.nodes} nodes | {args.nodes} | {med(fann):.2f} |

Fixed cost of one sweep (a 1-node sweep's wall time minus a node's median turn: interpreter and
CLI start, profile load, node list, the table and JSON report, cleanup; on a shared machine
mostly the load of the moment, as is the srun part): {fixed:.2f} s.

Fan-out: -j {args.nodes} is {speedup:.2f}x faster than -j 1 over {args.nodes} nodes. This machine's ceiling for it:
{ceiling:.2f}x (the -j 1 sweep's wall time over the -j {args.nodes} sweep's CPU time on {cpus} CPUs,
{med(busy_n):.2f} CPU s: every node's turn runs on these CPUs); the -j {args.nodes} sweep kept them busy
{used:.0%} of its wall time, so {speedup / ceiling:.0%} of the ceiling was reached. During the -j 1 sweep
{serial_busy:.2f} CPUs were busy on average (one turn at a time keeps at most about one busy; above
{SERIAL_BUSY_MAX:g} other work was running, and the ceiling is not judged).

Pairs phase (`--pairs`, no topology: the {args.nodes} nodes as one ring, {n_pairs} pairs in {n_rounds} rounds of
pairs that share no node; the stand-in all_reduce_perf prints a recorded run at once): {phase:.2f} s, of
which the sweep's own part (the phase minus each round's longest srun -N2: scheduling, judging
NCCL's log and table, the report) {phase_own:.2f} s, {phase_own / max(1, n_pairs):.3f} s per pair.

TARGET {"HELD" if own_ok else "MISSED"}: sweep own part per node {own:.2f} s (at most {OVERHEAD_TARGET_S:g} s)
TARGET {"HELD" if fan_ok else "MISSED"}: sweep fan-out {speedup:.2f}x over -j 1 {fan_target}
"""
    print(text)
    if args.markdown:
        write_markdown(Path(args.markdown), text)
    return 0


def write_markdown(path: Path, text: str) -> None:
    """Replace this benchmark's section in FILE (other benchmarks share it), or append it."""
    start, end = "<!-- bench_sweep -->", "<!-- /bench_sweep -->"
    block = f"{start}\n{text}{end}\n"
    old = path.read_text() if path.exists() else ""
    if start in old and end in old:
        before, rest = old.split(start, 1)
        new = before + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + block
    path.write_text(new)


if __name__ == "__main__":
    sys.exit(main())
