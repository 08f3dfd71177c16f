"""The seam between Slurm and a training framework, as one task of a job sees it (`clustercheck job`).

Pure parts, each testable alone:
- `slurm_task`: Slurm's variables of this task (SLURM_JOB_ID, SLURM_PROCID, SLURM_NTASKS,
  SLURM_LOCALID, SLURM_JOB_NODELIST, SLURM_STEP_TASKS_PER_NODE ...), garbage refused with a
  UsageError naming the variable (exit 64).
- `launch_env`: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: as set, or derived from
  Slurm's variables the way PyTorch Lightning's SLURMEnvironment derives them (global rank
  SLURM_PROCID, local rank SLURM_LOCALID, world size SLURM_NTASKS, main address the first host
  of SLURM_NODELIST, main port 15000 + the last four digits of SLURM_JOB_ID), and whether a set
  value agrees with Slurm's.
- the warning before the time limit: `parse_signal` (sbatch's `--signal=[{R|B}:]SIG[@TIME]`),
  `signal_from_script` (the `#SBATCH` lines of the batch script), `parse_scontrol_job`,
  `parse_duration`, `parse_kill_wait`, `parse_rate`, and `judge_lead_time`, the arithmetic.
- the binding: `read_topology` (GPUs from /proc/driver/nvidia/gpus/<bdf>/information, HCAs
  from /sys/class/infiniband, PCI paths and NUMA nodes from sysfs, all under a root folder),
  `visible_gpus` (CUDA_VISIBLE_DEVICES against SLURM_STEP_GPUS), `nearest_nic`.

Sources: Slurm's sbatch(1) for --signal ("Due to the resolution of event handling by Slurm, the
signal may be sent up to 60 seconds earlier than specified"; default time 60 s) and
slurm.conf(5) for KillWait (default 30 s between SIGTERM and SIGKILL at the time limit);
domain-facts §E.2 (enroot's 50-slurm-pytorch.sh hook), §C.3 (NCCL_IB_HCA), §F (sysfs).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from clustercheck.errors import UsageError
from clustercheck.facts.infiniband import Port, natural_key, parse_sysfs

STATUS_ORDER = {"ok": 0, "skip": 0, "warn": 1, "error": 2, "fail": 3}


class Finding(NamedTuple):
    status: str  # ok, warn, fail, skip, error
    topic: str  # env, master, signal, gpu, nic, numa, nccl, rdma
    message: str
    remedy: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"status": self.status, "topic": self.topic, "message": self.message}
        if self.remedy:
            out["remedy"] = self.remedy
        return out


def worst(statuses: Iterable[str]) -> str:
    found = "ok"
    for s in statuses:
        if STATUS_ORDER.get(s, 0) > STATUS_ORDER[found]:
            found = s
    return found


# -- Slurm's variables -------------------------------------------------------------------------


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value)} characters)"


def read_int(env: Mapping[str, str], name: str, *, what: str = "a number", minimum: int = 0) -> int | None:
    """An integer variable, None when unset; garbage is a UsageError naming the variable."""
    raw = env.get(name)
    if raw is None:
        return None
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < minimum:
        raise UsageError(f"{name}={_shown(raw)} is not {what} (expected an integer {minimum} or more)")
    return int(text)


def tasks_per_node(value: str, name: str) -> list[int]:
    """Slurm's SLURM_TASKS_PER_NODE form: '2(x3),1' -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in value.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,6})(?:\(x([0-9]{1,6})\))?\s*", part)
        if not m:
            raise UsageError(f"{name}={_shown(value)} is not Slurm's tasks-per-node list (like 2(x3),1)")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
        if len(counts) > 65536:
            raise UsageError(f"{name}={_shown(value)} names more than 65536 nodes")
    return counts


def _hosts(env: Mapping[str, str], name: str) -> list[str] | None:
    from clustercheck.hostlist import SLURM_MAX_NAME, expand

    raw = env.get(name)
    if raw is None:
        return None
    try:
        return expand(raw, max_name=SLURM_MAX_NAME)
    except UsageError as exc:
        raise UsageError(f"{name}: {exc}") from None


