"""The repository stands alone: no tracked file reaches outside it, and the README's examples that
read files run as printed from a clone, on the real files in examples/ (examples/README.md)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.helpers import REPO, cli

EXAMPLES = REPO / "examples"
README = (REPO / "README.md").read_text(encoding="utf-8")

# Spelled in two parts so that this file does not name them itself.
OUTSIDE = ("../" + "shared", "/" + "work/")
# ...and the same sibling folder built in code from REPO.parent or parents[N]
SIBLING = re.compile(r"""\.parents?(?:\[\d+\])?\s*/\s*["']""" + "shared" + r"""["']""")


def tracked() -> list[Path]:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (e.g. an unpacked sdist): no tracked files to check")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = [REPO / name for name in out.decode().split("\0") if name]
    assert len(files) > 100  # the listing worked
    return [f for f in files if f.is_file()]  # a file deleted in the work tree is not shipped


def recorded_or_third_party(path: Path) -> bool:
    """Real outputs written on other machines: fixture recordings and the corpus artifacts."""
    rel = path.relative_to(REPO).parts
    return rel[:2] == ("tests", "corpus") or (rel[0] == "fixtures" and ("commands" in rel or "files" in rel))


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    offenders = []
    for path in tracked():
        text = path.read_bytes().decode("utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)}: {word}" for word in OUTSIDE if word in text]
        offenders += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in SIBLING.finditer(text)]
        # the repository's own absolute path: a file that names it works only in this checkout
        if len(REPO.parts) > 2 and f"{REPO}/" in text:
            offenders.append(f"{path.relative_to(REPO)}: {REPO}")
    assert offenders == []


def test_no_tracked_file_names_this_machines_home_folder() -> None:
    home = str(Path.home()).rstrip("/")
    if home in ("", "/"):
        pytest.skip("this machine has no home folder to look for")
    # the home folder as a path, not as the tail of `redop/root`; recordings and corpus logs are
    # real outputs of other machines (a container's HOME, a training log's model cache) and may name theirs
    pattern = re.compile(r"(?<![\w./-])" + re.escape(home) + r"(?![\w.-])")
    offenders = [
        f"{path.relative_to(REPO)}: {m.group(0)}"
        for path in tracked()
        if not recorded_or_third_party(path)
        for m in [pattern.search(path.read_bytes().decode("utf-8", errors="replace"))]
        if m
    ]
    assert offenders == []


def test_the_home_folder_check_would_see_one() -> None:
    home = "/" + "root"
    pattern = re.compile(r"(?<![\w./-])" + re.escape(home) + r"(?![\w.-])")
    assert pattern.search(f"see {home}/.ssh/id_ed25519") and pattern.search(f"cd {home}")
    assert not pattern.search(f"with or without redop{home},") and not pattern.search(f"{home}fs")


# -- the README's examples, as printed --------------------------------------------------------------


def readme_block(cd: str) -> list[str]:
    """The `$ ` commands of the README console block that starts with `$ cd <cd>`."""
    m = re.search(r"```console\n\$ cd " + re.escape(cd) + r"\b.*?\n(.*?)```", README, re.S)
    assert m, f"README has no console block starting with `$ cd {cd}`"
    commands = [line[2:].split("  #")[0].strip() for line in m.group(1).splitlines() if line.startswith("$ ")]
    return [c for c in commands if "..." not in c]  # `srun ... | clustercheck nccl-log -` is tested below


def flat(text: str) -> str:
    """Output with its line wrapping undone (the table renderer wraps long findings)."""
    return " ".join(text.split())


