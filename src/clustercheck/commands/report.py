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
from pathlib import Path
from typing import Annotated, Any

import typer

from clustercheck import __version__, cli
from clustercheck.errors import UsageError
from clustercheck.formats import Format
from clustercheck.result import CheckResult, HostReport, Report


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


def _where_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# field -> (accepted types, what it must be); a missing optional field takes its default.
_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "summary": ((str,), "a string"),
    "remedy": ((str,), "a string"),
    "evidence": ((list,), "a list of strings"),
    "duration_s": ((int, float), "a number"),
    "data": ((dict,), "an object"),
}


def _check(obj: Any, where: str) -> tuple[str, CheckResult]:
    """One result, or UsageError (exit 64) naming `where` and what is wrong with it."""
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: not a clustercheck result: {_where_type(obj)}, not an object")
    for name in ("host", "id", "status"):
        if not isinstance(obj.get(name), str):
            got = "missing" if name not in obj else f"{_where_type(obj[name])}, not a string"
            raise UsageError(
                f'{where}: not a clustercheck result: "{name}" is {got} (a result needs "host", "id" and "status")'
            )
    for name, (types, what) in _FIELDS.items():
        value = obj.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise UsageError(f'{where}: not a clustercheck result: "{name}" is {_where_type(value)}, not {what}')
    if any(not isinstance(e, str) for e in obj.get("evidence") or ()):
        raise UsageError(f'{where}: not a clustercheck result: "evidence" holds something that is not a string')
    try:
        return obj["host"], CheckResult.from_json(obj)
    except (KeyError, ValueError, TypeError) as exc:
        raise UsageError(f"{where}: not a clustercheck result: {exc}") from None


#: Per-line warnings about skipped lines; beyond this many, only the count.
MAX_LINE_WARNINGS = 10


class _Skipped:
    """Truncated jsonl lines (a node killed mid-write): each is skipped with a warning, and counted."""

    def __init__(self) -> None:
        self.where: list[str] = []

    def add(self, where: str, why: str) -> None:
        import sys

        self.where.append(where)
        if len(self.where) <= MAX_LINE_WARNINGS:
            print(f"clustercheck: warning: {where}: {why}", file=sys.stderr)

    def close(self) -> None:
        import sys

        if self.where:
            n = len(self.where)
            lines = "line" if n == 1 else "lines"
            print(
                f"clustercheck: warning: skipped {n} truncated {lines} ({', '.join(self.where[:3])}"
                f"{', ...' if n > 3 else ''}): the hosts on them may lack results",
                file=sys.stderr,
            )


def _glued(line: str) -> Any:
    """A whole result written right after a truncated one on the same line, or None."""
    at = line.find('{"host"', 1)
    while at > 0:
        try:
            return json.loads(line[at:])
        except ValueError:
            at = line.find('{"host"', at + 1)
    return None


def read_results(paths: list[Path]) -> Report:
    """Merge jsonl/json result files into one report; UsageError names the file and line.

    A jsonl line cut short (a node killed mid-write) is skipped with a warning naming the
    file and line; anything else that is not a result is bad input (exit 64).
    """
    import sys

    hosts: dict[str, list[CheckResult]] = {}
    profiles: list[str] = []
    skipped = _Skipped()
    for path in _inputs(paths):
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
        try:  # a whole json report? (a jsonl file fails at its second line, cheaply)
            doc = json.loads(text)
        except ValueError as exc:
            doc = None
            if text.lstrip().startswith("{\n") or text.strip() == "{":  # an indented json report, cut short
                raise UsageError(f"{path}: not a whole json report: {exc} (was it cut short?)") from None
        if isinstance(doc, dict) and "hosts" in doc:
            if not isinstance(doc["hosts"], dict):
                raise UsageError(f'{path}: not a clustercheck json report ("hosts" is not a mapping)')
            profiles.append(str(doc.get("profile", "")))
            for host, body in doc["hosts"].items():
                checks = body.get("checks") if isinstance(body, dict) else None
                if not isinstance(checks, list):
                    got = "missing" if checks is None else _where_type(checks)
                    raise UsageError(f'{path}: host {host!r}: "checks" is {got}, not a list of results')
                hosts[host] = [
                    _check({**c, "host": host} if isinstance(c, dict) else c, f"{path}: host {host!r}, check {n}")[1]
                    for n, c in enumerate(checks, 1)
                ]
            continue
        if isinstance(doc, (list, str, int, float)) or (isinstance(doc, dict) and "id" not in doc):
            raise UsageError(f"{path}: not a clustercheck json report or jsonl results: it holds {_where_type(doc)}")
        seen_here: dict[str, list[CheckResult]] = {}
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                if not line.lstrip().startswith("{"):
                    raise UsageError(f"{path}:{n}: not a JSON line (is this `run --format jsonl` output?)") from None
                obj = _glued(line)
                kept = "; kept the whole result written after it on that line" if obj is not None else ""
                skipped.add(f"{path}:{n}", f"a JSON line cut short (a node killed mid-write?): skipped it{kept}")
                if obj is None:
                    continue
            host, result = _check(obj, f"{path}:{n}")
            seen_here.setdefault(host, []).append(result)
            if isinstance(obj.get("profile"), str):
                profiles.append(obj["profile"])
        hosts.update(seen_here)
    skipped.close()
    if not hosts:
        raise UsageError("no results in " + ", ".join(map(str, paths)))
    names = sorted(set(profiles) - {""})
    return Report(__version__, ",".join(names) or "?", tuple(HostReport(h, tuple(c)) for h, c in hosts.items()))


def report(
    inputs: Annotated[list[Path], typer.Argument(help="jsonl/json result files or folders of them ('-': stdin).")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here (atomically).")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="The problem hosts' checks in full, with evidence.")
    ] = False,
    by: Annotated[
        str, typer.Option("--by", help="Several hosts in a table: problems by 'check', or one line per 'host'.")
    ] = "check",
    all_hosts: Annotated[
        bool,
        typer.Option("--all", help="Several hosts in a table: every host's checks, not only the problem hosts'."),
    ] = False,
) -> int:
    """Merge results of many runs (e.g. one per node under srun) into one fleet report."""
    from clustercheck import formats
    from clustercheck.analyzers.fleet import summarize

    formats.check_view(fmt.value, by=by, all_hosts=all_hosts)
    merged = read_results(inputs)

    def render(out: Any) -> None:
        if fmt is Format.json:
            json.dump({**merged.to_json(), "fleet": summarize(merged).to_json()}, out, indent=2)
            out.write("\n")
        else:
            formats.render(merged, fmt.value, out, verbose=verbose, by=by, all_hosts=all_hosts)

    cli.write_output(render, output)
    return int(merged.exit_code)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
