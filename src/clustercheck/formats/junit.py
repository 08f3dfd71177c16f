"""The junit format: JUnit XML for CI (Jenkins, GitLab), one test suite per host.

Shape::

    <testsuites name="clustercheck" tests= failures= errors= skipped= time=>
      <testsuite name=HOST tests= failures= errors= skipped= time=>
        <testcase classname="clustercheck.HOST" name=CHECK_ID time=SECONDS>

Status mapping (JUnit has no "warning"):

- ok: a passing test case, no child (with verbose: `<system-out>` holds summary and evidence).
- warn: a *passing* test case whose `<system-out>` starts with ``WARN: `` and the summary,
  then evidence and remedy. A warning must not fail a CI pipeline (clustercheck's exit
  code already says 1); grep the report for ``WARN:`` to find them.
- fail: `<failure message=SUMMARY type="fail">` with evidence and remedy as text.
- error: `<error message=SUMMARY type="error">` with evidence and remedy as text.
- skip: `<skipped message=REASON/>`.

`time` is the check's duration in seconds; a suite's and the whole run's are the sums.
Control characters that XML 1.0 forbids (evidence holds raw command output) are spelled
out as ``\\x1b``; everything else is escaped by ElementTree. The document is declared
UTF-8: write it to a UTF-8 stream.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TextIO

from clustercheck.formats.text import escape_controls
from clustercheck.result import CheckResult, HostReport, Report, Status

__all__ = ["render"]


def _seconds(duration: float) -> str:
    return f"{duration:.3f}"


def _details(check: CheckResult, *, first: str = "") -> str:
    """Text body: an optional first line, the evidence lines, then the remedy."""
    lines = [first] if first else []
    lines.extend(check.evidence)
    if check.remedy:
        if lines:
            lines.append("")
        lines.append(f"Remedy: {check.remedy}")
    return escape_controls("\n".join(lines))


def _testcase(parent: ET.Element, host: str, check: CheckResult, *, verbose: bool) -> None:
    attrs = {
        "classname": f"clustercheck.{escape_controls(host)}",
        "name": escape_controls(check.id),
        "time": _seconds(check.duration_s),
    }
    case = ET.SubElement(parent, "testcase", attrs)
    summary = escape_controls(check.summary)
    if check.status is Status.FAIL:
        ET.SubElement(case, "failure", {"message": summary, "type": "fail"}).text = _details(check)
    elif check.status is Status.ERROR:
        ET.SubElement(case, "error", {"message": summary, "type": "error"}).text = _details(check)
    elif check.status is Status.SKIP:
        ET.SubElement(case, "skipped", {"message": summary})
    elif check.status is Status.WARN:
        ET.SubElement(case, "system-out").text = _details(check, first=f"WARN: {check.summary}")
    elif verbose:
        ET.SubElement(case, "system-out").text = _details(check, first=check.summary)


def _counts(checks: tuple[CheckResult, ...]) -> dict[str, str]:
    def n(status: Status) -> str:
        return str(sum(1 for c in checks if c.status is status))

    return {
        "tests": str(len(checks)),
        "failures": n(Status.FAIL),
        "errors": n(Status.ERROR),
        "skipped": n(Status.SKIP),
        "time": _seconds(sum(c.duration_s for c in checks)),
    }


def _testsuite(parent: ET.Element, host: HostReport, *, verbose: bool) -> None:
    suite = ET.SubElement(parent, "testsuite", {"name": escape_controls(host.host), **_counts(host.checks)})
    for check in host.checks:
        _testcase(suite, host.host, check, verbose=verbose)


def render(report: Report, out: TextIO, *, verbose: bool = False) -> None:
    """The report as a JUnit XML document; `verbose` adds summary and evidence to passing checks."""
    every_check = tuple(c for h in report.hosts for c in h.checks)
    root = ET.Element("testsuites", {"name": "clustercheck", **_counts(every_check)})
    for host in report.hosts:
        _testsuite(root, host, verbose=verbose)
    ET.indent(root, space="  ")
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
