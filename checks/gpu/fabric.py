"""The NVSwitch fabric: nvidia-fabricmanager running, every GPU's fabric Completed/Success, no SXid.

Reads each GPU's fabric state from the GPU record (probe `nvml`: NVML's fabric info in-process)
where it carries one, else the `Fabric` block of `nvidia-smi -q` per GPU; `systemctl is-active nvidia-fabricmanager`
(or the `nv-fabricmanager` process where systemctl is not there), and the kernel log for NVSwitch
devices and SXid events. Parsers: clustercheck.facts.nvlink.
"""

from __future__ import annotations

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts.gpu import gpus
from clustercheck.facts.kernel_log import kernel_log, parse_xids
from clustercheck.facts.nvlink import SxidEvent, fabric_from_record, nvswitches_in_log, parse_q_fabric, parse_sxids

from . import _usable

_ORIGIN = {"nvml": "NVML fabric info"}

SYMPTOM = (
    'until the fabric is up CUDA fails at start with "system not yet initialized" '
    "(CUDA_ERROR_SYSTEM_NOT_READY, error 802) while nvidia-smi still lists every GPU"
)


def _fabric_manager(host: Host) -> tuple[str, str]:
    """(state, evidence): "active", "inactive", "failed", ... from systemd, else from the process list."""
    result = host.run("systemctl", "is-active", "nvidia-fabricmanager")
    state = result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""
    if result.exit_code != 127 and not result.timed_out and state:
        return state, f"`systemctl is-active nvidia-fabricmanager`: {state}"
    ps = host.run("pgrep", "-x", "nv-fabricmanager")
    if ps.exit_code == 0:
        return "active", f"no systemd answer; nv-fabricmanager running (pid {ps.stdout.split()[0]})"
    if ps.exit_code == 1:
        return "not running", "no systemd answer; no nv-fabricmanager process"
    raise HostError(
        host.name,
        f"cannot tell whether nvidia-fabricmanager runs: {result.describe()} and {ps.describe()}",
    )


