#!/usr/bin/env python3
"""Speed and memory of `clustercheck nccl-log` on a large multi-rank log, beside `grep -c NCCL`.

Generates, in a temporary folder, the output of a 1,024-rank job (128 hosts x 8 GPUs) from
real corpus lines: the node log of a 2-node RoCE job (tests/corpus/nccl_logs/
slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt, NCCL 2.27.5) is split into its
per-process part (printed once per rank) and its per-communicator part (printed again for
every communicator the job creates); every host gets its own copy with its name, the hosts'
lines are interleaved 16 at a time as srun merges them, and the job's training output (the
non-NCCL lines of the SGLang log beside it) is sprinkled in. Communicators are added until
the file reaches --size MiB. One host (gpu0077) lost GPUDirect RDMA, so the fast path has
real anomalies to attribute.

Then, in rotating order for --rounds rounds, it times (wall clock):

  grep         `grep -c NCCL FILE`
  nccl-log     `clustercheck nccl-log --format json FILE` with --jobs 1 (one process)
  nccl-log -j  the same with the default --jobs (processes for large files, up to 4)

and, in separate untimed runs, the peak memory of the analyzer: the largest resident set of
any one of its processes (`ru_maxrss`) and the peak of the summed proportional set size
(PSS, shared pages counted once) of its whole process tree, sampled every 20 ms.

Writes the figures as Markdown to --markdown FILE (and prints them). Exits 0 once it has
measured (it says whether the targets held: analyzer wall time at most 3x grep's, peak
memory under 100 MB), 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = REPO / "tests" / "corpus" / "nccl_logs"
TEMPLATE = CORPUS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt"
TRAINING = CORPUS / "slurmv4-roce-9hca-nccl2.29.3-sglang-node.txt"
TEMPLATE_HOST = b"tpgds-aihub0008"
HOSTS = 128
NO_GDR_HOST = 77
MIB = 1 << 20


def generate(path: Path, size_mib: int) -> dict[str, int]:
    """Write the job log; returns what it holds."""
    lines = TEMPLATE.read_bytes().splitlines(keepends=True)[1:]  # line 1 is a truncated Gloo message
    start = next(i for i, line in enumerate(lines) if b"Init START" in line)
    end = max(i for i, line in enumerate(lines) if b"Init COMPLETE" in line) + 1
    per_process, per_comm = lines[:start], lines[start:end]
    training = [
        line for line in TRAINING.read_bytes().splitlines(keepends=True) if b"NCCL" not in line and line.strip()
    ]
    hosts = [b"gpu%04d" % i for i in range(HOSTS)]
    target = size_mib * MIB
    written = comms = 0
    sprinkle = 0
    with path.open("wb") as out:

        def emit(block: list[bytes]) -> None:
            nonlocal written, sprinkle
            copies = []
            for i, host in enumerate(hosts):
                copy = [line.replace(TEMPLATE_HOST, host) for line in block]
                if i == NO_GDR_HOST:
                    copy = [line.replace(b"/GDRDMA", b"") for line in copy]
                copies.append(copy)
            for at in range(0, len(block), 16):
                chunk = b"".join(b"".join(copy[at : at + 16]) for copy in copies)
                chunk += training[sprinkle % len(training)]
                sprinkle += 1
                out.write(chunk)
                written += len(chunk)

        emit(per_process)
        while written < target:
            emit(per_comm)
            comms += 1
    return {"bytes": written, "communicators": comms, "hosts": HOSTS, "ranks": HOSTS * 8}


def count_lines(path: Path) -> int:
    n = 0
    with path.open("rb") as f:
        while chunk := f.read(MIB):
            n += chunk.count(b"\n")
    return n


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, check=False)
    return time.perf_counter() - start, proc


def peak_memory(argv: list[str]) -> tuple[float, float]:
    """(largest RSS of one process, peak summed PSS of the tree), in MiB."""
    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak_pss = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_pss
        root = psutil.Process(proc.pid)
        while not done.is_set():
            total = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                        total += p.memory_full_info().pss
            except psutil.NoSuchProcess:
                break
            peak_pss = max(peak_pss, total / MIB)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.wait()
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(after, before) / 1024, peak_pss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024, help="size of the generated log in MiB (default 1024)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--markdown", type=Path, help="write the figures as Markdown to this file")
    parser.add_argument("--keep", type=Path, help="generate the log here and keep it (default: a temporary folder)")
    args = parser.parse_args()
    if not TEMPLATE.is_file() or shutil.which("grep") is None:
        print(f"bench_nccl: needs {TEMPLATE} and grep", file=sys.stderr)
        return 2
    python = sys.executable
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-nccl-"))
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "job-1024-ranks.log"
    try:
        t0 = time.perf_counter()
        made = generate(log, args.size)
        gen_s = time.perf_counter() - t0
        lines = count_lines(log)
        size_mb = made["bytes"] / 1e6
        cc = [python, "-m", "clustercheck", "nccl-log", "--format", "json", str(log)]
        subjects = {
            "grep": ["grep", "-c", "NCCL", str(log)],
            "nccl-log -j 1": [*cc, "--jobs", "1"],
            "nccl-log": cc,
        }
        # Warm the page cache and check the analysis is right before timing it.
        timed(subjects["grep"])
        _, first = timed(subjects["nccl-log"])
        verdict = json.loads(first.stdout)
        expected = {"network": "ib", "link_layer": "roce", "gpudirect_rdma": False, "status": "warn"}
        right = all(verdict.get(k) == v for k, v in expected.items()) and len(verdict["hosts"]) == HOSTS
        no_gdr = sorted(h for h, v in verdict["hosts"].items() if v["gpudirect_rdma"] is False)
        walls: dict[str, list[float]] = {k: [] for k in subjects}
        codes: dict[str, set[int]] = {k: set() for k in subjects}
        order = list(subjects)
        for r in range(args.rounds):
            for key in order[r % len(order) :] + order[: r % len(order)]:
                wall, proc = timed(subjects[key])
                walls[key].append(wall)
                codes[key].add(proc.returncode)
        memory = {k: peak_memory(v) for k, v in subjects.items() if k != "grep"}
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    grep_wall = statistics.median(walls["grep"])
    rows = []
    for key, values in walls.items():
        med = statistics.median(values)
        rss, pss = memory.get(key, (None, None))
        rows.append(
            f"| {key} | {med:.2f} | {min(values):.2f} | {size_mb / med:,.0f} | {med / grep_wall:.2f}x | "
            + (f"{rss:.1f} | {pss:.1f}" if rss is not None else "- | -")
            + f" | {', '.join(map(str, sorted(codes[key])))} |"
        )
    ratio_serial = statistics.median(walls["nccl-log -j 1"]) / grep_wall
    ratio = statistics.median(walls["nccl-log"]) / grep_wall
    worst_memory = max(pss for _, pss in memory.values())
    worst_rss = max(rss for rss, _ in memory.values())
    load = os.getloadavg()
    jobs = _default_jobs()
    when = dt.datetime.now(dt.timezone.utc)
    machine = (
        f"{platform.node()}, {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"(1/5/15 min), Python {platform.python_version()}"
    )
    made_text = (
        f"{size_mb:,.0f} MB, {lines:,} lines, {made['ranks']} ranks on {made['hosts']} hosts, "
        f"{made['communicators']} communicators, generated in {gen_s:.1f} s from real corpus lines"
    )
    analysis = (
        f"network {verdict.get('network')} ({verdict.get('link_layer')}), GPUDirect RDMA "
        f"{verdict.get('gpudirect_rdma')} ({verdict.get('net_channels'):,} network channels), "
        f"{len(verdict.get('hosts', {}))} hosts, hosts without GDR: {', '.join(no_gdr) or 'none'}, "
        f"status {verdict.get('status')}: {'as generated' if right else 'NOT as generated'}"
    )
    header = (
        "| what | median s | min s | MB/s | / grep | peak RSS MiB (largest process) "
        "| peak PSS MiB (all processes) | exit codes |"
    )
    held_speed = "TARGET HELD" if ratio <= 3 else "TARGET MISSED"
    held_memory = "TARGET HELD" if worst_memory < 100 and worst_rss < 100 else "TARGET MISSED"
    text = f"""# NCCL log analysis: `clustercheck nccl-log` vs `grep -c NCCL`

