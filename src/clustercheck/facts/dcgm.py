"""DCGM diagnostics: run `dcgmi diag -r LEVEL -j` and read what it printed into one record.

`parse_diag(stdout, stderr, exit_code)` is pure: it takes the JSON of DCGM 3.x (the "DCGM GPU
Diagnostic" document: `gpu_id`/`gpu_ids` per result, statuses Pass/Fail/Skip/Warn in any case)
and DCGM 4.x (the "DCGM Diagnostic" document: `entity_group`/`entity_id` per result and a
`test_summary` per test), and, as a fallback, the text table dcgmi prints without `-j` (3.0
without a Metadata section, 3.3 "Pass - GPU: 1" cells, 4.x "GPU0: Pass" rows, messages wrapped
at 46 characters, mid-word). It returns a `DiagRun`: every test's result per GPU with DCGM's
warnings and info, or the "could not run" outcome dcgmi printed instead (no host engine,
plugins that do not load, the diagnostic returning an error). Anything else - a JSON shape it
does not know, a truncated document, a status word it does not know, garbage - raises
`DiagParseError` saying why: it is never read as a pass.

The real outputs these readings were made against are under tests/corpus/dcgm_diag/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clustercheck import CommandResult, Host

#: The statuses DCGM writes for one test on one entity, normalised from any case.
STATUSES = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}

#: Seconds DCGM's documentation gives each level (dcgmi diag --help: "1 - Quick (System
#: Validation ~ seconds)", "2 - Medium (~ 2 minutes)", "3 - Long (~ 15 minutes)", "4 - Extended
#: (Longer-running)"), and the budget clustercheck gives the command at each level by default:
#: several times the nominal time, as DCGM's own figures are for an idle node.
NOMINAL = {1: "seconds", 2: "about 2 minutes", 3: "about 15 minutes", 4: "an hour or more"}
BUDGET = {1: 120.0, 2: 600.0, 3: 2700.0, 4: 14400.0}

# What dcgmi prints when it could not run the diagnostic at all (kind, pattern). Sources:
# NVIDIA/dcgm-exporter#193 (no host engine), NVIDIA/DCGM#254 (plugins, return -30).
_COULD_NOT_RUN = (
    (
        "no_hostengine",
        re.compile(r"Unable to connect to host engine|unable to establish a connection to the specified host", re.I),
    ),
    ("plugins", re.compile(r"Cannot load plugins", re.I)),
    ("diag_error", re.compile(r"Unable to complete diagnostic|DCGM GPU Diagnostic returned an error", re.I)),
)


class DiagParseError(ValueError):
    """dcgmi's output is not a document or table this reader knows: it says why."""


@dataclass(frozen=True)
class TestResult:
    """One test's result on one entity ("GPU 0"), or on the whole test (entity "")."""

    test: str
    category: str
    entity: str
    status: str  # one of STATUSES' values
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    error_ids: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "category": self.category,
            "entity": self.entity,
            "status": self.status,
            "warnings": list(self.warnings),
            "info": list(self.info),
            "error_ids": list(self.error_ids),
        }


@dataclass(frozen=True)
class DiagRun:
    """What one `dcgmi diag` printed, read."""

    format: str  # "json-3.x", "json-4.x", "text" or "none" (it could not run)
    results: tuple[TestResult, ...] = ()
    version: str = ""
    driver: str = ""
    could_not_run: str = ""  # a kind of _COULD_NOT_RUN, "" when the diagnostic ran
    message: str = ""  # dcgmi's own words for could_not_run
    complete: bool = True  # False: a text table cut before its closing border
    metadata: Mapping[str, str] = field(default_factory=dict)


# -- the command ---------------------------------------------------------------------------


def diag_argv(level: int) -> tuple[str, ...]:
    """The command: every test of the level, as JSON (dcgmi has no option to leave a test out;
    excluded tests run and are not judged)."""
    return ("dcgmi", "diag", "-r", str(level), "-j")


