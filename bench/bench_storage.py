#!/usr/bin/env python3
"""clustercheck's storage figures beside fio's, on the same folder, file sizes and reader count.

For --rounds rounds, in the same run, on each filesystem folder (--dir, repeatable; default
/var/tmp, a disk, and /dev/shm, memory: the stand-in here for a drive faster than one Python
process can drive):

  clustercheck  the measuring script of `storage.read_pattern`, run exactly as the check runs
                it (`python3 -c SCRIPT ARGS`): sequential 1 MiB reads, random 4 KiB and
                128 KiB reads, small files; O_DIRECT where the filesystem allows it; the random
                reads in --workers processes (default 0, the check's: one per reader)
  one process   the same script with workers=1 (every reader a thread of one process, as before
                issue 16), for the random-read rows only
  per reader    the same script with workers=readers (one process per reader, as many processes
                as fio's jobs, however many CPUs there are), for the random-read rows only, where
                --workers gave fewer; with the default (one per reader already), on a machine
                with fewer CPUs than readers: a process per CPU instead (the default before),
                readers sharing a process and its interpreter lock
  fio           `fio --ioengine=psync --direct=1` (pread, as the script) with --numjobs equal to
                the readers (fio's jobs are processes) and one file of --size / --readers per job:
                rw=read bs=1M; rw=randread bs=4k; rw=randread bs=128k (time-based, --fio-runtime s),
                its jobs as threads (--thread: see fio() for why);
                all jobs' bytes and I/Os over the longest job's runtime (see fio() for why not
                --group_reporting's figure)

and reports clustercheck's figure / fio's figure per pattern (medians over rounds), fio's CPU time
per random read (its usr_cpu + sys_cpu over its I/Os) and the load average (1/5/15 min, as
`uptime` shows it) before and after each folder: these CPUs may be shared. The targets
(issues 7 and 16) are within +-15% of fio for sequential and random reads, with the same number
of jobs. Small files have no fio twin that does the same open+fstat+read+close, so only
clustercheck's figure is shown. Each section ends with machine-readable `TARGET HELD:` /
`TARGET MISSED:` lines (bench/summary.py reads them) and the exact commands.

Writes Markdown to --markdown FILE (in a `<!-- bench_storage -->` section) and prints it.
Exits 0 once it has measured, 2 when it cannot run (no fio, no python3).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MIB = 1 << 20


def clustercheck_round(folder: Path, size: int, readers: int, budget: float, workers: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(REPO))
    from clustercheck.checks.storage import SCRIPT

    args = {
        "mode": "read",
        "path": str(folder),
        "size": size,
        "readers": readers,
        "seq_block": MIB,
        "budget_s": budget,
        "margin": 0.05,
        "meta_files": 2000,
        "meta_size": 16 << 10,
        "max_ops": 20000,
        "o_direct": True,
        "dataset": False,
        "workers": workers,
    }
    proc = subprocess.run(["python3", "-c", SCRIPT, json.dumps(args)], capture_output=True, text=True, check=False)
    record: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if record.get("error") or record.get("refused"):
        raise SystemExit(f"clustercheck's script: {record.get('error') or record.get('refused')}")
    return record


FIO_COMMANDS: list[str] = []  # one of each, for the section's "exact commands"


def fio(folder: Path, name: str, rw: str, bs: str, per_job: int, readers: int, runtime: float) -> dict[str, Any]:
    """fio's figures for all its jobs together: every job's bytes and I/Os over the longest job's runtime.

    Not fio's --group_reporting figure: that divides by a group runtime shorter than its longest
    job (seen on tmpfs: 4 sequential jobs of 109-155 ms each, reported as one of 114 ms), so short
    runs read faster than the jobs were; clustercheck's own figure is over the wall span of all its
    readers. Latencies: the median of the jobs' p50s and the mean of their p99s.
    """
    argv = [
        "fio",
        f"--name={name}",
        f"--directory={folder}",
        f"--rw={rw}",
        f"--bs={bs}",
        f"--size={per_job}",
        f"--numjobs={readers}",
        "--ioengine=psync",
        "--direct=1",
        # fio forks each job into a session of its own (setsid): where the kernel groups CPU time
        # by session (autogroup, kernel.sched_autogroup_enabled=1, as on this VM), every job would
        # get a session's share of a busy machine's CPUs while the script and its workers share
        # one. As threads, fio's jobs stay in fio's session, beside the script's in theirs.
        "--thread",
        "--output-format=json",
    ]
    if rw == "randread":
        argv += [f"--runtime={runtime:g}", "--time_based"]
    shown = " ".join(a.replace(str(folder), "TMP") for a in argv)
    if shown not in FIO_COMMANDS:
        FIO_COMMANDS.append(shown)
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    jobs = json.loads(proc.stdout[proc.stdout.index("{") :])["jobs"]
    reads = [j["read"] for j in jobs]
    longest = max(r["runtime"] for r in reads) / 1000  # seconds
    ios = sum(r["total_ios"] for r in reads)
    cpu_s = sum((j.get("usr_cpu", 0) + j.get("sys_cpu", 0)) / 100 * j["read"]["runtime"] / 1000 for j in jobs)
    pcts = [r["clat_ns"].get("percentile", {}) for r in reads]
    return {
        "cpu_us_op": cpu_s / ios * 1e6 if ios else float("nan"),
        "mb_s": sum(r["io_bytes"] for r in reads) / longest / 1e6 if longest else float("nan"),
        "iops": ios / longest if longest else float("nan"),
        "p50_ms": statistics.median(p.get("50.000000", 0) for p in pcts) / 1e6,
        "p99_ms": statistics.mean(p.get("99.000000", 0) for p in pcts) / 1e6,
    }


def header(third: str) -> str:
    return " | ".join(
        (
            "| pattern",
            "clustercheck",
            "clustercheck, 1 process",
            f"clustercheck, {third}",
            "fio",
            "clustercheck / fio",
            "1 process / fio",
            f"{third} / fio |",
        )
    )


def load_text() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


RATIO_KEYS = ("seq MB/s", "rand 4 KiB IOPS", "rand 128 KiB IOPS")


def cpu_us(record: dict[str, Any]) -> float | None:
    """The script's CPU time per 4 KiB read: its random readers' thread CPU time (user + system)
    over their reading (`cpu_s`, Python 3.7+), over the reads; fio's twin is its usr + sys per I/O."""
    r = record["rand_4k"]
    return r["cpu_s"] / r["ops"] * 1e6 if r.get("cpu_s") is not None and r["ops"] else None


