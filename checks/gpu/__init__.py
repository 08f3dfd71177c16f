"""NVIDIA GPU health: count, model, driver, ECC, PCIe link, persistence, clocks, XID events,
MIG/compute mode, GPUDirect RDMA.

Reads: the `nvml` probe (NVML in-process locally; one `nvidia-smi -q -x` over SSH or when
libnvidia-ml cannot load), /proc/driver/nvidia/version, /proc/modules,
/proc/sys/kernel/osrelease, and the kernel log (`dmesg`, or `journalctl -k -b` where dmesg
is not permitted). Nothing here writes, resets or reconfigures a GPU.

A node without the NVIDIA driver gives an empty GPU record saying why: `gpu.count` fails
("0 GPUs visible, expected 8: NVML library not found ..."), the other checks skip, so the
cause is reported once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError, NotRecorded
from clustercheck.facts.gpu import gpus
from clustercheck.facts.kernel_log import (
    NVLINK_XIDS,
    XID_ACTIONS,
    XID_CATALOG,
    Window,
    XidEvent,
    XidInfo,
    bursts,
    last_stamp,
    parse_btime,
    parse_since,
    parse_uptime,
    parse_xids,
    root_causes,
)
from clustercheck.facts.kernel_log import kernel_log as kernel_log_fact
from clustercheck.facts.slurm_conf import (
    CONFIG_DIRS,
    NEEDS,
    ConfError,
    locate,
    parse_gres_conf,
    parse_gres_gpus,
    read_slurm_conf,
)
from clustercheck.probes.nvml import CLOCK_REASONS, Gpu, GpuRecord

# re-exported: tests and the other gpu modules import them from here
__all__ = ["XID_ACTIONS", "XID_CATALOG", "XidEvent", "XidInfo", "kernel_log", "parse_nvidia_version_file", "parse_xids"]

# -- the GPU record ------------------------------------------------------------------------


def _source(record: GpuRecord) -> str:
    return {"nvml": "NVML (in-process)", "nvidia-smi": "`nvidia-smi -q -x`"}.get(record.source, record.source or "?")


def _usable(record: GpuRecord) -> list[Gpu] | Result:
    """The GPUs a health check can judge, or the skip that says why there are none."""
    answering = [g for g in record.gpus if g.error is None]
    if not answering:
        why = record.error or ("no GPU answers: " + "; ".join(f"{g.label}: {g.error}" for g in record.gpus))
        return skip(
            f"no GPUs visible ({why}); gpu.count judges that",
            data={"hardware_absent": True},  # not a pass: `health` does not resume on it
            evidence=[f"GPU facts from {_source(record)}"],
        )
    return answering


def _index_list(items: Iterable[Gpu]) -> str:
    indexes = [g.index for g in items]
    return ("GPU " if len(indexes) == 1 else "GPUs ") + ",".join(map(str, indexes))


def _evidence(record: GpuRecord, gpus: Iterable[Gpu] = ()) -> list[str]:
    lines = [f"GPU facts from {_source(record)}; driver {record.driver_version or '?'}"]
    lines += [f"{g.label}: {g.name}" for g in gpus]
    return lines


# -- the GPU count the node's own Slurm files give it -----------------------------------------------

# The config folders slurmd reads, then Debian's old one.
SLURM_DIRS = (*CONFIG_DIRS, "/etc/slurm-llnl")


def slurm_gpu_count(host: Host, dirs: tuple[str, ...] = SLURM_DIRS) -> tuple[int, str]:
    """(GPUs the node's slurm.conf or gres.conf give it, the evidence line); 0 when they give none."""
    from clustercheck.slurm import current_job

    job = current_job()
    name = (job.node if job and job.node else "") or host.name.split(".")[0]
    try:
        found = locate(host, dirs)
    except (HostError, OSError):  # not recorded in a fixture, unreadable: nothing to go by
        found = None
    if found is None:
        return 0, f"no slurm.conf in {', '.join(dirs)}: expected at least 1"
    try:
        folder, conf = read_slurm_conf(host, dirs)
    except (HostError, OSError) as exc:  # a line slurmctld refuses, an include that cannot be read
        return 0, f"cannot read the node's slurm.conf ({exc}): expected at least 1"
    node = conf.nodes.get(name)
    if node is None:
        return 0, f"{conf.source} has no NodeName line for {name}: expected at least 1"
    gres_value = node.params.get("gres", "")
    where = f"{node.source}:{node.line}"
    configured = parse_gres_gpus(gres_value)
    if configured:
        return configured, f"{where}: NodeName={name} Gres={gres_value}: {configured} GPUs expected"
    gres_path = folder + "/gres.conf"
    try:
        text = host.read_optional(gres_path)
    except (HostError, OSError):  # not recorded, unreadable: as if absent
        text = None
    try:
        _, lines = parse_gres_conf(text or "", gres_path)
    except ConfError as exc:  # slurmd refuses it too
        lines = []
        where += f" ({exc})"
    listed = sum(g.gpus for g in lines if g.nodes is None or name in g.nodes)
    where = f"{where} gives {name} no gpu in Gres="
    if listed:
        return listed, f"{where}; {gres_path} lists {listed} GPUs for it: {listed} expected"
    return 0, f"{where} and gres.conf none: expected at least 1"


def _distinct(values: Iterable[str | None]) -> str | None:
    """The values the node's GPUs report, each once ('96.00.74.00.0D'); None when none reports one."""
    seen = sorted({v for v in values if v})
    return ", ".join(seen) if seen else None


def _firmware_facts(answering: list[Gpu]) -> dict[str, str]:
    """Fleet drift facts: the GPUs' VBIOS and InfoROM image versions."""
    facts = {
        "GPU VBIOS": _distinct(g.vbios_version for g in answering),
        "GPU InfoROM": _distinct(g.inforom_image for g in answering),
    }
    return {k: v for k, v in facts.items() if v is not None}


# -- count, model -------------------------------------------------------------------------


@check(needs=["probe nvml", *NEEDS, "file /etc/slurm/gres.conf"], timeout=20, action="REBOOT")
def count(host: Host, *, expected: int = 0, slurm_expected: bool = False) -> Result:
    """`expected` GPUs are visible and answer (0: at least one, or with `slurm_expected` what Slurm gives the node).

    Why: a GPU that fell off the bus, was not enumerated after a reboot, or is held by a
    failed driver load shrinks the node silently; Slurm still schedules 8 GPUs on it and
    the job fails at start or, worse, runs with fewer ranks.

    How: lists the GPUs from NVML (locally) or `nvidia-smi -q -x` (over SSH); a GPU NVML
    lists but cannot query (e.g. "GPU is lost") does not count. On a node without a driver
    the record says why ("NVML library not found"). With `slurm_expected` and no `expected`,
    the count is the one the node's own Slurm files give it: its NodeName line's `Gres=gpu...`
    in slurm.conf (and the files it `Include`s), else the gres.conf lines for the node, read
    from /etc/slurm (or a configless slurmd's copy); never asked of slurmctld.

    Fix: `dmesg | grep -i -e NVRM -e Xid` for the lost GPU (XID 79: reseat, check power);
    `lspci -d 10de:` to see whether the GPU is on the PCIe bus at all; reload the driver
    or reboot; a GPU that stays missing is an RMA.
    """
    record = gpus(host)
    answering = [g for g in record.gpus if g.error is None]
    lost = [g for g in record.gpus if g.error is not None]
    names = sorted({g.name or "?" for g in answering})
    configured: list[str] = []
    if slurm_expected and not expected:
        expected, said = slurm_gpu_count(host)
        configured.append(said)
    data = {
        "visible": len(answering),
        "expected": expected,
        "lost": [g.to_json() for g in lost],
        "models": names,
        "facts": {"GPUs visible": len(answering), **_firmware_facts(answering)},
    }
    evidence = _evidence(record, answering) + [f"{g.label}: {g.error}" for g in lost] + configured
    problems = [f"{g.label}: {g.error}" for g in lost]
    if record.error:
        problems.append(record.error)
    wanted = f"expected {expected}" if expected else "expected at least 1"
    if configured and expected:
        wanted += " (the node's Slurm configuration)"
    if (expected and len(answering) != expected) or not answering or lost:
        summary = f"{len(answering)} GPU{'s' * (len(answering) != 1)} visible, {wanted}"
        return fail(
            summary + (": " + "; ".join(problems) if problems else ""),
            remedy="Look for XID 79 and other NVRM errors in `dmesg`; check `lspci -d 10de:`; reload the NVIDIA "
            "driver or reboot; install the driver if NVML is missing; a GPU that stays missing needs service.",
            data=data,
            evidence=evidence,
        )
    return ok(f"{len(answering)} GPUs visible: {', '.join(names)}", data=data, evidence=evidence)


@check(needs=["probe nvml"], timeout=20, action="FIX_CONFIG")
def model(host: Host, *, expected: str) -> Result:
    """Every GPU's name contains `expected` (e.g. "H100"), all the same model.

    Why: a node built with the wrong or mixed GPU SKUs (PCIe instead of SXM, 40 GB instead
    of 80 GB) joins the wrong partition and slows or breaks jobs sized for the real one.

    How: matches `expected` (case-insensitive) inside each GPU's product name.

    Fix: move the node to the partition of its real GPUs, or fix the inventory.
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    wrong = [g for g in usable if expected.lower() not in (g.name or "").lower()]
    names = sorted({g.name or "?" for g in usable})
    data = {"models": names, "expected": expected}
    if wrong:
        shown = "; ".join(f"{g.label} is {g.name}" for g in wrong)
        return fail(
            f"{shown}, expected {expected}",
            remedy="Put the node in the partition of its GPUs (or fix the node's hardware inventory).",
            data=data,
            evidence=_evidence(record, usable),
        )
    if len(names) > 1:
        return fail(
            f"mixed GPU models: {', '.join(names)}",
            remedy="A node should hold one GPU model; check the node's hardware inventory.",
            data=data,
            evidence=_evidence(record, usable),
        )
    return ok(f"{len(usable)} x {names[0]}", data=data, evidence=_evidence(record, usable))


# -- driver ---------------------------------------------------------------------------------


def parse_nvidia_version_file(text: str) -> tuple[str | None, bool]:
    """/proc/driver/nvidia/version -> (kernel module version, open kernel module?).

    'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023'
    'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...'
    No NVIDIA document defines the format (domain-facts §A.5, §H.8): the first number shaped
    like a driver version after "Kernel Module" is taken.
    """
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            after = line.split("Kernel Module", 1)[-1]
            m = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", after)
            return (m.group(1) if m else None), "Open Kernel Module" in line
    return None, False


def _vkey(version: str) -> tuple[int, ...]:
    from clustercheck.analyzers.versions import version_key

    return version_key(version)


@check(needs=["probe nvml", "file /proc/driver/nvidia/version"], timeout=20, action="FIX_CONFIG")
def driver(host: Host, *, min_version: str = "", exact: str = "") -> Result:
    """The NVIDIA driver is `exact` or at least `min_version`, and its kernel module matches user space.

    Why: a driver older than the site's baseline misses fixes the images rely on; after a
    driver upgrade without a reboot the loaded kernel module and the new libraries differ,
    and every CUDA program fails ("Driver/library version mismatch").

    How: the driver version NVML (or nvidia-smi) reports, compared numerically with
    `min_version` and `exact`, and with the kernel module's version in
    /proc/driver/nvidia/version.

    Fix: install the site's driver branch; after an upgrade, reboot (or unload and reload
    every nvidia module) so the kernel module matches the libraries.
    """
    record = gpus(host)
    version_file = host.read_optional("/proc/driver/nvidia/version")
    module, is_open = parse_nvidia_version_file(version_file) if version_file else (None, False)
    user = record.driver_version
    if user is None and module is None:
        return skip(
            f"no NVIDIA driver loaded ({record.error or 'no version reported'})", data={"hardware_absent": True}
        )
    data = {
        "driver": user,
        "kernel_module": module,
        "open_kernel_module": is_open,
        "cuda": record.cuda_version,
        "facts": {"NVIDIA driver": user, "driver's CUDA": record.cuda_version},
    }
    flavour = " (open)" if is_open else " (proprietary)" if module else ""
    evidence = [*_evidence(record), f"kernel module {module or 'not loaded'}{flavour}"]
    version = user or module or ""
    problems = []
    if user and module and user != module:
        problems.append(f"kernel module {module} but user-space driver {user}: reboot to load the matching module")
    elif user is None:
        problems.append(f"kernel module {module} loaded, but NVML does not answer: {record.error}")
    if exact and version != exact:
        problems.append(f"driver {version}, expected exactly {exact}")
    if min_version and _vkey(version) < _vkey(min_version):
        problems.append(f"driver {version} is older than the minimum {min_version}")
    if problems:
        return fail(
            "; ".join(problems),
            action="REBOOT" if user and module and user != module else "FIX_CONFIG",
            remedy="Install the site's driver branch; after an upgrade reboot so the kernel module and the "
            "libraries match (`cat /proc/driver/nvidia/version` vs `nvidia-smi`).",
            data=data,
            evidence=evidence,
        )
    wanted = f", expected {exact}" if exact else f", >= {min_version}" if min_version else ""
    cuda = f" (CUDA {record.cuda_version})" if record.cuda_version else ""
    return ok(f"driver {version}{cuda}{wanted}; kernel module matches", data=data, evidence=evidence)


# -- ECC -----------------------------------------------------------------------------------


@check(needs=["probe nvml"], timeout=20, action="RESET_GPU")
def ecc(host: Host, *, require_enabled: bool = True) -> Result:
    """No uncorrectable ECC errors, no pending page retirement or row remap, no remap failure.

    Why: an uncorrectable (double-bit) error kills the job that hit it and, until the GPU is
    reset, leaves memory that must not be reused; a pending row remap or page retirement
    only takes effect at the next GPU reset; a row-remap failure means the GPU ran out of
    spare rows (an RMA per NVIDIA's policy). ECC switched off hides all of it.

    How: per GPU from NVML/nvidia-smi: ECC mode (fails when `require_enabled` and it is off;
    GPUs without ECC are skipped), volatile uncorrectable error count (since the driver
    loaded), pages pending retirement (pre-Ampere), rows pending remap and remap failure
    (Ampere and newer). Lifetime (aggregate) uncorrectable counts are reported, not judged:
    a remapped row has already been dealt with. NVIDIA notes that a pending remap does not
    affect running work; it fails here so the node is drained and reset before the next job
    rather than at some later reset.

    Fix: drain the node, reset the GPU (`nvidia-smi -r -i N`, or reboot) to apply pending
    remaps/retirements and clear volatile counts; a remap failure or recurring uncorrectable
    errors on the same GPU: open an RMA with the GPU's serial and UUID.
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    failures, warnings, evidence, judged = [], [], _evidence(record), 0
    for g in usable:
        if g.ecc_current is None:
            evidence.append(f"{g.label}: ECC not supported")
            continue
        judged += 1
        found = []
        if require_enabled and not g.ecc_current:
            found.append("ECC is disabled")
        if g.ecc_volatile_uncorrected:
            found.append(f"{g.ecc_volatile_uncorrected} uncorrectable ECC errors since the driver loaded")
        if g.retired_pages_pending:
            found.append("pages pending retirement")
        if g.remap_pending:
            found.append("row remapping pending")
        if g.remap_failure:
            found.append("row remapping failed")
        if found:
            failures.append(f"{g.label}: {', '.join(found)}")
        if g.ecc_pending is not None and g.ecc_pending != g.ecc_current:
            warnings.append(f"{g.label}: ECC mode change to {'on' if g.ecc_pending else 'off'} pending a reboot")
        evidence.append(
            f"{g.label}: ECC {'on' if g.ecc_current else 'off'}, uncorrectable volatile "
            f"{_n(g.ecc_volatile_uncorrected)} / aggregate {_n(g.ecc_aggregate_uncorrected)}, remapped rows "
            f"{_n(g.remapped_rows_uncorrectable)} unc / {_n(g.remapped_rows_correctable)} corr, remap pending "
            f"{_yn(g.remap_pending)}, remap failure {_yn(g.remap_failure)}, retired pages "
            f"{_n(g.retired_pages_dbe)} dbe / {_n(g.retired_pages_sbe)} sbe, pending {_yn(g.retired_pages_pending)}"
        )
    modes = _distinct(None if g.ecc_current is None else "on" if g.ecc_current else "off" for g in usable)
    data = {
        "gpus": [g.to_json() for g in usable],
        "failures": failures,
        "warnings": warnings,
        "facts": {"GPU ECC mode": modes} if modes else {},
    }
    if not judged:
        return skip(f"no GPU here supports ECC ({_index_list(usable)})", data=data, evidence=evidence)
    if failures:
        return fail(
            "; ".join(failures),
            action=(
                "REPLACE_HW"
                if any(g.remap_failure for g in usable)
                else "FIX_CONFIG"
                if all(f.endswith(": ECC is disabled") for f in failures)
                else "RESET_GPU"
            ),
            remedy="Drain the node and reset the GPU (`nvidia-smi -r -i N` or reboot) to apply pending remaps and "
            "retirements; a row-remap failure or repeated uncorrectable errors on one GPU is an RMA (give its UUID).",
            data=data,
            evidence=evidence,
        )
    if warnings:
        return warn("; ".join(warnings), remedy="Reboot (or reset the GPUs) to apply the ECC mode change.", data=data)
    return ok(
        f"{judged} GPUs: ECC on, no uncorrectable errors, nothing pending retirement or remap",
        data=data,
        evidence=evidence,
    )


def _n(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def _yn(value: bool | None) -> str:
    return "n/a" if value is None else "yes" if value else "no"


# -- PCIe link ------------------------------------------------------------------------------

_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")


def sysfs_bdf(bus_id: str) -> str | None:
    """NVML's '00000000:3A:00.0' -> sysfs's '0000:3a:00.0'; None for anything else."""
    m = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-9A-Fa-f])", bus_id.strip())
    if m is None or int(m.group(1), 16) > 0xFFFF:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4).lower()}"


