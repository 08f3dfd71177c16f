"""bench/summary.py: the table it writes atop RESULTS.md from the benchmarks' own sections.

The samples are copies of real sections (bench/RESULTS.md and bench/FLEET.md as `make bench`
wrote them at 17:11-17:39 UTC on 2026-12-01, on the 2-CPU VM): the prolog section's figures, the
storage section's header and its /dev/shm part, three lines of the fleet report. summary.py runs
as `make bench` runs it, on copies in a temporary folder.
"""

# ruff: noqa: E501, W291 (the samples are sections as the benchmarks wrote them: long lines, Markdown line breaks)
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

SUMMARY = REPO / "bench" / "summary.py"

PROLOG = """Date: 2026-12-01 17:39 UTC  
Machine: vm, 2 CPUs (nproc), Linux 6.18.44-fc-v857, Python 3.11.7 (.venv/bin/python), GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)  
Command: `NHC=PREFIX/sbin/nhc NHC_ARGS='-D PREFIX/etc/nhc' NHC_CFG_PREFIX=PREFIX .venv/bin/python bench/bench.py --markdown bench/RESULTS.md`  
Rounds: 15 measured (+1 warm-up), interleaved, order rotating each round  
Load average (1 min) before / after: 1.6 / 2.1  

| what | median ms | p90 ms | min ms | peak RSS MiB | exit codes |
| --- | ---: | ---: | ---: | ---: | --- |
| python -c pass | 29.9 | 35.0 | 22.4 | 10.6 | 0 |
| python -c 'import clustercheck' | 55.0 | 63.9 | 42.4 | 13.1 | 0 |
| clustercheck run --local --profile prolog --format json | 125.7 | 164.6 | 113.6 | 19.0 | 2 |
| clustercheck prolog (profile prolog; state file, no syslog) | 155.8 | 176.2 | 118.6 | 17.7 | 2 |
| bare python3 -c pass (the single file's interpreter) | 11.4 | 13.7 | 9.6 | 8.3 | 0 |
| python3 clustercheck.pyz prolog (1.09 MB; cache unpacked) | 150.6 | 189.9 | 127.4 | 17.4 | 2 |
| python3 clustercheck.pyz prolog, first run (empty cache) | 595.6 | 700.9 | 401.2 | 24.9 | 2 |
| 8 x python3 clustercheck.pyz prolog at once, empty cache | 1476.9 | 1674.8 | 1023.4 | n/a (no /usr/bin/time) | 2 |
| nhc 1.5 (nhc.conf) | 826.1 | 5729.9 | 719.3 | 6.2 | 4 |

clustercheck / python -c pass: 4.21x (median over median)  
clustercheck above interpreter start-up: 95.8 ms; importing the package: 25.2 ms  
clustercheck warm-up run: 10 checks: node.kernel=ok, node.cpu=ok, node.memory=ok, node.modules=error, gpu.count=fail, gpu.ecc=skip, gpu.xid=ok, gpu.persistence_mode=skip, storage.mounts=ok, rdma.ports=skip  
clustercheck prolog / python -c pass: 5.21x; prolog mode / run --local: 1.24x  
clustercheck prolog warm-up run: verdict fail (exit 2), node.kernel=ok, node.cpu=ok, node.memory=ok, node.modules=error, gpu.count=fail, gpu.ecc=skip, gpu.xid=ok, gpu.persistence_mode=skip, storage.mounts=ok, rdma.ports=skip  
single file prolog / venv prolog: 0.97x (-5.2 ms); above its python -c pass: 139.1 ms  
single file, first run after an upgrade (unpacking): 595.6 ms (+445.0 ms); 8 at once: all done in 1476.9 ms  
clustercheck / NHC: 0.15x (median over median)  
clustercheck prolog / NHC: 0.19x (median over median)  
TARGET HELD: run --local --profile prolog median 125.7 ms <= NHC median 826.1 ms  
TARGET HELD: clustercheck prolog median 155.8 ms <= NHC median 826.1 ms  
TARGET HELD: single file clustercheck.pyz prolog median 150.6 ms <= NHC median 826.1 ms
"""

