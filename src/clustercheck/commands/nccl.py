"""`clustercheck nccl-log` and `clustercheck nccl-tests`: read NCCL's own output, say what it means.

Host-free: they read files on this machine (or stdin), never a node. Exit codes follow the
verdict: 0 ok, 1 warn, 2 fail, 64 bad input (a missing or unreadable file, no NCCL lines, no
nccl-tests table).

The work is done by `run_nccl_log` and `run_nccl_tests`; `register()` wraps them as Typer
commands. `nccl-log` with plain arguments skips Typer (cli.py's dispatch calls
`fast_nccl_log`): importing Typer costs more than reading a 10 MB log, and a multi-GB log is
read in a few seconds, so its start-up shows. The options and their checks are the Typer
command's; anything else (`--help`, a mistake) goes to Typer, which answers its usual way.
"""

# No `from __future__ import annotations`: the Typer commands are defined inside register(),
# where typer is imported, and Typer reads their annotations as objects.

import json
import sys
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

from clustercheck.errors import UsageError
from clustercheck.result import ExitCode

if TYPE_CHECKING:
    import typer


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


class Expect(str, Enum):
    ib = "ib"
    roce = "roce"
    ofi = "ofi"
    socket = "socket"


def register(app: "typer.Typer") -> None:
    import typer

    def nccl_log(
        files: Annotated[
            list[str],
            typer.Argument(
                help="NCCL_DEBUG=INFO logs (job output, one file per rank or all ranks in one); - reads stdin."
            ),
        ],
        fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
        expect: Annotated[
            Expect | None,
            typer.Option(
                "--expect",
                help="The network inter-node traffic must use: ib (IB verbs over InfiniBand or RoCE), roce, "
                "ofi (aws-ofi-nccl/EFA) or socket. Anything else fails.",
            ),
        ] = None,
        expect_gdr: Annotated[
            bool, typer.Option("--expect-gdr", help="Fail (not warn) when inter-node channels lack GPUDirect RDMA.")
        ] = False,
        jobs: Annotated[
            int | None,
            typer.Option("--jobs", "-j", min=1, help="Processes for a large file (default: up to 4, by the CPUs)."),
        ] = None,
    ) -> int:
        """Which network NCCL used (and why), GPUDirect RDMA, and transport errors, from NCCL_DEBUG=INFO logs.

        Inter-node traffic over TCP sockets (a fallback from InfiniBand/RoCE/EFA, or where --expect
        asks for RDMA) fails, as do transport errors; network channels without GPUDirect RDMA warn
        (fail with --expect-gdr). Exit 0 ok, 1 warn, 2 fail, 64 bad input.
        """
        return run_nccl_log(files, fmt, expect, expect_gdr, jobs)

    def nccl_tests(
        file: Annotated[str, typer.Argument(help="nccl-tests output (all_reduce_perf and friends); - reads stdin.")],
        min_busbw: Annotated[
            float | None,
            typer.Option("--min-busbw", min=0, help="Fail when the peak bus bandwidth is below this many GB/s."),
        ] = None,
        min_avg_busbw: Annotated[
            float | None,
            typer.Option("--min-avg-busbw", min=0, help="Fail when 'Avg bus bandwidth' is below this many GB/s."),
        ] = None,
        fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
    ) -> int:
        """Read an nccl-tests result table: size -> algbw/busbw, Avg bus bandwidth, wrong results.

        The judged figure is the peak bus bandwidth (best of out-of-place and in-place over all
        sizes); wrong results or out-of-bounds values fail. Exit 0 ok, 1 warn, 2 fail, 64 bad input.
        """
        return run_nccl_tests(file, min_busbw, min_avg_busbw, fmt)

    app.command("nccl-log")(nccl_log)
    app.command("nccl-tests")(nccl_tests)


# -- nccl-log without Typer -------------------------------------------------------------------------

_LOG_OPTIONS = {"--format": "format", "-f": "format", "--expect": "expect", "--jobs": "jobs", "-j": "jobs"}