@check(
    needs=[
        "probe nvml",
        "command nvidia-smi",
        "command systemctl",
        "command pgrep",
        "command dmesg",
        "command journalctl",
    ],
    timeout=40,
    action="RESTART_SERVICE",
)
def fabric(host: Host, *, ignore_sxid: tuple[str, ...] = ()) -> Result:
    """Where NVSwitches exist: nvidia-fabricmanager runs, every GPU's fabric is Completed/Success, no fatal SXid.

    Why: on HGX/DGX systems the GPUs reach each other through NVSwitches that
    nvidia-fabricmanager must set up after every boot or GPU reset; until it has,
    CUDA fails at start with "system not yet initialized" (error 802, wilicc/gpu-burn#92) while
    nvidia-smi looks healthy. A GPU whose fabric registration finished with a failed status
    ("Insufficient Resources", Azure/azhpc-images#506) or an unhealthy multi-node fabric
    (kubernetes-sigs/dra-driver-nvidia-gpu#626) cannot run NVLink jobs either. NVSwitch errors
    (SXid) that NVIDIA classes as fatal need the GPUs and NVSwitches reset.

    How: every GPU's fabric state, status and health: NVML's (nvmlDeviceGetGpuFabricInfoV, in
    the GPU record locally), else the `Fabric` block of `nvidia-smi -q` (State, Status, Health
    Summary; over SSH too, as the `-q -x` record has no health summary); data `source` says
    which. And the kernel log (`dmesg`, or `journalctl -k -b`): NVSwitches are present where a
    GPU's fabric state is not N/A or the kernel log names `nvidia-nvswitchN` devices. Without either:
    skip, "no NVSwitch: fabric manager not needed". With local NVSwitches, nvidia-fabricmanager
    must be active (`systemctl is-active`, else the nv-fabricmanager process). State other than
    Completed, Status other than Success, Health Unhealthy fail. SXid lines (`nvidia-nvswitchN:
    SXid (PCI:...): N, ...`) are classified with NVIDIA's SXid tables (domain-facts §I.2):
    fatal and always-fatal ones fail (REBOOT), non-fatal and unknown ones warn; `ignore_sxid`
    leaves numbers out. The kernel log is judged since boot.

    Fix: `systemctl enable --now nvidia-fabricmanager` with the fabric manager package of
    exactly the driver's version (`journalctl -u nvidia-fabricmanager` says why it stopped);
    after a fatal SXid, reboot (a reset of all GPUs and NVSwitches); an SXid that returns on
    the same switch is a hardware fault.
    """
    ignored = set()
    for value in ignore_sxid:
        if not value.strip().isdigit():
            raise ValueError(f"ignore_sxid: {value!r} is not an SXid number")
        ignored.add(int(value))
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    # the XML's <fabric> carries no health summary in the drivers seen (535-580): a record made of it
    # (over SSH) is judged from `nvidia-smi -q`, whose Fabric block has Health / Summary
    recorded = fabric_from_record(usable) if record.source != "nvidia-smi" else None
    if recorded is not None:
        blocks, origin = recorded, record.source or "nvml"
        said_blocks = f"GPU record ({_ORIGIN.get(origin, origin)}): {len(blocks)} GPUs"
    else:
        query = host.run("nvidia-smi", "-q")
        if not query.ok:
            said = (query.stderr or query.stdout).strip()[:200] or "no output"
            raise HostError(host.name, f"cannot tell: `nvidia-smi -q` {query.describe()}: {said}")
        blocks, origin = parse_q_fabric(query.stdout), "nvidia-smi -q"
        said_blocks = f"`nvidia-smi -q`: {len(blocks)} Fabric blocks"
    log, source = kernel_log(host)
    switches = nvswitches_in_log(log)
    attached = [b for b in blocks if b.supported]
    evidence = [f"{said_blocks}, {len(attached)} with a fabric state"]
    evidence += [
        f"GPU {b.bus_id or '?'}: State {b.state or '?'}, Status {b.status or '?'}"
        + (f", Health {b.health}" if b.health else "")
        + (f", CliqueId {b.clique_id}" if b.clique_id and b.clique_id != "N/A" else "")
        for b in blocks
    ]
    evidence.append(
        f"kernel log (`{source}`): "
        + (f"NVSwitch devices {', '.join(switches)}" if switches else "no nvidia-nvswitch device named")
    )
    data: dict[str, object] = {"nvswitches": switches, "fabric_gpus": len(attached), "source": origin}
    if not attached and not switches:
        return skip(
            "no NVSwitch: fabric manager not needed (every GPU's fabric state is N/A and the kernel log names "
            "no nvidia-nvswitch device)",
            data={**data, "no_nvswitch": True},
            evidence=evidence,
        )
    problems: list[str] = []
    if switches:
        state, said = _fabric_manager(host)
        evidence.append(said)
        data["fabric_manager"] = state
        if state != "active":
            problems.append(f"nvidia-fabricmanager is {state} on a node with {len(switches)} NVSwitches")
    groups: dict[str, list[str]] = {}
    for b in attached:
        where = b.bus_id or "?"
        if (b.state or "").lower() != "completed":
            groups.setdefault(f"fabric state {b.state}, expected Completed", []).append(where)
        elif (b.status or "").lower() != "success":
            groups.setdefault(f"fabric state Completed but status {b.status}, expected Success", []).append(where)
        if b.health and b.health.lower() != "healthy":
            groups.setdefault(f"fabric health {b.health}", []).append(where)
    for said, buses in groups.items():
        who = (
            f"GPU {buses[0]}"
            if len(buses) == 1
            else f"{len(buses)} GPUs ({', '.join(buses[:4])}{' ...' * (len(buses) > 4)})"
        )
        problems.append(f"{who}: {said}")
    events = [e for e in parse_sxids(log) if e.sxid not in ignored]
    fatal = [e for e in events if e.severity in ("fatal", "always fatal")]
    other = [e for e in events if e not in fatal]
    data["sxids"] = [
        {"switch": e.switch, "pci": e.pci, "sxid": e.sxid, "severity": e.severity, "line": e.line} for e in events
    ]
    evidence += [
        f"line {e.line}: SXid {e.sxid} ({e.severity}) on {e.switch} {e.pci}: {e.message[:120]}" for e in events
    ]
    if fatal:
        lost = sorted({e.pci for e in parse_xids(log) if e.xid == 79})
        after = f"; they follow XID 79 on GPU {', '.join(lost)} (fallen off the bus; gpu.xid judges it)" if lost else ""
        return fail(
            _describe(fatal) + after + ("; " + "; ".join(problems) if problems else ""),
            remedy="Drain the node and reboot it (NVIDIA: a fatal SXid needs all GPUs and NVSwitches reset; an "
            "always-fatal one the whole host); if the SXid returns on the same NVSwitch, open an RMA (baseboard).",
            data=data,
            evidence=evidence,
            action="REBOOT",
        )
    if problems:
        not_up = any("fabricmanager" in p or "expected Completed" in p for p in problems)
        return fail(
            "; ".join(problems) + (f": {SYMPTOM}" if not_up else ""),
            remedy="Start the fabric manager: `systemctl enable --now nvidia-fabricmanager` (its package must match "
            "the driver version exactly; `journalctl -u nvidia-fabricmanager` says why it stopped), then wait for "
            "State Completed / Status Success in `nvidia-smi -q`; a failed status or an unhealthy fabric after that "
            "needs the NVLink fabric (NVSwitch trays, IMEX/NMX on multi-node systems) looked at.",
            data=data,
            evidence=evidence,
            action="RESTART_SERVICE" if not_up else "INVESTIGATE",
        )
    if other:
        return warn(
            _describe(other),
            remedy="Non-fatal per NVIDIA's SXid tables: watch whether it repeats; a repeating SXid on one switch "
            "port is a failing link (reset the GPUs and NVSwitches, then RMA if it stays).",
            data=data,
            evidence=evidence,
            action="INVESTIGATE",
        )
    where = (
        f"{len(switches)} NVSwitches, fabric manager active"
        if switches
        else "no local nvidia-nvswitch device in the kernel log (multi-node NVLink, or the boot lines rotated "
        "out): fabric manager not judged"
    )
    return ok(
        f"{where}; {len(attached)} GPUs with fabric Completed/Success; no SXid since boot"
        if attached
        else f"{where}; no SXid since boot (these GPUs report no fabric state)",
        data=data,
        evidence=evidence,
    )


def _describe(events: list[SxidEvent]) -> str:
    seen: dict[tuple[int, str], list[SxidEvent]] = {}
    for e in events:
        seen.setdefault((e.sxid, e.switch), []).append(e)
    parts = []
    for (code, switch), group in seen.items():
        times = f" x{len(group)}" if len(group) > 1 else ""
        parts.append(f"SXid {code} ({group[0].severity}) on {switch}{times}: {group[0].message[:80]}")
    return "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")