def run_diag(host: Host, level: int, budget: float) -> CommandResult:
    """Run the diagnostic on the node within `budget` seconds (and the check's own deadline)."""
    return host.run(*diag_argv(level), timeout=budget)


# -- the reader ----------------------------------------------------------------------------


def parse_diag(stdout: str, stderr: str = "", exit_code: int | None = 0) -> DiagRun:
    """dcgmi diag's output -> DiagRun; DiagParseError when it is neither a known document,
    a table, nor one of dcgmi's "could not run" messages."""
    text = stdout.strip()
    start = _json_start(stdout)
    if start is not None:
        return _parse_json(stdout[start:])
    if re.search(r"^\s*\+[-=]{5,}\+", stdout, re.M) or re.search(r"^\|.*\|\s*$", stdout, re.M):
        run = _parse_table(stdout)
        if run.results or run.metadata:
            return run
    both = f"{stdout}\n{stderr}"
    for kind, pattern in _COULD_NOT_RUN:
        if pattern.search(both):
            return DiagRun("none", could_not_run=kind, message=_error_lines(both))
    if not text and not stderr.strip():
        raise DiagParseError(f"dcgmi printed nothing (exit {exit_code})")
    shown = " ".join((text or stderr.strip())[:200].split())
    raise DiagParseError(f"dcgmi's output is neither a DCGM JSON document nor its result table: {shown!r}")


def _json_start(text: str) -> int | None:
    """Offset of the document: the first line that starts with "{" (dcgmi may print lines
    before it), None when there is none."""
    m = re.search(r"^[ \t]*\{", text, re.M)
    return m.start() if m else None


def _error_lines(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.splitlines()]
    chosen = [line for line in lines if line.lower().startswith("error")] or [line for line in lines if line]
    return " / ".join(chosen)[:1000]


def _parse_json(text: str) -> DiagRun:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) - 1
        why = "it ends before the document does (cut short?)" if cut else exc.msg
        raise DiagParseError(f"dcgmi's JSON does not parse at line {exc.lineno} column {exc.colno}: {why}") from None
    except RecursionError:
        raise DiagParseError("dcgmi's JSON is nested too deeply to be a DCGM document") from None
    if not isinstance(doc, dict):
        raise DiagParseError(f"dcgmi's JSON is a {type(doc).__name__}, not a DCGM document (an object)")
    if "DCGM Diagnostic" in doc:
        body, fmt = doc["DCGM Diagnostic"], "json-4.x"
    elif "DCGM GPU Diagnostic" in doc:
        body, fmt = doc["DCGM GPU Diagnostic"], "json-3.x"
    else:
        keys = ", ".join(sorted(map(str, doc))[:8]) or "none"
        raise DiagParseError(
            f"unknown DCGM JSON shape: no 'DCGM Diagnostic' (4.x) or 'DCGM GPU Diagnostic' (3.x) object (keys: {keys})"
        )
    categories = _field(body, "test_categories", list, "the diagnostic object")
    results: list[TestResult] = []
    for ci, cat in enumerate(categories):
        where = f"test_categories[{ci}]"
        if not isinstance(cat, dict):
            raise DiagParseError(f"unknown DCGM JSON shape: {where} is not an object")
        category = str(cat.get("category", ""))
        for ti, test in enumerate(_field(cat, "tests", list, where)):
            twhere = f"{where}.tests[{ti}]"
            if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                raise DiagParseError(f"unknown DCGM JSON shape: {twhere} has no name")
            name = test["name"]
            for ri, res in enumerate(_field(test, "results", list, twhere)):
                results.append(_json_result(res, name, category, f"{twhere}.results[{ri}]"))
            summary = test.get("test_summary")
            if summary is not None:
                if not isinstance(summary, dict) or "status" not in summary:
                    raise DiagParseError(f"unknown DCGM JSON shape: {twhere}.test_summary has no status")
                results.append(_json_result(summary, name, category, f"{twhere}.test_summary", summary=True))
    meta = doc.get("metadata") if fmt == "json-4.x" else body.get("metadata", {})
    meta = meta if isinstance(meta, dict) else {}
    version = str(meta.get("version") or body.get("version") or doc.get("version") or "")
    driver = str(meta.get("Driver Version Detected") or meta.get("driver_version") or "")
    if not results:
        raise DiagParseError("dcgmi's JSON names no test result at all")
    return DiagRun(fmt, tuple(results), version=version, driver=driver, metadata={k: str(v) for k, v in meta.items()})


