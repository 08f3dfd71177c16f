"""PCIe: Access Control Services (ACS) on the bridges above GPUs and HCAs, and the IOMMU mode.

Reads `lspci -vvv` (as root: without it lspci hides the ACS capability), /sys/class/iommu,
/proc/cmdline and each GPU's /sys/bus/pci/devices/<BDF>/iommu_group/type. Parsers:
clustercheck.facts.pci. Nothing here writes a PCI register (the remedy says how).
"""

from __future__ import annotations

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts.pci import PciFunction, parse_cmdline, parse_lspci

_SWITCH_PORTS = ("Downstream Port", "Upstream Port")


def _iommu(host: Host, targets: list[PciFunction], evidence: list[str]) -> str | None:
    """A warning when an IOMMU translates the GPUs' DMA (not passthrough); None when it does not."""
    listing = host.run("ls", "-1", "/sys/class/iommu")
    units = listing.stdout.split() if listing.ok else []
    if not units:
        evidence.append("IOMMU: no unit under /sys/class/iommu (off): peer DMA is not translated")
        return None
    cmdline = parse_cmdline(host.read("/proc/cmdline"))
    evidence.append(
        f"IOMMU: {len(units)} units ({', '.join(units[:4])}); "
        f"/proc/cmdline: {' '.join(cmdline.words) or 'no iommu word'}"
    )
    kinds: dict[str, str] = {}
    for device in targets:
        text = host.read_optional(f"/sys/bus/pci/devices/{device.bdf}/iommu_group/type")
        if text is not None:
            kinds[device.bdf] = text.strip()
    translated = sorted(bdf for bdf, kind in kinds.items() if kind.upper().startswith("DMA"))
    evidence += [f"{bdf}: iommu_group type {kind}" for bdf, kind in sorted(kinds.items())]
    if translated or (not kinds and cmdline.passthrough is not True):
        which = ", ".join(translated[:4]) if translated else "the GPUs and HCAs (no group type readable)"
        return (
            f"the IOMMU translates DMA for {which} (not passthrough): GPU peer-to-peer and GPUDirect RDMA go "
            "through IOMMU translation or fail"
        )
    return None


