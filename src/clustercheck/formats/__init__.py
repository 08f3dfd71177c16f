"""Output formats: pure renderers of a `Report` onto a text stream.

Every format is a module with a renderer `render(report, out, *, verbose=False) -> None`
(the json module holds two: `render_json` and `render_jsonl`). A renderer only writes
text: it sets no exit code (that comes from `Report.exit_code`) and opens no file (the
CLI writes atomically). Modules are imported lazily, so that rendering json or jsonl
(the Slurm prolog path) never imports rich.

The table format alone also takes a fleet view: `by` ("check" or "host") and `all_hosts`
(see `render`); `check_view` refuses them for other formats before any host is contacted.
"""

from __future__ import annotations

import importlib
import re
from typing import Protocol, TextIO

from clustercheck.errors import UsageError
from clustercheck.result import Report

__all__ = ["FORMATS", "VIEWS", "Renderer", "check_view", "escape_controls", "render", "renderer"]

#: Every format name the CLI accepts, the default first.
FORMATS = ("table", "json", "jsonl", "junit", "prometheus", "html")

# format -> (module, function); the module is imported only when that format is used.
_RENDERERS: dict[str, tuple[str, str]] = {
    "table": ("clustercheck.formats.table", "render"),
    "json": ("clustercheck.formats.json", "render_json"),
    "jsonl": ("clustercheck.formats.json", "render_jsonl"),
    "junit": ("clustercheck.formats.junit", "render"),
    "prometheus": ("clustercheck.formats.prometheus", "render"),
    "html": ("clustercheck.formats.html", "render"),
}


class Renderer(Protocol):
    def __call__(self, report: Report, out: TextIO, *, verbose: bool = False) -> None: ...


def renderer(fmt: str) -> Renderer:
    """The renderer of format `fmt`; UsageError (exit 64) for an unknown format."""
    try:
        module_name, function = _RENDERERS[fmt]
    except KeyError:
        raise UsageError(f"unknown output format {fmt!r}; choose one of: {', '.join(FORMATS)}") from None
    func: Renderer = getattr(importlib.import_module(module_name), function)
    return func


#: How the table format lays out several hosts: problems by check (the default) or by host.
VIEWS = ("check", "host")


def check_view(fmt: str, *, by: str = "check", all_hosts: bool = False) -> None:
    """UsageError (exit 64, before any host is contacted) for a view the format cannot show."""
    if by not in VIEWS:
        raise UsageError(f"--by {by}: choose one of: {', '.join(VIEWS)}")
    if fmt != "table" and (by != "check" or all_hosts):
        option = "--all" if all_hosts else f"--by {by}"
        raise UsageError(f"{option} shapes the table format only; -f {fmt} holds every host and check already")


def render(
    report: Report, fmt: str, out: TextIO, *, verbose: bool = False, by: str = "check", all_hosts: bool = False
) -> None:
    """Write `report` in format `fmt` onto `out`; `by` and `all_hosts` are the table's fleet view."""
    check_view(fmt, by=by, all_hosts=all_hosts)
    if fmt == "table" and (by != "check" or all_hosts):
        from clustercheck.formats import table

        table.render(report, out, verbose=verbose, by=by, all_hosts=all_hosts)
        return
    renderer(fmt)(report, out, verbose=verbose)


# C0 controls but tab and newline, DEL and C1 controls (terminal escapes; XML 1.0 forbids
# most of them), surrogates (undecodable bytes under surrogateescape; not encodable) and
# the noncharacters U+FFFE and U+FFFF (XML 1.0 forbids them).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a raw byte smuggled in by errors="surrogateescape"
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    r"""`text` with control characters spelled out (`\x1b`), tab and newline kept.

    For formats meant for terminals and XML: raw command output in evidence must neither
    drive the terminal nor make the XML invalid. The json formats keep text as is.
    """
    return _CONTROL.sub(_escape_one, text)
