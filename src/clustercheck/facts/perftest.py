"""perftest bandwidth runs (`ib_write_bw` and its siblings): read the result table, judge it
against the port's rate.

`parse_bw(text)` is pure and linear: it reads what one `ib_*_bw` printed (client or server, or
both written to one stream, as a loopback run does: their header blocks and rows interleave
and repeat) into a `BwRun`: the test's name, device, transport, link type, MTU, the units
(`--report_gbits` gives Gb/sec, the default is MB/sec) and one row per message size (bytes,
iterations, BW peak, BW average, MsgRate). Anything else - no test header and no rows, a
table without a row (the run stopped or was cut), a row that is not numbers, a paste with a
quote prefix ("> ") - raises `PerftestParseError` saying why: it is never read as a pass.

`judge_bw(run, rate_gbps, min_fraction=...)` is the verdict the checks share (one node's
loopback in `rdma.bandwidth`, a pair of nodes in the sweep): the average bandwidth at the
largest message size, in Gb/s, against `min_fraction` of the port's rate. Small messages are
latency-bound (issue-perftest-273 in tests/corpus/perftest: 0.48 Gb/s at 8 bytes is a message
rate, not a bandwidth), so a run whose largest size is below `MIN_JUDGED_SIZE` gives no
verdict: `error`, never a pass and never a failed port.

Units: perftest divides by 0x100000 for MB/sec and by 125000000 for Gb/sec
(perftest_resources.c, `format_factor`), so 1 MB/sec is 1048576 bytes/s = 0.008388608 Gb/s;
the MsgRate column confirms it (superbench's 8 MiB loopback: 0.003007 Mpps x 8 MiB x 8 =
201.8 Gb/s, its 24056.72 MB/sec).

`read_pair_sides(text)` reads what the sweep's two-node form printed through `srun --label`
(facts/scripts/rdma_pair.sh on both nodes): each node's role, each run's port state and rate,
the tool's output and exit status.

The real outputs these readings were made against are under tests/corpus/perftest/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: Gb/s per unit perftest prints (see the module docstring).
GBPS_PER_UNIT = {"Gb/sec": 1.0, "MB/sec": 1048576 * 8 / 1e9}

#: The smallest message size whose bandwidth is compared with the port's rate (bytes).
MIN_JUDGED_SIZE = 65536

#: The packages that hold ib_write_bw.
PACKAGE = "perftest"

_TITLE = re.compile(r"^\s*(RDMA_\w+|Send|Atomic\w*|Read|Write)(?: [\w ]*?)? BW Test\s*$")
_FIELD = re.compile(r"([A-Za-z][\w* .]*?)\s*:\s*(\S[^\t:]*?)\s*(?=\t|\s{2,}[A-Za-z][\w* .]*?\s*:|$)")
_HEADER = re.compile(
    r"^\s*#bytes\s+#iterations\s+BW peak\[(Gb/sec|MB/sec)\]\s+BW average\[(Gb/sec|MB/sec)\]\s+MsgRate\[Mpps\]\s*$"
)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$")
_SEPARATOR = re.compile(r"^\s*-{20,}\s*$")
_CUDA_NAME = re.compile(r"device name = \[([^\]]*)\]")
# What perftest prints when it cannot run: connection, device, memory and verbs failures.
_PROBLEM = re.compile(
    r"couldn'?t|unable to|failed|failure|error|not supported|doesn't support|no ib devices|"
    r"is not a valid|invalid|cannot|can't",
    re.I,
)


class PerftestParseError(ValueError):
    """perftest's output holds no result this reader can judge: it says why."""


@dataclass(frozen=True)
class BwRow:
    """One message size of the result table; bandwidths in the run's units."""

    size: int
    iterations: int
    peak: float
    average: float
    msg_rate_mpps: float

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.size,
            "iterations": self.iterations,
            "peak": self.peak,
            "average": self.average,
            "msg_rate_mpps": self.msg_rate_mpps,
        }


@dataclass(frozen=True)
class BwRun:
    """What one perftest bandwidth run printed, read."""

    test: str  # "RDMA_Write BW Test"
    units: str  # "Gb/sec" or "MB/sec"
    rows: tuple[BwRow, ...]
    fields: dict[str, str] = field(default_factory=dict)  # "Device": "mlx5_0", "Link type": "IB", ...
    cuda_device: str = ""  # the GPU perftest picked with --use_cuda, "" from host memory
    complete: bool = True  # False: the table ends without its closing separator
    problems: tuple[str, ...] = ()  # perftest's own error lines, as printed

    @property
    def device(self) -> str:
        return self.fields.get("Device", "")

    @property
    def link_type(self) -> str:
        return self.fields.get("Link type", "")

    def gbps(self, row: BwRow) -> float:
        """The row's average bandwidth in Gb/s."""
        return row.average * GBPS_PER_UNIT[self.units]

    @property
    def largest(self) -> BwRow | None:
        return max(self.rows, key=lambda r: r.size, default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "units": self.units,
            "device": self.device,
            "link_type": self.link_type,
            "mtu": self.fields.get("Mtu", ""),
            "cuda_device": self.cuda_device or None,
            "rows": [r.to_json() for r in self.rows],
            "complete": self.complete,
        }


