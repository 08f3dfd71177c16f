"""NVLink: every link of every GPU up, at the expected count and speed, error counters low.

Reads the GPU record (probe `nvml`): where NVML answered for NVLink (state, speed and error counters
per link, NVML in-process), that; otherwise `nvidia-smi nvlink -s` (link state and speed per link)
and `nvidia-smi nvlink -e` (Replay, Recovery and CRC error counters per link). Parsers:
clustercheck.facts.nvlink. Nothing here resets or retrains a link.
"""

from __future__ import annotations

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts.gpu import gpus
from clustercheck.facts.nvlink import (
    GpuLinkErrors,
    GpuLinks,
    errors_from_record,
    expected_for,
    parse_nvlink_errors,
    parse_nvlink_status,
    status_from_record,
)

from . import _usable


def _nvidia_smi(host: Host, *args: str) -> str | None:
    """stdout of `nvidia-smi ARGS`; None when nvidia-smi says the query is not supported here;
    HostError when nvidia-smi is missing, hung or failed otherwise (cannot tell)."""
    result = host.run("nvidia-smi", *args)
    if result.ok:
        return result.stdout
    said = (result.stdout + " " + result.stderr).strip()
    if result.exit_code == 127:
        raise HostError(host.name, f"cannot tell: `{result.command}`: nvidia-smi is not installed on the node")
    if not result.timed_out and "not supported" in said.lower():
        return None
    raise HostError(host.name, f"cannot tell: `{result.command}` {result.describe()}: {said[:200] or 'no output'}")


def _bridged(name: str) -> bool:
    """A PCIe card joined by an NVLink bridge (H100 NVL, A100 PCIe ...): a bridge can be reseated."""
    return "PCIe" in name or name.rstrip().endswith(" NVL")


