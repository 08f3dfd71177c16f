"""`clustercheck job`: the pure parts (Slurm's variables, the launch environment, the lead-time
arithmetic, the binding) and the CLI run as the tasks of a step would run it.

The stand-in node (`make_node`) is a folder with the files a GPU node has where the command reads
them: /proc/driver/nvidia/gpus/<bdf>/information (the driver's format: `Device Minor:`,
`GPU UUID:`, `Bus Location:`), /sys/bus/pci/devices/<bdf> links into /sys/devices/pci.../,
numa_node files, /sys/class/infiniband/<hca>/{device,ports/1/*}, infiniband_verbs, node cpulists.
Its layout follows a real `nvidia-smi topo -m` (tests/corpus/nvidia_smi/
issue-sglang-13973-topo-m-8xH-nv18-9nics-4numa-EXCERPT.txt, sgl-project/sglang#13973): GPU0-2
each behind the PCIe switch of their own NIC (PIX) on NUMA node 0, GPU3 with NIC4 (PIX) on node
1, NIC3 on node 1 too; test_the_stand_in_is_the_real_topology checks every GPU-NIC cell of it.
Changed from it: four GPUs and five NICs kept, BDFs and bridges invented (topo -m does not print
them), CPU lists 0-23 and 24-47 (the excerpt's CPU affinity, without the SMT siblings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, REPO, cli
from tests.slurm_cluster import free_ports

from clustercheck.errors import UsageError
from clustercheck.facts import launch
from clustercheck.facts.launch import SignalSpec

#: GPU -> (bdf, NUMA node, the switch it sits behind); NIC -> (bdf, NUMA node, switch, state).
GPUS = {
    0: ("0000:18:00.0", 0, "0000:17:00.0"),
    1: ("0000:2a:00.0", 0, "0000:29:00.0"),
    2: ("0000:3a:00.0", 0, "0000:39:00.0"),
    3: ("0000:9a:00.0", 1, "0000:99:00.0"),
}
NICS = {
    "mlx5_0": ("0000:19:00.0", 0, "0000:17:00.0"),
    "mlx5_1": ("0000:2b:00.0", 0, "0000:29:00.0"),
    "mlx5_2": ("0000:3b:00.0", 0, "0000:39:00.0"),
    "mlx5_3": ("0000:8b:00.0", 1, "0000:89:00.0"),
    "mlx5_4": ("0000:9b:00.0", 1, "0000:99:00.0"),
}


def make_node(root: Path, *, down: tuple[str, ...] = (), dev_infiniband: bool = True, verbs: bool = True) -> Path:
    """A stand-in GPU node's files under root (see the module docstring)."""
    devices = root / "sys" / "devices"
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)

    def pci(bdf: str, numa: int, switch: str) -> Path:
        domain_bus = bdf[:7]  # 0000:18
        rc = f"pci{switch[:7]}"
        path = devices / rc / f"{switch[:8]}01.0" / switch / bdf
        path.mkdir(parents=True)
        (path / "numa_node").write_text(f"{numa}\n")
        (bus / bdf).symlink_to(os.path.relpath(path, bus))
        assert domain_bus
        return path

    for number, (bdf, numa, switch) in GPUS.items():
        pci(bdf, numa, switch)
        info = root / "proc" / "driver" / "nvidia" / "gpus" / bdf
        info.mkdir(parents=True)
        (info / "information").write_text(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
            f"GPU UUID: \t GPU-{number}c8e5a9d-6f0e-4c1b-9f4e-2a7d5b3c1e0{number}\n"
            "Video BIOS: \t 96.00.61.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {bdf}\nDevice Minor: \t {number}\nGPU Excluded:\t No\n"
        )
    ib = root / "sys" / "class" / "infiniband"
    verbs_dir = root / "sys" / "class" / "infiniband_verbs"
    for i, (hca, (bdf, numa, switch)) in enumerate(NICS.items()):
        path = pci(bdf, numa, switch)
        (ib / hca / "ports" / "1").mkdir(parents=True)
        (ib / hca / "device").symlink_to(os.path.relpath(path, ib / hca))
        state = "1: DOWN" if hca in down else "4: ACTIVE"
        phys = "3: Disabled" if hca in down else "5: LinkUp"
        for name, value in (
            ("state", state),
            ("phys_state", phys),
            ("rate", "400 Gb/sec (4X NDR)"),
            ("link_layer", "InfiniBand"),
        ):
            (ib / hca / "ports" / "1" / name).write_text(value + "\n")
        (verbs_dir / f"uverbs{i}").mkdir(parents=True)
        (verbs_dir / f"uverbs{i}" / "ibdev").write_text(hca + "\n")
        if dev_infiniband:
            (root / "dev" / "infiniband").mkdir(parents=True, exist_ok=True)
            (root / "dev" / "infiniband" / f"uverbs{i}").write_text("")
    if dev_infiniband:
        (root / "dev" / "infiniband" / "rdma_cm").write_text("")
    for node, cpus in ((0, "0-23"), (1, "24-47")):
        (devices / "system" / "node" / f"node{node}").mkdir(parents=True)
        (devices / "system" / "node" / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (root / "sys" / "class" / "net" / "ib0").mkdir(parents=True)
    (root / "sys" / "class" / "net" / "eth0").mkdir(parents=True)
    if verbs:
        lib = root / "usr" / "lib" / "x86_64-linux-gnu"
        (lib / "libibverbs").mkdir(parents=True)
        (lib / "libibverbs.so.1").write_text("")
        (lib / "libibverbs" / "libmlx5-rdmav34.so").write_text("")
    return root


def step_env(rank: int, *, ntasks: int = 4, per_node: int = 2, **extra: str) -> dict[str, str]:
    """The variables Slurm 22.05 gives a task of `srun -N2 --ntasks-per-node=2` (recorded on the loopback cluster)."""
    node = rank // per_node
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOBID": "4242",
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(node),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_NODELIST": "gpu[01-02]",
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_TASKS_PER_NODE": f"{per_node}(x2)",
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x2)",
        "SLURMD_NODENAME": f"gpu0{node + 1}",
    }
    env.update(extra)
    return env


