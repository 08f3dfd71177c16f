"""`clustercheck job`: in-job readiness, the seam between Slurm and the training framework.

Run as the first step of a training sbatch script (`srun clustercheck job`, with the training
step's task layout) or in the batch script itself. Each task judges what it sees: its launch
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, set or derivable, and
consistent with SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST), MASTER_ADDR
resolving, MASTER_PORT free on rank 0's node, its GPU, the NIC NCCL will likely pick for it and
their NUMA nodes, the NCCL settings of its environment, /dev/infiniband and the verbs libraries
(inside a container too). Rank 0 alone asks slurmctld (scontrol) for the time limit, KillWait
and the batch script's --signal, and judges the lead time for an emergency checkpoint.

How results come together: every task writes its record into a folder (--gather, default a
node-local one under $TMPDIR or /tmp, per job step); local task 0 of each node waits for the
node's tasks and prints one table (or one JSON line) for the node; srun collects the lines.
With --summary and --gather on a folder every node shares, rank 0 alone prints every node's part
and the step's summary (what differs between tasks). One writer matters for JSON: slurmstepd
forwards a line longer than 1024 bytes in pieces, and other tasks' lines can land between them
(table lines are kept shorter); without a shared folder, `srun --output=job-%j-%N.json` gives
each node's JSON a file of its own.

Exit codes: 0 when nothing fails (warnings are printed, not fatal: it sits at the top of every
training script), 2 when something will break the job (a wrong RANK, an unresolvable
MASTER_ADDR, a taken port, NCCL settings that force TCP, no GPU, /dev/infiniband missing),
64 for bad input (outside a job, garbage in a variable, a bad option). --strict adds 1 for
warnings and 3 for what could not be told.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from clustercheck.errors import UsageError
from clustercheck.facts import launch
from clustercheck.facts.launch import Finding, Task


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("job")(job)


def job(
    fmt: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="table, or json: one line per node (and one for the step with --summary)."),
    ] = (OutputFormat.table),
    checkpoint_size: Annotated[
        str | None,
        typer.Option("--checkpoint-size", help="The job's emergency checkpoint, e.g. 2TB or 800GiB (all ranks)."),
    ] = None,
    checkpoint_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-bandwidth",
            help="Write bandwidth per node, e.g. 2GB/s (what storage.checkpoint_write measured).",
        ),
    ] = None,
    signal_spec: Annotated[
        str | None,
        typer.Option(
            "--signal",
            help="The job's --signal (e.g. B:USR1@300), when it was given on the sbatch command line "
            "[default: read from the batch script's #SBATCH lines].",
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            help="Take --checkpoint-size from this profile's storage.checkpoint_write (its checkpoint_size).",
        ),
    ] = None,
    require_env: Annotated[
        bool,
        typer.Option(
            "--require-env",
            help="RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT must be exported "
            "(init_process_group('env://')); otherwise deriving them from Slurm's variables is fine.",
        ),
    ] = False,
    gather: Annotated[
        Path | None,
        typer.Option(
            "--gather",
            help="Folder where the tasks leave their records for their node's table "
            "[default: a node-local folder under $TMPDIR or /tmp].",
        ),
    ] = None,
    summary: Annotated[
        bool,
        typer.Option(
            "--summary",
            help="Rank 0 alone prints: every node's table, then what differs between the step's tasks "
            "(needs --gather on a folder every node shares).",
        ),
    ] = False,
    wait: Annotated[
        float, typer.Option("--wait", min=0.0, max=600.0, help="Seconds local task 0 waits for its node's tasks.")
    ] = 30.0,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings and 3 on what could not be told.")] = (
        False
    ),
    root: Annotated[
        Path,
        typer.Option("--root", help="Read /sys, /proc/driver/nvidia, /dev and /etc/nccl.conf under this folder."),
    ] = Path("/"),
) -> int:
    """Is this job ready to train? Each task's launch environment, binding and NCCL settings, and
    the warning before the time limit; one table per node.

    Run it as the first step of a training script, with the training step's layout:
    `srun --ntasks-per-node=8 --gpus-per-node=8 clustercheck job --checkpoint-size 2TB
    --checkpoint-bandwidth 2GB/s || exit 1`. Exit 0 unless something will break the job (2);
    64 outside a job or for garbage in Slurm's or the launcher's variables.
    """
    env = dict(os.environ)
    task = launch.slurm_task(env, socket.gethostname())
    size = None
    if checkpoint_size is None and profile is not None:
        checkpoint_size = profile_checkpoint_size(profile)
    if checkpoint_size is not None:
        from clustercheck.registry import Size

        try:
            size = int(Size.parse(checkpoint_size))
        except ValueError as exc:
            raise UsageError(f"--checkpoint-size: {exc}") from None
    bandwidth = None
    if checkpoint_bandwidth is not None:
        try:
            bandwidth = launch.parse_rate(checkpoint_bandwidth)
        except ValueError as exc:
            raise UsageError(f"--checkpoint-bandwidth: {exc}") from None
    if summary and gather is None:
        raise UsageError("--summary needs --gather DIR, a folder every node of the job shares (rank 0 reads it)")
    if (size is None) != (bandwidth is None):
        raise UsageError("--checkpoint-size and --checkpoint-bandwidth go together: the time is one over the other")
    spec = None
    if signal_spec is not None:
        try:
            spec = launch.parse_signal(signal_spec, "--signal")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    record = evaluate(task, env, root=root, size=size, bandwidth=bandwidth, spec=spec, require_env=require_env)
    if not task.in_step:
        node = node_report(task, [record], expected=1)
        _emit(node, fmt)
        return exit_code(node["status"], strict)
    folder = _gather_folder(gather, task)
    if folder is None:  # cannot gather: every task says its own part
        node = node_report(task, [record], expected=1)
        _emit(node, fmt)
        return exit_code(node["status"], strict)
    if not _write_record(folder, task, record):  # this task says its own part
        _emit(node_report(task, [record], expected=1), fmt)
        return exit_code(record["status"], strict)
    if summary:  # rank 0 alone prints, every node's part and the step's: nothing interleaves in srun's output
        if task.rank != 0:
            return exit_code(record["status"], strict)
        everyone = _collect(folder, None, task.ntasks or 1, wait, remove=True)
        statuses = []
        for name, count in _step_layout(task, everyone):
            node = node_report(task._replace(node=name), [r for r in everyone if r["node"] == name], expected=count)
            _emit(node, fmt)
            statuses.append(node["status"])
        report = job_summary(task, everyone)
        _emit_summary(report, fmt)
        return exit_code(launch.worst([*statuses, report["status"]]), strict)
    if task.local_id != 0:
        return exit_code(record["status"], strict)
    records = _collect(folder, task.node, task.tasks_on_node or 1, wait, remove=True)
    node = node_report(task, records, expected=task.tasks_on_node or 1)
    _emit(node, fmt)
    return exit_code(node["status"], strict)


def _step_layout(task: Task, records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The step's nodes with their task counts, and any node a record names beyond them."""
    layout = [
        (name, task.counts[i] if i < len(task.counts) else 1)
        for i, name in enumerate(task.step_nodes)
        if i < len(task.counts) or any(r["node"] == name for r in records)
    ]
    known = {name for name, _ in layout}
    extra = sorted({str(r["node"]) for r in records} - known)
    return layout + [(name, sum(1 for r in records if r["node"] == name)) for name in extra]


