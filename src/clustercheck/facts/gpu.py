"""The node's GPUs: the `nvml` probe's record (NVML in-process, or `nvidia-smi -q -x` over SSH), validated."""

from __future__ import annotations

from clustercheck import Host, fact
from clustercheck.probes.nvml import GpuRecord


@fact
def gpus(host: Host) -> GpuRecord:
    """The node's GPU record (probe `nvml`), validated."""
    return GpuRecord.from_json(host.probe("nvml"))
