"""One registry of report formats (`clustercheck.formats.Format`): every name in it is a module
with a renderer, and every command that writes a report offers exactly those names."""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path

import pytest
from tests.helpers import DEMO, cli

from clustercheck import formats
from clustercheck.result import CheckResult, HostReport, Report, Status

REPORT = Report("0", "p", (HostReport("n1", (CheckResult("node.x", Status.OK, "fine"),)),))


@pytest.mark.parametrize("name", formats.FORMATS)
def test_every_format_is_a_module_with_a_renderer(name: str) -> None:
    module = importlib.import_module(f"clustercheck.formats.{name}")
    out = io.StringIO()
    module.render(REPORT, out)
    assert out.getvalue().strip(), name


def test_an_unknown_format_is_a_usage_error_naming_the_choices() -> None:
    proc = cli("run", "--replay", DEMO, "-f", "yaml")
    assert proc.returncode == 64, proc.stderr
    for name in ("yaml", "table", "json"):
        assert name in proc.stderr


def test_report_writes_every_format_run_does(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    run = cli("run", "--replay", DEMO, "-f", "jsonl", "-o", results)
    assert run.returncode in (0, 1, 2, 3), run.stderr
    for name in formats.FORMATS:
        proc = cli("report", results, "-f", name)
        assert proc.returncode in (0, 1, 2, 3), (name, proc.stderr)
        assert proc.stdout.strip(), name
    lines = [json.loads(line) for line in cli("report", results, "-f", "jsonl").stdout.splitlines()]
    assert {line["host"] for line in lines} == {
        line["host"] for line in map(json.loads, results.read_text().splitlines())
    }