@check(needs=["probe nvml", "command nvidia-smi"], timeout=30, action="RESET_GPU")
def nvlink(
    host: Host,
    *,
    expected_links: int = 0,
    min_speed: float = 0.0,
    max_crc_errors: int = 100,
    max_replay_errors: int = 100,
    max_recovery_errors: int = 0,
) -> Result:
    """Every NVLink of every GPU is active, `expected_links` per GPU at `min_speed` GB/s or more, with few errors.

    Why: a GPU with a link down still works, so nothing fails; but NCCL routes around it or
    falls back to PCIe, and every collective on the node slows down; on an NVSwitch system a
    GPU with all links inactive cannot join the fabric at all. DCGM's diagnostics can pass with
    every NVLink down (NVIDIA/DCGM#198), so the links are judged on their own.

    How: NVML's link state, speed (NVML_FI_DEV_NVLINK_GET_SPEED) and error counters where the
    GPU record has them (probe `nvml` in-process); otherwise `nvidia-smi nvlink -s`, which lists
    each GPU's links ("Link 3: 26.562 GB/s" or "<inactive>"; "all links are inactive" for a GPU
    without one). Both are judged alike (data `source` says which). Fails naming the GPU and
    link for an inactive link, fewer active links than expected, or a link slower than
    expected. `expected_links` / `min_speed` at 0 are learned from the GPU model where its
    numbers are known (domain-facts §I.1: V100-SXM2 6 x 25.781, A100-SXM4 12 x 25, H100 SXM
    18 x 26.562 GB/s); otherwise every link a GPU lists must be active. `nvidia-smi nvlink -e`
    counters (cumulative since the driver loaded or the GPU was reset) warn above
    `max_crc_errors`, `max_replay_errors`, `max_recovery_errors` on any link (NVML's CRC: the
    ERROR_DL_CRC field, or the flit and data CRC counters added). A node whose GPUs
    have no NVLink (A10, one PCIe GPU: nvidia-smi prints nothing) skips, unless links are
    expected there.

    Fix: drain the node, reset the GPU (`nvidia-smi -r -i N`) or reboot, and check again; a
    bridged PCIe pair: reseat the NVLink bridge; a link that stays down or keeps counting
    errors after a reset is a hardware fault (REPLACE_HW: the GPU or the baseboard).
    """
    record = gpus(host)
    usable = _usable(record)
    if isinstance(usable, Result):
        return usable
    names = {g.index: g.name or "" for g in usable}
    learned = {g.index: expected_for(g.name or "") for g in usable}
    wanted_any = expected_links or max((n for n, _ in learned.values()), default=0)
    status = status_from_record(usable)
    recorded_errors: list[GpuLinkErrors] | None = None
    if status is not None and not status.gpus and wanted_any:
        status = None  # NVML says no NVLink where links are expected: ask nvidia-smi before judging
    if status is not None:
        source = "nvml"
        recorded_errors = errors_from_record(usable)
    else:
        source = "nvidia-smi"
        text = _nvidia_smi(host, "nvlink", "-s")
        if text is None:
            return skip("`nvidia-smi nvlink -s` says NVLink is not supported on these GPUs", data={"no_nvlink": True})
        status = parse_nvlink_status(text)
    if not status.gpus and source == "nvml":
        models = ", ".join(sorted(set(names.values()))) or "these GPUs"
        return skip(
            f"no NVLink on this node ({models}: NVML reports no NVLink, NOT_SUPPORTED)",
            data={"no_nvlink": True, "source": source},
            evidence=[f"{g.label}: {g.name}" for g in usable],
        )
    if not status.gpus:
        wanted = expected_links or max((n for n, _ in learned.values()), default=0)
        if status.stray:
            line, said = status.stray[0]
            raise HostError(host.name, f"cannot tell: `nvidia-smi nvlink -s` line {line} is not a GPU or link: {said}")
        if wanted:
            raise HostError(
                host.name,
                f"cannot tell: `nvidia-smi nvlink -s` printed no GPU, but {wanted} NVLinks per GPU are expected "
                f"({', '.join(sorted(set(names.values())))}): nvidia-smi or the driver is not answering for NVLink",
            )
        models = ", ".join(sorted(set(names.values()))) or "these GPUs"
        return skip(
            f"no NVLink on this node ({models}: `nvidia-smi nvlink -s` lists no link)",
            data={"no_nvlink": True},
            evidence=[f"{g.label}: {g.name}" for g in usable],
        )
    problems: list[str] = []
    evidence: list[str] = []
    table: list[dict[str, object]] = []
    listed = {g.index for g in status.gpus}
    for missing in sorted(set(names) - listed):
        problems.append(f"GPU {missing} ({names[missing]}) is not listed by `nvidia-smi nvlink -s`")
    for g in status.gpus:
        model_links, model_speed = expected_for(g.name) if g.name else learned.get(g.index, (0, 0.0))
        want_links = expected_links or model_links
        want_speed = min_speed or model_speed
        problems += _link_problems(g, want_links, want_speed)
        speeds = sorted({link.speed_gbs for link in g.active if link.speed_gbs is not None})
        shown = "/".join(f"{s:g}" for s in speeds) or "-"
        evidence.append(
            f"GPU {g.index} ({g.name}): {len(g.active)} of {len(g.links) or want_links or '?'} links active at "
            f"{shown} GB/s"
            + (f", expected {want_links}" if want_links else "")
            + (f" at >= {want_speed:g} GB/s" if want_speed else "")
        )
        table.append(
            {
                "gpu": g.index,
                "name": g.name,
                "active": len(g.active),
                "inactive": [link.link for link in g.inactive],
                "all_inactive": g.all_inactive,
                "speeds_gbs": speeds,
                "expected_links": want_links,
            }
        )
    evidence.insert(
        0, "NVLink state from NVML (probe nvml)" if source == "nvml" else "NVLink state from `nvidia-smi nvlink -s`"
    )
    errors = _error_warnings(host, max_crc_errors, max_replay_errors, max_recovery_errors, evidence, recorded_errors)
    data = {"gpus": table, "problems": problems, "error_counters": errors, "source": source}
    if problems:
        bridged = any(_bridged(g.name) for g in status.gpus)
        return fail(
            "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else ""),
            remedy="Drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot, then check again"
            + ("; reseat the NVLink bridge of a bridged pair" if bridged else "")
            + "; a link that stays down after a reset is a hardware fault: open an RMA for the GPU (or baseboard).",
            data=data,
            evidence=evidence,
            action="CHECK_CABLE" if bridged else "RESET_GPU",
        )
    if errors:
        return warn(
            "; ".join(errors[:8]) + (f"; and {len(errors) - 8} more" if len(errors) > 8 else ""),
            remedy="The counters are cumulative since the driver loaded or the GPU was reset: reset the GPU, "
            "run the job again and compare `nvidia-smi nvlink -e`; a link that keeps counting is a hardware fault.",
            data=data,
            evidence=evidence,
        )
    total = sum(len(g.active) for g in status.gpus)
    with_links = [g for g in status.gpus if g.links]
    per = {len(g.active) for g in with_links}
    each = f"{per.pop()} each" if len(per) == 1 else "all active"
    return ok(f"{len(with_links)} GPUs: {total} NVLinks active ({each})", data=data, evidence=evidence)


