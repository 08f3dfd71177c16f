"""Slurm configuration checks: topology.conf against slurm.conf, a job's placement, cgroup device
isolation, and GPU counts of slurm.conf/gres.conf against the GPUs the node has.

Reads, in the first of `config_dirs` that holds a slurm.conf (default /etc/slurm, then the
copies a configless slurmd keeps in /run/slurm/conf and /var/spool/slurmd/conf-cache):
slurm.conf and the files it `Include`s,
topology.yaml (Slurm reads it first when present) or topology.conf, cgroup.conf, gres.conf.
Runs: `printenv SLURM_JOB_NODELIST` (slurm.placement: the job's nodes, as the prolog sees them)
and `ls -1 /proc/driver/nvidia/gpus` (slurm.gres: one entry per GPU the NVIDIA driver bound,
without NVML). Nothing here writes, and nothing calls slurmctld (`scontrol`, `squeue`): Slurm
advises prologs not to, and the checks stay safe on every job start.
"""

from __future__ import annotations

import posixpath
import re

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.analyzers.topology.model import Finding, TopologyError
from clustercheck.analyzers.topology.placement import place
from clustercheck.errors import HostError
from clustercheck.facts.slurm_conf import (
    CONFIG_DIRS,
    NEEDS,
    ConfUnreadable,
    locate,
    parse_cgroup_conf,
    parse_gres_conf,
    parse_gres_gpus,
    read_slurm_conf,
)
from clustercheck.facts.topology import NEEDS as TOPOLOGY_NEEDS
from clustercheck.facts.topology import read_topology
from clustercheck.hostlist import SLURM_MAX_NAME, expand, fold
from clustercheck.result import Status, worst

# -- reading: slurm.conf and its includes (clustercheck.facts.slurm_conf), topology (facts.topology) --


def _findings_result(findings: list[Finding], ok_summary: str, data: dict[str, object], remedy: str) -> Result:
    evidence = [f"{f.status.value}: {f}" for f in findings]
    data = {**data, "findings": [f.to_json() for f in findings]}
    status = worst(f.status for f in findings)
    if status is Status.OK:
        return ok(ok_summary, data=data, evidence=evidence)
    worst_ones = [f for f in findings if f.status is status]
    more = len([f for f in findings if f.status is not Status.OK]) - 1
    summary = str(worst_ones[0]) + (f" (and {more} more finding{'s' if more != 1 else ''})" if more else "")
    make = fail if status is Status.FAIL else warn
    return make(summary, remedy=remedy, data=data, evidence=evidence)


# -- slurm.topology ----------------------------------------------------------------------------------


