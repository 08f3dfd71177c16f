"""The `nvml` probe: one normalized record of the node's NVIDIA GPUs, from two sources.

- Locally, in-process through NVML (`pynvml`, package nvidia-ml-py): fast, no command run.
- Elsewhere (over SSH), and locally when libnvidia-ml cannot be loaded, from one
  `nvidia-smi -q -x` run through the transport, parsed by `parse_nvidia_smi_xml`.

Both build the same record for the same GPU state (only `source` says which made it), and
recording stores the record (probes/nvml.json), so replay does not care which side made it.
A node without a driver gives a record with no GPUs and an `error` saying why, so checks
can say "0 GPUs visible, expected 8: NVML library not found" instead of crashing.

The record (JSON)::

    {"source": "nvml" | "nvidia-smi", "error": null | "why no GPU could be listed",
     "driver_version": "535.104.05", "cuda_version": "12.2",
     "gpus": [{"index": 0, "name": ..., "uuid": ..., "pci_bus_id": "00000000:18:00.0", ...}]}

Per GPU (null where the GPU or driver does not report it, e.g. "N/A" in the XML): see
`GPU_FIELDS`. Field meanings follow NVML's documentation; the XML element each comes from
is named in `parse_nvidia_smi_xml`.

NVLink (`nvlinks`: per link its state, version, speed in MBps and DL error counters) comes from
NVML only: `nvidia-smi -q -x` prints no NVLink block, so over SSH gpu.nvlink asks `nvidia-smi
nvlink -s/-e`. The fabric (`fabric_state`, `fabric_status`, `fabric_clique_id`,
`fabric_cluster_uuid`, `fabric_health`) comes from NVML's fabric info or the XML's <fabric>. A GPU
NVML answers NOT_SUPPORTED for has `nvlinks: []` / `fabric_state: "N/A"` and the field named in
`unsupported`: not supported is a fact about the GPU, never an error.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any
from xml.etree import ElementTree

from clustercheck.errors import CommandTimeout, HostError, ProbeUnavailable
from clustercheck.host import Probe, Transport, register_probe

NVIDIA_SMI = ("nvidia-smi", "-q", "-x")

# Clock event ("throttle") reasons by NVML bit (nvml.h nvmlClocksEventReason*) under the
# names nvidia-smi's XML uses (clocks_event_reason_<name>, formerly clocks_throttle_reason_<name>).
CLOCK_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}

# nvmlComputeMode_t (nvml.h) -> the XML's spelling, upper-cased.
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}

# nvmlDeviceArchitecture_t (nvml.h NVML_DEVICE_ARCH_*) -> nvidia-smi's <product_architecture>.
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}


@dataclass(frozen=True)
class GpuProcess:
    """A process with a context on a GPU: NVML's running compute (or graphics) processes."""

    pid: int
    name: str | None = None
    used_memory_mib: int | None = None
    type: str | None = None  # "C" compute, "G" graphics, "C+G", as nvidia-smi prints it

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "used_memory_mib": self.used_memory_mib, "type": self.type}


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU as NVML reports it; None = not reported for this link."""

    link: int
    active: bool
    version: int | None = None  # NVML_FI_DEV_NVLINK_GET_VERSION / nvmlDeviceGetNvLinkVersion, as NVML gives it
    speed_mbps: int | None = None  # NVML_FI_DEV_NVLINK_GET_SPEED (MBps; nvidia-smi nvlink -s prints it as GB/s)
    # the DL error counters (cumulative since the driver loaded or the GPU was reset): the link-scoped
    # fields NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY/_RECOVERY/_CRC, else nvmlDeviceGetNvLinkErrorCounter
    # (NVML_NVLINK_ERROR_DL_REPLAY, _RECOVERY, and CRC as _CRC_FLIT plus _CRC_DATA)
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_errors: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_NVLINK_INTS = ("version", "speed_mbps", "replay_errors", "recovery_errors", "crc_errors")


@dataclass(frozen=True)
class Gpu:
    """One GPU as the record describes it; None = not reported by this GPU or driver."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    architecture: str | None = None
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    ecc_current: bool | None = None
    ecc_pending: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    clocks_event_reasons: tuple[str, ...] | None = None
    temperature_c: int | None = None
    vbios_version: str | None = None
    inforom_image: str | None = None  # the InfoROM image version ("G520.0200.00.05")
    pcie_gen_device_max: int | None = None  # the GPU's own maximum generation
    pcie_gen_host_max: int | None = None  # the slot's (host side) maximum generation
    performance_state: str | None = None  # "P0" ... "P12"
    power_draw_w: float | None = None
    power_limit_w: float | None = None  # the enforced (current) limit
    power_limit_default_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    clocks_app_graphics_mhz: int | None = None
    clocks_app_memory_mhz: int | None = None
    clocks_default_app_graphics_mhz: int | None = None
    clocks_default_app_memory_mhz: int | None = None
    clocks_max_graphics_mhz: int | None = None
    clocks_max_memory_mhz: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    processes: tuple[GpuProcess, ...] | None = None  # None: not reported; () none running
    # NVML only (`nvidia-smi -q -x` has no NVLink block): None not asked; () the GPU has no NVLink
    nvlinks: tuple[NvLink, ...] | None = None
    # the GPU's NVSwitch fabric (NVML nvmlDeviceGetGpuFabricInfoV; the XML's <fabric>): state "Completed",
    # "In Progress", "Not Started", or "N/A" where the GPU has no fabric; None where nothing says
    fabric_state: str | None = None
    fabric_status: str | None = None  # "Success" or the failure ("Insufficient Resources"); only once Completed
    fabric_clique_id: int | None = None
    fabric_cluster_uuid: str | None = None
    fabric_health: str | None = None  # the health summary: Healthy, Unhealthy, Limited Capacity
    unsupported: tuple[str, ...] | None = None  # fields NVML answered NOT_SUPPORTED for this GPU
    error: str | None = None  # the GPU could not be queried at all (e.g. "GPU is lost")

    def why_missing(self, field: str) -> str:
        """Why a field is None: 'not supported by this GPU (NVML NOT_SUPPORTED)' or 'not reported'."""
        if self.unsupported and field in self.unsupported:
            return "not supported by this GPU (NVML NOT_SUPPORTED)"
        return "not reported"

    @property
    def label(self) -> str:
        """'GPU 3 (GPU-1b2c..., 00000000:5D:00.0)' for messages."""
        ids = ", ".join(x for x in (self.uuid, self.pci_bus_id) if x)
        return f"GPU {self.index}" + (f" ({ids})" if ids else "")

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("clocks_event_reasons", "unsupported"):
            if out[name] is not None:
                out[name] = list(out[name])
        if self.processes is not None:
            out["processes"] = [p.to_json() for p in self.processes]
        if self.nvlinks is not None:
            out["nvlinks"] = [link.to_json() for link in self.nvlinks]
        # fields added after the first records: left out while unknown, so older records and
        # golden outputs keep their shape
        for name in _LATER_FIELDS:
            if out[name] is None:
                del out[name]
        return out