Target (issue #5): on a large multi-rank log, at most 3x the wall time of `grep -c NCCL` on the
same file in the same run, and peak memory under 100 MB whatever the file size. Written by
`bench/bench_nccl.py`; only figures from one run compare (these machines are shared and noisy).

## Figures

Date: {when:%Y-%m-%d %H:%M} UTC
Machine: {machine}
Command: `{Path(python).name} bench/bench_nccl.py --size {args.size} --rounds {args.rounds}`
Log: {made_text}
Analysis: {analysis}
Default --jobs here: {jobs}

{header}
| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |
{chr(10).join(rows)}

{held_speed}: nccl-log {ratio:.2f}x grep's wall time (one process: {ratio_serial:.2f}x), medians
{held_memory}: peak memory {worst_memory:.1f} MiB PSS in all, {worst_rss:.1f} MiB RSS at most in one process
"""
    print(text)
    if args.markdown:
        _write_markdown(args.markdown, text)
    return 0


def _default_jobs() -> int:
    sys.path.insert(0, str(REPO / "src"))
    from clustercheck.analyzers.nccl_log import default_jobs

    return default_jobs()


def _write_markdown(path: Path, text: str) -> None:
    """Replace this benchmark's section in FILE (other benchmarks may share it), or write it."""
    marker_start, marker_end = "<!-- bench_nccl -->", "<!-- /bench_nccl -->"
    block = f"{marker_start}\n{text}{marker_end}\n"
    old = path.read_text() if path.exists() else ""
    if marker_start in old and marker_end in old:
        before, rest = old.split(marker_start, 1)
        after = rest.split(marker_end, 1)[1].lstrip("\n")
        new = before + block + after
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + block
    path.write_text(new)


if __name__ == "__main__":
    sys.exit(main())