STORAGE = """

## Storage read pattern: clustercheck vs fio

2026-12-01 17:30 UTC, this machine: 2 CPUs, fio-3.33,
Python 3.11.7 (the script runs under `python3`),
load average 4.8 / 4.3 / 6.4 (1/5/15 min) at the end;
clustercheck and fio in the same run, interleaved per round.
Command: `python bench/bench_storage.py --size 2048 --rounds 4 --budget 20 --markdown bench/RESULTS.md`

Exact commands: clustercheck: `python3 -c SCRIPT ARGS` (SCRIPT is checks/storage.py's, ARGS the
check's JSON with this run's path, size, readers, budget and workers); fio (TMP: a fresh
folder under the measured one, N the bytes per job):
- `fio --name=seq --directory=TMP --rw=read --bs=1M --size=N --numjobs=4 --ioengine=psync --direct=1 --group_reporting --output-format=json`
- `fio --name=seq --directory=TMP --rw=randread --bs=4k --size=N --numjobs=4 --ioengine=psync --direct=1 --group_reporting --output-format=json --runtime=3 --time_based`
- `fio --name=seq --directory=TMP --rw=randread --bs=128k --size=N --numjobs=4 --ioengine=psync --direct=1 --group_reporting --output-format=json --runtime=3 --time_based`

### /dev/shm (tmpfs)

2048 MiB file set, 4 readers = fio jobs, clustercheck's random reads in 2 processes
(workers=0: one per reader, up to the CPUs), page cache: O_DIRECT
(fio: direct=1), medians of 4 rounds.

| pattern | clustercheck | clustercheck, 1 process | fio | clustercheck / fio | 1 process / fio |
|---|---|---|---|---|---|
| seq MB/s | 5,850 |  | 8,963 | 0.65 |  |
| rand 4 KiB IOPS | 423,191 | 367,686 | 932,020 | 0.45 | 0.39 |
| rand 4 KiB p50 ms | 0.002 |  | 0.00146 | 1.37 |  |
| rand 4 KiB p99 ms | 0.003 |  | 0.00222 | 1.35 |  |
| rand 128 KiB IOPS | 52,793 | 53,530 | 86,799 | 0.61 | 0.62 |
| rand 128 KiB p99 ms | 0.0575 |  | 0.0471 | 1.22 |  |
| small files/s | 80,103 |  | (no fio twin) | | |

Per round (clustercheck / fio, in run order; the spread is this folder's noise between runs):
seq MB/s: 0.53, 0.68, 0.80, 0.68; rand 4 KiB IOPS: 0.33, 0.44, 0.65, 0.34; rand 128 KiB IOPS: 0.44, 0.70, 0.72, 0.61

TARGET MISSED: storage /dev/shm (tmpfs) seq MB/s: clustercheck / fio 0.65 (4 readers in 2 processes; fio --numjobs=4), target within +-15%  
TARGET MISSED: storage /dev/shm (tmpfs) rand 4 KiB IOPS: clustercheck / fio 0.45 (4 readers in 2 processes; fio --numjobs=4), target within +-15%  
TARGET MISSED: storage /dev/shm (tmpfs) rand 128 KiB IOPS: clustercheck / fio 0.61 (4 readers in 2 processes; fio --numjobs=4), target within +-15%  

"""

FLEET = """Date: 2026-12-01 17:11 UTC  
- clustercheck: `.venv/bin/clustercheck run --ssh '127.0.1.[1-128],127.0.2.[1-128]' --ssh-config CFG -p base -f json --jobs 64 >/dev/null`
- pdsh-c25519: `PDSH_SSH_ARGS_APPEND='-F CFG -oKexAlgorithms=curve25519-sha256' /usr/bin/pdsh -R ssh -f 64 -w '127.0.1.[1-128],127.0.2.[1-128]' 'cat /proc/sys/kernel/osrelease /proc/sys/kernel/tainted /sys/devices/system/cpu/online /sys/devices/system/cpu/present /proc/meminfo; ps -e -ww -o comm= -o args=' >/dev/null`
clustercheck / pdsh -R ssh -f 64 (curve25519): 1.16x (median over median)  
"""

NHC_MISSING = """Date: 2026-12-01 17:00 UTC
Command: `.venv/bin/python bench/bench.py --markdown bench/RESULTS.md`
NVML start-up: not measured: this machine has no NVIDIA driver (no /proc/driver/nvidia); run bench/bench.py on a GPU node to add it
TARGET NOT EVALUATED: NHC not installed here (set NHC to an nhc executable)
"""


def section(name: str, body: str) -> str:
    return f"<!-- {name} -->\n{body}<!-- /{name} -->\n"


def summarize(tmp_path: Path, results: str, fleet: str | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    path = tmp_path / "RESULTS.md"
    path.write_text(results)
    argv = [sys.executable, str(SUMMARY), str(path), str(tmp_path / "FLEET.md")]
    if fleet is not None:
        (tmp_path / "FLEET.md").write_text(fleet)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return proc, path.read_text()


def rows(written: str) -> list[dict[str, str]]:
    """The summary table's rows, as dicts by column name."""
    block = written.split("<!-- bench_summary -->", 1)[1].split("<!-- /bench_summary -->", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split(" | ")), strict=True)) for ln in lines[2:]]