def profile_checkpoint_size(ref: str) -> str:
    """The checkpoint_size a profile gives storage.checkpoint_write (loads the profile and its checks)."""
    from clustercheck import profile as profiles

    prof = profiles.load(ref)
    for c in prof.checks:
        if c.id == "storage.checkpoint_write" and c.params.get("checkpoint_size"):
            return str(int(c.params["checkpoint_size"]))
    raise UsageError(
        f"--profile {ref}: it runs no storage.checkpoint_write with a checkpoint_size; give --checkpoint-size"
    )


def exit_code(status: str, strict: bool) -> int:
    if status == "fail":
        return 2
    if strict:
        return {"warn": 1, "error": 3}.get(status, 0)
    return 0


# -- one task ------------------------------------------------------------------------------------


def evaluate(
    task: Task,
    env: dict[str, str],
    *,
    root: Path,
    size: int | None = None,
    bandwidth: float | None = None,
    spec: launch.SignalSpec | None = None,
    require_env: bool = False,
) -> dict[str, Any]:
    """This task's record: its rows (one in a step; one per planned task in the batch script) and findings."""
    values, findings = launch.launch_env(env, task, require=require_env)
    addr = values["MASTER_ADDR"].value
    port = int(values["MASTER_PORT"].value)
    findings += master_findings(task, addr, port, rank0=task.rank == 0)
    if task.rank == 0:
        findings += signal_findings(task, spec, size=size, bandwidth=bandwidth)
    topo = launch.read_topology(root)
    container = container_kind(env, root)
    local_rank = int(values["LOCAL_RANK"].value) if "LOCAL_RANK" in values else task.local_id
    settings, conf_findings = nccl_settings(env, root)
    findings += conf_findings
    candidates, nccl_found = nccl_findings(settings, topo, root, task)
    findings += nccl_found
    rows: list[dict[str, Any]] = []
    if task.in_step:
        row, found = binding(task, env, topo, candidates, local_rank, position=local_rank, in_step=True)
        row["rank"] = task.rank  # SLURM_PROCID, as the findings name ranks; a different RANK is a finding
        rows.append(row)
        findings += found
    else:
        # the tasks srun will start here, or with one task per node (torchrun), one process per GPU it sees
        visible = launch.visible_gpus(env.get("CUDA_VISIBLE_DEVICES"), task.gpus, topo)
        gpus_seen = len(visible) if visible is not None else len(topo.gpus)
        planned = task.tasks_on_node if task.tasks_on_node and task.tasks_on_node > 1 else max(1, gpus_seen)
        for i in range(planned):
            row, found = binding(task, env, topo, candidates, i, position=i, in_step=False)
            row["rank"] = None
            rows.append(row)
            findings += [f._replace(message=f"local task {i}: {f.message}") for f in found]
    findings += rdma_findings(task, topo, rows, root, container)
    status = launch.worst(f.status for f in findings)
    return {
        "job": task.job_id,
        "step": task.step_id,
        "node": task.node,
        "rank": task.rank,
        "local_id": task.local_id,
        "ntasks": task.ntasks,
        "env": {v.name: {"value": v.value, "source": v.source} for v in values.values()},
        "container": container,
        "nccl": {s.name: s.value for s in settings.values()},
        "rows": rows,
        "findings": [f.to_json() for f in findings],
        "status": status,
    }


