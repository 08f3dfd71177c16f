"""nvbandwidth runs: read its JSON (`-j`) or its text matrices into one record per testcase.

`parse_nvbandwidth(text)` is pure and linear. JSON: the document starts at the first line that
is exactly "{" (nvbandwidth, or a library under it, may print WARNING lines before and after
it, braces included: DCGM's own parser tests feed it such output); every testcase has a name,
a status ("Passed", "Waived", or an error word) and, when it ran, a `bandwidth_matrix` of
strings ("N/A" on a diagonal). Text (nvbandwidth before -j, or without it): "Running NAME."
then a description line ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"), a column
header, one row per source, and "SUM NAME value"; "Waiving NAME." for a testcase that cannot
run (one GPU, no peer access); "ASSERT in expression ..." when nvbandwidth aborted.

It returns an `NvbRun`; anything it cannot read - no testcase, a matrix whose rows and columns
do not agree with each other or with the device list, a value that is not a number, a
testcase started and never finished (no SUM line: the run crashed or was cut), a JSON
document cut short - raises `NvbParseError` saying why. An ASSERT is not a parse error: the
run holds `aborted` (nvbandwidth's own words) and the check makes it an error.

The real outputs these readings were made against are under tests/corpus/nvbandwidth/.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

#: The package (NVIDIA's nvbandwidth, built from github.com/NVIDIA/nvbandwidth) that holds it.
PACKAGE = "nvbandwidth (NVIDIA's tool: build it from its source release, or install a distribution's package of it)"

_RUNNING = re.compile(r"^\s*Running (\w+)\.\s*$")
_WAIVING = re.compile(r"^\s*Waiving (\w+)\.\s*$")
_SUM = re.compile(r"^\s*SUM (\w+) (\S+)\s*$")
_DESCRIPTION = re.compile(r"^\s*(memcpy|memory latency)\b.*\((GB/s|ns)\)\s*$")
_DEVICE = re.compile(r"^\s*Device (\d+): (.+?)\s*$")
_VERSION = re.compile(r"^\s*nvbandwidth Version: (\S+)")
_DRIVER = re.compile(r"^\s*Driver Version: (\S+)")
_ASSERT = re.compile(r"ASSERT in expression|Invalid value when checking the pattern|CUDA_ERROR|cudaError", re.I)


class NvbParseError(ValueError):
    """nvbandwidth's output is not a run this reader knows: it says why."""


@dataclass(frozen=True)
class Testcase:
    """One nvbandwidth testcase: its status and, when it ran, its matrix (GB/s, None for N/A)."""

    name: str
    status: str  # "Passed", "Waived", or nvbandwidth's word for an error
    description: str = ""
    matrix: tuple[tuple[float | None, ...], ...] = ()
    sum: float | None = None

    @property
    def waived(self) -> bool:
        return self.status.lower() == "waived"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "description": self.description,
            "matrix": [list(row) for row in self.matrix],
            "sum": self.sum,
        }


@dataclass(frozen=True)
class NvbRun:
    format: str  # "json" or "text"
    testcases: dict[str, Testcase]
    version: str = ""
    driver: str = ""
    devices: dict[int, str] = field(default_factory=dict)  # index -> name, as printed (text only)
    aborted: str = ""  # nvbandwidth's ASSERT/error lines when it stopped mid-run

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "version": self.version or None,
            "driver": self.driver or None,
            "devices": {str(k): v for k, v in self.devices.items()},
            "testcases": {k: v.to_json() for k, v in self.testcases.items()},
            "aborted": self.aborted or None,
        }


def _number(token: str, where: str) -> float | None:
    if token.upper() == "N/A":
        return None
    try:
        value = float(token)
    except ValueError:
        raise NvbParseError(f"{where}: {token[:40]!r} is not a bandwidth") from None
    if not math.isfinite(value) or value < 0:
        raise NvbParseError(f"{where}: {token[:40]!r} is not a bandwidth")
    return value


def parse_nvbandwidth(text: str) -> NvbRun:
    """nvbandwidth's output (JSON or text) -> NvbRun; NvbParseError when it cannot be read."""
    start = re.search(r"^[ \t]*\{[ \t]*$", text, re.M)
    if start is not None:
        return _parse_json(text[start.start() :])
    return _parse_text(text)


