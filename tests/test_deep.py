"""The deep tier's exercising checks: nccl.loopback, rdma.bandwidth, gpu.bandwidth.

The readers (clustercheck.facts.perftest, clustercheck.facts.nvbandwidth) on every real output of
the corpus with its MANIFEST conclusion and against garbage (hypothesis); the checks through
`clustercheck run --local` with stand-in tools on PATH that print a corpus file or hang (this
machine has no GPU, HCA, nccl-tests, perftest or nvbandwidth: the one place a stand-in is right);
the recorded fixtures through `clustercheck run --replay`; the prolog refusal at load time.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, REPO, cli, run_local

from clustercheck import profile as profiles
from clustercheck.errors import ProfileError
from clustercheck.facts.nvbandwidth import NvbParseError, NvbRun, parse_nvbandwidth
from clustercheck.facts.perftest import BwRun, PerftestParseError, judge_bw, parse_bw

PERF = CORPUS / "perftest"
HDR8M = PERF / "superbench-ib_write_bw-loopback-8M-hdr.log.txt"
ALL_SIZES = PERF / "superbench-ib_write_bw-loopback-all-sizes-interleaved.log.txt"
CUDA_A30 = PERF / "issue-perftest-241-ib_write_bw-use_cuda-A30-server-header-EXCERPT.txt"
CUDA_V100 = PERF / "pr-perftest-21-ib_write_bw-use_cuda-V100-roce-old-format-EXCERPT.txt"
POSTLIST = PERF / "issue-perftest-273-ib_write_bw-postlist-8B-gbits-roce.txt"
QUOTED = PERF / "issue-perftest-132-ib_write_bw-a-report_gbits-ib-quoted-EXCERPT.txt"

NVB = CORPUS / "nvbandwidth"
JSON_1GPU = NVB / "dcgm-nvvs-test-input-nvbandwidth-v0.5-json-1gpu-565.02.json.txt"
JSON_WARN = NVB / "dcgm-nvvs-test-input-nvbandwidth-json-with-leading-WARNING-garbage-EDITED.json.txt"
WAIVED = NVB / "issue-nvbandwidth-13-v0.2-2x2080Ti-d2d-write-ce-waived.txt"
RTX4090 = NVB / "issue-nvbandwidth-15-v0.2-8x4090-h2d-d2h-EXCERPT.txt"
ASSERT = NVB / "issue-nvbandwidth-34-v0.7-8xA100-d2d-read-ce-ASSERT-pattern-mismatch.txt"
A100_SM = NVB / "issue-nvbandwidth-42-v0.8-A100-h2d-sm-512MiB.txt"
H20 = NVB / "issue-nvbandwidth-48-v0.8-8xH20-device-local-copy-hostname-EXCERPT.txt"
A6000 = NVB / "issue-nvbandwidth-50-v0.8-d2d-read-ce-6xA6000-pcie-matrix.txt"
GH200 = NVB / "superbench-nvbandwidth-v0.6-gh200-EDITED.log.txt"

LOGS = CORPUS / "nccl_logs"
EFA_GDR = LOGS / "aws-efa-eks-p4d-2node-nccl2.9.9-efa-gdrdma-allreduce.txt"
SOCKET = LOGS / "issue-llamafactory-355-single-node-no-ib-socket-EXCERPT.txt"
NVLINK = LOGS / "timez-a100pcie-nvlinkbridge-roce-noGDR-subsys-all-nccl2.27.7.log.txt"


# -- perftest: the reader on every corpus file ---------------------------------------------------


def _hdr8m(run: BwRun) -> None:
    assert (run.test, run.units, run.device, run.link_type) == ("RDMA_Write BW Test", "MB/sec", "ib0", "IB")
    (row,) = run.rows  # the client's and the server's identical rows, read once
    assert (row.size, row.iterations, row.average) == (8388608, 20000, 24056.72)
    # perftest's MB is 2^20 bytes; the MsgRate column agrees: 0.003007 Mpps x 8 MiB x 8 bits
    assert run.gbps(row) == pytest.approx(201.8, abs=0.05)
    assert run.gbps(row) == pytest.approx(row.msg_rate_mpps * 1e6 * row.size * 8 / 1e9, rel=1e-3)
    assert judge_bw(run, 200.0).status == "ok"  # a 4X HDR port: at its rate
    verdict = judge_bw(run, 400.0)  # a 4X NDR port: half of it
    assert verdict.status == "fail" and "50.5% of the port's 400 Gb/s" in verdict.message


def _all_sizes(run: BwRun) -> None:
    assert len(run.rows) == 23 and run.rows[0].size == 2 and run.complete
    largest = run.largest
    assert largest is not None and (largest.size, largest.average) == (8388608, 23240.68)
    verdict = judge_bw(run, 200.0)  # the large-message average, never the latency-bound small sizes
    assert verdict.status == "ok" and verdict.size == 8388608 and verdict.gbps == pytest.approx(194.96, abs=0.01)


def _postlist(run: BwRun) -> None:
    assert (run.units, run.link_type, [r.size for r in run.rows]) == ("Gb/sec", "Ethernet", [8])
    verdict = judge_bw(run, 100.0)  # an 8-byte message-rate test: no verdict on the port
    assert verdict.status == "error" and "message rate, not bandwidth" in verdict.message


READINGS: dict[Path, Any] = {
    HDR8M: _hdr8m,
    ALL_SIZES: _all_sizes,
    POSTLIST: _postlist,
    CUDA_A30: "printed no result row",  # a server header cut before the table
    CUDA_V100: "printed no result row",
    QUOTED: "a quoted paste",
}


def test_every_perftest_corpus_file_has_a_reading() -> None:
    assert sorted(READINGS) == sorted(PERF.iterdir())


@pytest.mark.parametrize("path", sorted(READINGS), ids=lambda p: p.name[:60])
def test_perftest_reader_on_the_corpus(path: Path) -> None:
    reading = READINGS[path]
    if isinstance(reading, str):
        with pytest.raises(PerftestParseError, match=reading):
            parse_bw(path.read_text())
    else:
        reading(parse_bw(path.read_text()))


def test_perftest_reader_keeps_the_cuda_device() -> None:
    text = CUDA_A30.read_text() + "\n" + "\n".join(ALL_SIZES.read_text().splitlines()[-30:])
    assert parse_bw(text).cuda_device == "NVIDIA A30"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_perftest_reader_on_garbage(text: str) -> None:
    try:
        run = parse_bw(text)
    except PerftestParseError:
        return
    assert run.rows  # what it accepts has a table
    judge_bw(run, 400.0)  # and the verdict never raises


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(HDR8M.read_text().splitlines())))
def test_a_cut_perftest_run_is_a_pass_only_with_its_closing_line(lines: int) -> None:
    kept = HDR8M.read_text().splitlines()[:lines]
    try:
        run = parse_bw("\n".join(kept))
    except PerftestParseError:
        return
    verdict = judge_bw(run, 200.0)
    row_at = next(i for i, line in enumerate(kept) if line.strip().startswith("8388608"))
    closed = any(line.strip().startswith("-----") for line in kept[row_at + 1 :])
    assert (verdict.status == "ok") == closed, verdict


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["8388608 20000 24056.74 x 0.003", "8388608 20000 24056.74", "838 1 2 3 4 5 6"]))
def test_a_damaged_perftest_row_is_an_error(row: str) -> None:
    lines = HDR8M.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("8388608"))
    with pytest.raises(PerftestParseError, match="not five numbers"):
        parse_bw("\n".join([*lines[:at], row, *lines[at + 1 :]]))


# -- nvbandwidth: the reader on every corpus file ----------------------------------------------


def _json_1gpu(run: NvbRun) -> None:
    assert (run.format, run.version, run.driver) == ("json", "v0.5", "565.02")
    cases = run.testcases
    assert cases["host_to_device_memcpy_ce"].matrix == ((12.3964,),)
    assert cases["device_to_host_memcpy_ce"].matrix == ((13.2001,),)
    assert cases["device_to_device_memcpy_read_ce"].waived  # one GPU: no pair


def _json_warn(run: NvbRun) -> None:
    # the same numbers as the plain document: the WARNING lines and their braces are not the document
    plain = parse_nvbandwidth(JSON_1GPU.read_text())
    assert run.testcases == plain.testcases


def _waived(run: NvbRun) -> None:
    assert (run.version, len(run.devices)) == ("v0.2", 2)
    assert list(run.testcases) == ["device_to_device_memcpy_write_ce"]
    assert run.testcases["device_to_device_memcpy_write_ce"].waived


def _assert(run: NvbRun) -> None:
    assert "ASSERT in expression h_errorFlag == 0" in run.aborted
    assert "Invalid value when checking the pattern" in run.aborted
    assert len(run.devices) == 8 and not run.testcases  # no matrix: bandwidth unknown


def _a100_sm(run: NvbRun) -> None:
    case = run.testcases["host_to_device_memcpy_sm"]
    assert (case.matrix, case.sum, run.devices) == (((25.13,),), 25.13, {0: "NVIDIA A100-SXM4-40GB (00000000:99:00)"})


def _h20(run: NvbRun) -> None:
    (case,) = run.testcases.values()
    row = case.matrix[0]
    assert case.name == "device_local_copy" and len(row) == 8 and None not in row
    assert min(v for v in row if v is not None) == 1115.72


def _a6000(run: NvbRun) -> None:
    case = run.testcases["device_to_device_memcpy_read_ce"]  # no "Running" line: named by its SUM line
    assert len(case.matrix) == 6 and all(case.matrix[i][i] is None for i in range(6))
    assert case.matrix[0][1] == 26.34 and case.matrix[0][5] == 21.8 and case.sum == 715.53


NVB_READINGS: dict[Path, Any] = {
    JSON_1GPU: _json_1gpu,
    JSON_WARN: _json_warn,
    WAIVED: _waived,
    ASSERT: _assert,
    A100_SM: _a100_sm,
    H20: _h20,
    A6000: _a6000,
    RTX4090: "host_to_device_bidirectional_memcpy_ce did not finish",  # cut inside its matrix
    GH200: "3 columns but nvbandwidth listed 1 device",  # hand-edited shapes
}


def test_every_nvbandwidth_corpus_file_has_a_reading() -> None:
    assert sorted(NVB_READINGS) == sorted(NVB.iterdir())


@pytest.mark.parametrize("path", sorted(NVB_READINGS), ids=lambda p: p.name[:60])
def test_nvbandwidth_reader_on_the_corpus(path: Path) -> None:
    reading = NVB_READINGS[path]
    if isinstance(reading, str):
        with pytest.raises(NvbParseError, match=reading):
            parse_nvbandwidth(path.read_text())
    else:
        reading(parse_nvbandwidth(path.read_text()))


def _gpu_judge(run: NvbRun, tests: tuple[str, ...], floor: float = 20.0) -> tuple[str, str]:
    from clustercheck.checks.gpu import bandwidth

    try:
        result = bandwidth.judge(
            run, tests=tests, thresholds=dict.fromkeys(("min_h2d", "min_d2h", "min_d2d"), floor), data={}, exit_code=0
        )
    except bandwidth.BandwidthError as exc:
        return "error", str(exc)
    return result.status.value, result.summary


def test_gpu_judge_names_the_slow_pairs() -> None:
    run = parse_nvbandwidth(A6000.read_text())
    assert _gpu_judge(run, ("device_to_device_memcpy_read_ce",), 20.0)[0] == "ok"  # PCIe Gen4 floor: fine
    status, summary = _gpu_judge(run, ("device_to_device_memcpy_read_ce",), 25.0)
    assert status == "fail" and summary.startswith("slow copies: GPU 0 -> GPU 5 device_to_device_memcpy_read_ce 21.8")
    assert "GPU 0 -> GPU 1" not in summary  # 26.34: a same-switch pair is not named


def test_gpu_judge_names_the_slow_gpu() -> None:
    text = RTX4090.read_text().split("Running host_to_device_bidirectional_memcpy_ce.")[0]  # before the cut
    status, summary = _gpu_judge(parse_nvbandwidth(text), ("host_to_device_memcpy_ce",), 24.0)
    assert status == "fail" and summary == "slow copies: GPU 2 host_to_device_memcpy_ce 23.9 GB/s (at least 24)"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_nvbandwidth_reader_on_garbage(text: str) -> None:
    try:
        run = parse_nvbandwidth(text)
    except NvbParseError:
        return
    assert run.testcases or run.aborted


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_nvbandwidth_reader_on_unknown_json_shapes(body: Any) -> None:
    try:
        run = parse_nvbandwidth("{\n" + json.dumps({"nvbandwidth": body})[1:])
    except NvbParseError:
        return
    for case in run.testcases.values():  # what it accepts is numbers, one row width, or no matrix
        assert len({len(r) for r in case.matrix}) <= 1
        assert all(v is None or v >= 0 for r in case.matrix for v in r)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(JSON_1GPU.read_text()) - 3))
def test_a_cut_nvbandwidth_document_is_an_error(cut: int) -> None:
    with pytest.raises(NvbParseError):
        parse_nvbandwidth(JSON_1GPU.read_text()[:cut])


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=len(A6000.read_text().splitlines()) - 1))
def test_a_cut_nvbandwidth_matrix_is_never_a_pass(lines: int) -> None:
    text = "\n".join(A6000.read_text().splitlines()[:lines])
    try:
        run = parse_nvbandwidth(text)
    except NvbParseError:
        return
    assert _gpu_judge(run, ("device_to_device_memcpy_read_ce",))[0] == "error"


# -- the checks through `clustercheck run --local`, with stand-in tools on PATH ---------------


def standin(folder: Path, name: str, body: str) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _gone(marker: str) -> bool:
    """No process whose command line holds `marker` (pgrep), within a few seconds."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
        if found.returncode == 1:
            return True
        time.sleep(0.1)
    return False


