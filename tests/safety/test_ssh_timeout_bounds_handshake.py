"""Promise: clustercheck stays within its time budget over SSH, even against a host that
accepts the TCP connection and then never speaks (a hung sshd, a tarpit, a wrong port).

The silent host is a real listening socket on loopback that accepts and says nothing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import cli
from tests.sshd import SSHServer

from clustercheck.errors import HostError, Unreachable
from clustercheck.transports.ssh import SSHTransport


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never sends a byte (no SSH banner)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)  # held open, silent

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    yield server.getsockname()[1]
    # shutdown() wakes the accept() blocked in the kernel; close() alone would not, and the
    # thread would go on holding the listening socket (and, once its number is reused, accept
    # what a later test's server was sent: a scrape with "no data received")
    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)
    acceptor.join(5)
    server.close()
    for conn in accepted:
        conn.close()


def config_for(tmp_path: Path, port: int, sshd: SSHServer, extra: str = "") -> Path:
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text() + f"\nHost silent\n    HostName 127.0.0.1\n    Port {port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.client_key}\n    UserKnownHostsFile {sshd.known_hosts}\n{extra}"
    )
    return config


def test_run_timeout_bounds_a_handshake_that_never_ends(tmp_path: Path, sshd: SSHServer, silent_port: int) -> None:
    config = config_for(tmp_path, silent_port, sshd)
    start = time.monotonic()
    hosts = f"silent,{sshd.alias}"
    proc = cli("run", "--ssh", hosts, "--ssh-config", config, "-p", "base", "--timeout", "2", "-f", "json")
    took = time.monotonic() - start
    assert took < 2 + 4.0, f"--timeout 2 took {took:.1f} s"  # python start-up and the report, on a loaded CI machine
    hosts = json.loads(proc.stdout)["hosts"]  # a report, not a killed run
    assert {c["status"] for c in hosts["silent"]["checks"]} == {"error"}
    assert "--timeout of 2 s expired" in hosts["silent"]["checks"][0]["summary"]
    assert any(c["status"] == "ok" for c in hosts[sshd.alias]["checks"])  # the good host was judged
    assert "Traceback" not in proc.stderr


def test_ssh_config_connect_timeout_is_honoured(tmp_path: Path, sshd: SSHServer, silent_port: int) -> None:
    t = SSHTransport("silent", ssh_config=str(config_for(tmp_path, silent_port, sshd, "    ConnectTimeout 1\n")))
    start = time.monotonic()
    with pytest.raises(Unreachable, match=rf"127\.0\.0\.1:{silent_port}.* within 1 s"):
        t.run(["true"], timeout=30)
    assert time.monotonic() - start < 2.5
    # the caller's own connect timeout (the API's) wins over the config's
    t = SSHTransport("silent", ssh_config=str(config_for(tmp_path, silent_port, sshd, "    ConnectTimeout 30\n")),
                     connect_timeout=0.5)  # fmt: skip
    start = time.monotonic()
    with pytest.raises(Unreachable, match=r"within 0\.5 s"):
        t.run(["true"], timeout=30)
    assert time.monotonic() - start < 2


def test_a_bad_connect_timeout_names_the_config(tmp_path: Path, sshd: SSHServer, silent_port: int) -> None:
    config = config_for(tmp_path, silent_port, sshd, "    ConnectTimeout soon\n")
    with pytest.raises(Unreachable, match=rf"cannot use the ssh config \({config}\).*soon"):
        SSHTransport("silent", ssh_config=str(config)).run(["true"], timeout=5)


def test_close_aborts_a_handshake_in_progress_without_waiting(
    tmp_path: Path, sshd: SSHServer, silent_port: int
) -> None:
    t = SSHTransport("silent", ssh_config=str(config_for(tmp_path, silent_port, sshd, "    ConnectTimeout 20\n")))
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            t.connect()
        except HostError as exc:
            errors.append(exc)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    time.sleep(0.5)  # connected over TCP, waiting for a banner that never comes
    start = time.monotonic()
    t.close()
    assert time.monotonic() - start < 0.5, "close() waited for the handshake"
    worker.join(3)
    assert not worker.is_alive(), "the handshake went on after close()"
    assert errors and "closed" in str(errors[0])
