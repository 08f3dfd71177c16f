"""SSHTransport against a real OpenSSH server on 127.0.0.1 (see tests/sshd.py)."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import pytest
from tests.sshd import SSHServer

from clustercheck.errors import CommandTimeout, HostError, Unreachable
from clustercheck.host import Probe, register_probe
from clustercheck.transports.ssh import SSHTransport

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME (no ~/.ssh/config, known_hosts or id_* keys), and no ssh-agent."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture
def node(sshd: SSHServer) -> Iterator[SSHTransport]:
    """The test sshd through its ssh_config alias."""
    t = SSHTransport(sshd.alias, ssh_config=str(sshd.ssh_config))
    yield t
    t.close()


class Options(TypedDict, total=False):
    """SSHTransport's keyword arguments."""

    ssh_config: str | None
    user: str | None
    identity: list[str] | None
    port: int | None
    accept_new_host_keys: bool
    connect_timeout: float | None


def direct(sshd: SSHServer, host: str = "127.0.0.1", **kw: Unpack[Options]) -> SSHTransport:
    """A transport without ssh config, as `--ssh 127.0.0.1 --port P -i KEY` (ssh_config is an empty file)."""
    empty = sshd.folder / "empty_config"
    empty.touch()
    args: Options = {"port": sshd.port, "identity": [str(sshd.client_key)], "ssh_config": str(empty)}
    args.update(kw)
    return SSHTransport(host, **args)


def remote_alive(pattern: str) -> list[str]:
    """Processes whose command line holds `pattern` (sshd is on this machine)."""
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


# -- run ---------------------------------------------------------------------------------
def test_run_ok_and_attributes(node: SSHTransport, sshd: SSHServer) -> None:
    r = node.run(["echo", "hello world"], timeout=10)
    assert (r.argv, r.exit_code, r.stdout, r.stderr, r.timed_out) == (
        ("echo", "hello world"),
        0,
        "hello world\n",
        "",
        False,
    )
    assert r.ok and 0 <= r.duration_s < 5
    assert node.kind == "ssh" and node.host == sshd.alias


def test_nonzero_exit_and_stderr_kept_apart(node: SSHTransport) -> None:
    r = node.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")


def test_missing_command_exits_127(node: SSHTransport) -> None:
    r = node.run(["no-such-command-xyz", "--flag"], timeout=10)
    assert r.exit_code == 127 and not r.timed_out
    assert "no-such-command-xyz" in r.stderr


def test_arguments_reach_the_command_verbatim(node: SSHTransport) -> None:
    args = ["a b", "$HOME", "'q'", '"d"', "x;y", "*", ""]
    r = node.run(["printf", "[%s]\\n", *args], timeout=10)
    assert r.stdout.splitlines() == [f"[{a}]" for a in args]


def test_c_locale_no_pty_stdin_at_eof(node: SSHTransport) -> None:
    r = node.run(["sh", "-c", 'echo "$LC_ALL"; [ -t 0 ] || echo notty; cat; echo done'], timeout=5)
    assert r.stdout == "C\nnotty\ndone\n"


def test_killed_by_signal_exits_like_a_shell(node: SSHTransport) -> None:
    r = node.run(["sh", "-c", "kill -KILL $$"], timeout=10)
    assert r.exit_code == 128 + 9 and not r.timed_out


def test_large_outputs_on_both_streams_arrive_intact(node: SSHTransport) -> None:
    n = 1_700_000  # ~12.4 MB on stdout, while ~1.3 MB go to stderr: under the 16 MiB cap together
    r = node.run(["sh", "-c", f"seq 1 200000 >&2 & seq 1 {n}; wait"], timeout=60)
    assert r.exit_code == 0
    assert len(r.stdout) > 12_000_000
    assert r.stdout == "".join(f"{i}\n" for i in range(1, n + 1))
    assert r.stderr == "".join(f"{i}\n" for i in range(1, 200_001))


def test_timeout_returns_quickly_and_kills_the_remote_command(node: SSHTransport) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    node.run(["true"], timeout=10)  # connected already: time the command alone
    start = time.monotonic()
    r = node.run(["sh", "-c", f"sleep 60; echo {marker}"], timeout=1)
    took = time.monotonic() - start
    assert r.timed_out and r.exit_code is None and not r.ok
    assert 0.9 <= took < 3, took
    assert "timed out" in r.describe()
    deadline = time.monotonic() + 2
    while remote_alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert remote_alive(marker) == []
    assert node.run(["echo", "still usable"], timeout=10).stdout == "still usable\n"


