"""Facts: the kernel log and the NVIDIA driver's XID events in it.

`read_kernel_log` gathers the log (`dmesg`, or `journalctl -k -b` where dmesg is refused);
`parse_xids` is a pure, linear parser of any kernel-log text (dmesg with uptime stamps,
`dmesg --time-format iso`, `dmesg -T`, `journalctl -k`, syslog), giving XID events with the
GPU, the time where the line has one, the pid/name the driver names, a "caused by previous
Xid N" link, and the Fatal/Nonfatal word of the NVLink5 XIDs. `root_cause`, `bursts` and
`Window` hold what gpu.xid judges with: the root XID of a chain, occurrences (a burst of lines
of one XID on one GPU counts once) and the time window (since boot, the previous run, a
duration or a time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from clustercheck import Host, fact
from clustercheck.errors import HostError

# NVIDIA's XID catalog ("Analyzing Xid Errors with the Xid Catalog",
# https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Resolution Bucket
# (Immediate Action)) as NVIDIA encodes it for its own health monitor:
# NVIDIA/NVSentinel:distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv
# @6f8b0fcf (code, mnemonic, immediate action, FATAL/NONFATAL), through XID 161 (Blackwell,
# GB200/GB300: the NVLink5 XIDs 144-150, 154 recovery action, 155-161). FATAL ones fail;
# NONFATAL ones (application faults such as 13, 31, 43, 45, 94) are reported, and escalate
# when they repeat (domain-facts §I.2). XIDs past the catalog (NVIDIA's R620 notes name Xid 185)
# warn as unknown.
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


# NVLink XIDs: a chain that ends in one of them is an NVLink failure, whatever its first XID.
NVLINK_XIDS = frozenset({74, 137, *range(144, 151), 155})

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]{0,40}\): (\d{1,6}),?\s*(.*)"
)
_FELL_OFF_RE = re.compile(r"NVRM: (?:The NVIDIA GPU |GPU at (?:PCI:)?)([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})")
_STAMP_RE = re.compile(r"^\[\s*(\d+\.\d+)\]")
# dmesg --time-format iso ("kern  :warn  : 2025-01-21T02:21:33,498559+00:00 ..."), journalctl -o
# short-iso / short-iso-precise ("2025-01-21T02:21:33+0000 host kernel: ..."); only with a zone
_ISO_RE = re.compile(
    r"(?:^|[\s:])(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[,.](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})(?=\s)"
)
_CAUSED_RE = re.compile(r"caused by previous Xid (\d{1,6})")
_PID_RE = re.compile(r"^(?:pid=(\'[^\']*\'|[^,]*),\s*)?(?:name=(\'[^\']*\'|[^,]*),\s*)?")
_SEVERITY_RE = re.compile(r"\b(Fatal|Nonfatal|Non-fatal)\b")


def iso_epoch(date: str, hh: str, mm: str, ss: str, frac: str | None, zone: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 time with a zone; None when it is not a real time."""
    if zone != "Z":
        zone = zone[:3] + ":" + zone[-2:]
    text = f"{date}T{hh}:{mm}:{ss}" + ("+00:00" if zone == "Z" else zone)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.timestamp() + (float("0." + frac) if frac else 0.0)


def line_times(line: str) -> tuple[float | None, float | None]:
    """(uptime seconds from a `[  123.456]` stamp, epoch seconds from an ISO stamp) of one line."""
    stamp = _STAMP_RE.search(line)
    uptime = float(stamp.group(1)) if stamp else None
    epoch = None
    if uptime is None:
        m = _ISO_RE.search(line[:80])
        if m:
            epoch = iso_epoch(*m.groups())
    return uptime, epoch


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # "0000:5d:00": domain:bus:device as the driver prints it (lower case)
    message: str
    line: int  # 1-based line in the kernel log
    uptime_s: float | None  # seconds since boot, from dmesg's [   123.456789] stamp
    epoch_s: float | None = None  # from an ISO stamp (dmesg --time-format iso, journalctl -o short-iso)
    caused_by: int | None = None  # "... caused by previous Xid N"
    pid: str | None = None
    process: str | None = None
    severity: str | None = None  # "Fatal" / "Nonfatal", as the NVLink5 XIDs (144-150) print it

    @property
    def info(self) -> XidInfo | None:
        return XID_CATALOG.get(self.xid)

    @property
    def fatal(self) -> bool:
        if self.xid == 154:  # the message names the recovery action the driver now wants
            return any(w in self.message for w in ("Reset Required", "Reboot Required", "Drain"))
        if self.severity is not None and self.xid in NVLINK_XIDS:  # the line says which
            return self.severity == "Fatal"
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