@check(
    needs=[
        *NEEDS,
        *TOPOLOGY_NEEDS,
    ],
    timeout=10,
    action="FIX_CONFIG",
)
def topology(host: Host, *, config_dirs: tuple[str, ...] = CONFIG_DIRS) -> Result:
    """Every node of slurm.conf hangs from one leaf switch, and slurmctld can read the switch tree.

    Why: topology-aware scheduling (TopologyPlugin=topology/tree or /block) places jobs only
    on nodes under the switches of topology.conf: a node left out is never placed well (and,
    as far as the tree allocator goes, not at all); a node under two leaves makes Slurm count
    leaves wrongly; a duplicate switch, a child that names no switch, or switches listing each
    other in a loop make slurmctld refuse to start; leaves with no common top switch can never
    share a job.

    How: reads slurm.conf (following `Include`), the NodeName lines (hostlists expanded), and
    topology.yaml when present (Slurm 25.05+ reads it first and ignores topology.conf) or
    topology.conf; checks what slurmctld itself checks (src/plugins/topology/tree/
    switch_record.c) and cross-checks the node sets. Each finding names the file and line.
    Nodes of slurm.conf under no leaf fail; names topology.conf lists but slurm.conf does not
    define, nodes under two leaves, and a tree with no switch above all nodes warn. Skipped when
    no TopologyPlugin is configured and there is no topology file.

    Fix: edit topology.conf at the line named (generate it from the fabric with
    `clustercheck topology --ibnetdiscover DUMP --generate`), then `scontrol reconfigure`.

    Action: FIX_CONFIG.
    """
    try:
        config_dir, conf = read_slurm_conf(host, config_dirs)
        topo = read_topology(host, config_dir)
    except ConfUnreadable as exc:
        return fail(f"slurmctld cannot read it: {exc}", remedy="Fix the line named.")
    plugin = (conf.get("topologyplugin") or "").lower()
    data: dict[str, object] = {"plugin": plugin or None, "slurm_conf_nodes": len(conf.nodes)}
    if topo is None:
        if plugin in ("topology/tree", "topology/block"):
            return fail(
                f"{conf.where('topologyplugin')}: TopologyPlugin={plugin}, but {config_dir} has no topology.conf "
                "or topology.yaml",
                remedy="Write topology.conf (clustercheck topology --ibnetdiscover DUMP --generate helps).",
                data=data,
            )
        return skip(f"no topology configured (TopologyPlugin={plugin or 'unset'}, no topology file)", data=data)
    findings = list(topo.findings)
    if topo.source.endswith(".conf") and plugin not in ("topology/tree", "topology/block"):
        findings.append(
            Finding(
                Status.WARN,
                f"TopologyPlugin is {plugin or 'not set'}: slurmctld ignores {topo.source}",
                conf.where("topologyplugin"),
            )
        )
    elif topo.source.endswith(".conf") and plugin != f"topology/{topo.kind}":
        findings.append(
            Finding(
                Status.FAIL,
                f"TopologyPlugin={plugin}, but {topo.source} defines a {topo.kind} topology",
                conf.where("topologyplugin"),
            )
        )
    findings += topo.check_nodes(conf.node_lines())
    data.update(
        {
            "topology": topo.source,
            "kind": topo.kind,
            "switches": len(topo.switches),
            "levels": topo.levels,
            "leaves": len(topo.leaves),
        }
    )
    tops = topo.roots
    summary = (
        f"all {len(conf.nodes)} nodes of slurm.conf under {len(topo.leaves)} leaf "
        f"{'blocks' if topo.kind == 'block' else 'switches'} of {topo.source}"
        + (f" ({len(topo.switches)} switches, {topo.levels} levels, top switch {', '.join(tops[:3])})" if tops else "")
    )
    if topo.kind not in ("tree", "block"):
        summary = f"{topo.source}: topology {topo.name} is {topo.kind}, no switch tree to check"
    return _findings_result(
        findings,
        summary,
        data,
        "Fix topology.conf at the lines named (or generate it from the fabric with `clustercheck topology "
        "--ibnetdiscover DUMP --generate`), then `scontrol reconfigure`.",
    )


# -- slurm.placement -----------------------------------------------------------------------------------


@check(
    needs=[
        "command printenv SLURM_JOB_NODELIST",
        *NEEDS,
        *TOPOLOGY_NEEDS,
    ],
    timeout=5,
    action="INVESTIGATE",
)
def placement(host: Host, *, config_dirs: tuple[str, ...] = CONFIG_DIRS) -> Result:
    """The job's nodes sit under as few leaf switches as their number allows (a hint, never a failure).

    Why: a multi-node training job whose nodes are spread over more leaf switches than needed
    sends its collective traffic through the spine, where it competes with every other job;
    the same job under one leaf gets full bisection bandwidth. Users can ask Slurm for fewer
    leaves with `--switches=1@TIME`.

    How: reads the job's SLURM_JOB_NODELIST (set in the prolog environment, domain-facts §D.2)
    with `printenv`, and the topology file Slurm reads; counts the leaf switches the nodes span
    against the fewest leaves that could hold that many nodes (largest leaves first). More than
    needed warns with the numbers; so do nodes in trees with no common switch. It never fails,
    so it never drains a node: placement is the scheduler's choice, not the node's fault.
    Skipped outside a job or when there is no topology file.

    Fix: submit with `--switches=1@1:00:00` (or the count the warning names) to wait for a
    better placement; admins can make it the default with a job_submit plugin, and should check
    that topology.conf matches the fabric (`clustercheck topology --compare`).

    Action: INVESTIGATE (a placement hint: the node is not at fault); FIX_CONFIG when the
    topology file cannot be read.
    """
    result = host.run("printenv", "SLURM_JOB_NODELIST")
    value = result.stdout.strip()
    if result.timed_out:
        raise HostError(host.name, "cannot tell: `printenv SLURM_JOB_NODELIST` timed out")
    if result.exit_code != 0 or not value:
        return skip("not inside a Slurm job: SLURM_JOB_NODELIST is not set")
    try:
        nodes = expand(value, max_name=SLURM_MAX_NAME)
    except Exception as exc:  # UsageError from a malformed hostlist (it names the value, shortened)
        raise HostError(host.name, f"cannot tell: SLURM_JOB_NODELIST={value[:80]!r}: {exc}") from None
    found = locate(host, config_dirs)
    if found is None:
        return skip(f"no slurm.conf in {', '.join(config_dirs)}: no Slurm topology to judge the placement by")
    config_dir = found[0]
    try:
        topo = read_topology(host, config_dir)
    except ConfUnreadable as exc:
        return warn(
            f"cannot judge placement, the topology is unreadable: {exc}",
            remedy="See slurm.topology.",
            action="FIX_CONFIG",
        )
    if topo is None:
        return skip(f"no topology.yaml or topology.conf in {config_dir}: Slurm places jobs without a topology")
    if topo.kind not in ("tree", "block"):
        return skip(f"topology {topo.name} is {topo.kind}: no leaves to count")
    where = place(topo, nodes)
    data = {
        "nodes": len(where.nodes),
        "leaves_spanned": list(where.leaves_spanned),
        "min_leaves": where.min_leaves,
        "common_switch": where.common_switch,
        "common_switch_level": where.common_level,
        "unknown": list(where.unknown),
    }
    evidence = [f"SLURM_JOB_NODELIST={value} ({len(nodes)} nodes)"] + [str(f) for f in where.findings]
    if len(nodes) == 1:
        return ok(f"1 node ({nodes[0]}): nothing to place", data=data, evidence=evidence)
    if where.status is Status.OK:
        return ok(where.summary, data=data, evidence=evidence)
    # A hint for the user, never a drain: the worst placement is a warning.
    return warn(
        where.summary,
        remedy=f"Ask for fewer leaf switches: `sbatch --switches={max(where.min_leaves, 1)}@1:00:00 ...` "
        "(waits up to an hour for a better placement).",
        data=data,
        evidence=evidence,
    )


