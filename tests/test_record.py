"""record -> replay round trips on this real machine, redaction, and entry-point check packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from tests.helpers import REPO, cli
from tests.sshd import SSHServer


def _results(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, str, str]]:
    (host,) = json.loads(proc.stdout)["hosts"].values()
    return [(c["id"], c["status"], c["summary"]) for c in host["checks"]]


def test_record_local_then_replay_gives_the_same_results(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "extends: base\nchecks:\n  storage.mounts: {paths: [/], rw: false}\n  node.modules: {absent: [nouveau]}\n"
    )
    out = tmp_path / "fx"
    rec = cli("record", "--profile", str(profile), "--local", "--out", str(out), "--note", "this test machine")
    assert rec.returncode == 0, rec.stderr
    assert f"recorded {os.uname().nodename} into {out}" in rec.stderr
    manifest = yaml.safe_load((out / "fixture.yaml").read_text())
    assert manifest["host"] == os.uname().nodename
    assert manifest["transport"] == "local" and manifest["note"] == "this test machine"
    assert (out / "files/proc/meminfo").is_file()
    assert any(p.name == "command.yaml" for p in (out / "commands").rglob("command.yaml"))
    live = cli("run", "--local", "--profile", str(profile), "--format", "json")
    replayed = cli("run", "--replay", str(out), "--format", "json")
    assert "Traceback" not in replayed.stderr
    # the same verdicts; summaries may differ only where the machine moved (free memory)
    assert [r[:2] for r in _results(replayed)] == [r[:2] for r in _results(live)]
    assert manifest["expect"] == {c: s for c, s, _ in _results(replayed)}
    assert replayed.returncode == live.returncode


def test_recording_redacts_secrets_and_hostnames(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "envcheck.py").write_text(
        "from clustercheck import Host, Result, check, ok\n"
        "@check\n"
        "def show(host: Host) -> Result:\n"
        "    '''Reads the environment and the host name.'''\n"
        "    host.run('sh', '-c', 'echo HF_TOKEN=hf_abc123 MY_PASSWORD=hunter2 PATH=/usr/bin; hostname')\n"
        "    return ok('read')\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(f"check_dirs: [{site}]\nchecks:\n  envcheck.show:\n")
    out = tmp_path / "fx"
    assert cli("record", "-p", str(profile), "--local", "--out", str(out), "--redact-hostnames").returncode == 0
    (stdout,) = (out / "commands").glob("*/stdout")
    text = stdout.read_text()
    assert "hf_abc123" not in text and "hunter2" not in text
    assert "HF_TOKEN=<redacted> MY_PASSWORD=<redacted> PATH=/usr/bin" in text
    assert os.uname().nodename not in text
    assert "redacted-host" in text
    assert yaml.safe_load((out / "fixture.yaml").read_text())["host"] == "redacted-host"


def test_checks_from_an_entry_point_package(tmp_path: Path) -> None:
    pkg = tmp_path / "acme_checks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "acme.py").write_text(
        "from clustercheck import Host, Result, check, ok\n"
        "@check\n"
        "def ping(host: Host) -> Result:\n"
        "    '''Always ok: proves the entry point loaded.'''\n"
        "    return ok('pong')\n"
    )
    dist = tmp_path / "acme_checks-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-checks\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[clustercheck.checks]\nacme = acme_checks.acme\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    listed = subprocess.run(
        [sys.executable, "-m", "clustercheck", "checks", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert "acme.ping" in {c["id"] for c in json.loads(listed.stdout)}
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  acme.ping:\n")
    ran = subprocess.run(
        [sys.executable, "-m", "clustercheck", "run", "--local", "-p", str(profile), "-f", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert ran.returncode == 0, ran.stderr


def test_redacted_hosts_get_one_alias_each_and_replay_as_a_cluster(sshd: SSHServer, tmp_path: Path) -> None:
    """--redact-hostnames with several hosts: every fixture claimed "redacted-host" (a replay of the
    folder refused them as duplicates) and each folder was named after the real host."""
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"\nHost othernode\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        + f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.kernel:\n  node.memory: {min_total: 1MiB}\n")
    out = tmp_path / "cluster"
    hosts = f"{sshd.alias},othernode"
    rec = cli("record", "--ssh", hosts, "--ssh-config", config, "-p", profile, "--out", out, "--redact-hostnames")
    assert rec.returncode == 0, rec.stderr
    assert sorted(p.name for p in out.iterdir()) == ["redacted-host-1", "redacted-host-2"]
    for path in out.rglob("*"):
        assert sshd.alias not in str(path.relative_to(out)) and "othernode" not in str(path.relative_to(out))
        if path.is_file():
            assert sshd.alias not in path.read_text() and "othernode" not in path.read_text()
    replay = cli("run", "--replay", out, "-f", "json")
    assert replay.returncode == 0, replay.stderr
    assert sorted(json.loads(replay.stdout)["hosts"]) == ["redacted-host-1", "redacted-host-2"]


def test_recording_an_unreachable_host_exits_as_run_would_and_writes_no_fixture(
    sshd: SSHServer, tmp_path: Path
) -> None:
    """It exited 0 and left a fixture folder of nothing but the connection error."""
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + "\nHost deadnode\n  HostName 127.0.0.1\n  Port 1\n"  # port 1 on loopback refuses
        + f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.kernel:\n  node.memory: {min_total: 1MiB}\n")
    alone = tmp_path / "alone"
    rec = cli("record", "--ssh", "deadnode", "--ssh-config", config, "-p", profile, "--out", alone)
    ran = cli("run", "--ssh", "deadnode", "--ssh-config", config, "-p", profile)
    assert rec.returncode == ran.returncode == 3, (rec.stderr, ran.stdout)
    assert "not recorded: deadnode could not be reached" in rec.stderr and "connection refused" in rec.stderr
    assert not alone.exists() and list(tmp_path.glob(".alone.*")) == []
    # with a host that answers: it is recorded, the other is not, and the exit says so
    cluster = tmp_path / "cluster"
    both = cli("record", "--ssh", f"{sshd.alias},deadnode", "--ssh-config", config, "-p", profile, "--out", cluster)
    assert both.returncode == 3, both.stderr
    assert sorted(p.name for p in cluster.iterdir()) == [sshd.alias]
    assert f"recorded {sshd.alias} into {cluster / sshd.alias}" in both.stderr
    replay = cli("run", "--replay", cluster, "-f", "json")
    assert replay.returncode == 0, replay.stderr
    assert sorted(json.loads(replay.stdout)["hosts"]) == [sshd.alias]


def _rerecord_hint(proc: subprocess.CompletedProcess[str]) -> str:
    for host in json.loads(proc.stdout)["hosts"].values():
        for check in host["checks"]:
            summary: str = check["summary"]
            if "has no recording of" in summary:
                return summary.split("re-record it with `", 1)[1].split("`", 1)[0]
    raise AssertionError(f"no re-record hint in {proc.stdout[:2000]}")


def test_the_rerecord_hint_is_a_command_that_works_from_the_current_folder(tmp_path: Path) -> None:
    """It said `--ssh gpu001` for a local recording, and the fixture's profile path relative to the
    fixture (`--profile ../site-profile.yaml`), which fails from anywhere but inside the fixture."""
    import shlex
    import shutil

    cluster = tmp_path / "cluster"
    cluster.mkdir()
    shutil.copytree(REPO / "fixtures" / "demo-cluster" / "gpu001", cluster / "gpu001")
    shutil.copy(REPO / "fixtures" / "demo-cluster" / "site-profile.yaml", cluster)
    (cluster / "gpu001" / "files" / "proc" / "meminfo").unlink()  # what a newer check reads, say
    replay = cli("run", "--replay", "cluster/gpu001", "-f", "json", cwd=tmp_path)
    hint = _rerecord_hint(replay)
    assert "it was recorded there with --local" in replay.stdout
    assert hint == "clustercheck record --profile cluster/site-profile.yaml --local --force --out cluster/gpu001"
    # pasted from here, it records (this node, locally), and the new fixture replays from here too
    words = shlex.split(hint)
    assert words[0] == "clustercheck"
    rerecord = cli(*words[1:], cwd=tmp_path)
    assert rerecord.returncode == 0, rerecord.stderr
    assert yaml.safe_load((cluster / "gpu001" / "fixture.yaml").read_text())["profile"] == "../site-profile.yaml"
    again = cli("run", "--replay", "cluster/gpu001", "-f", "json", cwd=tmp_path)
    assert again.returncode in (0, 1, 2, 3) and "has no recording of the file /proc/meminfo" not in again.stdout
    # the profile in use, not the fixture's, as the user named it, with its --checks folders
    (cluster / "gpu001" / "files" / "proc" / "meminfo").unlink()
    (tmp_path / "mine.yaml").write_text("checks:\n  node.memory: {min_total: 1MiB}\n")
    (tmp_path / "site").mkdir()
    args = ("--replay", cluster / "gpu001", "-p", "mine.yaml", "--checks", "site", "-f", "json")
    other = cli("run", *args, cwd=tmp_path)
    assert _rerecord_hint(other) == (
        f"clustercheck record --profile mine.yaml --checks site --local --force --out {cluster / 'gpu001'}"
    )


def test_the_rerecord_hint_of_an_ssh_recording_names_the_host(sshd: SSHServer, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.kernel:\n")
    args = ("--ssh", sshd.alias, "--ssh-config", sshd.ssh_config, "-p", "p.yaml", "--out", "fx")
    rec = cli("record", *args, cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    (tmp_path / "more.yaml").write_text("checks:\n  node.kernel:\n  node.memory: {min_total: 1MiB}\n")
    replay = cli("run", "--replay", "fx", "-p", "more.yaml", "-f", "json", cwd=tmp_path)
    hint = _rerecord_hint(replay)
    assert hint == f"clustercheck record --profile more.yaml --ssh {sshd.alias} --force --out fx"
    # ~/.ssh/config would name the test server's port and key; here the test's own config does
    rerecord = cli(*hint.split()[1:], "--ssh-config", sshd.ssh_config, cwd=tmp_path)
    assert rerecord.returncode == 0, rerecord.stderr
    assert cli("run", "--replay", "fx", "-p", "more.yaml", cwd=tmp_path).returncode == 0