def parse_bw(text: str) -> BwRun:
    """perftest's bandwidth output -> BwRun; PerftestParseError when no result can be read."""
    lines = text.splitlines()
    quoted = [line for line in lines if line.strip()]
    if quoted and all(line.lstrip().startswith(">") for line in quoted):
        raise PerftestParseError(
            "every line starts with '>': a quoted paste (an e-mail or issue comment), not perftest's output"
        )
    test = ""
    units = ""
    fields: dict[str, str] = {}
    rows: dict[int, BwRow] = {}
    cuda = ""
    problems: list[str] = []
    in_table = False
    complete = True
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if _TITLE.match(line):
            test = test or line.strip()
            in_table = False
            continue
        header = _HEADER.match(line)
        if header:
            if header.group(1) != header.group(2) or (units and units != header.group(1)):
                raise PerftestParseError(f"line {number}: the table's units change ({line.strip()!r})")
            units = header.group(1)
            in_table = True
            continue
        row = _ROW.match(line)
        if row and in_table:
            size, iterations = int(row.group(1)), int(row.group(2))
            peak, average, rate = float(row.group(3)), float(row.group(4)), float(row.group(5))
            if size not in rows:  # a repeat (the other end's copy of the row) keeps the first
                rows[size] = BwRow(size, iterations, peak, average, rate)
                complete = False  # until the separator that closes the table
            continue
        if _SEPARATOR.match(line):
            if rows:
                complete = True
            continue
        if in_table and re.match(r"^\s*\d", line):
            raise PerftestParseError(f"line {number}: a result row that is not five numbers: {line.strip()[:100]!r}")
        m = _CUDA_NAME.search(line)
        if m:
            cuda = m.group(1)
            continue
        if ":" in line and not in_table:
            for key, value in _FIELD.findall(line):
                fields.setdefault(key.strip(), value.strip())
        if _PROBLEM.search(line) and "inline" not in line.lower():
            problems.append(" ".join(line.split())[:300])
    if not test and not rows:
        shown = " ".join(text.strip()[:200].split())
        if problems:
            raise PerftestParseError(f"perftest did not run the test: {' / '.join(problems[:3])}")
        if not shown:
            raise PerftestParseError("perftest printed nothing")
        raise PerftestParseError(f"not perftest's bandwidth output (no 'BW Test' header, no result table): {shown!r}")
    if not rows:
        why = f": {' / '.join(problems[:3])}" if problems else " (the run stopped or its output was cut)"
        raise PerftestParseError(f"{test or 'perftest'} printed no result row{why}")
    ordered = tuple(rows[size] for size in sorted(rows))
    return BwRun(test, units, ordered, fields, cuda, complete, tuple(problems))


def bw_argv(
    binary: str,
    device: str,
    *,
    size: int,
    iterations: int,
    gid_index: int = -1,
    cuda: int | None = None,
    ib_port: int = 1,
) -> tuple[str, ...]:
    """One end of a bandwidth run: `ib_write_bw -d DEV --report_gbits -s SIZE -n ITERS [-i PORT]
    [-x GID] [--use_cuda=GPU]`; the client appends the server's address (the sweep's pairs: its
    host name). `-i` is the HCA port (perftest's default is 1, so it is said only for another;
    `-p` is perftest's TCP port, which the pair script sets)."""
    argv = [binary, "-d", device, "--report_gbits", "-s", str(size), "-n", str(iterations)]
    if ib_port != 1:
        argv += ["-i", str(ib_port)]
    if gid_index >= 0:
        argv += ["-x", str(gid_index)]
    if cuda is not None:
        argv.append(f"--use_cuda={cuda}")
    return tuple(argv)


# -- the verdict ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BwVerdict:
    """`judge_bw`'s answer: status ok/fail/error, the figures it rests on, one sentence."""

    status: str  # "ok", "fail" or "error"
    message: str
    gbps: float | None = None
    rate_gbps: float | None = None
    fraction: float | None = None
    size: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "gbps": None if self.gbps is None else round(self.gbps, 2),
            "rate_gbps": self.rate_gbps,
            "fraction": None if self.fraction is None else round(self.fraction, 3),
            "bytes": self.size,
        }