# -- slurm.cgroup ---------------------------------------------------------------------------------------


def _yes(value: str | None) -> bool:
    return (value or "").strip().lower() in ("yes", "true", "1")


@check(needs=["file /etc/slurm/cgroup.conf", *NEEDS], timeout=5, action="FIX_CONFIG")
def cgroup(
    host: Host,
    *,
    config_dirs: tuple[str, ...] = CONFIG_DIRS,
    constrain_devices: bool = True,
    constrain_cores: bool = False,
    constrain_ram: bool = False,
) -> Result:
    """cgroup.conf has ConstrainDevices=yes (and ConstrainCores/ConstrainRAMSpace as asked), enforced by task/cgroup.

    Why: without device constraint every job on a shared node can open every GPU — `nvidia-smi`
    in a 1-GPU job shows all eight, and a job that ignores CUDA_VISIBLE_DEVICES runs on
    another job's GPU. Cores and memory constraints keep neighbours from starving each other.

    How: reads cgroup.conf (keys are case-insensitive; an absent key is `no`, Slurm's default)
    and slurm.conf's TaskPlugin: the constraints of cgroup.conf are applied by the task/cgroup
    plugin only, so without it they do nothing. `constrain_devices` (default true),
    `constrain_cores` and `constrain_ram` say which settings must be `yes`.

    Fix: set `ConstrainDevices=yes` (and the others) in cgroup.conf, `TaskPlugin=task/cgroup,
    task/affinity` in slurm.conf, and restart slurmd on the nodes.

    Action: FIX_CONFIG (cgroup.conf and TaskPlugin, then restart slurmd).
    """
    config_dir, conf = read_slurm_conf(host, config_dirs)
    path = posixpath.join(config_dir, "cgroup.conf")
    text = host.read_optional(path)
    try:
        settings = parse_cgroup_conf(text, path) if text is not None else {}
    except TopologyError as exc:
        return fail(f"slurmd cannot read it: {exc}", remedy="Fix the line named.")
    wanted = [
        ("ConstrainDevices", constrain_devices, "a job can open every GPU of the node"),
        ("ConstrainCores", constrain_cores, "a job can run on cores it was not given"),
        ("ConstrainRAMSpace", constrain_ram, "a job can use memory it was not given"),
    ]
    problems, evidence = [], []
    data: dict[str, object] = {"cgroup_conf": text is not None}
    for key, required, harm in wanted:
        entry = settings.get(key.lower())
        value = entry[0] if entry else None
        data[key] = value
        shown = f"{key}={value} ({entry[1].where})" if entry else f"{key} not set in {path} (default no)"
        evidence.append(shown)
        if required and not _yes(value):
            problems.append(f"{shown}, expected yes: {harm}")
    task = conf.get("taskplugin") or ""
    data["TaskPlugin"] = task or None
    evidence.append(f"TaskPlugin={task or '(unset)'} ({conf.where('taskplugin')})")
    if text is None:
        evidence.append(f"{path}: absent")
    needs_cgroup = any(required for _, required, _ in wanted)
    if needs_cgroup and "task/cgroup" not in task.lower():
        problems.append(
            f"TaskPlugin={task or '(unset)'} ({conf.where('taskplugin')}) lacks task/cgroup: "
            "cgroup.conf's constraints are not applied"
        )
    if problems:
        return fail(
            "; ".join(problems),
            remedy="Set ConstrainDevices=yes (and the other Constrain* asked for) in cgroup.conf, "
            "TaskPlugin=task/cgroup,task/affinity in slurm.conf, then restart slurmd.",
            data=data,
            evidence=evidence,
        )
    on = [key for key, _, _ in wanted if key.lower() in settings and _yes(settings[key.lower()][0])]
    return ok(
        (", ".join(f"{k}=yes" for k in on) or "no constraint required") + f", TaskPlugin={task}",
        data=data,
        evidence=evidence,
    )


