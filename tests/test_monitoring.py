"""monitoring.* checks: the Prometheus parser on the real dcgm-exporter samples, and the checks
run through the local transport against real HTTP servers on 127.0.0.1 (tests/metrics_server.py).

The node's GPU list is mocked in the server tests (this machine has no GPU); everything else is
real: curl/wget/python3 fetching over loopback, ps, sleep, /proc/net/tcp.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clustercheck.checks import monitoring as mon
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_mock import MockerFixture
from tests.helpers import FIXTURES, REPO, cli
from tests.metrics_server import (
    FIXTURE_GPUS,
    MIG_A100,
    MIXED_MIG,
    README,
    SCENARIOS,
    V100,
    MetricsServer,
    build_page,
    refused_url,
    silent_server,
)
from tests.sshd import SSHServer

from clustercheck import Host
from clustercheck import profile as profiles
from clustercheck.probes.nvml import GpuRecord
from clustercheck.result import CheckResult
from clustercheck.runner import run_checks
from clustercheck.transports import local as local_transport
from clustercheck.transports.fixture import Fixture, RecordingTransport, ReplayTransport
from clustercheck.transports.local import LocalTransport
from clustercheck.transports.ssh import SSHTransport

GPUS = [(g.index, g.uuid) for g in FIXTURE_GPUS]
A100_MIG_UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"  # the GPU of NVIDIA's MIG sample


def patch_gpus(mocker: MockerFixture, gpus: list[tuple[int, str]]) -> None:
    """The node's GPUs are `gpus`, in whichever copy of the module registered the checks: a test
    that imports checks/ by its source path (`from checks import monitoring`) loads a second one."""
    for name in ("clustercheck.checks.monitoring", "checks.monitoring"):
        if name in sys.modules:
            mocker.patch.object(sys.modules[name], "node_gpus", return_value=list(gpus))


def run_check(
    mocker: MockerFixture, tmp_path: Path, gpus: list[tuple[int, str]], check: str = "dcgm_exporter", **params: Any
) -> CheckResult:
    """Run one monitoring check as a profile sets it, on this node, with `gpus` as its GPUs."""
    patch_gpus(mocker, gpus)
    path = tmp_path / "profile.yaml"
    path.write_text(json.dumps({"name": "t", "description": "t", "checks": {f"monitoring.{check}": params}}))
    (result,) = run_checks(Host(LocalTransport("testnode")), profiles.load(str(path)).checks)
    return result


# -- the Prometheus text format, on the real samples ---------------------------------------


def test_parse_scrape_reads_the_real_samples() -> None:
    mig = mon.parse_scrape(MIG_A100.read_text())
    assert len(mig) == 21
    assert {s.labels["UUID"] for s in mig} == {A100_MIG_UUID}
    assert [s.labels.get("GPU_I_ID") for s in mig if s.name == "DCGM_FI_DEV_XID_ERRORS"] == [None, "13"]
    v100 = mon.parse_scrape(V100.read_text())
    # a `# TYPE ... counter` family keeps its name as written (the parser would add _total)
    assert {s.name for s in v100} == {
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
    }
    assert [s.value for s in v100 if s.name == "DCGM_FI_DEV_POWER_MGMT_LIMIT"] == [300.0, 300.0]
    mixed = mon.parse_scrape(MIXED_MIG.read_text())
    assert {(s.labels["gpu"], s.labels.get("GPU_I_ID")) for s in mixed} == {("1", None), ("2", "3")}


def test_the_abbreviated_readme_sample_is_a_parse_error_naming_its_line() -> None:
    text = README.read_text()
    with pytest.raises(mon.ScrapeParseError, match=r"^line 7: .*'\.\.\.'$"):
        mon.parse_scrape(text)
    whole = mon.parse_scrape("\n".join(line for line in text.splitlines() if line != "..."))
    assert [s.name for s in whole] == ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP"]
    # MEMORY_TEMP 9223372036854775794 is DCGM's "not supported" blank
    assert [mon.is_blank(s.value) for s in whole] == [False, False, True]


def test_a_declared_total_counter_keeps_its_name() -> None:
    series = mon.parse_scrape("# TYPE a_total counter\na_total 3\n# TYPE b counter\nb 1\nc 2\n")
    assert [(s.name, s.value) for s in series] == [("a_total", 3.0), ("b", 1.0), ("c", 2.0)]


def test_blank_values() -> None:
    assert mon.is_blank(float(0x7FFFFFFFFFFFFFF0 + 2))  # DCGM_INT64_NOT_SUPPORTED
    assert mon.is_blank(140737488355328.0 + 3)  # DCGM_FP64_NOT_PERMISSIONED
    assert mon.is_blank(math.nan)
    assert not any(mon.is_blank(v) for v in (0.0, 319159391.0, 409.692, 140737488355328.0 + 16))


def test_field_groups_accept_old_and_new_names() -> None:
    assert mon.field_group("DCGM_FI_DEV_GPU_UTIL") == ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO")
    assert mon.field_group("DCGM_FI_DEV_XID_ERROR") == ("DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_XID_ERRORS")
    assert mon.field_group(" A | B |") == ("A", "B")


def test_map_series_counts_mig_instances_for_their_gpu() -> None:
    cover = mon.map_series(mon.parse_scrape(MIXED_MIG.read_text()), [(1, "GPU-fc60126e-514d-3522-2828-c5daa8e99d85")])
    assert sorted(cover.by_gpu) == [1]
    assert cover.foreign == {"GPU-63bc0b91-2265-1b94-831c-15c41fe92675": 1}
    # old exporters: MIG-GPU-<uuid>/<gi>/<ci> and no UUID label but `gpu`
    old = [
        mon.Series("X", {"uuid": "MIG-GPU-abc/1/0", "GPU_I_ID": "1"}, 0.0),
        mon.Series("X", {"gpu": "2"}, 0.0),
        mon.Series("X", {"nvswitch": "0"}, 0.0),
    ]
    cover = mon.map_series(old, [(0, "GPU-abc"), (2, "GPU-def")])
    assert {i: len(s) for i, s in cover.by_gpu.items()} == {0: 1, 2: 1}
    assert cover.mig == {0: ["1"]}


def test_gpus_from_the_nvml_record() -> None:
    record = GpuRecord.from_json(
        {"error": None, "gpus": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": None, "error": "GPU is lost"}]}
    )
    assert mon.gpu_ids(record) == [(0, "GPU-a")]  # a lost GPU is the GPU checks' finding
    assert mon.gpu_ids(GpuRecord.from_json({"error": None, "gpus": []})) == []
    with pytest.raises(ValueError, match="could not be listed: NVML library not found"):
        mon.gpu_ids(GpuRecord.from_json({"error": "NVML library not found", "gpus": []}))


def test_node_gpus_reads_the_gpu_fact_of_the_recorded_node(tmp_path: Path) -> None:
    """The exporter's GPUs come from facts.gpu (the nvml probe's record, validated), the one
    reading the GPU checks share: one probe per host per run. A record that is no record, or
    that says why it lists no GPU, is an error naming it, never an empty node."""
    import shutil

    from clustercheck.errors import HostError
    from clustercheck.facts.gpu import gpus

    host = Host(ReplayTransport(Fixture.load(FIXTURES / "monitoring-healthy")))
    assert mon.node_gpus(host) == GPUS
    assert [(g.index, g.uuid) for g in gpus(host).gpus] == GPUS
    assert host.observations == ["probe nvml"]  # both read the one fact
    for record, said in (
        (["not", "a", "record"], "the nvml probe record is not a JSON object"),
        ({"error": "NVML library not found", "gpus": []}, "could not be listed: NVML library not found"),
    ):
        copy = tmp_path / f"fx{len(said)}"
        shutil.copytree(FIXTURES / "monitoring-healthy", copy)
        (copy / "probes" / "nvml.json").write_text(json.dumps(record))
        with pytest.raises(HostError, match=said):
            mon.node_gpus(Host(ReplayTransport(Fixture.load(copy))))


_NAME = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
_LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True).filter(lambda n: not n.startswith("__"))


@given(
    st.lists(
        st.tuples(
            _NAME,
            st.dictionaries(_LABEL, st.text(max_size=20), max_size=4),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
        ),
        max_size=8,
    )
)
@settings(max_examples=60, deadline=None)
def test_parse_scrape_round_trips_what_an_exporter_writes(samples: list[tuple[str, dict[str, str], float]]) -> None:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    page = "".join(
        name + "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "} " + repr(value) + "\n"
        for name, labels, value in samples
    )
    got = [(s.name, dict(s.labels), s.value) for s in mon.parse_scrape(page)]
    assert got == [(n, labels, v) for n, labels, v in samples]


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_garbage_is_a_parse_error_never_a_crash(text: str) -> None:
    try:
        mon.parse_scrape(text)
    except mon.ScrapeParseError as exc:
        assert str(exc)


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_proc_net_tcp_parser_takes_garbage(text: str) -> None:
    for address, port, state in mon.parse_proc_net_tcp(text):
        assert isinstance(address, str) and 0 <= port <= 0xFFFF and isinstance(state, str)


def test_proc_net_tcp_decodes_kernel_byte_order() -> None:
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    v4 = "   0: 0100007F:15B3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 528558 1\n"
    v6 = "   0: 00000000000000000000000001000000:15B3 00000000000000000000000000000000:0000 0A 0 0 0 0 0 0\n"
    assert mon.parse_proc_net_tcp(head + v4) == [("127.0.0.1", 5555, "0A")]
    assert mon.listeners(head + v6, 5555) == ["[::1]:5555"]
    assert mon.listeners(head + v4.replace(" 0A ", " 01 "), 5555) == []  # ESTABLISHED, not LISTEN


def test_proc_net_tcp_of_this_machine_shows_a_real_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert f"127.0.0.1:{port}" in mon.listeners(Path("/proc/net/tcp").read_text(), port)


# -- the exporter check against real servers ---------------------------------------------


def test_complete_and_fresh_is_ok(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(SCENARIOS["healthy"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1)
    assert result.status == "ok", result.summary
    assert result.summary == (
        f"8 of 8 GPUs exported by {server.url} with 5 required fields; TOTAL_ENERGY_CONSUMPTION advanced within 0.333 s"
    )
    assert server.agents == ["clustercheck-scrape-1", "clustercheck-scrape-2"]
    assert result.data["gpus_exported"] == 8 and result.data["tool"] == "curl"
    assert any(e.startswith("$ curl --silent") for e in result.evidence)


def test_a_missing_gpu_fails_naming_it(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(SCENARIOS["gpu-missing"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1)
    assert result.status == "fail"
    assert result.summary == f"GPU 3 ({FIXTURE_GPUS[3].uuid[:12]}...) has no series"
    assert result.data["missing_gpus"] == [FIXTURE_GPUS[3].uuid]
    assert "dcgmi discovery -l" in result.remedy


def test_a_missing_xid_field_fails(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(SCENARIOS["no-xid"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=0)
    assert (result.status, result.summary) == (
        "fail",
        "DCGM_FI_DEV_XID_ERRORS absent: XID events will not be alerted on",
    )
    assert "default-counters.csv" in result.remedy


def test_a_field_missing_on_some_gpus_names_them(mocker: MockerFixture, tmp_path: Path) -> None:
    page = build_page(FIXTURE_GPUS)
    cut = "\n".join(
        line for line in page.splitlines() if not (line.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="5"' in line)
    )
    with MetricsServer(lambda n: cut + "\n") as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=0)
    assert result.summary == f"DCGM_FI_DEV_GPU_TEMP missing for GPU 5 ({FIXTURE_GPUS[5].uuid[:12]}...)"


def test_stale_counters_fail(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(SCENARIOS["stale"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1)
    assert result.status == "fail"
    assert result.summary == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION did not change in 1 s on all 8 GPUs"
    assert len(result.data["stale_gpus"]) == 8 and "restart it" in result.remedy


def test_freshness_polls_until_the_counter_moves(mocker: MockerFixture, tmp_path: Path) -> None:
    # the exporter refreshes only every few scrapes (its -c interval): keep scraping, then pass
    with MetricsServer(lambda n: build_page(FIXTURE_GPUS, scrape=1 if n < 3 else 2)) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1.5)
    assert result.status == "ok", result.summary
    assert server.agents == [f"clustercheck-scrape-{n}" for n in (1, 2, 3)]


def test_server_down_fails_fast(mocker: MockerFixture, tmp_path: Path) -> None:
    url = refused_url()
    start = time.monotonic()
    result = run_check(mocker, tmp_path, GPUS, url=url)
    assert time.monotonic() - start < 3
    assert result.status == "fail"
    assert result.summary.startswith("dcgm-exporter is not running (no dcgm-exporter process")
    assert f"{url} refused the connection (Failed to connect to 127.0.0.1 port" in result.summary
    assert "systemctl enable --now nvidia-dcgm-exporter" in result.remedy


def test_server_that_never_answers_fails_after_the_timeout(mocker: MockerFixture, tmp_path: Path) -> None:
    with silent_server() as url:
        start = time.monotonic()
        result = run_check(mocker, tmp_path, GPUS, url=url, scrape_timeout=1)
        took = time.monotonic() - start
    assert 0.9 < took < 5
    assert result.status == "fail"
    assert result.summary.startswith(f"{url} did not answer within 1 s (Operation timed out after")
    assert "hung" in result.remedy


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("<html><body>Grafana</body></html>\n", "line 1: invalid metric name"),
        ('# HELP x y\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-\n', "line 2:"),
        (b"\x00\xff\xfe garbage\n", "line 1:"),
        ("DCGM_FI_DEV_GPU_TEMP 61\nDCGM_FI_DEV_GPU_TEMP{gpu=0} abc\n", "line 2:"),
    ],
)
def test_garbage_body_fails_with_a_parse_message(
    mocker: MockerFixture, tmp_path: Path, body: str | bytes, where: str
) -> None:
    with MetricsServer(lambda n: body) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url)
    assert result.status == "fail"
    assert result.summary.startswith(f"{server.url} did not return Prometheus metrics: {where}")
    assert "Traceback" not in result.summary


def test_an_http_error_fails(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(SCENARIOS["healthy"]) as server:
        url = server.url.replace("/metrics", "/nothing")
        result = run_check(mocker, tmp_path, GPUS, url=url)
    assert (result.status, result.summary) == (
        "fail",
        f"{url} answered with an error: The requested URL returned error: 404",
    )


def test_an_empty_page_fails(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(lambda n: "# HELP go_goroutines x\n# TYPE go_goroutines gauge\ngo_goroutines 7\n") as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url)
    assert (result.status, result.summary) == ("fail", "no DCGM_ metrics among its 1 series")


def test_another_nodes_exporter_fails(mocker: MockerFixture, tmp_path: Path) -> None:
    with MetricsServer(lambda n: MIG_A100.read_text()) as server:
        result = run_check(mocker, tmp_path, GPUS[:1], url=server.url, fresh_within=0)
    assert result.status == "fail"
    assert result.summary.startswith(f"GPU 0 ({GPUS[0][1][:12]}...) has no series; 21 series for GPU-34319582...")
    assert "which is not a GPU of this node" in result.summary


def test_blank_values_count_as_absent(mocker: MockerFixture, tmp_path: Path) -> None:
    page = re.sub(r"(DCGM_FI_DEV_GPU_TEMP\{.*\}) \S+", r"\1 9223372036854775794", build_page(FIXTURE_GPUS))
    with MetricsServer(lambda n: page) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=0)
    assert result.summary == ("DCGM_FI_DEV_GPU_TEMP is DCGM's blank value (not supported or no data) for all 8 GPUs")


def test_new_dcgm_field_names_are_accepted(mocker: MockerFixture, tmp_path: Path) -> None:
    page = build_page(FIXTURE_GPUS).replace("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO")
    page = page.replace("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")
    with MetricsServer(lambda n: page) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=0)
    assert result.status == "ok", result.summary


def test_real_mig_sample_is_complete_for_its_gpu(mocker: MockerFixture, tmp_path: Path) -> None:
    fields = ["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", mon.DEFAULT_FIELDS[-1]]
    with MetricsServer(lambda n: MIG_A100.read_text()) as server:
        result = run_check(mocker, tmp_path, [(0, A100_MIG_UUID)], url=server.url, fields=fields, fresh_within=0)
        assert result.status == "ok", result.summary
        assert result.summary == f"1 of 1 GPUs exported by {server.url} with 4 required fields (1 MIG instances)"
        assert "GPU 0 is in MIG mode: series for GPU instances 13" in result.evidence
        # the sample never changes: its counters are stale
        stale = run_check(mocker, tmp_path, [(0, A100_MIG_UUID)], url=server.url, fields=fields, fresh_within=1)
    gpu0 = f"GPU 0 ({A100_MIG_UUID[:12]}...)"
    assert stale.summary == f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION did not change in 1 s on {gpu0}"


def test_real_mixed_mig_sample(mocker: MockerFixture, tmp_path: Path) -> None:
    gpus = [(1, "GPU-fc60126e-514d-3522-2828-c5daa8e99d85"), (2, "GPU-63bc0b91-2265-1b94-831c-15c41fe92675")]
    with MetricsServer(lambda n: MIXED_MIG.read_text()) as server:
        result = run_check(mocker, tmp_path, gpus, url=server.url, fields=["DCGM_FI_DEV_FB_FREE"], fresh_within=0)
        assert (result.status, result.data["mig_instances"]) == ("ok", {"2": ["3"]})
        result = run_check(mocker, tmp_path, [(0, "GPU-00000000-0000-0000-0000-000000000000"), *gpus], url=server.url)
    assert result.summary.startswith("GPU 0 (GPU-00000000...) has no series; DCGM_FI_DEV_XID_ERRORS absent")


def test_a_node_without_gpus_skips(mocker: MockerFixture, tmp_path: Path) -> None:
    result = run_check(mocker, tmp_path, [], url=refused_url())
    assert (result.status, result.summary) == ("skip", "no NVIDIA GPU on this node (the nvml probe lists none)")


# -- curl, else wget, else python3 ---------------------------------------------------------


@pytest.fixture
def only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """only("wget"): the local transport's PATH holds that tool (plus ps and sleep) and nothing else."""

    def limit(*tools: str, base: tuple[str, ...] = ("ps", "sleep")) -> None:
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        for tool in (*base, *tools):
            real = sys.executable if tool == "python3" else shutil.which(tool)
            assert real, f"{tool} is needed for this test"
            (bindir / tool).symlink_to(os.path.realpath(real))
        monkeypatch.setitem(local_transport._ENV, "PATH", str(bindir))

    yield limit


