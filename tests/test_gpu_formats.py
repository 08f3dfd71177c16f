"""nvidia-smi's text forms (`-q`, the default table) read into the GPU record NVML and `-q -x` give:
every corpus file with its MANIFEST conclusion, the forms agreeing where the same GPUs exist in
several, garbage never a record (hypothesis), and the checks judging a pasted `-q` like NVML's."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, cli

from clustercheck.facts.nvidia_smi import parse_nvidia_smi_output, parse_nvidia_smi_q, parse_nvidia_smi_table
from clustercheck.probes.nvml import GpuRecord, parse_nvidia_smi_xml

SMI = CORPUS / "nvidia_smi"
H100_Q = SMI / "gpud-nvidia-smi-q-8xH100-535.161.08-fabric-completed.txt"
H100_TABLE = SMI / "gpud-nvidia-smi-table-8xH100-550.90.07.txt"
H100_BUSES = ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]


def record_of(path: Path) -> GpuRecord:
    return parse_nvidia_smi_output(path.read_text())


# -- nvidia-smi -q ----------------------------------------------------------------------------------


def test_q_h100_535_every_field_of_the_record() -> None:
    record = parse_nvidia_smi_q(H100_Q.read_text())
    assert (record.driver_version, record.cuda_version, record.source, record.error) == (
        "535.161.08",
        "12.2",
        "nvidia-smi -q",
        None,
    )
    assert [g.pci_bus_id for g in record.gpus] == [f"00000000:{b}:00.0" for b in H100_BUSES]
    gpu = record.gpus[0]
    assert (gpu.name, gpu.architecture, gpu.uuid) == (
        "NVIDIA H100 80GB HBM3",
        "Hopper",
        "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa",
    )
    assert (gpu.persistence_mode, gpu.compute_mode, gpu.mig_current, gpu.ecc_current) == (True, "DEFAULT", False, True)
    assert (gpu.ecc_volatile_uncorrected, gpu.remap_pending, gpu.remap_failure) == (0, False, False)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_device_max, gpu.pcie_gen_host_max, gpu.pcie_width_current) == (
        5,
        5,
        5,
        16,
    )
    # the MANIFEST's conclusion: the external power brake holds every GPU's clocks back
    assert all(g.clocks_event_reasons == ("hw_slowdown", "hw_power_brake_slowdown") for g in record.gpus)
    assert (gpu.power_limit_w, gpu.power_limit_default_w, gpu.power_draw_w) == (700.0, 700.0, 67.74)
    assert (gpu.vbios_version, gpu.inforom_image, gpu.performance_state) == ("96.00.74.00.0D", "G520.0200.00.05", "P0")
    assert (gpu.clocks_app_graphics_mhz, gpu.clocks_default_app_graphics_mhz, gpu.memory_total_mib) == (
        1980,
        1980,
        81559,
    )
    assert gpu.processes == ()  # "Processes : None"


def test_q_other_layouts_and_their_conclusions() -> None:
    a10 = record_of(SMI / "gpud-nvidia-smi-q-A10-535.129.03.txt").gpus[0]
    assert (a10.remapped_rows_uncorrectable, a10.remap_pending, a10.remap_failure) == (4, True, False)  # RESET_GPU
    titan = record_of(SMI / "gpud-nvidia-smi-q-TitanV-560.35.03.txt").gpus[0]
    assert titan.persistence_mode is False and titan.remap_pending is None  # "Remapped Rows : N/A": not supported
    assert [p.type for p in titan.processes or ()] == ["G", "G", "G"]
    rtx = record_of(SMI / "gpud-nvidia-smi-q-8xRTX4090-535.154.05.txt")
    assert all(any(p.type == "C" for p in g.processes or ()) for g in rtx.gpus)  # compute processes on all 8
    (first,) = rtx.gpus[0].processes or ()
    assert (first.pid, first.name, first.used_memory_mib) == (2010222, "/usr/bin/python", 6724)
    old = record_of(SMI / "issue-netdata-4892-nvidia-smi-a-410.72-gtx960m-EXCERPT.txt")  # narrower key column
    assert (old.driver_version, old.gpus[0].name, old.gpus[0].vbios_version) == (
        "410.72",
        "GeForce GTX 960M",
        "82.07.73.00.06",
    )
    retired = record_of(SMI / "azurehpc-nvsmi-q-retired-pages-8gpu-535-BAD-ecc.txt")  # a `-q -d PAGE_RETIREMENT`
    # five of the eight GPUs have retired pages (the MANIFEST row of H9 names only the first)
    assert [((g.pci_bus_id or "")[:8], g.retired_pages_sbe, g.retired_pages_dbe) for g in retired.gpus] == [
        ("00000001", 60, 5),
        ("00000002", 2, 61),
        ("00000003", 0, 0),
        ("00000004", 6, 0),
        ("00000005", 0, 0),
        ("00000006", 20, 45),
        ("00000007", 0, 0),
        ("00000008", 8, 56),
    ]
    assert all(g.name is None for g in retired.gpus)  # the section it printed, nothing guessed


def test_q_cut_short_says_so_instead_of_claiming_eight_gpus() -> None:
    record = record_of(SMI / "gpud-nvidia-smi-q-H100-535.183.01-INVALID-EDITED-truncated.txt")
    assert len(record.gpus) == 1
    assert record.error == (
        "nvidia-smi -q says 8 GPUs are attached but describes 1 (an `-i` selection, or the output was cut short)"
    )
    assert record.gpus[0].clocks_event_reasons == ("gpu_idle",)  # the renamed "Invalid HW ..." keys are ignored


# -- the default table -----------------------------------------------------------------------------


def test_tables_of_every_layout() -> None:
    h100 = parse_nvidia_smi_table(H100_TABLE.read_text())
    assert (h100.driver_version, h100.cuda_version, len(h100.gpus)) == ("550.90.07", "12.4", 8)
    assert all(g.persistence_mode and g.ecc_volatile_uncorrected == 0 and g.processes == () for g in h100.gpus)
    assert (h100.gpus[0].temperature_c, h100.gpus[0].power_draw_w, h100.gpus[0].memory_used_mib) == (27, 72.0, 1)
    geforce = record_of(SMI / "gpud-nvidia-smi-table-GeForce-525.125.06-fan-ERR.txt").gpus[0]  # no final newline
    assert (geforce.name, geforce.compute_mode, geforce.memory_used_mib) == (
        "NVIDIA GeForce ...",  # nvidia-smi cut the name: kept as printed, never completed
        "EXCLUSIVE_PROCESS",
        2021,
    )
    assert geforce.temperature_c == 38 and geforce.processes is None  # "ERR!" fan is no parse failure
    t4g_570 = record_of(SMI / "aws-g5g-T4G-driver570-nvidia-smi.txt")
    t4g_580 = record_of(SMI / "aws-g5g-T4G-driver580-nvidia-smi.txt")  # "+---" separators
    t4 = record_of(SMI / "nvidia-docs-container-toolkit-T4-nvidia-smi.txt")  # the old narrow layout
    assert [r.gpus[0].name for r in (t4g_570, t4g_580, t4)] == ["NVIDIA T4G", "NVIDIA T4G", "Tesla T4"]
    assert t4.driver_version == "535.86.10" and t4.gpus[0].memory_total_mib == 15109


def table_row(name: str, pid: int, kind: str, process: str, mib: int) -> str:
    return f"|    0   N/A  N/A    {pid:>7}    {kind:<4}  {process:<40} {mib:>6}MiB |"


def test_table_processes_rows() -> None:
    # the Processes block of the corpus T4 table with two rows in nvidia-smi's column layout (the corpus
    # has no table with running processes; the rows follow the header's columns)
    text = (SMI / "nvidia-docs-container-toolkit-T4-nvidia-smi.txt").read_text()
    rows = table_row("t4", 675, "G", "/usr/lib/xorg/Xorg", 22) + "\n" + table_row("t4", 5762, "C", "python", 1005)
    edited = text.replace("|  No running processes found                                                 |", rows)
    assert edited != text
    (gpu,) = parse_nvidia_smi_table(edited).gpus
    assert [(p.pid, p.type, p.name, p.used_memory_mib) for p in gpu.processes or ()] == [
        (675, "G", "/usr/lib/xorg/Xorg", 22),
        (5762, "C", "python", 1005),
    ]


# -- the forms agree -----------------------------------------------------------------------------

# what a table carries that does not change between two captures of the same node type
SHARED = ("index", "name", "pci_bus_id", "persistence_mode", "compute_mode", "mig_current", "ecc_current")


def shared(record: GpuRecord, names: tuple[str, ...] = SHARED) -> list[dict[str, Any]]:
    return [{k: v for k, v in g.to_json().items() if k in names} for g in record.gpus]


def test_q_and_table_of_the_same_node_type_agree() -> None:
    # MANIFEST: the 550.90.07 table and the 535.161.08 -q share the bus-id layout (same node type)
    q, table = parse_nvidia_smi_q(H100_Q.read_text()), parse_nvidia_smi_table(H100_TABLE.read_text())
    assert shared(q) == shared(table)
    limits = ("power_limit_w", "memory_total_mib", "ecc_volatile_uncorrected")
    assert shared(q, limits) == shared(table, limits)


def test_table_layouts_of_one_instance_type_agree() -> None:
    names = (*SHARED, "power_limit_w", "memory_total_mib", "ecc_volatile_uncorrected", "performance_state")
    assert shared(record_of(SMI / "aws-g5g-T4G-driver570-nvidia-smi.txt"), names) == shared(
        record_of(SMI / "aws-g5g-T4G-driver580-nvidia-smi.txt"), names
    )


def test_q_text_and_xml_fill_the_same_fields() -> None:
    # no corpus GPU exists as both -q and -q -x: the same fields must come out of both for the same kind
    # of GPU (a datacenter Ampere/Hopper under 535), and survive the record's validation
    q = parse_nvidia_smi_q(H100_Q.read_text())
    xml = parse_nvidia_smi_xml((SMI / "telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535.xml.txt").read_text())
    mig_na = {"remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending", "remap_failure"}

    def filled(r: GpuRecord) -> set[str]:
        return {k for k, v in r.gpus[0].to_json().items() if v is not None}

    # the A100 is in MIG mode: its row remapper reads N/A; and it has no NVSwitch fabric (State N/A, no Status)
    assert filled(q) - filled(xml) == mig_na | {"fabric_status"}
    assert filled(xml) <= filled(q)
    for record in (q, xml, parse_nvidia_smi_table(H100_TABLE.read_text())):
        assert GpuRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_checks_judge_a_pasted_q_like_nvml(tmp_path: Path) -> None:
    """A fixture whose record is the pasted -q: gpu.power and gpu.pcie_link judge it through the CLI."""
    proc = cli("run", "--replay", "fixtures/gpu-power-brake-h100", "--format", "json")
    (host,) = json.loads(proc.stdout)["hosts"].values()
    got = {c["id"]: c["status"] for c in host["checks"]}
    assert got == {
        "gpu.count": "ok",
        "gpu.ecc": "ok",
        "gpu.pcie_link": "ok",
        "gpu.power": "fail",
        "gpu.processes": "ok",
    }
    assert proc.returncode == 2


# -- garbage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not `nvidia-smi -q` output"),
        ("hello\nworld\n", "not `nvidia-smi -q` output"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "not `nvidia-smi -q`"),
    ],
)
def test_garbage_is_a_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_nvidia_smi_output(text)
    with pytest.raises(ValueError, match="not an `nvidia-smi` table"):
        parse_nvidia_smi_table(text)


def test_a_table_cut_inside_a_gpu_row_is_an_error_not_a_gpu() -> None:
    text = H100_TABLE.read_text()
    cut = text[: text.index("00000000:3B:00.0")]
    with pytest.raises(ValueError, match="table line 13: a GPU row with 1 of its 3 columns"):
        parse_nvidia_smi_table(cut)
    with pytest.raises(ValueError, match="ends inside a GPU's rows"):
        parse_nvidia_smi_table(text[: text.index("| N/A   24C")])


_LINES = st.lists(
    st.one_of(
        st.text(max_size=60),
        st.builds(
            lambda indent, key, value: " " * indent + key + " : " + value,
            st.integers(0, 16),
            st.sampled_from(["GPU 00000000:19:00.0", "Product Name", "Current", "Max", "Processes", "Process ID", "x"]),
            st.text(max_size=20),
        ),
        st.sampled_from(
            [
                "GPU 00000000:19:00.0",
                "Driver Version : 535.1",
                "Attached GPUs : 8",
                "    PCI",
                "        GPU Link Info",
                "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |",
                "| N/A   27C    P0             72W /  700W |       1MiB /  81559MiB |      0%      Default |",
                "|=========================================+========================+======================|",
                "| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |",
                "+-----------------------------------------+------------------------+----------------------+",
                "| Processes:                                                                              |",
                "|    0   N/A  N/A    1234    C   python                                     10MiB |",
            ]
        ),
    ),
    max_size=40,
)


@given(_LINES)
@settings(max_examples=300, deadline=None)
def test_readers_take_any_lines(lines: list[str]) -> None:
    text = "\n".join(lines)
    for reader in (parse_nvidia_smi_output, parse_nvidia_smi_q, parse_nvidia_smi_table):
        try:
            record = reader(text)
        except ValueError:
            continue
        assert GpuRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_hostile_input_stays_linear() -> None:
    huge = "    " * 20_000 + "Key" + " " * 200_000 + ": value\n"
    deep = "".join(" " * i + f"K{i} : v\n" for i in range(3000))
    table = "| NVIDIA-SMI 1 Driver Version: 1 CUDA Version: 1 |\n|===|\n" + "|" * 100_000 + "\n"
    start = time.monotonic()
    for text in (huge, deep, table, H100_Q.read_text() * 20):
        with contextlib.suppress(ValueError):
            parse_nvidia_smi_output(text)
    assert time.monotonic() - start < 5.0  # generous: linear takes well under a second