def judge_bw(
    run: BwRun, rate_gbps: float | None, *, min_fraction: float = 0.9, min_size: int = MIN_JUDGED_SIZE
) -> BwVerdict:
    """The average bandwidth at the run's largest message size against `min_fraction` of the
    port's rate (pure; the loopback check and the sweep's pairs share it)."""
    row = run.largest
    if row is None:  # parse_bw never returns such a run; a hand-made one gets no verdict
        return BwVerdict("error", "no result row")
    gbps = run.gbps(row)
    if row.size < min_size:
        return BwVerdict(
            "error",
            f"the largest message size is {row.size} bytes: below {min_size} bytes a run measures message "
            "rate, not bandwidth, so it says nothing about the port",
            gbps,
            rate_gbps,
            None,
            row.size,
        )
    if not run.complete:
        return BwVerdict(
            "error", "the result table has no closing line: the run was cut", gbps, rate_gbps, None, row.size
        )
    if rate_gbps is None or rate_gbps <= 0:
        return BwVerdict("error", "the port's rate is unknown", gbps, rate_gbps, None, row.size)
    fraction = gbps / rate_gbps
    said = f"{gbps:.1f} Gb/s at {row.size} bytes = {fraction:.1%} of the port's {rate_gbps:g} Gb/s"
    if fraction < min_fraction:
        return BwVerdict("fail", said + f" (at least {min_fraction:.0%} expected)", gbps, rate_gbps, fraction, row.size)
    return BwVerdict("ok", said, gbps, rate_gbps, fraction, row.size)


# -- the two ends of a pair's run (the sweep's rdma.bandwidth between two nodes) ---------------


@dataclass
class SideRun:
    """What one end printed for one run (`HCA:host` or `HCA:GPU`) of the pair script."""

    state: str = ""  # the port's sysfs state, as read ("4: ACTIVE"), "" when the file is absent
    rate: str = ""  # its sysfs rate ("400 Gb/sec (4X NDR)")
    output: str = ""  # the tool's stdout and stderr
    rc: int | None = None  # None: no end line (the run was cut)
    skipped: bool = False  # not run: an earlier run of the pair timed out
    no_server: bool = False  # the client found no server listening within its time


@dataclass
class PairSide:
    """One node's end of a pair's run: its role, whether the tool is there, its runs."""

    node: str
    role: str  # "server" or "client"
    missing: str = ""  # the tool it did not find
    runs: dict[str, SideRun] = field(default_factory=dict)


_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_MARK = re.compile(r"^@@cc (node|missing|run|end|skip|noserver)\b ?(.*)$")
_RUN_MARK = re.compile(r"^(\S+) state=(.*?) rate=(.*)$")
_END_MARK = re.compile(r"^(\S+) rc=(-?\d+)$")


def read_pair_sides(text: str) -> dict[str, PairSide]:
    """`srun --label` output of the pair script (facts/scripts/rdma_pair.sh) on two nodes -> each
    node's end (pure). Lines are `TASK: text`; each task names its node and role first. A task
    that printed no `@@cc node=` line is left out (it never started); unlabelled lines (srun's
    own) are ignored."""
    tasks: dict[str, PairSide] = {}
    current: dict[str, str] = {}  # task -> the run being printed
    for raw in text.splitlines():
        m = _LABEL.match(raw)
        if not m:
            continue
        task, line = m.group(1), m.group(2)
        mark = _MARK.match(line)
        side = tasks.get(task)
        if mark is None:
            run = current.get(task)
            if side is not None and run is not None:
                side.runs[run].output += line + "\n"
            continue
        kind, rest = mark.group(1), mark.group(2)
        if kind == "node":
            fields = dict(part.partition("=")[::2] for part in line.split()[1:])  # node=NAME role=ROLE
            tasks[task] = PairSide(fields.get("node", ""), fields.get("role", ""))
        elif side is None:
            continue
        elif kind == "missing":
            side.missing = rest.strip()
        elif kind == "run" and (r := _RUN_MARK.match(rest)):
            current[task] = r.group(1)
            side.runs[r.group(1)] = SideRun(r.group(2).strip(), r.group(3).strip())
        elif kind == "noserver" and task in current:
            side.runs[current[task]].no_server = True
        elif kind == "end" and (e := _END_MARK.match(rest)) and e.group(1) in side.runs:
            side.runs[e.group(1)].rc = int(e.group(2))
            current.pop(task, None)
        elif kind == "skip":
            side.runs[rest.strip()] = SideRun(skipped=True)
    return {side.node: side for side in tasks.values() if side.node}


__all__ = [
    "GBPS_PER_UNIT",
    "MIN_JUDGED_SIZE",
    "PACKAGE",
    "BwRow",
    "BwRun",
    "BwVerdict",
    "PairSide",
    "PerftestParseError",
    "SideRun",
    "bw_argv",
    "judge_bw",
    "parse_bw",
    "read_pair_sides",
]