def run_printed(command: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> subprocess.CompletedProcess[str]:
    """Run one README line: `[VAR=value] clustercheck ARGS [> FILE]` through tests.helpers.cli."""
    words = shlex.split(command)
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        monkeypatch.setenv(name, value)
    assert words[0] == "clustercheck", command
    redirect = words.index(">") if ">" in words else None
    args = words[1:redirect]
    proc = cli(*args, cwd=cwd)
    if redirect is not None:
        Path(words[redirect + 1]).write_text(proc.stdout, encoding="utf-8")
    return proc


TOPOLOGY = {
    "clustercheck topology --conf topology.conf": (
        2,
        ["switches list each other in a loop", "slurmctld refuses this: `Switch configuration is not a tree`"],
    ),
    "clustercheck topology --conf topology.conf --nodes 'sl390lin[101-124]'": (
        2,
        ["24 nodes under 1 leaf switch (S-0008f105002036b4), as few as possible"],
    ),
    "SLURM_JOB_NODELIST='sl390lin[1-5,7]' clustercheck topology --conf topology.conf --job-nodes-from-env -f json": (
        2,
        ['"nodes_requested"', '"sl390lin7"'],  # and the JSON's placement, checked below
    ),
    "clustercheck topology --conf topology.yaml --topology topo2": (
        0,
        ["(topology topo2): block, 4 blocks, 1 level, 16 nodes", "b4  node[13-16] (4)"],
    ),
    "clustercheck topology --conf ../slurm/topology.conf --slurm-conf ../slurm/slurm.conf": (
        0,
        ["tree, 5 switches, 2 levels, 13 nodes", "abacusc-2  abacusc-2-[0-3] (4)", "status: ok"],
    ),
    "clustercheck topology --ibnetdiscover fabric.txt --node-map guids.map --generate > /tmp/topology.conf": (
        0,
        [],  # its output goes to the file, checked below
    ),
    "clustercheck topology --ibnetdiscover fabric.txt --node-map guids.map --compare --conf topology.conf": (
        2,
        ["fabric fabric.txt: 11 switches, 3 levels, 89 hosts", "`Switch configuration is not a tree`"],
    ),
}


def test_readme_topology_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    printed = readme_block("examples/topology")
    assert printed == list(TOPOLOGY), "the README's topology examples changed: update TOPOLOGY"
    for command, (code, says) in TOPOLOGY.items():
        proc = run_printed(command.replace("/tmp/", f"{tmp_path}/"), EXAMPLES / "topology", monkeypatch)
        assert proc.returncode == code, f"{command}\n{proc.stdout}\n{proc.stderr}"
        for text in says:
            assert flat(text) in flat(proc.stdout), f"{command}: {text!r} not in\n{proc.stdout}"
        if "-f json" in command:
            out = json.loads(proc.stdout)
            assert (out["leaves_spanned"], out["min_leaves"]) == (["S-0002c90200417670"], 1)
            assert len(out["nodes_requested"]) == 6
    generated = (tmp_path / "topology.conf").read_text()
    assert generated.startswith("# topology.conf generated by clustercheck")
    again = cli("topology", "--conf", tmp_path / "topology.conf", "--nodes", "sl390lin[101-124]")
    assert again.returncode == 0 and "24 nodes under 1 leaf switch (S-0008f105002036b4)" in again.stdout


def test_readme_slurm_conf_example_reads_the_included_files(tmp_path: Path) -> None:
    # slurm.conf `include`s /etc/slurm/nodenames.conf: the example must read the copy beside it
    copy = tmp_path / "slurm"
    shutil.copytree(EXAMPLES / "slurm", copy)
    nodes = copy / "nodenames.conf"
    nodes.write_text(nodes.read_text().replace("NodeName=abacusc-2-3 ", "NodeName=abacusc-9-9 "))
    proc = cli("topology", "--conf", copy / "topology.conf", "--slurm-conf", copy / "slurm.conf")
    assert proc.returncode == 2 and "abacusc-9-9" in proc.stdout, proc.stdout


NCCL = {
    "clustercheck nccl-log slurm-4101.out": (
        0,
        [
            "NCCL 2.27.5+cuda12.9 · network: ib (roce) · GPUDirect RDMA: yes",
            "GPUDirect RDMA on all 64 network channels",
        ],
    ),
    "clustercheck nccl-log slurm-4102.out --expect ib --expect-gdr": (
        2,
        ["expected ib, but NCCL selected TCP sockets: NCCL_IB_DISABLE set by environment to 1"],
    ),
    "clustercheck nccl-tests all_reduce.out --min-busbw 400": (
        0,
        ["peak bus bandwidth 487.26 GB/s at 16 GiB, threshold 400 GB/s"],
    ),
}


def test_readme_nccl_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    assert readme_block("examples/nccl") == list(NCCL), "the README's nccl examples changed: update NCCL"
    for command, (code, says) in NCCL.items():
        proc = run_printed(command, EXAMPLES / "nccl", monkeypatch)
        assert proc.returncode == code, f"{command}\n{proc.stdout}\n{proc.stderr}"
        for text in says:
            assert flat(text) in flat(proc.stdout), f"{command}: {text!r} not in\n{proc.stdout}"


def test_readme_nccl_log_from_stdin() -> None:
    assert "$ srun ... 2>&1 | clustercheck nccl-log -" in README
    log = (EXAMPLES / "nccl" / "slurm-4101.out").read_text(encoding="utf-8", errors="replace")
    proc = cli("nccl-log", "-", stdin=log)
    assert proc.returncode == 0 and "GPUDirect RDMA on all 64 network channels" in proc.stdout, proc.stdout


def test_readme_report_example(tmp_path: Path) -> None:
    make = "clustercheck run --replay fixtures/demo-cluster --format jsonl > results.jsonl"
    assert f"`{make}`" in README.replace("\n", " ")
    for line in ("$ clustercheck report results.jsonl ", "$ clustercheck report results.jsonl -f html -o fleet.html "):
        assert line in README
    run = cli("run", "--replay", REPO / "fixtures" / "demo-cluster", "--format", "jsonl")
    assert run.returncode in (0, 1, 2), run.stderr
    (tmp_path / "results.jsonl").write_text(run.stdout)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    failing = sorted({r["host"] for r in results if r["status"] == "fail"})
    assert failing  # the demo hosts are broken on purpose

    report = cli("report", "results.jsonl", cwd=tmp_path)
    assert report.returncode == run.returncode, report.stderr  # "exit code as `run`"
    assert f"fail {len(failing)} hosts: " in report.stdout, report.stdout
    for check in {r["id"] for r in results if r["status"] == "fail"}:
        assert check in report.stdout

    html = cli("report", "results.jsonl", "-f", "html", "-o", "fleet.html", cwd=tmp_path)
    assert html.returncode == run.returncode, html.stderr
    page = (tmp_path / "fleet.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and all(host in page for host in failing)
