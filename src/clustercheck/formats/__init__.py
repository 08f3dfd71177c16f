"""Output formats: pure renderers of a `Report` onto a text stream.

`Format` is the one registry of format names: the CLI's choices (`run`, `record`, `report`),
the single file's and the prolog's come from it. Format `x` is the module
`clustercheck.formats.x` with a renderer `render(report, out, *, verbose=False) -> None`, so
a new format is one module plus its line in `Format`. A renderer only writes text: it sets no
exit code (that comes from `Report.exit_code`) and opens no file (the CLI writes atomically).
Modules are imported lazily, so that rendering json or jsonl (the Slurm prolog path) never
imports rich.

The table format alone also takes a fleet view: `by` ("check" or "host") and `all_hosts`
(see `render`); `check_view` refuses them for other formats before any host is contacted.
"""

from __future__ import annotations

import enum
import importlib
from typing import TYPE_CHECKING, Protocol, TextIO

from clustercheck.errors import UsageError
from clustercheck.result import Report

if TYPE_CHECKING:
    from clustercheck.formats.text import escape_controls

__all__ = ["FORMATS", "VIEWS", "Format", "Renderer", "check_view", "escape_controls", "render", "renderer"]


class Format(str, enum.Enum):
    """Every report format, the default first; each is the module clustercheck.formats.<value>."""

    table = "table"
    json = "json"
    jsonl = "jsonl"
    junit = "junit"
    prometheus = "prometheus"
    html = "html"


#: Every format name the CLI accepts, the default first.
FORMATS = tuple(f.value for f in Format)


class Renderer(Protocol):
    def __call__(self, report: Report, out: TextIO, *, verbose: bool = False) -> None: ...


def renderer(fmt: str) -> Renderer:
    """The renderer of format `fmt`; UsageError (exit 64) for an unknown format."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown output format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    func: Renderer = importlib.import_module(f"clustercheck.formats.{fmt}").render
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
        from clustercheck.formats.table import render as render_table

        render_table(report, out, verbose=verbose, by=by, all_hosts=all_hosts)
        return
    renderer(fmt)(report, out, verbose=verbose)


def __getattr__(name: str) -> object:
    """`escape_controls` (formats/text.py), imported when asked for: the prolog's json needs no
    text helper, and its import path gains no module."""
    if name == "escape_controls":
        from clustercheck.formats.text import escape_controls

        return escape_controls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
