"""The `nvml` probe: the XML side on real nvidia-smi outputs, the NVML side with pynvml mocked
(this machine has no GPU), and both giving equal records for the same GPU state."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_mock import MockerFixture
from tests.helpers import CORPUS

from clustercheck import Host
from clustercheck.errors import CommandTimeout, HostError
from clustercheck.host import CommandResult
from clustercheck.probes import nvml
from clustercheck.probes.nvml import GpuRecord, format_cuda_version, parse_nvidia_smi_xml
from clustercheck.transports import local as local_transport
from clustercheck.transports.base import Transport
from clustercheck.transports.fixture import Fixture, RecordingTransport, ReplayTransport
from clustercheck.transports.local import LocalTransport

SMI = CORPUS / "nvidia_smi"
A100 = SMI / "telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535.xml.txt"
A10G = SMI / "telegraf-nvidia-smi-q-x-A10G-515.xml.txt"
T4 = SMI / "telegraf-nvidia-smi-q-x-TeslaT4-515.xml.txt"


def without_source(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "source"}


# -- nvidia-smi -q -x on the corpus ----------------------------------------------------------


def test_a100_535_with_mig() -> None:
    record = parse_nvidia_smi_xml(A100.read_text())
    assert (record.driver_version, record.cuda_version, record.source) == ("535.54.03", "12.2", "nvidia-smi")
    (gpu,) = record.gpus  # the file says 4 attached but describes one
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.architecture == "Ampere"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert (gpu.mig_current, gpu.mig_pending, gpu.persistence_mode, gpu.compute_mode) == (True, True, False, "DEFAULT")
    assert (gpu.ecc_current, gpu.ecc_volatile_uncorrected, gpu.ecc_aggregate_uncorrected) == (True, 0, 0)
    # remapped rows are N/A while MIG is enabled: not known, not zero
    assert (gpu.remap_pending, gpu.remap_failure, gpu.remapped_rows_uncorrectable) == (None, None, None)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (4, 4, 16, 16)
    assert gpu.clocks_event_reasons == ()  # 535 names them clocks_event_reasons, all Not Active
    assert gpu.temperature_c == 27
    # <fabric><state>N/A</state><status>N/A</status></fabric>: asked, and this GPU has no NVSwitch fabric
    assert (gpu.fabric_state, gpu.fabric_status, gpu.fabric_clique_id) == ("N/A", None, None)
    assert gpu.nvlinks is None  # the XML has no NVLink block: not reported (gpu.nvlink asks nvidia-smi)


def test_a10g_515_throttle_reasons_and_row_remapper() -> None:
    record = parse_nvidia_smi_xml(A10G.read_text())
    (gpu,) = record.gpus
    assert (record.driver_version, record.cuda_version) == ("515.105.01", "11.7")
    assert gpu.clocks_event_reasons == ("gpu_idle",)  # from <clocks_throttle_reasons> before 535
    assert (gpu.mig_current, gpu.mig_pending) == (None, None)  # N/A: no MIG on an A10G
    assert (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable) == (0, 0)
    assert (gpu.remap_pending, gpu.remap_failure) == (False, False)
    assert (gpu.retired_pages_sbe, gpu.retired_pages_pending) == (None, None)
    # an idle A10G on AWS: Gen 1 of 4 and x8 of x16, as published
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (1, 4, 8, 16)


def test_tesla_t4_page_retirement_instead_of_row_remapping() -> None:
    (gpu,) = parse_nvidia_smi_xml(T4.read_text()).gpus
    assert gpu.name == "Tesla T4" and gpu.architecture == "Turing"
    assert (gpu.retired_pages_sbe, gpu.retired_pages_dbe, gpu.retired_pages_pending) == (0, 0, False)
    assert gpu.remap_pending is None


def test_records_survive_json_and_validation() -> None:
    for path in (A100, A10G, T4):
        record = parse_nvidia_smi_xml(path.read_text())
        assert GpuRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_older_schemas_ecc_double_bit_total_and_missing_blocks() -> None:
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>470.82.01</driver_version>
      <gpu id="00000000:3B:00.0"><product_name>Tesla V100-PCIE-32GB</product_name>
      <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
      <ecc_errors><volatile><single_bit><total>3</total></single_bit><double_bit><device_memory>1</device_memory>
      <total>1</total></double_bit></volatile></ecc_errors></gpu></nvidia_smi_log>"""
    record = parse_nvidia_smi_xml(xml)
    (gpu,) = record.gpus
    assert record.cuda_version is None  # no <cuda_version> before 410
    assert gpu.ecc_volatile_uncorrected == 1 and gpu.ecc_aggregate_uncorrected is None
    assert gpu.pcie_width_current is None and gpu.clocks_event_reasons is None and gpu.uuid is None


