"""storage.* checks: option rules, mounts over edited copies of the recorded demo node, and the
measuring script run for real on this machine (tmp_path) and replayed from fixtures."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from clustercheck.checks.storage import expected_types, judge_option, parse_option_rule, parse_options
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import DEMO, cli
from tests.sshd import SSHServer

GPU001 = DEMO / "gpu001"
NFS_LINE = "/scratch nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,"


def test_option_rules() -> None:
    assert parse_option_rule("nfs:rsize>=1MiB") == ("nfs", "rsize", ">=", "1MiB")
    assert parse_option_rule("hard") == ("", "hard", "", "")
    opts = parse_options(["rw", "rsize=65536", "hard", "vers=4.2"])
    assert judge_option("nfs:rsize>=1MiB", "nfs4", opts) == "has rsize=65536 (64 KiB), expected rsize>=1MiB"
    assert judge_option("nfs:rsize>=1MiB", "lustre", opts) is None  # rule for another type
    assert judge_option("nfs:hard", "nfs4", opts) is None
    assert judge_option("nfs:vers=4.2", "nfs", opts) is None
    assert judge_option("noac", "nfs", opts, forbid=True) is None
    assert judge_option("hard", "nfs", opts, forbid=True) == "has option hard, which the profile forbids"
    assert judge_option("nfs:noac", "nfs4", parse_options(["soft"])) == "lacks option noac"
    assert judge_option("rsize>=1MiB", "nfs", parse_options(["rsize=big"])) is not None
    for bad in ("", "nfs:", "a b", "rsize>=lots", "x>"):
        with pytest.raises(ValueError):
            parse_option_rule(bad)


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_option_rule_never_crashes_otherwise(rule: str) -> None:
    with contextlib.suppress(ValueError):
        parse_option_rule(rule)


def test_expected_types_per_path() -> None:
    types = ("ext4", "/scratch=nfs|nfs4", "/lustre/=lustre")
    assert expected_types(types, "/scratch") == ["nfs", "nfs4"]
    assert expected_types(types, "/lustre") == ["lustre"]
    assert expected_types(types, "/") == ["ext4"]
    assert expected_types((), "/") == []


def variant(tmp_path: Path, edits: dict[str, str]) -> Path:
    fixture = tmp_path / "node"
    shutil.copytree(GPU001, fixture)
    for rel, text in edits.items():
        (fixture / rel).parent.mkdir(parents=True, exist_ok=True)
        (fixture / rel).write_text(text)
    return fixture


def run_one(fixture: Path, check_id: str, params: Mapping[str, object], host: str = "gpu001") -> dict[str, Any]:
    profile = fixture.parent / "profile.yaml"
    profile.write_text(yaml.safe_dump({"checks": {check_id: params}}))
    proc = cli("run", "--replay", str(fixture), "--profile", str(profile), "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    check: dict[str, Any]
    (check,) = json.loads(proc.stdout)["hosts"][host]["checks"]
    return check


NFS_RULES = {"require_options": ["nfs:rsize>=1MiB", "nfs:wsize>=1MiB", "nfs:hard"], "forbid_options": ["nfs:noac"]}


def test_mounts_options_on_recorded_nfs(tmp_path: Path) -> None:
    mounts = (GPU001 / "files/proc/mounts").read_text()
    fixture = variant(tmp_path, {})
    params = {"paths": ["/", "/scratch"], "types": ["ext4", "/scratch=nfs|nfs4"], **NFS_RULES}
    check = run_one(fixture, "storage.mounts", params)
    assert (check["status"], check["summary"]) == (
        "ok",
        "2 mounts present, read-write, 4 option rules met and answering",
    )
    small = mounts.replace(NFS_LINE, NFS_LINE.replace("rsize=1048576", "rsize=65536"))
    assert small != mounts
    (fixture / "files/proc/mounts").write_text(small)
    check = run_one(fixture, "storage.mounts", params)
    assert check["status"] == "fail"
    assert check["summary"] == "/scratch (nfs4) has rsize=65536 (64 KiB), expected rsize>=1MiB"
    assert run_one(fixture, "storage.mounts", {**params, "options_status": "warn"})["status"] == "warn"
    (fixture / "files/proc/mounts").write_text(mounts.replace(NFS_LINE, NFS_LINE + "noac,"))
    check = run_one(fixture, "storage.mounts", params)
    assert (check["status"], check["summary"]) == ("fail", "/scratch (nfs4) has option noac, which the profile forbids")


def test_mounts_wrong_type_and_missing_lustre_client(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"], "types": ["/scratch=lustre"]})
    assert (check["status"], check["summary"]) == ("fail", "/scratch is nfs4, expected lustre")
    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    manifest["absent"] = ["/sys/fs/lustre/version", "/proc/fs/lustre/version"]  # as a recording would say
    (fixture / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"], "lustre_client": True})
    assert check["status"] == "fail"
    assert "no Lustre client" in str(check["summary"])


def test_mounts_bad_rule_is_an_error_not_a_pass(tmp_path: Path) -> None:
    check = run_one(variant(tmp_path, {}), "storage.mounts", {"paths": ["/"], "require_options": ["rsize>=lots"]})
    assert check["status"] == "error"
    assert "rsize>=lots" in str(check["summary"])


def test_mounts_hung_stat_fails_without_hanging(tmp_path: Path) -> None:
    fixture = variant(tmp_path, {})
    record = fixture / "commands/stat_-f_-c_T_scratch/command.yaml"
    rec = yaml.safe_load(record.read_text())
    rec.update(exit_code=None, timed_out=True, duration_s=5.0)
    record.write_text(yaml.safe_dump(rec))
    check = run_one(fixture, "storage.mounts", {"paths": ["/scratch"]})
    assert (check["status"], check["summary"]) == ("fail", "/scratch did not answer stat within 5 s")


# -- the measuring script, for real on this machine -------------------------------------------

SMALL = {"size": "32MiB", "budget": 3, "meta_files": 200, "readers": 2}


def run_local(tmp_path: Path, check_id: str, params: Mapping[str, object]) -> dict[str, Any]:
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"checks": {check_id: params}}))
    proc = cli("run", "--local", "--profile", str(profile), "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    check: dict[str, Any]
    (check,) = host["checks"]
    return check


def leftovers(folder: Path) -> list[Path]:
    return sorted(folder.glob(".clustercheck-storage-*"))


def test_read_pattern_measures_and_removes_its_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "theirs").write_text("not ours")
    check = run_local(tmp_path, "storage.read_pattern", {"path": str(data), **SMALL})
    assert check["status"] == "ok", check
    measured = check["data"]["measured"]
    assert measured["seq"]["bytes"] == 32 << 20  # the whole file set, read once
    assert measured["rand_4k"]["ops"] > 0 and measured["rand_4k"]["p99_ms"] >= measured["rand_4k"]["p50_ms"]
    # the small-files phase is bounded by time: a busy machine opens fewer of the 200 files
    assert 0 < measured["meta"]["files"] <= 200
    evidence = "\n".join(check["evidence"])
    assert "page cache: O_DIRECT" in evidence and "created and removed" in evidence
    assert "<clustercheck storage script" in evidence
    assert leftovers(data) == [] and (data / "theirs").read_text() == "not ours"


def test_read_pattern_fails_below_threshold_naming_the_pattern(tmp_path: Path) -> None:
    params = {"path": str(tmp_path), **SMALL, "o_direct": False, "min_seq_mb_s": 1e9, "min_files_s": 1e9}
    check = run_local(tmp_path, "storage.read_pattern", params)
    assert check["status"] == "fail"
    summary = str(check["summary"])
    assert summary.startswith("sequential reads ") and "expected at least 1e+09 MB/s (1e+09 MB/s)" in summary
    assert "small files " in summary
    assert any("posix_fadvise(DONTNEED)" in e for e in check["evidence"])
    assert leftovers(tmp_path) == []


def test_read_pattern_per_gpu_needs_gpus(tmp_path: Path) -> None:
    check = run_local(tmp_path, "storage.read_pattern", {"path": str(tmp_path), **SMALL, "per_gpu_seq_mb_s": 1})
    assert check["status"] == "error"  # this machine has no GPU: it cannot tell, it does not pass
    assert "per_gpu_seq_mb_s needs the GPU count" in str(check["summary"])


def test_refuses_to_fill_the_filesystem_and_unusable_paths(tmp_path: Path) -> None:
    check = run_local(tmp_path, "storage.read_pattern", {"path": str(tmp_path), **SMALL, "free_margin": 1.0})
    assert check["status"] == "error" and "refused to measure: writing" in str(check["summary"])
    params = {"path": str(tmp_path / "nope"), "checkpoint_size": "1TB", "size": "8MiB", "budget": 2}
    check = run_local(tmp_path, "storage.checkpoint_write", params)
    assert check["status"] == "error" and "measurement failed: FileNotFoundError" in str(check["summary"])
    assert "No such file or directory" in str(check["summary"])
    assert list(tmp_path.iterdir()) == [tmp_path / "profile.yaml"]


def test_checkpoint_write_arithmetic(tmp_path: Path) -> None:
    base = {"path": str(tmp_path), "size": "16MiB", "writers": 2, "budget": 3, "checkpoint_size": "2TB"}
    check = run_local(tmp_path, "storage.checkpoint_write", {**base, "checkpoint_budget": "5m", "nodes_in_job": 16})
    assert "1.8 TiB (2 TB) in 300 s needs 6.67 GB/s across the job, 0.417 GB/s per node of 16" in str(check["summary"])
    check = run_local(tmp_path, "storage.checkpoint_write", {**base, "checkpoint_budget": "1s"})
    assert check["status"] == "fail"
    assert "needs 2e+03 GB/s" in str(check["summary"]) and "would take" in str(check["summary"])
    assert leftovers(tmp_path) == []


def test_script_cleans_up_on_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from clustercheck.checks.storage import SCRIPT

    args = {
        "mode": "read",
        "path": str(tmp_path),
        "size": 64 << 20,
        "readers": 2,
        "seq_block": 1 << 20,
        "budget_s": 20,
        "margin": 0.0,
        "meta_files": 100,
        "meta_size": 4096,
        "max_ops": 10**9,
        "o_direct": True,
    }
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(args)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert leftovers(tmp_path), "the script never created its folder"
    time.sleep(0.3)  # inside a measuring phase
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM
    record = json.loads(out)
    assert record["interrupted"] == f"signal {int(signal.SIGTERM)}" and record["removed"] is True
    assert leftovers(tmp_path) == []


def test_over_ssh_recorded_and_replayed(sshd: SSHServer, tmp_path: Path) -> None:
    """The same script through a real OpenSSH server on 127.0.0.1, recorded, then replayed."""
    data = tmp_path / "data"
    data.mkdir()
    profile = tmp_path / "profile.yaml"
    params = {"path": str(data), "size": "16MiB", "writers": 2, "budget": 3}
    params.update(checkpoint_size="1TB", checkpoint_budget="24h")
    profile.write_text(yaml.safe_dump({"checks": {"storage.checkpoint_write": params}}))
    ssh = ("--ssh", sshd.alias, "--ssh-config", str(sshd.ssh_config), "-p", str(profile))
    rec = cli("record", *ssh, "--out", str(tmp_path / "rec"))
    assert "Traceback" not in rec.stderr, rec.stderr
    replay = cli("run", "--replay", str(tmp_path / "rec"), "-p", str(profile), "-f", "json")
    (host,) = json.loads(replay.stdout)["hosts"].values()
    (check,) = host["checks"]
    assert check["status"] == "ok" and check["data"]["gb_s"] > 0, check
    assert "needs 0.0116 GB/s" in check["summary"]  # 1 TB in 86400 s on one node
    assert leftovers(data) == []


def test_truncated_measurement_is_an_error_naming_it(tmp_path: Path) -> None:
    fixture = tmp_path / "node"
    shutil.copytree(Path(__file__).parent.parent / "fixtures/storage-healthy", fixture)
    (cmd,) = [c for c in (fixture / "commands").iterdir() if '"mode": "read"' in (c / "stdout").read_text()]
    (cmd / "stdout").write_text((cmd / "stdout").read_text()[:200])  # cut as by a dropped connection
    (cmd / "stderr").write_text("Connection to stor001 closed by remote host.\n")
    proc = cli("run", "--replay", str(fixture), "--profile", str(fixture / "profile.yaml"), "--format", "json")
    assert "Traceback" not in proc.stderr
    checks = {c["id"]: c for c in json.loads(proc.stdout)["hosts"]["stor001"]["checks"]}
    assert checks["storage.read_pattern"]["status"] == "error"
    assert checks["storage.read_pattern"]["summary"].endswith(
        "the measurement printed no result: Connection to stor001 closed by remote host."
    )
    assert checks["storage.checkpoint_write"]["status"] == "ok"


def test_budget_must_fit_in_the_check_timeout(tmp_path: Path) -> None:
    params = {"path": str(tmp_path), **SMALL, "budget": 80}  # + 20 s to clean up > the 90 s check
    check = run_local(tmp_path, "storage.read_pattern", params)
    assert check["status"] == "error" and "lower `budget` or raise the check's `timeout`" in str(check["summary"])
    assert leftovers(tmp_path) == []


def test_per_gpu_thresholds_on_the_recorded_node(tmp_path: Path) -> None:
    fixture = tmp_path / "node"
    shutil.copytree(Path(__file__).parent.parent / "fixtures/storage-healthy", fixture)
    base = yaml.safe_load((fixture / "profile.yaml").read_text())["checks"]["storage.read_pattern"]
    (cmd,) = [c for c in (fixture / "commands").iterdir() if '"mode": "read"' in (c / "stdout").read_text()]
    recorded = json.loads((cmd / "stdout").read_text())  # the node has 8 GPUs (nvml record)
    iops, files_s = recorded["rand_4k"]["iops"], recorded["meta"]["files_s"]
    assert iops < 8 * 5000 and files_s < 30000 and files_s > 8 * 2000
    check = run_one(fixture, "storage.read_pattern", {**base, "per_gpu_iops_4k": 5000}, host="stor001")
    assert check["status"] == "fail"
    want = f"random 4 KiB reads {iops:g} IOPS, expected at least 40000 IOPS (5000 IOPS per GPU x 8 GPUs)"
    assert check["summary"] == want
    check = run_one(fixture, "storage.read_pattern", {**base, "per_gpu_files_s": 2000}, host="stor001")
    assert (check["status"], check["data"]["gpus"]) == ("ok", 8)
    check = run_one(fixture, "storage.read_pattern", {**base, "min_files_s": 30000, "per_gpu_files_s": 2000}, "stor001")
    assert check["summary"] == f"small files {files_s:g} files/s, expected at least 30000 files/s (30000 files/s)"


def test_existing_dataset_is_read_read_only(tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    (data / "shards").mkdir(parents=True)
    (data / "images").mkdir()
    for i in range(3):
        (data / "shards" / f"part-{i}.bin").write_bytes(bytes([i]) * (8 << 20))
    for i in range(50):
        (data / "images" / f"{i}.jpg").write_bytes(b"x" * 3000)
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in data.rglob("*")}
    params = {"path": str(data), **SMALL, "dataset": True, "min_files_s": 1}
    check = run_local(tmp_path, "storage.read_pattern", params)
    assert check["status"] == "ok", check
    assert str(check["summary"]).endswith("(existing dataset, read-only)")
    assert "3 files of 4 MiB or more, 50 of 1 MiB or less; nothing written" in "\n".join(check["evidence"])
    assert check["data"]["measured"]["seq"]["bytes"] == 3 * (8 << 20)  # all 3, 2 readers
    assert check["data"]["measured"]["meta"]["files"] == 50
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in data.rglob("*")} == before
    (data / "shards" / "part-0.bin").unlink()
    for shard in (data / "shards").iterdir():
        shard.unlink()
    check = run_local(tmp_path, "storage.read_pattern", params)
    assert check["status"] == "error" and "no file of 4 MiB or more under" in str(check["summary"])


# -- worker processes for the random reads (issue 16) -----------------------------------------


def test_random_reads_in_worker_processes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for readers, workers, said in (
        (2, 2, "random reads in 2 processes (one per reader)"),
        (3, 2, "random reads in 2 processes (up to 2 readers in one)"),
        (2, 1, "random reads in one process (its threads)"),
    ):
        # budget 2: the random phases read to their share of it (thousands of reads here), and what is
        # asserted is how the workers' reads come back, not how many there are
        params = {"path": str(data), **SMALL, "budget": 2, "readers": readers, "workers": workers}
        check = run_local(tmp_path, "storage.read_pattern", params)
        assert check["status"] == "ok", check
        assert said in "\n".join(check["evidence"]), check["evidence"]
        measured = check["data"]["measured"]
        # every worker's reads and bytes came back to the script: full blocks, counted once
        for key, block in (("rand_4k", 4096), ("rand_128k", 131072)):
            assert measured[key]["ops"] > 0 and measured[key]["bytes"] == measured[key]["ops"] * block, measured
            assert measured[key]["p99_ms"] >= measured[key]["p50_ms"] > 0
        assert leftovers(data) == []


def test_workers_below_zero_is_an_error(tmp_path: Path) -> None:
    check = run_local(tmp_path, "storage.read_pattern", {"path": str(tmp_path), **SMALL, "workers": -1})
    assert check["status"] == "error" and "workers must be 0" in str(check["summary"]), check
    assert leftovers(tmp_path) == []


#: Runs the script, SIGKILLs it once its two workers exist, and says how many outlived it by 5 s.
#: A subreaper, so that orphans come to it (a container's PID 1 may kill orphans, which would hide
#: a worker that outlives the script).
REAPER = r"""
import ctypes, json, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans come to us, not to PID 1
script, args = sys.argv[1], sys.argv[2]
def kids_of(pid):
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                f = open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(f[1]) == pid and f[0] != "Z":
                out.append(int(e))
    return out