@pytest.mark.parametrize("tool", ["wget", "python3"])
def test_without_curl_the_next_tool_scrapes(mocker: MockerFixture, tmp_path: Path, only: Any, tool: str) -> None:
    only(tool)
    with MetricsServer(SCENARIOS["healthy"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1)
    assert (result.status, result.data["tool"]) == ("ok", tool), result.summary
    assert server.agents == ["clustercheck-scrape-1", "clustercheck-scrape-2"]
    assert any(e.startswith("$ curl") and "exit 127" in e for e in result.evidence)


@pytest.mark.parametrize("tool", ["wget", "python3"])
def test_each_tool_tells_refused_from_silent(mocker: MockerFixture, tmp_path: Path, only: Any, tool: str) -> None:
    only(tool)
    down = run_check(mocker, tmp_path, GPUS, url=refused_url())
    assert down.status == "fail" and "refused the connection" in down.summary, down.summary
    with silent_server() as url:
        silent = run_check(mocker, tmp_path, GPUS, url=url, scrape_timeout=1)
    assert silent.status == "fail" and "did not answer within 1 s" in silent.summary, silent.summary


def test_a_failing_ps_does_not_spoil_a_good_scrape(mocker: MockerFixture, tmp_path: Path, only: Any) -> None:
    only("curl", base=("sleep",))
    with MetricsServer(SCENARIOS["healthy"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1)
    assert result.status == "ok" and "processes not listed (ps failed)" in result.evidence
    down = run_check(mocker, tmp_path, GPUS, url=refused_url())
    assert down.summary.startswith("nothing accepts connections at") and down.summary.endswith("; ps failed)")


def test_no_sleep_on_the_node_is_an_error_not_a_stale_verdict(mocker: MockerFixture, tmp_path: Path, only: Any) -> None:
    only("curl", base=("ps",))
    with MetricsServer(SCENARIOS["healthy"]) as server:
        result = run_check(mocker, tmp_path, GPUS, url=server.url, fresh_within=1)
    assert result.status == "error"
    assert result.summary.startswith("cannot wait between scrapes on the node: $ sleep 0.333  (exit 127")


def test_no_fetch_tool_on_the_node_is_an_error(mocker: MockerFixture, tmp_path: Path, only: Any) -> None:
    only()
    result = run_check(mocker, tmp_path, GPUS, url=refused_url())
    assert result.status == "error"
    assert "none of curl, wget, python3 is on the node" in result.summary


# -- record and replay ------------------------------------------------------------------


def test_a_recording_replays_the_same_verdict_without_waiting(mocker: MockerFixture, tmp_path: Path) -> None:
    patch_gpus(mocker, GPUS)
    path = tmp_path / "profile.yaml"
    path.write_text(json.dumps({"name": "t", "description": "t", "checks": {"monitoring.dcgm_exporter": {}}}))
    with MetricsServer(lambda n: build_page(FIXTURE_GPUS, scrape=1 if n < 3 else 2)) as server:
        path.write_text(path.read_text().replace("{}", json.dumps({"url": server.url, "fresh_within": 2})))
        checks = profiles.load(str(path)).checks
        recorder = RecordingTransport(LocalTransport("n1"), tmp_path / "fx")
        (recorded,) = run_checks(Host(recorder), checks)
    recorder.write_manifest(profile=str(path), version="test", note="replay test", expect={})
    start = time.monotonic()
    (replayed,) = run_checks(Host(ReplayTransport(Fixture.load(tmp_path / "fx"))), checks)
    assert time.monotonic() - start < 1.0  # the waits were `sleep` on the node: a replay does not wait
    assert recorded.duration_s > 1.3  # two waits of 0.667 s before the counter moved
    said = f"8 of 8 GPUs exported by {server.url} with 5 required fields; TOTAL_ENERGY_CONSUMPTION advanced"
    assert (
        (replayed.status, replayed.summary) == (recorded.status, recorded.summary) == ("ok", said + " within 1.333 s")
    )


def test_fixtures_say_what_is_wrong() -> None:
    proc = cli(
        "run",
        *("--replay", FIXTURES / "monitoring-gpu-missing", "--replay", FIXTURES / "monitoring-exporter-down"),
        *("--replay", FIXTURES / "monitoring-no-xid", "--replay", FIXTURES / "monitoring-healthy"),
        "--format",
        "json",
    )
    assert proc.returncode == 2, proc.stderr
    hosts = json.loads(proc.stdout)["hosts"]
    summary = {h: {c["id"]: c["summary"] for c in v["checks"]} for h, v in hosts.items()}
    assert summary["gpu203"]["monitoring.dcgm_exporter"] == f"GPU 3 ({FIXTURE_GPUS[3].uuid[:12]}...) has no series"
    assert summary["gpu204"]["monitoring.dcgm_exporter"] == (
        "DCGM_FI_DEV_XID_ERRORS absent: XID events will not be alerted on"
    )
    assert summary["gpu202"]["monitoring.dcgm_exporter"].startswith(
        "dcgm-exporter is not running (no dcgm-exporter process, nvidia-dcgm-exporter.service is inactive)"
    )
    assert summary["gpu201"]["monitoring.hostengine"] == "nv-hostengine is running and listening on 127.0.0.1:5555"


def test_a_node_whose_gpus_cannot_be_listed_is_an_error(tmp_path: Path) -> None:
    fixture = tmp_path / "gpu201"
    shutil.copytree(FIXTURES / "monitoring-healthy", fixture)
    record = {"source": "nvml", "error": "NVML library not found", "driver_version": None, "cuda_version": None}
    (fixture / "probes/nvml.json").write_text(json.dumps({**record, "gpus": []}))
    checks = profiles.load(str(fixture / "profile.yaml")).checks
    exporter, _ = run_checks(Host(ReplayTransport(Fixture.load(fixture))), checks)
    assert (exporter.status, exporter.summary) == (
        "error",
        "the node's GPUs could not be listed: NVML library not found",
    )


# -- nv-hostengine ------------------------------------------------------------------------


@pytest.fixture
def fake_hostengine(tmp_path: Path) -> Iterator[Any]:
    """start(*args) -> port: a process named nv-hostengine (python under that name) listening on a port."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> int:
        binary = tmp_path / "nv-hostengine"
        if not binary.exists():
            binary.symlink_to(os.path.realpath(sys.executable))
        code = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
        code += "print(s.getsockname()[1], flush=True); time.sleep(60)"
        proc = subprocess.Popen([str(binary), "-c", code, *args], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None
        return int(proc.stdout.readline())

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_hostengine_running_and_listening(mocker: MockerFixture, tmp_path: Path, fake_hostengine: Any) -> None:
    port = fake_hostengine()
    result = run_check(mocker, tmp_path, GPUS, check="hostengine", port=port)
    assert (result.status, result.summary) == ("ok", f"nv-hostengine is running and listening on 127.0.0.1:{port}")
    other = _free_port()
    result = run_check(mocker, tmp_path, GPUS, check="hostengine", port=other)
    assert (result.status, result.summary) == ("fail", f"nv-hostengine runs but nothing listens on TCP port {other}")


def test_hostengine_on_a_unix_socket_says_so(mocker: MockerFixture, tmp_path: Path, fake_hostengine: Any) -> None:
    fake_hostengine("--domain-socket")
    result = run_check(mocker, tmp_path, GPUS, check="hostengine", port=_free_port())
    assert result.status == "fail" and "it was started with --domain-socket" in result.summary
    assert run_check(mocker, tmp_path, GPUS, check="hostengine", port=0).status == "ok"


def test_hostengine_not_running_fails(mocker: MockerFixture, tmp_path: Path) -> None:
    if subprocess.run(["pgrep", "-x", "nv-hostengine"], capture_output=True).returncode == 0:
        pytest.skip("a real nv-hostengine runs on this machine")
    result = run_check(mocker, tmp_path, GPUS, check="hostengine")
    assert result.status == "fail"
    assert result.summary.startswith("nv-hostengine is not running: no nv-hostengine process")


# -- clustercheck's own metrics: the README's systemd timer + node_exporter recipe -------------

SERVICE = """\
[Unit]
Description=clustercheck: is this GPU node ready for jobs? (metrics for node_exporter)
After=network-online.target

[Service]
Type=oneshot
# exit 1-3 mean "ran and reported warn/fail/error": the metrics carry that, not the unit's state
SuccessExitStatus=1 2 3
Nice=10
ExecStart=/opt/clustercheck/bin/clustercheck run --local --profile /etc/clustercheck/site.yaml \\
    --format prometheus --output /var/lib/node_exporter/textfile_collector/clustercheck.prom --timeout 240
"""

TIMER = """\
[Unit]
Description=Run clustercheck every 5 minutes

[Timer]
OnBootSec=2min
OnUnitActiveSec=5min
RandomizedDelaySec=30s

[Install]
WantedBy=timers.target
"""


def _exec_start(unit: str) -> list[str]:
    """The unit's ExecStart command line, continuation lines joined, as systemd splits it."""
    text = re.sub(r"\\\n\s*", " ", unit)
    (line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_systemd_recipe_writes_a_textfile_node_exporter_reads(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    argv = _exec_start(SERVICE)
    assert argv[:3] == ["/opt/clustercheck/bin/clustercheck", "run", "--local"]
    out = tmp_path / "textfile_collector" / "clustercheck.prom"
    out.parent.mkdir()
    # the same command line, on a recorded node instead of this one, writing into tmp_path
    args = [a for a in argv[1:] if a != "--local"]
    args[args.index("--profile") + 1] = str(FIXTURES / "monitoring-healthy" / "profile.yaml")
    args[args.index("--output") + 1] = str(out)
    proc = cli(*args, "--replay", FIXTURES / "monitoring-gpu-missing")
    assert proc.returncode == 2 and not proc.stdout, proc.stderr  # 2 (a fail) is a success for the unit
    assert "2" in re.search(r"SuccessExitStatus=(.*)", SERVICE).group(1).split()  # type: ignore[union-attr]
    assert os.listdir(out.parent) == ["clustercheck.prom"]  # written atomically: no temporary file left
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(out.read_text())
        for s in family.samples
    }
    status = "clustercheck_check_status"
    assert samples[(status, (("check", "monitoring.dcgm_exporter"), ("host", "gpu203"), ("status", "fail")))] == 1
    assert samples[(status, (("check", "monitoring.hostengine"), ("host", "gpu203"), ("status", "ok")))] == 1
    assert samples[("clustercheck_host_status", (("host", "gpu203"),))] == 2
    assert abs(samples[("clustercheck_last_run_timestamp_seconds", ())] - time.time()) < 60
    duration = ("clustercheck_check_duration_seconds", (("check", "monitoring.dcgm_exporter"), ("host", "gpu203")))
    assert duration in samples
    assert "OnUnitActiveSec=5min" in TIMER and "WantedBy=timers.target" in TIMER


def test_the_readme_shows_the_tested_recipe() -> None:
    readme = (REPO / "README.md").read_text()
    if "clustercheck.timer" not in readme:
        pytest.skip("README has no systemd timer recipe yet (issue 8 sends it to the lead)")
    assert SERVICE in readme and TIMER in readme


# -- over SSH: the scrape runs on the node, whatever the transport -------------------------


@pytest.fixture
def over_ssh(sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SSHTransport]:
    """The loopback sshd (tests/sshd.py) as the node, with a fresh HOME (no keys of yours)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    transport = SSHTransport(sshd.alias, ssh_config=str(sshd.ssh_config))
    yield transport
    transport.close()


@pytest.mark.parametrize("tool", mon.SCRAPE_TOOLS)
def test_each_fetch_command_survives_ssh_quoting(over_ssh: SSHTransport, tool: str) -> None:
    host = Host(over_ssh)
    with MetricsServer(SCENARIOS["healthy"]) as server:
        got = mon.fetch(host, server.url, 5, 1, (tool,))
    assert got.page is not None, got.detail
    assert len(mon.parse_scrape(got.page)) == 152
    assert server.agents == ["clustercheck-scrape-1"]
    assert mon.fetch(host, refused_url(), 5, 1, (tool,)).kind == "connect"


def test_the_check_over_ssh(mocker: MockerFixture, tmp_path: Path, over_ssh: SSHTransport) -> None:
    patch_gpus(mocker, GPUS)
    path = tmp_path / "profile.yaml"
    with MetricsServer(SCENARIOS["gpu-missing"]) as server:
        params = {"url": server.url, "fresh_within": 1}
        path.write_text(json.dumps({"name": "t", "description": "t", "checks": {"monitoring.dcgm_exporter": params}}))
        (result,) = run_checks(Host(over_ssh), profiles.load(str(path)).checks)
    assert (result.status, result.summary) == ("fail", f"GPU 3 ({FIXTURE_GPUS[3].uuid[:12]}...) has no series")
