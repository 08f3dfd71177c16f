"""`clustercheck run/record --ssh` end to end against the real sshd of tests/sshd.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import DEMO, REPO, cli
from tests.sshd import SSHServer, free_port

SITE = str(DEMO / "site-profile.yaml")


def test_run_over_ssh_matches_local(sshd: SSHServer, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("extends: base\nchecks:\n  storage.mounts: {paths: [/], rw: false}\n")
    remote = cli("run", "--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config), "-p", str(profile), "-f", "json")
    local = cli("run", "--local", "-p", str(profile), "-f", "json")
    assert "Traceback" not in remote.stderr
    got = json.loads(remote.stdout)["hosts"][sshd.alias]["checks"]
    want = next(iter(json.loads(local.stdout)["hosts"].values()))["checks"]
    assert [(c["id"], c["status"]) for c in got] == [(c["id"], c["status"]) for c in want]
    assert remote.returncode == local.returncode


def test_a_fleet_run_skips_typer_and_agrees_with_it(sshd: SSHServer, tmp_path: Path) -> None:
    """`run --ssh` with plain options is dispatched without Typer (its start-up is paid before the
    first connection), and says what the Typer command says (a global option before `run` takes
    the Typer path)."""
    code = (
        "import atexit, sys\n"
        "from clustercheck.main import main\n"
        "heavy = ('typer', 'pydantic')\n"
        "atexit.register(lambda: print('LOADED', [m for m in heavy if m in sys.modules], file=sys.stderr))\n"
        "main(sys.argv[1:])\n"
    )
    args = ["run", "--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config), "-p", "base", "-f", "json", "-j", "2"]
    fast = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    slow = cli("--debug", *args)
    assert "LOADED []" in fast.stderr, fast.stderr
    assert fast.returncode == slow.returncode
    said = [[(c["id"], c["status"]) for c in json.loads(p.stdout)["hosts"][sshd.alias]["checks"]] for p in (fast, slow)]
    assert said[0] == said[1] and said[0]
    # a value Typer refuses goes to Typer, which says so its way
    bad = cli("run", "--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config), "-p", "base", "--port", "x")
    assert bad.returncode == 64 and "--port" in bad.stderr and "Traceback" not in bad.stderr


def test_record_over_ssh_replays_anywhere(sshd: SSHServer, tmp_path: Path) -> None:
    out = tmp_path / "fx"
    rec = cli("record", "--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config), "-p", "base", "--out", str(out))
    assert rec.returncode == 0, rec.stderr
    replay = cli("run", "--replay", str(out), "-f", "json")
    (host,) = json.loads(replay.stdout)["hosts"]
    assert host == sshd.alias
    assert all(c["status"] != "error" for c in json.loads(replay.stdout)["hosts"][host]["checks"])


def test_unreachable_host_is_an_error_and_others_go_on(sshd: SSHServer, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    dead = free_port()
    config.write_text(
        sshd.ssh_config.read_text()
        + f"\nHost deadnode\n  HostName 127.0.0.1\n  Port {dead}\n  User {sshd.user}\n"
        + f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    start = time.monotonic()
    proc = cli("run", "--ssh", f"{sshd.alias},deadnode", "--ssh-config", str(config), "-p", "base", "-f", "json")
    assert time.monotonic() - start < 20
    hosts = json.loads(proc.stdout)["hosts"]
    dead_checks = hosts["deadnode"]["checks"]
    assert {c["status"] for c in dead_checks} == {"error"}
    assert "host unreachable" in dead_checks[0]["summary"] and f"127.0.0.1:{dead}" in dead_checks[0]["summary"]
    assert all(c["summary"].startswith("not run: host unreachable") for c in dead_checks[1:])
    assert any(c["status"] != "error" for c in hosts[sshd.alias]["checks"])
    assert "Traceback" not in proc.stderr


def test_unknown_host_key_is_refused_unless_accepted(sshd: SSHServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(sshd.ssh_config.read_text().replace(str(sshd.known_hosts), str(known)))
    refused = cli("run", "--ssh", sshd.alias, "--ssh-config", str(config), "-p", "base", "-f", "json")
    (first, *_) = json.loads(refused.stdout)["hosts"][sshd.alias]["checks"]
    assert first["status"] == "error" and "--accept-new-host-keys" in first["summary"]
    accepted = cli(
        "run", "--ssh", sshd.alias, "--ssh-config", str(config), "-p", "base", "-f", "json", "--accept-new-host-keys"
    )
    assert all(c["status"] != "error" for c in json.loads(accepted.stdout)["hosts"][sshd.alias]["checks"])
    assert known.read_text().strip()
