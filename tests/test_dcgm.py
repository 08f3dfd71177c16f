"""dcgm.diag: the reader on every real DCGM output of the corpus, the check through the check API
(a stand-in `dcgmi` on PATH that prints a corpus file: the one place a stand-in is right, as this
machine has no GPU or DCGM) and through the CLI on fixtures recorded that way."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, REPO, cli

from clustercheck import Host
from clustercheck import profile as profiles
from clustercheck.errors import ProfileError
from clustercheck.facts.dcgm import DiagParseError, DiagRun, parse_diag
from clustercheck.result import CheckResult, Status
from clustercheck.runner import run_checks
from clustercheck.transports import local as local_transport
from clustercheck.transports.local import LocalTransport

DIAG = CORPUS / "dcgm_diag"
GB10 = DIAG / "unknown-repo-go-test-dcgm-4.2.3-gb10-diag-r1-j-software-fail-CLAIMED-VERBATIM.json.txt"
TESTSTRING = DIAG / "dcgm-testdiagmanagerstrings-per-gpu-json-TESTSTRING.json.txt"
B200 = DIAG / "issue-dcgm-253-diag-table-4.4.1-8xB200-slurm-job-pcie-internal-error.txt"
L40S = DIAG / "issue-dcgm-253-diag-table-4.2.3-L40S-pcie-fail-internal-error.txt"
BUSY = DIAG / "issue-go-dcgm-52-diag-table-3.3.1-gpu0-busy-fail-gpu1-pass-EXCERPT.txt"
NO_ENGINE = DIAG / "issue-dcgm-exporter-193-dcgmi-no-hostengine-connection-error.txt"
PLUGINS = DIAG / "issue-dcgm-254-dcgmi-diag-cannot-load-plugins-return-minus30.txt"
CUDA13 = DIAG / "issue-dcgm-254-diag-table-4.4.1-4xV100-pcie-fail-missing-cuda13-helper-EXCERPT.txt"
ALL_SKIP = DIAG / "issue-dcgm-139-diag-r3-j-3.x-all-skip-T400-EXCERPT.json.txt"
FRAGMENT = DIAG / "issue-dcgm-215-diag-4.x-json-diagnostic-test-8gpu-fragment-EXCERPT.json.txt"
V304 = DIAG / "issue-dcgm-55-diag-r3-table-3.0.4-deployment-EXCERPT.txt"
V331 = DIAG / "issue-go-dcgm-52-diag-r2-table-3.3.1-deployment-EXCERPT.txt"
V337 = DIAG / "issue-dcgm-198-diag-r2-table-3.3.7-passes-with-nvlinks-down-EXCERPT.txt"
NVLINK = DIAG / "issue-dcgm-198-dcgmi-nvlink-link-status-2gpu-all-down.txt"
PROFILE = FIXTURES / "dcgm-gb10-software-fail" / "profile.yaml"  # dcgm.diag at level 1


def _dcgm() -> Any:
    from clustercheck.checks import dcgm

    return dcgm


def judged(path: Path, *, exit_code: int = 0, exclude: tuple[str, ...] = ()) -> tuple[Status, str, dict[str, Any]]:
    """The check's verdict on a corpus file, through its pure judge (status, summary, data)."""
    dcgm = _dcgm()
    try:
        run = parse_diag(path.read_text(), "", exit_code)
        result = dcgm.judge(run, level=1, exclude=exclude, data={}, exit_code=exit_code)
    except DiagParseError as exc:
        return Status.ERROR, str(exc), {}
    except dcgm.DiagError as exc:
        return Status.ERROR, str(exc), exc.data
    return result.status, result.summary, dict(result.data)


def judged_action(path: Path) -> str:
    """The action of the check's fail or warn on a corpus file (the Result's, not its data's)."""
    result = _dcgm().judge(parse_diag(path.read_text(), "", 0), level=1, exclude=(), data={}, exit_code=0)
    return str(result.action)


