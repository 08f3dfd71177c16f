"""The json format: the whole report, `Report.to_json()`, indented, one document;
machine-readable, stable, text kept exactly as checked. Non-ASCII and control characters are
escaped as JSON `\\uXXXX`, so the output is ASCII.
"""

from __future__ import annotations

import json
from typing import TextIO

from clustercheck.result import Report

__all__ = ["render"]


def render(report: Report, out: TextIO, *, verbose: bool = False) -> None:
    """The whole report as one JSON document; `verbose` changes nothing (all is there)."""
    json.dump(report.to_json(), out, indent=2)
    out.write("\n")