# -- Slurm's variables -----------------------------------------------------------------------


def test_a_task_of_a_step() -> None:
    task = launch.slurm_task(step_env(3))
    assert (task.rank, task.local_id, task.ntasks, task.node, task.node_index) == (3, 1, 4, "gpu02", 1)
    assert task.nodes == ["gpu01", "gpu02"] and task.tasks_on_node == 2 and task.in_step


def test_the_batch_script_is_no_step() -> None:
    env = {k: v for k, v in step_env(0).items() if "STEP" not in k}
    task = launch.slurm_task(env)
    assert not task.in_step and task.step_id is None and task.tasks_on_node == 2


@pytest.mark.parametrize(
    "env",
    [{}, {"SLURM_PROCID": "0"}, {"SLURM_JOB_ID": "12"}, {"SLURM_JOB_ID": " ", "SLURM_PROCID": "0"}],
)
def test_outside_a_job_is_a_usage_error(env: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="not inside a Slurm job"):
        launch.slurm_task(env)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLURM_PROCID", "abc"),
        ("SLURM_PROCID", "-1"),
        ("SLURM_PROCID", "1e3"),
        ("SLURM_PROCID", "9" * 40),
        ("SLURM_PROCID", "4"),  # not below SLURM_NTASKS
        ("SLURM_LOCALID", "0x1"),
        ("SLURM_LOCALID", "2"),  # not below the node's 2 tasks
        ("SLURM_STEP_NUM_TASKS", "0"),
        ("SLURM_STEP_NUM_TASKS", "four"),
        ("SLURM_JOB_ID", "12; rm -rf /"),
        ("SLURM_STEP_ID", "zero"),
        ("SLURM_JOB_NODELIST", "gpu[01-"),
        ("SLURM_JOB_NODELIST", "x" * 300),
        ("SLURM_STEP_NODELIST", "gpu[1-99999999]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x99999)"),
        ("SLURM_STEP_GPUS", "0,one"),
        ("RANK", "zero"),
        ("RANK", "-3"),
        ("WORLD_SIZE", "0"),
        ("LOCAL_RANK", "\u0661"),  # an Arabic-Indic digit one: str.isdigit() says yes, Slurm's atoi no
        ("MASTER_PORT", "65536"),
        ("MASTER_PORT", "http"),
        ("MASTER_ADDR", "gpu01 gpu02"),
        ("MASTER_ADDR", "a" * 300),
        ("MASTER_ADDR", "$(hostname)"),
    ],
)
def test_garbage_names_the_variable(name: str, value: str) -> None:
    env = {**step_env(1), name: value}
    with pytest.raises(UsageError) as caught:
        task = launch.slurm_task(env)
        launch.launch_env(env, task)
    assert name in str(caught.value)


VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_JOB_NODELIST",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_GPUS",
    "SLURMD_NODENAME",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789[]-,()x ", max_size=30),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(VARIABLES), _TEXT, min_size=1, max_size=4), st.integers(0, 3))
def test_any_value_of_any_variable_is_read_or_refused_by_name(garbage: dict[str, str], rank: int) -> None:
    env = {k: v.replace("\0", "") for k, v in {**step_env(rank), **garbage}.items()}
    try:
        task = launch.slurm_task(env)
        values, found = launch.launch_env(env, task)
    except UsageError as exc:
        said = str(exc)
        assert any(name in said for name in garbage) or "not inside a Slurm job" in said or "this node" in said, said
        return
    assert set(values) == {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} - (
        set() if task.ntasks is not None else {"WORLD_SIZE"}
    )
    assert all(f.status in ("ok", "warn", "fail") for f in found)


def test_garbage_in_the_cli_is_exit_64_naming_it_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, **step_env(1, SLURM_LOCALID="one")}
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "job", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 64
    assert "SLURM_LOCALID='one'" in proc.stderr and "Traceback" not in proc.stderr


def test_outside_a_job_the_cli_says_so() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "job"], capture_output=True, text=True, env=clean, cwd=REPO, timeout=60
    )
    assert proc.returncode == 64
    assert "not inside a Slurm job: SLURM_JOB_ID and SLURM_PROCID are not set" in proc.stderr


# -- the launch environment ----------------------------------------------------------------


def test_nothing_exported_is_derivable_as_lightning_derives_it() -> None:
    env = step_env(3)
    values, found = launch.launch_env(env, launch.slurm_task(env))
    assert {n: (v.value, v.source) for n, v in values.items()} == {
        "RANK": ("3", "derived"),
        "LOCAL_RANK": ("1", "derived"),
        "WORLD_SIZE": ("4", "derived"),
        "MASTER_ADDR": ("gpu01", "derived"),
        "MASTER_PORT": (str(15000 + 4242), "derived"),
    }
    assert [f.status for f in found] == ["ok"] and "RANK from SLURM_PROCID" in found[0].message


def test_require_env_fails_what_is_only_derivable() -> None:
    env = step_env(0, RANK="0", WORLD_SIZE="4")
    _, found = launch.launch_env(env, launch.slurm_task(env), require=True)
    fails = [f for f in found if f.status == "fail"]
    assert len(fails) == 1 and "LOCAL_RANK, MASTER_ADDR, MASTER_PORT" in fails[0].message


def test_a_rank_exported_once_for_the_whole_job_fails_in_the_tasks() -> None:
    # `export RANK=0` in the batch script: srun passes it to every task
    env = step_env(2, RANK="0", WORLD_SIZE="8")
    _, found = launch.launch_env(env, launch.slurm_task(env))
    messages = [f.message for f in found if f.status == "fail"]
    assert "RANK=0 but SLURM_PROCID=2: this task would join as rank 0" in messages
    assert "WORLD_SIZE=8 but SLURM_NTASKS=4: this task would join as world size 8" in messages


def test_in_the_batch_script_an_exported_rank_warns() -> None:
    env = {k: v for k, v in step_env(0, RANK="0").items() if "STEP" not in k}
    _, found = launch.launch_env(env, launch.slurm_task(env))
    (w,) = [f for f in found if f.status == "warn"]
    assert "srun passes it unchanged to every task" in w.message


