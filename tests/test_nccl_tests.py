"""nccl-tests result tables: every real output of the corpus, old and new layouts, prefixes, verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, cli

from clustercheck.analyzers.nccl_tests import NotATable, judge, parse, parse_row

TESTS = CORPUS / "nccl_tests"
LOGS = CORPUS / "nccl_logs"

# file -> (rows, Avg bus bandwidth, peak busbw, largest size, check column, ranks)
EXPECTED = {
    # nccl-tests >= 2.13 layout (redop, root, #wrong) behind srun -l "0: "; no header/footer published
    "aws-awsome-allreduce-2x-p4de-srun-prefixed.txt": (29, None, 78.33, 2147483648, "#wrong", 0),
    "aws-awsome-allreduce-2x-p5-srun-prefixed.txt": (32, None, 487.26, 17179869184, "#wrong", 0),
    # OpenMPI "[1,0]<stdout>:" prefix; the authors elided rows with "..."
    "aws-awsome-allreduce-2x-p5-eks-mpirun-excerpt.txt": (7, 52.9753, 437.89, 2147483648, "#wrong", 0),
    "aws-awsome-allreduce-p5-awsbatch-mpirun-prefixed.txt": (32, 156.742, 483.35, 17179869184, "#wrong", 0),
    # the first header lines lost their "# " as published
    "gcp-a3mega-2node-h100-allreduce.txt": (31, 70.742, 338.82, 8589934592, "#wrong", 16),
    # older layout with an "error" column; all_gather has no redop/root, alltoall a blank redop
    "superbench-allgather_perf-8xA100.txt": (34, 58.2651, 230.07, 8589934592, "error", 8),
    "superbench-allreduce_perf-8xA100.txt": (34, 68.4048, 235.26, 8589934592, "error", 8),
    "superbench-alltoall_perf-8xA100.txt": (34, 58.6481, 226.16, 8589934592, "error", 8),
    "superbench-broadcast_perf-8xA100.txt": (34, 64.8653, 234.7, 8589934592, "error", 8),
    "superbench-reduce_perf-8xA100.txt": (34, 65.018, 231.28, 8589934592, "error", 8),
    "superbench-reducescatter_perf-8xA100.txt": (34, 60.168, 231.52, 8589934592, "error", 8),
}


def test_every_corpus_output_is_covered() -> None:
    assert {p.name for p in TESTS.iterdir()} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_tables(name: str) -> None:
    rows, avg, peak, largest, check, ranks = EXPECTED[name]
    report = judge(parse((TESTS / name).read_text(), name))
    data = report.to_json()
    assert len(data["rows"]) == rows
    assert data["avg_busbw"] == avg
    assert data["peak_busbw"] == pytest.approx(peak)
    assert data["largest_size"] == largest
    assert data["check_column"] == check
    assert data["ranks"] == ranks
    assert data["wrong"] == 0 and data["status"] == "ok"
    assert all(r["out_of_place"]["busbw"] <= peak and r["in_place"]["busbw"] <= peak for r in data["rows"])


def test_columns_between_type_and_time_are_kept() -> None:
    reduce = parse((TESTS / "superbench-reduce_perf-8xA100.txt").read_text())
    assert reduce.rows[-1].extra == ("sum", "0")  # redop and root
    broadcast = parse((TESTS / "superbench-broadcast_perf-8xA100.txt").read_text())
    assert broadcast.rows[-1].extra == ("0",)  # root only
    allgather = parse((TESTS / "superbench-allgather_perf-8xA100.txt").read_text())
    assert allgather.rows[-1].extra == ()
    # a stray "NCCL INFO Launch mode Parallel" line inside the table is not a row
    assert parse((TESTS / "superbench-allreduce_perf-8xA100.txt").read_text()).rows[0].line == 17


def test_tables_inside_nccl_logs() -> None:
    old = parse((LOGS / "cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt").read_text())
    assert old.avg_busbw == 0.708142 and old.peak is not None and old.peak.busbw == 3.41
    assert old.hosts == ("ip-172-31-16-64", "ip-172-31-30-227")
    # rows cut apart by other ranks' NCCL INFO lines glued to their fragments
    spliced = parse((LOGS / "timez-a100pcie-nvlinkbridge-roce-noGDR-subsys-all-nccl2.27.7.log.txt").read_text())
    assert [r.size for r in spliced.rows] == [8388608 << i for i in range(11)]
    first = spliced.rows[0]
    assert (first.out_of_place.busbw, first.in_place.busbw) == (100.66, 103.59)
    assert spliced.avg_busbw == 178.078


def test_thresholds() -> None:
    text = (TESTS / "gcp-a3mega-2node-h100-allreduce.txt").read_text()
    assert judge(parse(text), min_busbw=300).status.value == "ok"
    low = judge(parse(text), min_busbw=350)
    assert low.status.value == "fail"
    assert "peak bus bandwidth 338.82 GB/s at 8 GiB, expected at least 350 GB/s" in low.findings[-1].message
    assert judge(parse(text), min_avg_busbw=80).status.value == "fail"
    no_avg = judge(parse((TESTS / "aws-awsome-allreduce-2x-p5-srun-prefixed.txt").read_text()), min_avg_busbw=1)
    assert no_avg.status.value == "warn"


def test_wrong_results_fail(tmp_path: Path) -> None:
    text = (TESTS / "aws-awsome-allreduce-2x-p4de-srun-prefixed.txt").read_text().splitlines()
    # one edit: the in-place check of the 1 MiB row reports 3 wrong elements
    row = next(i for i, line in enumerate(text) if line.split()[1:2] == ["1048576"])
    text[row] = text[row][: text[row].rstrip().rfind(" ")] + " 3"
    report = judge(parse("\n".join(text)))
    assert report.status.value == "fail"
    assert "3 wrong results (data corruption) at 1 sizes, first at 1 MiB" in report.findings[0].message


def test_row_parser() -> None:
    assert parse_row("    8  2  float  sum  -1  164.3  0.00  0.00  0  163.3  0.00  0.00  0") is not None
    assert parse_row("    8  2  float  164.3  0.00  0.00  N/A  163.3  0.00  0.00  N/A") is not None
    assert parse_row("    8  2  banana  sum  -1  164.3  0.00  0.00  0  163.3  0.00  0.00  0") is None
    assert parse_row("# Avg bus bandwidth    : 52.9753") is None


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=2000))
def test_parser_never_crashes(text: str) -> None:
    try:
        report = judge(parse(text), min_busbw=1.0)
    except NotATable:
        return
    json.dumps(report.to_json())


def test_cli(tmp_path: Path) -> None:
    ok = cli("nccl-tests", TESTS / "gcp-a3mega-2node-h100-allreduce.txt", "--min-busbw", "300")
    assert ok.returncode == 0, ok.stderr
    assert "Avg bus bandwidth: 70.742 GB/s" in ok.stdout
    low = cli("nccl-tests", TESTS / "gcp-a3mega-2node-h100-allreduce.txt", "--min-busbw", "400", "-f", "json")
    assert low.returncode == 2 and json.loads(low.stdout)["peak_busbw"] == 338.82
    piped = cli("nccl-tests", "-", stdin=(TESTS / "superbench-alltoall_perf-8xA100.txt").read_text())
    assert piped.returncode == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("no table here\n")
    bad = cli("nccl-tests", notes)
    assert bad.returncode == 64 and str(notes) in bad.stderr and "no nccl-tests result rows" in bad.stderr
    missing = cli("nccl-tests", tmp_path / "nope.txt")
    assert missing.returncode == 64 and "no such file" in missing.stderr