def _link_problems(g: GpuLinks, want_links: int, want_speed: float) -> list[str]:
    where = f"GPU {g.index} ({g.name})"
    if g.all_inactive:
        return [f"{where}: all NVLinks inactive" + (f" (expected {want_links})" if want_links else "")]
    out = []
    if g.inactive:
        links = ", ".join(str(link.link) for link in g.inactive)
        out.append(f"{where}: link{'s' * (len(g.inactive) > 1)} {links} inactive")
    if want_links and len(g.active) < want_links:
        out.append(f"{where}: {len(g.active)} of {want_links} NVLinks active")
    if not g.links and not want_links and g.messages:
        out.append(f"{where}: {g.messages[0][:120]}")
    if want_speed:
        slow = [link for link in g.active if link.speed_gbs is not None and link.speed_gbs < want_speed * 0.999]
        for link in slow[:4]:
            out.append(f"{where}: link {link.link} at {link.said}, expected >= {want_speed:g} GB/s")
        if len(slow) > 4:
            out.append(f"{where}: {len(slow) - 4} more links below {want_speed:g} GB/s")
    return out


def _error_warnings(
    host: Host,
    max_crc: int,
    max_replay: int,
    max_recovery: int,
    evidence: list[str],
    recorded: list[GpuLinkErrors] | None = None,
) -> list[str]:
    """Warnings for counters above their limits: NVML's from the record, else `nvidia-smi nvlink -e`'s."""
    if recorded is not None:
        counters = recorded
    else:
        text = _nvidia_smi(host, "nvlink", "-e")
        if text is None:
            evidence.append("`nvidia-smi nvlink -e`: error counters not supported here (not judged)")
            return []
        counters = parse_nvlink_errors(text)
    if not counters:
        evidence.append("`nvidia-smi nvlink -e` listed no counters (not judged)")
        return []
    limits = (("CRC", max_crc), ("Replay", max_replay), ("Recovery", max_recovery))
    out = []
    for g in counters:
        totals = {name: 0 for name, _ in limits}
        for link, values in sorted(g.counters.items()):
            for name, limit in limits:
                value = sum(v for key, v in values.items() if name.lower() in key.lower() and v is not None)
                totals[name] += value
                if value > limit:
                    out.append(f"GPU {g.index} link {link}: {value} {name} errors (more than {limit})")
        evidence.append(
            f"GPU {g.index} NVLink errors over {len(g.counters)} links: "
            + ", ".join(f"{name} {totals[name]}" for name, _ in limits)
        )
    return out
