"""The README's examples run as printed (issue 15): every `$ clustercheck ...` line of its console
blocks and every inline `clustercheck ...` that names the repository's files, when it works
offline here, through tests.helpers.cli. The blocks that start with `$ cd examples/...` and the
`report` example are test_standalone.py's (it checks their output line by line); this file uses
its runner."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from tests.helpers import REPO, cli
from tests.sshd import SSHServer
from tests.test_standalone import README, flat

STANDALONE = (REPO / "tests" / "test_standalone.py").read_text(encoding="utf-8")


def _code_blocks(kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    return [
        (m.group(1), m.group(2))
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)
        if m.group(1) in kinds
    ]


def console_commands() -> list[str]:
    """The `$ clustercheck ...` lines of the console blocks (a `\\` continues a line)."""
    commands = []
    for _, body in _code_blocks(("console", "sh", "bash")):
        if body.startswith("$ cd examples/"):
            continue  # test_standalone.readme_block runs these, output checked line by line
        text = body.replace("\\\n", " ")
        for line in text.splitlines():
            if line.startswith("$ "):
                command = re.split(r"\s+#\s", line[2:])[0].strip()
                if command.startswith("clustercheck "):
                    commands.append(command)
    return commands


def inline_commands() -> list[str]:
    """Inline `clustercheck ...` spans in the prose that name the repository's files."""
    prose = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)
    spans = re.findall(r"`(clustercheck [^`]+)`", " ".join(prose.split("\n")))
    return [s for s in spans if re.search(r"(?:^|\s)(?:fixtures|examples)/", s)]


def why_not_here(command: str) -> str | None:
    """Why a README command cannot run offline here, as printed; None when it can."""
    words = shlex.split(command)
    if "--ssh" in words:
        return "reaches real hosts over SSH (test_record_example_runs_as_printed runs the record one)"
    if "..." in command or any(re.fullmatch(r"[A-Z][A-Z_/]*|\[.*|.*\]|\\?\||\(.*", w) for w in words):
        return "a synopsis with placeholders"
    if "--install-completion" in words:
        return "changes this machine's shell set-up"
    if words[1] in ("prolog", "health", "record") and not {"--replay", "--dry-run"} & set(words):
        return "acts on this node or records it"
    target = words[words.index(">") + 1] if ">" in words else None
    for word in words[1:]:
        if word == target or word.startswith("-") or word in (">",):
            continue
        if word.startswith("/"):
            return f"names a site's file {word}"
        if ("/" in word or re.search(r"\.(ya?ml|jsonl?|conf|out|txt|html)$", word)) and not (REPO / word).exists():
            return f"needs {word}, which an earlier example makes"
    return None


# What each runnable example exits with here (None: this machine's own answer, any of 0-3).
EXPECTED = {
    "clustercheck run --profile gpu-node": None,
    "clustercheck run --replay fixtures/demo-cluster -v": 2,
    "clustercheck run --replay fixtures/monitoring-healthy --replay fixtures/monitoring-exporter-down "
    "--replay fixtures/monitoring-gpu-missing --replay fixtures/monitoring-no-xid": 2,
    "clustercheck run --replay fixtures/rdma/apptainer-minimal-dev -v": 2,
    "clustercheck run --replay fixtures/storage-hung-mount -v": 2,
    "clustercheck prolog --replay fixtures/prolog-cluster/dimm-lost": 2,
}
# Run, with their output checked, by test_standalone.py.
COVERED_THERE = {"clustercheck run --replay fixtures/demo-cluster --format jsonl > results.jsonl"}


def runnable() -> list[str]:
    commands = list(dict.fromkeys(console_commands() + inline_commands()))
    return [c for c in commands if why_not_here(c) is None and c not in COVERED_THERE]


def test_the_readme_examples_that_run_here_are_the_ones_listed() -> None:
    assert runnable() == list(EXPECTED), "the README's runnable examples changed: update EXPECTED"
    for command in COVERED_THERE:
        assert command.split(" > ")[0].replace("clustercheck ", "") in STANDALONE.replace('", "', " ")