class Task(NamedTuple):
    """What Slurm tells one task (or the batch script) about its place in the job."""

    job_id: str
    step_id: str | None  # None: the batch script itself, not a task of an srun step
    rank: int  # SLURM_PROCID
    ntasks: int | None  # SLURM_STEP_NUM_TASKS / SLURM_NTASKS (None: the batch script of a job without -n)
    local_id: int  # SLURM_LOCALID
    node: str  # SLURMD_NODENAME
    node_index: int  # this node's place in the step's node list
    nodes: list[str]  # the job's nodes (SLURM_JOB_NODELIST)
    step_nodes: list[str]  # the step's nodes (SLURM_STEP_NODELIST; the job's in the batch script)
    tasks_on_node: int | None  # tasks of this step on this node
    gpus: list[str] | None  # SLURM_STEP_GPUS (SLURM_JOB_GPUS in the batch script): the node's GPU indices
    counts: tuple[int, ...] = ()  # tasks on each of step_nodes (SLURM_STEP_TASKS_PER_NODE), when known

    @property
    def in_step(self) -> bool:
        return self.step_id is not None

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)


NOT_IN_JOB = (
    "not inside a Slurm job: {missing} not set. Run it in an sbatch script, or as a step of one: "
    "`srun clustercheck job` (with the same --ntasks-per-node and --gpus as the training step)"
)


def slurm_task(env: Mapping[str, str], hostname: str = "") -> Task:
    """This task's Slurm variables, checked against each other; UsageError (exit 64) for garbage."""
    missing = [n for n in ("SLURM_JOB_ID", "SLURM_PROCID") if not env.get(n, "").strip()]
    if missing:
        words = " and ".join(missing) + (" are" if len(missing) > 1 else " is")
        extra = ""
        if missing == ["SLURM_PROCID"]:
            extra = " (an allocation's shell, as salloc starts it, runs where salloc ran, not on the job's nodes)"
        raise UsageError(NOT_IN_JOB.format(missing=words) + extra)
    job_id = env["SLURM_JOB_ID"].strip()
    if not re.fullmatch(r"[0-9]{1,12}(_[0-9]{1,9})?", job_id):
        raise UsageError(f"SLURM_JOB_ID={_shown(env['SLURM_JOB_ID'])} is not a Slurm job id")
    step_raw = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    step_id = None
    if step_raw is not None:
        step_id = step_raw.strip()
        if not re.fullmatch(r"[0-9]{1,10}|batch|extern|interactive", step_id):
            raise UsageError(f"SLURM_STEP_ID={_shown(step_raw)} is not a step id")
        if step_id == "batch":
            step_id = None
    rank = read_int(env, "SLURM_PROCID", what="a task rank") or 0
    local_id = read_int(env, "SLURM_LOCALID", what="a local task id") or 0
    ntasks_name = "SLURM_STEP_NUM_TASKS" if step_id is not None and "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    ntasks = read_int(env, ntasks_name, what="a task count", minimum=1)
    nodes = _hosts(env, "SLURM_JOB_NODELIST") or _hosts(env, "SLURM_NODELIST")
    if nodes is None:
        raise UsageError("SLURM_JOB_NODELIST is not set: Slurm sets it in every job (is this a job's environment?)")
    step_nodes = (_hosts(env, "SLURM_STEP_NODELIST") if step_id is not None else None) or nodes
    node = (env.get("SLURMD_NODENAME") or hostname.split(".")[0]).strip()
    node_id = read_int(env, "SLURM_NODEID", what="a node index")
    if node in step_nodes:
        node_index = step_nodes.index(node)
    elif node_id is not None and node_id < len(step_nodes):
        node_index = node_id
    else:
        raise UsageError(
            f"this node ({node or 'no name'}) is not in the step's nodes ({_fold(step_nodes)}) and SLURM_NODEID "
            f"does not place it: SLURMD_NODENAME or SLURM_STEP_NODELIST is wrong"
        )
    tpn_name = "SLURM_STEP_TASKS_PER_NODE" if step_id is not None else "SLURM_TASKS_PER_NODE"
    tpn_raw = env.get(tpn_name) or (env.get("SLURM_TASKS_PER_NODE") if step_id is not None else None)
    on_node = None
    counts: list[int] = []
    if tpn_raw is not None:
        counts = tasks_per_node(tpn_raw, tpn_name)
        on_node = counts[node_index] if node_index < len(counts) else None
    if ntasks is not None and rank >= ntasks:
        raise UsageError(f"SLURM_PROCID={rank} is not below {ntasks_name}={ntasks}: Slurm's variables disagree")
    if step_id is not None and on_node is not None and local_id >= on_node:
        raise UsageError(f"SLURM_LOCALID={local_id} is not below this node's {on_node} tasks ({tpn_name}={tpn_raw})")
    gpus_name = "SLURM_STEP_GPUS" if step_id is not None and "SLURM_STEP_GPUS" in env else "SLURM_JOB_GPUS"
    gpus = None
    if env.get(gpus_name, "").strip():
        gpus = [g.strip() for g in env[gpus_name].split(",")]
        if not all(re.fullmatch(r"[0-9]{1,4}", g) for g in gpus):
            raise UsageError(f"{gpus_name}={_shown(env[gpus_name])} is not a comma-separated list of GPU indices")
    return Task(
        job_id, step_id, rank, ntasks, local_id, node, node_index, nodes, step_nodes, on_node, gpus, tuple(counts)
    )


