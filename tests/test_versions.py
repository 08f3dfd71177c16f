"""CUDA <-> driver rules: NVIDIA's tables row by row (against the release-notes rows kept with
their sources in tests/corpus/cuda/), and the verdicts they give."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS

from clustercheck.analyzers.versions import (
    FORWARD_COMPAT,
    MINOR_COMPAT_FLOOR,
    TOOLKIT_DRIVERS,
    CudaVersion,
    ForwardCompat,
    ToolkitRow,
    driver_cuda,
    is_datacenter_gpu,
    judge_cuda,
    parse_require_cuda,
    toolkit_row,
    version_key,
)
from clustercheck.result import Status

# NVIDIA's tables as published, one row per line, each naming its source (tests/corpus/MANIFEST.md).
TABLES = CORPUS / "cuda" / "toolkit-driver-versions.csv"
MATRIX = CORPUS / "cuda" / "forward-compat-matrix.csv"


def published(table: str) -> dict[str, str]:
    """{"12.4 Update 1": "550.54.15", ...}: the Linux x86_64 column of one of NVIDIA's tables."""
    with TABLES.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["table"] == table]
    assert rows and all(r["source"].count("https://docs.nvidia.com/") >= 1 for r in rows), table
    assert all(r["linux_x86_64_driver"].startswith(">= ") for r in rows)
    return {r["cuda_toolkit"]: r["linux_x86_64_driver"].removeprefix(">= ") for r in rows}


def below(driver: str) -> str:
    """A driver version just under `driver` (535.104.05 -> 535.104.4)."""
    parts = list(version_key(driver))
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] > 0:
            parts[i] -= 1
            return ".".join(map(str, parts[: i + 1])) + ".999" * (len(parts) - i - 1)
    raise AssertionError(driver)


def test_table3_matches_the_release_notes_row_by_row() -> None:
    expected = published("release-notes-table-3")
    assert len(expected) == 53
    ours = {row.release: row.driver for row in TOOLKIT_DRIVERS if "Table 3" in row.source}
    assert ours == expected
    # and before CUDA 11, the compatibility guide's Table 2 (no minor-version compatibility)
    guide = published("compatibility-guide-table-2")
    assert {r.release: r.driver for r in TOOLKIT_DRIVERS if "Table 2" in r.source} == guide
    assert {r.cuda for r in TOOLKIT_DRIVERS if "Table 2" in r.source} == {f"{v}.0" for v in guide}


@pytest.mark.parametrize("row", TOOLKIT_DRIVERS, ids=lambda r: r.cuda)
def test_each_row_is_ok_at_its_driver_and_not_below(row: object) -> None:
    from clustercheck.analyzers.versions import ToolkitRow

    assert isinstance(row, ToolkitRow)
    cuda = CudaVersion.parse(row.cuda)
    assert toolkit_row(cuda) == row
    at = judge_cuda(cuda, row.driver)
    assert at.status is Status.OK and at.needs == row.driver, at.summary
    under = judge_cuda(cuda, below(row.driver))
    floor = MINOR_COMPAT_FLOOR.get(cuda.major)
    if floor and version_key(below(row.driver)) >= version_key(floor[0]):
        assert under.status is Status.WARN and "minor-version compatibility only" in under.summary
    else:
        assert under.status is Status.FAIL and "CUDA cannot initialize" in under.summary


@pytest.mark.parametrize("major", sorted(MINOR_COMPAT_FLOOR))
def test_each_major_floor(major: int) -> None:
    floor = MINOR_COMPAT_FLOOR[major][0]
    newest = next(CudaVersion.parse(r.cuda) for r in TOOLKIT_DRIVERS if r.cuda.startswith(f"{major}."))
    at_floor = judge_cuda(newest, floor)
    row = toolkit_row(newest)
    assert row is not None
    assert at_floor.status is (Status.OK if version_key(floor) >= version_key(row.driver) else Status.WARN)
    assert judge_cuda(newest, below(floor)).status is Status.FAIL


def test_floors_are_the_sourced_ones() -> None:
    floors = {m: f for m, (f, _) in MINOR_COMPAT_FLOOR.items()}
    assert floors == {13: "580.65.06", 12: "525.60.13", 11: "450.80.02"}
    # Table 2 gives the branch (">= 525"); the patch level is the major's GA driver in Table 3
    # (13.x, 12.x) or the footnote's Tesla Recommended Driver (11.x)
    branches = published("release-notes-table-2")
    assert {int(k.split(".")[0]): v for k, v in branches.items()} == {m: f.split(".")[0] for m, f in floors.items()}
    table3 = published("release-notes-table-3")
    footnote = published("release-notes-table-2-footnote")
    assert floors == {13: table3["13.0 GA"], 12: table3["12.0 GA"], 11: footnote["11.x"]}


def test_forward_compat_matrix_is_the_guides() -> None:
    with MATRIX.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert all("forward-compatibility.html" in r["source"] for r in rows)
    published_matrix = {
        tuple(int(n) for n in r["package"].removeprefix("cuda-compat-").split("-")): tuple(
            int(b) for b in r["compatible_driver_branches"].split()
        )
        for r in rows
    }
    assert published_matrix == FORWARD_COMPAT


def test_the_issue_example_word_for_word() -> None:
    verdict = judge_cuda(CudaVersion.parse("12.4"), "535.104.05", host_cuda="12.2")
    assert verdict.status is Status.WARN
    assert verdict.summary == (
        "image CUDA 12.4 needs driver >= 550.54.14 (or >= 525.60.13 with minor-version compatibility); "
        "host driver 535.104.05 supports CUDA 12.2: minor-version compatibility only, PTX JIT unavailable"
    )