# -- slurm.gres --------------------------------------------------------------------------------------------


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


_PCI_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def parse_gpu_dirs(text: str) -> list[str]:
    """`ls -1 /proc/driver/nvidia/gpus` -> the PCI addresses (one directory per bound GPU)."""
    return [line.strip() for line in text.splitlines() if _PCI_RE.match(line.strip())]


@check(needs=[*NEEDS, "file /etc/slurm/gres.conf", "command ls /proc/driver/nvidia/gpus"], action="FIX_CONFIG")
def gres(host: Host, *, config_dirs: tuple[str, ...] = CONFIG_DIRS, node_name: str = "") -> Result:
    """The GPU count slurm.conf and gres.conf give this node is the number of GPUs it really has.

    Why: when slurmd finds fewer GPUs than slurm.conf configures, slurmctld marks the node
    INVALID_REG and drains it ("gres/gpu count reported lower than configured (7 < 8)"), and a
    gres.conf listing other devices than the node has hands jobs GPUs that are not there; GPUs
    the configuration does not list sit idle. A GPU line without File= is dropped by recent
    slurmd ("Ignoring file-less GPU"), with the same result.

    How: finds this node's NodeName line in slurm.conf (by `node_name`, default the host's
    short name) and sums its `Gres=gpu...` counts; sums the gres.conf GPU lines that apply to
    the node (Count=, or the devices File= names); counts the GPUs the NVIDIA driver bound:
    the entries of /proc/driver/nvidia/gpus/, listed with one `ls` (no NVML needed). With
    `AutoDetect=nvml` and no GPU lines, gres.conf is not counted.

    Fix: a GPU that vanished: look for Xid 79 ("fallen off the bus") in `dmesg`, reseat or
    replace it, then `scontrol update NodeName=... State=RESUME`; a configuration that does not
    match the hardware: correct Gres= in slurm.conf and the File= lines in gres.conf.

    Action: REBOOT when fewer GPUs are bound than configured (a GPU fell off the bus: a reboot
    brings back one that is not broken; REPLACE_HW if it stays gone); FIX_CONFIG otherwise (the
    driver not loaded, slurm.conf or gres.conf not matching the hardware).
    """
    config_dir, conf = read_slurm_conf(host, config_dirs)
    name = node_name or host.name.split(".")[0]
    node = conf.nodes.get(name)
    if node is None:
        raise HostError(
            host.name,
            f"cannot tell: no NodeName line of {conf.source} defines {name} (set node_name to its Slurm name)",
        )
    gres_value = node.params.get("gres", "")
    configured = parse_gres_gpus(gres_value)
    where = f"{node.source}:{node.line}"
    evidence = [f"{where}: NodeName={name} Gres={gres_value or '(none)'}: {configured} GPUs"]
    listing = host.run("ls", "-1", "/proc/driver/nvidia/gpus")
    if listing.timed_out:
        raise HostError(host.name, "cannot tell: `ls /proc/driver/nvidia/gpus` timed out")
    if listing.exit_code == 0:
        present = parse_gpu_dirs(listing.stdout)
        driver = True
    elif "No such file" in listing.stderr:
        present, driver = [], False
    else:
        raise HostError(host.name, f"cannot tell: `ls /proc/driver/nvidia/gpus` exited {listing.exit_code}")
    evidence.append(
        f"/proc/driver/nvidia/gpus: {_gpus(len(present))} ({', '.join(present)})"
        if driver
        else "/proc/driver/nvidia/gpus is absent: the NVIDIA driver is not loaded"
    )
    data: dict[str, object] = {"node": name, "slurm_conf": configured, "present": len(present), "driver": driver}
    if configured == 0:
        if present:
            return warn(
                f"{_gpus(len(present))} on the node, but {where} gives {name} no gpu in Gres=: "
                "jobs cannot ask for them",
                remedy="Add Gres=gpu:N to the node's NodeName line (and GresTypes=gpu), plus gres.conf File= lines.",
                data=data,
                evidence=evidence,
            )
        return skip(f"slurm.conf gives {name} no GPUs ({where}) and the node has none", data=data, evidence=evidence)
    gres_path = posixpath.join(config_dir, "gres.conf")
    gres_text = host.read_optional(gres_path)
    listed: int | None = None
    problems: list[str] = []
    if gres_text is None:
        evidence.append(f"{gres_path}: absent")
        problems.append(
            f"{gres_path} is absent: slurmd registers no GPU device (recent versions drop file-less GPUs), "
            f"so the node is INVALID against Gres=gpu:{configured}"
        )
    else:
        try:
            autodetect, lines = parse_gres_conf(gres_text, gres_path)
        except TopologyError as exc:
            return fail(f"slurmd cannot read it: {exc}", remedy="Fix the line named.", data=data, evidence=evidence)
        mine = [g for g in lines if g.nodes is None or name in g.nodes]
        detect = next((g.autodetect for g in mine if g.autodetect), autodetect)
        gpu_lines = [g for g in mine if g.gpus]
        if gpu_lines:
            listed = sum(g.gpus for g in gpu_lines)
            for g in gpu_lines:
                evidence.append(
                    f"{gres_path}:{g.line}: {g.gpus} GPU{'s' if g.gpus != 1 else ''}"
                    + (f" ({fold(g.files)})" if g.files else " (no File=)")
                )
            fileless = [g for g in gpu_lines if not g.files and detect in (None, "off")]
            if fileless:
                problems.append(
                    f"{gres_path}:{fileless[0].line} has no File=: recent slurmd drop file-less GPUs "
                    "(`Ignoring file-less GPU`) and cannot constrain devices"
                )
        elif detect in ("nvml", "nvidia"):
            evidence.append(f"{gres_path}: AutoDetect={detect}, no GPU lines: slurmd counts the GPUs itself")
        else:
            evidence.append(f"{gres_path}: no GPU line applies to {name}")
            problems.append(f"{gres_path} has no GPU line for {name} and no AutoDetect=nvml")
        data["gres_conf"] = listed
        data["autodetect"] = detect
    if driver is False:
        problems.insert(
            0,
            f"the NVIDIA driver is not loaded (/proc/driver/nvidia/gpus is absent), "
            f"{where} gives {name} {configured} GPUs",
        )
    elif len(present) < configured:
        problems.insert(
            0,
            f"{_gpus(len(present))} on the node, {where} gives {name} {configured}: slurmctld drains it "
            f"(`gres/gpu count reported lower than configured ({len(present)} < {configured})`)",
        )
    if listed is not None and listed != configured:
        problems.append(f"gres.conf lists {listed} GPUs for {name}, slurm.conf {configured}")
    if listed is not None and driver and listed > len(present):
        problems.append(f"gres.conf lists {listed} GPU devices, the node has {len(present)}")
    if problems:
        return fail(
            "; ".join(problems),
            remedy="A vanished GPU: look for Xid 79 in `dmesg`, `lspci -d 10de:`; reseat or replace, then resume "
            "the node. A driver not loaded: `modprobe nvidia`, check the DKMS build for this kernel. A wrong "
            "configuration: correct Gres= in slurm.conf and the File= lines of gres.conf.",
            data=data,
            evidence=evidence,
            action="REBOOT" if driver and len(present) < configured else "FIX_CONFIG",
        )
    if len(present) > configured:
        return warn(
            f"{len(present)} GPUs on the node, {where} offers {configured}: the others sit idle",
            remedy="Raise the node's Gres=gpu count in slurm.conf and list every device in gres.conf.",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"{configured} GPUs: slurm.conf Gres={gres_value}"
        + (f", gres.conf {listed}" if listed is not None else ", gres.conf AutoDetect")
        + f", {len(present)} on the node",
        data=data,
        evidence=evidence,
    )