def test_background_child_holding_stdout_does_not_hang_or_survive(node: SSHTransport) -> None:
    marker = f"{60 + int(uuid.uuid4().int % 1000) / 1000:.3f}"  # a sleep time nobody else uses
    start = time.monotonic()
    r = node.run(["sh", "-c", f"sleep {marker} & echo started"], timeout=10)
    assert time.monotonic() - start < 4
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "started\n", False)
    time.sleep(0.2)
    assert remote_alive(f"sleep {marker}") == []


def test_many_calls_use_one_connection(node: SSHTransport, sshd: SSHServer) -> None:
    before = sshd.accepted_logins()
    for i in range(5):
        assert node.run(["echo", str(i)], timeout=10).stdout == f"{i}\n"
    assert node.read("/proc/version", timeout=10)
    results: list[str] = []

    def worker(i: int) -> None:
        results.append(node.run(["echo", f"t{i}"], timeout=10).stdout)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(results) == sorted(f"t{i}\n" for i in range(8))
    time.sleep(0.1)  # let sshd write its log
    assert sshd.accepted_logins() == before + 1


# -- read and probe ----------------------------------------------------------------------
def test_read_files(node: SSHTransport, tmp_path: Path) -> None:
    f = tmp_path / "file with spaces.txt"
    f.write_text("line 1\nlïne 2\n")
    assert node.read(str(f), timeout=10) == "line 1\nlïne 2\n"
    assert "Linux" in node.read("/proc/version", timeout=10)
    assert node.read("/proc/self/status", timeout=10).startswith("Name:")
    with pytest.raises(FileNotFoundError):
        node.read(str(tmp_path / "absent"), timeout=10)
    with pytest.raises(FileNotFoundError):
        node.read(str(f / "below a file"), timeout=10)
    with pytest.raises(HostError, match="Is a directory"):
        node.read(str(tmp_path), timeout=10)