def _fold(hosts: Sequence[str]) -> str:
    from clustercheck.hostlist import fold

    return fold(hosts)


# -- the launch environment --------------------------------------------------------------------

DERIVED_FROM = {
    "RANK": "SLURM_PROCID",
    "LOCAL_RANK": "SLURM_LOCALID",
    "WORLD_SIZE": "SLURM_NTASKS",
    "MASTER_ADDR": "the first host of SLURM_JOB_NODELIST",
    "MASTER_PORT": "15000 + the last 4 digits of SLURM_JOB_ID",
}
HOW = (
    "as PyTorch Lightning's SLURMEnvironment derives them; torchrun sets its own for its workers, "
    "and plain torch.distributed (init_method env://) needs them exported"
)


class Value(NamedTuple):
    name: str
    value: str
    source: str  # "set" or "derived"


def lightning_port(job_id: str) -> int:
    """Lightning's SLURMEnvironment.main_port without MASTER_PORT: 15000 + int(job_id[-4:])."""
    digits = re.sub(r"\D", "", job_id)
    return 15000 + int(digits[-4:] or "0")


def enroot_port(job_id: str) -> int:
    """enroot's 50-slurm-pytorch.sh hook (pyxis): SLURM_JOB_ID % 4536 + 61000 (domain-facts §E.2)."""
    return int(re.sub(r"\D", "", job_id) or "0") % 4536 + 61000


_HOST_RE = re.compile(r"[A-Za-z0-9._:%-]{1,253}")


def master_addr(env: Mapping[str, str]) -> str | None:
    raw = env.get("MASTER_ADDR")
    if raw is None:
        return None
    if not _HOST_RE.fullmatch(raw.strip()):
        raise UsageError(f"MASTER_ADDR={_shown(raw)} is not a host name or an IP address")
    return raw.strip()


def master_port(env: Mapping[str, str]) -> int | None:
    raw = env.get("MASTER_PORT")
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]{1,5}", raw.strip()) or not 1 <= int(raw) <= 65535:
        raise UsageError(f"MASTER_PORT={_shown(raw)} is not a TCP port (expected 1-65535)")
    return int(raw)


