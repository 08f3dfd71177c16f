"""The PCIe tree as `lspci -vvv` prints it, PCI Access Control Services (ACS), and the IOMMU mode.

Sources (pure parsers, linear in their input; real outputs in tests/corpus/pcie/):

- `lspci -vvv`: one block per function, `BB:DD.F CLASS: VENDOR DEVICE ...` (with `DDDD:` in front
  when there are several PCI domains or `-D` was given), then tab-indented detail lines. Kept per
  block: the class, `NUMA node: N`, `Bus: primary=, secondary=, subordinate=` (bridges), the port
  type from `Express (v2) Downstream Port` / `Root Port` / `Upstream Port`, and the ACS control
  word `ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-`.
  Without root, lspci prints `Capabilities: <access denied>` and no ACS at all: that is "cannot tell".
- /proc/cmdline (`iommu=pt`, `intel_iommu=on`, `amd_iommu=...`, `iommu.passthrough=1`),
  /sys/class/iommu (one entry per active IOMMU unit: dmar0, ivhd0 ...) and each device's
  /sys/bus/pci/devices/<BDF>/iommu_group/type (`identity` = passthrough, `DMA`/`DMA-FQ` = translated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BDF_RE = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7]) ")
_CLASS_CODE_RE = re.compile(r" \[[0-9a-fA-F]{4}\]$")
_BUS_RE = re.compile(r"Bus: primary=([0-9a-fA-F]{2}), secondary=([0-9a-fA-F]{2}), subordinate=([0-9a-fA-F]{2})")
_PORT_RE = re.compile(r"Express \(v\d\) (Root Port|Downstream Port|Upstream Port|Endpoint|Legacy Endpoint)")
_ACSCTL_RE = re.compile(r"ACSCtl:\s*(.*)$")
_FLAG_RE = re.compile(r"([A-Za-z]+)([+-])")

#: The ACS controls that redirect or block peer-to-peer requests (Linux drivers/pci/p2pdma.c
#: treats a bridge with ACS Request/Completion Redirect or Egress Control on as a redirecting one:
#: peer traffic goes up to the root complex instead of across the switch; domain-facts §I.4).
REDIRECTING = ("ReqRedir", "CmpltRedir", "EgressCtrl")


def parse_acsctl(line: str) -> dict[str, bool] | None:
    """`ACSCtl: SrcValid+ TransBlk- ReqRedir+ ...` -> {"SrcValid": True, "TransBlk": False, ...}; None if not one."""
    m = _ACSCTL_RE.search(line)
    return {name: sign == "+" for name, sign in _FLAG_RE.findall(m.group(1))} if m else None


def redirecting(flags: dict[str, bool] | None) -> list[str]:
    """The ACS controls among `flags` that send peer traffic up to the root complex (REDIRECTING)."""
    return [name for name in REDIRECTING if flags and flags.get(name)]


@dataclass
class PciFunction:
    bdf: str  # "0000:17:01.0", lower case, domain always present
    kind: str  # class text: "PCI bridge", "3D controller", "Infiniband controller", ...
    description: str  # the rest of the header line: vendor and device
    line: int  # of the header, 1-based
    numa_node: int | None = None
    bus: tuple[int, int, int] | None = None  # primary, secondary, subordinate (bridges)
    port: str | None = None  # Root Port, Downstream Port, Upstream Port, Endpoint
    acs: dict[str, bool] | None = None  # the ACSCtl flags; None: no ACS capability shown
    access_denied: bool = False  # lspci could not read the capabilities (not root)

    @property
    def domain(self) -> int:
        return int(self.bdf.split(":")[0], 16)

    @property
    def bus_number(self) -> int:
        return int(self.bdf.split(":")[1], 16)

    @property
    def is_gpu(self) -> bool:
        """An NVIDIA display/3D function (the GPU itself; not an NVSwitch, class Bridge, nor audio)."""
        return "NVIDIA" in self.description and self.kind in ("3D controller", "VGA compatible controller")

    @property
    def is_hca(self) -> bool:
        """An RDMA-capable NIC: a Mellanox/NVIDIA ConnectX or BlueField, InfiniBand or Ethernet."""
        return self.kind in ("Infiniband controller", "Ethernet controller") and (
            "Mellanox" in self.description or "ConnectX" in self.description
        )

    @property
    def redirecting(self) -> list[str]:
        return redirecting(self.acs)


@dataclass
class PciTree:
    functions: list[PciFunction] = field(default_factory=list)
    stray: int = 0  # lines that belong to no function block

    def above(self, device: PciFunction) -> list[PciFunction]:
        """The bridges between `device` and its root port, nearest first (by bus number ranges)."""
        by_secondary = {(f.domain, f.bus[1]): f for f in self.functions if f.bus is not None}
        chain: list[PciFunction] = []
        bus = device.bus_number
        for _ in range(256):  # a bus is at most 256 hops from its root; a looping input stops here
            parent = by_secondary.get((device.domain, bus))
            if parent is None or parent in chain:
                break
            chain.append(parent)
            bus = parent.bus_number
        return chain


def parse_lspci(text: str) -> PciTree:
    """`lspci -vvv` (with or without -D) -> its functions in order; ValueError-free on any text."""
    tree = PciTree()
    current: PciFunction | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        if raw[0] not in " \t":
            m = _BDF_RE.match(raw)
            kind, colon, rest = raw[m.end() :].partition(":") if m else ("", "", "")
            if m is None or not colon or not kind.strip():
                current = None
                tree.stray += 1
                continue
            domain = m.group(1) or "0000"
            bdf = f"{int(domain, 16):04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()
            kind = _CLASS_CODE_RE.sub("", kind.strip())  # `3D controller [0302]` (lspci -nn)
            described = rest.split(" (prog-if ", 1)[0].strip()
            current = PciFunction(bdf, kind, described[:200], number)
            tree.functions.append(current)
            continue
        if current is None:
            tree.stray += 1
            continue
        line = raw.strip()
        if line.startswith("NUMA node:"):
            value = line.split(":", 1)[1].strip()
            current.numa_node = int(value) if value.lstrip("-").isdigit() else None
        elif line.startswith("Bus: primary="):
            b = _BUS_RE.search(line)
            if b:
                current.bus = (int(b.group(1), 16), int(b.group(2), 16), int(b.group(3), 16))
        elif line.startswith("Capabilities:"):
            if "<access denied>" in line:
                current.access_denied = True
            p = _PORT_RE.search(line)
            if p:
                current.port = p.group(1)
        elif line.startswith("ACSCtl:"):
            current.acs = parse_acsctl(line)
    return tree


# -- the IOMMU ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IommuCmdline:
    """What the kernel command line asks of the IOMMU (each None when not said)."""

    passthrough: bool | None  # iommu=pt / iommu.passthrough=1 / amd_iommu=pt -> True; iommu=nopt, =0 -> False
    intel: str | None  # the value of intel_iommu= ("on", "off", "sm_on" ...)
    amd: str | None  # the value of amd_iommu=
    off: bool  # iommu=off
    words: tuple[str, ...]  # the IOMMU words as written, for evidence


def parse_cmdline(text: str) -> IommuCmdline:
    """/proc/cmdline -> the IOMMU settings on it; the last of repeated words wins, as in the kernel."""
    passthrough: bool | None = None
    intel = amd = None
    off = False
    words: list[str] = []
    for word in text.split():
        key, _, value = word.partition("=")
        if key not in ("iommu", "iommu.passthrough", "intel_iommu", "amd_iommu"):
            continue
        words.append(word[:80])
        values = value.split(",")
        if key == "iommu":
            if "pt" in values:
                passthrough = True
            if "nopt" in values:
                passthrough = False
            if "off" in values:
                off = True
        elif key == "iommu.passthrough":
            passthrough = value in ("1", "y", "Y", "on")
        elif key == "intel_iommu":
            intel = value
        elif key == "amd_iommu":
            amd = value
            if "pt" in values:
                passthrough = True
    return IommuCmdline(passthrough, intel, amd, off, tuple(words))
