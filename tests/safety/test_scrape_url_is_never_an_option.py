"""Promise: a profile's `url` for monitoring.dcgm_exporter is only ever an http(s) URL handed to
curl/wget after `--`: a value starting with `-` is never an option (before, `url: -K FILE` made
curl read a config that fetched the page into a file of the profile's choosing).

The check runs for real on this machine (LocalTransport, the real curl and wget) against a real
HTTP server on 127.0.0.1; only the node's GPUs (NVML) are stood in for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from checks import monitoring as mon
from pytest_mock import MockerFixture
from tests.metrics_server import FIXTURE_GPUS, SCENARIOS, MetricsServer

from clustercheck import Host
from clustercheck import profile as profiles
from clustercheck.result import CheckResult
from clustercheck.runner import run_checks
from clustercheck.transports.local import LocalTransport

GPUS = [(g.index, g.uuid) for g in FIXTURE_GPUS]


def run_exporter_check(mocker: MockerFixture, tmp_path: Path, **params: Any) -> CheckResult:
    mocker.patch.object(mon, "node_gpus", return_value=list(GPUS))
    path = tmp_path / "profile.yaml"
    body = {"name": "t", "description": "t", "checks": {"monitoring.dcgm_exporter": {"fresh_within": 0, **params}}}
    path.write_text(json.dumps(body))
    (result,) = run_checks(Host(LocalTransport("testnode")), profiles.load(str(path)).checks)
    return result


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_url_that_is_a_curl_option_is_refused_and_writes_nothing(mocker: MockerFixture, tmp_path: Path) -> None:
    written = tmp_path / "chosen-by-the-profile"
    with MetricsServer(SCENARIOS["healthy"]) as server:
        config = tmp_path / "curlrc"
        config.write_text(f'url = "{server.url}"\noutput = "{written}"\n')
        for url in (f"-K{config}", f"--config={config}", f"-o{written}", "-"):
            result = run_exporter_check(mocker, tmp_path, url=url)
            assert result.status == "error", (url, result)
            assert "url must be an http:// or https:// URL" in result.summary and "fix the profile" in result.summary
            assert repr(url) in result.summary
        assert not written.exists()
        assert server.agents == []  # nothing was fetched at all


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/shadow",
        "ftp://127.0.0.1/metrics",
        "gopher://127.0.0.1:70/x",
        "http://",
        "http:///metrics",
        "http://127.0.0.1:notaport/metrics",
        "http://127.0.0.1/ metrics",
        "http://127.0.0.1/\nmetrics",
        "localhost:9400/metrics",
    ],
)
def test_only_http_urls_with_a_host_are_accepted(url: str) -> None:
    with pytest.raises(ValueError, match="url"):
        mon.check_url(url)


@pytest.mark.parametrize("tool", ["curl", "wget"])
def test_the_url_comes_after_the_end_of_options(tool: str) -> None:
    argv = mon.scrape_argv(tool, "http://localhost:9400/metrics", 5, 1)
    assert argv[-2:] == ("--", "http://localhost:9400/metrics")


@pytest.mark.parametrize("tool", ["curl", "wget"])
def test_a_real_fetch_with_the_end_of_options_still_works(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"needs {tool}")
    host = Host(LocalTransport("testnode"))
    with MetricsServer(SCENARIOS["healthy"]) as server:
        got = mon.fetch(host, server.url, 5, 1, tools=(tool,))
    assert got.page is not None and "DCGM_FI_DEV_XID_ERRORS" in got.page, got