def launch_env(env: Mapping[str, str], task: Task, *, require: bool = False) -> tuple[dict[str, Value], list[Finding]]:
    """RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as this task will have them, and what is wrong."""
    found: list[Finding] = []
    values: dict[str, Value] = {}
    expected: dict[str, int | None] = {"RANK": task.rank, "LOCAL_RANK": task.local_id, "WORLD_SIZE": task.ntasks}
    derived: list[str] = []
    for name, slurm_value in expected.items():
        what = "a number of tasks" if name == "WORLD_SIZE" else "a rank"
        given = read_int(env, name, what=what, minimum=1 if name == "WORLD_SIZE" else 0)
        if given is None:
            if slurm_value is not None:
                values[name] = Value(name, str(slurm_value), "derived")
                derived.append(name)
            continue
        values[name] = Value(name, str(given), "set")
        source = DERIVED_FROM[name] if name != "WORLD_SIZE" or task.in_step else "SLURM_NTASKS"
        if not task.in_step and name in ("RANK", "LOCAL_RANK"):
            found.append(
                Finding(
                    "warn",
                    "env",
                    f"{name}={given} is set in the batch script: srun passes it unchanged to every task, "
                    f"so each would be {name.lower().replace('_', ' ')} {given}",
                    f"Set it per task (srun bash -c '{name}=${source} exec python train.py') or leave it "
                    "to the framework, which derives it from Slurm's variables.",
                )
            )
        elif slurm_value is not None and given != slurm_value:
            status = "fail" if task.in_step else "warn"
            said = f"{name}={given} but {source}={slurm_value}"
            if task.in_step:
                said += f": this task would join as {name.lower().replace('_', ' ')} {given}"
            else:
                said += ": right only if each task starts WORLD_SIZE/SLURM_NTASKS processes (torchrun)"
            found.append(
                Finding(
                    status,
                    "env",
                    said,
                    f"Export {name} per task from {source} (or unset it and let the framework derive it); "
                    "a value exported in the batch script is the same in every task.",
                )
            )
    addr = master_addr(env)
    first = task.nodes[0]
    if addr is None:
        values["MASTER_ADDR"] = Value("MASTER_ADDR", first, "derived")
        derived.append("MASTER_ADDR")
        if task.step_nodes[0] != first:
            found.append(
                Finding(
                    "warn",
                    "master",
                    f"MASTER_ADDR would be derived as {first}, the job's first node, but rank 0 of this step runs on "
                    f"{task.step_nodes[0]}",
                    "Export MASTER_ADDR as the step's first node: "
                    "scontrol show hostnames $SLURM_STEP_NODELIST | head -1",
                )
            )
    else:
        values["MASTER_ADDR"] = Value("MASTER_ADDR", addr, "set")
    port = master_port(env)
    if port is None:
        values["MASTER_PORT"] = Value("MASTER_PORT", str(lightning_port(task.job_id)), "derived")
        derived.append("MASTER_PORT")
    else:
        values["MASTER_PORT"] = Value("MASTER_PORT", str(port), "set")
        if port < 1024:
            found.append(
                Finding(
                    "warn",
                    "master",
                    f"MASTER_PORT={port} is a privileged port: a job that is not root cannot listen on it",
                    "Use a port above 1024, e.g. 15000 + the last 4 digits of SLURM_JOB_ID.",
                )
            )
    if derived:
        how = ", ".join(f"{n} from {DERIVED_FROM[n]}" for n in derived)
        if require:
            found.append(
                Finding(
                    "fail",
                    "env",
                    f"not set: {', '.join(derived)} (--require-env: the training calls init_process_group('env://'))",
                    "Export them per task: RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
                    "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1) MASTER_PORT=...",
                )
            )
        else:
            found.append(Finding("ok", "env", f"derivable: {how}, {HOW}"))
    set_ones = [v for v in values.values() if v.source == "set"]
    if set_ones and not any(f.topic == "env" and f.status != "ok" for f in found):
        found.append(Finding("ok", "env", "set and consistent with Slurm: " + ", ".join(v.name for v in set_ones)))
    return values, found


# -- the warning before the time limit -----------------------------------------------------------

_SIGNALS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12,
    "PIPE": 13, "ALRM": 14, "TERM": 15, "CONT": 18, "STOP": 19, "TSTP": 20, "URG": 23, "XCPU": 24,
    "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "PWR": 30,
}  # fmt: skip
#: sbatch(1): "Due to the resolution of event handling by Slurm, the signal may be sent up to 60
#: seconds earlier than specified"; without @TIME it is 60 s.
SIGNAL_RESOLUTION_S = 60
DEFAULT_SIGNAL_TIME_S = 60
DEFAULT_KILL_WAIT_S = 30  # slurm.conf(5) KillWait default


class SignalSpec(NamedTuple):
    name: str  # USR1, or the number as given
    seconds: int  # before the time limit
    batch_only: bool  # B: the batch shell only, not the steps
    source: str  # where it was read

    def __str__(self) -> str:
        return f"{'B:' if self.batch_only else ''}{self.name}@{self.seconds}"