def test_550_parity_and_secded_counts_are_summed() -> None:
    xml = """<nvidia_smi_log><gpu id="00000000:18:00.0"><ecc_errors><volatile>
      <sram_correctable>9</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>0</dram_correctable>
      <dram_uncorrectable>4</dram_uncorrectable></volatile></ecc_errors></gpu></nvidia_smi_log>"""
    assert parse_nvidia_smi_xml(xml).gpus[0].ecc_volatile_uncorrected == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<nvidia_smi_log><gpu>", "does not parse: no element found: line 1, column 21"),
        ("<html></html>", "expected <nvidia_smi_log>"),
    ],
)
def test_garbage_xml_is_a_value_error_naming_where(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_nvidia_smi_xml(text)


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_parser_never_crashes_on_arbitrary_text(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_nvidia_smi_xml(text)


_FIELDS = ["product_name", "uuid", "persistence_mode", "compute_mode", "current_ecc", "max_link_width", "gpu_temp"]


_XML_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)


@given(st.lists(st.tuples(st.sampled_from(_FIELDS), _XML_TEXT), max_size=8))
@settings(max_examples=200, deadline=None)
def test_parser_takes_any_field_value_without_crashing(fields: list[tuple[str, str]]) -> None:
    from xml.sax.saxutils import escape

    body = "".join(f"<{tag}>{escape(value)}</{tag}>" for tag, value in fields)
    record = parse_nvidia_smi_xml(f"<nvidia_smi_log><gpu>{body}</gpu></nvidia_smi_log>")
    GpuRecord.from_json(json.loads(json.dumps(record.to_json())))


def test_cuda_driver_version_encoding() -> None:
    # domain-facts §A.5: 1000 * major + 10 * minor
    assert [format_cuda_version(v) for v in (12040, 13000, 11070, 9020)] == ["12.4", "13.0", "11.7", "9.2"]


def test_record_validation_names_the_bad_field() -> None:
    good = parse_nvidia_smi_xml(T4.read_text()).to_json()
    bad = json.loads(json.dumps(good))
    bad["gpus"][0]["pcie_width_current"] = "x16"
    with pytest.raises(ValueError, match=r"gpus\[0\]\.pcie_width_current is 'x16'"):
        GpuRecord.from_json(bad)
    with pytest.raises(ValueError, match="no `gpus` list"):
        GpuRecord.from_json({"driver_version": "1"})
    bad = json.loads(json.dumps(good))
    bad["gpus"][0]["colour"] = "green"
    with pytest.raises(ValueError, match="unknown fields: colour"):
        GpuRecord.from_json(bad)


# -- NVML in-process, mocked -------------------------------------------------------------------


def not_supported() -> Exception:
    error: Exception = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # pynvml has no type hints
    return error


class FakeGpu:
    """What NVML's calls return for one GPU (raw: bytes, enums, bitmasks, as the C API gives)."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers

    def get(self, call: str) -> Any:
        value = self.answers.get(call, not_supported())
        if isinstance(value, Exception):
            raise value
        return value

    def link(self, link: int) -> tuple[Any, ...]:
        links = self.answers.get("nvlink", not_supported())
        if isinstance(links, Exception):
            raise links
        if link not in links:  # a link number this GPU has not
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]  # type: ignore[no-any-return]

    def field_values(self, ids: list[Any]) -> list[Any]:
        """nvmlFieldValue_t answers for the link-scoped NVLink fields ((field, link) requests) from the
        "nvlink" answers; "old_driver": True answers them NOT_SUPPORTED (a driver before those fields) and
        only NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON (the first link's speed)."""
        links = self.answers.get("nvlink", {})
        old = self.answers.get("old_driver", False)
        out = []
        for request in ids:
            field, link = request if isinstance(request, tuple) else (request, 0)
            value = pynvml.c_nvmlFieldValue_t()
            value.fieldId, value.scopeId = field, link
            value.valueType, value.nvmlReturn = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_SUCCESS
            answer: int | None = None
            if field == pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON and isinstance(links, dict) and links:
                answer = next(iter(links.values()))[2]
            elif not old and isinstance(links, dict) and link in links:
                active, version, mbps, counters = links[link]
                answer = {
                    pynvml.NVML_FI_DEV_NVLINK_GET_STATE: active,
                    pynvml.NVML_FI_DEV_NVLINK_GET_VERSION: version,
                    pynvml.NVML_FI_DEV_NVLINK_GET_SPEED: mbps,
                    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: counters[pynvml.NVML_NVLINK_ERROR_DL_REPLAY],
                    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: counters[pynvml.NVML_NVLINK_ERROR_DL_RECOVERY],
                    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: counters[pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT]
                    + counters[pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA],
                }.get(field)
            if answer is None:
                value.nvmlReturn = (
                    pynvml.NVML_ERROR_INVALID_ARGUMENT
                    if isinstance(links, dict) and link not in links and not old
                    else pynvml.NVML_ERROR_NOT_SUPPORTED
                )
            else:
                value.value.ullVal = answer
            out.append(value)
        return out

    def fabric(self, call: str, ref: Any) -> int:
        answer = self.answers.get("fabric", not_supported())
        if isinstance(answer, Exception):
            raise answer
        info = ref._obj  # the struct the probe passed by reference, filled as libnvidia-ml fills it
        if call != "nvmlDeviceGetGpuFabricInfoV" or not isinstance(info, pynvml.c_nvmlGpuFabricInfo_v3_t):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        state, status, clique, cluster, health = answer
        info.state, info.status, info.cliqueId, info.healthSummary = state, status, clique, health
        info.clusterUuid[:] = list(cluster)
        return int(pynvml.NVML_SUCCESS)


def fake_nvml(mocker: MockerFixture, driver: bytes, cuda: int, gpus: Sequence[FakeGpu | Exception]) -> None:
    """Patch pynvml's functions to answer for these GPUs (an Exception: the handle cannot be had)."""
    mocker.patch.object(pynvml, "nvmlInit")
    mocker.patch.object(pynvml, "nvmlShutdown")
    mocker.patch.object(pynvml, "nvmlSystemGetDriverVersion", return_value=driver)
    mocker.patch.object(pynvml, "nvmlSystemGetCudaDriverVersion_v2", return_value=cuda)
    mocker.patch.object(pynvml, "nvmlDeviceGetCount", return_value=len(gpus))

    def handle(index: int) -> FakeGpu:
        gpu = gpus[index]
        if isinstance(gpu, Exception):
            raise gpu
        return gpu

    mocker.patch.object(pynvml, "nvmlDeviceGetHandleByIndex", side_effect=handle)
    simple = [
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetArchitecture",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetInforomImageVersion",
        "nvmlDeviceGetPerformanceState",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ]
    for name in simple:
        mocker.patch.object(pynvml, name, side_effect=lambda h, _n=name: h.get(_n))
    mocker.patch.object(
        pynvml,
        "nvmlDeviceGetTotalEccErrors",
        side_effect=lambda h, kind, counter: h.get(f"ecc {kind} {counter}"),
    )
    mocker.patch.object(pynvml, "nvmlDeviceGetRetiredPages", side_effect=lambda h, cause: h.get(f"retired {cause}"))
    mocker.patch.object(pynvml, "nvmlDeviceGetTemperature", side_effect=lambda h, sensor: h.get(f"temp {sensor}"))
    for name in ("nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock"):
        mocker.patch.object(pynvml, name, side_effect=lambda h, clock, _n=name: h.get(f"{_n} {clock}"))
    for name in ("nvmlDeviceGetMaxClockInfo",):
        mocker.patch.object(pynvml, name, side_effect=lambda h, clock, _n=name: h.get(f"{_n} {clock}"))
    names: dict[int, bytes] = {
        p.pid: p.name for g in gpus if isinstance(g, FakeGpu) for p in g.answers.get("names", [])
    }

    def process_name(pid: int) -> bytes:
        if pid not in names:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return names[pid]

    mocker.patch.object(pynvml, "nvmlSystemGetProcessName", side_effect=process_name)
    # NVLink: "nvlink" answers {link: (active, version, speed MBps, (replay, recovery, crc flit, crc data))}
    mocker.patch.object(pynvml, "nvmlDeviceGetNvLinkState", side_effect=lambda h, link: h.link(link)[0])
    mocker.patch.object(pynvml, "nvmlDeviceGetNvLinkVersion", side_effect=lambda h, link: h.link(link)[1])
    mocker.patch.object(pynvml, "nvmlDeviceGetNvLinkErrorCounter", side_effect=lambda h, link, c: h.link(link)[3][c])
    mocker.patch.object(pynvml, "nvmlDeviceGetFieldValues", side_effect=lambda h, ids: h.field_values(ids))
    # the fabric: "fabric" answers (state, status, clique id, cluster uuid bytes, health summary) or an error
    for call in ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"):
        mocker.patch.object(pynvml, call, side_effect=lambda h, ref, _c=call: h.fabric(_c, ref))


class Pci:
    def __init__(self, bus_id: bytes) -> None:
        self.busId = bus_id


class Memory:
    """nvmlMemory_t: bytes."""

    def __init__(self, used_mib: int, total_mib: int) -> None:
        self.used, self.total = used_mib << 20, total_mib << 20


class Proc:
    """nvmlProcessInfo_t: pid and bytes of GPU memory (and, for the fake, the name NVML gives)."""

    def __init__(self, pid: int, used_mib: int, name: bytes) -> None:
        self.pid, self.usedGpuMemory, self.name = pid, used_mib << 20, name


GR, MEM = pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_MEM


def clocks(app: tuple[int, int], default: tuple[int, int], top: tuple[int, int]) -> dict[str, int]:
    return {
        f"nvmlDeviceGetApplicationsClock {GR}": app[0],
        f"nvmlDeviceGetApplicationsClock {MEM}": app[1],
        f"nvmlDeviceGetDefaultApplicationsClock {GR}": default[0],
        f"nvmlDeviceGetDefaultApplicationsClock {MEM}": default[1],
        f"nvmlDeviceGetMaxClockInfo {GR}": top[0],
        f"nvmlDeviceGetMaxClockInfo {MEM}": top[1],
    }


UNC = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOL, AGG = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
SBE = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
DBE = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
TEMP = pynvml.NVML_TEMPERATURE_GPU

NO_SYMBOL = pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

# The GPU states of the three corpus files, as NVML reports them.
A100_NVML = FakeGpu(
    **{
        "nvmlDeviceGetName": b"NVIDIA A100-SXM4-80GB",
        "nvmlDeviceGetUUID": b"GPU-513536b6-7d19-9063-b049-1e69664bb298",
        "nvmlDeviceGetPciInfo": Pci(b"00000000:01:00.0"),
        "nvmlDeviceGetArchitecture": pynvml.NVML_DEVICE_ARCH_AMPERE,
        "nvmlDeviceGetPersistenceMode": 0,
        "nvmlDeviceGetComputeMode": pynvml.NVML_COMPUTEMODE_DEFAULT,
        "nvmlDeviceGetMigMode": [1, 1],
        "nvmlDeviceGetEccMode": [1, 1],
        f"ecc {UNC} {VOL}": 0,
        f"ecc {UNC} {AGG}": 0,
        "nvmlDeviceGetCurrentClocksEventReasons": 0,
        "nvmlDeviceGetCurrPcieLinkGeneration": 4,
        "nvmlDeviceGetMaxPcieLinkGeneration": 4,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        f"temp {TEMP}": 27,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": 4,
        "nvmlDeviceGetVbiosVersion": b"92.00.36.00.02",
        "nvmlDeviceGetInforomImageVersion": b"G506.0212.00.01",
        "nvmlDeviceGetPerformanceState": 0,
        "nvmlDeviceGetPowerUsage": 67030,  # milliwatts
        "nvmlDeviceGetEnforcedPowerLimit": 500000,
        "nvmlDeviceGetPowerManagementDefaultLimit": 500000,
        "nvmlDeviceGetPowerManagementLimitConstraints": [100000, 500000],
        "nvmlDeviceGetMemoryInfo": Memory(50, 81920),
        "nvmlDeviceGetComputeRunningProcesses": [],
        "nvmlDeviceGetGraphicsRunningProcesses": [],
        **clocks((1275, 1593), (1275, 1593), (1410, 1593)),
    }
)
A10G_NVML = FakeGpu(
    **{
        "nvmlDeviceGetName": "NVIDIA A10G",  # newer nvidia-ml-py decodes to str
        "nvmlDeviceGetUUID": "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94",
        "nvmlDeviceGetPciInfo": Pci(b"00000000:00:1E.0"),
        "nvmlDeviceGetArchitecture": pynvml.NVML_DEVICE_ARCH_AMPERE,
        "nvmlDeviceGetPersistenceMode": 0,
        "nvmlDeviceGetComputeMode": pynvml.NVML_COMPUTEMODE_DEFAULT,
        "nvmlDeviceGetEccMode": [1, 1],
        f"ecc {UNC} {VOL}": 0,
        f"ecc {UNC} {AGG}": 0,
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        # a 515 libnvidia-ml has no ...EventReasons symbol yet, only ...ThrottleReasons
        "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
        "nvmlDeviceGetCurrentClocksThrottleReasons": pynvml.nvmlClocksThrottleReasonGpuIdle,
        "nvmlDeviceGetCurrPcieLinkGeneration": 1,
        "nvmlDeviceGetMaxPcieLinkGeneration": 4,
        "nvmlDeviceGetCurrPcieLinkWidth": 8,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        f"temp {TEMP}": 17,
        "nvmlDeviceGetVbiosVersion": "94.02.75.00.01",
        "nvmlDeviceGetInforomImageVersion": "G133.0210.00.04",
        "nvmlDeviceGetPerformanceState": 8,
        "nvmlDeviceGetPowerUsage": 25580,
        "nvmlDeviceGetEnforcedPowerLimit": 300000,
        "nvmlDeviceGetPowerManagementDefaultLimit": 300000,
        "nvmlDeviceGetPowerManagementLimitConstraints": [100000, 300000],
        "nvmlDeviceGetMemoryInfo": Memory(22, 23028),
        "nvmlDeviceGetComputeRunningProcesses": [],
        "nvmlDeviceGetGraphicsRunningProcesses": [Proc(725, 22, b"/usr/lib/xorg/Xorg")],
        "names": [Proc(725, 22, b"/usr/lib/xorg/Xorg")],
        "fabric": NO_SYMBOL,  # libnvidia-ml 515 predates the fabric calls (its XML has no <fabric>)
        **clocks((1710, 6251), (1710, 6251), (1710, 6251)),
    }
)
T4_NVML = FakeGpu(
    **{
        "nvmlDeviceGetName": b"Tesla T4",
        "nvmlDeviceGetUUID": b"GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
        "nvmlDeviceGetPciInfo": Pci(b"00000000:00:1E.0"),
        "nvmlDeviceGetArchitecture": pynvml.NVML_DEVICE_ARCH_TURING,
        "nvmlDeviceGetPersistenceMode": 0,
        "nvmlDeviceGetComputeMode": pynvml.NVML_COMPUTEMODE_DEFAULT,
        "nvmlDeviceGetEccMode": [1, 1],
        f"ecc {UNC} {VOL}": 0,
        f"ecc {UNC} {AGG}": 0,
        f"retired {SBE}": [],
        f"retired {DBE}": [],
        "nvmlDeviceGetRetiredPagesPendingStatus": 0,
        "nvmlDeviceGetCurrentClocksEventReasons": 0,
        "nvmlDeviceGetCurrPcieLinkGeneration": 3,
        "nvmlDeviceGetMaxPcieLinkGeneration": 3,
        "nvmlDeviceGetCurrPcieLinkWidth": 8,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        f"temp {TEMP}": 40,
        "nvmlDeviceGetVbiosVersion": b"90.04.84.00.06",
        "nvmlDeviceGetInforomImageVersion": b"G183.0200.00.02",
        "nvmlDeviceGetPerformanceState": 0,
        "nvmlDeviceGetPowerUsage": 26780,
        "nvmlDeviceGetEnforcedPowerLimit": 70000,
        "nvmlDeviceGetPowerManagementDefaultLimit": 70000,
        "nvmlDeviceGetPowerManagementLimitConstraints": [60000, 70000],
        "nvmlDeviceGetMemoryInfo": Memory(1032, 15360),
        "nvmlDeviceGetComputeRunningProcesses": [Proc(5762, 1005, b"python")],
        "nvmlDeviceGetGraphicsRunningProcesses": [Proc(675, 22, b"/usr/lib/xorg/Xorg")],
        "names": [Proc(675, 22, b"/usr/lib/xorg/Xorg"), Proc(5762, 1005, b"python")],
        "fabric": NO_SYMBOL,
        **clocks((585, 5001), (585, 5001), (1590, 5001)),
    }
)


@pytest.mark.parametrize(
    ("xml", "driver", "cuda", "gpu"),
    [
        (A100, b"535.54.03", 12020, A100_NVML),
        (A10G, "515.105.01", 11070, A10G_NVML),
        (T4, b"515.105.01", 11070, T4_NVML),
    ],
    ids=["A100-535-MIG", "A10G-515", "T4-515"],
)
def test_nvml_and_nvidia_smi_give_equal_records(
    mocker: MockerFixture, xml: Path, driver: bytes, cuda: int, gpu: FakeGpu
) -> None:
    fake_nvml(mocker, driver, cuda, [gpu])
    from_nvml = nvml.local()
    from_xml = parse_nvidia_smi_xml(xml.read_text()).to_json()
    assert from_nvml["source"] == "nvml" and from_xml["source"] == "nvidia-smi"
    # what NVML said it does not support is NVML's own knowledge (the XML prints N/A): the rest is equal
    said = from_nvml["gpus"][0].pop("unsupported", [])
    # NVLink comes from NVML alone (nvidia-smi -q -x prints no NVLink block): these GPUs answer NOT_SUPPORTED
    assert from_nvml["gpus"][0].pop("nvlinks", []) == [] and "nvlinks" not in from_xml["gpus"][0]
    # nor has NVML a call for the slot's own maximum generation (its max is the lower of GPU and slot)
    from_xml["gpus"][0].pop("pcie_gen_host_max", None)
    assert without_source(from_nvml) == without_source(from_xml)
    # the XML's host-side generation has no NVML call; the fields the files leave N/A are NOT_SUPPORTED
    # (the fabric state is the XML's N/A, which NVML's NOT_SUPPORTED also records)
    assert "pcie_gen_host_max" not in said and all(from_xml["gpus"][0].get(f) in (None, "N/A") for f in said)


def test_nvlink_and_fabric_fields_validate_and_round_trip() -> None:
    (gpu,) = parse_nvidia_smi_xml(A100.read_text()).gpus
    record = GpuRecord((gpu,)).to_json()
    link = {"link": 0, "active": True, "version": 4, "speed_mbps": 25000, "replay_errors": 0}
    record["gpus"][0]["nvlinks"] = [link, {"link": 1, "active": False}]
    back = GpuRecord.from_json(json.loads(json.dumps(record)))
    assert [(x.link, x.active, x.speed_mbps) for x in back.gpus[0].nvlinks or ()] == [
        (0, True, 25000),
        (1, False, None),
    ]
    assert GpuRecord.from_json(back.to_json()) == back
    for bad, said in (
        ({"link": -1, "active": True}, "link is -1"),
        ({"link": 0, "active": "yes"}, "active is 'yes'"),
        ({"link": 0, "active": True, "speed_mbps": "fast"}, "speed_mbps is 'fast'"),
        ({"link": 0, "active": True, "colour": 1}, "not an NVLink"),
    ):
        record["gpus"][0]["nvlinks"] = [bad]
        with pytest.raises(ValueError, match=said):
            GpuRecord.from_json(record)
    # an older record (no NVLink or fabric fields) keeps its shape: they are left out while unknown
    assert "nvlinks" not in parse_nvidia_smi_xml(T4.read_text()).to_json()["gpus"][0]


def test_fabric_call_falls_back_to_older_structs(mocker: MockerFixture) -> None:
    """A driver that knows only the v2 struct (ARGUMENT_VERSION_MISMATCH for v3): the state is still read."""
    answers = dict(T4_NVML.answers)
    calls: list[str] = []

    def v2_only(call: str, ref: Any) -> int:
        info = ref._obj
        calls.append(type(info).__name__)
        if not isinstance(info, pynvml.c_nvmlGpuFabricInfo_v2_t):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        info.state, info.status, info.cliqueId = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0, 7
        return 0

    gpu = FakeGpu(**answers)
    gpu.fabric = v2_only  # type: ignore[method-assign]
    fake_nvml(mocker, b"550.54.15", 12040, [gpu])
    (got,) = GpuRecord.from_json(nvml.local()).gpus
    assert calls[:2] == ["c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"]
    assert (got.fabric_state, got.fabric_status, got.fabric_clique_id, got.fabric_health) == (
        "Completed",
        "Success",
        7,
        None,  # v2 has no health summary
    )


def test_a_lost_gpu_is_listed_with_its_error(mocker: MockerFixture) -> None:
    fake_nvml(mocker, b"535.54.03", 12020, [A100_NVML, pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)])
    record = GpuRecord.from_json(nvml.local())
    assert [g.error for g in record.gpus] == [None, "GPU is lost"]
    assert record.gpus[1].index == 1 and record.gpus[1].name is None


def test_no_library_and_no_nvidia_smi_is_a_record_saying_so(mocker: MockerFixture) -> None:
    mocker.patch.object(pynvml, "nvmlInit", side_effect=pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    mocker.patch.object(shutil, "which", return_value=None)  # the probe asks shutil.which for nvidia-smi
    record = nvml.local()
    assert record["gpus"] == [] and record["error"].startswith("NVML library not found")


def test_without_the_library_the_local_transport_falls_back_to_nvidia_smi(
    mocker: MockerFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stand-in nvidia-smi that prints the real A10G XML, first on PATH
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n[ "$*" = "-q -x" ] || exit 2\ncat "{A10G}"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    path = f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    monkeypatch.setenv("PATH", path)
    mocker.patch.dict(local_transport._ENV, {"PATH": path})
    mocker.patch.object(pynvml, "nvmlInit", side_effect=pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    record = Host(LocalTransport("n1")).probe("nvml")
    assert record == parse_nvidia_smi_xml(A10G.read_text()).to_json()
    # and recording keeps the record, which replays without NVML or nvidia-smi
    recorder = RecordingTransport(LocalTransport("n1"), tmp_path / "fx")
    Host(recorder).probe("nvml")
    recorder.write_manifest(profile="gpu-node", version="test", note="fallback", expect={})
    assert Host(ReplayTransport(Fixture.load(tmp_path / "fx"))).probe("nvml") == record


class ScriptedTransport(Transport):
    """A transport whose one command answers as told (for nvidia-smi's failure modes); it has no files
    and no probes."""

    kind = "scripted"
    host = "n1"

    def __init__(self, result: CommandResult) -> None:
        self.result = result

    @property
    def fixture(self) -> Fixture | None:
        return None

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        assert tuple(argv) == ("nvidia-smi", "-q", "-x")
        return self.result

    def read(self, path: str, *, timeout: float) -> str:
        raise FileNotFoundError(path)

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        return {}

    def probe(self, name: str, *, timeout: float) -> Any:
        raise HostError(self.host, f"no probe {name} on a scripted transport")

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass


def smi(code: int | None, stdout: str = "", stderr: str = "", timed_out: bool = False) -> CommandResult:
    return CommandResult(("nvidia-smi", "-q", "-x"), code, stdout, stderr, 0.1, timed_out)


def test_remote_side_failure_modes() -> None:
    missing = nvml.remote(ScriptedTransport(smi(127, stderr="nvidia-smi: command not found")), 10)
    assert missing["gpus"] == [] and "nvidia-smi not found" in missing["error"]
    no_driver = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    failed = nvml.remote(ScriptedTransport(smi(9, no_driver)), 10)
    assert failed["error"] == "nvidia-smi exited 9: " + no_driver.strip()
    mismatch = nvml.remote(
        ScriptedTransport(smi(18, "Failed to initialize NVML: Driver/library version mismatch\n")), 10
    )
    assert "Driver/library version mismatch" in mismatch["error"]
    with pytest.raises(HostError, match="does not parse"):
        nvml.remote(ScriptedTransport(smi(0, '<?xml version="1.0" ?>\n<nvidia_smi_log><gpu>')), 10)
    with pytest.raises(CommandTimeout):
        nvml.remote(ScriptedTransport(smi(None, timed_out=True)), 10)


def test_calls_a_gpu_does_not_support_are_named_not_failed(mocker: MockerFixture) -> None:
    """NVML's NOT_SUPPORTED: the field is None and listed in `unsupported`; other errors only None."""
    answers = dict(T4_NVML.answers)
    answers["nvmlDeviceGetEnforcedPowerLimit"] = not_supported()
    answers["nvmlDeviceGetPowerManagementDefaultLimit"] = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    answers["nvmlDeviceGetComputeRunningProcesses"] = not_supported()
    fake_nvml(mocker, b"515.105.01", 11070, [FakeGpu(**answers)])
    (gpu,) = GpuRecord.from_json(nvml.local()).gpus
    assert gpu.power_limit_w is None and gpu.power_limit_default_w is None and gpu.processes is None
    assert gpu.unsupported is not None
    assert "power_limit_w" in gpu.unsupported and "processes" in gpu.unsupported
    assert "power_limit_default_w" not in gpu.unsupported  # an unknown error is not "not supported"
    assert gpu.why_missing("power_limit_w") == "not supported by this GPU (NVML NOT_SUPPORTED)"
    assert gpu.why_missing("power_limit_default_w") == "not reported"
    assert gpu.power_draw_w == 26.78 and gpu.vbios_version == "90.04.84.00.06"  # the rest still read
