"""The json and jsonl formats: machine-readable, stable, text kept exactly as checked.

- json: the whole report, `Report.to_json()`, indented, one document.
- jsonl: one object per line per (host, check): the check's `CheckResult.to_json()`
  plus `host`, `profile` and `clustercheck` (the version), so each line stands alone
  (`jq`, log shippers). The stream is flushed after each host, for fleet runs that
  stream results as hosts finish.

Both escape non-ASCII and control characters as JSON `\\uXXXX`, so the output is ASCII.
"""

from __future__ import annotations

import json
from typing import TextIO

from clustercheck.result import Report

__all__ = ["render_json", "render_jsonl"]


def render_json(report: Report, out: TextIO, *, verbose: bool = False) -> None:
    """The whole report as one JSON document; `verbose` changes nothing (all is there)."""
    json.dump(report.to_json(), out, indent=2)
    out.write("\n")


def render_jsonl(report: Report, out: TextIO, *, verbose: bool = False) -> None:
    """One JSON object per line per (host, check); `verbose` changes nothing."""
    for host in report.hosts:
        for check in host.checks:
            line = {"host": host.host, **check.to_json(), "profile": report.profile, "clustercheck": report.version}
            out.write(json.dumps(line))
            out.write("\n")
        out.flush()
