"""Shared test fixtures: write files into a temporary folder, run the CLI as a user would."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.helpers import cli
from tests.slurm_cluster import SyslogSink, short_tmpdir
from tests.sshd import fleet_sshd, sshd  # noqa: F401  (real OpenSSH server fixtures)

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def run_cli() -> RunCli:
    """`run_cli("run", "--profile", p)`: `python -m clustercheck ...` in a subprocess (tests.helpers.cli)."""
    return cli


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str | bytes], Path]:
    """`write("a/site.yaml", text)`: the file under tmp_path (folders made), text or bytes."""

    def write_file(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write_file


@pytest.fixture
def sink() -> Iterator[SyslogSink]:
    """A datagram socket standing in for /dev/log: what clustercheck sends to syslog."""
    folder = short_tmpdir("cc-log-")
    s = SyslogSink(folder / "log.sock")
    yield s
    s.close()
    shutil.rmtree(folder, ignore_errors=True)
