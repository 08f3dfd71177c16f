#!/usr/bin/env python3
"""Speed and memory of `clustercheck nccl-log` on a large multi-rank log, beside `grep -c NCCL`.

Generates, in a temporary folder, the output of a 1,024-rank job (128 hosts x 8 GPUs) from
real corpus lines: the node log of a 2-node RoCE job (tests/corpus/nccl_logs/
slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt, NCCL 2.27.5) is split into its
per-process part (printed once per rank) and its per-communicator part (printed again for
every communicator the job creates); every host gets its own copy with its name, the hosts'
lines are interleaved 16 at a time as srun merges them, and the job's training output (the
non-NCCL lines of the SGLang log beside it) is sprinkled in. Communicators are added until
the file reaches the size asked. One host (gpu0077) lost GPUDirect RDMA, so the fast path has
real anomalies to attribute.

Then, in rotating order for --rounds rounds, it times (wall clock):

  grep             `grep -c NCCL FILE` (its output to a pipe)
  nccl-log -j 1    `clustercheck nccl-log --format json FILE --jobs 1` (one process)
  nccl-log -j 2    the same with --jobs 2 (two processes)
  python scan -j 1 the same as -j 1 with CLUSTERCHECK_NCCL_GREP=0: the pure-Python scan, no grep
                   beside it (shown in the notes; its report must be the same)
  the greps alone  the three greps of nccl-log's grep path over the whole file, in one shell
                   pipeline, no Python (shown in the notes: the design's floor on this machine)

once per size in --sizes (300, 1024 and 4096 MiB by default; each log is deleted after)
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
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = REPO / "tests" / "corpus" / "nccl_logs"
TEMPLATE = CORPUS / "slurmv4-roce-8hca-ofi-plugin-then-ib-nccl2.27.5-node2.txt"
TRAINING = CORPUS / "slurmv4-roce-9hca-nccl2.29.3-sglang-node.txt"
TEMPLATE_HOST = b"tpgds-aihub0008"
HOSTS = 128
NO_GDR_HOST = 77
MIB = 1 << 20


def generate(path: Path, size_mib: int, *, no_gdr: bool = False) -> dict[str, int]:
    """Write the job log; returns what it holds. `no_gdr`: no host has GPUDirect RDMA (the worst case
    of the grep pass: every network channel line is one Python reads)."""
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
                if i == NO_GDR_HOST or no_gdr:
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
    wall, _, proc = timed_cpu(argv)
    return wall, proc


def timed_cpu(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """(wall s, CPU s: user + system of the command and its children, the completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def peak_memory(argv: list[str]) -> tuple[float, float]:
    """(largest RSS of one process, peak summed PSS of the tree), in MiB."""
    import psutil

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
    # wait4: this command's own peak (it and its children), not the largest of every child so far
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    return usage.ru_maxrss / 1024, peak_pss


def measure(size_mib: int, rounds: int, keep: Path | None, worst: bool = False) -> dict[str, Any]:
    """Generate a log of `size_mib` MiB, time grep and nccl-log (-j 1, -j 2) on it; delete it after."""
    python = sys.executable
    folder = keep or Path(tempfile.mkdtemp(prefix="bench-nccl-"))
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"job-1024-ranks-{size_mib}M.log"
    try:
        t0 = time.perf_counter()
        made = generate(log, size_mib)
        gen_s = time.perf_counter() - t0
        lines = count_lines(log)
        cc = [python, "-m", "clustercheck", "nccl-log", "--format", "json", str(log)]
        subjects = {"grep": ["grep", "-c", "NCCL", str(log)]}
        for jobs in PROCESSES:
            subjects[f"nccl-log -j {jobs}"] = [*cc, "--jobs", str(jobs)]
        # the pure-Python scan beside it (no grep), for the notes: the same report, and its time
        subjects[PYTHON_SCAN] = ["env", "CLUSTERCHECK_NCCL_GREP=0", *cc, "--jobs", "1"]
        subjects[GREPS] = greps_alone(log)
        # Warm the page cache and check the analysis is right (and the same with every -j) before timing.
        timed(subjects["grep"])
        verdicts = {}
        for key in subjects:
            if key not in ("grep", GREPS):
                _, first = timed(subjects[key])
                verdicts[key] = first.stdout
        verdict = json.loads(next(iter(verdicts.values())))
        same = len(set(verdicts.values())) == 1
        expected = {"network": "ib", "link_layer": "roce", "gpudirect_rdma": False, "status": "warn"}
        right = all(verdict.get(k) == v for k, v in expected.items()) and len(verdict["hosts"]) == HOSTS
        no_gdr = sorted(h for h, v in verdict["hosts"].items() if v["gpudirect_rdma"] is False)
        walls: dict[str, list[float]] = {k: [] for k in subjects}
        cpus: dict[str, list[float]] = {k: [] for k in subjects}
        codes: dict[str, set[int]] = {k: set() for k in subjects}
        order = list(subjects)
        for r in range(rounds):
            for key in order[r % len(order) :] + order[: r % len(order)]:
                wall, cpu, proc = timed_cpu(subjects[key])
                walls[key].append(wall)
                cpus[key].append(cpu)
                codes[key].add(proc.returncode)
        memory = {k: peak_memory(v) for k, v in subjects.items() if k not in NOT_ANALYZER}
        # The fixed part of a run: the same command on the log's first FIXED_MIB MiB, which holds the
        # whole start of the job (every rank's init lines, the first communicators' channel lines).
        head = folder / f"head-{FIXED_MIB}M.log"
        with log.open("rb") as src, head.open("wb") as dst:
            dst.write(src.read(FIXED_MIB * MIB))
            dst.write(src.readline())
        head_cmd = [*cc[:-1], str(head), "--jobs", "1"]
        timed(head_cmd)
        fixed = sorted(timed_cpu(head_cmd)[:2] for _ in range(3))[1]  # the median round's (wall, CPU)
        head.unlink()
        worst_case = None
        if worst:  # the same job where no channel uses GPUDirect RDMA: Python reads every network channel line
            log.unlink()
            generate(log, size_mib, no_gdr=True)
            timed(subjects["grep"])
            timed(subjects["nccl-log -j 1"])
            grep_w = min(timed(subjects["grep"])[0] for _ in range(2))
            w, c, p = min((timed_cpu(subjects["nccl-log -j 1"]) for _ in range(2)), key=lambda t: t[0])
            got = json.loads(p.stdout)
            worst_case = (w, c, grep_w, got.get("gpudirect_rdma") is False and got.get("status") == "warn")
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            log.unlink(missing_ok=True)
    return {
        "size_mib": size_mib,
        "bytes": made["bytes"],
        "lines": lines,
        "made": made,
        "gen_s": gen_s,
        "subjects": subjects,
        "walls": walls,
        "cpus": cpus,
        "codes": codes,
        "memory": memory,
        "fixed": fixed,
        "worst": worst_case,
        "verdict": verdict,
        "right": right and same,
        "same": same,
        "no_gdr": no_gdr,
    }


#: Process counts measured beside grep: one process, and two (`--jobs 2`).
PROCESSES = (1, 2)
#: The pure-Python scan (CLUSTERCHECK_NCCL_GREP=0), timed beside them and shown in the notes only.
PYTHON_SCAN = "python scan -j 1"
#: grep.py's three greps alone, timed beside them and shown in the notes only (see greps_alone()).
GREPS = "the greps alone"
#: The subjects that are not an nccl-log run judged against the target.
NOT_ANALYZER = ("grep", PYTHON_SCAN, GREPS)


def greps_alone(log: Path) -> list[str]:
    """What nccl-log's grep path runs beside its Python process (analyzers/nccl_log/grep.py), as one
    shell pipeline over the whole file with no Python between the channel grep and its filter: the
    candidates of the rare kinds, and the channel lines with the common ones left out."""
    from clustercheck.analyzers.nccl_log.grep import RARE_STRINGS, VIA_STRINGS, filter_argv, grep_argv

    rare, via, common = (
        shlex.join(a) for a in (grep_argv("grep", RARE_STRINGS), grep_argv("grep", VIA_STRINGS), filter_argv("grep"))
    )
    script = f'export LC_ALL=C; {rare} "$0" | cat >/dev/null & {via} "$0" | {common} | cat >/dev/null; wait'
    return ["sh", "-c", script, str(log)]


#: The start of the log timed apart: the fixed part of every run (see measure()).
FIXED_MIB = 20
SPEED_TARGET = 3.0
MEMORY_TARGET_MB = 100.0


def main() -> int:
    # The children write bytecode as an installed package has it (pip compiles at install time): a
    # sandbox's PYTHONDONTWRITEBYTECODE=1 made every timed run compile clustercheck's modules anew
    # (~50 ms of the nccl-log package, counted against grep).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        default="300,1024,4096",
        help="sizes of the generated logs in MiB, comma-separated (default 300,1024,4096)",
    )
    parser.add_argument("--size", type=int, help="one size in MiB (instead of --sizes)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per size (default 3)")
    parser.add_argument("--markdown", type=Path, help="write the figures as Markdown to this file")
    parser.add_argument(
        "--keep", type=Path, help="generate the logs in this folder (default: a temporary one); each deleted after"
    )
    args = parser.parse_args()
    if not TEMPLATE.is_file() or shutil.which("grep") is None:
        print(f"bench_nccl: needs {TEMPLATE} and grep", file=sys.stderr)
        return 2
    try:
        sizes = [args.size] if args.size else [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        print(f"bench_nccl: --sizes takes MiB counts like 300,1024,4096, not {args.sizes!r}", file=sys.stderr)
        return 64
    load_before = os.getloadavg()
    runs = [measure(size, args.rounds, args.keep, worst=size == min(sizes)) for size in sizes]
    load = os.getloadavg()
    when = dt.datetime.now(dt.timezone.utc)
    python = Path(sys.executable).name
    size_arg = " ".join(sys.argv[1:])  # the exact command line, as given
    machine = (
        f"{platform.node()}, {os.cpu_count()} CPUs, load average (1 min) before / after {load_before[0]:.1f} / "
        f"{load[0]:.1f} (1/5/15 min at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; the CPUs are shared "
        f"with other work, so a load above {os.cpu_count()} slows every figure), Python {platform.python_version()}"
    )
    rows, notes, held_all_speed, held_all_memory = [], [], True, True
    for run in runs:
        mb = run["bytes"] / 1e6
        size = f"{mb:,.0f} MB"
        grep_wall = statistics.median(run["walls"]["grep"])
        grep_cpu = statistics.median(run["cpus"]["grep"])
        grep_cmd = "grep -c NCCL LOG"
        for key, values in run["walls"].items():
            if key in NOT_ANALYZER:
                continue
            med = statistics.median(values)
            cpu = statistics.median(run["cpus"][key])
            ratio = med / grep_wall
            rss, pss = run["memory"][key]
            # MiB as ru_maxrss and PSS give them, shown in MB (10^6 bytes) like the sizes
            rss_mb, pss_mb = rss * MIB / 1e6, pss * MIB / 1e6
            speed_ok = ratio <= SPEED_TARGET
            memory_ok = rss_mb < MEMORY_TARGET_MB and pss_mb < MEMORY_TARGET_MB
            held_all_speed &= speed_ok
            held_all_memory &= memory_ok
            jobs = key.rsplit(" ", 1)[-1]
            command = f"{python} -m clustercheck nccl-log --format json LOG --jobs {jobs}"
            rows.append(
                f"| {key} | {size} | {jobs} | {med:.2f} | {grep_wall:.2f} | {ratio:.2f}x "
                f"| {cpu:.2f} | {grep_cpu:.2f} | {cpu / max(grep_cpu, 1e-3):.2f}x | {rss_mb:.1f} | {pss_mb:.1f} "
                f"| {'yes' if speed_ok else 'no'} | {'yes' if memory_ok else 'no'} "
                f"| {', '.join(map(str, sorted(run['codes'][key])))} | `{command}` vs `{grep_cmd}` |"
            )
        v = run["verdict"]
        notes.append(
            f"- {size} ({run['size_mib']} MiB asked): {run['lines']:,} lines, {run['made']['ranks']} ranks on "
            f"{run['made']['hosts']} hosts, {run['made']['communicators']} communicators, generated in "
            f"{run['gen_s']:.1f} s; grep min {min(run['walls']['grep']):.2f} s, nccl-log min "
            + ", ".join(f"{k[9:]} {min(w):.2f} s" for k, w in run["walls"].items() if k not in NOT_ANALYZER)
            + f"; the pure-Python scan (`CLUSTERCHECK_NCCL_GREP=0`, -j 1): median "
            f"{statistics.median(run['walls'][PYTHON_SCAN]):.2f} s wall "
            f"({statistics.median(run['walls'][PYTHON_SCAN]) / statistics.median(run['walls']['grep']):.2f}x grep), "
            f"{statistics.median(run['cpus'][PYTHON_SCAN]):.2f} s CPU"
            + f"; {GREPS} (grep.py's three, on the whole file, in one shell pipeline; no Python): median "
            f"{statistics.median(run['walls'][GREPS]):.2f} s wall "
            f"({statistics.median(run['walls'][GREPS]) / statistics.median(run['walls']['grep']):.2f}x grep), "
            f"{statistics.median(run['cpus'][GREPS]):.2f} s CPU, the floor of this design here before any Python work"
            + f"; analysis: network {v.get('network')} ({v.get('link_layer')}), GPUDirect RDMA "
            f"{v.get('gpudirect_rdma')} ({v.get('net_channels'):,} network channels), {len(v.get('hosts', {}))} hosts, "
            f"without GDR: {', '.join(run['no_gdr']) or 'none'}, status {v.get('status')}, "
            + (
                "as generated, the same report with every --jobs and from the pure-Python scan"
                if run["right"]
                else "NOT as generated, or differs by --jobs or from the pure-Python scan"
            )
            + f"; the fixed part (nccl-log -j 1 on the first {FIXED_MIB} MiB: start-up, the exact start, every "
            f"rank's init lines): {run['fixed'][0]:.2f} s wall, {run['fixed'][1]:.2f} s CPU"
            + (
                f"; the worst case (the same job with no channel using GPUDirect RDMA, as an all-TCP log: every "
                f"network channel line read in Python): nccl-log -j 1 min {run['worst'][0]:.2f} s wall "
                f"({run['worst'][0] / run['worst'][2]:.2f}x grep's {run['worst'][2]:.2f} s), "
                f"{run['worst'][1]:.2f} s CPU, verdict {'as generated' if run['worst'][3] else 'NOT as generated'}"
                if run["worst"]
                else ""
            )
        )
    if len(runs) > 1:  # what one more GB costs: the slope between the smallest and the largest log
        small, big = min(runs, key=lambda r: r["bytes"]), max(runs, key=lambda r: r["bytes"])
        gb = (big["bytes"] - small["bytes"]) / 1e9
        slopes = {
            k: (statistics.median(big["walls"][k]) - statistics.median(small["walls"][k])) / gb for k in big["walls"]
        }
        grep_slope = slopes["grep"]
        notes.append(
            "- each further GB (the slope between the smallest and the largest log): "
            + ", ".join(
                f"{k} {v:.2f} s" + (f" ({v / grep_slope:.2f}x grep's)" if k != "grep" and grep_slope > 0 else "")
                for k, v in slopes.items()
            )
        )
    worst_ratio = max(
        statistics.median(w) / statistics.median(r["walls"]["grep"])
        for r in runs
        for k, w in r["walls"].items()
        if k not in NOT_ANALYZER
    )
    worst_rss = max(rss * MIB / 1e6 for r in runs for rss, _ in r["memory"].values())
    worst_pss = max(pss * MIB / 1e6 for r in runs for _, pss in r["memory"].values())
    speed_line = (
        f"{'TARGET HELD' if held_all_speed else 'TARGET MISSED'}: nccl-log at most 3x grep's wall time at every "
        f"size and process count (worst {worst_ratio:.2f}x)"
    )
    memory_line = (
        f"{'TARGET HELD' if held_all_memory else 'TARGET MISSED'}: peak memory under 100 MB at every size "
        f"({worst_rss:.1f} MB RSS at most in one process, {worst_pss:.1f} MB PSS at most in all)"
    )
    header = (
        "| what | size | processes | clustercheck s | grep -c s | / grep | clustercheck CPU s | grep -c CPU s "
        "| CPU / grep | peak RSS MB (largest process) "
        "| peak PSS MB (all processes) | speed target held | memory target held | exit codes | commands |"
    )
    from clustercheck.analyzers.nccl_log.knobs import EXACT_CHANNELS as EXACT

    text = f"""# NCCL log analysis: `clustercheck nccl-log` vs `grep -c NCCL`

Target (issue #16): on a large multi-rank log of 300 MB, 1 GB and 4 GB, at most 3x the wall
time of `grep -c NCCL` on the same file in the same run (grep's output to a pipe), with one
process and with two, and peak memory under 100 MB at every size. Written by
`bench/bench_nccl.py`; only figures from one run compare (these machines are shared and noisy).
Times are medians of the timed rounds (wall clock, the whole command: interpreter start-up,
imports, scan, judgement, JSON out); the target is judged on wall time (`/ grep`). CPU s is
user + system time of the command and its processes, shown beside it because it moves less
with the machine's load; LOG is the generated file.

## Figures

Date: {when:%Y-%m-%d %H:%M} UTC
Machine: {machine}
Command: `{python} bench/bench_nccl.py {size_arg}`

{header}
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |
{chr(10).join(rows)}

{chr(10).join(notes)}

{speed_line}
{memory_line}

## Reading

- A run is a fixed part plus a cost per GB (both in the notes above). The fixed part is the
  interpreter's start and the imports (nccl-log with plain arguments does not import Typer), the
  exact start of the log (its first {EXACT:,} channel lines attributed to their hosts, read in
  Python: where a block holds only plain channel lines, the regex engine finds and counts them and
  each distinct prefix and tail is looked at once; other blocks line by line) and parsing every
  rank's init lines once (a line that repeats one of the same host's, as every rank of a node
  prints them, is counted for the host, not parsed again): for this 1,024-rank job a few tenths of
  a second, which grep does not have; at 300 MB it is most of the run.
- Past the exact start three GNU greps read the file beside the Python process (analyzers/nccl_log/
  grep.py): `grep -a -n -b -F` for the candidates of the line kinds that decide the verdict, and
  `grep -a -n -b -F -e 'via NET/' -e 'via SHM'` for the channel lines, whose output goes straight
  (no Python between) to `grep -a -v -n -B 1 -E 'via NET/IB/[0-9]+/GDRDMA$'`; the channel grep
  reads one line of the scan's own after the file, and the filter's number for it says how many
  lines it read, the line before it, printed as context, which was the last. So Python reads only the
  channel lines that change the verdict (no GPUDirect RDMA, another network, a proxy, shared
  memory) and counts the rest, the IB channels with GPUDirect RDMA that are almost every line of a
  healthy job. The pure-Python scan applies the same rule to each line, so the report is the same
  (checked above on every log, and in tests/test_nccl_log.py on every corpus log). Fixed strings
  where they can be: every line of such a log holds `NCCL `, and grep's regex engine then costs
  twice its multi-string search. The greps start at the page boundary below the exact start's
  end and leave out what they print before it: from a file offset a few bytes short of a page's
  end, every read() of theirs cost several times as much system time.
- So -j 1 is one Python process with three greps beside it, and so is -j 2: on the grep path the
  greps are the parallel part, and the file is read as one stretch whatever --jobs says (more
  stretches would only cut the exact start short and cost CPU). What is left per GB is grep's two
  passes and the channel lines passed from one grep to the other (about 12% of this log's bytes:
  every network channel line).
- The worst case for the grep pass is a log where no channel uses GPUDirect RDMA (an all-TCP log,
  or every HCA without it): every network channel line is read in Python, its prefix and tail worked
  out once per distinct pair (the notes of the smallest size give its time).
- Where GNU grep is not on PATH (or `CLUSTERCHECK_NCCL_GREP=0`), or a line is longer than a block,
  the pure-Python scan reads the file (the notes give its time); a grep that fails is said on
  stderr and the file is read again in Python, never a partial result.
- On two CPUs the wall time is at least the CPU time of all the processes (the CPU s column)
  halved, plus the start-up that only one CPU can use: the greps alone (the notes: the same three
  over the whole file, no Python) cost about two and a half `grep -c` passes of CPU (two reads of
  the file, and the filter), and at 300 MB the Python process about two more (start-up and
  imports about 0.1 s, the exact start, its threads), so even with every CPU busy all the time a
  run there is not much under 2.5x grep's wall time.
- The machine's CPUs are shared with other work: with a load above their number every process
  waits for a CPU, and a run of four processes loses more than `grep -c`'s one (the Machine line).
"""
    print(text)
    if args.markdown:
        _write_markdown(args.markdown, text)
    return 0


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