def test_ports() -> None:
    assert launch.lightning_port("1234567") == 15000 + 4567
    assert launch.lightning_port("7") == 15007
    assert launch.enroot_port("1234567") == 1234567 % 4536 + 61000


# -- the lead time -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("USR1@300", SignalSpec("USR1", 300, False, "x")),
        ("B:USR1@120", SignalSpec("USR1", 120, True, "x")),
        ("SIGUSR2", SignalSpec("USR2", 60, False, "x")),
        ("R:10@600", SignalSpec("10", 600, False, "x")),
    ],
)
def test_parse_signal(spec: str, expected: SignalSpec) -> None:
    assert launch.parse_signal(spec, "x") == expected


@pytest.mark.parametrize("spec", ["", "USR1@", "@300", "NOPE@300", "B:USR1@-5", "USR1@70000", "99@10", "B;USR1"])
def test_parse_signal_refuses_garbage(spec: str) -> None:
    with pytest.raises(ValueError, match="signal"):
        launch.parse_signal(spec, "x")


def test_signal_from_the_batch_script_stops_at_the_first_command() -> None:
    script = "#!/bin/bash\n#SBATCH -N 2\n# a comment\n#SBATCH --signal=B:USR1@300  # warn me\n\nsrun train\n"
    assert launch.signal_from_script(script) == ("B:USR1@300", 4)
    assert launch.signal_from_script("#!/bin/sh\n#SBATCH --signal USR2@90\n") == ("USR2@90", 2)
    assert launch.signal_from_script("#!/bin/sh\necho hi\n#SBATCH --signal=USR1@300\n") is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:10:00", 600), ("1-00:00:00", 86400), ("2-03", 2 * 86400 + 3 * 3600), ("30", 1800), ("05:30", 330)],
)
def test_durations(text: str, seconds: float) -> None:
    assert launch.parse_duration(text) == seconds


def test_unlimited_and_garbage_durations() -> None:
    assert launch.parse_duration("UNLIMITED") is None and launch.parse_duration("1:2:3:4") is None


def test_scontrol_fields_and_kill_wait() -> None:
    # lines of `scontrol show job` and `scontrol show config` of Slurm 22.05.8 (the loopback cluster)
    job = "JobId=1 JobName=wrap\n   RunTime=00:00:01 TimeLimit=00:10:00 TimeMin=N/A\n   BatchHost=n1\n"
    assert launch.parse_scontrol_job(job)["TimeLimit"] == "00:10:00"
    assert launch.parse_kill_wait("JobCompType             = jobcomp/none\nKillWait                = 30 sec\n") == 30


@pytest.mark.parametrize(("text", "rate"), [("2GB/s", 2e9), ("800 MB/s", 8e8), ("1GiB/s", 2**30), ("2G", 2 * 2**30)])
def test_rates(text: str, rate: float) -> None:
    assert launch.parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "fast", "-2GB/s", "0GB/s", "2XB/s"])
def test_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        launch.parse_rate(text)


def _lead(
    spec: SignalSpec | None,
    size: int | None = 2 * 10**12,
    *,
    time_limit_s: float | None = 86400.0,
    kill_wait_s: int | None = 30,
    in_step: bool = True,
) -> list[launch.Finding]:
    return launch.judge_lead_time(
        spec, time_limit_s=time_limit_s, kill_wait_s=kill_wait_s, size=size, bandwidth=2e9, nodes=4, in_step=in_step
    )


def test_lead_time_arithmetic() -> None:
    # 2 TB over 4 nodes at 2 GB/s each: 250 s
    (ok,) = _lead(SignalSpec("USR1", 300, False, "x"))
    assert ok.status == "ok" and "needs 250 s" in ok.message and "50 s to spare" in ok.message
    (tight,) = _lead(SignalSpec("USR1", 240, False, "x"))
    assert tight.status == "warn" and "only if the training ignores the SIGTERM" in tight.message
    (short,) = _lead(SignalSpec("USR1", 120, False, "x"))
    assert short.status == "warn" and "more than the 150 s before SIGKILL" in short.message
    assert "--signal=USR1@360" in short.remedy  # 250 s + a quarter, up to whole minutes
    (none,) = _lead(None)
    assert none.status == "warn" and "KillWait=30 s before SIGKILL" in none.message
    assert "cannot be written" in none.message


