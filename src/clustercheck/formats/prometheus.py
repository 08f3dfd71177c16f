"""The prometheus format: a node_exporter textfile-collector file (text exposition 0.0.4).

Metrics (all gauges)::

    clustercheck_check_status{host,check,status}      1 for the check's status, 0 for the 4 others
    clustercheck_check_duration_seconds{host,check}   how long the check took
    clustercheck_host_status{host}                    0 ok, 1 warn, 2 fail, 3 error (the exit codes)
    clustercheck_checks{status}                       how many checks ended in each status, all hosts
    clustercheck_info{version,profile}                always 1
    clustercheck_last_run_timestamp_seconds           when the report was rendered, Unix time

`clustercheck_check_status` is enum-style, like node_exporter's `node_systemd_unit_state`:
every (host, check) has one series per status (ok, warn, fail, skip, error), so alerts
need no magic numbers and series never appear or vanish as a status changes::

    clustercheck_check_status{status="fail"} == 1                      # any failing check
    max by (host) (clustercheck_host_status) >= 2                      # hosts to drain
    time() - clustercheck_last_run_timestamp_seconds > 3600            # stale results

Label values are escaped per the exposition format (backslash, double quote, newline).
Should a (host, check) appear twice in a report (merged runs), the last result wins, as
a scrape must not hold a series twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import TextIO

from clustercheck.result import CheckResult, ExitCode, Report, Status, worst

__all__ = ["render"]

_STATUSES = tuple(Status)  # ok, warn, fail, skip, error


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{name}="{_label(value)}"' for name, value in labels.items()) + "}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _family(out: TextIO, name: str, help_text: str, samples: Iterable[tuple[str, float]]) -> None:
    """One metric family: HELP and TYPE once, then its samples as (labels, value)."""
    out.write(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
    for labels, value in samples:
        out.write(f"{name}{labels} {_number(value)}\n")


def render(report: Report, out: TextIO, *, verbose: bool = False, now: float | None = None) -> None:
    """The report as textfile-collector metrics; `now` (Unix time) defaults to the clock.

    `verbose` changes nothing: evidence has no place in metrics.
    """
    # host -> check id -> result; a repeated host or check keeps its first place, last result.
    hosts: dict[str, dict[str, CheckResult]] = {}
    for host in report.hosts:
        checks = hosts.setdefault(host.host, {})
        for check in host.checks:
            checks[check.id] = check

    _family(
        out,
        "clustercheck_check_status",
        "Status of a check on a host: 1 for its status, 0 for the others.",
        (
            (_labels(host=host, check=check.id, status=status.value), float(check.status is status))
            for host, checks in hosts.items()
            for check in checks.values()
            for status in _STATUSES
        ),
    )
    _family(
        out,
        "clustercheck_check_duration_seconds",
        "How long a check took on a host, in seconds.",
        (
            (_labels(host=host, check=check.id), round(check.duration_s, 6))
            for host, checks in hosts.items()
            for check in checks.values()
        ),
    )
    _family(
        out,
        "clustercheck_host_status",
        "Worst status of a host: 0 ok, 1 warn, 2 fail, 3 error (the exit codes).",
        (
            (_labels(host=host), float(ExitCode.for_status(worst(c.status for c in checks.values()))))
            for host, checks in hosts.items()
        ),
    )
    _family(
        out,
        "clustercheck_checks",
        "Number of checks in each status, all hosts together.",
        (
            (
                _labels(status=status.value),
                sum(c.status is status for checks in hosts.values() for c in checks.values()),
            )
            for status in _STATUSES
        ),
    )
    _family(
        out,
        "clustercheck_info",
        "Version of clustercheck and profile checked; always 1.",
        [(_labels(version=report.version, profile=report.profile), 1.0)],
    )
    _family(
        out,
        "clustercheck_last_run_timestamp_seconds",
        "When clustercheck last ran, in seconds since the Unix epoch.",
        [("", time.time() if now is None else now)],
    )