def on_root_bus(bus_id: str) -> bool:
    """A GPU on bus 00 of its domain has no upstream port: a VM's pass-through device (AWS, Azure)."""
    bdf = sysfs_bdf(bus_id)
    return bdf is not None and bdf[5:7] == "00"


def slot_width(host: Host, bus_id: str) -> tuple[int | None, str]:
    """(the maximum width of the port above the GPU, what was read): the slot side of the link.

    `readlink -f /sys/bus/pci/devices/BDF` gives the device's place in /sys/devices; the folder
    above it is the upstream (root or switch downstream) port, whose `max_link_width` is its
    Link Capabilities width (LnkCap). None when the GPU sits on a root bus or nothing could be read.
    """
    bdf = sysfs_bdf(bus_id)
    if bdf is None:
        return None, f"bus id {bus_id!r} is not a PCI address"
    if on_root_bus(bus_id):
        return None, f"{bdf} sits on a root bus (a VM's pass-through): no upstream port to read the slot's width from"
    try:
        result = host.run("readlink", "-f", f"/sys/bus/pci/devices/{bdf}")
        path = result.stdout.strip()
        if not result.ok or not path.startswith("/sys/devices/") or "\n" in path:
            return None, f"slot not read: `readlink -f /sys/bus/pci/devices/{bdf}` {result.describe()}"
        parent = path.rsplit("/", 1)[0]
        if not _BDF_RE.match(parent.rsplit("/", 1)[-1]):
            return None, f"{path}: the GPU sits on a root bus, no upstream port"
        text = (host.read_optional(parent + "/max_link_width") or "").strip()
    except NotRecorded:  # a fixture recorded before the slot was read: judged against the GPU alone
        return None, "slot not read (not in this recording)"
    except HostError as exc:  # a read that failed: judged against the GPU alone
        return None, f"slot not read: {exc}"
    if not text.isdigit() or not 0 < int(text) <= 32:
        return None, f"{parent}/max_link_width is {text or 'absent'}"
    return int(text), f"upstream port {parent.rsplit('/', 1)[-1]}: max_link_width {text}"