def _hang(tmp_path: Path, name: str) -> Path:
    """A stand-in that starts a child and both hang; their command lines hold tmp_path."""
    return standin(tmp_path, name, f'sh -c "sleep 300" "{tmp_path}-child" &\nwhile :; do sleep 1; done\n')


LOOP = {"min_busbw": 40, "gpus": 8}


def test_nccl_loopback_runs_with_p2p_and_shm_off_and_passes_on_gdr(tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    bin_dir = standin(
        tmp_path,
        "all_reduce_perf",
        f"env | grep ^NCCL_ | sort > '{env_file}'\necho \"$@\" >> '{env_file}'\ncat '{EFA_GDR}'\n",
    )
    code, check = run_local(tmp_path, {"nccl.loopback": LOOP}, bin_dir)
    assert (code, check["status"]) == (0, "ok"), check
    assert "GPUDirect RDMA on all 64 network channels" in check["summary"] and "43.8 GB/s" in check["summary"]
    seen = env_file.read_text().splitlines()
    for var in ("NCCL_DEBUG=INFO", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_NVLS_ENABLE=0"):
        assert var in seen
    assert seen[-1] == "-b 8M -e 1G -f 2 -g 8"


def test_nccl_loopback_nvlink_variant_sets_its_environment(tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    bin_dir = standin(tmp_path, "all_reduce_perf", f"env | grep ^NCCL_ | sort > '{env_file}'\ncat '{NVLINK}'\n")
    code, check = run_local(tmp_path, {"nccl.loopback": {"min_busbw": 200, "gpus": 2, "variant": "nvlink"}}, bin_dir)
    assert (code, check["status"]) == (0, "ok"), check
    seen = env_file.read_text().splitlines()
    assert {"NCCL_P2P_LEVEL=NVL", "NCCL_SHM_DISABLE=1", "NCCL_IB_DISABLE=1"} <= set(seen)
    assert "NCCL_P2P_DISABLE=1" not in seen
    # the same log judged as the NICs' variant: GPUDirect RDMA is off on every HCA, a failure
    code, check = run_local(tmp_path, {"nccl.loopback": {"min_busbw": 200, "gpus": 2}}, bin_dir)
    assert check["status"] == "fail" and "GPU Direct RDMA Disabled for HCA mlx5_0" in check["summary"], check
    # without GPUDirect RDMA required: its P2P channels show the traffic never left the node
    code, check = run_local(tmp_path, {"nccl.loopback": {"min_busbw": 200, "gpus": 2, "require_gdr": False}}, bin_dir)
    assert check["status"] == "error", check
    assert "48 channel(s) over P2P/direct pointer" in check["summary"] and "no network channel" in check["summary"]


def test_nccl_loopback_socket_fallback_fails_with_fix_config(tmp_path: Path) -> None:
    bin_dir = standin(tmp_path, "all_reduce_perf", f"cat '{SOCKET}'\n")
    code, check = run_local(tmp_path, {"nccl.loopback": LOOP}, bin_dir)
    assert (code, check["status"], check["action"]) == (2, "fail", "FIX_CONFIG"), check
    assert "NCCL fell back to TCP sockets" in check["summary"] and "NET/IB : No device found" in check["summary"]


def test_nccl_loopback_missing_tool_names_the_package(tmp_path: Path) -> None:
    code, check = run_local(tmp_path, {"nccl.loopback": LOOP}, None)
    assert (code, check["status"]) == (3, "error"), check
    assert "all_reduce_perf is not installed" in check["summary"] and "nccl-tests" in check["remedy"]


def test_nccl_loopback_garbage_says_why(tmp_path: Path) -> None:
    bin_dir = standin(tmp_path, "all_reduce_perf", "echo 'Segmentation fault (core dumped)'\nexit 139\n")
    code, check = run_local(tmp_path, {"nccl.loopback": LOOP}, bin_dir)
    assert (code, check["status"]) == (3, "error"), check
    assert "no NCCL INFO lines" in check["summary"] and "without a result table" in check["summary"]


def test_nccl_loopback_one_gpu_is_an_error(tmp_path: Path) -> None:
    _, check = run_local(tmp_path, {"nccl.loopback": {**LOOP, "gpus": 1}}, None)
    assert check["status"] == "error" and "needs at least 2" in check["summary"]


def test_nccl_loopback_hung_is_an_error_and_its_tree_is_gone(tmp_path: Path) -> None:
    bin_dir = _hang(tmp_path, "all_reduce_perf")
    start = time.monotonic()
    code, check = run_local(tmp_path, {"nccl.loopback": {**LOOP, "timeout": 2}}, bin_dir)
    assert time.monotonic() - start < 30
    assert (code, check["status"]) == (3, "error") and "did not finish within" in check["summary"], check
    assert _gone(str(tmp_path)), "the hung all_reduce_perf or its child is still running"


RDMA = {"devices": ["mlx5_0"], "expected_rate": 400.0}


def _perftest_standin(tmp_path: Path, corpus: Path, server_pid: Path) -> Path:
    """ib_write_bw: the server (no `localhost`) records its pid and waits to be killed; the client prints."""
    return standin(
        tmp_path,
        "ib_write_bw",
        f"case \" $* \" in *\" localhost \"*) cat '{corpus}' ;; *) echo $$ > '{server_pid}'; exec sleep 300 ;; esac\n",
    )


def test_rdma_bandwidth_port_below_its_rate_fails_naming_it(tmp_path: Path) -> None:
    pid = tmp_path / "server.pid"
    bin_dir = _perftest_standin(tmp_path, HDR8M, pid)
    code, check = run_local(tmp_path, {"rdma.bandwidth": RDMA}, bin_dir)
    assert (code, check["status"], check["action"]) == (2, "fail", "CHECK_CABLE"), check
    assert check["summary"].startswith("mlx5_0 port 1: 201.8 Gb/s at 8388608 bytes = 50.5% of the port's 400 Gb/s")
    assert _gone(str(tmp_path)), "the ib_write_bw server was left running"
    code, check = run_local(tmp_path, {"rdma.bandwidth": {**RDMA, "expected_rate": 200.0}}, bin_dir)
    assert check["status"] == "ok", check


def test_rdma_bandwidth_from_gpu_memory_passes_use_cuda(tmp_path: Path) -> None:
    args = tmp_path / "args"
    bin_dir = standin(
        tmp_path,
        "ib_write_bw",
        f'echo "$@" >> \'{args}\'\ncase " $* " in *" localhost "*) cat \'{ALL_SIZES}\' ;; *) exec sleep 300 ;; esac\n',
    )
    _, check = run_local(tmp_path, {"rdma.bandwidth": {**RDMA, "expected_rate": 200.0, "cuda": ["mlx5_0:3"]}}, bin_dir)
    assert check["status"] == "ok", check
    lines = args.read_text().splitlines()
    assert "-d mlx5_0 --report_gbits -s 8388608 -n 5000 --use_cuda=3 localhost" in lines
    assert [r["memory"] for r in check["data"]["ports"]["mlx5_0"]["runs"]] == ["host", "gpu 3"]


def test_rdma_bandwidth_retries_a_client_that_came_before_its_server(tmp_path: Path) -> None:
    tried = tmp_path / "tried"
    body = (
        f'case " $* " in *" localhost "*) ;; *) exec sleep 300 ;; esac\n'
        f"if [ ! -e '{tried}' ]; then : > '{tried}'; echo \" Couldn't connect to localhost:18515\"; exit 1; fi\n"
        f"cat '{HDR8M}'\n"
    )
    bin_dir = standin(tmp_path, "ib_write_bw", body)
    code, check = run_local(tmp_path, {"rdma.bandwidth": {**RDMA, "expected_rate": 200.0}}, bin_dir)
    assert (code, check["status"]) == (0, "ok"), check
    assert _gone(str(tmp_path)), "the ib_write_bw server was left running"


def test_rdma_bandwidth_without_hcas_is_an_error(tmp_path: Path) -> None:
    bin_dir = _perftest_standin(tmp_path, HDR8M, tmp_path / "pid")
    _, check = run_local(tmp_path, {"rdma.bandwidth": {}}, bin_dir)  # this machine has no HCA
    assert check["status"] == "error" and "no HCA with a port 1" in check["summary"], check


def test_rdma_bandwidth_missing_tool_names_perftest(tmp_path: Path) -> None:
    code, check = run_local(tmp_path, {"rdma.bandwidth": RDMA}, None)
    assert (code, check["status"]) == (3, "error"), check
    assert "ib_write_bw is not installed" in check["summary"] and "perftest" in check["remedy"]


def test_rdma_bandwidth_no_table_is_an_error(tmp_path: Path) -> None:
    bin_dir = _perftest_standin(tmp_path, CUDA_V100, tmp_path / "pid")
    code, check = run_local(tmp_path, {"rdma.bandwidth": RDMA}, bin_dir)
    assert (code, check["status"]) == (3, "error"), check
    assert "not proven: mlx5_0 port 1" in check["summary"] and "printed no result row" in check["summary"]


def test_rdma_bandwidth_unknown_rate_is_an_error(tmp_path: Path) -> None:
    bin_dir = _perftest_standin(tmp_path, HDR8M, tmp_path / "pid")
    _, check = run_local(tmp_path, {"rdma.bandwidth": {"devices": ["mlx5_0"]}}, bin_dir)  # no sysfs here
    assert check["status"] == "error" and "rate of mlx5_0 is unknown" in check["summary"], check


def test_rdma_bandwidth_hung_client_is_an_error_and_both_are_gone(tmp_path: Path) -> None:
    bin_dir = _hang(tmp_path, "ib_write_bw")
    code, check = run_local(tmp_path, {"rdma.bandwidth": {**RDMA, "run_timeout": 2.5}}, bin_dir)
    assert (code, check["status"]) == (3, "error") and "did not finish within" in check["summary"], check
    assert _gone(str(tmp_path)), "a hung ib_write_bw (server, client or a child) is still running"


GPU = {"min_h2d": 20, "min_d2h": 20, "min_d2d": 20}


def test_gpu_bandwidth_reads_json_behind_warnings(tmp_path: Path) -> None:
    args = tmp_path / "args"
    bin_dir = standin(tmp_path, "nvbandwidth", f"echo \"$@\" > '{args}'\ncat '{JSON_WARN}'\n")
    code, check = run_local(tmp_path, {"gpu.bandwidth": {"min_h2d": 12, "min_d2h": 13, "min_d2d": 20}}, bin_dir)
    assert (code, check["status"]) == (0, "ok"), check
    assert "not applicable on one GPU" in check["summary"]
    assert args.read_text().split() == [
        "-t",
        "host_to_device_memcpy_ce",
        "device_to_host_memcpy_ce",
        "device_to_device_memcpy_read_ce",
        "-j",
    ]
    code, check = run_local(tmp_path, {"gpu.bandwidth": {"min_h2d": 12.5, "min_d2h": 13, "min_d2d": 20}}, bin_dir)
    assert check["status"] == "fail" and check["summary"].startswith("slow copies: GPU 0 host_to_device_memcpy_ce")


def test_gpu_bandwidth_reruns_an_old_nvbandwidth_without_j(tmp_path: Path) -> None:
    # boost::program_options' words for an option it does not know (nvbandwidth before -j)
    body = (
        'for a in "$@"; do [ "$a" = -j ] && { echo "ERROR: unrecognised option \'-j\'" >&2; exit 1; }; done\n'
        f"cat '{A100_SM}'\n"
    )
    bin_dir = standin(tmp_path, "nvbandwidth", body)
    code, check = run_local(tmp_path, {"gpu.bandwidth": {**GPU, "tests": ["host_to_device_memcpy_sm"]}}, bin_dir)
    assert (code, check["status"]) == (0, "ok"), check
    assert check["data"]["format"] == "text" and "host_to_device_memcpy_sm 25.13" in check["summary"]


def test_gpu_bandwidth_missing_tool_names_the_package(tmp_path: Path) -> None:
    code, check = run_local(tmp_path, {"gpu.bandwidth": GPU}, None)
    assert (code, check["status"]) == (3, "error") and "nvbandwidth is not installed" in check["summary"]
    assert "nvbandwidth" in check["remedy"]


def test_gpu_bandwidth_truncated_output_says_why(tmp_path: Path) -> None:
    bin_dir = standin(tmp_path, "nvbandwidth", f"cat '{RTX4090}'\n")
    code, check = run_local(tmp_path, {"gpu.bandwidth": GPU}, bin_dir)
    assert (code, check["status"]) == (3, "error"), check
    assert "did not finish: its matrix has no SUM line" in check["summary"]


def test_gpu_bandwidth_hung_is_an_error_and_gone(tmp_path: Path) -> None:
    bin_dir = _hang(tmp_path, "nvbandwidth")
    code, check = run_local(tmp_path, {"gpu.bandwidth": {**GPU, "timeout": 2}}, bin_dir)
    assert (code, check["status"]) == (3, "error") and "did not finish within" in check["summary"], check
    assert _gone(str(tmp_path)), "the hung nvbandwidth or its child is still running"


# -- load-time rules, explain, the bundled deep profile -------------------------------------------

DEEP_CHECKS = {
    "nccl.loopback": ({"min_busbw": 40}, "all_reduce_perf takes every GPU and NIC"),
    "rdma.bandwidth": ({}, "ib_write_bw loads every HCA port"),
    "gpu.bandwidth": (GPU, "nvbandwidth copies between every GPU pair"),
}


@pytest.mark.parametrize("check_id", sorted(DEEP_CHECKS))
def test_prolog_profile_refuses_the_check_at_its_line(tmp_path: Path, check_id: str) -> None:
    params, words = DEEP_CHECKS[check_id]
    path = tmp_path / "site-prolog.yaml"
    path.write_text(json.dumps({"name": "site-prolog", "checks": {check_id: params}}, indent=1))
    with pytest.raises(ProfileError) as err:
        profiles.load(str(path))
    (problem,) = err.value.problems
    assert problem.startswith(f"{path}:4: {check_id}: {words}") and "not in a prolog profile" in problem
    other = tmp_path / "abacus.yaml"  # extending the bundled prolog makes it a prolog profile
    other.write_text(json.dumps({"name": "abacus", "extends": "prolog", "checks": {check_id: params}}))
    with pytest.raises(ProfileError, match="extends 'prolog'"):
        profiles.load(str(other))


def test_bad_parameters_are_profile_errors(tmp_path: Path) -> None:
    path = tmp_path / "deep-site.yaml"
    path.write_text(
        "name: deep-site\nchecks:\n  nccl.loopback: {min_busbw: 40, variant: pcie}\n"
        "  rdma.bandwidth: {min_fraction: 1.5, cuda: [mlx5_0]}\n"
        "  gpu.bandwidth: {min_h2d: 0, min_d2h: 20, min_d2d: 20, tests: [all_to_host_memcpy_ce]}\n"
    )
    proc = cli("run", "--local", "--profile", path)
    assert proc.returncode == 64 and "Traceback" not in proc.stderr
    out = proc.stderr + proc.stdout
    assert f"{path}:3: nccl.loopback: variant must be network or nvlink" in out
    assert f"{path}:4: rdma.bandwidth: min_fraction must be above 0 and at most 1" in out
    assert "cuda entry 'mlx5_0' is not HCA:GPU" in out
    assert f"{path}:5: gpu.bandwidth: testcase 'all_to_host_memcpy_ce' has no threshold" in out
    assert "min_h2d must be a bandwidth above 0" in out


@pytest.mark.parametrize(
    ("check_id", "words"),
    [
        ("nccl.loopback", ["NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1", "all_reduce_perf -b MIN", "timeout` (300 s)"]),
        ("rdma.bandwidth", ["ib_write_bw -d HCA --report_gbits", "localhost", "`timeout` (600 s)"]),
        ("gpu.bandwidth", ["nvbandwidth -t TESTS -j", "grows with the GPU pairs", "`timeout` (300 s)"]),
    ],
)
def test_explain_says_what_it_runs_and_for_how_long(check_id: str, words: list[str]) -> None:
    proc = cli("explain", check_id)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    for w in words:
        assert w in out, w


def test_the_deep_profile_loads_with_its_checks() -> None:
    prof = profiles.load("deep")
    ids = [c.id for c in prof.checks]
    assert ids == ["dcgm.diag", "nccl.loopback", "rdma.bandwidth", "gpu.bandwidth"]
    assert prof.checks[0].params["level"] == 2


# -- the CLI on the recorded fixtures --------------------------------------------------------

FIXTURE_CORPUS = {
    # fixture: (the real output its stand-in printed, exit code, words of the summary)
    "deep-nccl-loopback-efa-gdr": (EFA_GDR, 0, "GPUDirect RDMA on all 64 network channels"),
    "deep-nccl-loopback-no-gdr": (
        LOGS / "cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt",
        2,
        "none of 8 network channels has /GDRDMA",
    ),
    "deep-nccl-loopback-socket-fallback": (SOCKET, 2, "NCCL fell back to TCP sockets"),
    "deep-nccl-loopback-transport-error": (
        LOGS / "slurmv4-roce-completion-error-vendor-err-81-node1.txt",
        2,
        "NCCL reported 1 transport error",
    ),
    "deep-nccl-loopback-nvlink": (NVLINK, 0, "2 GPUs over NVLink P2P; peak bus bandwidth 216.6 GB/s"),
    "deep-nccl-loopback-not-installed": (None, 3, "all_reduce_perf is not installed"),
    "deep-rdma-bw-degraded": (HDR8M, 2, "mlx5_0 port 1: 201.8 Gb/s at 8388608 bytes = 50.5% of the port's 400 Gb/s"),
    "deep-rdma-bw-healthy": (ALL_SIZES, 0, "lowest 194.96 Gb/s = 97.5% of the rate"),
    "deep-rdma-bw-no-result": (CUDA_A30, 3, "printed no result row"),
    "deep-gpu-bw-json-warnings": (JSON_WARN, 0, "1 GPU(s), lowest copy GB/s"),
    "deep-gpu-bw-slow-pair": (A6000, 2, "slow copies: GPU 0 -> GPU 5 device_to_device_memcpy_read_ce 21.8 GB/s"),
    "deep-gpu-bw-assert": (ASSERT, 3, "nvbandwidth aborted: Invalid value when checking the pattern"),
    "deep-gpu-bw-waived": (WAIVED, 0, "nothing measured: nvbandwidth waived device_to_device_memcpy_write_ce"),
}


def test_every_deep_fixture_is_tested() -> None:
    made = sorted(p.name for p in FIXTURES.glob("deep-*") if (p / "fixture.yaml").exists())
    assert made == sorted(FIXTURE_CORPUS)


@pytest.mark.parametrize("name", sorted(FIXTURE_CORPUS))
def test_cli_replays_the_fixture(name: str) -> None:
    corpus, code, words = FIXTURE_CORPUS[name]
    fixture = FIXTURES / name
    manifest = (fixture / "fixture.yaml").read_text()
    stdouts = [p for p in fixture.glob("commands/*/stdout") if "nvidia-smi" not in str(p)]
    if corpus is not None:
        (stdout,) = stdouts
        assert stdout.read_bytes() == corpus.read_bytes()  # the recorded output is the real artifact
        assert corpus.name in manifest.replace("\n  ", " ") or corpus.parent.name in manifest
    profile = fixture / manifest.split("profile: ", 1)[1].split("\n", 1)[0]
    proc = cli("run", "--replay", fixture, "--profile", profile, "--format", "json")
    assert proc.returncode == code, proc.stdout + proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (check,) = host["checks"]
    assert words in check["summary"], check["summary"]


def _replay_edited(tmp_path: Path, state: str, rate: str, params: dict[str, Any]) -> dict[str, Any]:
    """deep-rdma-bw-degraded with its port's sysfs state and rate edited, under a profile of `params`."""
    import shutil

    fixture = tmp_path / "fixture"
    shutil.copytree(FIXTURES / "deep-rdma-bw-degraded", fixture)
    port = fixture / "files" / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "state").write_text(state)
    (port / "rate").write_text(rate)
    profile = tmp_path / "deep-edited.yaml"
    profile.write_text(json.dumps({"name": "deep-edited", "checks": {"rdma.bandwidth": params}}))
    proc = cli("run", "--replay", fixture, "--profile", profile, "--format", "json")
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (check,) = host["checks"]
    return dict(check)


def test_rdma_bandwidth_a_port_down_fails_without_a_run(tmp_path: Path) -> None:
    check = _replay_edited(tmp_path, "1: DOWN", "400 Gb/sec (4X NDR)", {"devices": ["mlx5_0"]})
    assert (check["status"], check["action"]) == ("fail", "CHECK_CABLE"), check
    assert check["summary"] == "mlx5_0 port 1 is DOWN: no bandwidth can be measured"
    check = _replay_edited(tmp_path / "init", "2: INIT", "400 Gb/sec (4X NDR)", {"devices": ["mlx5_0"]})
    assert (check["status"], check["action"]) == ("fail", "INVESTIGATE"), check
    assert "is INIT, not ACTIVE (no subnet manager answers?)" in check["summary"] and "sminfo" in check["remedy"]


def test_rdma_bandwidth_a_port_trained_below_the_expected_rate_fails(tmp_path: Path) -> None:
    params = {"devices": ["mlx5_0"], "expected_rate": 400.0}
    check = _replay_edited(tmp_path, "4: ACTIVE", "200 Gb/sec (4X HDR)", params)
    assert check["status"] == "fail", check
    assert check["summary"] == "mlx5_0 port 1 links at 200 Gb/s, below the expected 400 Gb/s"
    # at its sysfs rate alone the same port and run pass: 201.8 Gb/s of 200
    check = _replay_edited(tmp_path / "again", "4: ACTIVE", "200 Gb/sec (4X HDR)", {"devices": ["mlx5_0"]})
    assert check["status"] == "ok", check


def test_rdma_bandwidth_without_loopback_judges_only_the_ports(tmp_path: Path) -> None:
    # loopback: false leaves the bandwidth to the sweep's pair form: no ib_write_bw runs (the
    # fixture's recorded loopback would be the only way to answer one), the port's state and rate
    # are still judged
    params = {"devices": ["mlx5_0"], "loopback": False}
    check = _replay_edited(tmp_path, "4: ACTIVE", "400 Gb/sec (4X NDR)", params)
    assert check["status"] == "ok", check
    assert check["summary"].startswith("1 port(s) ACTIVE (mlx5_0 400 Gb/s); no loopback (loopback: false)")
    assert check["data"]["ports"]["mlx5_0"]["runs"] == [] and not any("ib_write_bw" in e for e in check["evidence"])
    check = _replay_edited(tmp_path / "down", "1: DOWN", "400 Gb/sec (4X NDR)", params)
    assert (check["status"], check["action"]) == ("fail", "CHECK_CABLE"), check
    check = _replay_edited(tmp_path / "slow", "4: ACTIVE", "200 Gb/sec (4X HDR)", {**params, "expected_rate": 400.0})
    assert check["summary"] == "mlx5_0 port 1 links at 200 Gb/s, below the expected 400 Gb/s", check


@pytest.mark.parametrize(
    ("check_id", "tool", "corpus", "params", "words"),
    [
        ("nccl.loopback", "all_reduce_perf", EFA_GDR, LOOP, "exited 1 although its log and table passed"),
        ("gpu.bandwidth", "nvbandwidth", JSON_WARN, {**GPU, "min_h2d": 10, "min_d2h": 10}, "exited 1 although"),
        ("rdma.bandwidth", "ib_write_bw", HDR8M, {**RDMA, "expected_rate": 200.0}, "exited 1 although its table"),
    ],
)
def test_a_passing_output_with_a_failed_exit_is_not_a_pass(
    tmp_path: Path, check_id: str, tool: str, corpus: Path, params: dict[str, Any], words: str
) -> None:
    body = f"cat '{corpus}'\nexit 1\n"
    if tool == "ib_write_bw":  # the server (no `localhost`) waits; the client prints, then ends the
        # server, as perftest's ends with the run it served (else the loopback tries the client 10 times)
        pid = tmp_path / "server.pid"
        server = f'case " $* " in *" localhost "*) ;; *) echo $$ > \'{pid}\'; exec sleep 300 ;; esac\n'
        body = f"{server}cat '{corpus}'\nkill \"$(cat '{pid}')\"\nexit 1\n"
    bin_dir = standin(tmp_path, tool, body)
    code, check = run_local(tmp_path, {check_id: params}, bin_dir)
    assert (code, check["status"]) == (3, "error"), check
    assert words in check["summary"], check["summary"]


def _loop_judge(stdout: str, exit_code: int = 0, variant: str = "network", min_busbw: float = 40.0) -> str:
    from clustercheck.checks import nccl

    try:
        result = nccl.judge_loopback(
            stdout,
            "",
            exit_code,
            variant=variant,
            expect="",
            require_gdr=True,
            min_busbw=min_busbw,
            binary="all_reduce_perf",
            data={"gpus": 8},
        )
    except nccl.LoopbackError:
        return "error"
    return result.status.value


EFA_LINES = EFA_GDR.read_text().splitlines()
_AVG_AT = next(i for i, line in enumerate(EFA_LINES) if "Avg bus bandwidth" in line)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(EFA_LINES)))
def test_a_cut_all_reduce_perf_output_is_never_a_pass(lines: int) -> None:
    status = _loop_judge("\n".join(EFA_LINES[:lines]))
    assert status != "ok" or lines > _AVG_AT, (lines, status)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600), st.sampled_from(["network", "nvlink"]))