def _resolve(host: str, port: int, timeout: float = 5.0) -> tuple[list[str], str | None]:
    """getaddrinfo, bounded: a hung resolver must not hang the job."""
    answer: dict[str, Any] = {}

    def work() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer["addresses"] = list(dict.fromkeys(str(i[4][0]) for i in infos))
        except (OSError, UnicodeError, ValueError) as exc:
            answer["error"] = str(exc) or type(exc).__name__

    thread = threading.Thread(target=work, name="clustercheck-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return [], f"no answer from the resolver within {timeout:g} s"
    return answer.get("addresses", []), answer.get("error")


def master_findings(task: Task, addr: str, port: int, *, rank0: bool) -> list[Finding]:
    found: list[Finding] = []
    addresses, error = _resolve(addr, port)
    if error or not addresses:
        return [
            Finding(
                "fail",
                "master",
                f"MASTER_ADDR={addr} does not resolve on {task.node}: {error or 'no address'}",
                "Use a name every node resolves (the first node's hostname as `scontrol show hostnames` prints it, "
                "or its IP address); check /etc/hosts or DNS on this node.",
            )
        ]
    loopback = all(a.startswith("127.") or a == "::1" for a in addresses)
    if loopback and task.num_nodes > 1:
        found.append(
            Finding(
                "warn",
                "master",
                f"MASTER_ADDR={addr} resolves to loopback ({', '.join(addresses)}) in a {task.num_nodes}-node job: "
                "ranks on other nodes would connect to themselves (right only when every node is this machine)",
                "Use the first node's name or address, not localhost.",
            )
        )
    elif addr not in task.nodes and addr != task.nodes[0]:
        first, _ = _resolve(task.nodes[0], port)
        if first and not set(first) & set(addresses):
            found.append(
                Finding(
                    "warn",
                    "master",
                    f"MASTER_ADDR={addr} ({', '.join(addresses)}) is not a node of this job "
                    f"({launch._fold(task.nodes)}): every rank must reach rank 0's store there",
                    "Set MASTER_ADDR to the first node: scontrol show hostnames $SLURM_JOB_NODELIST | head -1",
                )
            )
    elif addr in task.nodes and addr != task.step_nodes[0]:
        found.append(
            Finding(
                "warn",
                "master",
                f"MASTER_ADDR={addr}, but rank 0 (which runs the rendezvous store) starts on {task.step_nodes[0]}",
                "Set MASTER_ADDR to the step's first node.",
            )
        )
    if not rank0:
        found.append(Finding("ok", "master", f"MASTER_ADDR={addr} resolves ({', '.join(addresses[:3])})"))
        return found
    found.append(port_free(task, addr, addresses[0], port))
    return found


def port_free(task: Task, addr: str, address: str, port: int) -> Finding:
    """Rank 0's node: can the rendezvous store listen on MASTER_ADDR:MASTER_PORT? (a bind, no traffic)"""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore does
        sock.bind((address, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return Finding(
                "fail",
                "master",
                f"MASTER_PORT {port} is in use on {task.node} ({address}), rank 0's node: the rendezvous store "
                "cannot listen there",
                f"Another process holds it (`ss -ltnp 'sport = :{port}'`): pick another MASTER_PORT, e.g. "
                f"15000 + the last 4 digits of SLURM_JOB_ID ({launch.lightning_port(task.job_id)}).",
            )
        if exc.errno == errno.EADDRNOTAVAIL:
            return Finding(
                "fail",
                "master",
                f"MASTER_ADDR={addr} resolves to {address}, which is not an address of {task.node}, where rank 0 "
                "runs the rendezvous store: the other ranks would wait for a store nobody runs",
                "Set MASTER_ADDR to the node of rank 0 (the step's first node).",
            )
        if exc.errno == errno.EACCES:
            return Finding(
                "fail",
                "master",
                f"MASTER_PORT {port} cannot be bound on {task.node}: {exc.strerror}",
                "Use a port above 1024.",
            )
        return Finding("error", "master", f"binding {address}:{port} on {task.node} failed: {exc.strerror or exc}")
    finally:
        sock.close()
    return Finding("ok", "master", f"MASTER_ADDR={addr} ({address}) is this node and port {port} is free on it")


def _scontrol(*args: str, timeout: float = 10.0) -> tuple[str | None, str]:
    try:
        proc = subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, errors="replace", timeout=timeout, check=False
        )
    except FileNotFoundError:
        return None, "scontrol is not installed here"
    except subprocess.TimeoutExpired:
        return None, f"`scontrol {' '.join(args)}` did not answer within {timeout:g} s"
    except OSError as exc:
        return None, f"`scontrol {' '.join(args)}` could not run: {exc}"
    if proc.returncode != 0:
        return None, f"`scontrol {' '.join(args)}` exited {proc.returncode}: {_last_line(proc.stderr)}"
    return proc.stdout, ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"


def signal_findings(
    task: Task, spec: launch.SignalSpec | None, *, size: int | None, bandwidth: float | None
) -> list[Finding]:
    """Rank 0 only (one query of slurmctld per job, not per task): TimeLimit, KillWait, --signal."""
    shown, why = _scontrol("show", "job", task.job_id)
    if shown is None:
        hint = ""
        if container_kind(dict(os.environ), Path("/")):
            hint = " (inside a container: run this step outside it, or give the container scontrol and slurm.conf)"
        return [Finding("error", "signal", f"the time limit could not be read: {why}{hint}")]
    fields = launch.parse_scontrol_job(shown)
    limit_text = fields.get("TimeLimit", "")
    limit = launch.parse_duration(limit_text)
    if limit is None and limit_text.upper() not in ("UNLIMITED", "PARTITION_LIMIT", "INFINITE"):
        return [Finding("error", "signal", f"TimeLimit={limit_text!r} of `scontrol show job` is not a duration")]
    config, _ = _scontrol("show", "config")
    kill_wait = launch.parse_kill_wait(config) if config else None
    found: list[Finding] = []
    if spec is None and fields.get("BatchFlag", "1") != "0":
        script, why = _scontrol("write", "batch_script", task.job_id, "-")
        if script is None:
            return [
                Finding(
                    "error",
                    "signal",
                    f"the batch script could not be read for its --signal ({why}); say it with --signal",
                )
            ]
        hit = launch.signal_from_script(script)
        if hit is not None:
            try:
                spec = launch.parse_signal(hit[0], f"batch script line {hit[1]}")
            except ValueError as exc:
                found.append(Finding("warn", "signal", str(exc)))
    found += launch.judge_lead_time(
        spec,
        time_limit_s=limit,
        kill_wait_s=kill_wait,
        size=size,
        bandwidth=bandwidth,
        nodes=task.num_nodes,
        in_step=task.in_step,
    )
    if spec is None and found and found[0].status == "warn":
        f = found[0]
        found[0] = f._replace(
            message=f.message + " (a --signal given on the sbatch command line is not visible here: pass it "
            "with --signal)"
        )
    return found


def container_kind(env: dict[str, str], root: Path) -> str | None:
    """Which container runtime this task runs in, from what each one leaves behind."""
    if env.get("SLURM_CONTAINER") or env.get("SLURM_CONTAINER_ID"):
        return "Slurm OCI container"
    if env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER") or (root / ".singularity.d").is_dir():
        return "apptainer"
    if env.get("ENROOT_ROOTFS") or env.get("PYXIS_RUNTIME_PATH") or env.get("container") == "enroot":
        return "enroot"
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run" / ".containerenv").exists():
        return "podman"
    return None


def nccl_settings(env: dict[str, str], root: Path) -> tuple[dict[str, Any], list[Finding]]:
    """The NCCL settings this task's NCCL will read: its environment, then NCCL_CONF_FILE or /etc/nccl.conf."""
    from clustercheck.facts.nccl_env import effective_settings, parse_nccl_conf

    conf = env.get("NCCL_CONF_FILE") or "/etc/nccl.conf"
    found: list[Finding] = []
    text = None
    path = root / conf.lstrip("/")
    with contextlib.suppress(OSError):
        if path.is_file():
            text = path.read_bytes()[: 1 << 20].decode("utf-8", "replace")
    pairs: list[tuple[str, str]] = []
    for name, value, line in parse_nccl_conf(text or ""):
        if name != name.strip() and name.strip().startswith("NCCL_"):
            found.append(
                Finding("warn", "nccl", f"{conf}:{line}: `{name}=` has blanks around the name, so it is not set")
            )
        pairs.append((name, value))
    job_env = sorted((k, v) for k, v in env.items() if k.startswith("NCCL_"))
    return effective_settings([("job environment", job_env), (conf, pairs)]), found


def nccl_findings(
    settings: dict[str, Any], topo: launch.Topology, root: Path, task: Task
) -> tuple[list[launch.Nic], list[Finding]]:
    """rdma.nccl_env's judgement of the job's own settings, and the NICs NCCL may use."""
    from clustercheck.facts.nccl_env import judge_nccl_settings, parse_nccl_if_list, strtoll

    def interfaces() -> list[str]:
        try:
            return sorted(os.listdir(root / "sys" / "class" / "net"))
        except OSError:
            return []

    ports_of = {n.hca: n.ports for n in topo.nics}
    judged = judge_nccl_settings(settings, ports_of, interfaces, allow_sockets=task.num_nodes == 1)
    found = [Finding("fail", "nccl", m, _NCCL_REMEDY) for m in judged.fails]
    found += [Finding("warn", "nccl", m, _NCCL_REMEDY) for m in judged.warns]
    if not found:
        said = ", ".join(f"{s.name}={s.value}" for s in settings.values()) or "none"
        found.append(Finding("ok", "nccl", f"NCCL settings in this task's environment: {said}"))
    disabled = settings.get("NCCL_IB_DISABLE")
    if disabled is not None and strtoll(disabled.value):
        return [], found
    hca = settings.get("NCCL_IB_HCA")
    selector = parse_nccl_if_list(hca.value) if hca is not None else None
    candidates = [
        n
        for n in topo.nics
        if any(p.state == "ACTIVE" and (selector is None or selector.selects(p.hca, p.port)) for p in n.ports)
    ]
    return candidates, found


_NCCL_REMEDY = (
    "Remove the setting or correct it to this node's names (`ls /sys/class/infiniband`, `ls /sys/class/net`); "
    "prefer exact lists such as NCCL_IB_HCA==mlx5_0,mlx5_1, or leave NCCL_IB_HCA unset."
)


def binding(
    task: Task,
    env: dict[str, str],
    topo: launch.Topology,
    candidates: list[launch.Nic],
    local_rank: int,
    *,
    position: int,
    in_step: bool,
) -> tuple[dict[str, Any], list[Finding]]:
    """One rank's GPU, the NIC NCCL will likely pick for it, and their NUMA nodes."""
    found: list[Finding] = []
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    row: dict[str, Any] = {
        "local": local_rank,
        "cuda_visible_devices": cvd,
        "gpu": None,
        "gpu_bdf": None,
        "gpu_numa": None,
        "nic": None,
        "nic_numa": None,
        "path": None,
        "cpu_numa": None,
    }
    picks = launch.visible_gpus(cvd, task.gpus, topo)
    if picks is None:
        picks = [launch.Pick(str(g.number), g) for g in topo.gpus]
    if not topo.driver and not picks:
        found.append(
            Finding("skip", "gpu", "no NVIDIA driver here (/proc/driver/nvidia/gpus is absent): GPU binding not judged")
        )
        return row, found
    if not picks:
        what = "is empty" if cvd is not None else "is unset and the driver lists no GPU"
        found.append(
            Finding(
                "fail",
                "gpu",
                f"this task sees no GPU: CUDA_VISIBLE_DEVICES {what}" + (f" (={cvd!r})" if cvd else ""),
                "Ask for GPUs in the step: srun --gpus-per-task=1 (or --gpus-per-node=N with --ntasks-per-node=N).",
            )
        )
        return row, found
    if len(picks) == 1:
        pick = picks[0]
        if in_step and local_rank > 0:
            found.append(
                Finding(
                    "warn",
                    "gpu",
                    f"CUDA_VISIBLE_DEVICES={cvd} shows this task one GPU, as cuda:0; code that selects "
                    f"cuda:LOCAL_RANK (cuda:{local_rank}) fails with 'invalid device ordinal'",
                    "Select cuda:0 when each task sees one GPU (torch.cuda.set_device(0)), or give every task "
                    "the node's GPUs (--gpus-per-node) and keep cuda:LOCAL_RANK.",
                )
            )
    elif local_rank < len(picks):
        pick = picks[local_rank]
    else:
        found.append(
            Finding(
                "fail" if in_step else "warn",
                "gpu",
                f"LOCAL_RANK={local_rank} but this task sees {len(picks)} GPUs ({cvd or 'all'}): cuda:{local_rank} "
                "does not exist",
                "Start as many tasks per node as GPUs: --ntasks-per-node equal to --gpus-per-node.",
            )
        )
        return row, found
    gpu = pick.gpu
    row["gpu"] = pick.entry
    if gpu is None:
        found.append(
            Finding(
                "error",
                "gpu",
                f"GPU {pick.entry} of CUDA_VISIBLE_DEVICES is not among this node's GPUs "
                f"({len(topo.gpus)} in /proc/driver/nvidia/gpus): its NIC and NUMA node cannot be told",
            )
        )
        return row, found
    row.update(gpu=f"{gpu.number}", gpu_bdf=gpu.bdf, gpu_numa=gpu.numa)
    if in_step:
        cpu_nodes = _cpu_nodes(topo)
        row["cpu_numa"] = cpu_nodes
        if gpu.numa is not None and cpu_nodes and gpu.numa not in cpu_nodes:
            found.append(
                Finding(
                    "warn",
                    "numa",
                    f"this task's CPUs are on NUMA node {','.join(map(str, cpu_nodes))}, its GPU {gpu.number} "
                    f"({gpu.bdf}) on node {gpu.numa}: every host-side copy crosses the socket",
                    "Bind tasks near their GPUs: srun --cpu-bind=cores with gres.conf Cores=, or --gpu-bind=closest.",
                )
            )
    if not topo.nics:
        if task.num_nodes > 1:
            found.append(
                Finding(
                    "warn",
                    "nic",
                    "no RDMA NIC is visible to this task (/sys/class/infiniband is empty or absent): NCCL's "
                    "inter-node traffic will use TCP sockets",
                    "On bare metal: load mlx5_ib (see rdma.devices). In a container: pass the HCAs in "
                    "(enroot/pyxis: MELLANOX_VISIBLE_DEVICES=all; apptainer: no --contain, or --bind /dev/infiniband).",
                )
            )
        return row, found
    if not candidates:
        found.append(
            Finding(
                "fail" if task.num_nodes > 1 else "warn",
                "nic",
                "no ACTIVE RDMA port is left for NCCL (NCCL_IB_DISABLE, NCCL_IB_HCA, or every port down): "
                "inter-node traffic uses TCP sockets",
                "See the NCCL findings and rdma.ports.",
            )
        )
        return row, found
    picked = launch.nearest_nic(gpu, candidates, position)
    if picked is None:
        return row, found
    nic, kind = picked
    port = next((p for p in nic.ports if p.state == "ACTIVE"), None)
    row.update(nic=f"{nic.hca}:{port.port}" if port else nic.hca, nic_numa=nic.numa, path=kind)
    if kind == "SYS":
        local = [n.hca for n in topo.nics if n.numa is not None and n.numa == gpu.numa]
        why = (
            f"this node's NICs on node {gpu.numa} ({', '.join(local)}) are not ACTIVE or not selected by NCCL_IB_HCA"
            if local
            else f"no NIC of this node is on NUMA node {gpu.numa}"
        )
        found.append(
            Finding(
                "warn",
                "nic",
                f"GPU {gpu.number} (NUMA {gpu.numa}) gets NIC {nic.hca} (NUMA {nic.numa}), across the socket: {why}",
                "Bring up or select a NIC on the GPU's NUMA node (NCCL_IB_HCA), or check the NIC's slot and cabling.",
            )
        )
        return row, found
    own = launch.nearest_nic(gpu, topo.nics, position)
    if own is not None and launch.path_kind(gpu, own[0])[0] < launch.path_kind(gpu, nic)[0]:
        found.append(
            Finding(
                "warn",
                "nic",
                f"GPU {gpu.number}'s nearest NIC {own[0].hca} ({own[1]}) is not ACTIVE or not selected by NCCL_IB_HCA: "
                f"it gets {nic.hca} ({kind}), farther; NCCL uses GPUDirect RDMA "
                "only up to the distance NCCL_NET_GDR_LEVEL allows (PXB unless set)",
                "Bring the GPU's own NIC up (rdma.ports) or add it to NCCL_IB_HCA.",
            )
        )
    return row, found


def _cpu_nodes(topo: launch.Topology) -> list[int]:
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return []
    return sorted(n for n, cpus in topo.node_cpus.items() if cpus & mine)


def rdma_findings(
    task: Task, topo: launch.Topology, rows: list[dict[str, Any]], root: Path, container: str | None
) -> list[Finding]:
    """Where HCAs are visible: the uverbs device of each row's NIC, rdma_cm, libibverbs and its provider."""
    if not topo.nics:
        return []
    from clustercheck.facts.infiniband import library_problems

    where = f"inside the {container} container" if container else "in this task's environment"
    problems: list[str] = []
    dev = root / "dev" / "infiniband"
    used = {str(r["nic"]).split(":")[0] for r in rows if r.get("nic")}
    for nic in topo.nics:
        if nic.hca not in used:
            continue
        if nic.uverbs is None:
            problems.append(f"{nic.hca} has no uverbs device in /sys/class/infiniband_verbs")
        elif not os.access(dev / nic.uverbs, os.R_OK | os.W_OK):
            state = "is missing" if not (dev / nic.uverbs).exists() else "cannot be opened read-write"
            problems.append(f"/dev/infiniband/{nic.uverbs} (of {nic.hca}) {state}")
    if not (dev / "rdma_cm").exists():
        problems.append("/dev/infiniband/rdma_cm is missing")
    libraries = launch.library_paths(root, os.environ)
    providers = ["mlx5"] if any(n.hca.startswith("mlx5") for n in topo.nics) else []
    problems += library_problems(libraries, providers, where)
    if not problems:
        return [Finding("ok", "rdma", f"uverbs devices, rdma_cm and libibverbs are there {where}")]
    status = "fail" if task.num_nodes > 1 else "warn"
    return [
        Finding(
            status,
            "rdma",
            "; ".join(problems) + ": NCCL falls back to TCP sockets",
            "In a container: enroot/pyxis bind /dev unless ENROOT_RESTRICT_DEV is set; apptainer without --contain "
            "binds /dev (with it: --bind /dev/infiniband); the image needs libibverbs1 and ibverbs-providers "
            "(rdma-core) or MLNX_OFED's libraries.",
        )
    ]


# -- how the tasks of a node come together ----------------------------------------------------


def _gather_folder(gather: Path | None, task: Task) -> Path | None:
    """A folder of this job step's records, private to this user; None when it cannot be had."""
    base = gather if gather is not None else Path(os.environ.get("TMPDIR") or "/tmp")
    restarts = "".join(c for c in os.environ.get("SLURM_RESTART_COUNT", "0") if c.isdigit())[:6] or "0"
    # a requeued job runs its steps again under the same id: its restart count keeps them apart
    folder = base / f"clustercheck-job-{os.getuid()}-{task.job_id}.{task.step_id}.{restarts}"
    try:
        folder.mkdir(mode=0o700, parents=gather is not None, exist_ok=True)
        st = folder.lstat()
    except OSError as exc:
        if gather is not None:
            raise UsageError(f"--gather {gather}: cannot make {folder}: {exc.strerror or exc}") from None
        print(
            f"clustercheck: job: cannot gather in {folder} ({exc.strerror}): each task prints its own", file=sys.stderr
        )
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        message = f"{folder} is not a folder of this user's: records are not gathered there"
        if gather is not None:
            raise UsageError(f"--gather {gather}: {message}")
        print(f"clustercheck: job: {message}; each task prints its own", file=sys.stderr)
        return None
    return folder


def _write_record(folder: Path, task: Task, record: dict[str, Any]) -> bool:
    """Leave this task's record for its node's local task 0; False when it cannot be written.

    Another node's local task 0 may remove the folder (when it was empty: a folder every node
    shares, as on one machine) between this task making it and writing: make it again."""
    name = f"{task.node}.{task.rank}.json"
    tmp = folder / f".{name}.{os.getpid()}"
    for _ in range(3):
        try:
            tmp.write_text(json.dumps(record))
            os.replace(tmp, folder / name)
            return True
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                folder.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            print(f"clustercheck: job: cannot write {folder / name}: {exc.strerror or exc}", file=sys.stderr)
            break
    with contextlib.suppress(OSError):
        tmp.unlink()
    return False


def _collect(folder: Path, node: str | None, expected: int, wait: float, *, remove: bool) -> list[dict[str, Any]]:
    """The records of `node` (every node's: None) until `expected` have come (or `wait` ends)."""
    deadline = time.monotonic() + wait
    records: dict[str, dict[str, Any]] = {}
    pattern = f"{node}.*.json" if node is not None else "*.json"
    while True:
        with contextlib.suppress(OSError):
            for path in folder.glob(pattern):
                if path.name in records:
                    continue
                try:
                    data = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if isinstance(data, dict) and (node is None or data.get("node") == node):
                    records[path.name] = data
        if len(records) >= expected or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if remove:
        for name in records:
            with contextlib.suppress(OSError):
                (folder / name).unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()  # the last node's leader removes it; on a shared folder others may still write
    return sorted(records.values(), key=lambda r: int(r.get("rank", 0)))


#: What must be the same in every task of a step: a difference is a node (or a task) set up apart.
SAME_EVERYWHERE = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")


def job_summary(task: Task, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's view of the whole step: who did not report, and what differs between the tasks."""
    findings: list[Finding] = []
    expected = task.ntasks or 1
    seen = {int(r["rank"]) for r in records}
    missing = [r for r in range(expected) if r not in seen]
    if missing:
        findings.append(
            Finding(
                "error",
                "gather",
                f"{len(missing)} of {expected} tasks did not report (ranks {_ranges(missing)}): did they start, "
                "and is the --gather folder shared by every node?",
            )
        )
    per_task: list[tuple[dict[str, Any], dict[str, str]]] = []
    for r in records:
        values = {n: str(v["value"]) for n, v in r["env"].items() if n in SAME_EVERYWHERE}
        values |= {str(n): str(v) for n, v in dict(r.get("nccl") or {}).items()}
        values["container"] = str(r.get("container") or "none")
        per_task.append((r, values))
    names = sorted({n for _, values in per_task for n in values})
    facts: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r, values in per_task:
        for name in names:
            facts.setdefault(name, {}).setdefault(values.get(name, "unset"), []).append(r)
    for name, by_value in sorted(facts.items()):
        if len(by_value) < 2:
            continue
        parts = []
        for value, rs in sorted(by_value.items(), key=lambda kv: -len(kv[1])):
            nodes = sorted({str(r["node"]) for r in rs})
            parts.append(f"{value} on ranks {_ranges([int(r['rank']) for r in rs])} ({launch._fold(nodes)})")
        findings.append(
            Finding(
                "fail" if name in SAME_EVERYWHERE else "warn",
                "drift",
                f"{name} differs between the tasks: " + "; ".join(parts),
                "Set it once for the job (sbatch --export, the script) and the same way on every node "
                "(/etc/nccl.conf, the image).",
            )
        )
    nodes = sorted({str(r["node"]) for r in records})
    worst_tasks = launch.worst(str(r["status"]) for r in records)
    if not findings:
        findings.append(
            Finding("ok", "drift", f"{len(records)} tasks agree on {', '.join(sorted(facts)) or 'nothing'}")
        )
    return {
        "summary": True,
        "job": task.job_id,
        "step": task.step_id,
        "tasks": len(records),
        "expected": expected,
        "nodes": nodes,
        "tasks_status": worst_tasks,
        "findings": [f.to_json() for f in findings],
        "status": launch.worst([worst_tasks, *(f.status for f in findings)]),
    }


def _emit_summary(report: dict[str, Any], fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(report, separators=(",", ":")) + "\n")
    else:
        lines = [
            f"clustercheck job: job {report['job']} step {report['step']}: {report['tasks']} of "
            f"{report['expected']} tasks reported from {len(report['nodes'])} nodes "
            f"({launch._fold(report['nodes']) if report['nodes'] else 'none'}); worst task: {report['tasks_status']}"
        ]
        for f in report["findings"]:
            lines.append(f"{f['status']:>5}  {f['message']}")
            if f.get("remedy") and f["status"] in ("warn", "fail"):
                lines.append(f"       fix: {f['remedy']}")
        lines.append(f"job status: {report['status']}")
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def node_report(task: Task, records: list[dict[str, Any]], *, expected: int) -> dict[str, Any]:
    """The node's records, with what only the node's view shows (two ranks on one GPU, missing tasks)."""
    findings: list[dict[str, str]] = []
    if task.in_step and len(records) < expected:
        seen = {int(r["local_id"]) for r in records}
        missing = [i for i in range(expected) if i not in seen]
        findings.append(
            Finding(
                "error",
                "gather",
                f"{len(missing)} of {expected} tasks of {task.node} did not report (local ids "
                f"{_ranges(missing)}): did they start, and do they share {os.environ.get('TMPDIR') or '/tmp'}?",
            ).to_json()
        )
    by_gpu: dict[str, list[int]] = {}
    for r in records:
        for row in r["rows"]:
            if row.get("gpu_bdf") and task.in_step:
                by_gpu.setdefault(row["gpu_bdf"], []).append(int(r["rank"]))
    for bdf, ranks in sorted(by_gpu.items()):
        if len(ranks) > 1:
            findings.append(
                Finding(
                    "fail",
                    "gpu",
                    f"ranks {_ranges(ranks)} all use GPU {bdf}: they share one GPU while others idle",
                    "Give each task its own GPU: --gpus-per-task=1, or cuda:LOCAL_RANK with all GPUs visible.",
                ).to_json()
            )
    statuses = [str(r["status"]) for r in records] + [f["status"] for f in findings]
    return {
        "job": task.job_id,
        "step": task.step_id,
        "node": task.node,
        "tasks": len(records),
        "expected": expected,
        "ntasks": task.ntasks,
        "records": records,
        "findings": findings,
        "status": launch.worst(statuses),
    }


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and "-" not in out[-1] and int(out[-1]) == n - 1:
            out[-1] = f"{out[-1]}-{n}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == n - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


# -- output ------------------------------------------------------------------------------------


def _emit(node: dict[str, Any], fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(node, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(render_table(node))
    sys.stdout.flush()


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def render_table(node: dict[str, Any], out: IO[str] | None = None) -> str:
    """One compact table for the node: rank -> GPU -> NIC -> NUMA -> verdict, then what is wrong."""
    where = f"job {node['job']}" + (f" step {node['step']}" if node["step"] is not None else " batch script")
    head = f"clustercheck job: {where}, node {node['node']}"
    if node["step"] is not None:
        head += f": {node['tasks']} of {node['expected']} tasks"
        if node["ntasks"]:
            head += f" (of {node['ntasks']})"
    lines = [head]
    table = [["rank", "local", "CUDA_VISIBLE", "GPU", "NIC", "path", "NUMA gpu/nic/cpu", "verdict"]]
    for r in node["records"]:
        for row in r["rows"]:
            cpu = row.get("cpu_numa")
            numa = f"{_cell(row['gpu_numa'])}/{_cell(row['nic_numa'])}/{','.join(map(str, cpu)) if cpu else '-'}"
            gpu = _cell(row["gpu"]) + (f" {row['gpu_bdf']}" if row.get("gpu_bdf") else "")
            table.append(
                [
                    _cell(row["rank"]),
                    _cell(row["local"]),
                    _cell(row["cuda_visible_devices"])[:20],
                    gpu,
                    _cell(row["nic"]),
                    _cell(row["path"]),
                    numa,
                    r["status"] if node["step"] is not None else _row_status(r, row["local"]),
                ]
            )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
    grouped: dict[tuple[str, str, str], list[int]] = {}
    for r in node["records"]:
        for f in r["findings"]:
            grouped.setdefault((f["status"], f["message"], f.get("remedy", "")), []).append(int(r["rank"]))
    for f in node["findings"]:
        grouped.setdefault((f["status"], f["message"], f.get("remedy", "")), [])
    order = {"fail": 0, "error": 1, "warn": 2, "ok": 3, "skip": 4}
    for (status, message, remedy), ranks in sorted(grouped.items(), key=lambda kv: order.get(kv[0][0], 5)):
        who = ""
        if node["step"] is not None and ranks:
            who = f"rank{'s' if len(set(ranks)) > 1 else ''} {_ranges(ranks)}: "
        lines.append(f"{status:>5}  {who}{message}")
        if remedy and status in ("warn", "fail"):
            lines.append(f"       fix: {remedy}")
    lines.append(f"status: {node['status']}")
    text = "\n".join(_fit(line) for line in lines) + "\n"
    if out is not None:
        out.write(text)
    return text


#: slurmstepd forwards a task's output to srun a line at a time, but a line longer than 1024 bytes
#: in pieces, between which other tasks' lines can land: table lines stay below it.
LINE_LIMIT = 1000


def _fit(line: str) -> str:
    if len(line.encode()) <= LINE_LIMIT:
        return line
    pieces, rest = [], line
    while len(rest.encode()) > LINE_LIMIT:
        cut = LINE_LIMIT - 8
        while len(rest[:cut].encode()) > LINE_LIMIT - 8:
            cut -= 1
        pieces.append(rest[:cut])
        rest = "       " + rest[cut:]
    return "\n".join([*pieces, rest])


def _row_status(record: dict[str, Any], local: int) -> str:
    """The batch script's rows: the findings of that planned task, and those of the whole script."""
    prefix = "local task "
    mine = [
        f["status"]
        for f in record["findings"]
        if not f["message"].startswith(prefix) or f["message"].startswith(f"{prefix}{local}:")
    ]
    return launch.worst(mine)