def _parse_json(text: str) -> NvbRun:
    try:
        doc, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.strip()) - 1
        why = "it ends before the document does (cut short?)" if cut else exc.msg
        raise NvbParseError(f"nvbandwidth's JSON does not parse at line {exc.lineno}: {why}") from None
    except RecursionError:
        raise NvbParseError("nvbandwidth's JSON is nested too deeply") from None
    body = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("testcases"), list):
        raise NvbParseError("unknown JSON shape: no 'nvbandwidth' object with a 'testcases' list")
    cases: dict[str, Testcase] = {}
    for i, case in enumerate(body["testcases"]):
        if (
            not isinstance(case, dict)
            or not isinstance(case.get("name"), str)
            or not isinstance(case.get("status"), str)
        ):
            raise NvbParseError(f"testcase {i} has no name and status")
        name, status = case["name"], case["status"]
        matrix: tuple[tuple[float | None, ...], ...] = ()
        raw = case.get("bandwidth_matrix")
        if raw is not None:
            if not isinstance(raw, list) or not all(isinstance(r, list) for r in raw):
                raise NvbParseError(f"{name}: bandwidth_matrix is not a list of rows")
            matrix = tuple(tuple(_number(str(v), f"{name} row {r}") for v in row) for r, row in enumerate(raw))
            _check_shape(name, matrix, None)
        elif status.lower() == "passed":
            raise NvbParseError(f"{name}: status Passed but no bandwidth_matrix")
        total = case.get("sum")
        cases[name] = Testcase(
            name,
            status,
            str(case.get("bandwidth_description", "")).strip(),
            matrix,
            float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else None,
        )
    if not cases:
        raise NvbParseError("nvbandwidth's JSON lists no testcase")
    return NvbRun("json", cases, str(body.get("version", "")), str(body.get("Driver Version", "")))


def _check_shape(name: str, matrix: tuple[tuple[float | None, ...], ...], gpus: int | None) -> None:
    if not matrix:
        raise NvbParseError(f"{name}: an empty matrix")
    widths = {len(row) for row in matrix}
    if len(widths) != 1:
        raise NvbParseError(f"{name}: the matrix's rows have {sorted(widths)} values: not one shape")
    width = widths.pop()
    if gpus is not None and width != gpus:
        raise NvbParseError(
            f"{name}: the matrix has {width} columns but nvbandwidth listed {gpus} device(s): not a shape it prints"
        )
    if gpus is not None and len(matrix) not in (1, gpus):
        raise NvbParseError(f"{name}: the matrix has {len(matrix)} rows for {gpus} device(s): not a shape it prints")


def _parse_text(text: str) -> NvbRun:
    version = driver = ""
    devices: dict[int, str] = {}
    elided = False
    cases: dict[str, Testcase] = {}
    aborted: list[str] = []
    current: str | None = None  # the testcase a "Running" line opened
    description = ""
    columns: list[int] | None = None
    rows: list[tuple[float | None, ...]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"line {number}"
        if not line:
            continue
        if m := _VERSION.match(line):
            version = m.group(1)
        elif m := _DRIVER.match(line):
            driver = m.group(1)
        elif m := _DEVICE.match(line):
            devices[int(m.group(1))] = m.group(2)
        elif line == "...":
            elided = True  # a reporter's elision of the device list
        elif m := _RUNNING.match(line):
            if current is not None:
                raise NvbParseError(f"{where}: {m.group(1)} starts before {current} printed its SUM line (cut?)")
            current, description, columns, rows = m.group(1), "", None, []
        elif m := _WAIVING.match(line):
            cases[m.group(1)] = Testcase(m.group(1), "Waived")
            current = None
        elif _DESCRIPTION.match(line):
            description, columns, rows = line, None, []
            current = current or ""  # a block without its "Running" line (an excerpt): named by its SUM
        elif m := _SUM.match(line):
            name = m.group(1)
            if current is None or columns is None or not rows:
                raise NvbParseError(f"{where}: SUM {name} without a matrix before it")
            if current and current != name:
                raise NvbParseError(f"{where}: SUM {name} closes testcase {current}")
            matrix = tuple(rows)
            _check_shape(name, matrix, len(devices) if devices and not elided else None)
            if len(columns) != len(matrix[0]):
                raise NvbParseError(f"{name}: {len(columns)} column headers for rows of {len(matrix[0])} values")
            cases[name] = Testcase(name, "Passed", description, matrix, _number(m.group(2), where))
            current, columns, rows = None, None, []
        elif _ASSERT.search(line):
            aborted.append(" ".join(line.split())[:300])
        elif current is not None and description:
            tokens = line.split()
            if columns is None:
                if not all(t.isdigit() for t in tokens):
                    raise NvbParseError(f"{where}: expected the matrix's column numbers, got {line[:80]!r}")
                columns = [int(t) for t in tokens]
            elif tokens[0].isdigit():
                rows.append(tuple(_number(t, where) for t in tokens[1:]))
            else:
                raise NvbParseError(f"{where}: not a matrix row: {line[:80]!r}")
    if current is not None and (columns is not None or current):
        name = current or "a testcase"
        if aborted:
            return NvbRun("text", cases, version, driver, devices, " / ".join(aborted))
        raise NvbParseError(f"{name} did not finish: its matrix has no SUM line (the run crashed or was cut)")
    if aborted:
        return NvbRun("text", cases, version, driver, devices, " / ".join(aborted))
    if not cases:
        shown = " ".join(text.strip()[:200].split())
        raise NvbParseError(
            "nvbandwidth printed nothing" if not shown else f"no nvbandwidth testcase in the output: {shown!r}"
        )
    return NvbRun("text", cases, version, driver, devices)


__all__ = ["PACKAGE", "NvbParseError", "NvbRun", "Testcase", "parse_nvbandwidth"]
