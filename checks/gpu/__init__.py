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
from collections.abc import Iterable
from dataclasses import dataclass

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts.gpu import gpus
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


# -- count, model -------------------------------------------------------------------------


@check(needs=["probe nvml", *NEEDS, "file /etc/slurm/gres.conf"], timeout=20)
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
        "facts": {"GPUs visible": len(answering)},
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


@check(needs=["probe nvml"], timeout=20)
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


@check(needs=["probe nvml", "file /proc/driver/nvidia/version"], timeout=20)
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
            remedy="Install the site's driver branch; after an upgrade reboot so the kernel module and the "
            "libraries match (`cat /proc/driver/nvidia/version` vs `nvidia-smi`).",
            data=data,
            evidence=evidence,
        )
    wanted = f", expected {exact}" if exact else f", >= {min_version}" if min_version else ""
    cuda = f" (CUDA {record.cuda_version})" if record.cuda_version else ""
    return ok(f"driver {version}{cuda}{wanted}; kernel module matches", data=data, evidence=evidence)


# -- ECC -----------------------------------------------------------------------------------


@check(needs=["probe nvml"], timeout=20)
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
    data = {"gpus": [g.to_json() for g in usable], "failures": failures, "warnings": warnings}
    if not judged:
        return skip(f"no GPU here supports ECC ({_index_list(usable)})", data=data, evidence=evidence)
    if failures:
        return fail(
            "; ".join(failures),
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


@check(needs=["probe nvml"], timeout=20)
def pcie_link(host: Host, *, expected_width: int = 0, check_gen: bool = False, expected_gen: int = 0) -> Result:
    """Every GPU's PCIe link runs at full width (and generation, when asked).

    Why: a GPU that trained its link at x8 instead of x16 (a bad riser, a dirty slot, a
    marginal retimer) halves host-device bandwidth: data loading and NCCL traffic that
    crosses PCIe slow down for the whole job, with no error anywhere.

    How: current against maximum link width per GPU (or against `expected_width`, for
    platforms whose slots are narrower than the GPU); a narrower link fails. The link
    generation is judged only with `check_gen`, because idle GPUs downshift (Gen 1 at idle
    is normal): then a generation below `expected_gen` (or the maximum) warns; run the
    check under load to trust it.

    Fix: reseat the GPU or riser, inspect the slot, update the BMC/retimer firmware; `lspci
    -vv -s BUS` shows LnkSta against LnkCap.
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    narrow, slow, evidence = [], [], _evidence(record)
    for g in usable:
        if g.pcie_width_current is None:
            evidence.append(f"{g.label}: link width not reported")
            continue
        want = expected_width or g.pcie_width_max or 0
        evidence.append(
            f"{g.label}: PCIe Gen {_n(g.pcie_gen_current)} of {_n(g.pcie_gen_max)}, "
            f"x{g.pcie_width_current} of x{_n(g.pcie_width_max)}"
        )
        if g.pcie_width_current < want:
            narrow.append(f"{g.label} PCIe link x{g.pcie_width_current}, expected x{want}")
        gen_want = expected_gen or g.pcie_gen_max or 0
        if check_gen and g.pcie_gen_current is not None and g.pcie_gen_current < gen_want:
            slow.append(f"{g.label} PCIe Gen {g.pcie_gen_current}, expected Gen {gen_want}")
    data = {"narrow": narrow, "slow": slow}
    if len(evidence) == 1 + len(usable) and all("not reported" in e for e in evidence[1:]):
        return skip("no GPU reports its PCIe link", data=data, evidence=evidence)
    if narrow:
        return fail(
            "; ".join(narrow),
            remedy="Reseat the GPU or its riser/cable, check the slot, update BMC and retimer firmware; "
            "compare LnkSta with LnkCap in `lspci -vv -s BUS`.",
            data=data,
            evidence=evidence,
        )
    if slow:
        return warn(
            "; ".join(slow) + " (idle GPUs downshift: confirm under load)",
            remedy="Check again under load; if the link stays slow, reseat and check BIOS PCIe settings.",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"{len(usable)} GPUs at full PCIe link width" + (" and generation" if check_gen else ""),
        data=data,
        evidence=evidence,
    )


# -- persistence mode -------------------------------------------------------------------------


@check(needs=["probe nvml"], timeout=20)
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


@check(needs=["probe nvml"], timeout=20)
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


# -- XID events -----------------------------------------------------------------------------

# NVIDIA's XID catalog ("Analyzing Xid Errors with the Xid Catalog",
# https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Resolution Bucket
# (Immediate Action)) as NVIDIA encodes it for its own health monitor:
# NVIDIA/NVSentinel:distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv
# @6f8b0fcf (code, mnemonic, immediate action, FATAL/NONFATAL). FATAL ones fail the check;
# NONFATAL ones (application faults such as 13, 31, 43, 45, 94) are reported, not judged.
_XID_CATALOG = """\
1 ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
2 ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
3 ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
4 ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY UNEXPECTED_ERR_REPORT_ISSUE F
5 ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW UNEXPECTED_ERR_REPORT_ISSUE F
6 ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR UNEXPECTED_ERR_REPORT_ISSUE F
7 ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR UNEXPECTED_ERR_REPORT_ISSUE F
8 ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT RESTART_APP N
9 ROBUST_CHANNEL_GR_ERROR_INSTANCE UNEXPECTED_ERR_REPORT_ISSUE F
10 ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP UNEXPECTED_ERR_REPORT_ISSUE F
11 ROBUST_CHANNEL_GR_ERROR_MISSING_HW RESTART_APP N
12 ROBUST_CHANNEL_GR_ERROR_SW_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
13 ROBUST_CHANNEL_GR_EXCEPTION RESTART_APP N
14 ROBUST_CHANNEL_FAKE_ERROR IGNORE N
15 ROBUST_CHANNEL_SCANLINE_TIMEOUT UNEXPECTED_ERR_REPORT_ISSUE F
16 ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT UNEXPECTED_ERR_REPORT_ISSUE F
17 ROBUST_CHANNEL_PARAMETER_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
18 ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
19 ROBUST_CHANNEL_DISP_MISSED_NOTIFIER UNEXPECTED_ERR_REPORT_ISSUE F
20 ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
21 ROBUST_CHANNEL_ME_ERROR_SW_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
22 ROBUST_CHANNEL_VP_ERROR_SW_METHOD UNEXPECTED_ERR_REPORT_ISSUE F
23 ROBUST_CHANNEL_RC_LOGGING_ENABLED UNEXPECTED_ERR_REPORT_ISSUE F
24 ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT UNEXPECTED_ERR_REPORT_ISSUE F
25 ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY RESTART_APP N
26 ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT UNEXPECTED_ERR_REPORT_ISSUE F
27 ROBUST_CHANNEL_VP_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
28 ROBUST_CHANNEL_VP2_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
29 ROBUST_CHANNEL_BSP_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
30 ROBUST_CHANNEL_BAD_ADDR_ACCESS UNEXPECTED_ERR_REPORT_ISSUE F
31 ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT RESTART_APP N
32 ROBUST_CHANNEL_PBDMA_ERROR RESTART_APP N
33 ROBUST_CHANNEL_SEC_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
34 ROBUST_CHANNEL_MSVLD_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
35 ROBUST_CHANNEL_MSPDEC_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
36 ROBUST_CHANNEL_MSPPP_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
37 ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD IGNORE N
38 ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT IGNORE N
39 ROBUST_CHANNEL_CE0_ERROR RESTART_APP N
40 ROBUST_CHANNEL_CE1_ERROR RESTART_APP N
41 ROBUST_CHANNEL_CE2_ERROR RESTART_APP N
42 ROBUST_CHANNEL_VIC_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
43 ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR IGNORE N
44 ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW IGNORE N
45 ROBUST_CHANNEL_PREEMPTIVE_REMOVAL WORKFLOW_XID_45 N
46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR RESET_GPU F
47 ROBUST_CHANNEL_NVENC0_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
48 ROBUST_CHANNEL_GPU_ECC_DBE WORKFLOW_XID_48 F
49 SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY UNEXPECTED_ERR_REPORT_ISSUE F
50 SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
51 SILENT_RUNNING_STRESS_TEST_FAILURE UNEXPECTED_ERR_REPORT_ISSUE F
52 SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE UNEXPECTED_ERR_REPORT_ISSUE F
53 SILENT_RUNNING_TEMP_REDUCED_CLOCKING UNEXPECTED_ERR_REPORT_ISSUE F
54 SILENT_RUNNING_PWR_REDUCED_CLOCKING CHECK_MECHANICALS F
55 SILENT_RUNNING_TEMPERATURE_READ_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
56 DISPLAY_CHANNEL_EXCEPTION UNEXPECTED_ERR_REPORT_ISSUE F
57 FB_LINK_TRAINING_FAILURE_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
58 FB_MEMORY_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
59 PMU_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
60 ROBUST_CHANNEL_SEC2_ERROR RESTART_APP N
61 PMU_BREAKPOINT UNEXPECTED_ERR_REPORT_ISSUE F
62 PMU_HALT_ERROR RESET_GPU F
63 INFOROM_DRAM_RETIREMENT_EVENT IGNORE N
64 INFOROM_DRAM_RETIREMENT_FAILURE RESET_GPU F
65 ROBUST_CHANNEL_NVENC1_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
66 ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION IGNORE N
67 ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION IGNORE N
68 ROBUST_CHANNEL_NVDEC0_ERROR RESTART_APP N
69 ROBUST_CHANNEL_GR_CLASS_ERROR RESTART_APP N
70 ROBUST_CHANNEL_CE3_ERROR RESTART_APP N
71 ROBUST_CHANNEL_CE4_ERROR RESTART_APP N
72 ROBUST_CHANNEL_CE5_ERROR RESTART_APP N
73 ROBUST_CHANNEL_NVENC2_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
74 NVLINK_ERROR WORKFLOW_NVLINK_ERR F
75 ROBUST_CHANNEL_CE6_ERROR RESTART_APP N
76 ROBUST_CHANNEL_CE7_ERROR RESTART_APP N
77 ROBUST_CHANNEL_CE8_ERROR RESTART_APP N
78 VGPU_START_ERROR UPDATE_SWFW F
79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS RESTART_BM F
80 PBDMA_PUSHBUFFER_CRC_MISMATCH RESTART_APP N
81 ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
82 ROBUST_CHANNEL_NVJPG0_ERROR RESTART_APP N
83 ROBUST_CHANNEL_NVDEC1_ERROR RESTART_APP N
84 ROBUST_CHANNEL_NVDEC2_ERROR RESTART_APP N
85 ROBUST_CHANNEL_CE9_ERROR RESTART_APP N
86 ROBUST_CHANNEL_OFA0_ERROR RESTART_APP N
87 NVTELEMETRY_DRIVER_REPORT UNEXPECTED_ERR_REPORT_ISSUE F
88 ROBUST_CHANNEL_NVDEC3_ERROR RESTART_APP N
89 ROBUST_CHANNEL_NVDEC4_ERROR RESTART_APP N
90 LTC_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
91 RESERVED_XID UNEXPECTED_ERR_REPORT_ISSUE F
92 EXCESSIVE_SBE_INTERRUPTS IGNORE N
93 INFOROM_ERASE_LIMIT_EXCEEDED IGNORE N
94 ROBUST_CHANNEL_CONTAINED_ERROR RESTART_APP N
95 ROBUST_CHANNEL_UNCONTAINED_ERROR RESET_GPU F
96 ROBUST_CHANNEL_NVDEC5_ERROR RESTART_APP N
97 ROBUST_CHANNEL_NVDEC6_ERROR RESTART_APP N
98 ROBUST_CHANNEL_NVDEC7_ERROR RESTART_APP N
99 ROBUST_CHANNEL_NVJPG1_ERROR RESTART_APP N
100 ROBUST_CHANNEL_NVJPG2_ERROR RESTART_APP N
101 ROBUST_CHANNEL_NVJPG3_ERROR RESTART_APP N
102 ROBUST_CHANNEL_NVJPG4_ERROR RESTART_APP N
103 ROBUST_CHANNEL_NVJPG5_ERROR RESTART_APP N
104 ROBUST_CHANNEL_NVJPG6_ERROR RESTART_APP N
105 ROBUST_CHANNEL_NVJPG7_ERROR RESTART_APP N
106 SMBPBI_TEST_MESSAGE IGNORE N
107 SMBPBI_TEST_MESSAGE_SILENT IGNORE N
108 DESTINATION_FLA_TRANSLATION_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
109 ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR RESET_GPU F
110 SEC_FAULT_ERROR RESET_GPU F
111 BUNDLE_ERROR_EVENT UNEXPECTED_ERR_REPORT_ISSUE F
112 DISP_SUPERVISOR_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
113 DP_LT_FAILURE UNEXPECTED_ERR_REPORT_ISSUE F
114 HEAD_RG_UNDERFLOW UNEXPECTED_ERR_REPORT_ISSUE F
115 CORE_CHANNEL_REGS UNEXPECTED_ERR_REPORT_ISSUE F
116 WINDOW_CHANNEL_REGS UNEXPECTED_ERR_REPORT_ISSUE F
117 CURSOR_CHANNEL_REGS UNEXPECTED_ERR_REPORT_ISSUE F
118 HEAD_REGS UNEXPECTED_ERR_REPORT_ISSUE F
119 GSP_RPC_TIMEOUT RESET_GPU F
120 GSP_ERROR RESET_GPU F
121 C2C_ERROR IGNORE N
122 SPI_PMU_RPC_READ_FAIL UNEXPECTED_ERR_REPORT_ISSUE F
123 SPI_PMU_RPC_WRITE_FAIL UNEXPECTED_ERR_REPORT_ISSUE F
124 SPI_PMU_RPC_ERASE_FAIL UNEXPECTED_ERR_REPORT_ISSUE F
125 INFOROM_FS_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
126 ROBUST_CHANNEL_CE10_ERROR RESTART_APP N
127 ROBUST_CHANNEL_CE11_ERROR RESTART_APP N
128 ROBUST_CHANNEL_CE12_ERROR RESTART_APP N
129 ROBUST_CHANNEL_CE13_ERROR RESTART_APP N
130 ROBUST_CHANNEL_CE14_ERROR RESTART_APP N
131 ROBUST_CHANNEL_CE15_ERROR RESTART_APP N
132 ROBUST_CHANNEL_CE16_ERROR RESTART_APP N
133 ROBUST_CHANNEL_CE17_ERROR RESTART_APP N
134 ROBUST_CHANNEL_CE18_ERROR RESTART_APP N
135 ROBUST_CHANNEL_CE19_ERROR RESTART_APP N
136 ALI_TRAINING_FAIL RESET_GPU F
137 NVLINK_FLA_PRIV_ERR IGNORE N
138 ROBUST_CHANNEL_DLA_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
139 ROBUST_CHANNEL_OFA1_ERROR RESTART_APP N
140 UNRECOVERABLE_ECC_ERROR_ESCAPE RESET_GPU F
141 ROBUST_CHANNEL_FAST_PATH_ERROR IGNORE N
142 ROBUST_CHANNEL_NVENC3_ERROR UNEXPECTED_ERR_REPORT_ISSUE F
143 GPU_INIT_ERROR RESET_GPU F
144 NVLINK_SAW_ERROR WORKFLOW_NVLINK5_ERR F
145 NVLINK_RLW_ERROR WORKFLOW_NVLINK5_ERR F
146 NVLINK_TLW_ERROR WORKFLOW_NVLINK5_ERR F
147 NVLINK_TREX_ERROR WORKFLOW_NVLINK5_ERR F
148 NVLINK_NVLPW_CTRL_ERROR WORKFLOW_NVLINK5_ERR F
149 NVLINK_NETIR_ERROR WORKFLOW_NVLINK5_ERR F
150 NVLINK_MSE_ERROR WORKFLOW_NVLINK5_ERR F
151 ROBUST_CHANNEL_KEY_ROTATION_ERROR RESTART_VM F
152 ROBUST_CHANNEL_DLA_SMMU_ERROR IGNORE N
153 ROBUST_CHANNEL_DLA_TIMEOUT IGNORE N
154 GPU_RECOVERY_ACTION_CHANGED FOLLOW_RECOVERY_ACTION N
155 NVLINK_SW_DEFINED_ERROR RESET_GPU F
156 RESOURCE_RETIREMENT_EVENT RESET_GPU F
157 RESOURCE_RETIREMENT_FAILURE IGNORE N
158 GPU_FATAL_TIMEOUT RESET_GPU F
159 ROBUST_CHANNEL_CHI_NON_DATA_ERROR CHECK_UVM N
160 CHANNEL_RETIREMENT_EVENT RESTART_BM F
161 CHANNEL_RETIREMENT_FAILURE IGNORE N
"""


@dataclass(frozen=True)
class XidInfo:
    xid: int
    mnemonic: str
    action: str  # NVIDIA's immediate-action bucket
    fatal: bool


XID_CATALOG: dict[int, XidInfo] = {
    int(code): XidInfo(int(code), mnemonic, action, flag == "F")
    for code, mnemonic, action, flag in (line.split() for line in _XID_CATALOG.splitlines())
}

# What to do, per NVIDIA's immediate-action bucket (same catalog).
XID_ACTIONS = {
    "RESTART_BM": "reboot the node (power-cycle if the GPU stays missing)",
    "RESET_GPU": "drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot",
    "RESTART_VM": "restart the VM",
    "WORKFLOW_XID_48": "drain the node, reset the GPU, then check ECC and row remapping (NVIDIA's XID 48 workflow)",
    "WORKFLOW_NVLINK_ERR": "drain the node, check `nvidia-smi nvlink -s`, reset the GPU (NVIDIA's NVLink workflow)",
    "WORKFLOW_NVLINK5_ERR": "drain the node, check the NVLink fabric, reset the GPU (NVIDIA's NVLink5 workflow)",
    "UNEXPECTED_ERR_REPORT_ISSUE": "drain the node and report it to NVIDIA support (an unexpected XID)",
    "CHECK_MECHANICALS": "check the chassis power and cooling",
    "UPDATE_SWFW": "update the driver and firmware",
    "RESTART_APP": "restart the application",
    "IGNORE": "none",
    "WORKFLOW_XID_45": "none (the driver cleaned up after a killed process)",
    "CHECK_UVM": "check the UVM driver (nvidia_uvm)",
    "FOLLOW_RECOVERY_ACTION": "follow the recovery action it names",
}

_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): (\d+),?\s*(.*)")
_FELL_OFF_RE = re.compile(r"NVRM: (?:The NVIDIA GPU |GPU at (?:PCI:)?)([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})")
_STAMP_RE = re.compile(r"^\[\s*(\d+\.\d+)\]")


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # "0000:5d:00": domain:bus:device as the driver prints it (lower case)
    message: str
    line: int  # 1-based line in the kernel log
    uptime_s: float | None  # seconds since boot, from dmesg's [   123.456789] stamp

    @property
    def info(self) -> XidInfo | None:
        return XID_CATALOG.get(self.xid)

    @property
    def fatal(self) -> bool:
        if self.xid == 154:  # the message names the recovery action the driver now wants
            return any(w in self.message for w in ("Reset Required", "Reboot Required", "Drain"))
        return self.info.fatal if self.info else False

    @property
    def action(self) -> str:
        if self.xid == 154:
            # the action is the message's last parenthesis: look only at its tail, without parentheses
            # inside the group, so a hostile line of many "(" stays linear
            m = re.search(r"\(([^()]*(?:Required|Drain|None)[^()]*)\)\s*$", self.message[-300:])
            return m.group(1) if m else "see the message"
        return XID_ACTIONS.get(self.info.action, self.info.action) if self.info else "look it up in NVIDIA's catalog"


def _short_pci(text: str) -> str:
    domain, bus, device = text.lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{device}"


def parse_xids(log: str) -> list[XidEvent]:
    """XID events in a kernel log (dmesg, `journalctl -k`, syslog), in order.

    'NVRM: Xid (PCI:0000:5d:00): 79, pid=..., GPU has fallen off the bus.' -> XID 79. Newer
    drivers also log a GPU falling off the bus without an Xid line ("NVRM: The NVIDIA GPU
    0000:b3:00.0 ... has fallen off the bus", NVIDIA/NVSentinel#155, leptonai/gpud#1209):
    that is reported as XID 79 too, once per GPU.
    """
    events: list[XidEvent] = []
    fell_off: list[XidEvent] = []
    lines = log.splitlines()
    for number, line in enumerate(lines, 1):
        stamp = _STAMP_RE.search(line)
        uptime = float(stamp.group(1)) if stamp else None
        m = _XID_RE.search(line)
        if m:
            # drop the "pid=..., name=...," prefix newer drivers write before the message
            message = re.sub(r"^(?:(?:pid|name)=(?:'[^']*'|[^,]*),\s*)+", "", m.group(3).strip())
            events.append(XidEvent(int(m.group(2)), _short_pci(m.group(1)), message, number, uptime))
            continue
        m = _FELL_OFF_RE.search(line)
        if m and "fallen off the bus" in " ".join(lines[number - 1 : number + 2]):
            message = "GPU has fallen off the bus (no Xid line)"
            fell_off.append(XidEvent(79, _short_pci(m.group(1)), message, number, uptime))
    for event in fell_off:  # once per GPU, and only where no Xid 79 line says it already
        if not any(e.xid == 79 and e.pci == event.pci for e in events):
            events.append(event)
    events.sort(key=lambda e: e.line)
    return events


def kernel_log(host: Host) -> tuple[str, str]:
    """(kernel log text, the command that gave it): `dmesg`, else `journalctl -k -b`.

    An empty answer is evidence only from a source that was allowed to answer: dmesg exiting
    0 with nothing (a buffer cleared with `dmesg --clear`) is an empty log; journalctl exiting
    0 with nothing after dmesg was refused is what a user without the right to read the
    system journal gets, so that cannot tell (HostError).
    """
    result = host.run("dmesg")
    if result.ok:
        return result.stdout, "dmesg"
    # dmesg is refused to non-root users where kernel.dmesg_restrict=1; the journal may not be
    journal = host.run("journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q")
    refused = f"`dmesg` {result.describe()}: {result.stderr.strip()[:200] or 'no message'}"
    if journal.ok and journal.stdout.strip():
        return journal.stdout, "journalctl -k -b"
    if journal.ok:
        raise HostError(
            host.name,
            f"cannot tell: {refused}; `journalctl -k -b` printed nothing (a user not allowed to read the system "
            "journal gets that too): no kernel log was read, so no XID can be ruled out",
        )
    raise HostError(
        host.name,
        f"cannot tell: cannot read the kernel log: {refused}; "
        f"`journalctl -k -b` {journal.describe()}: {journal.stderr.strip()[:200]}",
    )


def _boot_id(host: Host) -> str | None:
    try:
        text = host.read_optional("/proc/sys/kernel/random/boot_id")
    except HostError:  # not recorded in a fixture
        return None
    value = (text or "").strip()
    return value if re.fullmatch(r"[0-9a-f-]{36}", value) else None


def _last_stamp(text: str) -> float | None:
    for line in reversed(text.splitlines()):
        m = _STAMP_RE.search(line)
        if m:
            return float(m.group(1))
    return None


@check(
    needs=["command dmesg", "command journalctl", "file /proc/sys/kernel/random/boot_id"],
    timeout=20,
)
def xid(host: Host, *, ignore: tuple[str, ...] = (), since: str = "boot") -> Result:
    """The kernel log holds no XID event that NVIDIA classes as fatal (since boot, or since the previous run).

    Why: XID events are the NVIDIA driver's error reports. Some mean the GPU needs a reset
    (95 uncontained error, 119/120 GSP errors, 64 row-remap failure), some a reboot (79:
    the GPU fell off the bus) or a cold power-cycle; a node with one of those must not take
    the next job. Others (13, 31, 43, 45, 94) are application faults and say nothing bad
    about the node.

    How: reads the kernel log (`dmesg`, or `journalctl -k -b` where dmesg is not
    permitted; nothing read is "cannot tell", never a clean log), finds `NVRM: Xid
    (PCI:...): N` lines (and "fallen off the bus" messages without one), and classifies each
    with NVIDIA's XID catalog (immediate action and fatal/non-fatal, as NVIDIA's NVSentinel
    encodes it): fatal ones fail, XIDs the catalog does not know warn, the rest are listed in
    the evidence. `ignore` takes XID numbers to leave out. `since: boot` judges the whole log
    since boot; `since: previous` (the bundled prolog profile) only what the log gained since
    this check's previous run in `clustercheck prolog` or `health` (a marker beside the
    prolog's state file keeps the boot id and the last line's uptime stamp; a new boot, no
    marker, or a run elsewhere judges the whole boot). `health` does not resume a gpu.xid
    drain on such a partial look: that waits for a reboot (or an admin's resume).

    Fix: follow the action the summary names (reset the GPU, reboot, power-cycle); an XID
    that comes back on the same GPU after a reset is a hardware fault: RMA. With `since:
    boot`, an old event keeps failing the check until a reboot or `dmesg --clear`.
    """
    if since not in ("boot", "previous"):
        raise ValueError(f"since: {since!r} is not boot or previous")
    ignored = set()
    for value in ignore:
        if not value.strip().isdigit():
            raise ValueError(f"ignore: {value!r} is not an XID number")
        ignored.add(int(value))
    text, source = kernel_log(host)
    events = [e for e in parse_xids(text) if e.xid not in ignored]
    window, older, marker = "boot", 0, None
    if since == "previous":
        from clustercheck import slurm

        boot = _boot_id(host)
        previous = slurm.read_marker("gpu.xid")
        after = previous.get("uptime_s") if previous and previous.get("boot_id") == boot else None
        if boot and isinstance(after, (int, float)):
            window = f"since the previous run (kernel log after {after:.0f} s of uptime)"
            kept = [e for e in events if e.uptime_s is None or e.uptime_s > after]
            older, events = len(events) - len(kept), kept
        last = _last_stamp(text)
        if boot and last is not None and slurm.marker_folder() is not None:
            marker = {"name": "gpu.xid", "boot_id": boot, "uptime_s": last}
    span = "since boot" if window == "boot" else "since the previous run"
    evidence = [f"{len(text.splitlines())} lines of kernel log from `{source}`; judged: {window}"]
    if older:
        evidence.append(f"{older} XID event(s) from before the previous run, judged then")
    evidence += [
        f"line {e.line}: XID {e.xid} on {e.pci}"
        + (f" at {e.uptime_s:.0f} s" if e.uptime_s is not None else "")
        + f": {e.message[:160]}"
        for e in events
    ]
    data = {
        "events": [
            {"xid": e.xid, "pci": e.pci, "line": e.line, "uptime_s": e.uptime_s, "fatal": e.fatal, "action": e.action}
            for e in events
        ],
        "source": source,
        "window": window,
        **({"marker": marker} if marker else {}),
    }
    fatal = [e for e in events if e.fatal]
    unknown = [e for e in events if e.info is None]

    def describe(group: list[XidEvent]) -> str:
        seen: dict[tuple[int, str], int] = {}
        for e in group:
            seen[(e.xid, e.pci)] = seen.get((e.xid, e.pci), 0) + 1
        parts = []
        for (code, pci), times in seen.items():
            first = next(e for e in group if e.xid == code and e.pci == pci)
            said = first.message.rstrip(".") or (first.info.mnemonic if first.info else "")
            known = "" if first.info else ", not in NVIDIA's catalog"
            count = f" x{times}" if times > 1 else ""
            parts.append(f"XID {code} on GPU {pci}{count} ({said[:80]}{known}): {first.action}")
        return "; ".join(parts)

    if fatal:
        return fail(
            describe(fatal),
            remedy="Drain the node and follow NVIDIA's action for each XID; if the XID returns on the same GPU "
            "after a reset or reboot, open an RMA.",
            data=data,
            evidence=evidence,
        )
    if unknown:
        return warn(
            describe(unknown),
            remedy="Look the XID up in NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors).",
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


@check(needs=["probe nvml"], timeout=20)
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