def test_the_loopback_judge_on_garbage_is_never_a_pass(text: str, variant: str) -> None:
    assert _loop_judge(text, variant=variant) in ("error", "fail")


def test_the_whole_outputs_read_as_the_fixtures_say() -> None:
    assert _loop_judge(EFA_GDR.read_text()) == "ok"
    assert _loop_judge(NVLINK.read_text(), variant="nvlink", min_busbw=200) == "ok"
    assert _loop_judge(NVLINK.read_text(), variant="nvlink", min_busbw=250) == "fail"  # 216.6 GB/s
    assert _loop_judge(SOCKET.read_text()) == "fail"


def test_nccl_loopback_counts_the_gpus_with_nvidia_smi(tmp_path: Path) -> None:
    # `nvidia-smi -L` prints one "GPU N: NAME (UUID: ...)" line per GPU: the same lines head each GPU's
    # block of the real `nvidia-smi nvlink -s` output this stand-in takes them from
    nvlink = CORPUS / "nvidia_smi" / "gpud-nvidia-smi-nvlink-status-8xA100.txt"
    args = tmp_path / "args"
    standin(tmp_path, "nvidia-smi", f"[ \"$1\" = -L ] && grep '^GPU ' '{nvlink}'\n")
    bin_dir = standin(tmp_path, "all_reduce_perf", f"echo \"$@\" > '{args}'\ncat '{EFA_GDR}'\n")
    code, check = run_local(tmp_path, {"nccl.loopback": {"min_busbw": 40}}, bin_dir)
    assert (code, check["status"], check["data"]["gpus"]) == (0, "ok", 8), check
    assert args.read_text().split()[-2:] == ["-g", "8"]


