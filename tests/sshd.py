"""A real OpenSSH server on 127.0.0.1 for the SSH transport's tests.

`sshd` (session-scoped pytest fixture) starts `/usr/sbin/sshd -D` (Debian's
openssh-server) with its own config, a throwaway ed25519 host key, client keys and
authorized_keys in a temporary folder, on a free port, and stops it by its PID. It
fails loudly when sshd cannot be started: CI installs openssh-server.

Use it from tests/conftest.py with::

    from tests.sshd import sshd  # noqa: F401
"""

from __future__ import annotations

import contextlib
import getpass
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
ALIAS = "testnode"
USER_KEYS = ".clustercheck-test-authorized-keys"  # in a login_user()'s home: no real user has one
_USERS = itertools.count(1)


@dataclass(frozen=True)
class SSHServer:
    """What a test needs to reach the server; every path is in `folder`."""

    folder: Path
    host: str  # 127.0.0.1
    port: int
    user: str
    pid: int
    client_key: Path  # authorized
    wrong_key: Path  # not authorized
    host_key_line: str  # "ssh-ed25519 AAAA..." (the public host key)
    known_hosts: Path  # holds "[127.0.0.1]:PORT <host key>"
    ssh_config: Path  # "Host testnode" -> HostName, Port, User, IdentityFile, UserKnownHostsFile
    alias: str
    log: Path  # sshd's log (LogLevel VERBOSE)

    def accepted_logins(self) -> int:
        """How many logins sshd accepted so far (one per SSH connection)."""
        return len(re.findall(r"Accepted publickey for ", self.log.read_text(errors="replace")))

    def known_hosts_line(self, port: int | None = None) -> str:
        return f"[{self.host}]:{port or self.port} {self.host_key_line}\n"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)


def start_sshd(folder: Path) -> tuple[SSHServer, subprocess.Popen[bytes]]:
    if not os.path.exists(SSHD):
        pytest.fail(f"{SSHD} is missing: install Debian's openssh-server (apt-get install -y openssh-server)")
    if not shutil.which("ssh-keygen"):
        pytest.fail("ssh-keygen is missing: install Debian's openssh-client")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # Debian's sshd wants its privsep folder
    folder.mkdir(parents=True, exist_ok=True)
    home = folder / "home"  # the test user's sessions' HOME: no rc files to slow logins down
    home.mkdir(exist_ok=True)
    for name in ("host_ed25519", "client_ed25519", "wrong_ed25519"):
        _keygen(folder / name)
    (folder / "authorized_keys").write_text((folder / "client_ed25519.pub").read_text())
    host_key_line = " ".join((folder / "host_ed25519.pub").read_text().split()[:2])
    port = free_port()
    user = getpass.getuser()
    config = folder / "sshd_config"
    config.write_text(
        f"""Port {port}
ListenAddress 127.0.0.1
HostKey {folder}/host_ed25519
PidFile {folder}/sshd.pid
AuthorizedKeysFile {folder}/authorized_keys %h/{USER_KEYS}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
LogLevel VERBOSE
MaxStartups 100:30:200
Subsystem sftp internal-sftp
Match User {user}
    SetEnv HOME={home}
"""
    )
    log = folder / "sshd.log"
    check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.fail(f"sshd rejects its test config {config}: {check.stderr.strip()}")
    proc = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(log)], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            text = log.read_text(errors="replace") if log.exists() else ""
            pytest.fail(f"sshd exited with {proc.returncode} at start-up; its log:\n{text}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"sshd did not answer on 127.0.0.1:{port} within 10 s; log: {log}")
        time.sleep(0.05)
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key_line}\n")
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(
        f"""Host {ALIAS}
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {folder}/client_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}
"""
    )
    server = SSHServer(
        folder=folder,
        host="127.0.0.1",
        port=port,
        user=user,
        pid=proc.pid,
        client_key=folder / "client_ed25519",
        wrong_key=folder / "wrong_ed25519",
        host_key_line=host_key_line,
        known_hosts=known_hosts,
        ssh_config=ssh_config,
        alias=ALIAS,
        log=log,
    )
    return server, proc


def stop_sshd(server: SSHServer, proc: subprocess.Popen[bytes]) -> None:
    pid_file = server.folder / "sshd.pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=5)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A running sshd on 127.0.0.1 that accepts `client_key` for the current user."""
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        stop_sshd(server, proc)


# -- users with another login shell ------------------------------------------------------------------