@check(
    needs=["probe nvml", "command readlink", "file /sys/devices/<port above the GPU>/max_link_width"],
    timeout=20,
    action="REPLACE_HW",
)
def pcie_link(host: Host, *, expected_width: int = 0, check_gen: bool = False, expected_gen: int = 0) -> Result:
    """Every GPU's PCIe link runs as wide as the GPU and its slot allow (and as fast, when asked).

    Why: a GPU that trained its link at x8 instead of x16 (a bad riser, a dirty slot, a
    marginal retimer) halves host-device bandwidth: data loading and NCCL traffic that
    crosses PCIe slow down for the whole job, with no error anywhere. But some platforms wire
    a x16 card to a x8 slot by design: that is no fault, and failing it cries wolf.

    How: per GPU, the current link width against what the link can do: `expected_width` when
    the profile gives it (the platform's known width), else the lower of the GPU's maximum
    (NVML/nvidia-smi) and the maximum width of the port above it in sysfs (`readlink -f
    /sys/bus/pci/devices/BDF`, then that port's `max_link_width`, the slot's LnkCap). Narrower
    than that is a downgrade and fails, naming the GPU, current against maximum. A GPU
    narrower than its own maximum whose slot cannot be read (a VM's pass-through GPU sits on a
    root bus with no port above it, e.g. the A10G of AWS g5 at x8 of x16) warns: it cannot be
    told from a design choice; give `expected_width` to judge it. The generation is judged only
    with `check_gen`, because idle GPUs downshift (Gen 1 at idle is normal): then a generation
    below `expected_gen` (or the lower of the GPU's and the host's maximum) warns; run the
    check under load to trust it.

    Fix: reseat the GPU or riser, inspect the slot, update the BMC/retimer firmware; `lspci
    -vv -s BUS` shows LnkSta against LnkCap. A platform narrower by design: set
    `expected_width` in the profile.
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    narrow, unknown, slow, evidence = [], [], [], _evidence(record)
    by_design = 0
    for g in usable:
        if g.pcie_width_current is None:
            evidence.append(f"{g.label}: link width {g.why_missing('pcie_width_current')}")
            continue
        current, top = g.pcie_width_current, g.pcie_width_max
        line = f"{g.label}: PCIe Gen {_n(g.pcie_gen_current)} of {_n(g.pcie_gen_max)}, x{current} of x{_n(top)}"
        if expected_width:
            if current < expected_width:
                narrow.append(f"{g.label}: PCIe link x{current}, expected x{expected_width} (GPU max x{_n(top)})")
        elif top is not None and current < top:
            slot, said = slot_width(host, g.pci_bus_id or "")
            line += f"; {said}"
            if slot is None and on_root_bus(g.pci_bus_id or ""):
                unknown.append(f"{g.label}: PCIe link x{current} of x{top}, slot width unknown")
            elif slot is not None and current >= min(slot, top):
                by_design += 1
                line += f" (x{current} is all the slot offers)"
            else:
                if slot is None:
                    narrow.append(f"{g.label}: PCIe link x{current}, max x{top} (the GPU's; the slot not read)")
                else:
                    want = min(slot, top)
                    narrow.append(f"{g.label}: PCIe link x{current}, max x{want} (GPU x{top}, slot x{slot})")
        evidence.append(line)
        maxima = [x for x in (g.pcie_gen_device_max, g.pcie_gen_host_max, g.pcie_gen_max) if x is not None]
        gen_want = expected_gen or (min(maxima) if maxima else 0)
        if check_gen and g.pcie_gen_current is not None and g.pcie_gen_current < gen_want:
            slow.append(f"{g.label}: PCIe Gen {g.pcie_gen_current}, expected Gen {gen_want}")
    data = {"narrow": narrow, "slow": slow, "unknown": unknown}
    if all(g.pcie_width_current is None for g in usable):
        return skip("no GPU reports its PCIe link", data=data, evidence=evidence)
    if narrow:
        return fail(
            "; ".join(narrow),
            remedy="Reseat the GPU or its riser/cable, check the slot, update BMC and retimer firmware; "
            "compare LnkSta with LnkCap in `lspci -vv -s BUS`.",
            data=data,
            evidence=evidence,
        )
    if unknown or slow:
        parts = []
        if unknown:
            parts.append("; ".join(unknown) + " (a VM's pass-through GPU: cannot tell a downgrade from the design)")
        if slow:
            parts.append("; ".join(slow) + " (idle GPUs downshift: confirm under load)")
        return warn(
            "; ".join(parts),
            remedy=(
                "Give the platform's link width as `expected_width` (the cloud's instance documentation says it). "
                if unknown
                else ""
            )
            + ("Check again under load; if the link stays slow, reseat and check BIOS PCIe settings." if slow else ""),
            action="INVESTIGATE",
            data=data,
            evidence=evidence,
        )
    design = f" ({by_design} narrower by design: the slot is no wider)" if by_design else ""
    widths = "the expected PCIe link width" if expected_width else "full PCIe link width"
    return ok(
        f"{len(usable)} GPUs at {widths}" + (" and generation" if check_gen else "") + design,
        data=data,
        evidence=evidence,
    )


# -- persistence mode -------------------------------------------------------------------------


@check(needs=["probe nvml"], timeout=20, action="FIX_CONFIG")
def persistence_mode(host: Host, *, expected: bool = True) -> Result:
    """Persistence mode is on (or off, with `expected: false`) on every GPU.

    Why: without persistence the driver tears the GPUs down whenever no process uses them
    and every job start pays seconds of initialisation per GPU (and can hit Slurm prolog
    timeouts); ECC and clock settings are also lost between jobs.

    How: each GPU's persistence mode from NVML/nvidia-smi.

    Fix: run nvidia-persistenced in persistence mode (`systemctl enable --now
    nvidia-persistenced`; some distribution units pass `--no-persistence-mode`: remove it).
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    known = [g for g in usable if g.persistence_mode is not None]
    if not known:
        return skip("no GPU reports its persistence mode", evidence=_evidence(record))
    wrong = [g for g in known if g.persistence_mode != expected]
    state = "enabled" if expected else "disabled"
    data = {"wrong": [g.index for g in wrong], "expected": expected}
    if wrong:
        return fail(
            f"persistence mode {'disabled' if expected else 'enabled'} on {_index_list(wrong)}, expected {state}",
            remedy="Run nvidia-persistenced in persistence mode (`systemctl enable --now nvidia-persistenced`; "
            "remove `--no-persistence-mode` from its unit).",
            data=data,
            evidence=_evidence(record),
        )
    return ok(f"persistence mode {state} on {len(known)} GPUs", data=data, evidence=_evidence(record))