@check(
    needs=["command lspci", "command ls", "file /proc/cmdline", "file /sys/bus/pci/devices/*/iommu_group/type"],
    timeout=30,
    action="FIX_CONFIG",
)
def acs(host: Host, *, root_ports: str = "warn") -> Result:
    """No PCIe switch above a GPU or HCA redirects peer traffic (ACS), and the IOMMU is off or in passthrough.

    Why: with ACS Request/Completion Redirect (or Egress Control) on a PCIe switch port,
    every peer-to-peer transfer between the GPUs and NICs under that switch is sent up to the
    CPU's root complex instead of across the switch: NCCL P2P and GPUDirect RDMA slow down,
    hang or fail ("NET/IB : Got completion with error", NVIDIA/nccl#304, #523, #2079). An
    IOMMU that translates DMA breaks the same paths (NVIDIA recommends iommu=pt). No common
    node checker looks at this.

    How: `lspci -vvv` gives every function's ACSCtl flags and each bridge's bus range; for
    each GPU (NVIDIA 3D/VGA controller) and Mellanox/ConnectX HCA, the bridges above it up to
    the root port. A switch port (Downstream/Upstream Port) with ReqRedir+, CmpltRedir+ or
    EgressCtrl+ fails (Linux's p2pdma treats exactly these as redirecting, domain-facts §I.4;
    SrcValid+ alone does not redirect); a root port with them warns (`root_ports: warn`;
    `ignore` leaves root ports out: traffic between root ports passes the root complex
    anyway; `fail` judges them like switch ports). IOMMU: units under /sys/class/iommu mean it is on;
    then the GPUs' iommu_group type `DMA`/`DMA-FQ` (translated) warns, `identity` (passthrough)
    is fine. lspci without root ("<access denied>") cannot tell. No GPU or HCA: skip.

    Fix: disable ACS on the switch ports at every boot (`setpci -s BDF ECAP_ACS+0x6.w=0000`
    for each port named, from a systemd unit or the site's boot script; or the BIOS's ACS
    setting; or Linux's `pci=disable_acs_redir=BDF;BDF` boot parameter); boot with `iommu=pt`
    (and `intel_iommu=on` or `amd_iommu=on` only where VMs need it). In a VM with passthrough
    GPUs, ACS is the hypervisor's business: ask the provider.
    """
    mode = root_ports.strip().lower()
    if mode not in ("warn", "fail", "ignore"):
        raise ValueError(f"root_ports: {root_ports!r} is not one of warn, fail, ignore")
    result = host.run("lspci", "-vvv")
    if not result.ok:
        hint = " (pciutils is not installed)" if result.exit_code == 127 else ""
        said = (result.stderr or result.stdout).strip()[:200] or "no output"
        raise HostError(host.name, f"cannot tell: `lspci -vvv` {result.describe()}{hint}: {said}")
    tree = parse_lspci(result.stdout)
    targets = [f for f in tree.functions if f.is_gpu or f.is_hca]
    if not targets:
        return skip(
            f"no GPU or RDMA HCA among the {len(tree.functions)} PCI functions: ACS does not matter here",
            data={"hardware_absent": True},
        )
    evidence = [f"`lspci -vvv`: {len(tree.functions)} functions, {len(targets)} GPUs/HCAs"]
    failures: list[str] = []
    warnings: list[str] = []
    blind: list[str] = []
    judged: dict[str, PciFunction] = {}
    for device in targets:
        chain = tree.above(device)
        kind = "GPU" if device.is_gpu else "HCA"
        evidence.append(
            f"{kind} {device.bdf}: "
            + (
                " <- ".join(f"{b.bdf} ({b.port or 'bridge'}, ACS {_flags(b)})" for b in chain)
                or "no bridge above it (root bus)"
            )
        )
        for bridge in chain:
            if bridge.bdf in judged:
                continue
            judged[bridge.bdf] = bridge
            if bridge.access_denied and bridge.acs is None:
                blind.append(bridge.bdf)
                continue
            on = bridge.redirecting
            if not on:
                continue
            said = f"{bridge.bdf} ({bridge.port or 'bridge'}, {bridge.description[:60]}) above {kind} {device.bdf}: "
            said += " ".join(f"{name}+" for name in on)
            if bridge.port in _SWITCH_PORTS or (bridge.port == "Root Port" and mode == "fail"):
                failures.append(said)
            elif mode == "warn":
                warnings.append(said)
    if blind and not failures:
        raise HostError(
            host.name,
            f"cannot tell: lspci could not read the capabilities of {len(blind)} bridges above GPUs/HCAs "
            f"({', '.join(blind[:4])}): <access denied>; run clustercheck as root",
        )
    iommu = _iommu(host, targets, evidence)
    if iommu:
        warnings.append(iommu)
    data = {"acs_redirect": failures, "warnings": warnings, "bridges_judged": len(judged)}
    remedy = (
        "Disable ACS on the ports named at every boot: `setpci -s BDF ECAP_ACS+0x6.w=0000` (a systemd unit or "
        "the BIOS's ACS setting), or the kernel parameter `pci=disable_acs_redir=BDF;BDF`; boot with `iommu=pt`. "
        "Then check again (P2P: `nvidia-smi topo -p2p r`)."
    )
    if failures:
        return fail(
            f"ACS redirects peer traffic on {len(failures)} PCIe switch port(s): " + "; ".join(failures[:4]),
            remedy=remedy,
            data=data,
            evidence=evidence,
        )
    if warnings:
        return warn("; ".join(warnings[:4]), remedy=remedy, data=data, evidence=evidence)
    return ok(
        f"no ACS redirect on the {len(judged)} bridges above {len(targets)} GPUs/HCAs; IOMMU off or passthrough",
        data=data,
        evidence=evidence,
    )


def _flags(bridge: PciFunction) -> str:
    if bridge.acs is None:
        return "n/a"
    on = [f"{name}+" for name, value in bridge.acs.items() if value]
    return " ".join(on) if on else "all off"
