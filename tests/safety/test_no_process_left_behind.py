"""Promise: clustercheck leaves no process behind, locally or on a node over SSH.

Each test starts real commands through the public CLI (or the transport), then stops
clustercheck the way a site does (the run's --timeout, slurmd's SIGTERM/SIGKILL to the
prolog's process group, a signal to the process, the client dying), and looks for the
commands in the process table afterwards. Every command is named by a unique marker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import REPO, cli
from tests.sshd import SSHServer

from clustercheck.errors import HostError
from clustercheck.transports.local import LocalTransport, kill_children
from clustercheck.transports.ssh import SSHTransport


def alive(marker: str) -> list[str]:
    """Processes (on this machine, which is also the sshd's node) whose command line holds marker."""
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def gone_within(marker: str, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while alive(marker):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def wait_for(marker: str, seconds: float = 15) -> None:
    end = time.monotonic() + seconds
    while not alive(marker):
        assert time.monotonic() < end, f"{marker} never started"
        time.sleep(0.05)


@pytest.fixture
def marker() -> Iterator[str]:
    m = f"cc-safety-{uuid.uuid4().hex[:12]}"
    yield m
    for line in alive(m):  # never leave one behind for the next test, whatever happened
        pid = int(line.split()[0])
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def site_checks(folder: Path, body: str, timeout: int = 60) -> tuple[Path, Path]:
    """A site check module whose one check runs `body` (Python, host in scope), and its profile."""
    (folder / "checks").mkdir()
    (folder / "checks" / "site.py").write_text(
        "from clustercheck import Host, Result, check, ok\n\n\n"
        f"@check(timeout={timeout})\ndef work(host: Host) -> Result:\n"
        '    """Runs commands."""\n'
        + "".join(f"    {line}\n" for line in body.splitlines())
        + '    return ok("done")\n'
    )
    (folder / "p.yaml").write_text("checks:\n  site.work:\n")
    return folder / "checks", folder / "p.yaml"


# -- local ----------------------------------------------------------------------------------------


def test_after_close_the_local_transport_starts_nothing(tmp_path: Path) -> None:
    t = LocalTransport("testnode")
    t.close()
    flag = tmp_path / "started"
    with pytest.raises(HostError, match=r"not started: .*closed"):
        t.run(["touch", str(flag)], timeout=5)
    with pytest.raises(HostError, match="closed"):
        t.read("/proc/version", timeout=5)
    assert not flag.exists()


def test_a_check_goes_on_after_the_run_timeout_but_its_next_command_never_starts(tmp_path: Path, marker: str) -> None:
    flag = tmp_path / "second-command-ran"
    checks, profile = site_checks(
        tmp_path,
        f'host.run("bash", "-c", "exec -a {marker}-1 sleep 30", timeout=40)\n'
        f'host.run("bash", "-c", "touch {flag}; exec -a {marker}-2 sleep 30", timeout=40)',
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", "run", "--local", "--checks", str(checks), "-p", str(profile),
         "--timeout", "1.5", "-f", "json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=30)
    (check,) = json.loads(out)["hosts"][next(iter(json.loads(out)["hosts"]))]["checks"]
    assert check["status"] == "error" and "--timeout of 1.5 s expired" in check["summary"], err
    time.sleep(1.0)  # the abandoned check thread had time to reach its second command, were it allowed
    assert not flag.exists(), "a command started after the transport was closed"
    assert alive(marker) == []


def mode_args(mode: str, tmp_path: Path) -> list[str]:
    """`run` in-process, `run --timeout` (checks in a forked worker), `prolog` (forked worker too)."""
    if mode == "prolog":
        return ["prolog", "--budget", "60", "--state-file", str(tmp_path / "s.json"), "--syslog-socket", ""]
    return ["run", "--local", *(["--timeout", "60"] if mode == "run-timeout" else [])]


SIGNALS = [
    *[
        (mode, signum)
        for mode in ("run", "run-timeout", "prolog")
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    ],
    # SIGKILL to the parent alone: a forked worker gets SIGTERM from the kernel (PR_SET_PDEATHSIG)
    ("run-timeout", signal.SIGKILL),
    ("prolog", signal.SIGKILL),
]


@pytest.mark.parametrize(("mode", "signum"), SIGNALS, ids=[f"{m}-{s.name}" for m, s in SIGNALS])
def test_a_signal_to_clustercheck_ends_every_command(
    tmp_path: Path, marker: str, mode: str, signum: signal.Signals
) -> None:
    # the command and a `setsid` daemon it started, which is in no process group of ours
    checks, profile = site_checks(
        tmp_path,
        f'host.run("bash", "-c", "setsid bash -c \'exec -a {marker}-daemon sleep 60\' & exec -a {marker} sleep 60", '
        "timeout=60)",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", *mode_args(mode, tmp_path), "--checks", str(checks),
         "--profile", str(profile)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        wait_for(f"^{marker}-daemon")
        wait_for(f"^{marker} ")
        proc.send_signal(signum)  # to clustercheck alone, not to its process group
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert gone_within(f"^{marker}", 2), alive(marker)
    assert gone_within(str(checks), 2), alive(str(checks))  # a forked worker, too


@pytest.mark.parametrize("mode", ["prolog", "run"])
def test_slurmd_killing_the_prolog_process_group_kills_its_commands(tmp_path: Path, marker: str, mode: str) -> None:
    """slurmd ends a prolog at PrologEpilogTimeout with SIGTERM, then SIGKILL, to its process group."""
    checks, profile = site_checks(tmp_path, f'host.run("bash", "-c", "exec -a {marker} sleep 60", timeout=60)')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    args = ["--checks", str(checks), "--profile", str(profile)]
    if mode == "prolog":
        args += ["--budget", "60", "--state-file", str(tmp_path / "s.json"), "--syslog-socket", ""]
    else:
        args += ["--local"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", mode, *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,  # slurmd runs the prolog as the leader of its own process group
    )  # fmt: skip
    try:
        try:
            wait_for(marker)
        except AssertionError:
            proc.kill()
            raise AssertionError(f"the command never started; clustercheck said: {proc.communicate()[0]}") from None
        os.killpg(proc.pid, signal.SIGKILL)  # no handler can run: only the process group reaches them
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.communicate()
    assert gone_within(marker, 2), alive(marker)


def test_a_daemon_a_finished_local_command_left_is_gone_when_the_run_ends(tmp_path: Path, marker: str) -> None:
    # the command exits at once, 0; what it started holds no pipe of ours and left our session
    checks, profile = site_checks(
        tmp_path,
        f'host.output("bash", "-c", "(setsid bash -c \'exec -a {marker} sleep 60\' </dev/null >/dev/null 2>&1 &)")\n'
        f'assert host.output("pgrep", "-f", "^{marker}")  # it did start',
    )
    proc = cli("run", "--local", "--checks", checks, "-p", profile, "-f", "json")
    (check,) = next(iter(json.loads(proc.stdout)["hosts"].values()))["checks"]
    assert check["status"] == "ok", check
    assert gone_within(f"^{marker}", 1), alive(marker)


def test_a_local_timeout_kills_what_the_command_started_in_another_session(marker: str) -> None:
    t = LocalTransport("testnode")
    # a daemon: it left our session, holds no pipe, and its parent is gone (it is init's child now);
    # only the mark in its environment still names it
    script = f"(setsid bash -c 'exec -a {marker} sleep 60' </dev/null >/dev/null 2>&1 &); sleep 30"
    result = t.run(["bash", "-c", script], timeout=1)
    assert result.timed_out
    assert gone_within(marker, 1), alive(marker)


def test_local_daemons_caught_in_the_middle_of_execve_are_still_found(marker: str) -> None:
    burst = "; ".join([f"(setsid bash -c 'exec -a {marker} sleep 60' </dev/null >/dev/null 2>&1 &)"] * 12)
    for _ in range(5):
        t = LocalTransport("testnode")
        assert t.run(["bash", "-c", burst], timeout=10).ok
        t.close()
        assert gone_within(marker, 1), alive(marker)


# -- over SSH (the real sshd of tests/sshd.py; its node is this machine) ---------------------------


@pytest.fixture
def node(sshd: SSHServer) -> Iterator[SSHTransport]:
    t = SSHTransport(sshd.alias, ssh_config=str(sshd.ssh_config))
    yield t
    t.close()


def daemon(marker: str) -> str:
    """A bash line that starts a daemon: own session, no pipe held, its parent gone."""
    return f"(setsid bash -c 'exec -a {marker} sleep 60' </dev/null >/dev/null 2>&1 &)"


def test_after_close_the_ssh_transport_starts_nothing(node: SSHTransport, tmp_path: Path) -> None:
    assert node.run(["true"], timeout=10).ok
    node.close()
    flag = tmp_path / "started"
    with pytest.raises(HostError, match=r"not started: .*closed"):
        node.run(["touch", str(flag)], timeout=5)
    assert not flag.exists()


def test_a_remote_timeout_kills_the_command_and_its_setsid_daemons(node: SSHTransport, marker: str) -> None:
    result = node.run(["bash", "-c", f"{daemon(marker + '-d')}; exec -a {marker} sleep 30"], timeout=1)
    assert result.timed_out
    assert gone_within(marker, 1.5), alive(marker)


def test_a_remote_command_that_ends_leaves_no_daemon_behind(node: SSHTransport, marker: str) -> None:
    result = node.run(["bash", "-c", f"{daemon(marker)}; echo started"], timeout=10)
    assert (result.exit_code, result.stdout) == (0, "started\n")
    assert gone_within(marker, 1.5), alive(marker)


def test_daemons_caught_in_the_middle_of_execve_are_still_found(node: SSHTransport, marker: str) -> None:
    # each daemon execs three times (setsid, bash, sleep) while the command has already ended:
    # a sweep that reads its environment mid-execve sees it empty (CI lost one to that)
    burst = "; ".join([daemon(marker)] * 12)
    for _ in range(5):
        assert node.run(["bash", "-c", burst], timeout=10).ok
        assert gone_within(marker, 1.5), alive(marker)


def test_the_run_timeout_over_ssh_kills_the_command_at_once(sshd: SSHServer, tmp_path: Path, marker: str) -> None:
    # the command's own limit is 30 s: only the run's --timeout can stop it before then
    checks, profile = site_checks(tmp_path, f'host.run("bash", "-c", "exec -a {marker} sleep 30", timeout=30)')
    start = time.monotonic()
    proc = cli(
        "run", "--ssh", sshd.alias, "--ssh-config", sshd.ssh_config, "--checks", checks, "-p", profile,
        "--timeout", "2", "-f", "json",
    )  # fmt: skip
    assert time.monotonic() - start < 10, proc.stderr
    assert "--timeout of 2 s expired" in proc.stdout, proc.stdout + proc.stderr
    assert gone_within(marker, 1.5), alive(marker)


def test_killing_the_client_kills_its_remote_commands(sshd: SSHServer, tmp_path: Path, marker: str) -> None:
    checks, profile = site_checks(
        tmp_path, f'host.run("bash", "-c", "{daemon(marker + "-d")}; exec -a {marker} sleep 60", timeout=60)'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustercheck", "run", "--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config),
         "--checks", str(checks), "-p", str(profile)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(f"{marker}-d")
        wait_for(marker)
        proc.kill()  # SIGKILL: no handler runs; the TCP connection just ends
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert gone_within(marker, 2), alive(marker)


def test_a_parent_can_kill_what_a_killed_worker_process_started(marker: str) -> None:
    """The prolog runs its checks in a child it kills at the budget: kill_children(owner=child)
    then ends the child's commands, a `setsid` daemon whose parent is gone included."""
    worker = subprocess.Popen(
        [sys.executable, "-c",
         "from clustercheck.transports.local import LocalTransport\n"
         f"LocalTransport('w').run(['bash', '-c', {daemon(marker + '-d') + '; exec -a ' + marker + ' sleep 60'!r}],"
         " timeout=60)\n"],
        cwd=REPO,
    )  # fmt: skip
    commands = f"^{marker}"  # the worker's own command line holds the marker too
    try:
        wait_for(f"{commands}-d")
        wait_for(f"{commands} ")
        worker.kill()  # SIGKILL: the worker's own handlers cannot run
        worker.wait(timeout=10)
        assert len(alive(commands)) == 2, "the worker's commands died with it: nothing left to test"
        assert kill_children(owner=worker.pid) >= 2
    finally:
        worker.kill()
    assert gone_within(commands, 1), alive(commands)


def test_a_signal_to_a_parent_whose_worker_runs_the_checks_ends_them(tmp_path: Path, marker: str) -> None:
    """The prolog forks a worker for its checks: SIGTERM to the prolog alone ends the worker and
    its commands (kill_worker_on_signal)."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, time\n"
        "from clustercheck.transports.local import LocalTransport, kill_worker_on_signal\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        f"    LocalTransport('w').run(['bash', '-c', {'exec -a ' + marker + ' sleep 60'!r}], timeout=60)\n"
        "    os._exit(0)\n"
        "kill_worker_on_signal(pid)\n"
        "os.waitpid(pid, 0)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], cwd=REPO)
    try:
        wait_for(f"^{marker}")
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=10) == -signal.SIGTERM  # it still dies of the signal
    finally:
        parent.kill()
    assert gone_within(f"^{marker}", 1), alive(f"^{marker}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_forked_worker_and_its_commands_die_with_their_parent(
    tmp_path: Path, marker: str, signum: signal.Signals
) -> None:
    """Backstop when nothing forwards the signal: the parent is killed alone, even by SIGKILL;
    the worker gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and ends its commands."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os\n"
        "from clustercheck.transports.local import LocalTransport\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        f"    LocalTransport('w').run(['bash', '-c', {'exec -a ' + marker + ' sleep 60'!r}], timeout=60)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], cwd=REPO)
    try:
        wait_for(f"^{marker}")
        parent.send_signal(signum)
        parent.wait(timeout=10)
    finally:
        parent.kill()
    assert gone_within(f"^{marker}", 1), alive(f"^{marker}")
    assert gone_within(str(script), 1), alive(str(script))  # the worker too