def other_split(readers: int, workers: int) -> tuple[int, str]:
    """The third clustercheck column: (workers, its name), or (0, name) where there is none. A
    process per reader where the script ran fewer; where it ran one per reader (workers=0 since
    the tmpfs item of issue 16) and this machine has fewer CPUs than readers, a process per CPU
    (the default before: readers sharing a process, and its interpreter lock, two by two here)."""
    if readers > workers:
        return readers, "a process per reader"
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if 1 < cpus < workers:
        return cpus, "a process per CPU"
    return 0, "a process per reader"


def measure_folder(folder: Path, args: argparse.Namespace) -> tuple[str, list[str]]:
    """One folder's section text and its TARGET lines."""
    size, per_job = args.size * MIB, args.size * MIB // args.readers
    cc: dict[str, list[float]] = {}
    one: dict[str, list[float]] = {}
    each: dict[str, list[float]] = {}
    fi: dict[str, list[float]] = {}
    fio_cpu: list[float] = []
    window: list[tuple[float, int]] = []  # clustercheck's 4 KiB phase: seconds of reading, reads
    cache, workers, third = "?", 1, "a process per reader"
    load_before = load_text()
    for _ in range(args.rounds):
        r = clustercheck_round(folder, size, args.readers, args.budget, args.workers)
        cache, workers = r["cache"], int(r.get("workers", 1))
        window.append((r["rand_4k"]["seconds"], r["rand_4k"]["ops"]))
        for key, value in (
            ("seq MB/s", r["seq"]["mb_s"]),
            ("rand 4 KiB IOPS", r["rand_4k"]["iops"]),
            ("rand 4 KiB p50 ms", r["rand_4k"]["p50_ms"]),
            ("rand 4 KiB p99 ms", r["rand_4k"]["p99_ms"]),
            ("rand 4 KiB CPU us/read", cpu_us(r)),
            ("rand 128 KiB IOPS", r["rand_128k"]["iops"]),
            ("rand 128 KiB p99 ms", r["rand_128k"]["p99_ms"]),
            ("small files/s", r["meta"]["files_s"]),
        ):
            if value is not None:
                cc.setdefault(key, []).append(value)
        if workers > 1:  # the same script, every reader a thread of one process
            r1 = clustercheck_round(folder, size, args.readers, args.budget, 1)
            one.setdefault("rand 4 KiB IOPS", []).append(r1["rand_4k"]["iops"])
            one.setdefault("rand 128 KiB IOPS", []).append(r1["rand_128k"]["iops"])
            if (cpu := cpu_us(r1)) is not None:
                one.setdefault("rand 4 KiB CPU us/read", []).append(cpu)
        other, third = other_split(args.readers, workers)
        if other:
            rn = clustercheck_round(folder, size, args.readers, args.budget, other)
            each.setdefault("rand 4 KiB IOPS", []).append(rn["rand_4k"]["iops"])
            each.setdefault("rand 128 KiB IOPS", []).append(rn["rand_128k"]["iops"])
            if (cpu := cpu_us(rn)) is not None:
                each.setdefault("rand 4 KiB CPU us/read", []).append(cpu)
        with tempfile.TemporaryDirectory(prefix=".bench-storage-fio-", dir=folder) as tmp:
            where = Path(tmp)
            seq = fio(where, "seq", "read", "1M", per_job, args.readers, args.fio_runtime)
            r4 = fio(where, "seq", "randread", "4k", per_job, args.readers, args.fio_runtime)  # same files
            r128 = fio(where, "seq", "randread", "128k", per_job, args.readers, args.fio_runtime)
        fio_cpu.append(r4["cpu_us_op"])
        for key, value in (
            ("seq MB/s", seq["mb_s"]),
            ("rand 4 KiB IOPS", r4["iops"]),
            ("rand 4 KiB p50 ms", r4["p50_ms"]),
            ("rand 4 KiB p99 ms", r4["p99_ms"]),
            ("rand 4 KiB CPU us/read", r4["cpu_us_op"]),
            ("rand 128 KiB IOPS", r128["iops"]),
            ("rand 128 KiB p99 ms", r128["p99_ms"]),
        ):
            fi.setdefault(key, []).append(value)
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(folder)], capture_output=True, text=True).stdout.strip()
    procs = f"{args.readers} readers in {workers} processes" if workers > 1 else f"{args.readers} readers in 1 process"
    load_after = load_text()
    rows, targets = [], []
    for key, values in cc.items():
        mine = statistics.median(values)
        single = f"{_fmt(statistics.median(one[key]))}" if key in one else ""
        per = f"{_fmt(statistics.median(each[key]))}" if key in each else ""
        if key in fi:
            theirs = statistics.median(fi[key])
            ratio = mine / theirs if theirs else float("nan")
            ratio1 = f"{statistics.median(one[key]) / theirs:.2f}" if key in one and theirs else ""
            ratio_n = f"{statistics.median(each[key]) / theirs:.2f}" if key in each and theirs else ""
            rows.append(
                f"| {key} | {_fmt(mine)} | {single} | {per} | {_fmt(theirs)} | {ratio:.2f} | {ratio1} | {ratio_n} |"
            )
            if key in RATIO_KEYS:
                held = abs(round(ratio, 2) - 1) <= 0.15  # judged on the figure shown
                targets.append(
                    f"TARGET {'HELD' if held else 'MISSED'}: storage {folder} ({fstype}) {key}: clustercheck / fio "
                    f"{ratio:.2f} ({procs}; fio --numjobs={args.readers}), target within +-15%"
                )
        else:
            rows.append(f"| {key} | {_fmt(mine)} | {single} | {per} | (no fio twin) | | | |")
    win_s, win_n = statistics.median(w for w, _ in window), statistics.median(n for _, n in window)
    per_round = "; ".join(
        f"{key}: " + ", ".join(f"{m / t:.2f}" for m, t in zip(cc[key], fi[key], strict=True)) for key in RATIO_KEYS
    )
    text = f"""
### {folder} ({fstype})

{args.size} MiB file set, {args.readers} readers = fio jobs, clustercheck's random reads in {workers} processes
(workers={args.workers}: {"one per reader" if args.workers == 0 else "as given"}), page cache: {cache}
(fio: direct=1), medians of {args.rounds} rounds; load average (1/5/15 min) before {load_before},
after {load_after}; fio's CPU time per 4 KiB read (usr + sys over its I/Os, median):
{statistics.median(fio_cpu):.2f} us. clustercheck's 4 KiB phase (median): {win_s:.3g} s of reading, {win_n:,.0f} reads
(it ends when a reader has done 20000, or at its share of the budget); fio's: {args.fio_runtime:g} s.

{header(third)}
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Per round (clustercheck / fio, in run order; the spread is this folder's noise between runs):
{per_round}

{"".join(t + "  " + chr(10) for t in targets)}"""
    return text, targets