# -- clocks and temperature ---------------------------------------------------------------


@check(needs=["probe nvml"], timeout=20, action="INVESTIGATE")
def throttle(
    host: Host,
    *,
    fail_on: tuple[str, ...] = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"),
    warn_on: tuple[str, ...] = ("sw_thermal_slowdown",),
    max_temperature: int = 0,
) -> Result:
    """No GPU is slowed down by hardware (power, thermal) and none is hotter than `max_temperature` °C.

    Why: HW slowdown means the board cut its clocks because of a power-supply or thermal
    emergency (or the power-brake signal from the chassis); such a GPU runs at a fraction
    of its speed and holds back every rank of a synchronous job.

    How: the clock event ("throttle") reasons active now, per GPU; reasons in `fail_on`
    fail, in `warn_on` warn. Reasons that are normal (idle, application clocks, software
    power cap) are reported only. Names: gpu_idle, applications_clocks_setting,
    sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown,
    hw_power_brake_slowdown, display_clocks_setting.

    Fix: check the chassis power supplies and fans in the BMC, the inlet temperature and
    airflow; `nvidia-smi -q -d PERFORMANCE` shows the reasons live.
    """
    known = set(CLOCK_REASONS.values())
    unknown = sorted((set(fail_on) | set(warn_on)) - known)
    if unknown:
        raise ValueError(f"unknown clock event reasons {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    failures, warnings, evidence = [], [], _evidence(record)
    for g in usable:
        active = g.clocks_event_reasons
        evidence.append(
            f"{g.label}: clock event reasons {', '.join(active) if active else 'none' if active is not None else 'n/a'}"
            f", {_n(g.temperature_c)} °C"
        )
        bad = [r for r in active or () if r in fail_on]
        iffy = [r for r in active or () if r in warn_on]
        if bad:
            failures.append(f"{g.label}: {', '.join(bad)} active")
        if max_temperature and g.temperature_c is not None and g.temperature_c > max_temperature:
            failures.append(f"{g.label}: {g.temperature_c} °C, expected at most {max_temperature} °C")
        if iffy:
            warnings.append(f"{g.label}: {', '.join(iffy)} active")
    data = {"failures": failures, "warnings": warnings}
    if all(g.clocks_event_reasons is None and g.temperature_c is None for g in usable):
        return skip("no GPU reports clock event reasons or temperature", data=data, evidence=evidence)
    remedy = "Check power supplies, fans, inlet temperature and airflow in the BMC; `nvidia-smi -q -d PERFORMANCE`."
    if failures:
        return fail("; ".join(failures), remedy=remedy, data=data, evidence=evidence)
    if warnings:
        return warn("; ".join(warnings), remedy=remedy, data=data, evidence=evidence)
    hottest = max((g.temperature_c for g in usable if g.temperature_c is not None), default=None)
    temp = f", hottest {hottest} °C" if hottest is not None else ""
    return ok(f"{len(usable)} GPUs: no hardware slowdown{temp}", data=data, evidence=evidence)


# -- power, clocks -------------------------------------------------------------------------------

_HELD_BACK_FAIL = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_HELD_BACK_WARN = ("sw_thermal_slowdown",)
_REASON_WORDS = {
    "hw_slowdown": "HW slowdown (the board cut its clocks: power or thermal emergency)",
    "hw_thermal_slowdown": "HW thermal slowdown (the GPU is too hot)",
    "hw_power_brake_slowdown": "HW power brake (the chassis/PSU asserted the power-brake signal)",
    "sw_thermal_slowdown": "SW thermal slowdown (the driver lowers clocks to stay under its temperature target)",
}


def _watts_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g} W"