GPU_FIELDS = tuple(f.name for f in fields(Gpu))
_BOOL_FIELDS = {f.name for f in fields(Gpu) if f.type == "bool | None"}
_INT_FIELDS = {f.name for f in fields(Gpu) if f.type in ("int", "int | None")}
_STR_FIELDS = {f.name for f in fields(Gpu) if f.type == "str | None"}
_FLOAT_FIELDS = {f.name for f in fields(Gpu) if f.type == "float | None"}
_LATER_FIELDS = GPU_FIELDS[GPU_FIELDS.index("vbios_version") : GPU_FIELDS.index("error")]


@dataclass(frozen=True)
class GpuRecord:
    """The whole record: the driver, its CUDA version, the GPUs, or why there are none."""

    gpus: tuple[Gpu, ...]
    driver_version: str | None = None
    cuda_version: str | None = None
    error: str | None = None
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "error": self.error,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "gpus": [g.to_json() for g in self.gpus],
        }

    @classmethod
    def from_json(cls, obj: object) -> GpuRecord:
        """Validate a record (as replayed from probes/nvml.json); ValueError says what is wrong."""
        if not isinstance(obj, dict):
            raise ValueError("the nvml probe record is not a JSON object")
        gpus = obj.get("gpus")
        if not isinstance(gpus, list):
            raise ValueError("the nvml probe record has no `gpus` list")
        top = {k: obj.get(k) for k in ("driver_version", "cuda_version", "error", "source")}
        for key, value in top.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"nvml probe record: `{key}` is {value!r}, expected a string or null")
        return cls(
            tuple(_gpu_from_json(i, g) for i, g in enumerate(gpus)),
            top["driver_version"],
            top["cuda_version"],
            top["error"],
            top["source"] or "",
        )