def test_read_that_hangs_times_out(node: SSHTransport, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"  # no writer: cat blocks, like a read on a dead NFS server
    os.mkfifo(fifo)
    node.run(["true"], timeout=10)
    start = time.monotonic()
    with pytest.raises(CommandTimeout, match="fifo"):
        node.read(str(fifo), timeout=1)
    assert time.monotonic() - start < 3
    time.sleep(0.2)
    assert remote_alive(f"cat -- {fifo}") == []


def test_probe_builds_its_record_from_commands(node: SSHTransport) -> None:
    register_probe(Probe("test-ssh-uname", remote=lambda t, timeout: t.run(["uname", "-s"], timeout=timeout).stdout))
    assert node.probe("test-ssh-uname", timeout=10) == "Linux\n"


# -- host keys ---------------------------------------------------------------------------
def test_unknown_host_key_is_refused_with_advice(sshd: SSHServer, home: Path) -> None:
    (home / ".ssh" / "known_hosts").write_text("")
    t = direct(sshd, ssh_config=None)
    with pytest.raises(Unreachable) as info:
        t.run(["true"], timeout=10)
    msg = str(info.value)
    assert f"127.0.0.1:{sshd.port}" in msg and "unknown" in msg.lower()
    assert "--accept-new-host-keys" in msg and "ssh-keyscan" in msg
    assert info.value.host == "127.0.0.1"


def test_accept_new_host_keys_records_the_key(sshd: SSHServer, home: Path) -> None:
    known = home / ".ssh" / "known_hosts"
    t = direct(sshd, ssh_config=None, accept_new_host_keys=True)
    assert t.run(["echo", "ok"], timeout=10).stdout == "ok\n"
    t.close()
    text = known.read_text()
    assert sshd.host_key_line in text
    # OpenSSH finds it there (Debian's /etc/ssh/ssh_config hashes names: HashKnownHosts yes)
    found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{sshd.port}", "-f", str(known)], capture_output=True)
    assert found.returncode == 0
    again = direct(sshd, ssh_config=None)  # now known: no flag needed
    assert again.run(["echo", "ok"], timeout=10).stdout == "ok\n"
    again.close()
    assert known.read_text() == text  # recorded once


def test_changed_host_key_is_always_refused(sshd: SSHServer, home: Path) -> None:
    impostor = " ".join(Path(f"{sshd.wrong_key}.pub").read_text().split()[:2])
    known = home / ".ssh" / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {impostor}\n")

    def fingerprint(line: str) -> str:
        out = subprocess.run(["ssh-keygen", "-lf", "-"], input=line, capture_output=True, text=True).stdout
        return out.split()[1]

    for accept in (False, True):
        t = direct(sshd, ssh_config=None, accept_new_host_keys=accept)
        with pytest.raises(Unreachable) as info:
            t.run(["true"], timeout=10)
        msg = str(info.value)
        assert "CHANGED" in msg and f"127.0.0.1:{sshd.port}" in msg and "ssh-keygen -R" in msg
        assert fingerprint(sshd.host_key_line) in msg and fingerprint(impostor) in msg
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {impostor}\n"


def known_hosts_verdict(sshd: SSHServer, home: Path, lines: list[str]) -> str:
    """What connecting says with these known_hosts lines: "ok", or the refusal's message."""
    (home / ".ssh" / "known_hosts").write_text("".join(f"{line}\n" for line in lines))
    t = direct(sshd, ssh_config=None)
    try:
        return "ok" if t.run(["true"], timeout=10).exit_code == 0 else "exit"
    except Unreachable as exc:
        return str(exc)
    finally:
        t.close()


def test_known_hosts_patterns_negations_hashes_and_revocations(sshd: SSHServer, home: Path) -> None:
    """The matching rules of OpenSSH's known_hosts (sshd(8) SSH_KNOWN_HOSTS FILE FORMAT), with the
    plain names of a fleet's file looked up by name and the rest entry by entry, in file order."""
    name = f"[127.0.0.1]:{sshd.port}"
    key = sshd.host_key_line
    impostor = " ".join(Path(f"{sshd.wrong_key}.pub").read_text().split()[:2])
    plain = home / "to-hash"
    plain.write_text(f"{name} {key}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(plain)], capture_output=True, check=True)  # OpenSSH hashes it
    hashed_line = plain.read_text().strip()
    assert hashed_line.startswith("|1|")
    fleet = [f"node{i:04d},10.1.{i // 250}.{i % 250} {impostor}" for i in range(2000)]  # other names
    assert known_hosts_verdict(sshd, home, [*fleet, f"NODE7,{name.upper()} {key}"]) == "ok"  # any case
    assert known_hosts_verdict(sshd, home, [*fleet, f"[127.0.0.*]:{sshd.port} {key}"]) == "ok"
    assert known_hosts_verdict(sshd, home, [*fleet, hashed_line]) == "ok"
    negated = known_hosts_verdict(sshd, home, [f"[127.0.0.*]:{sshd.port},!{name} {key}"])
    assert "unknown SSH host key" in negated
    revoked = known_hosts_verdict(sshd, home, [f"{name} {key}", f"@revoked * {key}"])
    assert "REVOKED" in revoked and ":2" in revoked
    # a changed key names the first line that knows the host: a pattern before a plain name
    changed = known_hosts_verdict(sshd, home, [*fleet[:3], f"[127.0.0.?]:{sshd.port} {impostor}", f"{name} {impostor}"])
    assert "CHANGED" in changed and "known_hosts:4" in changed


# -- failures ----------------------------------------------------------------------------
def test_connection_refused_is_quick_and_clear(sshd: SSHServer) -> None:
    t = direct(sshd, host="127.0.0.201")  # nothing listens there (the fleet sshd takes 127.0.0.2-65)
    start = time.monotonic()
    with pytest.raises(Unreachable, match=rf"refused by 127\.0\.0\.201:{sshd.port}"):
        t.run(["true"], timeout=10)
    assert time.monotonic() - start < 2


def test_wrong_client_key_is_an_auth_failure(sshd: SSHServer) -> None:
    t = direct(sshd, identity=[str(sshd.wrong_key)])
    t2 = direct(sshd, identity=[str(sshd.folder / "no-such-key")])
    for transport in (t, t2):
        with pytest.raises(Unreachable, match=rf"authentication failed as {sshd.user}@127\.0\.0\.1:{sshd.port}"):
            with_known_hosts(transport, sshd).run(["true"], timeout=10)


def with_known_hosts(t: SSHTransport, sshd: SSHServer) -> SSHTransport:
    known = Path(os.environ["HOME"]) / ".ssh" / "known_hosts"
    known.write_text(sshd.known_hosts_line())
    return t


def test_not_an_ssh_server_and_no_traceback(sshd: SSHServer, capfd: pytest.CaptureFixture[str]) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer_garbage() -> None:
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
        conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        t = direct(sshd, port=port, connect_timeout=2)
        with pytest.raises(Unreachable, match=rf"127\.0\.0\.1:{port}.*SSH"):
            t.run(["true"], timeout=5)
    finally:
        server.close()
    assert "Traceback" not in capfd.readouterr().err


def test_unknown_host_name(sshd: SSHServer) -> None:
    t = direct(sshd, host="no-such-host.invalid", connect_timeout=3)
    with pytest.raises(Unreachable, match=r"cannot resolve the host name 'no-such-host\.invalid'"):
        t.run(["true"], timeout=5)


class FreezableProxy:
    """A TCP relay to sshd that can stop relaying: a node that stops answering mid-run."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.frozen = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while self.frozen.is_set():
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.frozen.clear()
        for s in self.sockets:
            s.close()


def test_host_that_stops_answering_mid_run(sshd: SSHServer, home: Path) -> None:
    proxy = FreezableProxy(sshd.port)
    try:
        (home / ".ssh" / "known_hosts").write_text(sshd.known_hosts_line(proxy.port))
        t = direct(sshd, ssh_config=None, port=proxy.port, connect_timeout=1)
        assert t.run(["echo", "up"], timeout=5).stdout == "up\n"
        threading.Timer(0.3, proxy.frozen.set).start()
        start = time.monotonic()
        marker = f"marker-{uuid.uuid4().hex}"
        r = t.run(["sh", "-c", f"echo begun; sleep 5; : {marker}"], timeout=1)
        assert r.timed_out and time.monotonic() - start < 2.5
        assert remote_alive(marker)  # the kill could not get through
        second = time.monotonic()
        with pytest.raises(Unreachable):  # reconnects: no banner within connect_timeout
            t.run(["true"], timeout=1)
        assert time.monotonic() - second < 3
        t.close()
        # the remote `timeout` backstop kills it ~2 s after its deadline, connection or not
        while remote_alive(marker) and time.monotonic() - start < 4.5:
            time.sleep(0.1)
        assert remote_alive(marker) == []
    finally:
        proxy.close()


# -- ssh config ----------------------------------------------------------------------------
def test_ssh_config_alias_is_honoured(sshd: SSHServer, home: Path) -> None:
    # HOME has no known_hosts and no keys: only the config's IdentityFile and UserKnownHostsFile work
    t = SSHTransport(sshd.alias, ssh_config=str(sshd.ssh_config))
    assert t.host == sshd.alias
    assert t.run(["id", "-un"], timeout=10).stdout.strip() == sshd.user
    t.close()
    # the same config through ~/.ssh/config (no -F), pulled in by an Include
    (home / ".ssh" / "config.d").mkdir()
    (home / ".ssh" / "config.d" / "test.conf").write_text(sshd.ssh_config.read_text())
    (home / ".ssh" / "config").write_text("Include config.d/*.conf\n")
    t = SSHTransport(sshd.alias)
    assert t.run(["echo", "included"], timeout=10).stdout == "included\n"
    t.close()


def test_match_exec_in_the_ssh_config_still_chooses_the_options(
    sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """paramiko is loaded without `invoke` (its start-up cost); a config with `Match exec` gets it."""
    pytest.importorskip("invoke")
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # invoke reads stdin, which pytest refuses
    flag = tmp_path / "flag"
    config = tmp_path / "config"
    config.write_text(
        f'Match exec "test -e {flag}"\n    HostName 127.0.0.1\n'
        + "".join(f"    {line.strip()}\n" for line in sshd.ssh_config.read_text().splitlines()[2:])
    )
    t = SSHTransport("matched", ssh_config=str(config))
    with pytest.raises(Unreachable, match="resolve"):  # no flag: no HostName, and `matched` is no name
        t.run(["true"], timeout=10)
    flag.touch()
    t = SSHTransport("matched", ssh_config=str(config))
    assert t.run(["echo", "via exec"], timeout=10).stdout == "via exec\n"
    t.close()


def test_the_transport_loads_without_invoke() -> None:
    code = "import sys, clustercheck.transports.ssh; sys.exit('invoke' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_explicit_options_override_the_config(sshd: SSHServer) -> None:
    t = SSHTransport(sshd.alias, ssh_config=str(sshd.ssh_config), identity=[str(sshd.wrong_key)])
    with pytest.raises(Unreachable, match="authentication failed"):
        t.run(["true"], timeout=10)
    t = SSHTransport(sshd.alias, ssh_config=str(sshd.ssh_config), port=1)  # nothing listens on port 1
    with pytest.raises(Unreachable, match=r"refused by testnode \(127\.0\.0\.1:1\)"):
        t.run(["true"], timeout=10)


def test_proxy_jump(sshd: SSHServer) -> None:
    config = sshd.folder / "jump_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"""
Host behind
    HostName 127.0.0.1
    Port {sshd.port}
    User {sshd.user}
    IdentityFile {sshd.client_key}
    UserKnownHostsFile {sshd.known_hosts}
    ProxyJump {sshd.alias}
"""
    )
    before = sshd.accepted_logins()
    t = SSHTransport("behind", ssh_config=str(config))
    assert t.run(["echo", "via jump"], timeout=10).stdout == "via jump\n"
    t.close()
    time.sleep(0.1)
    assert sshd.accepted_logins() == before + 2  # the jump host, then the target through it


def test_proxy_command(sshd: SSHServer) -> None:
    config = sshd.folder / "proxycommand_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"""
Host via-command
    HostName 127.0.0.1
    Port {sshd.port}
    User {sshd.user}
    IdentityFile {sshd.client_key}
    UserKnownHostsFile {sshd.known_hosts}
    ProxyCommand ssh -F {sshd.ssh_config} -o BatchMode=yes -W %h:%p {sshd.alias}
"""
    )
    t = SSHTransport("via-command", ssh_config=str(config))
    assert t.run(["echo", "via command"], timeout=10).stdout == "via command\n"
    t.close()


def test_read_many_fetches_several_files_in_one_session(node: SSHTransport, sshd: SSHServer, tmp_path: Path) -> None:
    (tmp_path / "a").write_text("no newline at the end")
    (tmp_path / "b").write_text("two\nlines\n")
    (tmp_path / "empty").write_text("")
    paths = [str(tmp_path / n) for n in ("a", "b", "empty", "absent")] + [str(tmp_path), "/proc/meminfo"]
    got = node.read_many(paths, timeout=10)
    assert got[str(tmp_path / "a")] == "no newline at the end"
    assert got[str(tmp_path / "b")] == "two\nlines\n"
    assert got[str(tmp_path / "empty")] == ""
    assert got[str(tmp_path / "absent")] is None
    assert str(tmp_path) not in got  # a directory: left for read() to report
    meminfo = got["/proc/meminfo"]
    assert meminfo is not None and meminfo.startswith("MemTotal:")


def test_host_prefetch_serves_reads_and_keeps_their_evidence(node: SSHTransport) -> None:
    from clustercheck import Host

    host = Host(node)
    host.prefetch(["/proc/sys/kernel/osrelease", "/proc/no-such-file", "/tmp/not-prefetched"])
    before = node.run(["true"], timeout=10)  # the connection stays usable
    assert before.ok
    assert host.read("/proc/sys/kernel/osrelease").strip() == os.uname().release
    with pytest.raises(FileNotFoundError):
        host.read("/proc/no-such-file")
    assert host.observations == ["read /proc/sys/kernel/osrelease (1 lines)", "read /proc/no-such-file: absent"]


# -- the node-side session script (transports/ssh/session.sh) -------------------------------
def test_session_script_is_plain_posix_sh_as_shipped_and_as_sent() -> None:
    """session.sh parses in every POSIX shell here (`-n`), as the file and as sent (comments
    stripped, tokens and a first request filled in); shellcheck has no complaint where it is
    installed. A request holding a placeholder's text is not substituted into (one pass)."""
    import importlib.resources
    import shutil

    from clustercheck.transports.ssh import session

    shipped = importlib.resources.files("clustercheck.transports.ssh").joinpath("session.sh").read_text()
    sent = session.script("0123abcd", "feedbeef", "cc_run 1 12 1 echo @END@ @NONCE@")
    assert "@NONCE@" not in sent.replace("echo @END@ @NONCE@", "") and "@FIRST@" not in sent
    assert "cc_run 1 12 1 echo @END@ @NONCE@\n" in sent and "cc-0123abcd" in sent and "feedbeef-%s" in sent
    assert not any(line.lstrip().startswith("#") for line in sent.splitlines())
    shells = [s for s in ("sh", "dash", "bash", "busybox") if shutil.which(s)]
    assert shells, "no POSIX shell to lint the session script with"
    for shell in shells:
        argv = {"busybox": [shell, "ash", "-n"], "bash": [shell, "--posix", "-n"]}.get(shell, [shell, "-n"])
        for text in (shipped, sent):
            proc = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=10)
            assert proc.returncode == 0, f"{shell}: {proc.stderr}"
    if shutil.which("shellcheck"):
        # what it warns of on purpose is said in the script, with `# shellcheck disable=` lines
        proc = subprocess.run(["shellcheck", "-s", "sh", "-"], input=shipped, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout
