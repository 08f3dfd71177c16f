"""A fleet over SSH: 64+ loopback "nodes" served by real sshd, with an unreachable one, one
with a wrong host key and one whose command hangs — each is that host's error, the run goes on."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.helpers import cli
from tests.sshd import Fleet, SSHServer


def test_64_hosts_one_unreachable_one_wrong_key_one_hung(fleet_sshd: Fleet, sshd: SSHServer, tmp_path: Path) -> None:
    # 127.0.0.65 gets a known_hosts entry with another key; 127.0.0.250 has no sshd at all
    wrong = (sshd.folder / "wrong_ed25519.pub").read_text().split()[:2]
    known = fleet_sshd.known_hosts.read_text().splitlines()
    known = [line for line in known if not line.startswith("[127.0.0.65]")] + [
        f"[127.0.0.65]:{sshd.port} {' '.join(wrong)}"
    ]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("\n".join(known) + "\n")
    config = tmp_path / "ssh_config"
    config.write_text(fleet_sshd.ssh_config.read_text().replace(str(fleet_sshd.known_hosts), str(known_hosts)))
    site = tmp_path / "site"
    site.mkdir()
    (site / "fleet.py").write_text(
        "from clustercheck import Host, Result, check, ok\n"
        "@check(timeout=60)\n"
        "def where(host: Host) -> Result:\n"
        "    '''Reports the address the node was reached on; hangs on 127.0.0.9.'''\n"
        "    out = host.output('sh', '-c', 'set -- $SSH_CONNECTION; [ \"$3\" = 127.0.0.9 ] && sleep 60; echo $3')\n"
        "    return ok(out.strip())\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(f"check_dirs: [{site}]\nchecks:\n  fleet.where:\n  node.kernel:\n")
    start = time.monotonic()
    proc = cli(
        "run",
        "--ssh",
        "127.0.0.[2-65],127.0.0.250",
        "--ssh-config",
        str(config),
        "-p",
        str(profile),
        "--format",
        "json",
        "--host-timeout",
        "4",
        "--jobs",
        "32",
        timeout=120,
    )
    elapsed = time.monotonic() - start
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 3
    hosts = json.loads(proc.stdout)["hosts"]
    assert len(hosts) == 65
    healthy = [f"127.0.0.{i}" for i in range(2, 65) if i != 9]
    for address in healthy:
        where, kernel = hosts[address]["checks"]
        assert (where["status"], where["summary"]) == ("ok", address)
        assert kernel["status"] == "ok"
    hung = hosts["127.0.0.9"]["checks"]
    assert hung[0]["status"] == "error" and "did not finish" in hung[0]["summary"]
    assert hung[1]["summary"] == "not run: the host's deadline (--host-timeout 4 s) expired"
    changed = hosts["127.0.0.65"]["checks"][0]
    assert changed["status"] == "error" and "ssh-keygen -R" in changed["summary"]
    refused = hosts["127.0.0.250"]["checks"][0]
    assert refused["status"] == "error" and "127.0.0.250" in refused["summary"]
    assert elapsed < 60, f"64 hosts took {elapsed:.1f} s"


def test_progress_goes_to_stderr_one_line_per_host(fleet_sshd: Fleet) -> None:
    proc = cli("run", "--ssh", "127.0.0.[2-9]", "--ssh-config", str(fleet_sshd.ssh_config), "-p", "base", "-f", "jsonl")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("clustercheck: [")]
    assert len(lines) == 8 and lines[-1].startswith("clustercheck: [8/8] 127.0.0.")
    assert all(json.loads(line)["host"].startswith("127.0.0.") for line in proc.stdout.splitlines())


def test_a_fleet_in_pid_namespaces_shows_each_node_its_own_processes(sshd: SSHServer, tmp_path: Path) -> None:
    """The fleet benchmark's set-up (start_fleet(pid_namespaces=True)): a session on one daemon's
    hosts sees that daemon's processes in /proc, not this machine's, and a check's leftover daemon
    is still killed there (the sweep reads the namespace's /proc/loadavg and processes)."""
    import os
    import shutil
    import signal
    import subprocess

    import pytest
    from tests.sshd import start_fleet

    from clustercheck.transports.ssh import SSHTransport

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("PID namespaces for the fleet need root and unshare(1)")
    fleet, procs = start_fleet(sshd, ["127.0.0.201", "127.0.0.202"], tmp_path / "ns", pid_namespaces=True)
    try:
        node = SSHTransport("127.0.0.201", ssh_config=str(fleet.ssh_config))
        try:
            assert node.run(["cat", "/proc/1/comm"], timeout=10).stdout == "sshd\n"  # the daemon is its init
            listed = node.run(["sh", "-c", "ls /proc | grep -c '^[0-9]'"], timeout=10)
            here = sum(name.isdigit() for name in os.listdir("/proc"))
            assert int(listed.stdout) < min(20, here), (listed.stdout, here)
            marker = f"cc-ns-test-{os.getpid()}"
            left = node.run(["sh", "-c", f"setsid sh -c 'exec -a {marker} sleep 60' & echo started"], timeout=10)
            assert left.stdout == "started\n"
            seen = node.run(["sh", "-c", f"pgrep -f '[{marker[0]}]{marker[1:]}' || echo none"], timeout=10)
            assert seen.stdout == "none\n"  # the [c] keeps pgrep's own command line from matching
        finally:
            node.close()
    finally:
        for p in procs:  # unshare ignores SIGTERM: its daemon's end ends it
            children = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
            for child in children:
                os.kill(int(child), signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