@check(needs=["probe nvml"], timeout=20, action="FIX_CONFIG")
def power(
    host: Host,
    *,
    power_limit: float = 0,
    tolerance: float = 1.0,
    application_clocks: bool = True,
    performance_state: str = "",
) -> Result:
    """Power limit at the default (or `power_limit` W), application clocks not lowered, no clocks held back.

    Why: a power cap left below the default by a previous job, an admin's experiment or a
    power-capping service (`nvidia-smi -pl`), or application clocks pinned low (`nvidia-smi
    -ac`), slows that GPU and so every rank of a synchronous job; so do the clock event
    reasons that mean the hardware itself holds the clocks back: HW slowdown, HW thermal
    slowdown and the power brake the chassis asserts when its power supplies cannot carry the
    load.

    How: per GPU from NVML/nvidia-smi: the enforced power limit against `power_limit` (W; 0:
    the GPU's default limit), within `tolerance` W; with `application_clocks`, the graphics and
    memory application clocks against their defaults; with `performance_state` (e.g. `P0`),
    the current P-state (idle GPUs sit at P8: only set it for a check under load); the active
    clock event reasons: hw_slowdown, hw_thermal_slowdown and hw_power_brake_slowdown fail,
    sw_thermal_slowdown warns, the software power cap (drawing at the limit) and idle are
    reported only. A value the GPU does not support (NVML NOT_SUPPORTED, "N/A") is not judged;
    a GPU that reports none of them skips. The power limit is a fleet drift fact.

    Fix: `nvidia-smi -i N -pl WATTS` back to the default (`-q -d POWER` shows it) and find what
    set it (a power-capping service, the previous job's prolog); `nvidia-smi -i N -rac` resets
    application clocks; for a power brake or HW slowdown check the power supplies and fans in
    the BMC (`ipmitool sel list`), then reseat or RMA the board if it persists. NVIDIA notes HW
    slowdown "may be also reported during PState or clock change": one sample of it alone, run
    again before acting.
    """
    want_state = performance_state.strip().upper()
    if want_state and not re.fullmatch(r"P\d{1,2}", want_state):
        raise ValueError(f"performance_state: {performance_state!r} is not a P-state such as P0")
    if power_limit < 0 or tolerance < 0:
        raise ValueError("power_limit and tolerance are watts, not negative")
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    failures, warnings, evidence = [], [], _evidence(record)
    judged, held_back = 0, False
    limits: set[str] = set()
    for g in usable:
        reasons = g.clocks_event_reasons
        evidence.append(
            f"{g.label}: power limit {_watts_text(g.power_limit_w)} (default {_watts_text(g.power_limit_default_w)}, "
            f"range {_watts_text(g.power_limit_min_w)}-{_watts_text(g.power_limit_max_w)}), draw "
            f"{_watts_text(g.power_draw_w)}, {g.performance_state or 'P-state n/a'}, application clocks "
            f"{_n(g.clocks_app_graphics_mhz)}/{_n(g.clocks_app_memory_mhz)} MHz (default "
            f"{_n(g.clocks_default_app_graphics_mhz)}/{_n(g.clocks_default_app_memory_mhz)}), clock event reasons "
            + (", ".join(reasons) if reasons else "none" if reasons is not None else "n/a")
        )
        seen = False
        want = power_limit or g.power_limit_default_w
        if g.power_limit_w is not None:
            limits.add(f"{g.power_limit_w:g} W")
            if want is not None:
                seen = True
                if abs(g.power_limit_w - want) > tolerance:
                    source = "the profile's" if power_limit else "its default"
                    failures.append(f"{g.label}: power limit {g.power_limit_w:g} W, {source} is {want:g} W")
        elif power_limit:
            evidence.append(f"{g.label}: power limit {g.why_missing('power_limit_w')}")
        if application_clocks:
            for kind, now, default in (
                ("graphics", g.clocks_app_graphics_mhz, g.clocks_default_app_graphics_mhz),
                ("memory", g.clocks_app_memory_mhz, g.clocks_default_app_memory_mhz),
            ):
                if now is not None and default is not None:
                    seen = True
                    if now < default:
                        warnings.append(f"{g.label}: {kind} application clock {now} MHz, default {default} MHz")
        if want_state and g.performance_state is not None:
            seen = True
            if g.performance_state != want_state:
                warnings.append(f"{g.label}: performance state {g.performance_state}, expected {want_state}")
        if reasons is not None:
            seen = True
            bad = [r for r in reasons if r in _HELD_BACK_FAIL]
            iffy = [r for r in reasons if r in _HELD_BACK_WARN]
            if bad:
                held_back = True
                failures.append(f"{g.label}: clocks held back: " + "; ".join(_REASON_WORDS[r] for r in bad))
            if iffy:
                warnings.append(f"{g.label}: clocks held back: " + "; ".join(_REASON_WORDS[r] for r in iffy))
        judged += seen
    data = {
        "failures": failures,
        "warnings": warnings,
        "facts": {"GPU power limit": ", ".join(sorted(limits))} if limits else {},
    }
    if not judged:
        why = "; ".join(f"{g.label}: power limit {g.why_missing('power_limit_w')}" for g in usable[:4])
        return skip(
            f"no GPU reports its power limit, application clocks or clock event reasons ({why})",
            data=data,
            evidence=evidence,
        )
    remedy = (
        "`nvidia-smi -i N -pl WATTS` back to the default (`nvidia-smi -q -d POWER`) and find what lowered it; "
        "`nvidia-smi -i N -rac` resets application clocks"
    )
    if held_back:
        remedy += "; for a power brake or HW slowdown check the power supplies, fans and inlet temperature in the BMC"
    if failures:
        return fail(
            "; ".join(failures + warnings),
            remedy=remedy + ".",
            action="INVESTIGATE" if held_back else "FIX_CONFIG",
            data=data,
            evidence=evidence,
        )
    if warnings:
        return warn("; ".join(warnings), remedy=remedy + ".", data=data, evidence=evidence)
    limit_text = ", ".join(sorted(limits)) or "n/a"
    return ok(
        f"{judged} GPUs: power limit {limit_text} as expected, application clocks at default, "
        "nothing holds clocks back",
        data=data,
        evidence=evidence,
    )


# -- processes left on a GPU ----------------------------------------------------------------------


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_SLURM_JOB_CGROUP_RE = re.compile(r"/job_(\d{1,12})(?:/|$)")


def parse_slurm_job_cgroup(text: str) -> str | None:
    """/proc/PID/cgroup -> the Slurm job whose cgroup holds the process, or None.

    Slurm's cgroup plugins put a job's processes under `.../job_<id>/step_<id>/...`: cgroup v1
    `/slurm/uid_<uid>/job_<id>/...`, cgroup v2 `/system.slice/<node>_slurmstepd.scope/job_<id>/...`.
    """
    for line in text.splitlines():
        m = _SLURM_JOB_CGROUP_RE.search(line.split(":", 2)[-1])
        if m:
            return m.group(1)
    return None


def slurm_job_of(host: Host, pid: int) -> str | None:
    """The Slurm job a process runs in (its cgroup), or None: none, or /proc/PID/cgroup not readable."""
    try:
        text = host.read_optional(f"/proc/{pid}/cgroup")
    except (HostError, OSError):  # not recorded in a fixture, not permitted: not known to be a job's
        return None
    return parse_slurm_job_cgroup(text or "")


def parse_ps_users(text: str) -> dict[int, str]:
    """`ps -o pid=,user= -p PIDS` -> {pid: user}."""
    users = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            users[int(parts[0])] = parts[1]
    return users