# -- the reader on every corpus file, each asserting the MANIFEST's conclusion -------------


def _gb10(run: DiagRun) -> None:
    assert (run.format, run.version, run.driver) == ("json-4.x", "4.2.3", "580.82.09")
    (gpu0,) = [r for r in run.results if r.entity]
    assert (gpu0.test, gpu0.entity, gpu0.status, gpu0.error_ids) == ("software", "GPU 0", "Fail", (29,))
    assert "Persistence mode for GPU 0 is disabled" in gpu0.warnings[0]
    (summary,) = [r for r in run.results if not r.entity]
    assert summary.status == "Fail" and "9223372036854775794" in summary.info[0]


def _teststring(run: DiagRun) -> None:
    assert run.format == "json-3.x" and run.version == "1.7"
    by = {(r.test, r.entity): r for r in run.results}
    assert by[("memory", "GPU 0")].status == "Skip" and "ECC memory on GPU 0" in by[("memory", "GPU 0")].warnings[0]
    assert {by[("memory", f"GPU {i}")].status for i in (1, 2, 3)} == {"Pass"}
    assert {by[("diagnostic", f"GPU {i}")].status for i in range(4)} == {"Skip"}
    assert by[("Denylist", "GPUs 0,1,2,3")].status == "Pass"  # 3.x `gpu_ids`: one result for four GPUs
    # the file also has sm_stress FAIL on GPUs 0, 2 and 3 (the MANIFEST row names only the SKIPs)
    assert [g for g in range(4) if by[("sm_stress", f"GPU {g}")].status == "Fail"] == [0, 2, 3]


def _b200(run: DiagRun) -> None:
    assert (run.format, run.version, run.complete) == ("text", "4.4.1", True)
    pcie = [r for r in run.results if r.test == "pcie"]
    assert [r.status for r in pcie if not r.entity] == ["Fail"]
    assert {r.entity: r.status for r in pcie if r.entity} == {f"GPU {i}": "Pass" for i in range(8)}
    (warning,) = next(r for r in pcie if not r.entity).warnings
    # re-joined across the 45-character wrap, mid-word ("v" + "alue", "Resta" + "rt")
    assert "Syntax error: value, object or array expected." in warning
    assert "Reset GPU. Restart DCGM. Rerun diagnostics." in warning


def _l40s(run: DiagRun) -> None:
    assert (run.version, run.driver, run.complete) == ("4.2.3", "570.148.08", False)  # no closing border
    (pcie,) = [r for r in run.results if r.test == "pcie" and not r.entity]
    assert pcie.status == "Fail" and len(pcie.warnings) == 4
    assert (
        "'A child process (152) exited with non-zero status 1' Check DCGM and system logs for errors."
        in (pcie.warnings[0])
    )
    assert {r.status for r in run.results if r.entity} == {"Pass"}


def _busy(run: DiagRun) -> None:
    assert run.complete is False  # an excerpt from the table's middle
    mem = {r.entity: r for r in run.results if r.test == "GPU Memory"}
    assert (mem["GPU 0"].status, mem["GPU 1"].status) == ("Fail", "Pass")
    assert "'CUDA-capable device(s) is/are busy or unavailable'" in mem[""].warnings[0]
    assert "Unable to create CUDA context" in mem[""].warnings[0]


def _could_not_run(kind: str) -> Callable[[DiagRun], None]:
    def check(run: DiagRun) -> None:
        assert (run.format, run.could_not_run, run.results) == ("none", kind, ())
        assert run.message.startswith("Error:")

    return check


def _deployment(version: str, tests: int) -> Callable[[DiagRun], None]:
    def check(run: DiagRun) -> None:
        assert run.format == "text" and run.version == version and run.complete is False
        assert [r.status for r in run.results] == ["Pass"] * tests
        assert run.results[0].test == "Denylist" and run.results[0].category == "Deployment"

    return check