READING = """
Reading (the figures quoted are from runs and tests by hand on this VM on 2026-12-01, 20:29 to
22:10 UTC): on a disk (/var/tmp) the drive is the limit, and clustercheck's figures are fio's,
with the default worker processes, with one process and with a process per reader (the kept
target, issue 7). On memory (/dev/shm, tmpfs) nothing waits for a device: every read is a copy
made by a CPU, so the CPUs are the device, here 2 CPUs shared with other sessions (the load
lines). What separates the two tools there:
- Their share of those CPUs. This kernel divides CPU time between sessions first (autogroup,
  kernel.sched_autogroup_enabled=1), and fio forks each job into a session of its own (setsid):
  on a busy machine its 4 jobs got 4 sessions' share where the script and its workers share one
  (by hand: a copy of the script's loop in 4 processes got 0.75 CPU beside fio's 4 jobs' 1.1).
  That, not the storage, made /dev/shm miss before (0.26-0.65 of fio in the 17:30 and 20:17 UTC
  runs). fio runs its jobs as threads (--thread), in its one session.
- CPU time per 4 KiB read. fio spends about 1.6-2.2 us (the figure above, nearly all of it the
  kernel's). The script's random loop (rand_reads in storage_probe.py) reads most chunks of 64
  reads with one `map(os.pread, ...)` call (see below), at offsets drawn before
  the phase, and reads the clock once per chunk; p50/p99 come from whole chunks timed read by read
  (every chunk after one whose reads took 20 us or more on average, so a disk keeps every read;
  else 1 chunk in 8, each sample weighed by the reads it stands for). Timed side by side in one
  process (thread CPU time, 16 alternations of 20,000 reads on tmpfs, 2026-12-02 00:27 UTC), both
  with os.preadv: 1.93 us per read against 2.14 us for the loop before it (a clock reading and an append per
  read; 2.26 us and, before that, 2.79 us in the 2026-12-01 runs), with the same p50/p99
  (0.002/0.004 ms), and 1.8-1.9 us for os.preadv alone in a bare loop. The table's `CPU us/read`
  row is the script's random readers' own thread CPU time over their reads (`cpu_s`), beside
  fio's usr + sys per I/O: unlike IOPS it hardly moves with what else runs on these CPUs.
- Readers sharing a process. Where readers share a worker process they share its interpreter
  lock, and every read's release of it wakes the other reader: on these 2 CPUs 4 readers in 2
  processes (the default until 2026-12-02) took 2.24, 2.25, 2.14 and 1.57 us of CPU per 4 KiB
  read on tmpfs where 4 processes took 1.88, 2.10, 2.15 and 1.54 (four runs side by side,
  2026-12-02 00:38-01:06 UTC, load 2.5-25), and read at 0.80-0.91 of fio's IOPS against
  0.81-1.01: never worse, at times better. So `workers: 0` is now one process per reader, as
  fio's jobs, beyond the CPUs too (the kernel shares them out in time slices); the `a process
  per CPU` column is the old split.
- pread against preadv. fio's psync engine calls pread. By hand (one thread, 400,000 reads on
  tmpfs, getrusage): os.preadv 0.21 us user + 0.97 us system per read, os.pread 0.23 + 0.87;
  fio --ioengine=pvsync (preadv) spent about 0.2 us more system time per read than psync: the
  kernel's one-buffer path is the cheaper one. os.pread allocates a new buffer per read, of no
  particular alignment, which O_DIRECT on a disk refuses (and a filesystem that falls back to
  buffered reads for it would read the page cache), so the script's random readers call
  os.pread only where alignment does not matter (files in memory: tmpfs, ramfs; or read without
  O_DIRECT) and os.preadv into their page-aligned buffer elsewhere (`random_read` in its output).
  Side by side on tmpfs (6 rounds, 01:12 UTC): 1.77 us of CPU per 4 KiB read against 1.96 for
  the script before (its preadv loop in 2 processes), fio 1.79.
- The window. The 4 KiB phase ends when a reader has done 20000 reads (the others stop with it,
  as fio's jobs run for the same time), so on tmpfs it lasts 0.1-0.2 s (the `4 KiB phase` line)
  where fio runs for --fio-runtime. The readers open their files and draw their offsets before
  they start together, and the figure is over the span they read: neither that set-up, nor the
  fork of the worker processes, nor a lone last reader is in it (all three were, before). A
  window that short gets whatever share of the CPUs the other sessions leave in that fraction of
  a second: on this VM at load 4-5 the per-round ratios spread from 0.6 to 2. Only a quiet
  machine's figure is one to judge the 4 KiB tmpfs row by.
- Worker processes are what one process lacks: every read releases and retakes the process's one
  interpreter lock, so 4 readers as threads of one process reached 0.23 of fio at 4 KiB on tmpfs
  with the old loop, and worker processes 0.67 (the `1 process` column against the others).
- fio's own figure is every job's bytes and I/Os over the longest job's runtime: its
  --group_reporting figure (used before 20:17 UTC) divides by a shorter time (4 sequential jobs
  of 109-155 ms on tmpfs reported as one of 114 ms). clustercheck's is over the span from its
  first reader's start to its last one's end.
A fast NVMe drive (10-100 us per 4 KiB read) sits between the two cases: the script's quarter of a
microsecond per read over the call itself is well under 1% of it, and worker processes keep the
interpreter lock out of the way.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dir",
        type=Path,
        action="append",
        help="a filesystem folder to measure in (repeatable; default /var/tmp and /dev/shm)",
    )
    parser.add_argument("--size", type=int, default=512, help="MiB of data in the file set")
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--workers", type=int, default=0, help="processes for the random reads (0: the check's choice)")
    parser.add_argument("--budget", type=float, default=12.0, help="clustercheck's budget, seconds")
    parser.add_argument("--fio-runtime", type=float, default=3.0, help="seconds per fio random-read run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="write the figures as Markdown to this file")
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("bench_storage: fio is not installed (Debian package fio)", file=sys.stderr)
        return 2
    folders = args.dir or [Path(d) for d in ("/var/tmp", "/dev/shm") if Path(d).is_dir()]
    started = dt.datetime.now(dt.timezone.utc)
    sections, targets = [], []
    for folder in folders:
        text, held = measure_folder(folder, args)
        sections.append(text)
        targets += held
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    command = "python bench/bench_storage.py " + " ".join(a.replace(str(REPO) + "/", "") for a in sys.argv[1:])
    load = os.getloadavg()
    text = f"""
