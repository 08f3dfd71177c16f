"""GPU to NIC affinity: each GPU's nearest HCA, and whether it sits across the CPU socket.

Reads `nvidia-smi topo -m` (the GPU/NIC relation matrix, the NUMA Affinity column, the NIC
legend) and, for each NIC the legend names, /sys/class/infiniband/<NIC>/device/numa_node.
Parser: clustercheck.facts.nvlink.parse_topo_matrix.
"""

from __future__ import annotations

from clustercheck import Host, Result, check, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts.gpu import gpus
from clustercheck.facts.nvlink import RELATION_ORDER, TopoError, closeness, parse_topo_matrix

from . import _usable


def _nic_numa(host: Host, name: str) -> str | None:
    """The NUMA node sysfs gives an RDMA device ("0", "1"; -1 -> None: the platform does not say)."""
    try:
        text = host.read_optional(f"/sys/class/infiniband/{name}/device/numa_node")
    except HostError:  # not recorded in a fixture, unreadable: sysfs does not say
        return None
    value = (text or "").strip()
    return value if value.isdigit() else None


@check(
    needs=["probe nvml", "command nvidia-smi", "file /sys/class/infiniband/*/device/numa_node"],
    timeout=30,
    action="INVESTIGATE",
)
def affinity(host: Host, *, max_relation: str = "NODE", nics: tuple[str, ...] = ()) -> Result:
    """Every GPU has an RDMA NIC no farther than `max_relation` (default NODE: same CPU socket) on its NUMA node.

    Why: GPUDirect RDMA and NCCL pair each GPU with its nearest NIC; a GPU whose nearest NIC
    is SYS (reached across the inter-socket link, QPI/UPI/xGMI) sends every inter-node byte
    through the other CPU socket: lower bandwidth, higher latency, and no GPUDirect RDMA at
    all on many platforms. It happens when an HCA is missing, dead, or in the wrong slot.

    How: `nvidia-smi topo -m` (tab- or space-separated; NIC legend names NIC0.. as mlx5_0..):
    per GPU the nearest NIC by the legend's order X < NV# < PIX < PXB < PHB < NODE < SYS.
    Warns where it is farther than `max_relation`, or where the GPU's NUMA Affinity differs
    from the NUMA node sysfs gives that NIC (/sys/class/infiniband/<NIC>/device/numa_node).
    `nics` limits the judgement to those NICs (the compute HCAs, not storage or management
    ports). The evidence is the GPU -> NIC -> relation -> NUMA table. No NIC in the matrix:
    skip.

    Fix: put each compute HCA in the PCIe switch or socket of its GPUs (the platform's
    reference layout), replace or re-enable a missing HCA (`ibstat`, `lspci -d 15b3:`), and
    pin jobs with Slurm's GPU/NIC binding (gres.conf `Cores=`, `--gpu-bind`).
    """
    limit = max_relation.strip().upper()
    if limit not in RELATION_ORDER[2:]:
        raise ValueError(f"max_relation: {max_relation!r} is not one of {', '.join(RELATION_ORDER[2:])}")
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    result = host.run("nvidia-smi", "topo", "-m")
    if not result.ok:
        said = (result.stderr or result.stdout).strip()[:200] or "no output"
        raise HostError(host.name, f"cannot tell: `nvidia-smi topo -m` {result.describe()}: {said}")
    try:
        topo = parse_topo_matrix(result.stdout)
    except TopoError as exc:
        raise HostError(host.name, f"cannot tell: `nvidia-smi topo -m`: {exc}") from None
    missing = [d for d in topo.gpus if d in topo.cut_rows]
    if missing:
        raise HostError(host.name, f"cannot tell: `nvidia-smi topo -m` has no row for {', '.join(missing)}")
    columns = topo.nics
    if nics:
        columns = [c for c in columns if topo.nic_names.get(c, c) in nics or c in nics]
    if not columns:
        which = f" among {', '.join(nics)}" if nics else ""
        return skip(
            f"no NIC{which} in `nvidia-smi topo -m`: no GPU-NIC affinity to judge",
            data={"no_nic": True},
            evidence=[f"topo -m columns: {' '.join(topo.devices)}"],
        )
    numa_of_nic = {c: _nic_numa(host, topo.nic_names[c]) for c in columns if c in topo.nic_names}
    problems: list[str] = []
    evidence: list[str] = ["GPU -> nearest NIC (relation) -> NUMA of GPU / NIC"]
    table: list[dict[str, object]] = []
    for gpu in topo.gpus:
        row = topo.relation.get(gpu, {})
        ranked = sorted(columns, key=lambda c: (closeness(row.get(c, "?")), columns.index(c)))
        best = ranked[0]
        relation = row.get(best, "?")
        gpu_numa = topo.numa_affinity.get(gpu)
        nic_numa = numa_of_nic.get(best)
        name = topo.nic_names.get(best, best)
        label = f"{best} ({name})" if name != best else best
        evidence.append(f"{gpu} -> {label} ({relation}) -> NUMA {gpu_numa or '?'} / {nic_numa or '?'}")
        table.append({"gpu": gpu, "nic": name, "relation": relation, "gpu_numa": gpu_numa, "nic_numa": nic_numa})
        if closeness(relation) > RELATION_ORDER.index(limit):
            across = " (across the CPU socket)" if relation == "SYS" else ""
            problems.append(f"{gpu}: nearest NIC {label} is {relation}{across}, expected {limit} or nearer")
        elif gpu_numa and nic_numa and gpu_numa.isdigit() and gpu_numa != nic_numa:
            problems.append(f"{gpu} is on NUMA node {gpu_numa} but its nearest NIC {label} on node {nic_numa}")
    data = {"pairs": table, "problems": problems}
    if problems:
        return warn(
            "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else ""),
            remedy="Check that every compute HCA is present and up (`ibstat`, `lspci -d 15b3:`); put each HCA on the "
            "PCIe switch or socket of its GPUs; bind jobs to local NICs (gres.conf Cores=, NCCL_IB_HCA).",
            data=data,
            evidence=evidence,
        )
    relations = sorted({str(p["relation"]) for p in table}, key=closeness)
    return ok(
        f"{len(table)} GPUs each with a NIC at {' / '.join(relations)} (no GPU's nearest NIC is farther than {limit})",
        data=data,
        evidence=evidence,
    )