def parse_signal(spec: str, source: str) -> SignalSpec:
    """sbatch's `--signal=[{R|B}:]<sig_num>[@sig_time]`; ValueError naming what is wrong."""
    m = re.fullmatch(r"\s*(?:([RB]{1,2}):)?(?:SIG)?([A-Za-z]+[0-9]?|[0-9]{1,2})(?:@([0-9]{1,7}))?\s*", spec)
    if not m:
        raise ValueError(f"{source}: --signal {spec!r} is not [{{R|B}}:]SIGNAL[@SECONDS] (e.g. B:USR1@300)")
    flags, sig, when = m.groups()
    name = sig.upper()
    if not name.isdigit() and name not in _SIGNALS:
        raise ValueError(f"{source}: --signal {spec!r}: {sig} is not a signal name")
    if name.isdigit() and not 1 <= int(name) <= 64:
        raise ValueError(f"{source}: --signal {spec!r}: signal number {name} is out of range")
    seconds = int(when) if when is not None else DEFAULT_SIGNAL_TIME_S
    if seconds > 65535:  # sbatch: "sig_time must be between 0 and 65535"
        raise ValueError(f"{source}: --signal {spec!r}: the time is above 65535 s")
    return SignalSpec(name, seconds, "B" in (flags or ""), source)


def signal_from_script(text: str) -> tuple[str, int] | None:
    """The `--signal` of a batch script's #SBATCH lines, with its line; sbatch stops at the first command."""
    found = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        words = stripped[len("#SBATCH") :].split("#", 1)[0].split()
        for i, word in enumerate(words):
            if word.startswith("--signal="):
                found = (word.partition("=")[2], number)
            elif word == "--signal" and i + 1 < len(words):
                found = (words[i + 1], number)
    return found


def parse_scontrol_job(text: str) -> dict[str, str]:
    """`scontrol show job ID` -> {field: value} (the one-line and the multi-line forms)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)", text)}


def parse_duration(text: str) -> float | None:
    """Slurm's [days-]hours:minutes:seconds (TimeLimit=1-00:00:00, 30:00, 5); None for UNLIMITED and the like."""
    m = re.fullmatch(r"\s*(?:([0-9]{1,5})-)?([0-9]{1,7})(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?\s*", text)
    if not m:
        return None
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        h, mi, s = parts
        return float(int(days) * 86400 + h * 3600 + mi * 60 + s)
    if len(parts) == 1:  # minutes
        return float(parts[0] * 60)
    if len(parts) == 2:  # minutes:seconds
        return float(parts[0] * 60 + parts[1])
    return float(parts[0] * 3600 + parts[1] * 60 + parts[2])


def parse_kill_wait(config: str) -> int | None:
    """`KillWait                = 30 sec` of `scontrol show config`."""
    m = re.search(r"^KillWait\s*=\s*([0-9]+)", config, re.MULTILINE)
    return int(m.group(1)) if m else None


_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)(B?)\s*(?:/\s*s(?:ec)?|ps)?\s*$", re.IGNORECASE)


def parse_rate(text: str) -> float:
    """'2GB/s', '2.5 GiB/s', '800MB/s', '2G' -> bytes per second (ValueError otherwise).

    GB (as storage.checkpoint_write reports GB/s) is 10^9; GiB and a bare G are 2^30."""
    m = _RATE_RE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"expected a bandwidth like 2GB/s or 800MB/s, got {text!r}")
    number, prefix, binary, byte = m.groups()
    power = " KMGT".index(prefix.upper() or " ")
    base = 1000 if byte and not binary and prefix else 1024
    return float(number) * float(base**power)