@check(needs=["probe nvml", "command ps", "file /proc/<pid>/cgroup"], timeout=20, action="FIX_CONFIG")
def processes(host: Host, *, max_memory_mib: int = 256, graphics: bool = False, job_gpus_only: bool = True) -> Result:
    """No compute process and no GPU memory is left on any GPU before a job starts.

    Why: a process of the previous job that outlived it (a dataloader worker, an orphaned
    rank, a `nohup` a user left) keeps its GPU memory and its share of the GPU: the next job
    runs out of memory at start ("CUDA out of memory" with nothing of its own allocated) or
    runs slowly beside it. Memory held with no process visible (a process in another PID
    namespace, a context the driver did not free) does the same.

    How: per GPU, NVML's running compute processes (`nvidia-smi -q -x` `<processes>` over
    SSH), with each process's user from `ps -o pid=,user= -p PIDS`; graphics-only processes
    (Xorg) are left out unless `graphics`. A compute process fails (FIX_CONFIG: the job's
    cleanup left it), naming GPU, PID, process, user and memory; more than `max_memory_mib`
    MiB of GPU memory used with no process to show for it fails (RESET_GPU). A process whose
    /proc/PID/cgroup puts it in a Slurm job (`.../job_<id>/...`) is that job's: outside a job
    (`clustercheck health` on a busy node, a `run`) it is listed, not judged; in the job's own
    prolog any other job's process on its GPUs fails, and a process in no job's cgroup is a
    leftover wherever the check runs. On a node shared between jobs, with `job_gpus_only` (the
    default) and a job in view (`clustercheck prolog`, or a run inside a job), only the job's
    GPUs are judged (SLURM_JOB_GPUS, else a numeric CUDA_VISIBLE_DEVICES: the node's GPU
    indices, which NVML's index follows where gres.conf lists the GPUs in /dev/nvidiaN order);
    the other jobs' GPUs are listed, not judged.

    Fix: `kill PID` (and find why the previous job's processes outlived it: Slurm's
    `ProctrackType=proctrack/cgroup` with `KillWait`, an epilog that kills what is left on
    the GPUs); memory held without a process: `nvidia-smi -r -i N` (reset the GPU) or reboot.
    """
    if max_memory_mib < 0:
        raise ValueError("max_memory_mib is MiB, not negative")
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    evidence = _evidence(record)
    from clustercheck.slurm import current_job

    job = current_job()
    if job_gpus_only and job is not None and job.gpus is not None:
        others = [g for g in usable if g.index not in job.gpus]
        if others:
            evidence.append(f"{_index_list(others)}: not GPUs of job {job.job_id or '?'}, not judged")
        usable = [g for g in usable if g.index in job.gpus]
        if not usable:
            return skip(
                f"job {job.job_id or '?'} has GPUs {','.join(map(str, job.gpus))}, none of which NVML lists",
                evidence=evidence,
            )
    known = [g for g in usable if g.processes is not None or g.memory_used_mib is not None]
    if not known:
        why = "; ".join(f"{g.label}: processes {g.why_missing('processes')}" for g in usable[:4])
        return skip(f"no GPU reports its processes or memory use ({why})", evidence=_evidence(record))
    found = [(g, p) for g in known for p in g.processes or () if graphics or p.type is None or "C" in p.type]
    running = []  # processes of a Slurm job that still runs (outside a job's own prolog: not leftovers)
    for g, p in list(found):
        owner = slurm_job_of(host, p.pid)
        this_job = job is not None and job.job_id is not None and owner == job.job_id
        if owner is not None and (job is None or this_job):
            found.remove((g, p))
            running.append(f"{g.label}: PID {p.pid} belongs to {'this' if this_job else 'running'} job {owner}")
    evidence += running
    users: dict[int, str] = {}
    if found:
        pids = ",".join(sorted({str(p.pid) for _, p in found}, key=int))
        result = host.run("ps", "-o", "pid=,user=", "-p", pids)
        users = parse_ps_users(result.stdout)
        if not users:
            evidence.append(f"`ps -o pid=,user= -p {pids}` {result.describe()}: users not known")
    leftovers = [
        f"{g.label}: PID {p.pid} {_short(p.name or '?')} (user {users.get(p.pid, '?')}, "
        f"{_n(p.used_memory_mib)} MiB, type {p.type or '?'})"
        for g, p in found
    ]
    held = []
    for g in known:
        listed = sum(p.used_memory_mib or 0 for p in g.processes or ())
        evidence.append(
            f"{g.label}: {_n(g.memory_used_mib)} of {_n(g.memory_total_mib)} MiB used, "
            f"{len(g.processes) if g.processes is not None else 'n/a'} process(es)"
        )
        if (
            g.memory_used_mib is not None
            and g.memory_used_mib - listed > max_memory_mib
            and not any(gg is g for gg, _ in found)
        ):
            held.append(f"{g.label}: {g.memory_used_mib} MiB of GPU memory used with no compute process listed")
    data = {
        "processes": [
            {
                "gpu": g.index,
                "pid": p.pid,
                "name": p.name,
                "user": users.get(p.pid),
                "used_memory_mib": p.used_memory_mib,
            }
            for g, p in found
        ],
        "memory_held": held,
    }
    if leftovers or held:
        remedy = []
        if leftovers:
            remedy.append(
                "kill the leftover processes (`kill PID`) and make the job's end take them along "
                "(ProctrackType=proctrack/cgroup, an epilog that kills what is left on the GPUs)"
            )
        if held:
            remedy.append("reset the GPU (`nvidia-smi -r -i N`) or reboot to free memory no process holds")
        return fail(
            "; ".join(leftovers + held),
            remedy="; ".join(remedy).capitalize() + ".",
            action="FIX_CONFIG" if leftovers else "RESET_GPU",
            data=data,
            evidence=evidence,
        )
    return ok(f"{len(known)} GPUs: no compute process, no GPU memory left", data=data, evidence=evidence)


# -- XID events -----------------------------------------------------------------------------


def kernel_log(host: Host) -> tuple[str, str]:
    """(kernel log text, the command that gave it): the `kernel_log` fact (facts/kernel_log.py)."""
    return kernel_log_fact(host)


def _boot_id(host: Host) -> str | None:
    try:
        text = host.read_optional("/proc/sys/kernel/random/boot_id")
    except HostError:  # not recorded in a fixture
        return None
    value = (text or "").strip()
    return value if re.fullmatch(r"[0-9a-f-]{36}", value) else None