p = subprocess.Popen([sys.executable, "-c", script, args], stdout=subprocess.DEVNULL)
kids, t = [], time.monotonic() + 20
while time.monotonic() < t and len(kids) < 2 and p.poll() is None:
    kids = kids_of(p.pid); time.sleep(0.02)
p.kill(); p.wait()
t = time.monotonic() + 5
while time.monotonic() < t and set(kids) & set(kids_of(os.getpid())):
    time.sleep(0.02)
alive = sorted(set(kids) & set(kids_of(os.getpid())))
for k in alive:
    os.kill(k, 9)
for k in kids:
    try: os.waitpid(k, 0)
    except ChildProcessError: pass
print(json.dumps({"workers": len(kids), "alive_after_5s": len(alive)}))
"""


def test_worker_processes_die_with_the_script(tmp_path: Path) -> None:
    """A SIGKILL of the script (the check's deadline, an admin) takes its worker processes with
    it: they hold the unlinked data files open, so a worker that lived on would keep the data
    (and the folder's lock) until its phase ended, up to most of the budget later."""
    import subprocess
    import sys

    from clustercheck.checks.storage import SCRIPT

    args = {
        "mode": "read",
        "path": str(tmp_path),
        "size": 64 << 20,
        "readers": 2,
        "workers": 2,
        "seq_block": 1 << 20,
        "budget_s": 30,
        "margin": 0.0,
        "meta_files": 10,
        "meta_size": 4096,
        "max_ops": 10**9,
        "o_direct": True,
    }
    proc = subprocess.run(
        [sys.executable, "-c", REAPER, SCRIPT, json.dumps(args)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"workers": 2, "alive_after_5s": 0}, proc.stdout
    (folder,) = leftovers(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]  # its data went with the processes


# -- random reads where the loop is the limit (tmpfs): sampled latencies (issue 16) -----------


def test_latency_percentiles_weigh_each_sample_by_the_reads_it_stands_for() -> None:
    """The script's p50/p99 come from samples that stand for different numbers of reads (every
    read of a slow chunk, about 1 in SAMPLE where reads are fast): a sample counts as many times
    as the reads it stands for; where every sample stands for the same number, the figure is the
    one of all the samples, as when every read was timed (pct over the sorted latencies)."""
    import random

    from clustercheck.facts.scripts import storage_probe as probe

    rng = random.Random(16)
    for _ in range(200):
        xs = [rng.random() / 1000 for _ in range(rng.randrange(1, 60))]
        cut, weight = rng.randrange(len(xs) + 1), rng.choice([1.0, 1.02, 8.17])
        expected = [probe.pct(sorted(xs), p) for p in (0.0, 0.5, 0.99, 0.999)]
        assert probe.percentiles([(weight, xs[:cut]), (weight, xs[cut:])], [0.0, 0.5, 0.99, 0.999]) == expected
    fast, slow = [0.001] * 90, [0.002] * 10  # seconds; figures in ms
    assert probe.percentiles([(1.0, fast), (1.0, slow)], [0.5, 0.99]) == [1.0, 2.0]
    # the 10 slow samples stand for 100 reads of 190: the median read is a slow one
    assert probe.percentiles([(1.0, fast), (10.0, slow)], [0.5, 0.89]) == [2.0, 2.0]
    assert probe.percentiles([(8.0, fast), (1.0, slow)], [0.5, 0.98, 0.99]) == [1.0, 1.0, 2.0]
    assert probe.percentiles([], [0.5, 0.99]) == [None, None]


def test_random_reads_past_the_drawn_ones_on_tmpfs(tmp_path: Path) -> None:
    """On tmpfs (reads of ~2 us: most chunks read by one map call, latencies from sampled chunks)
    readers that go past the reads drawn beforehand draw more as they read: every read is a whole
    block, counted once, the phase stops at max_ops, and p50/p99 are latencies of single reads."""
    import subprocess
    import sys
    import tempfile

    from clustercheck.checks.storage import SCRIPT

    from clustercheck.facts.scripts import storage_probe as probe

    shm = Path("/dev/shm")
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(shm)], capture_output=True, text=True).stdout.strip()
    if kind != "tmpfs":
        pytest.skip(f"/dev/shm is not tmpfs here ({kind or 'absent'})")
    folder = Path(tempfile.mkdtemp(prefix="clustercheck-test-", dir=shm))
    try:
        max_ops = probe.DRAWN + 3 * probe.CHUNK * probe.SAMPLE + 5  # past the drawn reads, a partial chunk
        args = {
            "mode": "read",
            "path": str(folder),
            "size": 16 << 20,
            "readers": 2,
            "workers": 2,
            "seq_block": 1 << 20,
            "budget_s": 20,
            "margin": 0.0,
            "meta_files": 10,
            "meta_size": 4096,
            "max_ops": max_ops,
            "o_direct": True,
        }
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, json.dumps(args)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert "error" not in out and out["removed"] is True, out
        # files in memory: no alignment to keep, so the kernel's one-buffer read (as fio's psync)
        assert probe.fs_type(str(folder)) == "tmpfs" and out["random_read"] == "os.pread", out
        for key, block in (("rand_4k", 4096), ("rand_128k", 131072)):
            r = out[key]
            assert r["bytes"] == r["ops"] * block, r
            assert 0 < r["ops"] <= 2 * (max_ops + probe.CHUNK), r
            assert 0 < r["p50_ms"] <= r["p99_ms"] < 1000, r
            assert r["cpu_s"] > 0, r  # the readers' own CPU time over their reads
        # 4 KiB: the first reader to reach max_ops ends the phase (2 s of budget for ~0.2 s of reads)
        assert out["rand_4k"]["ops"] >= max_ops, out["rand_4k"]
        assert leftovers(folder) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