def _field(obj: Any, key: str, kind: type, where: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise DiagParseError(f"unknown DCGM JSON shape: {where} has no {key!r} {kind.__name__}")
    return value


def _status(raw: object, where: str) -> str:
    if not isinstance(raw, str):
        raise DiagParseError(f"unknown DCGM JSON shape: {where} has no status string")
    key = " ".join(raw.replace("_", " ").split()).lower()
    if key == "notrun":
        key = "not run"
    if key not in STATUSES:
        raise DiagParseError(f"{where}: unknown DCGM status {raw!r} (known: {', '.join(STATUSES.values())})")
    return STATUSES[key]


def _json_result(res: Any, test: str, category: str, where: str, summary: bool = False) -> TestResult:
    if not isinstance(res, dict):
        raise DiagParseError(f"unknown DCGM JSON shape: {where} is not an object")
    status = _status(res.get("status"), where)
    if summary:
        entity = ""
    elif "entity_id" in res:  # 4.x
        group = str(res.get("entity_group") or "GPU")
        entity = f"{group} {res['entity_id']}"
    elif "gpu_id" in res or "gpu_ids" in res:  # 3.x
        gpu = str(res.get("gpu_id", res.get("gpu_ids")))
        entity = f"GPU {gpu}" if "," not in gpu else f"GPUs {gpu}"
    else:
        raise DiagParseError(f"unknown DCGM JSON shape: {where} names no entity (entity_id, gpu_id or gpu_ids)")
    warnings: list[str] = []
    ids: list[int] = []
    for w in _list(res.get("warnings"), where, "warnings"):
        if isinstance(w, str):
            warnings.append(w)
        elif isinstance(w, dict) and isinstance(w.get("warning"), str):
            warnings.append(w["warning"])
            if isinstance(w.get("error_id"), int) and not isinstance(w.get("error_id"), bool):
                ids.append(w["error_id"])
        else:
            raise DiagParseError(f"unknown DCGM JSON shape: {where}.warnings holds {type(w).__name__}")
    info = [str(i) for i in _list(res.get("info"), where, "info")]
    return TestResult(test, category, entity, status, tuple(warnings), tuple(info), tuple(ids))


def _list(value: Any, where: str, key: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise DiagParseError(f"unknown DCGM JSON shape: {where}.{key} is a {type(value).__name__}")
    return value


# -- the text table ------------------------------------------------------------------------

_SECTION = re.compile(r"^[-+]?-{3,}\s+(\S.*?)\s+-+$")
_GPU_ROW = re.compile(r"^GPU\s*(\d+):\s*(.+)$")  # 4.x: "GPU0: Pass"
_STATUS_CELL = re.compile(r"^(Pass|Fail|Warn|Skip|Not Run)(?:\s*-\s*(?:GPUs?:\s*([\d,\s]+)|(All)))?$", re.I)
_RANK = ["Fail", "Warn", "Not Run", "Skip", "Pass"]  # worst first
_WIDTH = 45  # the result column's text width (48 less its padding and a spare): DCGM wraps there, mid-word


@dataclass
class _Row:
    test: str
    category: str
    status: str
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    gpus: list[tuple[str, str]] = field(default_factory=list)  # (entity, status)
    per_gpu_cell: bool = False  # 3.x: the row's own cell was "Pass - GPU: 1", not the test's status


def _parse_table(text: str) -> DiagRun:
    rows: list[_Row] = []
    meta: dict[str, str] = {}
    category = ""
    current: _Row | None = None
    target: list[str] | None = None  # the message the next continuation line extends
    last_full = False  # the previous piece filled the column: the next one continues the word
    header = complete = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.startswith(("|", "+")):
            continue
        complete = False
        inner = line.strip("|+")
        m = _SECTION.match(inner.split("+")[0].split("|")[0].strip()) if "---" in inner else None
        if m and not inner.startswith("="):
            category, current, target = m.group(1).strip(), None, None
            continue
        if re.fullmatch(r"\+[-=]+\+[-=]+\+", line):
            complete = header and line.startswith("+-") and "=" not in line
            continue
        cells = line.split("|")
        if len(cells) < 3:
            continue
        left = cells[1].strip()
        right_raw = "|".join(cells[2:-1]) if len(cells) > 3 else cells[2]
        right_raw = right_raw[1:] if right_raw.startswith(" ") else right_raw
        right = right_raw.rstrip()
        if left == "Diagnostic" and right.strip() == "Result":
            header = True
            continue
        if category == "Metadata" and left:
            meta[left] = right.strip()
            continue
        if left in ("Warning", "Info"):
            if current is None:
                target = None
                continue
            bucket = current.warnings if left == "Warning" else current.info
            bucket.append(right.strip())
            target, last_full = bucket, len(right) >= _WIDTH
            continue
        if left:
            m2 = _STATUS_CELL.match(right.strip())
            if m2 is None:
                raise DiagParseError(f"the result table's row {left!r} has no status DCGM writes: {right.strip()!r}")
            current = _Row(left, category, STATUSES[m2.group(1).lower()])
            rows.append(current)
            current.per_gpu_cell = bool(m2.group(2) or m2.group(3))
            _add_gpus(current, m2)
            target = None
            continue
        cell = right.strip()
        g = _GPU_ROW.match(cell)
        s = _STATUS_CELL.match(cell)
        if current is not None and g is not None:
            st = STATUSES.get(g.group(2).strip().lower())
            if st is None:
                raise DiagParseError(f"the result table's row for GPU {g.group(1)} has an unknown status {cell!r}")
            current.gpus.append((f"GPU {g.group(1)}", st))
            target = None
        elif current is not None and s is not None and s.group(2):
            _add_gpus(current, s)
            target = None
        elif target is not None and cell:
            joiner = "" if last_full else " "
            target[-1] = target[-1] + joiner + right
            last_full = len(right) >= _WIDTH
        # else: a continuation of something before the excerpt/table started, or blank
    results: list[TestResult] = []
    for row in rows:
        warnings = tuple(" ".join(w.split()) for w in row.warnings)
        info = tuple(" ".join(i.split()) for i in row.info)
        status = row.status
        if row.per_gpu_cell:  # the test's status is its worst GPU's
            status = min((st for _, st in row.gpus), key=_RANK.index)
        results.append(TestResult(row.test, row.category, "", status, warnings, info))
        for entity, status in row.gpus:
            results.append(TestResult(row.test, row.category, entity, status))
    return DiagRun(
        "text",
        tuple(results),
        version=meta.get("DCGM Version", ""),
        driver=meta.get("Driver Version Detected", ""),
        complete=complete,
        metadata=meta,
    )


def _add_gpus(row: _Row, m: re.Match[str]) -> None:
    ids, everything = m.group(2), m.group(3)
    status = STATUSES[m.group(1).lower()]
    if ids:
        for gid in ids.replace(" ", "").split(","):
            if gid:
                row.gpus.append((f"GPU {gid}", status))
    elif everything:
        row.gpus.append(("all GPUs", status))


def gpus_named(results: Iterable[TestResult]) -> list[str]:
    """The entities the results name, in order, once each."""
    seen: dict[str, None] = {}
    for r in results:
        if r.entity:
            seen.setdefault(r.entity, None)
    return list(seen)