def _cuda13(run: DiagRun) -> None:
    (pcie,) = run.results
    assert (pcie.test, pcie.status, run.version) == ("pcie", "Fail", "4.4.1")
    assert "'A child process (2378806) exited with non-zero status 1'" in pcie.warnings[0]


READINGS: dict[Path, Callable[[DiagRun], None] | str] = {
    GB10: _gb10,
    TESTSTRING: _teststring,
    B200: _b200,
    L40S: _l40s,
    BUSY: _busy,
    CUDA13: _cuda13,
    NO_ENGINE: _could_not_run("no_hostengine"),
    PLUGINS: _could_not_run("plugins"),
    V304: _deployment("", 9),
    V331: _deployment("3.3.1", 7),
    V337: _deployment("3.3.7", 1),
    # not valid documents as they stand: an error saying why, never a (partial) pass
    ALL_SKIP: r"does not parse at line 6",
    FRAGMENT: r"ends before the document does",
    NVLINK: r"no status DCGM writes",  # `dcgmi nvlink` output is not a diag table
}


def test_every_corpus_file_has_a_reading() -> None:
    assert sorted(READINGS) == sorted(DIAG.iterdir())


@pytest.mark.parametrize("path", sorted(READINGS), ids=lambda p: p.name[:60])
def test_reader_on_the_corpus(path: Path) -> None:
    reading = READINGS[path]
    if isinstance(reading, str):
        with pytest.raises(DiagParseError, match=reading):
            parse_diag(path.read_text())
    else:
        reading(parse_diag(path.read_text()))


# -- the verdict on every corpus file ------------------------------------------------------

VERDICTS: dict[Path, tuple[Status, str | None, str]] = {
    # file: (status, the deciding action, words the summary must hold)
    GB10: (Status.FAIL, "FIX_CONFIG", "software on GPU 0 failed: Persistence Mode"),
    TESTSTRING: (Status.FAIL, "REPLACE_HW", "sm_stress on GPU 0 failed: Max stress level of 2128.7"),
    B200: (Status.ERROR, "FIX_CONFIG", "pcie could not run: DCGM's test helper failed"),
    L40S: (Status.ERROR, "FIX_CONFIG", "pcie could not run"),
    CUDA13: (Status.ERROR, "FIX_CONFIG", "pcie could not run"),
    BUSY: (Status.ERROR, "RESET_GPU", "GPU Memory on GPU 0 could not run: the GPU is busy or unavailable"),
    NO_ENGINE: (Status.ERROR, "FIX_CONFIG", "nv-hostengine is not running"),
    PLUGINS: (Status.ERROR, "FIX_CONFIG", "plugins do not load"),
    V304: (Status.ERROR, None, "the output was cut"),  # level 3 proven only as far as Deployment
    V331: (Status.ERROR, None, "the output was cut"),
    V337: (Status.ERROR, None, "the output was cut"),
    ALL_SKIP: (Status.ERROR, None, "does not parse"),
    FRAGMENT: (Status.ERROR, None, "does not parse"),
    NVLINK: (Status.ERROR, None, "no status DCGM writes"),
}


@pytest.mark.parametrize("path", sorted(VERDICTS), ids=lambda p: p.name[:60])
def test_verdict_on_the_corpus(path: Path) -> None:
    want, action, words = VERDICTS[path]
    status, summary, data = judged(path)
    assert status is want, summary
    assert words in summary
    if status is Status.ERROR:  # an error carries no result action: its data says what to try
        assert data.get("action") == action
    else:  # a fail or warn carries it as every check's result does, not in its data
        assert judged_action(path) == action and "action" not in data


def test_teststring_failure_also_says_the_skips_are_not_proven() -> None:
    status, summary, data = judged(TESTSTRING)
    assert status is Status.FAIL and "GPU 2" in summary and "GPU 3" in summary
    kinds = {(p["test"], p["entity"]): p["kind"] for p in data["problems"]}
    assert kinds[("memory", "GPU 0")] == "skipped" and kinds[("diagnostic", "GPU 3")] == "skipped"
    assert ("memory", "GPU 1") not in kinds
    assert "not proven" in summary