def test_lead_time_corner_cases() -> None:
    assert _lead(None, time_limit_s=None)[0].status == "skip"
    (early,) = _lead(SignalSpec("USR1", 900, False, "x"), time_limit_s=600.0)
    assert early.status == "warn" and "it comes at the start" in early.message
    batch = _lead(SignalSpec("USR1", 600, True, "x"))
    assert [f.status for f in batch] == ["ok", "warn"] and "batch shell only" in batch[1].message
    assert [f.status for f in _lead(SignalSpec("USR1", 600, True, "x"), in_step=False)] == ["ok"]
    (unknown,) = _lead(SignalSpec("USR1", 300, False, "x"), kill_wait_s=None, size=None)
    assert unknown.status == "ok" and "Slurm's default; not read" in unknown.message


# -- the binding ---------------------------------------------------------------------------


def test_topology_of_the_stand_in(tmp_path: Path) -> None:
    topo = launch.read_topology(make_node(tmp_path))
    assert [(g.number, g.bdf, g.minor, g.numa) for g in topo.gpus][:2] == [
        (0, "0000:18:00.0", 0, 0),
        (1, "0000:2a:00.0", 1, 0),
    ]
    assert [(n.hca, n.numa, n.uverbs) for n in topo.nics][3:] == [("mlx5_3", 1, "uverbs3"), ("mlx5_4", 1, "uverbs4")]
    gpu3 = topo.gpus[3]
    assert launch.nearest_nic(gpu3, topo.nics, 3) == (topo.nics[4], "PIX")
    assert launch.path_kind(gpu3, topo.nics[3])[1] == "NODE"
    assert launch.path_kind(topo.gpus[0], topo.nics[3])[1] == "SYS"
    assert topo.node_cpus[1] == set(range(24, 48))


TOPO = CORPUS / "nvidia_smi" / "issue-sglang-13973-topo-m-8xH-nv18-9nics-4numa-EXCERPT.txt"


def test_the_stand_in_is_the_real_topology(tmp_path: Path) -> None:
    """Every GPU-NIC cell of the real topo -m for the GPUs and NICs kept is what the stand-in gives."""
    header, *rows = [line.split() for line in TOPO.read_text().splitlines() if line.strip()]
    topo = launch.read_topology(make_node(tmp_path))
    for row in rows[: len(GPUS)]:
        gpu = topo.gpus[int(row[0][3:])]
        cells = dict(zip(header, row[1:], strict=False))
        for nic in topo.nics:
            assert launch.path_kind(gpu, nic)[1] == cells[f"NIC{nic.hca[5:]}"], (row[0], nic.hca)
        assert gpu.numa == int(row[-2])  # "NUMA Affinity", before "GPU NUMA ID"


def test_visible_gpus_follow_slurm_renumbering(tmp_path: Path) -> None:
    topo = launch.read_topology(make_node(tmp_path))
    # inside the job's device cgroup Slurm renumbers: SLURM_STEP_GPUS=2,3 is CUDA_VISIBLE_DEVICES=0,1
    picks = launch.visible_gpus("0,1", ["2", "3"], topo)
    assert picks is not None and [p.gpu.bdf if p.gpu else None for p in picks] == ["0000:3a:00.0", "0000:9a:00.0"]
    picks = launch.visible_gpus("0", ["1", "2", "3"], topo)  # --gpus-per-task=1, task 0 of the step
    assert picks is not None and [p.gpu.number if p.gpu else None for p in picks] == [1]
    picks = launch.visible_gpus("2,3", ["2", "3"], topo)
    assert picks is not None and [p.gpu.number if p.gpu else None for p in picks] == [2, 3]
    picks = launch.visible_gpus("GPU-3c8e5a9d", None, topo)
    assert picks is not None and picks[0].gpu is not None and picks[0].gpu.number == 3
    assert launch.visible_gpus("", None, topo) == [] and launch.visible_gpus(None, None, topo) is None
    picks = launch.visible_gpus("7,MIG-abc", None, topo)
    assert picks is not None and [p.gpu for p in picks] == [None, None]


