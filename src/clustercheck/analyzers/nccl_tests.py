"""nccl-tests results (all_reduce_perf and friends) -> size -> algbw/busbw rows, verdict.

The table nccl-tests prints (NVIDIA/nccl-tests src/common.cu) has, per message size, the
out-of-place and in-place time, algorithm bandwidth and bus bandwidth, and a check column:

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
               8             2     float     sum      -1    164.3    0.00    0.00      0    163.3    0.00    0.00      0
    # Avg bus bandwidth    : 52.9753

Layouts differ across versions and tests: older builds have an ``error`` column (a float,
or ``N/A`` without ``-c``) instead of ``#wrong``; all_gather has neither redop nor root,
alltoall leaves redop blank, broadcast has root only, reduce has both. So a row is read from
both ends: size, count and type first, then the last eight fields (time, algbw, busbw, check,
twice); whatever sits between is redop/root. Rows may carry srun (``0: ``) or OpenMPI
(``[1,0]<stdout>:``) prefixes and be interleaved with NCCL INFO lines of other ranks.

busbw is what to compare with the hardware: nccl-tests scales algbw by the collective's
traffic pattern (2(n-1)/n for all_reduce) so busbw approaches the link speed at large sizes.
The judged figure is the peak busbw (the best of out-of-place and in-place over all sizes,
in practice the largest ones); the ``Avg bus bandwidth`` line averages every size, tiny
latency-bound ones included, and can be judged separately.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from clustercheck.result import Status, worst

# nccl-tests' data type names (src/common.cu test_typenames, both spellings across versions).
TYPES = frozenset(
    {
        "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
        "fp8_e4m3", "fp8_e5m2", "char", "int", "long", "float16", "float32", "float64", "bf16",
    }
)  # fmt: skip

_PREFIX = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<\w+>:\s*)")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([\d.]+)")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(\w+)")
_HEADER = re.compile(r"#?\s*size\s+count\s+type\b(.*)$")
# Two searches, not one with `.*?` between: that rescanned the rest of the line from every
# `nThread N nGpus N` in it (quadratic on a hostile line); the leftmost matches are the same.
_PARAMS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_PARAMS_BYTES = re.compile(r"minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
# A row cut in pieces by other ranks' output (NCCL INFO lines glued to its fragments): the head
# (size count type [redop] [root]) and each measurement (time algbw busbw check) start a line.
_HEAD_PIECE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([a-z0-9_]+)((?:\s+[a-z]+)?(?:\s+-?\d+)?)(?=[^\d\s.]|\s*$)")
_MEASURE_PIECE = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(N/A|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?=\D|$)"
)
_RANK = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)")


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw: float
    busbw: float
    check: str  # '#wrong' count, an 'error' magnitude, or N/A

    @property
    def wrong(self) -> int:
        """Wrong results in this measurement (0 where the column is an error magnitude or N/A)."""
        return int(self.check) if self.check.isdigit() else 0

    def to_json(self) -> dict[str, Any]:
        return {"time_us": self.time_us, "algbw": self.algbw, "busbw": self.busbw, "check": self.check}


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    type: str
    extra: tuple[str, ...]  # redop and/or root, as printed
    out_of_place: Measurement
    in_place: Measurement
    line: int

    @property
    def busbw(self) -> float:
        return max(self.out_of_place.busbw, self.in_place.busbw)

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "count": self.count,
            "type": self.type,
            "redop_root": list(self.extra),
            "out_of_place": self.out_of_place.to_json(),
            "in_place": self.in_place.to_json(),
            "line": self.line,
        }


@dataclass(frozen=True)
class Finding:
    status: Status
    message: str
    lines: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "message": self.message, "lines": list(self.lines)}


@dataclass(frozen=True)
class TestsReport:
    source: str
    rows: tuple[Row, ...]
    avg_busbw: float | None
    out_of_bounds: int | None
    check_column: str  # "#wrong", "error" or "unknown"
    columns: tuple[str, ...]
    ranks: int
    hosts: tuple[str, ...]
    params: dict[str, int] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()

    @property
    def peak(self) -> Row | None:
        return max(self.rows, key=lambda r: (r.busbw, r.size)) if self.rows else None

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        peak = self.peak
        return {
            "file": self.source,
            "rows": [r.to_json() for r in self.rows],
            "avg_busbw": self.avg_busbw,
            "peak_busbw": peak.busbw if peak else None,
            "peak_size": peak.size if peak else None,
            "largest_size": max((r.size for r in self.rows), default=None),
            "wrong": sum(r.out_of_place.wrong + r.in_place.wrong for r in self.rows),
            "out_of_bounds": self.out_of_bounds,
            "check_column": self.check_column,
            "columns": list(self.columns),
            "ranks": self.ranks,
            "hosts": list(self.hosts),
            "params": self.params,
            "status": self.status.value,
            "findings": [f.to_json() for f in self.findings],
        }


class NotATable(ValueError):
    """The text holds no nccl-tests result rows."""


def _float(token: str) -> float | None:
    return float(token) if _NUMBER.match(token) else None


def parse_row(text: str) -> tuple[int, int, str, tuple[str, ...], Measurement, Measurement] | None:
    """One result row (prefix already stripped) -> its fields; None for anything else."""
    tokens = text.split()
    if len(tokens) < 11 or not tokens[0].isdigit() or not tokens[1].isdigit() or tokens[2] not in TYPES:
        return None
    tail, extra = tokens[-8:], tuple(tokens[3:-8])
    if len(extra) > 2:
        return None
    values = [_float(t) for t in (tail[0], tail[1], tail[2], tail[4], tail[5], tail[6])]
    if any(v is None for v in values):
        return None
    for check in (tail[3], tail[7]):
        if check != "N/A" and _float(check) is None:
            return None
    t1, a1, b1, t2, a2, b2 = (float(v) for v in values if v is not None)
    return (
        int(tokens[0]),
        int(tokens[1]),
        tokens[2],
        extra,
        Measurement(t1, a1, b1, tail[3]),
        Measurement(t2, a2, b2, tail[7]),
    )


def parse(text: str | Iterable[str], source: str = "-") -> TestsReport:
    """Read nccl-tests output; NotATable when it has no result rows."""
    lines = text.splitlines() if isinstance(text, str) else text
    rows: list[Row] = []
    avg = oob = None
    oob_word = ""
    columns: tuple[str, ...] = ()
    check_column = "unknown"
    params: dict[str, int] = {}
    ranks: dict[int, str] = {}
    oob_line = 0
    pending: tuple[int, int, str, tuple[str, ...], int] | None = None
    pieces: list[Measurement] = []
    for number, raw in enumerate(lines, 1):
        line = _PREFIX.sub("", raw.rstrip("\r\n"), count=1)
        if "NCCL INFO" in line or "NCCL WARN" in line:
            head = _HEAD_PIECE.match(line)
            measure = _MEASURE_PIECE.match(line)
            if head and head.group(3) in TYPES:
                extra = tuple(head.group(4).split())
                pending, pieces = (int(head.group(1)), int(head.group(2)), head.group(3), extra, number), []
            elif measure and pending is not None:
                pieces.append(_measurement(measure))
            continue
        measure = _MEASURE_PIECE.match(line)
        if pending is not None and measure and measure.end() >= len(line.rstrip()):
            pieces.append(_measurement(measure))
            if len(pieces) == 2:
                size, count, dtype, extra, at = pending
                rows.append(Row(size, count, dtype, extra, pieces[0], pieces[1], at))
                pending, pieces = None, []
            continue
        body = line.lstrip("# ").rstrip()
        m = _HEADER.match(body)
        if m and "time" in body:
            columns = tuple(body.split())
            check_column = "#wrong" if "#wrong" in columns else ("error" if "error" in columns else "unknown")
            continue
        m = _AVG.search(line)
        if m:
            avg = float(m.group(1))
            continue
        m = _OOB.search(line)
        if m:
            oob, oob_word, oob_line = int(m.group(1)), m.group(2), number
            continue
        m = _PARAMS.search(line)
        b = _PARAMS_BYTES.search(line, m.end()) if m else None
        if m and b:
            params = {
                "nThread": int(m.group(1)),
                "nGpus": int(m.group(2)),
                "minBytes": int(b.group(1)),
                "maxBytes": int(b.group(2)),
            }
            continue
        m = _RANK.search(line)
        if m:
            ranks[int(m.group(1))] = m.group(3)
            continue
        fields = parse_row(line)
        if fields is not None:
            size, count, dtype, extra, oop, ip = fields
            rows.append(Row(size, count, dtype, extra, oop, ip, number))
    if not rows:
        raise NotATable(f"{source}: no nccl-tests result rows (size count type ... time algbw busbw ...)")
    if check_column == "unknown":
        checks = {r.out_of_place.check for r in rows}
        check_column = "error" if any("." in c or "e-" in c for c in checks) else "unknown"
    findings: list[Finding] = []
    wrong_rows = [r for r in rows if r.out_of_place.wrong or r.in_place.wrong]
    if wrong_rows and check_column != "error":
        total = sum(r.out_of_place.wrong + r.in_place.wrong for r in wrong_rows)
        findings.append(
            Finding(
                Status.FAIL,
                f"{total} wrong results (data corruption) at {len(wrong_rows)} sizes, first at "
                f"{_size(wrong_rows[0].size)}",
                tuple(r.line for r in wrong_rows[:5]),
            )
        )
    if oob is not None and (oob > 0 or oob_word.upper() != "OK"):
        findings.append(Finding(Status.FAIL, f"out of bounds values: {oob} {oob_word}", (oob_line,)))
    hosts = tuple(sorted(set(ranks.values())))
    return TestsReport(
        source=source,
        rows=tuple(rows),
        avg_busbw=avg,
        out_of_bounds=oob,
        check_column=check_column,
        columns=columns,
        ranks=len(ranks),
        hosts=hosts,
        params=params,
        findings=tuple(findings),
    )


def judge(report: TestsReport, *, min_busbw: float | None = None, min_avg_busbw: float | None = None) -> TestsReport:
    """Add the bandwidth verdicts (GB/s) to a parsed report."""
    findings = list(report.findings)
    peak = report.peak
    assert peak is not None
    if min_busbw is not None:
        status = Status.OK if peak.busbw >= min_busbw else Status.FAIL
        findings.append(
            Finding(
                status,
                f"peak bus bandwidth {peak.busbw:.2f} GB/s at {_size(peak.size)}, "
                + ("expected at least" if status is Status.FAIL else "threshold")
                + f" {min_busbw:g} GB/s",
                (peak.line,),
            )
        )
    if min_avg_busbw is not None:
        if report.avg_busbw is None:
            findings.append(Finding(Status.WARN, "no 'Avg bus bandwidth' line to judge (output cut short?)"))
        else:
            status = Status.OK if report.avg_busbw >= min_avg_busbw else Status.FAIL
            findings.append(
                Finding(
                    status,
                    f"average bus bandwidth {report.avg_busbw:g} GB/s, "
                    + ("expected at least" if status is Status.FAIL else "threshold")
                    + f" {min_avg_busbw:g} GB/s",
                )
            )
    if min_busbw is None and min_avg_busbw is None:
        findings.append(
            Finding(
                Status.OK,
                f"peak bus bandwidth {peak.busbw:.2f} GB/s at {_size(peak.size)} (no threshold given)",
                (peak.line,),
            )
        )
    return TestsReport(
        source=report.source,
        rows=report.rows,
        avg_busbw=report.avg_busbw,
        out_of_bounds=report.out_of_bounds,
        check_column=report.check_column,
        columns=report.columns,
        ranks=report.ranks,
        hosts=report.hosts,
        params=report.params,
        findings=tuple(findings),
    )


def _measurement(m: re.Match[str]) -> Measurement:
    return Measurement(float(m.group(1)), float(m.group(2)), float(m.group(3)), m.group(4))


def _size(n: int) -> str:
    """8589934592 -> '8 GiB'; 1000 -> '1000 B'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:g} {unit}"
        value /= 1024
    return f"{value:g} TiB"
