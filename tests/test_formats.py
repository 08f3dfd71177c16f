"""Output formats: golden files, and each format read back by what consumes it.

Regenerate the golden files after a deliberate change of a format::

    UPDATE_GOLDEN=1 PYTHONPATH=src .venv/bin/python -m pytest tests/test_formats.py -q

then review `git diff tests/golden/formats/`.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import clustercheck.formats
from clustercheck.errors import UsageError
from clustercheck.formats import FORMATS, escape_controls, render
from clustercheck.formats import prometheus as prometheus_format
from clustercheck.formats import table as table_format
from clustercheck.result import CheckResult, ExitCode, HostReport, Report, Status

GOLDEN = Path(__file__).parent / "golden" / "formats"
NOW = 1_700_000_000.25  # the prometheus timestamp in the golden file

# Evidence as checks really hold it: quotes, a backslash, non-ASCII text, raw terminal
# escapes (XML 1.0 forbids \x1b), a tab, and text that looks like rich markup and XML.
NASTY = 'NVRM: Xid (PCI:0000:b3:00): 79, "GPU fell off" \\\\?\\ Grüße µs \x1b[31mred\x1b[0m [bold]x[/bold] <a>&amp;'


def sample_report() -> Report:
    """Three hosts (ok, warn, fail) and every check status."""
    return Report(
        version="0.1.0",
        profile="h100-dgx",
        hosts=(
            HostReport(
                "gpu-a01",
                (
                    CheckResult(
                        "gpu.count",
                        Status.OK,
                        "8 GPUs, expected 8",
                        evidence=("$ nvidia-smi -L", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d2c)"),
                        duration_s=0.1234,
                        data={"count": 8},
                    ),
                    CheckResult("ib.ports", Status.SKIP, "no InfiniBand HCA on this node", duration_s=0.002),
                ),
            ),
            HostReport(
                "gpu-a02",
                (
                    CheckResult("gpu.count", Status.OK, "8 GPUs, expected 8", duration_s=0.1),
                    CheckResult(
                        "gpu.ecc",
                        Status.WARN,
                        "2 correctable ECC errors on GPU 3, expected 0",
                        evidence=("$ nvidia-smi -q -d ECC", "Volatile\tSRAM Correctable : 2"),
                        remedy="watch the counter; reset it with `nvidia-smi -p 0`",
                        duration_s=0.5,
                        data={"gpu": 3, "correctable": 2},
                        action="INVESTIGATE",
                    ),
                ),
            ),
            HostReport(
                "gpu-b01",
                (
                    CheckResult(
                        "gpu.xid",
                        Status.FAIL,
                        'Xid 79 on GPU 5: "fell off the bus"',
                        evidence=("$ dmesg --level=err", NASTY),
                        remedy="drain the node: scontrol update nodename=gpu-b01 state=drain reason=xid79",
                        duration_s=1.25,
                        data={"xid": [79], "note": "Grüße"},
                        action="REBOOT",
                    ),
                    CheckResult(
                        "slurm.gres",
                        Status.ERROR,
                        "could not tell: scontrol timed out after 10 s",
                        evidence=("$ scontrol show node gpu-b01",),
                        remedy="check that slurmctld answers",
                        duration_s=10.0,
                    ),
                    CheckResult("nvlink.topology", Status.SKIP, "profile expects no NVLink", duration_s=0.0),
                    CheckResult("disk.scratch", Status.OK, "/scratch 3.1 TiB free, expected >= 1 TiB", duration_s=0.03),
                ),
            ),
        ),
    )


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No environment variable may sway rich (colour, width) during these tests."""
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES", "TERM"):
        monkeypatch.delenv(name, raising=False)


def rendered(fmt: str, report: Report | None = None, *, verbose: bool = False) -> str:
    out = io.StringIO()
    if fmt == "prometheus":  # the timestamp must not change from run to run
        prometheus_format.render(report or sample_report(), out, verbose=verbose, now=NOW)
    else:
        render(report or sample_report(), fmt, out, verbose=verbose)
    return out.getvalue()


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="")
    assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1 to write it"
    expected = path.read_bytes().decode("utf-8")
    assert text == expected, f"{name} differs from its golden file; run with UPDATE_GOLDEN=1 if that is meant"


# -- golden files -----------------------------------------------------------------------

GOLDEN_CASES = [
    ("table", False, "table.txt"),
    ("table", True, "table-verbose.txt"),
    ("json", False, "report.json"),
    ("jsonl", False, "report.jsonl"),
    ("junit", False, "junit.xml"),
    ("junit", True, "junit-verbose.xml"),
    ("prometheus", False, "metrics.prom"),
    ("html", False, "report.html"),
]