## Storage read pattern: clustercheck vs fio

{started:%Y-%m-%d %H:%M} UTC, {platform.node() and "this machine"}: {os.cpu_count()} CPUs, {fio_version},
Python {platform.python_version()} (the script runs under `python3`),
load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) at the end;
clustercheck and fio in the same run, interleaved per round.
Command: `{command}`

Exact commands: clustercheck: `python3 -c SCRIPT ARGS` (SCRIPT is checks/storage.py's, ARGS the
check's JSON with this run's path, size, readers, budget and workers); fio (TMP: a fresh
folder under the measured one, N the bytes per job):
{chr(10).join("- `" + c + "`" for c in FIO_COMMANDS[:3])}
{"".join(sections)}{READING}"""
    text = re.sub(r"--size=\d+", "--size=N", text)
    print(text)
    if args.markdown:
        marker_start, marker_end = "<!-- bench_storage -->", "<!-- /bench_storage -->"
        block = f"{marker_start}\n{text}{marker_end}\n"
        old = args.markdown.read_text() if args.markdown.exists() else ""
        if marker_start in old and marker_end in old:
            before, rest = old.split(marker_start, 1)
            new = before + block + rest.split(marker_end, 1)[1].lstrip("\n")
        else:
            new = (old.rstrip("\n") + "\n\n" if old else "") + block
        args.markdown.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
