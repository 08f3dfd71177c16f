"""Probes: in-process locally, built from commands elsewhere (and as the local fallback),
recorded as their normalized JSON record and replayed strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clustercheck import Host
from clustercheck.errors import HostError, NotRecorded, ProbeUnavailable
from clustercheck.host import Probe, Transport, register_probe
from clustercheck.transports.fixture import Fixture, RecordingTransport, ReplayTransport
from clustercheck.transports.local import LocalTransport

calls: list[str] = []


def _kernel_remote(transport: Transport, timeout: float) -> dict[str, Any]:
    calls.append("remote")
    result = transport.run(["uname", "-s"], timeout=timeout)
    if result.exit_code != 0:
        raise HostError(transport.host, "uname failed")
    return {"kernel": result.stdout.strip(), "source": "uname"}


def _kernel_local_missing() -> dict[str, Any]:
    calls.append("local")
    raise ProbeUnavailable("localhost", "the library is not installed")


register_probe(Probe("test_kernel", remote=_kernel_remote, local=_kernel_local_missing))
register_probe(Probe("test_inproc", remote=_kernel_remote, local=lambda: {"kernel": "Linux", "source": "in-process"}))


def test_local_uses_the_in_process_side_and_falls_back_to_commands() -> None:
    host = Host(LocalTransport("n1"))
    calls.clear()
    assert host.probe("test_kernel") == {"kernel": "Linux", "source": "uname"}
    assert calls == ["local", "remote"]
    assert host.probe("test_inproc")["source"] == "in-process"
    assert host.observations[-1] == "probe test_inproc"


def test_unknown_probe_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no probe named 'nope'"):
        Host(LocalTransport("n1")).probe("nope")


def test_probes_record_their_record_and_replay_strictly(tmp_path: Path) -> None:
    recorder = RecordingTransport(LocalTransport("n1"), tmp_path / "fx")
    record = Host(recorder).probe("test_kernel")
    assert json.loads((tmp_path / "fx/probes/test_kernel.json").read_text()) == record
    assert not (tmp_path / "fx/commands").exists()  # the record, not the commands behind it
    recorder.write_manifest(profile="base", version="test", note="probe test", expect={})
    replay = Host(ReplayTransport(Fixture.load(tmp_path / "fx")))
    assert replay.probe("test_kernel") == record
    with pytest.raises(NotRecorded, match="has no recording of the probe 'test_inproc'"):
        replay.probe("test_inproc")


def test_a_probe_that_failed_replays_its_failure(tmp_path: Path) -> None:
    fixture = tmp_path / "fx"
    (fixture / "probes").mkdir(parents=True)
    (fixture / "fixture.yaml").write_text("host: n2\nnote: no NVML here\n")
    (fixture / "probes/test_kernel.error").write_text("NVML library not found\n")
    with pytest.raises(HostError, match="NVML library not found"):
        Host(ReplayTransport(Fixture.load(fixture))).probe("test_kernel")
