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
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
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
    error: str | None = None  # the GPU could not be queried at all (e.g. "GPU is lost")

    @property
    def label(self) -> str:
        """'GPU 3 (GPU-1b2c..., 00000000:5D:00.0)' for messages."""
        ids = ", ".join(x for x in (self.uuid, self.pci_bus_id) if x)
        return f"GPU {self.index}" + (f" ({ids})" if ids else "")

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.clocks_event_reasons is not None:
            out["clocks_event_reasons"] = list(self.clocks_event_reasons)
        return out


GPU_FIELDS = tuple(f.name for f in fields(Gpu))
_BOOL_FIELDS = {f.name for f in fields(Gpu) if f.type == "bool | None"}
_INT_FIELDS = {f.name for f in fields(Gpu) if f.type in ("int", "int | None")}
_STR_FIELDS = {f.name for f in fields(Gpu) if f.type == "str | None"}


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
        elif name == "clocks_event_reasons" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            values[name] = tuple(value)
        else:
            raise ValueError(f"{where}.{name} is {value!r}, which is not a valid value for it")
    if "index" not in values or values["index"] is None:
        raise ValueError(f"{where} has no `index`")
    return Gpu(**values)


def format_cuda_version(encoded: int) -> str:
    """cuDriverGetVersion's integer (1000 * major + 10 * minor) -> 'major.minor': 12040 -> '12.4'.

    domain-facts §A.5: NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000, MINOR = (v % 1000) / 10.
    """
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


# -- nvidia-smi -q -x ------------------------------------------------------------------------


def _text(element: ElementTree.Element | None, path: str) -> str | None:
    """Stripped text at `path`; None when absent, empty or "N/A"."""
    if element is None:
        return None
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if not text or text in ("N/A", "[N/A]", "Unknown Error", "[Unknown Error]") else text


def _int(text: str | None) -> int | None:
    """'16x' -> 16, '27 C' -> 27, '4' -> 4; None for anything else."""
    if text is None:
        return None
    m = re.match(r"^(\d+)\s*(?:x|C|MiB)?$", text)
    return int(m.group(1)) if m else None


def _flag(text: str | None, yes: str, no: str) -> bool | None:
    if text is None:
        return None
    if text.lower() == yes.lower():
        return True
    if text.lower() == no.lower():
        return False
    return None


def _uncorrected(scope: ElementTree.Element | None) -> int | None:
    """Uncorrectable ECC errors in <volatile> or <aggregate>, whichever schema the driver wrote.

    Schemas seen: sram_uncorrectable + dram_uncorrectable (515-535, nvsmi_device v11/v12);
    sram_uncorrectable_parity + sram_uncorrectable_secded + dram_uncorrectable (550+); and
    before those double_bit/total. Their sum is NVML's total uncorrected count.
    """
    if scope is None:
        return None
    counts = [_int(_text(child, ".")) for child in scope if "uncorrectable" in child.tag]
    if not counts:
        counts = [_int(_text(scope, "double_bit/total"))]
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
        compute = _text(gpu, "compute_mode")
        gpus.append(
            Gpu(
                index=index,
                name=_text(gpu, "product_name"),
                uuid=_text(gpu, "uuid"),
                pci_bus_id=_pci_bus_id(_text(gpu, "pci/pci_bus_id") or gpu.get("id")),
                architecture=_text(gpu, "product_architecture"),
                persistence_mode=_flag(_text(gpu, "persistence_mode"), "Enabled", "Disabled"),
                compute_mode=compute.upper().replace(" ", "_") if compute else None,
                mig_current=_flag(_text(mig, "current_mig"), "Enabled", "Disabled"),
                mig_pending=_flag(_text(mig, "pending_mig"), "Enabled", "Disabled"),
                ecc_current=_flag(_text(ecc, "current_ecc"), "Enabled", "Disabled"),
                ecc_pending=_flag(_text(ecc, "pending_ecc"), "Enabled", "Disabled"),
                ecc_volatile_uncorrected=_uncorrected(errors.find("volatile") if errors is not None else None),
                ecc_aggregate_uncorrected=_uncorrected(errors.find("aggregate") if errors is not None else None),
                retired_pages_sbe=_int(_text(retired, "multiple_single_bit_retirement/retired_count")),
                retired_pages_dbe=_int(_text(retired, "double_bit_retirement/retired_count")),
                retired_pages_pending=_flag(pending, "Yes", "No"),
                remapped_rows_correctable=_int(_text(remap, "remapped_row_corr")),
                remapped_rows_uncorrectable=_int(_text(remap, "remapped_row_unc")),
                remap_pending=_flag(_text(remap, "remapped_row_pending"), "Yes", "No"),
                remap_failure=_flag(_text(remap, "remapped_row_failure"), "Yes", "No"),
                pcie_gen_current=_int(_text(link, "pcie_gen/current_link_gen")),
                pcie_gen_max=_int(_text(link, "pcie_gen/max_link_gen")),
                pcie_width_current=_int(_text(link, "link_widths/current_link_width")),
                pcie_width_max=_int(_text(link, "link_widths/max_link_width")),
                clocks_event_reasons=_clock_reasons(gpu),
                temperature_c=_int(_text(gpu, "temperature/gpu_temp")),
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

    def flag(value: Any) -> bool | None:
        return None if value is None else bool(value)

    mig = get(nv.nvmlDeviceGetMigMode, handle) or (None, None)
    ecc = get(nv.nvmlDeviceGetEccMode, handle) or (None, None)
    remap = get(nv.nvmlDeviceGetRemappedRows, handle) or (None, None, None, None)
    sbe = get(nv.nvmlDeviceGetRetiredPages, handle, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = get(nv.nvmlDeviceGetRetiredPages, handle, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    reasons = get(nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if reasons is None:  # libnvidia-ml before 535 has only the older name (same bits)
        reasons = get(nv.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    compute = get(nv.nvmlDeviceGetComputeMode, handle)
    arch = get(nv.nvmlDeviceGetArchitecture, handle)
    uncorrected = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return Gpu(
        index=index,
        name=name,
        uuid=uuid,
        pci_bus_id=_pci_bus_id(bus_id),
        architecture=ARCHITECTURES.get(arch) if arch is not None else None,
        persistence_mode=flag(get(nv.nvmlDeviceGetPersistenceMode, handle)),
        compute_mode=COMPUTE_MODES.get(compute) if compute is not None else None,
        mig_current=flag(mig[0]),
        mig_pending=flag(mig[1]),
        ecc_current=flag(ecc[0]),
        ecc_pending=flag(ecc[1]),
        ecc_volatile_uncorrected=get(nv.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nv.NVML_VOLATILE_ECC),
        ecc_aggregate_uncorrected=get(nv.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nv.NVML_AGGREGATE_ECC),
        retired_pages_sbe=len(sbe) if sbe is not None else None,
        retired_pages_dbe=len(dbe) if dbe is not None else None,
        retired_pages_pending=flag(get(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)),
        remapped_rows_correctable=remap[0],
        remapped_rows_uncorrectable=remap[1],
        remap_pending=flag(remap[2]),
        remap_failure=flag(remap[3]),
        pcie_gen_current=get(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_gen_max=get(nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width_current=get(nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_width_max=get(nv.nvmlDeviceGetMaxPcieLinkWidth, handle),
        clocks_event_reasons=(
            tuple(name for bit, name in CLOCK_REASONS.items() if reasons & bit) if reasons is not None else None
        ),
        temperature_c=get(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
    )


register_probe(Probe("nvml", remote=remote, local=local))