def _gpu_from_json(position: int, obj: object) -> Gpu:
    where = f"nvml probe record: gpus[{position}]"
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is not a JSON object")
    unknown = set(obj) - set(GPU_FIELDS)
    if unknown:
        raise ValueError(f"{where} has unknown fields: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name, value in obj.items():
        if value is None:
            values[name] = None
        elif (
            (name in _BOOL_FIELDS and isinstance(value, bool))
            or (name in _INT_FIELDS and isinstance(value, int) and not isinstance(value, bool))
            or (name in _STR_FIELDS and isinstance(value, str))
        ):
            values[name] = value
        elif name in _FLOAT_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
            values[name] = float(value)
        elif name in ("clocks_event_reasons", "unsupported") and isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ValueError(f"{where}.{name} is {value!r}, which is not a list of names")
            values[name] = tuple(value)
        elif name == "processes" and isinstance(value, list):
            values[name] = tuple(_process_from_json(f"{where}.processes[{i}]", p) for i, p in enumerate(value))
        elif name == "nvlinks" and isinstance(value, list):
            values[name] = tuple(_nvlink_from_json(f"{where}.nvlinks[{i}]", p) for i, p in enumerate(value))
        else:
            raise ValueError(f"{where}.{name} is {value!r}, which is not a valid value for it")
    if "index" not in values or values["index"] is None:
        raise ValueError(f"{where} has no `index`")
    return Gpu(**values)


def _process_from_json(where: str, obj: object) -> GpuProcess:
    if not isinstance(obj, dict) or set(obj) - {"pid", "name", "used_memory_mib", "type"}:
        raise ValueError(f"{where} is {obj!r}, not a process (pid, name, used_memory_mib, type)")
    pid, name, used, kind = (obj.get(k) for k in ("pid", "name", "used_memory_mib", "type"))
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        raise ValueError(f"{where}.pid is {pid!r}, not a process id")
    if used is not None and (not isinstance(used, int) or isinstance(used, bool)):
        raise ValueError(f"{where}.used_memory_mib is {used!r}, not a number of MiB")
    for label, text in (("name", name), ("type", kind)):
        if text is not None and not isinstance(text, str):
            raise ValueError(f"{where}.{label} is {text!r}, not a string")
    return GpuProcess(pid, name, used, kind)


def _nvlink_from_json(where: str, obj: object) -> NvLink:
    names = {"link", "active", *_NVLINK_INTS}
    if not isinstance(obj, dict) or set(obj) - names:
        raise ValueError(f"{where} is {obj!r}, not an NVLink ({', '.join(sorted(names))})")
    link, active = obj.get("link"), obj.get("active")
    if not isinstance(link, int) or isinstance(link, bool) or not 0 <= link < 1024:
        raise ValueError(f"{where}.link is {link!r}, not a link number")
    if not isinstance(active, bool):
        raise ValueError(f"{where}.active is {active!r}, not true or false")
    counts: dict[str, int | None] = {}
    for name in _NVLINK_INTS:
        value = obj.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{where}.{name} is {value!r}, not a count")
        counts[name] = value
    return NvLink(link, active, **counts)


def format_cuda_version(encoded: int) -> str:
    """cuDriverGetVersion's integer (1000 * major + 10 * minor) -> 'major.minor': 12040 -> '12.4'.

    domain-facts §A.5: NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000, MINOR = (v % 1000) / 10.
    """
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


# -- nvidia-smi -q -x ------------------------------------------------------------------------


# what nvidia-smi prints for a value it has not: not reported, not readable, not supported by the GPU
NOT_VALUES = frozenset({"N/A", "[N/A]", "Unknown Error", "[Unknown Error]", "Not Supported", "[Not Supported]"})


def _text(element: ElementTree.Element | None, path: str) -> str | None:
    """Stripped text at `path`; None when absent, empty or "N/A"."""
    if element is None:
        return None
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if not text or text in NOT_VALUES else text


# A value as nvidia-smi prints it, the same in the XML's element text and in `nvidia-smi -q`'s
# "Key : value" text (facts/nvidia_smi.py reads that with these too); None for what is no such value.


def smi_int(text: str | None) -> int | None:
    """'16x' -> 16, '27 C' -> 27, '81559 MiB' -> 81559, '1980 MHz' -> 1980, '4' -> 4; None for anything else."""
    if text is None:
        return None
    m = re.match(r"^(\d+)\s*(?:x|C|MiB|MHz)?$", text)
    return int(m.group(1)) if m else None


def smi_watts(text: str | None) -> float | None:
    """'700.00 W' -> 700.0; None for anything else."""
    if text is None:
        return None
    m = re.match(r"^(\d+(?:\.\d+)?)\s*W$", text)
    return float(m.group(1)) if m else None


def smi_flag(text: str | None, yes: str, no: str) -> bool | None:
    """True for `yes` ('Enabled', 'Yes'), False for `no`, in any case; None for anything else."""
    if text is None:
        return None
    if text.lower() == yes.lower():
        return True
    if text.lower() == no.lower():
        return False
    return None


def smi_compute_mode(text: str | None) -> str | None:
    """'Exclusive Process' -> 'EXCLUSIVE_PROCESS' (NVML's names); None when not given."""
    return text.upper().replace(" ", "_") if text else None


def _xml_processes(gpu: ElementTree.Element) -> tuple[GpuProcess, ...] | None:
    block = gpu.find("processes")
    if block is None:
        return None
    found = []
    for info in block.findall("process_info"):
        pid = smi_int(_text(info, "pid"))
        if pid is not None:
            found.append(
                GpuProcess(pid, _text(info, "process_name"), smi_int(_text(info, "used_memory")), _text(info, "type"))
            )
    return tuple(sorted(found, key=lambda p: p.pid))


def _uncorrected(scope: ElementTree.Element | None) -> int | None:
    """Uncorrectable ECC errors in <volatile> or <aggregate>, whichever schema the driver wrote.

    Schemas seen: sram_uncorrectable + dram_uncorrectable (515-535, nvsmi_device v11/v12);
    sram_uncorrectable_parity + sram_uncorrectable_secded + dram_uncorrectable (550+); and
    before those double_bit/total. Their sum is NVML's total uncorrected count.
    """
    if scope is None:
        return None
    counts = [smi_int(_text(child, ".")) for child in scope if "uncorrectable" in child.tag]
    if not counts:
        counts = [smi_int(_text(scope, "double_bit/total"))]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _clock_reasons(gpu: ElementTree.Element) -> tuple[str, ...] | None:
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:  # drivers before 535 call them throttle reasons
        block, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if block is None:
        return None
    states = {child.tag.removeprefix(prefix): _text(child, ".") for child in block}
    if all(state is None for state in states.values()):
        return None
    return tuple(name for name in CLOCK_REASONS.values() if states.get(name) == "Active")


def _pci_bus_id(text: str | None) -> str | None:
    return text.upper() if text else None


def _xml_fabric(gpu: ElementTree.Element) -> dict[str, Any]:
    """The <fabric> block (535 and later): <state>, <status>, <cliqueId>, <clusterUuid>; {} without one.

    State N/A (the GPU has no NVSwitch fabric) stays "N/A", so the record says the driver was asked."""
    block = gpu.find("fabric")
    if block is None:
        return {}
    raw = (block.findtext("state") or "").strip()
    state = raw if raw and raw not in NOT_VALUES else ("N/A" if raw else None)
    return {
        "fabric_state": state,
        "fabric_status": _text(block, "status"),
        "fabric_clique_id": smi_int(_text(block, "cliqueId")),
        "fabric_cluster_uuid": _text(block, "clusterUuid"),
    }


def parse_nvidia_smi_xml(text: str) -> GpuRecord:
    """`nvidia-smi -q -x` output -> the normalized record; ValueError for XML that does not parse.

    Fields missing from an older driver's XML come out as None (the check judging them
    skips), never as an error.
    """
    try:
        root = ElementTree.fromstring(text.strip())
    except ElementTree.ParseError as exc:  # its message names the line and column
        raise ValueError(f"nvidia-smi -q -x printed XML that does not parse: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi -q -x printed <{root.tag}>, expected <nvidia_smi_log>")
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        mig, ecc = gpu.find("mig_mode"), gpu.find("ecc_mode")
        errors, retired, remap = gpu.find("ecc_errors"), gpu.find("retired_pages"), gpu.find("remapped_rows")
        link = gpu.find("pci/pci_gpu_link_info")
        pending = _text(retired, "pending_retirement") or _text(retired, "pending_blacklist")
        power = gpu.find("gpu_power_readings")  # 535 and later; <power_readings> before
        if power is None:
            power = gpu.find("power_readings")
        gpus.append(
            Gpu(
                index=index,
                name=_text(gpu, "product_name"),
                uuid=_text(gpu, "uuid"),
                pci_bus_id=_pci_bus_id(_text(gpu, "pci/pci_bus_id") or gpu.get("id")),
                architecture=_text(gpu, "product_architecture"),
                persistence_mode=smi_flag(_text(gpu, "persistence_mode"), "Enabled", "Disabled"),
                compute_mode=smi_compute_mode(_text(gpu, "compute_mode")),
                mig_current=smi_flag(_text(mig, "current_mig"), "Enabled", "Disabled"),
                mig_pending=smi_flag(_text(mig, "pending_mig"), "Enabled", "Disabled"),
                ecc_current=smi_flag(_text(ecc, "current_ecc"), "Enabled", "Disabled"),
                ecc_pending=smi_flag(_text(ecc, "pending_ecc"), "Enabled", "Disabled"),
                ecc_volatile_uncorrected=_uncorrected(errors.find("volatile") if errors is not None else None),
                ecc_aggregate_uncorrected=_uncorrected(errors.find("aggregate") if errors is not None else None),
                retired_pages_sbe=smi_int(_text(retired, "multiple_single_bit_retirement/retired_count")),
                retired_pages_dbe=smi_int(_text(retired, "double_bit_retirement/retired_count")),
                retired_pages_pending=smi_flag(pending, "Yes", "No"),
                remapped_rows_correctable=smi_int(_text(remap, "remapped_row_corr")),
                remapped_rows_uncorrectable=smi_int(_text(remap, "remapped_row_unc")),
                remap_pending=smi_flag(_text(remap, "remapped_row_pending"), "Yes", "No"),
                remap_failure=smi_flag(_text(remap, "remapped_row_failure"), "Yes", "No"),
                pcie_gen_current=smi_int(_text(link, "pcie_gen/current_link_gen")),
                pcie_gen_max=smi_int(_text(link, "pcie_gen/max_link_gen")),
                pcie_width_current=smi_int(_text(link, "link_widths/current_link_width")),
                pcie_width_max=smi_int(_text(link, "link_widths/max_link_width")),
                clocks_event_reasons=_clock_reasons(gpu),
                temperature_c=smi_int(_text(gpu, "temperature/gpu_temp")),
                vbios_version=_text(gpu, "vbios_version"),
                inforom_image=_text(gpu, "inforom_version/img_version"),
                pcie_gen_device_max=smi_int(_text(link, "pcie_gen/max_device_link_gen")),
                pcie_gen_host_max=smi_int(_text(link, "pcie_gen/max_host_link_gen")),
                performance_state=_text(gpu, "performance_state"),
                power_draw_w=smi_watts(_text(power, "power_draw")),
                power_limit_w=smi_watts(_text(power, "current_power_limit") or _text(power, "enforced_power_limit")),
                power_limit_default_w=smi_watts(_text(power, "default_power_limit")),
                power_limit_min_w=smi_watts(_text(power, "min_power_limit")),
                power_limit_max_w=smi_watts(_text(power, "max_power_limit")),
                clocks_app_graphics_mhz=smi_int(_text(gpu, "applications_clocks/graphics_clock")),
                clocks_app_memory_mhz=smi_int(_text(gpu, "applications_clocks/mem_clock")),
                clocks_default_app_graphics_mhz=smi_int(_text(gpu, "default_applications_clocks/graphics_clock")),
                clocks_default_app_memory_mhz=smi_int(_text(gpu, "default_applications_clocks/mem_clock")),
                clocks_max_graphics_mhz=smi_int(_text(gpu, "max_clocks/graphics_clock")),
                clocks_max_memory_mhz=smi_int(_text(gpu, "max_clocks/mem_clock")),
                memory_used_mib=smi_int(_text(gpu, "fb_memory_usage/used")),
                memory_total_mib=smi_int(_text(gpu, "fb_memory_usage/total")),
                processes=_xml_processes(gpu),
                **_xml_fabric(gpu),
            )
        )
    return GpuRecord(
        tuple(gpus),
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        source="nvidia-smi",
    )


def remote(transport: Transport, timeout: float) -> dict[str, Any]:
    """The record from one `nvidia-smi -q -x` run through any transport."""
    result = transport.run(NVIDIA_SMI, timeout=timeout)
    if result.timed_out:
        raise CommandTimeout(transport.host, f"`nvidia-smi -q -x` did not finish within {result.duration_s:.1f} s")
    if result.exit_code == 127:
        return no_gpus("nvidia-smi not found (no NVIDIA driver installed?)", "nvidia-smi")
    if result.stdout.lstrip().startswith("<?xml") or "<nvidia_smi_log" in result.stdout:
        try:
            return parse_nvidia_smi_xml(result.stdout).to_json()
        except ValueError as exc:
            raise HostError(transport.host, str(exc)) from None
    # nvidia-smi prints its failures as text ("NVIDIA-SMI has failed because it couldn't
    # communicate with the NVIDIA driver", "No devices were found", "Failed to initialize
    # NVML: Driver/library version mismatch") and exits non-zero.
    said = next((line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines() if line.strip()), "")
    return no_gpus(f"nvidia-smi exited {result.exit_code}: {said or 'no output'}", "nvidia-smi")


def no_gpus(why: str, source: str) -> dict[str, Any]:
    """The record of a node where no GPU could be listed."""
    return GpuRecord((), error=why, source=source).to_json()


# -- NVML in-process --------------------------------------------------------------------------


def _decode(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def local() -> dict[str, Any]:
    """The record from NVML in-process; ProbeUnavailable when NVML cannot start but nvidia-smi may."""
    if "pynvml" not in sys.modules and not os.path.exists("/proc/driver/nvidia") and shutil.which("nvidia-smi") is None:
        # No NVIDIA kernel module and no nvidia-smi: NVML could only say the same, after a ~30 ms
        # import (this runs in every job's prolog).
        return no_gpus("the NVIDIA driver is not loaded (no /proc/driver/nvidia), and no nvidia-smi on PATH", "nvml")
    try:
        import pynvml
    except ImportError as exc:  # the package is a dependency, but a broken install should not crash
        raise ProbeUnavailable("localhost", f"pynvml cannot be imported: {exc}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        reason = str(exc)
        if isinstance(exc, pynvml.NVMLError_LibraryNotFound) and shutil.which("nvidia-smi") is None:
            # No library and no nvidia-smi: there is no driver, and nothing else to ask.
            return no_gpus("NVML library not found (libnvidia-ml.so.1), and no nvidia-smi on PATH", "nvml")
        raise ProbeUnavailable("localhost", f"NVML cannot start: {reason}") from None
    try:
        return _nvml_record(pynvml).to_json()
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _nvml_record(nv: Any) -> GpuRecord:
    def get(call: Callable[..., Any], *args: Any) -> Any:
        """The call's value, or None when this GPU or driver does not support it."""
        try:
            return call(*args)
        except nv.NVMLError:
            return None

    driver = get(nv.nvmlSystemGetDriverVersion)
    cuda = get(nv.nvmlSystemGetCudaDriverVersion_v2)
    if cuda is None:  # older libraries: v1 (which may answer without libcuda, domain-facts §A.5)
        cuda = get(nv.nvmlSystemGetCudaDriverVersion)
    gpus = [_nvml_gpu(nv, get, i) for i in range(nv.nvmlDeviceGetCount())]
    return GpuRecord(
        tuple(gpus),
        driver_version=_decode(driver) if driver is not None else None,
        cuda_version=format_cuda_version(int(cuda)) if cuda is not None else None,
        source="nvml",
    )


def _nvml_gpu(nv: Any, get: Callable[..., Any], index: int) -> Gpu:
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        name = _decode(nv.nvmlDeviceGetName(handle))
        uuid = _decode(nv.nvmlDeviceGetUUID(handle))
        bus_id = _decode(nv.nvmlDeviceGetPciInfo(handle).busId)
    except nv.NVMLError as exc:  # e.g. GPU is lost (fell off the bus)
        return Gpu(index=index, error=str(exc))

    unsupported: list[str] = []

    def ask(field: str, call: Callable[..., Any], *args: Any) -> Any:
        """The call's value; None when it fails, and the field noted when NVML says NOT_SUPPORTED."""
        try:
            return call(*args)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_NOT_SUPPORTED and field not in unsupported:
                unsupported.append(field)
            return None

    def flag(value: Any) -> bool | None:
        return None if value is None else bool(value)

    def watts(value: Any) -> float | None:
        return None if value is None else round(int(value) / 1000, 2)  # NVML gives milliwatts

    mig = ask("mig_current", nv.nvmlDeviceGetMigMode, handle) or (None, None)
    ecc = ask("ecc_current", nv.nvmlDeviceGetEccMode, handle) or (None, None)
    remap = ask("remap_pending", nv.nvmlDeviceGetRemappedRows, handle) or (None, None, None, None)
    sbe = ask(
        "retired_pages_sbe",
        nv.nvmlDeviceGetRetiredPages,
        handle,
        nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    dbe = ask(
        "retired_pages_dbe", nv.nvmlDeviceGetRetiredPages, handle, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    reasons = get(nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if reasons is None:  # libnvidia-ml before 535 has only the older name (same bits)
        reasons = ask("clocks_event_reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    compute = ask("compute_mode", nv.nvmlDeviceGetComputeMode, handle)
    arch = ask("architecture", nv.nvmlDeviceGetArchitecture, handle)
    pstate = ask("performance_state", nv.nvmlDeviceGetPerformanceState, handle)
    limits = ask("power_limit_min_w", nv.nvmlDeviceGetPowerManagementLimitConstraints, handle) or (None, None)
    memory = ask("memory_used_mib", nv.nvmlDeviceGetMemoryInfo, handle)
    vbios = ask("vbios_version", nv.nvmlDeviceGetVbiosVersion, handle)
    inforom = ask("inforom_image", nv.nvmlDeviceGetInforomImageVersion, handle)
    graphics, mem = nv.NVML_CLOCK_GRAPHICS, nv.NVML_CLOCK_MEM
    uncorrected = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    gpu = Gpu(
        index=index,
        name=name,
        uuid=uuid,
        pci_bus_id=_pci_bus_id(bus_id),
        architecture=ARCHITECTURES.get(arch) if arch is not None else None,
        persistence_mode=flag(ask("persistence_mode", nv.nvmlDeviceGetPersistenceMode, handle)),
        compute_mode=COMPUTE_MODES.get(compute) if compute is not None else None,
        mig_current=flag(mig[0]),
        mig_pending=flag(mig[1]),
        ecc_current=flag(ecc[0]),
        ecc_pending=flag(ecc[1]),
        ecc_volatile_uncorrected=ask(
            "ecc_volatile_uncorrected", nv.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nv.NVML_VOLATILE_ECC
        ),
        ecc_aggregate_uncorrected=ask(
            "ecc_aggregate_uncorrected", nv.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nv.NVML_AGGREGATE_ECC
        ),
        retired_pages_sbe=len(sbe) if sbe is not None else None,
        retired_pages_dbe=len(dbe) if dbe is not None else None,
        retired_pages_pending=flag(ask("retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)),
        remapped_rows_correctable=remap[0],
        remapped_rows_uncorrectable=remap[1],
        remap_pending=flag(remap[2]),
        remap_failure=flag(remap[3]),
        pcie_gen_current=ask("pcie_gen_current", nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_gen_max=ask("pcie_gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width_current=ask("pcie_width_current", nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_width_max=ask("pcie_width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, handle),
        clocks_event_reasons=(
            tuple(name for bit, name in CLOCK_REASONS.items() if reasons & bit) if reasons is not None else None
        ),
        temperature_c=ask("temperature_c", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
        vbios_version=_decode(vbios) if vbios is not None else None,
        inforom_image=_decode(inforom) if inforom is not None else None,
        pcie_gen_device_max=ask("pcie_gen_device_max", nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, handle),
        performance_state=f"P{int(pstate)}" if pstate is not None and 0 <= int(pstate) <= 15 else None,
        power_draw_w=watts(ask("power_draw_w", nv.nvmlDeviceGetPowerUsage, handle)),
        power_limit_w=watts(ask("power_limit_w", nv.nvmlDeviceGetEnforcedPowerLimit, handle)),
        power_limit_default_w=watts(ask("power_limit_default_w", nv.nvmlDeviceGetPowerManagementDefaultLimit, handle)),
        power_limit_min_w=watts(limits[0]),
        power_limit_max_w=watts(limits[1]),
        clocks_app_graphics_mhz=ask("clocks_app_graphics_mhz", nv.nvmlDeviceGetApplicationsClock, handle, graphics),
        clocks_app_memory_mhz=ask("clocks_app_memory_mhz", nv.nvmlDeviceGetApplicationsClock, handle, mem),
        clocks_default_app_graphics_mhz=ask(
            "clocks_default_app_graphics_mhz", nv.nvmlDeviceGetDefaultApplicationsClock, handle, graphics
        ),
        clocks_default_app_memory_mhz=ask(
            "clocks_default_app_memory_mhz", nv.nvmlDeviceGetDefaultApplicationsClock, handle, mem
        ),
        clocks_max_graphics_mhz=ask("clocks_max_graphics_mhz", nv.nvmlDeviceGetMaxClockInfo, handle, graphics),
        clocks_max_memory_mhz=ask("clocks_max_memory_mhz", nv.nvmlDeviceGetMaxClockInfo, handle, mem),
        memory_used_mib=int(memory.used) // (1 << 20) if memory is not None else None,
        memory_total_mib=int(memory.total) // (1 << 20) if memory is not None else None,
        processes=_nvml_processes(nv, ask, handle),
        nvlinks=_nvml_nvlinks(nv, handle, unsupported),
        **_nvml_fabric(nv, handle, unsupported),
    )
    if unsupported:
        return replace(gpu, unsupported=tuple(unsupported))
    return gpu


def _nvml_processes(nv: Any, ask: Callable[..., Any], handle: Any) -> tuple[GpuProcess, ...] | None:
    """NVML's running compute and graphics processes (type C, G, or C+G as nvidia-smi lists them), by pid."""
    compute = ask("processes", nv.nvmlDeviceGetComputeRunningProcesses, handle)
    if compute is None:
        return None
    graphics = ask("processes", nv.nvmlDeviceGetGraphicsRunningProcesses, handle) or []
    kinds: dict[int, str] = {}
    used: dict[int, int | None] = {}
    for kind, running in (("C", compute), ("G", graphics)):
        for proc in running:
            pid = int(proc.pid)
            kinds[pid] = "C+G" if pid in kinds and kinds[pid] != kind else kind
            memory = getattr(proc, "usedGpuMemory", None)
            used[pid] = int(memory) // (1 << 20) if memory is not None else used.get(pid)
    found = []
    for pid in sorted(kinds):
        try:
            name: str | None = _decode(nv.nvmlSystemGetProcessName(pid))
        except nv.NVMLError:  # gone already, or in another PID namespace
            name = None
        found.append(GpuProcess(pid, name, used[pid], kinds[pid]))
    return tuple(found)


# nvmlGpuFabricState_t (NVML_GPU_FABRIC_STATE_*) and the health summary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*)
# under the words `nvidia-smi -q` prints for them
FABRIC_STATES = {0: "N/A", 1: "Not Started", 2: "In Progress", 3: "Completed"}
FABRIC_HEALTH = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}


def _nvml_return_name(nv: Any, code: int) -> str:
    """An nvmlReturn_t as `nvidia-smi -q` words a fabric status: 0 Success, NVML_ERROR_INSUFFICIENT_RESOURCES
    Insufficient Resources (the pynvml constant's name, title-cased)."""
    if code == 0:
        return "Success"
    for name in dir(nv):
        if name.startswith("NVML_ERROR_") and getattr(nv, name) == code:
            return name.removeprefix("NVML_ERROR_").replace("_", " ").title()
    return f"NVML error {code}"


def _nvml_fabric(nv: Any, handle: Any, unsupported: list[str]) -> dict[str, Any]:
    """The GPU's fabric info: nvmlDeviceGetGpuFabricInfoV with the v3 struct (health summary), else v2,
    else the older nvmlDeviceGetGpuFabricInfo; NOT_SUPPORTED: "N/A" (no fabric), never an error."""
    import ctypes

    info: Any = None
    summary = False
    attempts = (
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t", True),
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v2_t", False),
        ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t", False),
    )
    for call, struct, has_summary in attempts:
        if not hasattr(nv, call) or not hasattr(nv, struct):
            continue
        candidate = getattr(nv, struct)()
        try:
            getattr(nv, call)(handle, ctypes.byref(candidate))
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_NOT_SUPPORTED:
                unsupported.append("fabric_state")
                return {"fabric_state": "N/A"}
            continue  # an older library or driver: a version mismatch, a missing symbol; try the next
        info, summary = candidate, has_summary
        break
    if info is None:
        return {}
    state = FABRIC_STATES.get(int(info.state))
    if state is None:
        return {}
    if state == "N/A":
        unsupported.append("fabric_state")
        return {"fabric_state": state}
    completed = state == "Completed"
    return {
        "fabric_state": state,
        "fabric_status": _nvml_return_name(nv, int(info.status)) if completed else None,
        "fabric_clique_id": int(info.cliqueId) if completed else None,
        "fabric_cluster_uuid": str(_uuid_of(bytes(info.clusterUuid))) if completed else None,
        "fabric_health": FABRIC_HEALTH.get(int(info.healthSummary)) if summary else None,
    }


def _uuid_of(raw: bytes) -> str:
    import uuid

    return str(uuid.UUID(bytes=raw[:16].ljust(16, b"\0")))


def _field_value(value: Any) -> int | None:
    """An nvmlFieldValue_t's number by its valueType (NVML_VALUE_TYPE_*); None when NVML said it failed."""
    if int(value.nvmlReturn) != 0:
        return None
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        int(value.valueType)
    )
    return int(getattr(value.value, member)) if member else None


def _nvml_nvlinks(nv: Any, handle: Any, unsupported: list[str]) -> tuple[NvLink, ...] | None:
    """Every NVLink of the GPU: state, version, speed and DL error counters.

    nvmlDeviceGetNvLinkState(link 0) NOT_SUPPORTED: the GPU has no NVLink, () (and "nvlinks" in
    `unsupported`); another failure there (an older library): None, not reported. Then one
    nvmlDeviceGetFieldValues call asks the link-scoped fields (GET_STATE, GET_VERSION, GET_SPEED,
    ERROR_DL_*) for links 0..NVML_NVLINK_MAX_LINKS-1: a link number the GPU has not answers each with
    an error and is left out. A driver without those fields: the per-link calls instead. State
    NVML_NVLINK_STATE_ACTIVE and _SLEEP (a trained link in its low-power state) count as active."""
    try:
        first = nv.nvmlDeviceGetNvLinkState(handle, 0)
    except nv.NVMLError as exc:
        if exc.value == nv.NVML_ERROR_NOT_SUPPORTED:
            unsupported.append("nvlinks")
            return ()
        return None
    limit = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
    links = _nvlinks_by_fields(nv, handle, limit)
    if links is None:
        links = _nvlinks_by_calls(nv, handle, limit, bool(first))
    if not links:
        unsupported.append("nvlinks")
    return links


def _nvlinks_by_fields(nv: Any, handle: Any, limit: int) -> tuple[NvLink, ...] | None:
    """One nvmlDeviceGetFieldValues call for every link's fields; None when this driver lacks them."""
    names = ("GET_STATE", "GET_VERSION", "GET_SPEED", "ERROR_DL_REPLAY", "ERROR_DL_RECOVERY", "ERROR_DL_CRC")
    ids = [getattr(nv, f"NVML_FI_DEV_NVLINK_{n}", None) for n in names]
    if any(i is None for i in ids):
        return None
    try:
        values = nv.nvmlDeviceGetFieldValues(handle, [(i, link) for link in range(limit) for i in ids])
    except nv.NVMLError:
        return None
    got = [_field_value(v) for v in values]
    if len(got) != limit * len(ids) or got[0] is None:  # link 0's state unanswered: fields not supported here
        return None
    up = {nv.NVML_NVLINK_STATE_ACTIVE, getattr(nv, "NVML_NVLINK_STATE_SLEEP", nv.NVML_NVLINK_STATE_ACTIVE)}
    out = []
    for link in range(limit):
        state, version, speed, replay, recovery, crc = got[link * len(ids) : (link + 1) * len(ids)]
        if state is None:
            continue  # a link number this GPU has not
        active = state in up
        out.append(NvLink(link, active, version, speed if active else None, replay, recovery, crc))
    return tuple(out)


def _nvlinks_by_calls(nv: Any, handle: Any, limit: int, first: bool) -> tuple[NvLink, ...]:
    """The same from the per-link calls (drivers before the link-scoped fields); speed from
    NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON where the per-link field is not there."""
    found: list[tuple[int, bool]] = [(0, first)]
    for link in range(1, limit):
        try:
            found.append((link, bool(nv.nvmlDeviceGetNvLinkState(handle, link))))
        except nv.NVMLError:
            continue  # a link number this GPU has not (INVALID_ARGUMENT, NOT_SUPPORTED)

    def count(call: Callable[..., Any], *args: Any) -> int | None:
        try:
            return int(call(handle, *args))
        except nv.NVMLError:
            return None

    shared: int | None = None
    if any(up for _, up in found):
        try:
            (common,) = nv.nvmlDeviceGetFieldValues(handle, [nv.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON])
            shared = _field_value(common)
        except (nv.NVMLError, ValueError):
            shared = None
    out = []
    for link, up in found:
        errors = nv.nvmlDeviceGetNvLinkErrorCounter
        crc = [count(errors, link, c) for c in (nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, nv.NVML_NVLINK_ERROR_DL_CRC_DATA)]
        known = [c for c in crc if c is not None]
        out.append(
            NvLink(
                link,
                up,
                version=count(nv.nvmlDeviceGetNvLinkVersion, link),
                speed_mbps=shared if up else None,
                replay_errors=count(errors, link, nv.NVML_NVLINK_ERROR_DL_REPLAY),
                recovery_errors=count(errors, link, nv.NVML_NVLINK_ERROR_DL_RECOVERY),
                crc_errors=sum(known) if known else None,
            )
        )
    return tuple(out)


register_probe(Probe("nvml", remote=remote, local=local))