def test_targets_held_and_missed_from_real_sections(tmp_path: Path) -> None:
    results = section("bench_prolog", PROLOG) + "\n" + section("bench_storage", STORAGE)
    proc, written = summarize(tmp_path, results, FLEET)
    assert proc.returncode == 0, proc.stderr
    assert written.startswith("<!-- bench_summary -->\n# Benchmarks: every ratio in one table")
    table = rows(written)

    prolog = [r for r in table if r["area"] == "prolog" and r["held"] in ("yes", "no")]
    assert [(r["target"], r["figure"], r["held"]) for r in prolog] == [
        (
            "run --local --profile prolog at most NHC's time (same checks, the NHC way)",
            "0.15x (125.7 ms vs NHC 826.1 ms, medians)",
            "yes",
        ),
        (
            "clustercheck prolog at most NHC's time (same checks, the NHC way)",
            "0.19x (155.8 ms vs NHC 826.1 ms, medians)",
            "yes",
        ),
        (
            "single file clustercheck.pyz prolog at most NHC's time (same checks, the NHC way)",
            "0.18x (150.6 ms vs NHC 826.1 ms, medians)",
            "yes",
        ),
    ]
    assert all(r["measured"] == "2026-12-01 17:39 UTC" for r in prolog)
    assert all("NHC=PREFIX/sbin/nhc" in r["command"] for r in prolog)
    reported = [r for r in table if r["area"] == "prolog" and r["held"] == "(reported, no target)"]
    assert [r["target"] for r in reported] == [
        "single file prolog / venv prolog",
        "single file, first run after an upgrade (unpacking)",
    ]

    storage = {r["target"]: r for r in table if r["area"] == "storage"}
    seq = storage["seq MB/s within +-15% of fio, same jobs (/dev/shm, tmpfs)"]
    assert (seq["figure"], seq["held"]) == ("0.65x (4 readers in 2 processes; fio --numjobs=4)", "no")
    iops = storage["rand 4 KiB IOPS within +-15% of fio, same jobs (/dev/shm, tmpfs)"]
    assert (iops["figure"], iops["held"]) == ("0.45x (4 readers in 2 processes; fio --numjobs=4)", "no")
    assert "--rw=randread --bs=4k" in iops["command"] and "/dev/shm/TMP" in iops["command"]
    assert storage["rand 128 KiB IOPS within +-15% of fio, same jobs (/dev/shm, tmpfs)"]["held"] == "no"
    workers = storage["rand 4 KiB IOPS, worker processes over one process (/dev/shm (tmpfs))"]
    assert (workers["figure"], workers["held"]) == ("1.15x (423,191 vs 367,686 IOPS)", "(reported, no target)")
    assert all(r["measured"] == "2026-12-01 17:30 UTC" for r in storage.values())

    fleet = [r for r in table if r["area"] == "fleet"]
    assert [(r["target"], r["figure"], r["held"]) for r in fleet] == [
        ("at most pdsh -R ssh -f 64 (curve25519)'s wall time, every host judged", "1.16x", "no")
    ]
    # sections that are not there are rows that say so, never left out
    missing = {r["area"]: r["held"] for r in table if r["area"] in ("nccl-log", "sweep")}
    assert missing == {"nccl-log": "not run", "sweep": "not run"}

    # 3 prolog + 0 of 3 storage + 0 of 1 fleet judged; 2 + 1 reported, 2 not run
    assert "**3 of 7 targets held**; missed: storage 3, fleet 1; 5 not judged (reported only, or not run)" in written
    # the sections themselves are kept, after the table
    assert written.count("<!-- bench_prolog -->") == 1 and PROLOG in written
    assert STORAGE in written


def test_rerun_replaces_its_table_and_reports_what_was_not_evaluated(tmp_path: Path) -> None:
    results = section("bench_prolog", NHC_MISSING)
    proc, first = summarize(tmp_path, results)
    assert proc.returncode == 0, proc.stderr
    proc, again = summarize(tmp_path, first)  # make bench runs it after every run: one table, not two
    assert proc.returncode == 0, proc.stderr
    assert again == first and again.count("<!-- bench_summary -->") == 1
    table = {(r["area"], r["target"]): r for r in rows(again)}
    nhc = table[("prolog", "at most NHC's time on the same checks")]
    assert (nhc["figure"], nhc["held"]) == ("NHC not run", "NHC not installed here (set NHC to an nhc executable)")
    nvml = table[("prolog", "NVML start-up, apart from the prolog rows")]
    assert nvml["held"] == "not run" and nvml["figure"].startswith("not measured: this machine has no NVIDIA driver")
    assert table[("fleet", "at most pdsh's time (curve25519)")]["held"] == "not run"
    assert "**0 of 0 targets held**" in again


def test_missing_results_file_is_an_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SUMMARY), str(tmp_path / "RESULTS.md")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "does not exist: run the benchmarks first (make bench)" in proc.stderr
    assert not (tmp_path / "RESULTS.md").exists()
