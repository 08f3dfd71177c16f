#!/usr/bin/env python3
"""clustercheck's storage figures beside fio's, on the same folder, file sizes and reader count.

For --rounds rounds, in the same run, on a filesystem folder (--dir, default /var/tmp):

  clustercheck  the measuring script of `storage.read_pattern`, run exactly as the check runs
                it (`python3 -c SCRIPT ARGS`): sequential 1 MiB reads, random 4 KiB and
                128 KiB reads, small files; O_DIRECT where the filesystem allows it
  fio           `fio --ioengine=psync --direct=1` (pread, as the script) with the same number
                of jobs as readers and one file of --size / --readers per job:
                rw=read bs=1M; rw=randread bs=4k; rw=randread bs=128k (time-based, --fio-runtime s)

and reports clustercheck's figure / fio's figure per pattern (medians over rounds). The target
(issue 7) is within +-15% for sequential and random reads. Small files have no fio twin that
does the same open+fstat+read+close, so only clustercheck's figure is shown.

Writes Markdown to --markdown FILE (in a `<!-- bench_storage -->` section) and prints it.
Exits 0 once it has measured, 2 when it cannot run (no fio, no python3).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
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


def clustercheck_round(folder: Path, size: int, readers: int, budget: float) -> dict[str, Any]:
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
    }
    proc = subprocess.run(["python3", "-c", SCRIPT, json.dumps(args)], capture_output=True, text=True, check=False)
    record: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if record.get("error") or record.get("refused"):
        raise SystemExit(f"clustercheck's script: {record.get('error') or record.get('refused')}")
    return record


def fio(folder: Path, name: str, rw: str, bs: str, per_job: int, readers: int, runtime: float) -> dict[str, Any]:
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
        "--group_reporting",
        "--output-format=json",
    ]
    if rw == "randread":
        argv += [f"--runtime={runtime:g}", "--time_based"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    read = json.loads(proc.stdout[proc.stdout.index("{") :])["jobs"][0]["read"]
    pcts = read["clat_ns"].get("percentile", {})
    return {
        "mb_s": read["bw_bytes"] / 1e6,
        "iops": read["iops"],
        "p50_ms": pcts.get("50.000000", 0) / 1e6,
        "p99_ms": pcts.get("99.000000", 0) / 1e6,
    }


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="the filesystem folder to measure in")
    parser.add_argument("--size", type=int, default=512, help="MiB of data in the file set")
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--budget", type=float, default=12.0, help="clustercheck's budget, seconds")
    parser.add_argument("--fio-runtime", type=float, default=3.0, help="seconds per fio random-read run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="write the figures as Markdown to this file")
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("bench_storage: fio is not installed (Debian package fio)", file=sys.stderr)
        return 2
    size, per_job = args.size * MIB, args.size * MIB // args.readers
    cc: dict[str, list[float]] = {}
    fi: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        r = clustercheck_round(args.dir, size, args.readers, args.budget)
        cache = r["cache"]
        for key, value in (
            ("seq MB/s", r["seq"]["mb_s"]),
            ("rand 4 KiB IOPS", r["rand_4k"]["iops"]),
            ("rand 4 KiB p50 ms", r["rand_4k"]["p50_ms"]),
            ("rand 4 KiB p99 ms", r["rand_4k"]["p99_ms"]),
            ("rand 128 KiB IOPS", r["rand_128k"]["iops"]),
            ("rand 128 KiB p99 ms", r["rand_128k"]["p99_ms"]),
            ("small files/s", r["meta"]["files_s"]),
        ):
            cc.setdefault(key, []).append(value)
        with tempfile.TemporaryDirectory(prefix=".bench-storage-fio-", dir=args.dir) as tmp:
            folder = Path(tmp)
            seq = fio(folder, "seq", "read", "1M", per_job, args.readers, args.fio_runtime)
            r4 = fio(folder, "seq", "randread", "4k", per_job, args.readers, args.fio_runtime)  # same files
            r128 = fio(folder, "seq", "randread", "128k", per_job, args.readers, args.fio_runtime)
        for key, value in (
            ("seq MB/s", seq["mb_s"]),
            ("rand 4 KiB IOPS", r4["iops"]),
            ("rand 4 KiB p50 ms", r4["p50_ms"]),
            ("rand 4 KiB p99 ms", r4["p99_ms"]),
            ("rand 128 KiB IOPS", r128["iops"]),
            ("rand 128 KiB p99 ms", r128["p99_ms"]),
        ):
            fi.setdefault(key, []).append(value)
    rows, verdicts = [], []
    for key, values in cc.items():
        mine = statistics.median(values)
        if key in fi:
            theirs = statistics.median(fi[key])
            ratio = mine / theirs if theirs else float("nan")
            rows.append(f"| {key} | {_fmt(mine)} | {_fmt(theirs)} | {ratio:.2f} |")
            if key in ("seq MB/s", "rand 4 KiB IOPS", "rand 128 KiB IOPS"):
                verdicts.append(f"{key}: {ratio:.2f} ({'within' if abs(ratio - 1) <= 0.15 else 'OUTSIDE'} +-15%)")
        else:
            rows.append(f"| {key} | {_fmt(mine)} | (no fio twin) | |")
    per_round = "; ".join(
        f"{key}: " + ", ".join(f"{m / t:.2f}" for m, t in zip(cc[key], fi[key], strict=True))
        for key in ("seq MB/s", "rand 4 KiB IOPS", "rand 128 KiB IOPS")
    )
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(args.dir)], capture_output=True, text=True).stdout.strip()
    text = f"""
## Storage read pattern: clustercheck vs fio

{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node() and "this machine"}: {os.cpu_count()} CPUs,
{args.dir} on {fstype}; {args.size} MiB file set, {args.readers} readers/jobs, page cache: {cache} (fio: direct=1),
medians of {args.rounds} rounds, both in the same run. `python bench/bench_storage.py` reproduces it.

| pattern | clustercheck | fio | clustercheck / fio |
|---|---|---|---|
{chr(10).join(rows)}

{"; ".join(verdicts)}

Per round (clustercheck / fio, in run order; the spread is this disk's noise between runs):
{per_round}
"""
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