def _seconds(s: float) -> str:
    if s >= 600:
        return f"{s / 60:.1f} min" if s % 60 else f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def judge_lead_time(
    spec: SignalSpec | None,
    *,
    time_limit_s: float | None,
    kill_wait_s: int | None,
    size: int | None,
    bandwidth: float | None,
    nodes: int,
    in_step: bool,
) -> list[Finding]:
    """Is there time, between the warning and SIGKILL, to write the emergency checkpoint?

    Without --signal, the warning is the SIGTERM at the time limit, and SIGKILL follows KillWait
    seconds later. With --signal=SIG@T, SIG comes T to T+60 s before the limit (judged on T).
    The checkpoint's `size` is the job's, written by its `nodes` in parallel at `bandwidth` per
    node (what storage.checkpoint_write measures): size / nodes / bandwidth seconds.
    """
    out: list[Finding] = []
    kill_wait = kill_wait_s if kill_wait_s is not None else DEFAULT_KILL_WAIT_S
    kw_said = f"KillWait={kill_wait} s" + ("" if kill_wait_s is not None else " (Slurm's default; not read)")
    if time_limit_s is None:
        return [Finding("skip", "signal", "the job has no time limit (TimeLimit=UNLIMITED): no warning is needed")]
    need = None
    if size is not None and bandwidth is not None:
        need = size / max(nodes, 1) / bandwidth
    needs = (
        f"the checkpoint needs {_seconds(need)} ({_size(size)} over {nodes} node{'s' if nodes != 1 else ''} "
        f"at {_size(bandwidth)}/s each)"
        if need is not None and size is not None and bandwidth is not None
        else ""
    )
    advice = _advice(need)
    if spec is None:
        message = f"no --signal: the only warning is SIGTERM at the time limit, {kw_said} before SIGKILL"
        if need is None:
            out.append(Finding("warn", "signal", message, advice))
        elif need <= kill_wait:
            out.append(Finding("warn", "signal", f"{message}; {needs}: it fits only if the training catches SIGTERM"))
        else:
            out.append(Finding("warn", "signal", f"{message}; {needs}: the checkpoint cannot be written", advice))
        return out
    said = f"--signal={spec} ({spec.source}): SIG{spec.name} {_seconds(spec.seconds)} before the limit"
    if spec.seconds >= time_limit_s:
        out.append(
            Finding(
                "warn",
                "signal",
                f"{said}, but the time limit is {_seconds(time_limit_s)}: it comes at the start",
                "Ask for a warning shorter than the time limit.",
            )
        )
    elif need is None:
        out.append(Finding("ok", "signal", f"{said}, then SIGTERM, and SIGKILL {kill_wait} s later ({kw_said})"))
    elif need <= spec.seconds:
        out.append(Finding("ok", "signal", f"{said}; {needs}: it fits, {_seconds(spec.seconds - need)} to spare"))
    elif need <= spec.seconds + kill_wait:
        out.append(
            Finding(
                "warn",
                "signal",
                f"{said}; {needs}: it fits only if the training ignores the SIGTERM at the limit ({kw_said})",
                advice,
            )
        )
    else:
        out.append(
            Finding(
                "warn",
                "signal",
                f"{said}; {needs}: more than the {_seconds(spec.seconds + kill_wait)} before SIGKILL",
                advice,
            )
        )
    if spec.batch_only and in_step:
        out.append(
            Finding(
                "warn",
                "signal",
                f"--signal={spec} goes to the batch shell only, not to the tasks of srun steps",
                "Drop B: to signal the steps, or trap it in the script and forward it "
                "(bash runs a trap only when `wait` returns: start srun with & and wait).",
            )
        )
    return out


def _advice(need: float | None) -> str:
    if need is None:
        return "Ask for a warning: #SBATCH --signal=USR1@300 (and have the training checkpoint on SIGUSR1)."
    lead = max(DEFAULT_SIGNAL_TIME_S, math.ceil(need * 1.25 / 60.0) * 60)
    return f"Ask for a longer warning: #SBATCH --signal=USR1@{lead} (the checkpoint time plus a quarter, in minutes)."


def _size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return "?"


# -- the binding: GPUs, NICs, NUMA nodes --------------------------------------------------------


class Gpu(NamedTuple):
    number: int  # in PCI order (nvidia-smi's index)
    bdf: str
    minor: int | None  # /dev/nvidiaN
    uuid: str
    numa: int | None
    path: tuple[str, ...]  # PCI path from the root complex


class Nic(NamedTuple):
    hca: str
    bdf: str
    numa: int | None
    path: tuple[str, ...]
    ports: list[Port]
    uverbs: str | None


class Topology(NamedTuple):
    gpus: list[Gpu]
    nics: list[Nic]
    node_cpus: dict[int, set[int]]  # NUMA node -> its CPUs
    driver: bool  # /proc/driver/nvidia/gpus exists


_BDF_RE = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _read(path: Path, limit: int = 65536) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _numa(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"\s*-?[0-9]{1,4}\s*", text):
        return None
    n = int(text)
    return n if n >= 0 else None


def _pci_path(root: Path, device: Path) -> tuple[str, ...]:
    """The BDFs from the root complex down to the device: realpath of its sysfs folder."""
    try:
        real = Path(os.path.realpath(device))
        parts = real.relative_to(Path(os.path.realpath(root / "sys" / "devices"))).parts
    except (OSError, ValueError):
        return ()
    return tuple(p for p in parts if p.startswith("pci") or _BDF_RE.fullmatch(p))