def _unquote(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().strip("'")
    return None if not value or value == "<unknown>" else value


def parse_xids(log: str) -> list[XidEvent]:
    """XID events in a kernel log (dmesg, `journalctl -k`, syslog), in order; linear in the text.

    'NVRM: Xid (PCI:0000:5d:00): 79, pid=..., GPU has fallen off the bus.' -> XID 79. Newer
    drivers also log a GPU falling off the bus without an Xid line ("NVRM: The NVIDIA GPU
    0000:b3:00.0 ... has fallen off the bus", NVIDIA/NVSentinel#155, leptonai/gpud#1209):
    that is reported as XID 79 too, once per GPU.
    """
    events: list[XidEvent] = []
    fell_off: list[XidEvent] = []
    lines = log.splitlines()
    for number, line in enumerate(lines, 1):
        m = _XID_RE.search(line)
        if m:
            uptime, epoch = line_times(line)
            rest = m.group(3).strip()
            who = _PID_RE.match(rest)
            pid = process = None
            if who and who.group(0):
                pid, process = _unquote(who.group(1)), _unquote(who.group(2))
                rest = rest[who.end() :]
            # drop any further "pid=..., name=...," newer drivers write before the message
            message = re.sub(r"^(?:(?:pid|name)=(?:'[^']*'|[^,]*),\s*)+", "", rest)
            caused = _CAUSED_RE.search(message)
            severity = _SEVERITY_RE.search(message[:80])
            events.append(
                XidEvent(
                    int(m.group(2)),
                    _short_pci(m.group(1)),
                    message,
                    number,
                    uptime,
                    epoch,
                    int(caused.group(1)) if caused else None,
                    pid,
                    process,
                    ("Nonfatal" if severity.group(1) != "Fatal" else "Fatal") if severity else None,
                )
            )
            continue
        m = _FELL_OFF_RE.search(line)
        if m and "fallen off the bus" in " ".join(lines[number - 1 : number + 2]):
            uptime, epoch = line_times(line)
            message = "GPU has fallen off the bus (no Xid line)"
            fell_off.append(XidEvent(79, _short_pci(m.group(1)), message, number, uptime, epoch))
    seen_79 = {e.pci for e in events if e.xid == 79}
    for event in fell_off:  # once per GPU, and only where no Xid 79 line says it already
        if event.pci not in seen_79:
            seen_79.add(event.pci)
            events.append(event)
    events.sort(key=lambda e: e.line)
    return events


def root_causes(events: list[XidEvent]) -> list[int]:
    """The XID at the end of each event's "caused by previous Xid N" chain (its own XID without one).

    A chain is followed through the latest earlier event of that XID on the same GPU that
    carries a link of its own (at most 8 steps, never round a loop); one pass over the events.
    """
    latest: dict[tuple[str, int], XidEvent] = {}
    roots = []
    for e in events:
        root, seen = e.xid, {e.xid}
        step = e.caused_by
        for _ in range(8):
            if step is None or step in seen:
                break
            root = step
            seen.add(step)
            earlier = latest.get((e.pci, step))
            step = earlier.caused_by if earlier is not None else None
        roots.append(root)
        latest[(e.pci, e.xid)] = e
    return roots


def root_cause(event: XidEvent, events: list[XidEvent]) -> int:
    """The root XID of one event of `events` (see root_causes)."""
    return dict(zip((e.line for e in events), root_causes(events), strict=True)).get(event.line, event.xid)


BURST_GAP_S = 10.0  # lines of one XID on one GPU closer than this are one occurrence


def bursts(events: list[XidEvent]) -> dict[tuple[int, str], int]:
    """Occurrences of each (XID, GPU): a run of lines of that XID on that GPU counts once.

    With times, a new occurrence starts after a gap over BURST_GAP_S; without, after another
    XID on the same GPU came between (XID 13 lines, then the XID 43 of the channel reset, then
    XID 13 again are two occurrences of 13).
    """
    counts: dict[tuple[int, str], int] = {}
    last: dict[tuple[int, str], XidEvent] = {}
    last_on_gpu: dict[str, int] = {}  # the XID last seen on each GPU
    for e in events:
        key = (e.xid, e.pci)
        prev = last.get(key)
        new = prev is None
        if prev is not None:
            t0 = prev.uptime_s if prev.uptime_s is not None else prev.epoch_s
            t1 = e.uptime_s if e.uptime_s is not None else e.epoch_s
            if t0 is not None and t1 is not None and (prev.uptime_s is None) == (e.uptime_s is None):
                new = t1 - t0 > BURST_GAP_S
            else:
                new = last_on_gpu.get(e.pci) != e.xid
        if new:
            counts[key] = counts.get(key, 0) + 1
        last[key] = e
        last_on_gpu[e.pci] = e.xid
    return counts


# -- the time window ------------------------------------------------------------------------------

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_SINCE_ISO_RE = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?(?:[,.](\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)


def parse_since(value: str) -> tuple[str, float | None]:
    """gpu.xid's `since` -> (kind, number): ("boot", None), ("previous", None), ("duration", seconds)
    or ("time", epoch seconds); ValueError naming the accepted forms otherwise.

    A time without a zone is UTC (the node's local zone is not known here).
    """
    text = value.strip()
    if text.lower() in ("boot", "previous"):
        return text.lower(), None
    m = _DURATION_RE.match(text)
    if m:
        seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
        if seconds <= 0:
            raise ValueError(f"since: {value!r} is not a positive duration")
        return "duration", seconds
    m = _SINCE_ISO_RE.match(text)
    if m:
        date, hh, mm, ss, frac, zone = m.groups()
        epoch = iso_epoch(date, hh, mm, ss or "00", frac, zone or "Z")
        if epoch is not None:
            return "time", epoch
    raise ValueError(
        f"since: {value!r} is not boot, previous, a duration (90s, 30m, 2h, 1d) or an ISO time (2025-01-21T02:30:00Z)"
    )


@dataclass(frozen=True)
class Window:
    """Events after these points are in the window; None: no bound of that kind."""

    after_uptime: float | None = None
    after_epoch: float | None = None

    def holds(self, e: XidEvent) -> bool | None:
        """In the window, not, or None when the event's line has no time to place it by."""
        if self.after_uptime is None and self.after_epoch is None:
            return True
        if e.uptime_s is not None and self.after_uptime is not None:
            return e.uptime_s > self.after_uptime
        if e.epoch_s is not None and self.after_epoch is not None:
            return e.epoch_s > self.after_epoch
        return None


def parse_uptime(text: str) -> float | None:
    """/proc/uptime ("86500.12 1234567.89") -> seconds since boot."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s", text + " ")
    return float(m.group(1)) if m else None


def parse_btime(text: str) -> int | None:
    """/proc/stat's `btime N` line -> the boot time in epoch seconds."""
    for line in text.splitlines():
        if line.startswith("btime "):
            value = line.split()[1:2]
            return int(value[0]) if value and value[0].isdigit() else None
    return None


def last_stamp(text: str) -> float | None:
    """The uptime stamp of the log's last stamped line."""
    for line in reversed(text.splitlines()):
        m = _STAMP_RE.search(line)
        if m:
            return float(m.group(1))
    return None


# -- gathering -----------------------------------------------------------------------------------


def read_kernel_log(host: Host) -> tuple[str, str]:
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


@fact
def kernel_log(host: Host) -> tuple[str, str]:
    """The kernel log and its source, read once per run (gpu.xid and the fabric's SXid reader share it)."""
    return read_kernel_log(host)