# -- the CLI, as the tasks of a step ---------------------------------------------------------


def _tasks(root: Path, gather: Path, envs: list[dict[str, str]], *args: str) -> list[subprocess.CompletedProcess[str]]:
    """Start every task at once, as srun does, and wait for them."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "clustercheck", "job", "--root", str(root), "--gather", str(gather), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NCCL", "CUDA"))}, **env},
        )
        for env in envs
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _node_env(rank: int, **extra: str) -> dict[str, str]:
    # one node of 4 tasks; MASTER_ADDR this machine, so rank 0's bind test runs
    env = step_env(rank, ntasks=4, per_node=4, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]), **extra)
    env.update(SLURM_JOB_NODELIST="gpu01", SLURM_NODELIST="gpu01", SLURM_STEP_NODELIST="gpu01")
    env.update(SLURM_TASKS_PER_NODE="4", SLURM_STEP_TASKS_PER_NODE="4", SLURMD_NODENAME="gpu01", SLURM_NODEID="0")
    return env


def messages(record: dict[str, Any]) -> list[str]:
    """The messages of a JSON record's findings."""
    return [str(f["message"]) for f in record["findings"]]


def test_one_table_for_the_node_from_four_tasks(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    # --gpus-per-task=1: Slurm gives each task its own GPU (CUDA_VISIBLE_DEVICES=k without a device cgroup)
    envs = [_node_env(r, CUDA_VISIBLE_DEVICES=str(r), SLURM_STEP_GPUS=str(r)) for r in range(4)]
    procs = _tasks(root, tmp_path / "gather", envs)
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [p.stderr for p in procs]
    assert [bool(p.stdout) for p in procs] == [True, False, False, False]  # local task 0 prints the node
    table = procs[0].stdout
    assert "node gpu01: 4 of 4 tasks (of 4)" in table
    rows = [line.split() for line in table.splitlines()[2:6]]
    assert [(r[0], r[3], r[4], r[5], r[6]) for r in rows[:1]] == [("0", "0", "0000:18:00.0", "mlx5_0:1", "PIX")]
    assert [r[5] for r in rows] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_4:1"]
    assert [r[7].rsplit("/", 1)[0] for r in rows] == ["0/0", "0/0", "0/0", "1/1"]  # GPU and NIC NUMA nodes
    # one GPU per task, seen as cuda:0: code selecting cuda:LOCAL_RANK breaks on local ranks 1-3
    assert "ranks 1-3: CUDA_VISIBLE_DEVICES=" not in table  # each has its own value
    assert table.count("'invalid device ordinal'") == 3
    assert not list((tmp_path / "gather").glob("*/*.json"))  # the records are cleaned up


def test_json_for_scripts_and_a_nic_across_the_socket(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node", down=("mlx5_4",))
    envs = [_node_env(r) for r in range(4)]  # every task sees every GPU and takes cuda:LOCAL_RANK
    procs = _tasks(root, tmp_path / "gather", envs, "--format", "json")
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    node = json.loads(procs[0].stdout)
    assert (node["node"], node["tasks"], node["expected"]) == ("gpu01", 4, 4)
    rows = {r["rank"]: r["rows"][0] for r in node["records"]}
    assert rows[3]["gpu_bdf"] == "0000:9a:00.0" and rows[3]["nic"] == "mlx5_3:1" and rows[3]["path"] == "NODE"
    record3 = next(r for r in node["records"] if r["rank"] == 3)
    assert "GPU 3's nearest NIC mlx5_4 (PIX) is not ACTIVE or not selected by NCCL_IB_HCA: it gets mlx5_3 (NODE)" in (
        " ".join(messages(record3))
    )
    # now NIC3's switch-mate is down too: GPU 3 only has NICs on the other socket
    root2 = make_node(tmp_path / "node2", down=("mlx5_3", "mlx5_4"))
    procs = _tasks(root2, tmp_path / "gather", envs, "--format", "json")
    node = json.loads(procs[0].stdout)
    record3 = next(r for r in node["records"] if r["rank"] == 3)
    assert record3["rows"][0]["path"] == "SYS" and record3["status"] == "warn"
    assert any("across the socket" in f["message"] for f in record3["findings"])
    assert procs[3].returncode == 0  # task 3's warning is not fatal (each task exits with its own verdict) ...
    procs = _tasks(root2, tmp_path / "gather", envs, "--format", "json", "--strict")
    assert procs[3].returncode == 1  # ... unless --strict


def test_two_ranks_on_one_gpu_and_settings_that_force_tcp_fail(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    envs = [_node_env(r, CUDA_VISIBLE_DEVICES="0,1", NCCL_IB_HCA="=mlx5_9") for r in range(2)]
    for env in envs:
        env.update(SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2", SLURM_TASKS_PER_NODE="2", SLURM_STEP_TASKS_PER_NODE="2")
    envs[1]["LOCAL_RANK"] = "0"  # a launcher bug: both take cuda:0
    procs = _tasks(root, tmp_path / "gather", envs, "--format", "json")
    node = json.loads(procs[0].stdout)
    assert procs[0].returncode == 2 and node["status"] == "fail"
    messages = [f["message"] for f in node["findings"]]
    assert "ranks 0-1 all use GPU 0000:18:00.0: they share one GPU while others idle" in messages
    record1 = next(r for r in node["records"] if r["rank"] == 1)
    said = [f["message"] for f in record1["findings"] if f["status"] == "fail"]
    assert "LOCAL_RANK=0 but SLURM_LOCALID=1: this task would join as local rank 0" in said
    assert any("NCCL_IB_HCA==mlx5_9 (job environment) selects none of" in m for m in said)


def test_a_container_without_dev_infiniband(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node", dev_infiniband=False, verbs=False)
    (root / ".singularity.d").mkdir()
    env = _node_env(0)
    env.update(SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1", SLURM_TASKS_PER_NODE="1", SLURM_STEP_TASKS_PER_NODE="1")
    env.update(SLURM_JOB_NODELIST="gpu[01-02]", SLURM_NODELIST="gpu[01-02]")  # multi-node: TCP would be a fail
    (proc,) = _tasks(root, tmp_path / "gather", [env], "--format", "json")
    node = json.loads(proc.stdout)
    (record,) = node["records"]
    assert record["container"] == "apptainer"
    (rdma,) = [f for f in record["findings"] if f["topic"] == "rdma"]
    assert rdma["status"] == "fail"
    assert "/dev/infiniband/uverbs0 (of mlx5_0) is missing" in rdma["message"]
    assert "no libibverbs.so.1 inside the apptainer container" in rdma["message"]


def test_a_task_that_never_reports_is_named(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    env = _node_env(0)
    (proc,) = _tasks(root, tmp_path / "gather", [env], "--wait", "0.5")
    assert "1 of 4 tasks" in proc.stdout and "3 of 4 tasks of gpu01 did not report (local ids 1-3)" in proc.stdout


def test_options_are_checked() -> None:
    env_vars = step_env(0)
    for args, said in (
        (["--checkpoint-size", "2TB"], "go together"),
        (["--checkpoint-size", "lots", "--checkpoint-bandwidth", "1GB/s"], "--checkpoint-size"),
        (["--checkpoint-size", "1TB", "--checkpoint-bandwidth", "quick"], "--checkpoint-bandwidth"),
        (["--signal", "USR1@soon"], "--signal"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "clustercheck", "job", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, **env_vars},
            timeout=60,
        )
        assert proc.returncode == 64 and said in proc.stderr, proc.stderr


def test_help_lists_the_command() -> None:
    proc = cli("job", "--help")
    assert proc.returncode == 0 and "--checkpoint-bandwidth" in proc.stdout


def test_a_gather_folder_that_is_not_this_users_is_not_used(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    env = _node_env(1)
    # someone else's link where the node's tasks would gather (a shared /tmp): never written through
    trap = tmp_path / "elsewhere"
    trap.mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / f"clustercheck-job-{os.getuid()}-4242.0.0").symlink_to(trap)
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "job", "--root", str(root), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SLURM")},
            **env,
            "TMPDIR": str(tmp_path / "tmp"),
        },
    )
    assert "is not a folder of this user's: records are not gathered there" in proc.stderr
    node = json.loads(proc.stdout)  # the task printed its own part instead
    assert [r["rank"] for r in node["records"]] == [1] and not list(trap.iterdir())
    (tmp_path / "a-file").write_text("")
    (bad,) = _tasks(root, tmp_path / "a-file", [env])  # --gather names a file: a usage error
    assert bad.returncode == 64 and "--gather" in bad.stderr


def test_rank_0_summarises_the_step_and_names_what_differs(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    port = str(free_ports(1)[0])
    envs = [step_env(r, MASTER_ADDR="127.0.0.1", MASTER_PORT=port) for r in range(4)]
    for env in envs[2:]:  # the second node's module file sets NCCL_IB_HCA; the first node's does not
        env["NCCL_IB_HCA"] = "=mlx5_0,mlx5_1"
    shared = tmp_path / "shared"
    procs = _tasks(root, shared, envs, "--summary", "--format", "json")
    lines = [json.loads(line) for line in procs[0].stdout.splitlines()]
    assert [line.get("node") for line in lines] == ["gpu01", "gpu02", None]  # rank 0: every node, then the step
    summary = lines[2]
    assert (summary["tasks"], summary["expected"], summary["nodes"]) == (4, 4, ["gpu01", "gpu02"])
    (drift,) = [f for f in summary["findings"] if f["topic"] == "drift"]
    assert drift["status"] == "warn"
    assert drift["message"] == (
        "NCCL_IB_HCA differs between the tasks: unset on ranks 0-1 (gpu01); =mlx5_0,mlx5_1 on ranks 2-3 (gpu02)"
    )
    assert [bool(p.stdout) for p in procs] == [True, False, False, False]  # one writer: nothing interleaves
    assert not list(shared.glob("*/*.json"))  # rank 0 removed every record
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "job", "--summary"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, **envs[0]},
    )
    assert proc.returncode == 64 and "--summary needs --gather DIR" in proc.stderr


def test_table_lines_stay_under_slurms_1024_byte_pieces(tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    hostile = ",".join(f"mlx5_{i}x\u00e9" for i in range(400))  # 4 KB of NCCL_IB_HCA, non-ASCII too
    env = _node_env(0, NCCL_IB_HCA=hostile)
    env.update(SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1", SLURM_TASKS_PER_NODE="1", SLURM_STEP_TASKS_PER_NODE="1")
    (proc,) = _tasks(root, tmp_path / "gather", [env])
    assert proc.returncode == 2, proc.stderr  # it selects no HCA: TCP sockets
    assert max(len(line.encode()) for line in proc.stdout.splitlines()) <= 1000
    assert "more than 32 entries: NCCL ignores" in proc.stdout


def test_the_batch_script_of_a_torchrun_job_shows_one_row_per_gpu(tmp_path: Path) -> None:
    # one task per node, torchrun starts a worker per GPU: the batch script sees the node's 4 GPUs
    root = make_node(tmp_path / "node")
    env = {k: v for k, v in _node_env(0).items() if "STEP" not in k}
    env.update(SLURM_NTASKS="1", SLURM_TASKS_PER_NODE="1", CUDA_VISIBLE_DEVICES="0,1,2,3", SLURM_JOB_GPUS="0,1,2,3")
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "job", "--root", str(root), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("SLURM")}, **env},
    )
    node = json.loads(proc.stdout)
    assert node["step"] is None
    (record,) = node["records"]
    assert [(r["local"], r["gpu"], r["nic"]) for r in record["rows"]] == [
        (0, "0", "mlx5_0:1"),
        (1, "1", "mlx5_1:1"),
        (2, "2", "mlx5_2:1"),
        (3, "3", "mlx5_4:1"),
    ]
    assert not [f for f in record["findings"] if "invalid device ordinal" in f["message"]]