def parse_cpulist(text: str) -> set[int]:
    """'0-23,96-119' -> the CPUs."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        m = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", part.strip())
        if m:
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            cpus.update(range(lo, min(hi, lo + 65536) + 1))
    return cpus


def read_topology(root: Path) -> Topology:
    """GPUs, RDMA NICs and NUMA nodes under `root` (/ on a node; a copy of its files in tests)."""
    gpus: list[Gpu] = []
    proc = root / "proc" / "driver" / "nvidia" / "gpus"
    driver = proc.is_dir()
    try:
        bdfs = sorted(p.name for p in proc.iterdir() if _BDF_RE.fullmatch(p.name)) if driver else []
    except OSError:
        bdfs = []
    for index, bdf in enumerate(bdfs):
        info = _read(proc / bdf / "information") or ""
        minor = re.search(r"^Device Minor:\s*([0-9]+)", info, re.MULTILINE)
        uuid = re.search(r"^GPU UUID:\s*(\S+)", info, re.MULTILINE)
        dev = root / "sys" / "bus" / "pci" / "devices" / bdf.lower()
        gpus.append(
            Gpu(
                index,
                bdf.lower(),
                int(minor.group(1)) if minor else None,
                uuid.group(1) if uuid else "",
                _numa(_read(dev / "numa_node")),
                _pci_path(root, dev),
            )
        )
    nics: list[Nic] = []
    ib = root / "sys" / "class" / "infiniband"
    lines: list[str] = []
    uverbs: dict[str, str] = {}
    try:
        hcas = sorted((p.name for p in ib.iterdir()), key=natural_key) if ib.is_dir() else []
        verbs_dir = root / "sys" / "class" / "infiniband_verbs"
        for u in sorted(verbs_dir.iterdir()) if verbs_dir.is_dir() else []:
            name = (_read(u / "ibdev") or "").strip()
            if name:
                uverbs.setdefault(name, u.name)
    except OSError:
        hcas = []
    for hca in hcas:
        try:
            port_dirs = sorted((ib / hca / "ports").iterdir(), key=lambda p: natural_key(p.name))
        except OSError:
            port_dirs = []
        for port_dir in port_dirs:
            for field in ("state", "phys_state", "rate", "link_layer"):
                value = _read(port_dir / field)
                if value is not None:
                    lines.append(f"/sys/class/infiniband/{hca}/ports/{port_dir.name}/{field}:{value.strip()}")
    ports = parse_sysfs(lines).ports
    for hca in hcas:
        dev = ib / hca / "device"
        real = os.path.realpath(dev)
        bdf = Path(real).name if _BDF_RE.fullmatch(Path(real).name) else ""
        nics.append(
            Nic(
                hca,
                bdf.lower(),
                _numa(_read(dev / "numa_node")),
                _pci_path(root, dev),
                ports.get(hca, []),
                uverbs.get(hca),
            )
        )
    node_cpus: dict[int, set[int]] = {}
    nodes_dir = root / "sys" / "devices" / "system" / "node"
    try:
        for d in nodes_dir.iterdir() if nodes_dir.is_dir() else []:
            m = re.fullmatch(r"node([0-9]+)", d.name)
            text = _read(d / "cpulist") if m else None
            if m and text is not None:
                node_cpus[int(m.group(1))] = parse_cpulist(text)
    except OSError:
        pass
    return Topology(gpus, nics, node_cpus, driver)


def path_kind(gpu: Gpu, nic: Nic) -> tuple[int, str]:
    """How far a NIC is from a GPU, in nvidia-smi topo's words (smaller is nearer).

    PIX/PXB: behind a common PCIe bridge; PHB: the same root complex; NODE: the same NUMA node;
    SYS: across the socket interconnect. Unknown paths fall back to the NUMA nodes."""
    common = 0
    for a, b in zip(gpu.path, nic.path, strict=False):
        if a != b:
            break
        common += 1
    if gpu.path and nic.path:
        if common >= 2:  # the root complex and at least one bridge
            return (0, "PIX" if common >= len(gpu.path) - 1 and common >= len(nic.path) - 1 else "PXB")
        if common == 1:
            return (1, "PHB")
    if gpu.numa is not None and nic.numa is not None:
        return (2, "NODE") if gpu.numa == nic.numa else (3, "SYS")
    return (4, "?")


def nearest_nic(gpu: Gpu, nics: Sequence[Nic], position: int) -> tuple[Nic, str] | None:
    """The NIC NCCL will likely give this GPU: among the candidates, those at the shortest PCI path
    (NCCL's topology search prefers PIX, PXB, PHB, then the same NUMA node), shared round-robin
    by `position` when several are equally near. An approximation of NCCL's own choice: its log
    (NCCL_DEBUG=INFO, `NET/IB : Using`, channel lines) is the final word (`clustercheck nccl-log`)."""
    if not nics:
        return None
    ranked = sorted(((path_kind(gpu, n), n) for n in nics), key=lambda kn: (kn[0][0], natural_key(kn[1].hca)))
    best = ranked[0][0][0]
    nearest = [(k, n) for k, n in ranked if k[0] == best]
    kind, nic = nearest[position % len(nearest)]
    return nic, kind[1]


class Pick(NamedTuple):
    entry: str  # as CUDA_VISIBLE_DEVICES names it
    gpu: Gpu | None  # None: not found on this node


def visible_gpus(cvd: str | None, slurm_gpus: Sequence[str] | None, topo: Topology) -> list[Pick] | None:
    """The GPUs this task's CUDA sees, in order; None when CUDA_VISIBLE_DEVICES is unset.

    Numeric entries are host indices unless Slurm renumbered them from 0 inside the step's
    device cgroup (ConstrainDevices): then an entry is a place in SLURM_STEP_GPUS (SLURM_STEP_GPUS
    '4,5,6,7' with CUDA_VISIBLE_DEVICES '2' is GPU 6). Entries that are all among SLURM_STEP_GPUS
    are read as host indices (the two readings agree when the step's GPUs start at 0). A host
    index is the GPU with that /dev/nvidiaN minor (gres.conf File=/dev/nvidia[0-7]), else the one
    at that place in PCI order. GPU-<uuid> entries (or their prefixes) are matched by UUID."""
    if cvd is None:
        return None
    entries = [e.strip() for e in cvd.split(",")] if cvd.strip() and cvd.strip() != "NoDevFiles" else []
    numeric = [e for e in entries if re.fullmatch(r"[0-9]{1,4}", e)]
    relative = bool(
        slurm_gpus
        and numeric
        and len(numeric) == len(entries)
        and not set(numeric) <= set(slurm_gpus)
        and all(int(e) < len(slurm_gpus) for e in numeric)
    )
    picks: list[Pick] = []
    for entry in entries:
        gpu: Gpu | None = None
        if entry in numeric:
            host = int(slurm_gpus[int(entry)]) if relative and slurm_gpus else int(entry)
            by_minor = [g for g in topo.gpus if g.minor == host]
            minors_known = any(g.minor is not None for g in topo.gpus)
            if by_minor:
                gpu = by_minor[0]
            elif not minors_known and host < len(topo.gpus):
                gpu = topo.gpus[host]
        elif entry.upper().startswith("GPU-"):
            matches = [g for g in topo.gpus if g.uuid.upper().startswith(entry.upper())]
            gpu = matches[0] if len(matches) == 1 else None
        picks.append(Pick(entry[:40], gpu))
    return picks


#: Where libibverbs.so.1 lives (facts.infiniband.LIBRARY_SCAN's folders, read here without a shell).
LIBRARY_DIRS = (
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/powerpc64le-linux-gnu",
)


def library_paths(root: Path, env: Mapping[str, str]) -> list[str]:
    """libibverbs.so.1 and the verbs providers (`<libdir>/libibverbs/lib<name>-rdmav<N>.so`) under `root`,
    in the standard folders, LD_LIBRARY_PATH and those /etc/ld.so.conf.d/*.conf adds."""
    folders = list(LIBRARY_DIRS) + [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    try:
        confs = sorted((root / "etc" / "ld.so.conf.d").glob("*.conf"))
    except OSError:
        confs = []
    for conf in confs:
        folders += [w.split()[0] for w in (_read(conf) or "").splitlines() if w.startswith("/") and w.split()]
    found: list[str] = []
    for folder in dict.fromkeys(folders):
        base = root / folder.lstrip("/")
        with contextlib.suppress(OSError):
            if (base / "libibverbs.so.1").exists():
                found.append(f"{folder.rstrip('/')}/libibverbs.so.1")
            if (base / "libibverbs").is_dir():
                found += [
                    f"{folder.rstrip('/')}/libibverbs/{p.name}"
                    for p in sorted((base / "libibverbs").glob("lib*-rdmav*.so"))
                ]
    return found
