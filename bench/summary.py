#!/usr/bin/env python3
"""One table of every benchmark ratio, at the top of bench/RESULTS.md (`make bench` runs it last).

Reads what the benchmarks wrote, measures nothing itself:

  bench/RESULTS.md  the prolog section (bench/bench.py: clustercheck vs LBNL NHC, the single
                    file), the nccl-log section (bench/bench_nccl.py: vs `grep -c`, each size and
                    process count), the storage section (bench/bench_storage.py: vs fio), the
                    sweep section (bench/bench_sweep.py: its own cost over the loopback Slurm)
  bench/FLEET.md    the fleet section (bench/bench_fleet.py: vs clush and pdsh)

and writes, between `<!-- bench_summary -->` markers at the top of RESULTS.md, one row per
ratio: the target, the figure, whether it held, when it was measured and the exact commands.
A section that is missing, or whose target was not evaluated (NHC not given), says so in its
row: nothing is left out silently. Exits 0 when it wrote the table, 2 when RESULTS.md is missing.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
START, END = "<!-- bench_summary -->", "<!-- /bench_summary -->"


@dataclass
class Row:
    area: str
    target: str
    figure: str
    held: str  # "yes", "no", or why it was not judged
    when: str
    command: str


def section(text: str, name: str) -> str | None:
    """The text between `<!-- name -->` and `<!-- /name -->`, or None."""
    m = re.search(rf"<!-- {name} -->(.*?)<!-- /{name} -->", text, re.S)
    return m.group(1) if m else None


def first(pattern: str, text: str, default: str = "") -> str:
    m = re.search(pattern, text, re.M)
    return m.group(1).strip() if m else default


def when_of(text: str) -> str:
    return first(r"^Date:\s*(.+?)\s*$", text) or first(r"^(\d{4}-\d\d-\d\d \d\d:\d\d UTC)", text) or "?"


def tables(text: str) -> list[tuple[int, list[str], list[list[str]]]]:
    """Markdown tables in `text`: (offset, header cells, body rows)."""
    out = []
    lines = text.splitlines(keepends=True)
    pos, i = 0, 0
    offsets = []
    for ln in lines:
        offsets.append(pos)
        pos += len(ln)
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            body, j = [], i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                body.append([c.strip() for c in lines[j].strip().strip("|").split("|")])
                j += 1
            out.append((offsets[i], header, body))
            i = j
        else:
            i += 1
    return out


def ratio_of(cell: str) -> float | None:
    m = re.search(r"([0-9]+(?:\.[0-9]+)?)\s*x", cell)
    return float(m.group(1)) if m else None


def prolog_rows(results: str) -> list[Row]:
    text = section(results, "bench_prolog")
    if text is None:  # written before the markers: the prolog part is what precedes the first section
        text = results.split(END, 1)[-1].split("<!-- bench_", 1)[0]
    if "Command:" not in text:
        return [Row("prolog", "at most NHC's time on the same checks", "not measured", "not run", "?", "")]
    when, command = when_of(text), first(r"^Command:\s*`(.+)`", text)
    rows = []
    for held, what, mine, nhc in re.findall(
        r"^TARGET (HELD|MISSED): (.+?) median ([0-9.]+) ms (?:<=|>) NHC median ([0-9.]+) ms", text, re.M
    ):
        rows.append(
            Row(
                "prolog",
                f"{what} at most NHC's time (same checks, the NHC way)",
                f"{float(mine) / float(nhc):.2f}x ({mine} ms vs NHC {nhc} ms, medians)",
                "yes" if held == "HELD" else "no",
                when,
                f"`{command}`",
            )
        )
    missing = first(r"^TARGET NOT EVALUATED: (.+?)\s*$", text)
    if missing:
        rows.append(Row("prolog", "at most NHC's time on the same checks", "NHC not run", missing, when, command))
    for label, figure in re.findall(r"^(single file[^:]*):\s*(.+?)\s*$", text, re.M):
        if "TARGET" not in label:
            rows.append(Row("prolog", label, figure, "(reported, no target)", when, f"`{command}`"))
    nvml = first(r"^NVML start-up:\s*(.+?)\s*$", text)
    if nvml:  # reported apart from the targets (issue 16); "not measured" where there is no GPU
        held = "not run" if nvml.startswith("not measured") else "(reported, no target)"
        rows.append(Row("prolog", "NVML start-up, apart from the prolog rows", nvml, held, when, f"`{command}`"))
    return rows


def nccl_rows(results: str) -> list[Row]:
    text = section(results, "bench_nccl")
    if text is None:
        return [Row("nccl-log", "at most 3x `grep -c NCCL`", "not measured", "not run", "?", "")]
    when = when_of(text)
    rows = []
    for offset, header, body in tables(text):
        lower = [h.lower() for h in header]
        col = next((k for k, h in enumerate(lower) if "/ grep" in h), None)
        if col is None:
            continue
        before = text[:offset]
        command = (re.findall(r"^Command:\s*`(.+)`", before, re.M) or [""])[-1]
        size = (re.findall(r"^(?:Log|###)[: ]\s*(.+?)\s*$", before, re.M) or [""])[-1]
        size_col = next((k for k, h in enumerate(lower) if h in ("size", "log", "log size", "file")), None)
        for cells in body:
            if len(cells) <= col or cells[0].lower().startswith("grep"):
                continue
            ratio = ratio_of(cells[col])
            where = cells[size_col] if size_col is not None and size_col < len(cells) else size.split(", ")[0]
            held = "?" if ratio is None else ("yes" if ratio <= 3 else "no")
            said = next((cells[k] for k, h in enumerate(lower) if h == "speed target held" and k < len(cells)), "")
            held = said if said in ("yes", "no") else held  # the section's own verdict, when it has one
            per_row = next((cells[k] for k, h in enumerate(lower) if h == "commands" and k < len(cells)), "")
            shown = f"`{command}` runs {per_row}" if per_row else f"`{command}`"
            rows.append(
                Row("nccl-log", f"{cells[0]} at most 3x `grep -c NCCL` ({where})", cells[col], held, when, shown)
            )
    for verdict, what in re.findall(r"^TARGET (HELD|MISSED): (.*?memory.*?)\s*$", text, re.M):
        command = first(r"^Command:\s*`(.+)`", text)
        rows.append(
            Row("nccl-log", "peak memory under 100 MB", what, "yes" if verdict == "HELD" else "no", when, command)
        )
    return rows or [Row("nccl-log", "at most 3x `grep -c NCCL`", "no table with a `/ grep` column", "?", when, "")]


def storage_rows(results: str) -> list[Row]:
    text = section(results, "bench_storage")
    if text is None:
        return [Row("storage", "within +-15% of fio", "not measured", "not run", "?", "")]
    when = when_of(text)
    command = first(r"^Command:\s*`(.+)`", text, "python bench/bench_storage.py")
    fio_cmds = {f"{rw} {bs}": c for c, rw, bs in re.findall(r"^- `(fio .*?--rw=(\w+) --bs=(\w+).*?)`", text, re.M)}
    which = {"seq MB/s": "read 1M", "rand 4 KiB IOPS": "randread 4k", "rand 128 KiB IOPS": "randread 128k"}
    rows = []
    for verdict, folder, fstype, key, ratio, how in re.findall(
        r"^TARGET (HELD|MISSED): storage (\S+) \((\S+)\) (.+?): clustercheck / fio ([0-9.]+) \((.+?)\)", text, re.M
    ):
        twin = fio_cmds.get(which.get(key, ""), "fio (see the section)").replace("TMP", f"{folder}/TMP")
        rows.append(
            Row(
                "storage",
                f"{key} within +-15% of fio, same jobs ({folder}, {fstype})",
                f"{float(ratio):.2f}x ({how})",
                "yes" if verdict == "HELD" else "no",
                when,
                f"`{command}` runs `python3 -c SCRIPT ARGS` vs `{twin}`",
            )
        )
    for offset, header, body in tables(text):  # what the worker processes bought over one process
        if "clustercheck, 1 process" not in header:
            continue
        folder = (re.findall(r"^### (.+?)\s*$", text[:offset], re.M) or ["?"])[-1]
        # the third column: a process per reader where the default gave fewer, else a process per CPU
        column = next((c for c in ("a process per reader", "a process per CPU") if f"{c} / fio" in header), None)
        each = header.index(f"{column} / fio") if column else None
        said = {
            "a process per reader": "a process per reader (as many as fio's jobs)",
            "a process per CPU": "a process per CPU (readers sharing one)",
        }
        for cells in body:
            if column and each is not None and cells[0] == "rand 4 KiB IOPS" and len(cells) > each and cells[each]:
                rows.append(
                    Row(
                        "storage",
                        f"rand 4 KiB IOPS, {said[column]} over fio ({folder})",
                        f"{cells[each]}x ({cells[3]} vs fio {cells[4]} IOPS)",
                        "(reported, no target)",
                        when,
                        f"`{command}`",
                    )
                )
            if cells[0] == "rand 4 KiB IOPS" and cells[2]:
                many, one = (float(c.replace(",", "")) for c in cells[1:3])
                rows.append(
                    Row(
                        "storage",
                        f"rand 4 KiB IOPS, worker processes over one process ({folder})",
                        f"{many / one:.2f}x ({cells[1]} vs {cells[2]} IOPS)",
                        "(reported, no target)",
                        when,
                        f"`{command}`",
                    )
                )
    return rows or [Row("storage", "within +-15% of fio", "no TARGET lines in the section", "?", when, command)]


def fleet_rows(fleet: str | None) -> list[Row]:
    if not fleet:
        return [
            Row("fleet", "at most pdsh's time (curve25519)", "not measured (no bench/FLEET.md)", "not run", "?", "")
        ]
    when = when_of(fleet)
    commands = dict(re.findall(r"^- ([\w-]+): `(.+)`\s*$", fleet, re.M))
    mine = commands.get("clustercheck", first(r"^Command:\s*`(.+)`", fleet))
    rows = []
    for peer, ratio in re.findall(r"^clustercheck / (.+?): ([0-9.]+)x", fleet, re.M):
        tool = peer.split()[0]
        key = tool + ("-c25519" if "curve25519" in peer else "")
        r = float(ratio)
        rows.append(
            Row(
                "fleet",
                f"at most {peer}'s wall time, every host judged",
                f"{r:.2f}x",
                "yes" if r <= 1.0 else "no",
                when,
                f"`{mine}` vs `{commands.get(key, peer)}`",
            )
        )
    return rows or [Row("fleet", "at most pdsh's time", "no ratio lines in bench/FLEET.md", "?", when, "")]


def sweep_rows(results: str) -> list[Row]:
    text = section(results, "bench_sweep")
    if text is None:
        return [Row("sweep", "own part per node at most 1 s; fan-out", "not measured", "not run", "?", "")]
    when = when_of(text)
    command = first(r"^Command:\s*`(.+)`", text, "python bench/bench_sweep.py")
    rows = [
        Row("sweep", target, figure, "yes" if verdict == "HELD" else "no", when, f"`{command}`")
        for verdict, target, figure in re.findall(r"^TARGET (HELD|MISSED): sweep (.+?) ([0-9.]+ ?s?x? .*)$", text, re.M)
    ]
    return rows or [Row("sweep", "own part per node; fan-out", "no TARGET lines in the section", "?", when, command)]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def per_area(rows: list[Row]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.area] = counts.get(r.area, 0) + 1
    return list(counts.items())


def render(rows: list[Row]) -> str:
    judged = [r for r in rows if r.held in ("yes", "no")]
    held = [r for r in judged if r.held == "yes"]
    missed = [r for r in judged if r.held == "no"]
    out = [
        START,
        "# Benchmarks: every ratio in one table",
        "",
        "Written by `bench/summary.py`, the last step of `make bench`, from the sections below and",
        "bench/FLEET.md (each measured in its own run; the `measured` column says when). A ratio is",
        "clustercheck's figure over the peer's, medians, on this machine (shared and noisy: compare",
        "figures of the same run only). Commands are shown as each benchmark wrote them; CFG, TMP and",
        "SCRIPT are explained in their sections.",
        "",
        f"**{len(held)} of {len(judged)} targets held**"
        + (f"; missed: {', '.join(f'{a} {n}' for a, n in per_area(missed))}" if missed else "")
        + (f"; {len(rows) - len(judged)} not judged (reported only, or not run)" if len(rows) > len(judged) else ""),
        "",
        "| area | target | figure | held | measured | command |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| {r.area} | {cell(r.target)} | {cell(r.figure)} | {cell(r.held)} | {cell(r.when)} | {cell(r.command)} |"
        for r in rows
    ]
    out += ["", END, ""]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("fleet", nargs="?", type=Path, default=HERE / "FLEET.md")
    args = ap.parse_args()
    if not args.results.exists():
        print(f"summary: {args.results} does not exist: run the benchmarks first (make bench)", file=sys.stderr)
        return 2
    results = args.results.read_text()
    fleet = args.fleet.read_text() if args.fleet.exists() else None
    rows = prolog_rows(results) + nccl_rows(results) + storage_rows(results) + sweep_rows(results) + fleet_rows(fleet)
    table = render(rows)
    if START in results and END in results:
        before, rest = results.split(START, 1)
        body = before + rest.split(END, 1)[1].lstrip("\n")
    else:
        body = results
    args.results.write_text(table + "\n" + body.lstrip("\n"))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