@contextlib.contextmanager
def login_user(shell: str, key: Path) -> Iterator[str]:
    """A throwaway local user whose login shell is `shell` (e.g. /usr/bin/fish), removed after.

    The test sshd lets it in with the public key `key` (e.g. the server's client_key + .pub). Needs
    root (useradd) and the shell installed (Debian: apt-get install fish tcsh); skips otherwise.
    """
    if os.geteuid() != 0:
        pytest.skip("a user with another login shell can only be made as root (useradd)")
    if not os.access(shell, os.X_OK) or not shutil.which("useradd"):
        pytest.skip(f"{shell} is not installed (Debian: apt-get install {os.path.basename(shell)})")
    name = f"cc{os.path.basename(shell)}{os.getpid()}x{next(_USERS)}"[:32]
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp"))  # not under pytest's 0700 folder
    try:
        # -p '*': no password, yet not locked (sshd without PAM refuses a locked "!" account)
        add = ["useradd", "-M", "-d", str(home), "-s", shell, "-p", "*", name]
        subprocess.run(add, check=True, capture_output=True)
        keys = home / USER_KEYS  # sshd reads keys as the user: pytest's folders are 0700
        keys.write_text(key.read_text())
        for path in (home, keys):
            shutil.chown(path, name, name)
        yield name
    finally:
        for _ in range(50):  # userdel refuses while a process of the user lives (sshd's, being reaped)
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            gone = subprocess.run(["userdel", name], capture_output=True)
            if gone.returncode in (0, 6):  # 6: no such user (useradd failed)
                break
            time.sleep(0.1)
        shutil.rmtree(home, ignore_errors=True)


# -- many "nodes": one address each on loopback ---------------------------------------------------

#: OpenSSH accepts at most 16 ListenAddress lines per daemon (MAX_LISTEN_SOCKS).
MAX_LISTEN = 16


@dataclass(frozen=True)
class Fleet:
    """Loopback addresses served by sshd daemons that share the test server's keys and port."""

    server: SSHServer
    addresses: tuple[str, ...]
    ssh_config: Path  # `Host 127.0.0.*`: Port, User, IdentityFile, UserKnownHostsFile (all addresses)
    known_hosts: Path


def start_fleet(
    server: SSHServer,
    addresses: list[str],
    folder: Path,
    *,
    pid_namespaces: bool = False,
    per_daemon: int = MAX_LISTEN,
) -> tuple[Fleet, list[subprocess.Popen[bytes]]]:
    """Serve `addresses` on the test server's port with ceil(N/per_daemon) more sshd daemons
    (per_daemon: 1 to 16 addresses each).

    pid_namespaces (root only; the fleet benchmark): each daemon runs as the first process of a
    PID namespace of its own, with its own /proc (`unshare --pid --fork --mount-proc`), so that
    the sessions of its hosts see their own processes, as a node does, not every other host's
    (with per_daemon=1, exactly a node's view): the returned Popen is unshare's, and killing
    it kills the namespace."""
    if not 1 <= per_daemon <= MAX_LISTEN:
        raise ValueError(f"per_daemon must be 1 to {MAX_LISTEN}, not {per_daemon}")
    folder.mkdir(parents=True, exist_ok=True)
    base = (server.folder / "sshd_config").read_text()
    base = "\n".join(line for line in base.splitlines() if not line.startswith(("ListenAddress", "PidFile")))
    procs = []
    for n in range(0, len(addresses), per_daemon):
        chunk = addresses[n : n + per_daemon]
        config = folder / f"sshd_config.{n // per_daemon}"
        listen = "".join(f"ListenAddress {a}\n" for a in chunk)
        top, match, rest = base.partition("\nMatch ")  # global options go before the Match block
        config.write_text(f"{top}\n{listen}PidFile {folder}/sshd.{n // per_daemon}.pid\n{match.lstrip()}{rest}\n")
        log = folder / f"sshd.{n // per_daemon}.log"
        argv = [SSHD, "-D", "-f", str(config), "-E", str(log)]
        if pid_namespaces:
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *argv]
        procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + 15
    for address in addresses:
        while True:
            try:
                with socket.create_connection((address, server.port), timeout=0.5) as s:
                    s.settimeout(2)
                    if s.recv(64).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                pytest.fail(f"the fleet sshd did not answer on {address}:{server.port} within 15 s ({folder})")
            time.sleep(0.05)
    known_hosts = folder / "known_hosts"
    known_hosts.write_text("".join(server.known_hosts_line().replace("127.0.0.1", a, 1) for a in addresses))
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(
        f"Host 127.0.0.*\n    Port {server.port}\n    User {server.user}\n"
        f"    IdentityFile {server.client_key}\n    IdentitiesOnly yes\n    UserKnownHostsFile {known_hosts}\n"
    )
    return Fleet(server, tuple(addresses), ssh_config, known_hosts), procs


@pytest.fixture(scope="session")
def fleet_sshd(sshd: SSHServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """64 "nodes": 127.0.0.2 ... 127.0.0.65, all served by sshd on the test server's port."""
    fleet, procs = start_fleet(sshd, [f"127.0.0.{i}" for i in range(2, 66)], tmp_path_factory.mktemp("fleet"))
    try:
        yield fleet
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