def test_a_newer_major_than_the_driver_fails() -> None:
    verdict = judge_cuda(CudaVersion.parse("13.0.1"), "570.124.06")
    assert verdict.status is Status.FAIL
    assert "below CUDA 13's minimum driver" in verdict.summary and "supports CUDA 12.8" in verdict.summary


def test_newer_drivers_run_older_toolkits() -> None:
    assert judge_cuda(CudaVersion.parse("11.8"), "580.65.06").status is Status.OK


def test_a_toolkit_newer_than_the_table_is_judged_by_what_the_driver_reports() -> None:
    ahead = CudaVersion.parse("13.4")
    assert judge_cuda(ahead, "615.10.01", host_cuda="13.4").status is Status.OK
    behind = judge_cuda(ahead, "595.71.05", host_cuda="13.2")
    assert behind.status is Status.WARN and "not in NVIDIA's table (which ends at CUDA 13.2)" in behind.summary
    assert judge_cuda(ahead, "575.57.08", host_cuda="12.9").status is Status.FAIL


@pytest.mark.parametrize(("compat", "branches"), sorted(FORWARD_COMPAT.items()))
def test_forward_compat_matrix_row_by_row(compat: tuple[int, int], branches: tuple[int, ...]) -> None:
    image = CudaVersion(*compat)
    row = toolkit_row(image)
    compat_driver = row.driver if row else "615.10.01"  # CUDA 13.4 is newer than Table 3
    on_h100 = ForwardCompat(compat_driver, "NVIDIA H100 80GB HBM3")
    for branch in range(470, 620, 5):
        driver = f"{branch}.10.01"
        if row and version_key(driver) >= version_key(row.driver):
            continue  # the driver runs it without compatibility packages
        verdict = judge_cuda(image, driver, compat=on_h100)
        if branch in branches:
            assert verdict.rule == "forward compatibility" and verdict.status is Status.OK, verdict.summary
        else:
            assert verdict.rule != "forward compatibility", verdict.summary


def test_forward_compat_needs_a_datacenter_gpu_and_the_images_own_branches_win() -> None:
    image = CudaVersion.parse("12.4.1")
    geforce = judge_cuda(image, "535.104.05", compat=ForwardCompat("550.54.15", "NVIDIA GeForce RTX 4090"))
    assert geforce.status is Status.WARN and "needs a data-center GPU" in geforce.summary and "804" in geforce.summary
    # the nvidia/cuda:12.4.1 image's NVIDIA_REQUIRE_CUDA also names R470 and R525 (domain-facts §A.4)
    require = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 " * 1
    require += "brand=tesla,driver>=525,driver<526 brand=tesla,driver>=535,driver<536"
    assert parse_require_cuda(require) == (470, 525, 535)
    on_525 = judge_cuda(
        image, "525.147.05", compat=ForwardCompat("550.54.15", "NVIDIA A100-SXM4-80GB", (470, 525, 535))
    )
    assert on_525.status is Status.OK and "the image's NVIDIA_REQUIRE_CUDA" in on_525.summary
    older_compat = judge_cuda(image, "535.104.05", compat=ForwardCompat("545.23.08", "NVIDIA H100 80GB HBM3"))
    assert older_compat.status is Status.WARN and "older than its CUDA 12.4.1" in older_compat.summary


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("12.4.1", CudaVersion(12, 4, 1)),
        ("12.4", CudaVersion(12, 4, None)),
        ("12.1.20230222", CudaVersion(12, 1, None)),  # version.json's date stamp (domain-facts §B.3)
        ("12.2.140", CudaVersion(12, 2, None)),  # a build number (JetPack)
        ("12.4.1.003", CudaVersion(12, 4, 1)),
        ("11.8.0-1", CudaVersion(11, 8, 0)),
    ],
)
def test_cuda_version_parsing(text: str, parsed: CudaVersion) -> None:
    assert CudaVersion.parse(text) == parsed


def test_bad_versions_are_value_errors() -> None:
    for bad in ("twelve", "12", ""):
        with pytest.raises(ValueError):
            CudaVersion.parse(bad)
    with pytest.raises(ValueError, match="not a version number"):
        version_key("535.x")


def test_driver_cuda_from_table3() -> None:
    assert [driver_cuda(d) for d in ("470.82.01", "535.104.05", "550.54.15", "580.65.06", "400.1")] == [
        "11.4",
        "12.2",
        "12.4",
        "13.0",
        None,
    ]


def test_datacenter_gpu_names() -> None:
    yes = [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-80GB",
        "Tesla T4",
        "NVIDIA A10G",
        "NVIDIA L40S",
        "NVIDIA GH200 480GB",
    ]
    no = ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000", "Quadro P400", "GeForce GTX 960M"]
    assert all(is_datacenter_gpu(n) for n in yes) and not any(is_datacenter_gpu(n) for n in no)


_VERSIONS = st.tuples(st.integers(400, 620), st.integers(0, 200), st.integers(0, 99)).map(
    lambda t: f"{t[0]}.{t[1]}.{t[2]:02d}"
)
_RANK = {Status.FAIL: 0, Status.WARN: 1, Status.OK: 2}


@given(st.sampled_from(TOOLKIT_DRIVERS), _VERSIONS, _VERSIONS)
@settings(max_examples=300, deadline=None)
def test_a_newer_driver_never_judges_worse(row: ToolkitRow, a: str, b: str) -> None:
    cuda = CudaVersion.parse(row.cuda)
    low, high = sorted((a, b), key=version_key)
    assert _RANK[judge_cuda(cuda, low).status] <= _RANK[judge_cuda(cuda, high).status]