@pytest.mark.parametrize(("fmt", "verbose", "name"), GOLDEN_CASES, ids=[c[2] for c in GOLDEN_CASES])
def test_golden(fmt: str, verbose: bool, name: str) -> None:
    assert_golden(name, rendered(fmt, verbose=verbose))


def test_every_format_has_a_golden_file() -> None:
    assert {fmt for fmt, _, _ in GOLDEN_CASES} == set(FORMATS)


# -- dispatch ---------------------------------------------------------------------------


def test_unknown_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown output format 'yaml'"):
        render(sample_report(), "yaml", io.StringIO())


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_report_renders(fmt: str) -> None:
    text = rendered(fmt, Report(version="0.1.0", profile="p", hosts=()))
    assert text == "" if fmt == "jsonl" else text.endswith("\n")


def test_json_does_not_import_rich() -> None:
    """The Slurm prolog renders json/jsonl: it must not pay for importing rich."""
    src = Path(clustercheck.formats.__file__).resolve().parents[2]
    code = (
        "import io, sys\n"
        "from clustercheck.formats import render\n"
        "from clustercheck.result import CheckResult, HostReport, Report, Status\n"
        "report = Report('0', 'p', (HostReport('h', (CheckResult('c', Status.OK, 's'),)),))\n"
        "render(report, 'json', io.StringIO())\n"
        "render(report, 'jsonl', io.StringIO())\n"
        "leaked = sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.'))\n"
        "assert not leaked, leaked\n"
    )
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_formats_package_has_no_import_cycle() -> None:
    """An AST graph of src/clustercheck/formats (imports inside functions too): the registry
    imports its formats, a format imports the shared helpers of formats/text.py, and nothing
    leads back (table.py and junit.py once imported escape_controls from the package)."""
    import ast

    folder = Path(clustercheck.formats.__file__).parent
    package = "clustercheck.formats"
    modules = {p.stem: p for p in folder.glob("*.py")}
    name_of = {stem: package if stem == "__init__" else f"{package}.{stem}" for stem in modules}
    graph: dict[str, set[str]] = {}
    for stem, path in modules.items():
        edges = graph.setdefault(name_of[stem], set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from clustercheck.formats import table` names the submodule, `... import X` the package
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in name_of.values() else node.module
                    for a in node.names
                ]
            edges |= {t for t in targets if t == package or t.startswith(package + ".")}
    assert graph[package] >= {f"{package}.text", f"{package}.table"}  # the lazy import is seen

    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == start:
                return [*path, nxt]
            if nxt not in path:
                found = cycle_from(start, [*path, nxt])
                if found:
                    return found
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m, [m]))]
    assert cycles == [], " -> ".join(cycles[0])
    assert clustercheck.formats.escape_controls is escape_controls  # still exported by the package


def test_escape_controls() -> None:
    assert escape_controls("a\x1b[0mb\x00\r\x7f\x9b") == "a\\x1b[0mb\\x00\\x0d\\x7f\\x9b"
    assert escape_controls("tab\tnew\nline Grüße ✓") == "tab\tnew\nline Grüße ✓"
    assert escape_controls(b"raw \xff".decode("utf-8", "surrogateescape")) == "raw \\xff"
    assert escape_controls("\ufffe\ud800") == "\\ufffe\\ud800"


# -- json and jsonl ---------------------------------------------------------------------


def test_json_round_trips() -> None:
    report = sample_report()
    doc = json.loads(rendered("json"))
    assert doc["clustercheck"] == report.version
    assert doc["profile"] == report.profile
    assert doc["summary"] == report.counts()
    hosts = tuple(
        HostReport(host, tuple(CheckResult.from_json(c) for c in entry["checks"]))
        for host, entry in doc["hosts"].items()
    )
    assert Report(doc["clustercheck"], doc["profile"], hosts) == report
    assert {h: e["status"] for h, e in doc["hosts"].items()} == {h.host: h.status.value for h in report.hosts}


def test_jsonl_lines_stand_alone() -> None:
    report = sample_report()
    lines = rendered("jsonl").splitlines()
    expected = [(h.host, c) for h in report.hosts for c in h.checks]
    assert len(lines) == len(expected)
    for line, (host, check) in zip(lines, expected, strict=True):
        obj = json.loads(line)
        assert obj["host"] == host
        assert obj["profile"] == report.profile
        assert obj["clustercheck"] == report.version
        assert CheckResult.from_json(obj) == check


def test_jsonl_flushes_after_each_host() -> None:
    class Recorder(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.flushed_at: list[int] = []

        def flush(self) -> None:
            self.flushed_at.append(self.getvalue().count("\n"))
            super().flush()

    out = Recorder()
    render(sample_report(), "jsonl", out)
    assert out.flushed_at == [2, 4, 8]  # lines written when each host was done


# -- junit ------------------------------------------------------------------------------


def junit_root(verbose: bool = False) -> ET.Element:
    text = rendered("junit", verbose=verbose)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    return ET.fromstring(text.encode("utf-8"))


@pytest.mark.parametrize("verbose", [False, True])
def test_junit_parses_and_counts_match(verbose: bool) -> None:
    report = sample_report()
    root = junit_root(verbose)
    assert root.tag == "testsuites"
    assert root.get("name") == "clustercheck"
    counts = report.counts()
    assert root.get("tests") == str(sum(counts.values()))
    assert root.get("failures") == str(counts["fail"])
    assert root.get("errors") == str(counts["error"])
    assert root.get("skipped") == str(counts["skip"])
    assert float(root.get("time", "")) == pytest.approx(
        sum(c.duration_s for h in report.hosts for c in h.checks), abs=1e-3
    )
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [h.host for h in report.hosts]
    for suite, host in zip(suites, report.hosts, strict=True):
        cases = suite.findall("testcase")
        assert suite.get("tests") == str(len(cases)) == str(len(host.checks))
        assert suite.get("failures") == str(len(suite.findall("testcase/failure")))
        assert suite.get("errors") == str(len(suite.findall("testcase/error")))
        assert suite.get("skipped") == str(len(suite.findall("testcase/skipped")))
        for case, check in zip(cases, host.checks, strict=True):
            assert case.get("classname") == f"clustercheck.{host.host}"
            assert case.get("name") == check.id
            assert float(case.get("time", "")) == pytest.approx(check.duration_s, abs=1e-3)
            children = [child.tag for child in case]
            expected = {
                Status.OK: ["system-out"] if verbose else [],
                Status.WARN: ["system-out"],
                Status.FAIL: ["failure"],
                Status.ERROR: ["error"],
                Status.SKIP: ["skipped"],
            }[check.status]
            assert children == expected, (host.host, check.id)


def test_junit_statuses_carry_summary_evidence_and_remedy() -> None:
    root = junit_root()
    warn = root.find("testsuite[@name='gpu-a02']/testcase[@name='gpu.ecc']/system-out")
    assert warn is not None and warn.text is not None
    assert warn.text.startswith("WARN: 2 correctable ECC errors on GPU 3, expected 0\n")
    assert "Remedy: watch the counter" in warn.text

    failure = root.find("testsuite[@name='gpu-b01']/testcase[@name='gpu.xid']/failure")
    assert failure is not None and failure.text is not None
    assert failure.get("type") == "fail"
    assert failure.get("message") == 'Xid 79 on GPU 5: "fell off the bus"'
    assert escape_controls(NASTY) in failure.text  # quotes, markup, <a>&amp; all came back as they were
    assert "\x1b" not in failure.text
    assert failure.text.endswith("Remedy: drain the node: scontrol update nodename=gpu-b01 state=drain reason=xid79")

    error = root.find("testsuite[@name='gpu-b01']/testcase[@name='slurm.gres']/error")
    assert error is not None
    assert error.get("message") == "could not tell: scontrol timed out after 10 s"

    skipped = root.find("testsuite[@name='gpu-a01']/testcase[@name='ib.ports']/skipped")
    assert skipped is not None
    assert skipped.get("message") == "no InfiniBand HCA on this node"


def test_junit_is_valid_xml_whatever_the_text() -> None:
    """Every code point that XML 1.0 forbids, in every place text goes, still parses."""
    forbidden = "".join(chr(c) for c in range(32) if chr(c) not in "\t\n\r") + "\ufffe\uffff"
    forbidden += b"\xff\xfe".decode("utf-8", "surrogateescape")
    check = CheckResult(f"id{forbidden}", Status.FAIL, f"s{forbidden}", evidence=(forbidden,), remedy=forbidden)
    report = Report("0", "p", (HostReport(f"h{forbidden}", (check,)),))
    out = io.StringIO()
    render(report, "junit", out)
    root = ET.fromstring(out.getvalue().encode("utf-8"))
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert "\\x1b" in failure.text and "\\xff" in failure.text


# -- prometheus -------------------------------------------------------------------------


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    result: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in result, f"duplicate series {key}"
            result[key] = sample.value
    return result


def test_prometheus_parses_and_values_match() -> None:
    report = sample_report()
    got = samples(rendered("prometheus"))
    expected: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for host in report.hosts:
        for check in host.checks:
            for status in Status:
                labels = frozenset({"host": host.host, "check": check.id, "status": status.value}.items())
                expected["clustercheck_check_status", labels] = 1.0 if status is check.status else 0.0
            labels = frozenset({"host": host.host, "check": check.id}.items())
            expected["clustercheck_check_duration_seconds", labels] = check.duration_s
        expected["clustercheck_host_status", frozenset({"host": host.host}.items())] = float(
            ExitCode.for_status(host.status)
        )
    for status_name, count in report.counts().items():
        expected["clustercheck_checks", frozenset({"status": status_name}.items())] = float(count)
    expected["clustercheck_info", frozenset({"version": "0.1.0", "profile": "h100-dgx"}.items())] = 1.0
    expected["clustercheck_last_run_timestamp_seconds", frozenset()] = NOW
    assert got == expected


def test_prometheus_help_and_type_once_per_metric() -> None:
    lines = rendered("prometheus").splitlines()
    helps = [line.split()[2] for line in lines if line.startswith("# HELP ")]
    types = [line.split()[2] for line in lines if line.startswith("# TYPE ")]
    assert helps == types
    assert len(helps) == len(set(helps)) == 6


def test_prometheus_escapes_label_values() -> None:
    host = 'odd"host\\name\nline2'
    report = Report('v"1', "p\\q", (HostReport(host, (CheckResult('c"\\\n', Status.FAIL, "s"),)),))
    text = rendered("prometheus", report)
    assert 'host="odd\\"host\\\\name\\nline2"' in text
    got = samples(text)
    labels = frozenset({"host": host, "check": 'c"\\\n', "status": "fail"}.items())
    assert got["clustercheck_check_status", labels] == 1.0
    assert got["clustercheck_host_status", frozenset({"host": host}.items())] == 2.0
    assert got["clustercheck_info", frozenset({"version": 'v"1', "profile": "p\\q"}.items())] == 1.0


def test_prometheus_repeated_series_last_result_wins() -> None:
    """Merged runs may repeat a (host, check); a scrape must not hold a series twice."""
    first = HostReport("h", (CheckResult("c", Status.FAIL, "s"), CheckResult("d", Status.OK, "s")))
    again = HostReport("h", (CheckResult("c", Status.OK, "s", duration_s=2.0),))
    got = samples(rendered("prometheus", Report("0", "p", (first, again))))
    assert got["clustercheck_check_status", frozenset({"host": "h", "check": "c", "status": "ok"}.items())] == 1.0
    assert got["clustercheck_check_duration_seconds", frozenset({"host": "h", "check": "c"}.items())] == 2.0
    assert got["clustercheck_host_status", frozenset({"host": "h"}.items())] == 0.0
    assert got["clustercheck_checks", frozenset({"status": "ok"}.items())] == 2.0


def test_prometheus_timestamp_defaults_to_now() -> None:
    before = time.time()
    out = io.StringIO()
    render(sample_report(), "prometheus", out)
    got = samples(out.getvalue())
    assert before <= got["clustercheck_last_run_timestamp_seconds", frozenset()] <= time.time()


# -- table ------------------------------------------------------------------------------

SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(text: str) -> set[str]:
    """SGR parameters that set a foreground colour."""
    params = {p for match in SGR.finditer(text) for p in match.group(1).split(";")}
    return {p for p in params if p.isdigit() and (30 <= int(p) <= 38 or 90 <= int(p) <= 97)}


@pytest.mark.parametrize("verbose", [False, True])
def test_table_has_no_escape_codes_off_a_terminal(verbose: bool) -> None:
    text = rendered("table", verbose=verbose)
    assert "\x1b" not in text  # neither colour nor the evidence's own escapes


def test_table_verbose_shows_evidence_and_remedy_safely() -> None:
    text = rendered("table", verbose=True)
    assert "\\x1b[31mred\\x1b[0m" in text
    assert "[bold]x[/bold]" in text  # shown as is, not read as rich markup
    assert "remedy: drain the node" in text
    assert "Grüße" in text


def test_table_footer() -> None:
    last = rendered("table").splitlines()[-1]
    assert last == "3 hosts: 1 ok, 1 warn, 1 fail · checks: 3 ok, 1 warn, 1 fail, 2 skip, 1 error"


@pytest.mark.parametrize("width", [80, 120])
def test_table_fits_its_width(width: int) -> None:
    out = io.StringIO()
    table_format.render(sample_report(), out, verbose=True, width=width)
    assert max(len(line) for line in out.getvalue().splitlines()) <= width


def test_table_colours_on_a_terminal() -> None:
    out = io.StringIO()
    table_format.render(sample_report(), out, force_terminal=True)
    assert {"31", "32", "33", "35"} <= colour_codes(out.getvalue())  # fail, ok, warn, error
    assert "\x1b[31mred" not in out.getvalue()


def test_table_honours_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    table_format.render(sample_report(), out, verbose=True, force_terminal=True)
    assert colour_codes(out.getvalue()) == set()