def _validate_xid(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    problems = []
    try:
        parse_since(str(params.get("since", "boot")))
    except ValueError as exc:
        problems.append(str(exc))
    for value in params.get("ignore") or ():
        if not str(value).strip().isdigit():
            problems.append(f"ignore: {value!r} is not an XID number")
    for name in ("repeat_threshold", "repeat_fail"):
        value = params.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{name}: {value!r} is not a count (0 turns it off)")
    return problems


def _time_window(host: Host, kind: str, number: float | None) -> tuple[Window, str]:
    """The window of a duration or time `since`, from /proc/uptime and /proc/stat's btime."""
    uptime = parse_uptime(host.read_optional("/proc/uptime") or "")
    btime = parse_btime(host.read_optional("/proc/stat") or "")
    if kind == "duration":
        assert number is not None
        if uptime is None:
            raise HostError(host.name, "cannot tell: /proc/uptime gives no uptime, so no time window can be placed")
        after = uptime - number
        epoch = btime + after if btime is not None else None
        return Window(after, epoch), f"the last {_span(number)} (kernel log after {max(after, 0):.0f} s of uptime)"
    assert number is not None
    when = datetime.fromtimestamp(number, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if btime is None:
        return Window(None, number), f"since {when} (lines with ISO times only: /proc/stat gives no boot time)"
    return Window(number - btime, number), f"since {when} (kernel log after {max(number - btime, 0):.0f} s of uptime)"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


@dataclass(frozen=True)
class _Group:
    xid: int
    pci: str
    root: int
    events: tuple[XidEvent, ...]
    occurrences: int

    @property
    def first(self) -> XidEvent:
        return self.events[0]

    @property
    def root_info(self) -> XidInfo | None:
        return XID_CATALOG.get(self.root)


def _groups(events: list[XidEvent]) -> list[_Group]:
    """Events grouped by (XID, GPU, root cause), in the order of their first line."""
    counted = bursts(events)
    keyed: dict[tuple[int, str, int], list[XidEvent]] = {}
    for e, root in zip(events, root_causes(events), strict=True):
        keyed.setdefault((e.xid, e.pci, root), []).append(e)
    groups = []
    for (code, pci, root), members in keyed.items():
        occurrences = bursts(members)[(code, pci)] if root != code else counted[(code, pci)]
        groups.append(_Group(code, pci, root, tuple(members), occurrences))
    return groups


def _chained_fatal(group: _Group, by_key: dict[tuple[str, int], list[XidEvent]]) -> bool:
    """A chain's first XID is judged by its root: an XID 45 caused by a fatal XID 149 is fatal.

    The root's own line, where the log holds it (the latest before the chain on that GPU),
    says Fatal or Nonfatal for the NVLink5 XIDs; without it the catalog judges the root.
    """
    if group.root == group.xid:
        return group.first.fatal
    earlier = [e for e in by_key.get((group.pci, group.root), []) if e.line < group.first.line]
    if earlier:
        return earlier[-1].fatal
    info = group.root_info
    return info.fatal if info else False


def _describe(group: _Group) -> str:
    first = group.first
    said = first.message.rstrip(".") or (first.info.mnemonic if first.info else "")
    known = "" if first.info else ", not in NVIDIA's catalog"
    times = f" x{len(group.events)}" if len(group.events) > 1 else ""
    if group.occurrences > 1 and group.occurrences != len(group.events):
        times += f" in {group.occurrences} occurrences"
    if group.root != group.xid:
        info = group.root_info
        name = f"{info.mnemonic}" if info else "not in NVIDIA's catalog"
        kind = "an NVLink failure" if group.root in NVLINK_XIDS else "its root cause"
        action = XID_ACTIONS.get(info.action, info.action) if info else "look it up in NVIDIA's catalog"
        return (
            f"XID {group.xid} on GPU {group.pci}{times} caused by previous XID {group.root} ({name}): {kind}, {action}"
        )
    return f"XID {group.xid} on GPU {group.pci}{times} ({said[:80]}{known}): {first.action}"


@check(
    needs=[
        "command dmesg",
        "command journalctl",
        "file /proc/sys/kernel/random/boot_id",
        "file /proc/uptime",
        "file /proc/stat",
    ],
    timeout=20,
    validate=_validate_xid,
    action="RESET_GPU",
)
def xid(
    host: Host,
    *,
    ignore: tuple[str, ...] = (),
    since: str = "boot",
    repeat_threshold: int = 3,
    repeat_fail: int = 0,
) -> Result:
    """The kernel log holds no XID event that NVIDIA classes as fatal, no chain ending in one, no repeating fault.

    Why: XID events are the NVIDIA driver's error reports. Some mean the GPU needs a reset
    (95 uncontained error, 119/120 GSP errors, 64 row-remap failure), some a reboot (79:
    the GPU fell off the bus) or a cold power-cycle; a node with one of those must not take
    the next job. Others (13, 31, 43, 45, 94) are application faults and, once, say nothing
    bad about the node; but an XID 45 "caused by previous Xid 149" is the NVLink failure that
    killed the job, and the same application fault on the same GPU job after job points at
    the GPU.

    How: reads the kernel log (`dmesg`, or `journalctl -k -b` where dmesg is not
    permitted; nothing read is "cannot tell", never a clean log), finds `NVRM: Xid
    (PCI:...): N` lines (and "fallen off the bus" messages without one), and classifies each
    with NVIDIA's XID catalog (immediate action and fatal/non-fatal, as NVIDIA's NVSentinel
    encodes it, through the Blackwell XIDs 144-161; the NVLink5 XIDs 144-150 by the
    Fatal/Nonfatal word of their line). A line "caused by previous Xid N" is judged by the
    root of its chain. Fatal ones fail; XIDs the catalog does not know warn; a non-fatal XID
    seen in `repeat_threshold` or more separate occurrences on one GPU within the window
    warns (a burst of lines counts once), in `repeat_fail` or more fails (0: never); the
    rest are listed in the evidence. `ignore` takes XID numbers to leave out.
    `since` sets the window: `boot` (the whole log since boot); `previous` (the bundled
    prolog profile) only what the log gained since this check's previous run in `clustercheck
    prolog` or `health` (a marker beside the prolog's state file keeps the boot id and the
    last line's uptime stamp; a new boot, no marker, or a run elsewhere judges the whole
    boot); a duration (`2h`, `30m`, `1d`) or an ISO time (`2025-01-21T02:30:00Z`, UTC without a
    zone), placed on dmesg's uptime stamps with /proc/uptime and /proc/stat's boot time (lines
    with ISO stamps by their time; lines without any time are judged whatever the window).
    `health` does not resume a gpu.xid drain on such a partial look: that waits for a reboot
    (or an admin's resume).

    Fix: follow the action the summary names (reset the GPU, reboot, power-cycle; for an
    NVLink root cause check `nvidia-smi nvlink -s` and the fabric); an XID that comes back on
    the same GPU after a reset is a hardware fault: RMA. A repeating application fault: run
    `dcgmi diag -r 3` on that GPU before giving it jobs again. With `since: boot`, an old event
    keeps failing the check until a reboot; `since: 2h` or `previous` lets it age out.
    """
    problems = _validate_xid(
        {"since": since, "ignore": ignore, "repeat_threshold": repeat_threshold, "repeat_fail": repeat_fail}, ()
    )
    if problems:
        raise ValueError("; ".join(problems))
    kind, number = parse_since(since)
    ignored = {int(value) for value in ignore}
    text, source = kernel_log(host)
    events = [e for e in parse_xids(text) if e.xid not in ignored]
    window, older, unplaced, marker = "boot", 0, 0, None
    if kind == "previous":
        from clustercheck import slurm

        boot = _boot_id(host)
        previous = slurm.read_marker("gpu.xid")
        after = previous.get("uptime_s") if previous and previous.get("boot_id") == boot else None
        if boot and isinstance(after, (int, float)):
            window = f"since the previous run (kernel log after {after:.0f} s of uptime)"
            kept = [e for e in events if e.uptime_s is None or e.uptime_s > after]
            older, events = len(events) - len(kept), kept
        last = last_stamp(text)
        if boot and last is not None and slurm.marker_folder() is not None:
            marker = {"name": "gpu.xid", "boot_id": boot, "uptime_s": last}
    elif kind in ("duration", "time"):
        bounds, window = _time_window(host, kind, number)
        placed = [(e, bounds.holds(e)) for e in events]
        unplaced = sum(1 for _, held in placed if held is None)
        older = sum(1 for _, held in placed if held is False)
        events = [e for e, held in placed if held is not False]
    span = {"boot": "since boot", "previous": "since the previous run", "duration": "in " + window.split(" (")[0]}.get(
        kind, window.split(" (")[0]
    )
    if kind == "previous" and window == "boot":
        span = "since boot"
    evidence = [f"{len(text.splitlines())} lines of kernel log from `{source}`; judged: {window}"]
    if older:
        evidence.append(f"{older} XID event(s) from before the window, not judged")
    if unplaced:
        evidence.append(f"{unplaced} XID event(s) on lines without a time the window can use: judged")
    evidence += [
        f"line {e.line}: XID {e.xid} on {e.pci}"
        + (f" at {e.uptime_s:.0f} s" if e.uptime_s is not None else "")
        + f": {e.message[:160]}"
        for e in events[:200]
    ]
    if len(events) > 200:
        evidence.append(f"... and {len(events) - 200} more XID lines")
    groups = _groups(events)
    by_key: dict[tuple[str, int], list[XidEvent]] = {}
    for e in events:
        by_key.setdefault((e.pci, e.xid), []).append(e)
    fatal = [g for g in groups if _chained_fatal(g, by_key)]
    unknown = [g for g in groups if g not in fatal and (g.root_info is None)]
    repeated = [
        g
        for g in groups
        if g not in fatal and g not in unknown and repeat_threshold and g.occurrences >= repeat_threshold
    ]
    too_many = [g for g in repeated if repeat_fail and g.occurrences >= repeat_fail]
    data = {
        "events": [
            {
                "xid": e.xid,
                "pci": e.pci,
                "line": e.line,
                "uptime_s": e.uptime_s,
                "fatal": e.fatal,
                "action": e.action,
                **({"caused_by": e.caused_by, "root_cause": root} if e.caused_by is not None else {}),
            }
            for e, root in zip(events[:500], root_causes(events)[:500], strict=True)
        ],
        "occurrences": [
            {"xid": g.xid, "pci": g.pci, "root_cause": g.root, "occurrences": g.occurrences} for g in groups
        ],
        "source": source,
        "window": window,
        **({"marker": marker} if marker else {}),
    }

    def repeats(group: list[_Group]) -> str:
        return "; ".join(
            f"XID {g.xid} on GPU {g.pci} in {g.occurrences} separate occurrences {span} "
            f"({(g.first.message.rstrip('.') or (g.first.info.mnemonic if g.first.info else ''))[:60]})"
            for g in group
        )

    if fatal or too_many:
        nvlink = any(g.root in NVLINK_XIDS for g in fatal)
        lost = any(g.root == 79 for g in fatal)
        parts = [_describe(g) for g in fatal]
        if too_many:
            parts.append(repeats(too_many) + f", at or over repeat_fail {repeat_fail}")
        return fail(
            "; ".join(parts),
            remedy="Drain the node and follow NVIDIA's action for each XID; "
            + ("for an NVLink root cause check `nvidia-smi nvlink -s` and the NVSwitch fabric; " if nvlink else "")
            + "if the XID returns on the same GPU after a reset or reboot, open an RMA.",
            action="REBOOT" if lost else "RESET_GPU",
            data=data,
            evidence=evidence,
        )
    if unknown or repeated:
        parts = [_describe(g) for g in unknown]
        if repeated:
            parts.append(repeats(repeated) + f", at or over repeat_threshold {repeat_threshold}")
        return warn(
            "; ".join(parts),
            remedy=("Look the XID up in NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors). " if unknown else "")
            + (
                "The same fault in job after job on one GPU points at the GPU: drain it and run `dcgmi diag -r 3`; "
                "if the diagnostic passes, look at the application (XID 13/31 are usually its own bugs)."
                if repeated
                else ""
            ),
            action="INVESTIGATE",
            data=data,
            evidence=evidence,
        )
    if events:
        codes = ", ".join(sorted({str(e.xid) for e in events}, key=int))
        return ok(f"no fatal XID {span} (non-fatal: XID {codes})", data=data, evidence=evidence)
    if not text.strip():
        return ok(
            "the kernel log is empty (cleared with `dmesg --clear`?): no XID events", data=data, evidence=evidence
        )
    return ok(f"no XID events {span}", data=data, evidence=evidence)


# -- MIG and compute mode --------------------------------------------------------------------


@check(needs=["probe nvml"], timeout=20, action="FIX_CONFIG")
def isolation(host: Host, *, mig: str = "any", compute_mode: str = "any") -> Result:
    """MIG mode is `mig` (enabled/disabled) and the compute mode is `compute_mode` on every GPU.

    Why: a node meant for whole-GPU training with MIG left enabled offers slices, not GPUs
    (CUDA sees only MIG devices); a multi-tenant node without EXCLUSIVE_PROCESS lets two
    jobs share a GPU. A pending MIG change applies only after a GPU reset.

    How: per GPU, current and pending MIG mode and the compute mode (DEFAULT,
    EXCLUSIVE_PROCESS, PROHIBITED); `any` does not judge that setting, but a pending MIG
    change always fails.

    Fix: `nvidia-smi -i N -mig 0|1` then reset the GPU; `nvidia-smi -i N -c
    EXCLUSIVE_PROCESS` (persist it in the node's boot configuration).
    """
    mig_want = mig.strip().lower()
    mode_want = compute_mode.strip().upper()
    if mig_want not in ("enabled", "disabled", "any"):
        raise ValueError(f"mig: {mig!r} is not one of enabled, disabled, any")
    if mode_want not in ("DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED", "ANY"):
        raise ValueError(f"compute_mode: {compute_mode!r} is not one of DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED, any")
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    problems, evidence = [], _evidence(record)
    for g in usable:
        mig_now = "n/a" if g.mig_current is None else "enabled" if g.mig_current else "disabled"
        evidence.append(f"{g.label}: MIG {mig_now}, compute mode {g.compute_mode or 'n/a'}")
        if g.mig_pending is not None and g.mig_current is not None and g.mig_pending != g.mig_current:
            problems.append(
                f"{g.label}: MIG change to {'enabled' if g.mig_pending else 'disabled'} pending a GPU reset"
            )
        if mig_want == "enabled" and not g.mig_current:
            problems.append(f"{g.label}: MIG {mig_now}, expected enabled")
        if mig_want == "disabled" and g.mig_current:
            problems.append(f"{g.label}: MIG enabled, expected disabled")
        if mode_want != "ANY" and g.compute_mode is not None and g.compute_mode != mode_want:
            problems.append(f"{g.label}: compute mode {g.compute_mode}, expected {mode_want}")
    data = {"problems": problems}
    if problems:
        return fail(
            "; ".join(problems),
            remedy="`nvidia-smi -i N -mig 0|1` and reset the GPU; `nvidia-smi -i N -c MODE`; "
            "make both part of the node's boot configuration.",
            data=data,
            evidence=evidence,
        )
    modes = sorted({g.compute_mode or "n/a" for g in usable})
    migs = sorted({"MIG on" if g.mig_current else "MIG off" for g in usable})
    return ok(f"{len(usable)} GPUs: {', '.join(migs)}, compute mode {', '.join(modes)}", data=data, evidence=evidence)


# -- GPUDirect RDMA -------------------------------------------------------------------------

_PEERMEM = ("nvidia_peermem", "nv_peer_mem")
_DMABUF_ARCHS = ("Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell")


@check(
    needs=["probe nvml", "file /proc/modules", "file /proc/driver/nvidia/version", "file /proc/sys/kernel/osrelease"],
    timeout=20,
    action="FIX_CONFIG",
)
def peermem(host: Host, *, allow_dmabuf: bool = True) -> Result:
    """GPUDirect RDMA is possible: nvidia_peermem (or nv_peer_mem) is loaded, or DMA-BUF is available.

    Why: without a peer-memory path the NIC cannot read GPU memory, and NCCL silently
    stages every inter-node transfer through host memory: the job runs, several times
    slower, with no error ("NET/IB : GPU Direct RDMA Disabled" only at NCCL_DEBUG=INFO).

    How: reads /proc/modules for `nvidia_peermem` (driver R470 and later) or the legacy
    `nv_peer_mem`. Otherwise, with `allow_dmabuf`, the DMA-BUF path counts when its
    prerequisites hold (domain-facts §C.4, NVIDIA GPU Operator RDMA docs): the open kernel
    module (/proc/driver/nvidia/version), Linux >= 5.12, a CUDA >= 11.7 driver, and Turing
    or newer GPUs. Skipped where no RDMA stack is loaded (no ib_core).

    Fix: `modprobe nvidia_peermem` and add it to /etc/modules-load.d/ (it needs MLNX_OFED/
    DOCA-OFED's ib_core); or move to the open kernel module for DMA-BUF.
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    loaded = {line.split()[0] for line in host.read("/proc/modules").splitlines() if line.strip()}
    if "ib_core" not in loaded:
        return skip("no RDMA stack loaded (ib_core is not in /proc/modules): GPUDirect RDMA does not apply")
    found = [m for m in _PEERMEM if m in loaded]
    if found:
        return ok(f"{found[0]} loaded: GPUDirect RDMA through peer memory", data={"module": found[0]})
    version_file = host.read_optional("/proc/driver/nvidia/version") or ""
    module, is_open = parse_nvidia_version_file(version_file)
    release = host.read("/proc/sys/kernel/osrelease").strip()
    kernel_ok = _kernel_at_least(release, (5, 12))
    cuda_ok = record.cuda_version is not None and _vkey(record.cuda_version) >= (11, 7)
    archs = sorted({g.architecture or "?" for g in usable})
    arch_ok = all(g.architecture in _DMABUF_ARCHS for g in usable)
    data = {"open_kernel_module": is_open, "kernel": release, "cuda": record.cuda_version, "architectures": archs}
    evidence = [
        f"kernel module {module or 'not loaded'} ({'open' if is_open else 'proprietary'})",
        f"kernel {release}",
        f"driver CUDA {record.cuda_version or 'n/a'}",
        f"GPU architectures {', '.join(archs)}",
    ]
    if allow_dmabuf and is_open and kernel_ok and cuda_ok and arch_ok:
        return ok(
            f"nvidia_peermem not loaded, but DMA-BUF is available (open kernel module {module}, kernel {release})",
            data=data,
            evidence=evidence,
        )
    missing = []
    if allow_dmabuf:
        if not is_open:
            missing.append("the proprietary kernel module has no DMA-BUF export")
        if not kernel_ok:
            missing.append(f"kernel {release} < 5.12")
        if not cuda_ok:
            missing.append(f"driver CUDA {record.cuda_version or 'n/a'} < 11.7")
        if not arch_ok:
            missing.append(f"GPU architecture {', '.join(archs)} older than Turing")
    why = f" and no DMA-BUF path ({'; '.join(missing)})" if missing else ""
    return fail(
        f"nvidia_peermem not loaded{why}: GPUDirect RDMA is off, NCCL stages network traffic through host memory",
        remedy="`modprobe nvidia_peermem` and persist it in /etc/modules-load.d/ (needs MLNX_OFED/DOCA-OFED), "
        "or use the open kernel module with Linux >= 5.12 for DMA-BUF.",
        data=data,
        evidence=evidence,
    )


def _kernel_at_least(release: str, minimum: tuple[int, int]) -> bool:
    m = re.match(r"(\d+)\.(\d+)", release)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= minimum