def test_all_skip_document_made_whole_is_an_error_not_a_pass() -> None:
    """#139's level-3 run with the reporter's elision and the cut put back as the shape demands
    (the elided Deployment object dropped, the document closed): every test Skip -> error."""
    text = ALL_SKIP.read_text().replace('\t\t\t{"..."},\n', "")
    closed = text.rstrip().rstrip(",") + "\n\t\t\t\t]\n\t\t\t}\n\t\t]\n\t}\n}\n"  # tests, category, categories
    run = parse_diag(closed)
    assert {r.status for r in run.results} == {"Skip"} and len(run.results) == 5
    with pytest.raises(_dcgm().DiagError, match=r"not proven: PCIe on GPU 0 was skipped"):
        _dcgm().judge(run, level=3, exclude=(), data={}, exit_code=0)


def test_exclude_leaves_a_test_unjudged_and_says_so() -> None:
    status, summary, data = judged(B200, exclude=("pcie",))
    assert status is Status.OK, summary
    assert data["excluded"] == ["pcie"] and "passed on GPU 0" in summary
    # 3.x display names and canonical names are the same test
    status, summary, data = judged(BUSY, exclude=("memory",))
    assert status is Status.ERROR and data["excluded"] == ["GPU Memory"]
    assert summary == "no test result left to judge (all excluded: GPU Memory)"


def test_a_valid_pass_with_a_nonzero_exit_is_not_a_pass() -> None:
    status, summary, _ = judged(B200, exit_code=1, exclude=("pcie",))
    assert status is Status.ERROR and "dcgmi exited 1" in summary


# -- garbage: the reader refuses it, never a pass ------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_reader_on_garbage_text(text: str) -> None:
    try:
        run = parse_diag(text)
    except DiagParseError:
        return
    status, _, _ = _judge_run(run)
    assert status is not Status.OK or all(r.status == "Pass" for r in run.results)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from(["DCGM Diagnostic", "DCGM GPU Diagnostic", "other"]))
def test_reader_on_unknown_json_shapes(body: Any, key: str) -> None:
    try:
        run = parse_diag(json.dumps({key: body}))
    except DiagParseError:
        return
    assert run.results  # a document it accepted names results, each with a known status
    assert {r.status for r in run.results} <= {"Pass", "Fail", "Warn", "Skip", "Not Run"}


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(GB10.read_text()) - 3))
def test_a_cut_json_document_is_an_error(cut: int) -> None:
    with pytest.raises(DiagParseError):
        parse_diag(GB10.read_text()[:cut])


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(B200.read_text().splitlines()) - 1))
def test_a_cut_table_is_never_a_pass(lines: int) -> None:
    text = "\n".join(B200.read_text().splitlines()[:lines])
    try:
        run = parse_diag(text)
    except DiagParseError:
        return
    status, _, _ = _judge_run(run, exclude=("pcie",))
    assert status is not Status.OK


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=12).filter(
        lambda w: (
            " ".join(w.replace("_", " ").split()).lower() not in {"pass", "fail", "warn", "skip", "not run", "notrun"}
        )
    )
)
def test_a_status_dcgm_does_not_write_is_an_error(word: str) -> None:
    doc = json.loads(GB10.read_text())
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = word
    with pytest.raises(DiagParseError, match="unknown DCGM status"):
        parse_diag(json.dumps(doc))


def _judge_run(run: DiagRun, exclude: tuple[str, ...] = ()) -> tuple[Status, str, dict[str, Any]]:
    dcgm = _dcgm()
    try:
        result = dcgm.judge(run, level=1, exclude=exclude, data={}, exit_code=0)
    except dcgm.DiagError as exc:
        return Status.ERROR, str(exc), exc.data
    return result.status, result.summary, dict(result.data)


