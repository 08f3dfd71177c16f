"""Facts: the text forms of nvidia-smi admins paste, read into the `nvml` probe's GPU record.

- `parse_nvidia_smi_q`: `nvidia-smi -q` (also `-a`, and `-q -d SECTION` subsets), the indented
  "Key : value" tree, every driver layout from 410 to 560 in the corpus (the key column's width
  does not matter).
- `parse_nvidia_smi_table`: the default `nvidia-smi` table (the narrow <= 525 layout, the wide
  530+ one, 580's "+---" separators), GPU rows and the Processes rows.
- `parse_nvidia_smi_output`: whichever of those (or `-q -x` XML) the text is.

All three are pure, linear in the text, and give the same `GpuRecord` the NVML probe and
`nvidia-smi -q -x` give (probes/nvml.py): a field the form does not carry is None (a table has
no VBIOS), never a guess. Garbage is a ValueError saying what was expected, never a record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustercheck.probes.nvml import (
    CLOCK_REASONS,
    NOT_VALUES,
    Gpu,
    GpuProcess,
    GpuRecord,
    parse_nvidia_smi_xml,
    smi_compute_mode,
    smi_flag,
    smi_int,
    smi_watts,
)

_NOT_VALUES = {"", "ERR!", "[ERR!]", *NOT_VALUES}
MAX_LINE = 4096  # a longer line is no nvidia-smi line: cut before matching


@dataclass
class _Node:
    key: str
    value: str | None
    indent: int
    children: list[_Node] = field(default_factory=list)

    def find(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for key in path:
            if node is None:
                return None
            node = next((c for c in node.children if c.key == key), None)
        return node

    def text(self, *path: str) -> str | None:
        node = self.find(*path)
        if node is None or node.value is None:
            return None
        value = node.value.strip()
        return None if value in _NOT_VALUES else value

    def walk(self) -> list[_Node]:
        out, stack = [], list(reversed(self.children))
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children))
        return out


_KV_RE = re.compile(r"^(\S(?:.*?\S)?)\s+:(?:\s(.*))?$")
_GPU_HEAD_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")


def _tree(text: str) -> _Node:
    root = _Node("", None, -1)
    stack = [root]
    for raw in text.splitlines():
        line = raw[:MAX_LINE].expandtabs(4).rstrip()
        body = line.lstrip(" ")
        if not body or body.startswith("="):
            continue
        indent = len(line) - len(body)
        m = _KV_RE.match(body)
        key, value = (m.group(1), m.group(2) or "") if m else (body, None)
        while len(stack) > 1 and stack[-1].indent >= indent:
            stack.pop()
        node = _Node(key, value, indent)
        stack[-1].children.append(node)
        stack.append(node)
    return root


# -q's clock event reason names -> the record's (nvidia-smi XML's) names
_Q_REASONS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Display Clock Setting": "display_clocks_setting",
}


def _q_reasons(gpu: _Node) -> tuple[str, ...] | None:
    block = gpu.find("Clocks Event Reasons") or gpu.find("Clocks Throttle Reasons")  # before 535
    if block is None:
        return None
    states = {_Q_REASONS[n.key]: (n.value or "").strip() for n in block.walk() if n.key in _Q_REASONS}
    if not states or all(s in _NOT_VALUES for s in states.values()):
        return None
    return tuple(name for name in CLOCK_REASONS.values() if states.get(name) == "Active")


def _q_uncorrected(scope: _Node | None) -> int | None:
    """Uncorrectable ECC errors of `Volatile` or `Aggregate`, as the XML reader sums them."""
    if scope is None:
        return None
    counts = [smi_int(c.text()) for c in scope.children if "uncorrectable" in c.key.lower()]
    if not counts:
        counts = [smi_int(scope.text("Double Bit", "Total"))]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _q_processes(gpu: _Node) -> tuple[GpuProcess, ...] | None:
    block = gpu.find("Processes")
    if block is None:
        return None
    if not block.children:  # "Processes : None" (or N/A)
        return () if (block.value or "").strip() == "None" else None
    found = []
    for entry in block.children:
        if entry.key != "Process ID":
            continue
        pid = smi_int(entry.text())
        if pid is not None:
            used = smi_int(entry.text("Used GPU Memory"))
            found.append(GpuProcess(pid, entry.text("Name"), used, entry.text("Type")))
    return tuple(sorted(found, key=lambda p: p.pid))


def _q_fabric(gpu: _Node) -> Gpu:
    """The `Fabric` block (535 and later) as the XML reader takes <fabric>, in a Gpu of its fields: State
    (N/A kept: asked, no fabric), Status, CliqueId, ClusterUUID, the Health Summary where printed."""
    block = gpu.find("Fabric")
    state = block.find("State") if block is not None else None
    if block is None or state is None:
        return Gpu(index=0)
    raw = (state.value or "").strip()
    return Gpu(
        index=0,
        fabric_state=raw if raw and raw not in _NOT_VALUES else ("N/A" if raw else None),
        fabric_status=block.text("Status"),
        fabric_clique_id=smi_int(block.text("CliqueId")),
        fabric_cluster_uuid=block.text("ClusterUUID"),
        fabric_health=block.text("Health", "Summary"),
    )


def _q_gpu(index: int, bus_id: str, gpu: _Node) -> Gpu:
    link = gpu.find("PCI", "GPU Link Info")
    gen = link.find("PCIe Generation") if link else None
    width = link.find("Link Width") if link else None
    errors = gpu.find("ECC Errors")
    retired = gpu.find("Retired Pages")
    remap = gpu.find("Remapped Rows")
    power = gpu.find("GPU Power Readings") or gpu.find("Power Readings")
    pending = None
    if retired is not None:
        pending = retired.text("Pending Page Blacklist") or retired.text("Pending Page Retirement")

    fabric = _q_fabric(gpu)

    def at(node: _Node | None, *path: str) -> str | None:
        return node.text(*path) if node is not None else None

    return Gpu(
        index=index,
        name=gpu.text("Product Name"),
        uuid=gpu.text("GPU UUID"),
        pci_bus_id=(gpu.text("PCI", "Bus Id") or bus_id).upper(),
        architecture=gpu.text("Product Architecture"),
        persistence_mode=smi_flag(gpu.text("Persistence Mode"), "Enabled", "Disabled"),
        compute_mode=smi_compute_mode(gpu.text("Compute Mode")),
        mig_current=smi_flag(gpu.text("MIG Mode", "Current"), "Enabled", "Disabled"),
        mig_pending=smi_flag(gpu.text("MIG Mode", "Pending"), "Enabled", "Disabled"),
        ecc_current=smi_flag(gpu.text("ECC Mode", "Current"), "Enabled", "Disabled"),
        ecc_pending=smi_flag(gpu.text("ECC Mode", "Pending"), "Enabled", "Disabled"),
        ecc_volatile_uncorrected=_q_uncorrected(errors.find("Volatile") if errors else None),
        ecc_aggregate_uncorrected=_q_uncorrected(errors.find("Aggregate") if errors else None),
        retired_pages_sbe=smi_int(at(retired, "Single Bit ECC")),
        retired_pages_dbe=smi_int(at(retired, "Double Bit ECC")),
        retired_pages_pending=smi_flag(pending, "Yes", "No"),
        remapped_rows_correctable=smi_int(at(remap, "Correctable Error")),
        remapped_rows_uncorrectable=smi_int(at(remap, "Uncorrectable Error")),
        remap_pending=smi_flag(at(remap, "Pending"), "Yes", "No"),
        remap_failure=smi_flag(at(remap, "Remapping Failure Occurred"), "Yes", "No"),
        pcie_gen_current=smi_int(at(gen, "Current")),
        pcie_gen_max=smi_int(at(gen, "Max")),
        pcie_width_current=smi_int(at(width, "Current")),
        pcie_width_max=smi_int(at(width, "Max")),
        clocks_event_reasons=_q_reasons(gpu),
        temperature_c=smi_int(gpu.text("Temperature", "GPU Current Temp")),
        vbios_version=gpu.text("VBIOS Version"),
        inforom_image=gpu.text("Inforom Version", "Image Version"),
        pcie_gen_device_max=smi_int(at(gen, "Device Max")),
        pcie_gen_host_max=smi_int(at(gen, "Host Max")),
        performance_state=gpu.text("Performance State"),
        power_draw_w=smi_watts(at(power, "Power Draw")),
        power_limit_w=smi_watts(at(power, "Current Power Limit") or at(power, "Enforced Power Limit")),
        power_limit_default_w=smi_watts(at(power, "Default Power Limit")),
        power_limit_min_w=smi_watts(at(power, "Min Power Limit")),
        power_limit_max_w=smi_watts(at(power, "Max Power Limit")),
        clocks_app_graphics_mhz=smi_int(gpu.text("Applications Clocks", "Graphics")),
        clocks_app_memory_mhz=smi_int(gpu.text("Applications Clocks", "Memory")),
        clocks_default_app_graphics_mhz=smi_int(gpu.text("Default Applications Clocks", "Graphics")),
        clocks_default_app_memory_mhz=smi_int(gpu.text("Default Applications Clocks", "Memory")),
        clocks_max_graphics_mhz=smi_int(gpu.text("Max Clocks", "Graphics")),
        clocks_max_memory_mhz=smi_int(gpu.text("Max Clocks", "Memory")),
        memory_used_mib=smi_int(gpu.text("FB Memory Usage", "Used")),
        memory_total_mib=smi_int(gpu.text("FB Memory Usage", "Total")),
        processes=_q_processes(gpu),
        fabric_state=fabric.fabric_state,
        fabric_status=fabric.fabric_status,
        fabric_clique_id=fabric.fabric_clique_id,
        fabric_cluster_uuid=fabric.fabric_cluster_uuid,
        fabric_health=fabric.fabric_health,
    )


def parse_nvidia_smi_q(text: str) -> GpuRecord:
    """`nvidia-smi -q` text -> the record; ValueError when the text is no `nvidia-smi -q` output.

    A `-q` that lists fewer GPUs than its "Attached GPUs" line (an `-i` selection, or a paste
    cut short) gives the GPUs it has and an `error` saying so: the record never claims GPUs
    the text does not describe.
    """
    root = _tree(text)
    blocks = [(n, m.group(1)) for n in root.children if n.value is None and (m := _GPU_HEAD_RE.match(n.key))]
    driver = root.text("Driver Version")
    if not blocks and driver is None:
        raise ValueError(
            "not `nvidia-smi -q` output: no 'Driver Version : ...' line and no 'GPU 00000000:18:00.0' block"
        )
    gpus = tuple(_q_gpu(i, bus, node) for i, (node, bus) in enumerate(blocks))
    attached = smi_int(root.text("Attached GPUs"))
    error = None
    if attached is not None and attached != len(gpus):
        error = (
            f"nvidia-smi -q says {attached} GPUs are attached but describes {len(gpus)} "
            "(an `-i` selection, or the output was cut short)"
        )
    return GpuRecord(gpus, driver, root.text("CUDA Version"), error, "nvidia-smi -q")


# -- the default table ---------------------------------------------------------------------------

_HEADER_RE = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_ROW1_RE = re.compile(r"^\s*(\d{1,3})\s+(.*?)\s+(On|Off)\s*$")
_BUS_RE = re.compile(r"^\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(\S+)\s*$")
_ROW2_RE = re.compile(r"^\s*(\S+)\s+(\S+)\s+(P\d{1,2}|\S+)\s+(\S+)\s*/\s*(\S+)\s*$")
_MEMORY_RE = re.compile(r"^\s*(\d{1,9})MiB\s*/\s*(\d{1,9})MiB\s*$")
_UTIL_RE = re.compile(r"^\s*(\S+)\s+(.+?)\s*$")
_PROC_RE = re.compile(r"^\|\s+(\d{1,3})\s+(?:(\S+)\s+(\S+)\s+)?(\d{1,10})\s+(C\+G|C|G)\s+(.*?)\s+(\d{1,9})MiB\s*\|$")
_TABLE_MODES = {"Default": "DEFAULT", "E. Process": "EXCLUSIVE_PROCESS", "E. Thread": "EXCLUSIVE_THREAD"}


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def _table_temp(text: str) -> int | None:
    m = re.match(r"^(\d{1,3})C$", text)
    return int(m.group(1)) if m else None


def _table_watts(text: str) -> float | None:
    m = re.match(r"^(\d{1,6}(?:\.\d{1,3})?)W$", text)
    return float(m.group(1)) if m else None


def parse_nvidia_smi_table(text: str) -> GpuRecord:
    """The default `nvidia-smi` table -> the record; ValueError when the text is no such table.

    What the table carries: index, name (nvidia-smi cuts long names to "..."), persistence
    mode, bus id, volatile uncorrectable ECC count (a number only where ECC is on, so
    `ecc_current` is True there and unknown at "N/A"), temperature, performance state, power
    cap (the enforced limit), memory used/total, compute mode, MIG mode, and the processes.
    "ERR!" (NVML could not read the field) is None, like "N/A".
    """
    lines = [line[:MAX_LINE].rstrip() for line in text.splitlines()]
    header = next((m for line in lines if (m := _HEADER_RE.search(line))), None)
    if header is None:
        raise ValueError("not an `nvidia-smi` table: no '| NVIDIA-SMI ... Driver Version: ... CUDA Version: ...' line")
    rows: list[list[list[str]]] = [[]]  # per GPU, the cells of its lines
    processes: dict[int, list[GpuProcess]] = {}
    phase = "head"  # head -> gpus -> other (a MIG devices table, blank lines) -> processes
    procs_seen = False
    for number, line in enumerate(lines, 1):
        if "Processes:" in line:
            phase, procs_seen = "processes-head", True
        elif "MIG devices:" in line:
            phase = "other"
        elif line.startswith("|==="):
            phase = {"head": "gpus", "processes-head": "processes"}.get(phase, phase)
        elif phase == "gpus":
            if line.startswith("+"):
                rows.append([])  # a separator: the next GPU
            elif line.startswith("|"):
                cells = _cells(line)
                if len(cells) != 3:
                    raise ValueError(
                        f"`nvidia-smi` table line {number}: a GPU row with {len(cells)} of its 3 columns (cut short?)"
                    )
                rows[-1].append(cells)
            else:
                phase = "other"
        elif phase == "processes":
            m = _PROC_RE.match(line)
            if m:
                gpu_index, _gi, _ci, pid, kind, name, used = m.groups()
                processes.setdefault(int(gpu_index), []).append(GpuProcess(int(pid), name or None, int(used), kind))
    if phase == "gpus" and rows[-1]:
        raise ValueError("`nvidia-smi` table ends inside a GPU's rows, without its closing line (cut short?)")
    gpus = []
    for n, block in enumerate(b for b in rows if b):
        if len(block) < 2:
            raise ValueError(f"`nvidia-smi` table: GPU row {n + 1} has {len(block)} line, not 2 or 3 (cut short?)")
        first = _ROW1_RE.match(block[0][0])
        bus = _BUS_RE.match(block[0][1])
        if first is None or bus is None:
            raise ValueError(f"`nvidia-smi` table: GPU row {n + 1} is not 'index name persistence | bus-id ...'")
        index, name, persistence = first.groups()
        ecc = block[0][2].strip()
        second = _ROW2_RE.match(block[1][0]) if len(block) > 1 else None
        memory = _MEMORY_RE.match(block[1][1]) if len(block) > 1 else None
        util = _UTIL_RE.match(block[1][2]) if len(block) > 1 else None
        mig = block[2][2].strip() if len(block) > 2 else ""
        mode = util.group(2) if util else None
        gpus.append(
            Gpu(
                index=int(index),
                name=name.strip() or None,
                pci_bus_id=bus.group(1).upper(),
                persistence_mode=persistence == "On",
                compute_mode=(
                    _TABLE_MODES.get(mode, smi_compute_mode(mode)) if mode and mode not in _NOT_VALUES else None
                ),
                mig_current=smi_flag(mig, "Enabled", "Disabled"),
                ecc_current=True if ecc.isdigit() else None,
                ecc_volatile_uncorrected=int(ecc) if ecc.isdigit() else None,
                temperature_c=_table_temp(second.group(2)) if second else None,
                performance_state=second.group(3) if second and second.group(3).startswith("P") else None,
                power_draw_w=_table_watts(second.group(4)) if second else None,
                power_limit_w=_table_watts(second.group(5)) if second else None,
                memory_used_mib=int(memory.group(1)) if memory else None,
                memory_total_mib=int(memory.group(2)) if memory else None,
                processes=tuple(sorted(processes.get(int(index), []), key=lambda p: p.pid)) if procs_seen else None,
            )
        )
    return GpuRecord(tuple(gpus), header.group(2), header.group(3), None, "nvidia-smi table")


def parse_nvidia_smi_output(text: str) -> GpuRecord:
    """Any of `nvidia-smi -q -x`, `nvidia-smi -q` or the default `nvidia-smi` table -> the record."""
    head = text.lstrip()[:2000]
    if head.startswith("<?xml") or "<nvidia_smi_log" in head:
        return parse_nvidia_smi_xml(text)
    if _HEADER_RE.search(head):
        return parse_nvidia_smi_table(text)
    return parse_nvidia_smi_q(text)