@pytest.mark.parametrize("command", list(EXPECTED))
def test_a_readme_example_runs_as_printed(command: str, tmp_path: Path) -> None:
    words = shlex.split(command)
    proc = cli(*words[1:])
    expected = EXPECTED[command]
    assert proc.returncode == expected if expected is not None else proc.returncode in (0, 1, 2, 3), (
        f"{command}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "has no recording of" not in proc.stdout, proc.stdout  # a fixture and its profile agree
    assert proc.stdout.strip(), command


def test_the_multi_host_table_is_what_the_readme_prints() -> None:
    command = next(c for c in EXPECTED if "monitoring-no-xid" in c)
    block = README.split(f"$ {command}\n```\n\n```text\n", 1)[1].split("```", 1)[0]
    proc = cli(*shlex.split(command)[1:])
    for line in block.splitlines():  # the lines the README does not shorten
        if line.strip() and "(...)" not in line and not line.startswith(" " * 20) and "─" not in line:
            assert flat(line) in flat(proc.stdout), f"{line!r} not in\n{proc.stdout}"


def _site_profile(folder: Path) -> Path:
    """The README's site.yaml, as printed, with the site-checks folder it names."""
    block = next(body for kind, body in _code_blocks(("yaml",)) if body.startswith("# site.yaml\n"))
    (folder / "site.yaml").write_text(block)
    (folder / "site-checks").mkdir(exist_ok=True)
    return folder / "site.yaml"


def test_the_site_profile_example_loads_and_drops_a_check(tmp_path: Path) -> None:
    """`some.inherited_check: false` failed as written: no check has that id."""
    _site_profile(tmp_path)
    shown = cli("profiles", "show", "site.yaml", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "gpu.xid" in shown.stdout and "gpu.throttle" not in shown.stdout  # dropped, the rest inherited
    ran = cli(
        "run", "--replay", REPO / "fixtures" / "demo-cluster" / "gpu001", "-p", "site.yaml", "-f", "json", cwd=tmp_path
    )
    assert ran.returncode in (0, 1, 2, 3), ran.stderr
    ids = [c["id"] for c in json.loads(ran.stdout)["hosts"]["gpu001"]["checks"]]
    assert "gpu.throttle" not in ids and "node.cpu" in ids


def test_record_example_runs_as_printed(sshd: SSHServer, tmp_path: Path) -> None:
    """The Fixtures section's two lines, gpu017 being the test's own sshd (~/.ssh/config's part is
    played by --ssh-config)."""
    block = next(body for _, body in _code_blocks(("console",)) if body.startswith("$ clustercheck record "))
    lines = [line[2:].split("  #")[0].strip() for line in block.splitlines() if line.startswith("$ ")]
    assert len(lines) == 2 and "--ssh gpu017" in lines[0] and lines[1].startswith("clustercheck run --replay")
    _site_profile(tmp_path)
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"\nHost gpu017\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        + f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    (tmp_path / "fixtures").mkdir()
    record = cli(*shlex.split(lines[0])[1:], "--ssh-config", config, cwd=tmp_path)
    assert record.returncode == 0, record.stderr
    manifest = (tmp_path / "fixtures" / "gpu017-bad-dimm" / "fixture.yaml").read_text()
    assert "note: DIMM B2 failed" in manifest and "profile: ../../site.yaml" in manifest
    replay = cli(*shlex.split(lines[1])[1:], "-f", "json", cwd=tmp_path)
    assert replay.returncode in (0, 1, 2, 3), replay.stderr
    assert "has no recording of" not in replay.stdout
    expect = yaml.safe_load(manifest)["expect"]
    got = {c["id"]: c["status"] for c in json.loads(replay.stdout)["hosts"]["gpu017"]["checks"]}
    assert got == expect  # "same results, no hardware"


def test_fixtures_the_readme_says_replay_one_at_a_time_are_refused_together_naming_the_folders() -> None:
    assert "`--replay fixtures/rdma` as a\nwhole is refused" in README
    rdma = cli("run", "--replay", "fixtures/rdma")
    assert rdma.returncode == 64 and "Traceback" not in rdma.stderr
    assert "several fixtures claim the same host: gpu201 in fixtures/rdma/bwrap-healthy, " in rdma.stderr
    assert "replay these one at a time" in rdma.stderr
    storage = sorted(str(p.relative_to(REPO)) for p in (REPO / "fixtures").glob("storage-*"))
    assert len(storage) == 5 and "one at a time" in README.split("`fixtures/storage-*` replay", 1)[1][:200]
    together = cli("run", *(a for s in storage for a in ("--replay", s)), "-p", "base")
    assert together.returncode == 64
    assert "stor001 in fixtures/storage-checkpoint-budget, fixtures/storage-healthy" in together.stderr
    assert "gpu001 in fixtures/storage-hung-mount, fixtures/storage-nfs-64k" in together.stderr
    for folder in storage:  # ... and each alone, with the profile it names
        alone = cli("run", "--replay", folder, "-f", "json")
        assert alone.returncode in (0, 1, 2, 3), (folder, alone.stderr)


def test_the_readme_says_which_prolog_profile_suits_gpu_and_cpu_nodes_and_health_exit_codes() -> None:
    text = " ".join(README.split())
    assert "on **GPU nodes `prolog`** (the default, no `--profile` needed); on **CPU nodes `prolog-cpu`**" in text
    listed = {line.split()[0]: line for line in cli("profiles").stdout.splitlines()}
    assert "of a GPU node" in listed["prolog"] and "of a CPU node" in listed["prolog-cpu"]
    health = text.split("### `health`", 1)[1].split("## Safety", 1)[0]
    exits = health.split("Exit (Slurm ignores it", 1)[1].split("an internal error", 1)[0]
    for word in ("0 ok", "1 warn", "2 a check failed", "3 a check could not tell", "64 bad usage", "70"):
        assert word in exits, word
