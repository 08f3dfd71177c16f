"""NCCL_DEBUG=INFO logs -> which network NCCL used, GPUDirect RDMA, transport errors, per host.

NCCL prints its transport decisions only into its debug log: a job that silently fell back
from InfiniBand/RoCE or EFA to TCP sockets runs, just many times slower. This module reads
such logs (a user's job output: NCCL lines mixed with training output, behind srun, OpenMPI,
Python-logging, timestamp or CloudWatch prefixes, one file per rank or all ranks in one) and
says what NCCL chose and why, and whether that is what a training job needs.

Line formats (domain-facts.md §C.1-C.2, NCCL src/debug.cc and the transport sources):

- prefix ``host:pid:tid [dev] NCCL INFO ...``; the bracket is the CUDA device, not the rank;
  WARN lines put ``file:line`` (newer builds: ``func(args):line``) before ``NCCL WARN``;
- ``Using network IB|Socket|IBext|Libfabric|AWS Libfabric`` (2.3 and 2.5+), the device lines
  ``NET/IB : Using [0]mlx5_0:1/IB ... ; OOB ...``, ``NET/Socket : Using [0]eth0:...``,
  ``NET/OFI Selected provider is efa`` (aws-ofi-nccl);
- channel lines ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`` (``Ring 00 : ...``
  before 2.5; the ``[x]`` after a rank is a PCI bus id up to 2.12, the nvml device later;
  PXN adds ``(proxy)`` after the device; plugins may carry a version: ``NET/IBext_v8/3``);
- NCCL 2.4 printed ``NET/Socket : Using`` for its *bootstrap* interface (there was no
  ``Bootstrap :`` line yet), so in 2.4 that line is no fallback.

Speed: the scanner never parses every line. It reads fixed-size blocks and lets the regex
engine find the few line kinds that decide the verdict (network selection, device lists,
WARN lines, version, communicator sizes); only those are decoded and parsed, identical lines
(every rank prints the same init lines for every communicator) are parsed once, and so is an
INFO line that repeats one of the same host's (every rank of a node prints the same ones).
Channel lines, the bulk of a large log, are attributed to their host one by one for the first
``knobs.EXACT_CHANNELS`` of every input (a block of plain channel lines found, keyed and counted by
the regex engine, each distinct prefix and tail looked at once); beyond that the common ones (IB
with GPUDirect RDMA, no proxy: `grammar._COMMON`) are only counted, and every other one (no GPUDirect RDMA, another
network, a proxy, shared memory) is read on its own. Memory stays constant: one block, bounded
caches, and per-host state bounded by the number of hosts. Large files are cut into stretches at
line boundaries and scanned by several processes; the raw evidence of each stretch (a
`Partial`) is merged back in order, so line numbers hold. Where GNU grep is on PATH, a file of
at least GREP_MIN bytes has its byte-level pass past the exact start done by GNU grep beside
this process (`grep`: the same Partials, so the same report; no GNU grep,
`CLUSTERCHECK_NCCL_GREP=0` or a line longer than a block: the scan above).

The package: `knobs` (the sizes that steer the scan: set them there), `grammar` (one line -> what
it says), `scan` (blocks, stretches, processes -> `Partial`), `grep` (the same `Partial`s through
GNU grep), `evidence` (what is accumulated per host and job), `state` (`Scanner`: accumulates it),
`rules` (the verdict: `judge()` and its named rules). Everything a caller needs is importable from
here; no module of the package imports the package itself.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from clustercheck.analyzers.nccl_log import knobs
from clustercheck.analyzers.nccl_log.evidence import MAX_ERRORS, MAX_HOSTS, _Host, _Job
from clustercheck.analyzers.nccl_log.grammar import (
    _RARE,
    _RARE_LEAN,
    _SEEN_CAP,
    GARBLED,
    GREP_PATTERN,
    MAX_KEPT,
    MAX_TAIL,
    NETWORKS,
    WC_STATUS,
    LogLine,
    NetTail,
    Ref,
    intra_class,
    network_kind,
    parse_net_tail,
    split_line,
)
from clustercheck.analyzers.nccl_log.rules import Finding, LogReport, judge
from clustercheck.analyzers.nccl_log.scan import (
    _RECORDS_CAP,
    Partial,
    _blocks,
    _Collector,
    _scan_range,
    _scan_stream,
    default_jobs,
)
from clustercheck.analyzers.nccl_log.state import Scanner

__all__ = [
    "GARBLED",
    "GREP_PATTERN",
    "MAX_ERRORS",
    "MAX_HOSTS",
    "MAX_KEPT",
    "MAX_TAIL",
    "NETWORKS",
    "WC_STATUS",
    "_RARE",
    "_RARE_LEAN",
    "_RECORDS_CAP",
    "_SEEN_CAP",
    "Finding",
    "LogLine",
    "LogReport",
    "NetTail",
    "Partial",
    "Ref",
    "Scanner",
    "_Collector",
    "_Host",
    "_Job",
    "_blocks",
    "_scan_range",
    "_scan_stream",
    "analyze_paths",
    "analyze_streams",
    "analyze_text",
    "default_jobs",
    "intra_class",
    "judge",
    "knobs",
    "network_kind",
    "parse_net_tail",
    "split_line",
]

# -- entry points --------------------------------------------------------------------------------


def analyze_streams(
    streams: Sequence[tuple[str, IO[bytes]]], *, expect: str | None = None, expect_gdr: bool = False
) -> LogReport:
    """Scan (name, binary stream) pairs as one job and judge it."""
    scanner = Scanner()
    for name, stream in streams:
        scanner.feed_stream(stream, name)
    return scanner.report(expect=expect, expect_gdr=expect_gdr)


def analyze_paths(
    paths: Sequence[str | Path], *, expect: str | None = None, expect_gdr: bool = False, jobs: int = 1
) -> LogReport:
    """Scan log files (one per rank, or all ranks in one) as one job; OSError for an unreadable file."""
    scanner = Scanner()
    for path in paths:
        scanner.feed_path(str(path), jobs=jobs)
    return scanner.report(expect=expect, expect_gdr=expect_gdr)


def analyze_text(text: str | bytes, name: str = "-", **kwargs: Any) -> LogReport:
    """Scan a log held in memory (tests, small inputs)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return analyze_streams([(name, io.BytesIO(data))], **kwargs)