def test_record_with_a_standin_gives_a_fixture_of_the_real_output(tmp_path: Path) -> None:
    bin_dir = standin(tmp_path, "nvbandwidth", f"cat '{A6000}'\n")
    profile = FIXTURES / "deep-profiles" / "gpu-bw-d2d-only.yaml"
    out = tmp_path / "rec"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "record", "--local", "--out", str(out), "--profile", str(profile)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode in (0, 2), proc.stderr
    (stdout,) = out.glob("commands/*/stdout")
    assert stdout.read_bytes() == A6000.read_bytes()
    replay = cli("run", "--replay", out, "--profile", profile)
    assert replay.returncode == 2 and "GPU 0 -> GPU 5" in replay.stdout


# -- performance: true marks a measurement below a threshold (the sweep's second pass), nothing else --

SUPERBENCH_ALLREDUCE = CORPUS / "nccl_tests" / "superbench-allreduce_perf-8xA100.txt"


def _sub(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name


def test_a_busbw_below_the_threshold_is_a_performance_failure_a_socket_fallback_is_not(tmp_path: Path) -> None:
    bin_dir = standin(tmp_path, "all_reduce_perf", f"cat '{EFA_GDR}'\n")
    _, check = run_local(tmp_path, {"nccl.loopback": {**LOOP, "min_busbw": 60}}, bin_dir)  # 43.8 GB/s peak
    assert (check["status"], check["action"], check["data"]["performance"]) == ("fail", "INVESTIGATE", True), check
    socket = standin(_sub(tmp_path, "socket"), "all_reduce_perf", f"cat '{SOCKET}'\n")
    _, check = run_local(tmp_path, {"nccl.loopback": {**LOOP, "min_busbw": 60}}, socket)
    assert (check["status"], check["data"]["performance"]) == ("fail", False), check
    # nccl.busbw: the same rule; its action is INVESTIGATE
    bin_dir = standin(_sub(tmp_path, "busbw"), "all_reduce_perf", f"cat '{SUPERBENCH_ALLREDUCE}'\n")
    _, check = run_local(tmp_path, {"nccl.busbw": {"min_busbw": 500, "gpus": 8}}, bin_dir)
    assert (check["status"], check["action"], check["data"]["performance"]) == ("fail", "INVESTIGATE", True), check
    _, check = run_local(tmp_path, {"nccl.busbw": {"min_busbw": 10, "gpus": 8}}, bin_dir)
    assert check["status"] == "ok" and "performance" not in check["data"], check


def test_a_slow_port_or_copy_is_a_performance_failure_a_port_down_is_not(tmp_path: Path) -> None:
    bin_dir = _perftest_standin(tmp_path, HDR8M, tmp_path / "server.pid")
    _, check = run_local(tmp_path, {"rdma.bandwidth": RDMA}, bin_dir)
    assert (check["status"], check["data"]["performance"]) == ("fail", True), check
    check = _replay_edited(tmp_path / "down", "1: DOWN", "400 Gb/sec (4X NDR)", {"devices": ["mlx5_0"]})
    assert (check["status"], check["data"]["performance"]) == ("fail", False), check
    check = _replay_edited(tmp_path / "trained", "4: ACTIVE", "200 Gb/sec (4X HDR)", RDMA)
    assert (check["status"], check["data"]["performance"]) == ("fail", False), check
    bin_dir = standin(_sub(tmp_path, "nvb"), "nvbandwidth", f"cat '{A6000}'\n")
    d2d = {"gpu.bandwidth": {**GPU, "min_d2d": 25, "tests": ["device_to_device_memcpy_read_ce"]}}
    _, check = run_local(tmp_path, d2d, bin_dir)
    assert (check["status"], check["data"]["performance"]) == ("fail", True), check
    # garbage is an error, never a measurement
    bin_dir = standin(_sub(tmp_path, "nvb-assert"), "nvbandwidth", f"cat '{ASSERT}'\n")
    _, check = run_local(tmp_path, {"gpu.bandwidth": GPU}, bin_dir)
    assert check["status"] == "error" and check["data"].get("performance") is None, check


@pytest.mark.parametrize(
    ("log", "status", "action"),
    [
        ("issue-nccl-tests-188-ib-disabled-socket-2node-init-EXCERPT.txt", "warn", "FIX_CONFIG"),  # TCP sockets
        ("cybertronai-nccl2.4.6-efa-2node-v100-allreduce.txt", "fail", "FIX_CONFIG"),  # no GPUDirect RDMA
        ("slurmv4-roce-completion-error-vendor-err-81-node1.txt", "fail", "INVESTIGATE"),  # a transport error
    ],
)
def test_nccl_log_names_its_action(tmp_path: Path, log: str, status: str, action: str) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job.out").write_bytes((LOGS / log).read_bytes())
    _, check = run_local(tmp_path, {"nccl.log": {"paths": [f"{logs}/*.out"], "expect_gdr": True}}, None)
    assert (check["status"], check["action"]) == (status, action), check