def fast_nccl_log(args: list[str]) -> int | None:
    """Run `nccl-log ARGS` (the words after the command) without Typer when every argument is a
    plain, valid one: its exit code; None hands them to Typer. Options as the Typer command's: --format/-f
    table|json, --expect ib|roce|ofi|socket, --expect-gdr, --jobs/-j N (N >= 1), as `--opt VALUE`,
    `--opt=VALUE` or `-o VALUE`, and the files (- for stdin), in any order."""
    files: list[str] = []
    opts: dict[str, str] = {}
    expect_gdr = False
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-" or not arg.startswith("-"):
            files.append(arg)
            continue
        if arg == "--expect-gdr" and not expect_gdr:
            expect_gdr = True
            continue
        # `--opt=VALUE`; a short option's `-f=json` means the value '=json' to Typer (click): not plain
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        key = _LOG_OPTIONS.get(name)
        if key is None or key in opts or (not eq and not rest):
            return None  # --help, --, an unknown or repeated option, a missing value: Typer's answer
        opts[key] = inline if eq else rest.pop(0)
    try:
        fmt = OutputFormat(opts.get("format", "table"))
        expect = Expect(opts["expect"]) if "expect" in opts else None
        jobs = int(opts["jobs"]) if "jobs" in opts else None
    except ValueError:
        return None
    if not files or (jobs is not None and jobs < 1):
        return None
    return run_nccl_log(files, fmt, expect, expect_gdr, jobs)


def run_nccl_log(files: list[str], fmt: OutputFormat, expect: Expect | None, expect_gdr: bool, jobs: int | None) -> int:
    """`nccl-log`: scan the files as one job, print the report; the exit code of its verdict."""
    from clustercheck.analyzers import nccl_log as analyzer

    scanner = analyzer.Scanner()
    n_jobs = jobs if jobs is not None else analyzer.default_jobs()
    for name in files:
        if name == "-":
            scanner.feed_stream(sys.stdin.buffer, "-")
            continue
        path = Path(name)
        _check_readable(path)
        try:
            scanner.feed_path(name, jobs=n_jobs)
        except OSError as exc:
            raise UsageError(f"{name}: cannot be read: {exc.strerror or exc}") from None
    report = scanner.report(expect=expect.value if expect else None, expect_gdr=expect_gdr)
    if not report.nccl_lines and not report.net_channels and not report.intra_node and not report.hosts:
        shown = ", ".join(files)
        raise UsageError(
            f"{shown}: no NCCL log lines found (expected NCCL_DEBUG=INFO output: 'host:pid:tid [dev] NCCL INFO ...')"
        )
    if fmt is OutputFormat.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        _render_log(report, sys.stdout)
    return int(ExitCode.for_status(report.status))


def run_nccl_tests(file: str, min_busbw: float | None, min_avg_busbw: float | None, fmt: OutputFormat) -> int:
    """`nccl-tests`: read the result table, print the report; the exit code of its verdict."""
    from clustercheck.analyzers import nccl_tests as analyzer

    if file == "-":
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
    else:
        path = Path(file)
        _check_readable(path)
        try:
            text = path.read_bytes().decode("utf-8", "replace")
        except OSError as exc:
            raise UsageError(f"{file}: cannot be read: {exc.strerror or exc}") from None
    try:
        parsed = analyzer.parse(text, file)
    except analyzer.NotATable as exc:
        raise UsageError(str(exc)) from None
    report = analyzer.judge(parsed, min_busbw=min_busbw, min_avg_busbw=min_avg_busbw)
    if fmt is OutputFormat.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        _render_tests(report, sys.stdout)
    return int(ExitCode.for_status(report.status))


def _check_readable(path: Path) -> None:
    import stat

    try:
        if not path.exists():
            raise UsageError(f"{path}: no such file")
        if path.is_dir():
            raise UsageError(f"{path}: is a directory, not a log file")
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO blocks on open, /dev/zero never ends
            raise UsageError(f"{path}: not a regular file (pipe it to `clustercheck nccl-log -` to read a stream)")
    except OSError as exc:  # a name too long, a NUL byte
        raise UsageError(f"{path}: cannot be read: {exc}") from None


# -- output ---------------------------------------------------------------------------------------

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim", "error": "magenta"}


def _where(message: str, refs: list[str], lines: list[int], several_files: bool) -> str:
    """The lines a finding rests on, except those its message already cites."""
    pairs = [(r, n) for r, n in zip(refs, lines, strict=False) if f"line {n})" not in message]
    if not pairs:
        return ""
    if several_files:
        return " (" + ", ".join(_short(r) for r, _ in pairs[:4]) + ")"
    return f" (line{'s' if len(pairs) > 1 else ''} " + ", ".join(str(n) for _, n in pairs[:4]) + ")"


def _short(ref: str) -> str:
    """'/long/path/rank3.log:12' -> 'rank3.log:12'."""
    path, _, line = ref.rpartition(":")
    return f"{Path(path).name}:{line}"