# -- the check through the check API, with a stand-in dcgmi on PATH -------------------------


def standin(folder: Path, body: str) -> Path:
    """A `dcgmi` shell script in folder/bin; returns the bin folder to put first on PATH."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "dcgmi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def prints(folder: Path, corpus: Path, exit_code: int = 0) -> Path:
    return standin(folder, f"cat '{corpus}'\nexit {exit_code}\n")


def write_profile(folder: Path, params: dict[str, Any], name: str = "dcgm-test") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "checks": {"dcgm.diag": params}}))
    return path


def run_diag_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str, **params: Any) -> CheckResult:
    monkeypatch.setitem(local_transport._ENV, "PATH", path)
    prof = profiles.load(str(write_profile(tmp_path, params)))
    (result,) = run_checks(Host(LocalTransport("testnode")), prof.checks)
    return result


def test_check_api_fails_naming_gpu_test_and_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bin_dir = prints(tmp_path, GB10, 226)
    result = run_diag_check(monkeypatch, tmp_path, f"{bin_dir}:{os.environ['PATH']}", level=1)
    assert result.status is Status.FAIL
    assert "software on GPU 0 failed: Persistence Mode: Persistence mode for GPU 0 is disabled" in result.summary
    assert result.action == "FIX_CONFIG" and result.data["dcgm_version"] == "4.2.3"
    assert "action" not in result.data  # the result's action, shown in every format, not a copy in data
    assert any("$ dcgmi diag -r 1 -j  (exit 226" in e for e in result.evidence)


def test_check_api_level_goes_to_dcgmi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = tmp_path / "argv"
    bin_dir = standin(tmp_path, f"echo \"$@\" > '{argv}'\ncat '{B200}'\n")
    result = run_diag_check(monkeypatch, tmp_path, f"{bin_dir}:{os.environ['PATH']}", level=2, exclude=["pcie"])
    assert argv.read_text().split() == ["diag", "-r", "2", "-j"]
    assert result.status is Status.OK and "level 2: 2 tests passed" in result.summary


def test_check_api_errors_carry_remedy_and_action(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bin_dir = prints(tmp_path, BUSY)
    result = run_diag_check(monkeypatch, tmp_path, f"{bin_dir}:{os.environ['PATH']}")
    assert result.status is Status.ERROR and "GPU 0" in result.summary and "busy or unavailable" in result.summary
    assert result.data["action"] == "RESET_GPU" and "nvidia-smi -r" in result.remedy


def test_check_api_missing_dcgmi_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_diag_check(monkeypatch, tmp_path, str(empty))
    assert result.status is Status.ERROR and "dcgmi is not installed" in result.summary
    assert "datacenter-gpu-manager-4-core" in result.remedy and "datacenter-gpu-manager (DCGM 3)" in result.remedy


def test_check_api_garbage_output_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bin_dir = standin(tmp_path, "printf 'Segmentation fault\\n'\nexit 139\n")
    result = run_diag_check(monkeypatch, tmp_path, f"{bin_dir}:{os.environ['PATH']}")
    assert result.status is Status.ERROR
    assert "neither a DCGM JSON document nor its result table: 'Segmentation fault'" in result.summary


def test_hung_dcgmi_is_an_error_after_its_budget_and_gone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # the stand-in and a child of it both hang; both must be gone when the check returns
    bin_dir = standin(tmp_path, f"sleep 300 &\necho $$ $! > '{pids}'\nwait\n")
    start = time.monotonic()
    result = run_diag_check(monkeypatch, tmp_path, f"{bin_dir}:{os.environ['PATH']}", timeout=1.5)
    took = time.monotonic() - start
    assert result.status is Status.ERROR and "did not finish within" in result.summary, result.summary
    assert "level 1 normally takes seconds" in result.summary
    assert took < 15
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f"process {pid} of the hung dcgmi is still running"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


# -- load-time rules ------------------------------------------------------------------------


def test_prolog_profile_refuses_level_3_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "site-prolog.yaml"
    path.write_text("name: site-prolog\nchecks:\n  node.kernel: {}\n  dcgm.diag:\n    level: 3\n")
    with pytest.raises(ProfileError) as err:
        profiles.load(str(path))
    (problem,) = err.value.problems
    assert problem.startswith(f"{path}:4: dcgm.diag: level 3 runs for about 15 minutes")
    # a profile extending the bundled prolog counts as a prolog profile whatever its name
    other = tmp_path / "abacus.yaml"
    other.write_text("name: abacus\nextends: prolog\nchecks:\n  dcgm.diag: {level: 4}\n")
    with pytest.raises(ProfileError, match=r"abacus\.yaml:4: dcgm\.diag: level 4 .* extends 'prolog'"):
        profiles.load(str(other))
    fine = tmp_path / "prolog-short.yaml"
    fine.write_text("name: prolog-short\nchecks:\n  dcgm.diag: {level: 2}\n")
    assert profiles.load(str(fine)).checks[0].params == {"level": 2, "exclude": ()}
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nchecks:\n  dcgm.diag: {level: 4}\n")
    assert profiles.load(str(deep)).checks[0].params["level"] == 4


def test_level_out_of_range_is_a_profile_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("name: deep\nchecks:\n  dcgm.diag:\n    level: 5\n")
    proc = cli("run", "--local", "--profile", path)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert f"{path}:3: dcgm.diag: level must be 1, 2, 3 or 4" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_explain_says_what_it_runs_and_for_how_long() -> None:
    proc = cli("explain", "dcgm.diag")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "dcgmi diag -r LEVEL -j" in out
    for words in ("Level 1 takes seconds", "level 2 about 2 minutes", "level 3 about 15 minutes", "level 4 an hour"):
        assert words in out


# -- the CLI on the recorded fixtures ---------------------------------------------------------

FIXTURE_CORPUS = {
    "dcgm-gb10-software-fail": (GB10, 2, "software on GPU 0 failed"),
    "dcgm-b200-pcie-internal-error": (B200, 3, "pcie could not run"),
    "dcgm-gpu-busy": (BUSY, 3, "GPU Memory on GPU 0 could not run"),
    "dcgm-no-hostengine": (NO_ENGINE, 3, "nv-hostengine is not running"),
}


@pytest.mark.parametrize("name", sorted(FIXTURE_CORPUS))
def test_cli_replays_the_fixtures(name: str) -> None:
    corpus, code, words = FIXTURE_CORPUS[name]
    fixture = FIXTURES / name
    (stdout,) = fixture.glob("commands/dcgmi_diag_-r_1_-j/stdout")
    assert stdout.read_bytes() == corpus.read_bytes()  # the recorded output is the real artifact
    assert corpus.name in (fixture / "fixture.yaml").read_text().replace("\n  ", " ")
    proc = cli("run", "--replay", fixture, "--profile", PROFILE)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert words in " ".join(proc.stdout.split())
    data = json.loads(cli("run", "--replay", fixture, "--format", "json").stdout)
    (host,) = data["hosts"].values()
    (check,) = host["checks"]
    # a fail shows its action as every check's result does; an error keeps it in its data
    shown = check["action"] if check["status"] == "fail" else check["data"]["action"]
    assert shown in ("FIX_CONFIG", "RESET_GPU")


def test_record_with_a_standin_gives_a_fixture_of_the_real_output(tmp_path: Path) -> None:
    bin_dir = prints(tmp_path, BUSY)
    out = tmp_path / "rec"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "record", "--local", "--out", str(out), "--profile", str(PROFILE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode in (0, 3), proc.stderr
    (stdout,) = out.glob("commands/*/stdout")
    assert stdout.read_bytes() == BUSY.read_bytes()
    shutil.rmtree(out)
