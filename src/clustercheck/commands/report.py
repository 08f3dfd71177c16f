"""`clustercheck report`: merge results of many runs into one fleet report.

The recipe for thousands of nodes: let Slurm run clustercheck on every node at once,

    srun --nodes=N --ntasks-per-node=1 clustercheck run --local --profile P --format jsonl > results.jsonl

then merge what they wrote: `clustercheck report results.jsonl [more files or folders]`.
Inputs are jsonl (one object per host and check, as `run --format jsonl` writes) or json
reports (`run --format json`); a folder is read for its *.jsonl and *.json files. A host
seen in several inputs keeps its last results. The exit code is the merged report's.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from clustercheck import __version__, cli
from clustercheck.errors import UsageError
from clustercheck.result import CheckResult, HostReport, Report


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    junit = "junit"
    html = "html"
    prometheus = "prometheus"


def _inputs(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted([*path.glob("*.jsonl"), *path.glob("*.json")])
            if not found:
                raise UsageError(f"{path}: no *.jsonl or *.json results in this folder")
            files += found
        elif path.is_file() or str(path) == "-":
            files.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return files


def _check(obj: Any, where: str) -> tuple[str, CheckResult]:
    if not isinstance(obj, dict) or not isinstance(obj.get("host"), str):
        raise UsageError(f'{where}: not a clustercheck result (a jsonl line needs "host", "id" and "status")')
    try:
        return obj["host"], CheckResult.from_json(obj)
    except (KeyError, ValueError, TypeError) as exc:
        raise UsageError(f"{where}: not a clustercheck result: {exc}") from None


def read_results(paths: list[Path]) -> Report:
    """Merge jsonl/json result files into one report; UsageError names the file and line."""
    import sys

    hosts: dict[str, list[CheckResult]] = {}
    profiles: list[str] = []
    for path in _inputs(paths):
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8", errors="replace")
        try:  # a whole json report? (a jsonl file fails at its second line, cheaply)
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "hosts" in doc:
            if not isinstance(doc["hosts"], dict):
                raise UsageError(f'{path}: not a clustercheck json report ("hosts" is not a mapping)')
            profiles.append(str(doc.get("profile", "")))
            for host, body in doc["hosts"].items():
                checks = body.get("checks") if isinstance(body, dict) else None
                if not isinstance(checks, list):
                    raise UsageError(f'{path}: host {host!r} has no "checks" list')
                hosts[host] = [_check({**c, "host": host}, f"{path}: host {host}")[1] for c in checks]
            continue
        seen_here: dict[str, list[CheckResult]] = {}
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise UsageError(f"{path}:{n}: not a JSON line (is this `run --format jsonl` output?)") from None
            host, result = _check(obj, f"{path}:{n}")
            seen_here.setdefault(host, []).append(result)
            if isinstance(obj.get("profile"), str):
                profiles.append(obj["profile"])
        hosts.update(seen_here)
    if not hosts:
        raise UsageError("no results in " + ", ".join(map(str, paths)))
    names = sorted(set(profiles) - {""})
    return Report(__version__, ",".join(names) or "?", tuple(HostReport(h, tuple(c)) for h, c in hosts.items()))


def report(
    inputs: Annotated[list[Path], typer.Argument(help="jsonl/json result files or folders of them ('-': stdin).")],
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="Report format.")] = ReportFormat.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here (atomically).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Every host in full, with evidence.")] = False,
) -> None:
    """Merge results of many runs (e.g. one per node under srun) into one fleet report."""
    from clustercheck import formats
    from clustercheck.analyzers.fleet import summarize

    merged = read_results(inputs)

    def render(out: Any) -> None:
        if fmt is ReportFormat.json:
            json.dump({**merged.to_json(), "fleet": summarize(merged).to_json()}, out, indent=2)
            out.write("\n")
        else:
            formats.render(merged, fmt.value, out, verbose=verbose)

    cli.write_output(render, output)
    cli.state.exit_code = int(merged.exit_code)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