def _render_log(report: Any, out: IO[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    data = report.to_json()
    console = Console(file=out, highlight=False)
    nodes = {True: "single node", False: "multi-node", None: "nodes unknown"}[data["single_node"]]
    gdr = {True: "yes", False: "no", None: "n/a"}[data["gpudirect_rdma"]]
    head = [
        f"NCCL {data['nccl_version'] or '?'}",
        f"network: {data['network'] or '?'}" + (f" ({data['link_layer']})" if data["link_layer"] else ""),
        f"GPUDirect RDMA: {gdr}",
        f"{data['net_channels']} network channels",
        f"{len(data['hosts'])} host{'s' if len(data['hosts']) != 1 else ''}, {nodes}",
    ]
    console.print(escape(" · ".join(head)))
    table = Table("host", "network (why)", "HCAs / interfaces", "GDR", "intra-node", "NCCL")
    for name, h in sorted(data["hosts"].items()):
        devices = h["devices"] or h["interfaces"]
        dev_text = _devices(devices) + (f"\nOOB {h['oob']}" if h["oob"] else "")
        net = f"{h['network'] or '?'}" + (f" ({h['net_plugin']})" if h["net_plugin"] else "")
        if h["reason"]:
            net += f"\n{h['reason']}"
        intra = ", ".join(h["intra_node"]) or "-"
        if h["nvls_channels"]:
            intra += f", NVLS ({h['nvls_channels']} channels)"
        host = escape(name) + (f"\n[red]{h['errors']} errors[/]" if h["errors"] else "")
        table.add_row(
            host,
            escape(net),
            escape(dev_text),
            {True: "yes", False: "[red]no[/]", None: "-"}[h["gpudirect_rdma"]],
            escape(intra),
            escape((h["nccl_version"] or "-").split("+", 1)[0]),
        )
    if data["hosts"]:
        console.print(table)
    several = len(data["files"]) > 1
    for f in data["findings"]:
        style = _STYLE.get(f["status"], "")
        console.print(
            f"[{style}]{f['status']:>4}[/]  "
            + escape(f["message"] + _where(f["message"], f["refs"], f["lines"], several))
        )
        if f.get("remedy") and f["status"] in ("warn", "fail"):
            console.print("      " + escape("fix: " + f["remedy"]), style="dim")
    grouped: dict[str, list[str]] = {}
    for e in data["errors"]:
        grouped.setdefault(e["text"], []).append(_short(f"{e['file']}:{e['line']}") if several else str(e["line"]))
    for text, where in list(grouped.items())[:10]:
        times = f" (x{len(where)})" if len(where) > 1 else ""
        label = "lines" if len(where) > 1 and not several else ("line" if not several else "at")
        console.print(f"[red]error[/]{times} {label} {escape(', '.join(where[:6]))}: {escape(text)}")
    if data["error_count"] > len(data["errors"]):
        console.print(f"      ... {data['error_count'] - len(data['errors'])} more errors (see --format json)")
    if data["garbled_lines"] or data["skipped_long_lines"]:
        console.print(
            f"skipped: {data['garbled_lines']} garbled lines, {data['skipped_long_lines']} lines over 4 MiB",
            style="dim",
        )
    status = data["status"]
    console.print(f"status: [{_STYLE[status]}]{status}[/]")


def _devices(devices: list[str]) -> str:
    if len(devices) <= 4:
        return " ".join(devices)
    links: dict[str, int] = {}
    for d in devices:
        link = d.split("/", 1)[1] if "/" in d else ""
        links[link] = links.get(link, 0) + 1
    names = [d.split(":", 1)[0] for d in devices]
    return f"{names[0]} .. {names[-1]}: " + ", ".join(f"{n}x {k or '?'}" for k, n in sorted(links.items()))


def _render_tests(report: Any, out: IO[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from clustercheck.analyzers.nccl_tests import _size

    data = report.to_json()
    console = Console(file=out, highlight=False)
    hosts = f", {len(data['hosts'])} hosts" if data["hosts"] else ""
    console.print(escape(f"{data['file']}: {len(data['rows'])} sizes, {data['ranks'] or '?'} ranks{hosts}"))
    table = Table("size", "type", "out-of-place algbw", "busbw", "in-place algbw", "busbw", "check")
    for r in data["rows"]:
        table.add_row(
            _size(r["size"]),
            r["type"],
            f"{r['out_of_place']['algbw']:.2f}",
            f"{r['out_of_place']['busbw']:.2f}",
            f"{r['in_place']['algbw']:.2f}",
            f"{r['in_place']['busbw']:.2f}",
            escape(f"{r['out_of_place']['check']}/{r['in_place']['check']}"),
        )
    console.print(table)
    if data["avg_busbw"] is not None:
        console.print(f"Avg bus bandwidth: {data['avg_busbw']:g} GB/s")
    for f in data["findings"]:
        style = _STYLE.get(f["status"], "")
        lines = f" (line {f['lines'][0]})" if f["lines"] else ""
        console.print(f"[{style}]{f['status']:>4}[/]  " + escape(f["message"] + lines))
    console.print(f"status: [{_STYLE[data['status']]}]{data['status']}[/]")
