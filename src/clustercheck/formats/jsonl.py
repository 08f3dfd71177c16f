"""The jsonl format: one object per line per (host, check): the check's `CheckResult.to_json()`
plus `host`, `profile` and `clustercheck` (the version), so each line stands alone (`jq`, log
shippers). The stream is flushed after each host, for fleet runs that stream results as hosts
finish. Non-ASCII and control characters are escaped as JSON `\\uXXXX`, so the output is ASCII.
"""

from __future__ import annotations

import json
from typing import TextIO

from clustercheck.result import Report

__all__ = ["render"]


def render(report: Report, out: TextIO, *, verbose: bool = False) -> None:
    """One JSON object per line per (host, check); `verbose` changes nothing."""
    for host in report.hosts:
        for check in host.checks:
            line = {"host": host.host, **check.to_json(), "profile": report.profile, "clustercheck": report.version}
            out.write(json.dumps(line))
            out.write("\n")
        out.flush()
