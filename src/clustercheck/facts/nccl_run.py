"""A run of nccl-tests' `all_reduce_perf` with NCCL_DEBUG=INFO, judged: NCCL's network, GPUDirect
RDMA, transport errors and the bus bandwidth.

One judge for the one-node check (`nccl.loopback`: the node's GPUs with P2P and SHM disabled, so
the traffic leaves through the NICs) and the sweep's two-node form (`nccl.pairs`: `srun -N2` on a
pair of nodes, inside the site's image): `judge_run` is pure (the tests call it on cut and garbage
outputs too), returns the verdict as a Result and raises `NcclRunError` for an `error` (a run
that cannot be judged is never a pass). A failure that is only a bus bandwidth below the
threshold says `performance: true` in its data: the sweep measures it once more before a drain.

NCCL's log is read by the nccl-log analyzer (clustercheck.analyzers.nccl_log), the table by the
nccl-tests reader (clustercheck.analyzers.nccl_tests); both are imported when a run is judged.
Sources: docs/domain-facts.md §C.3 (NCCL_P2P_DISABLE/NCCL_SHM_DISABLE send the traffic through
the network), §C.4 (GPUDirect RDMA), §C.5 (missing RDMA devices: the TCP fallback).
"""

from __future__ import annotations

from typing import Any

from clustercheck.errors import HostError
from clustercheck.result import Result, fail, ok

#: The environment of each variant. `network`: P2P and SHM off, so every GPU pair's traffic goes
#: out through a NIC and back (domain-facts §C.3: with SHM disabled "NCCL will use the network");
#: NVLS off too, as NVLink SHARP would carry it through the NVSwitches. `nvlink`: P2P only over
#: NVLink (NCCL_P2P_LEVEL=NVL), SHM off and IB off (NCCL_IB_DISABLE=1), so a pair without NVLink
#: shows up as network (socket) channels instead of passing over PCIe or host memory unseen.
#: `pairs`: two nodes as jobs run them (nothing disabled: P2P inside each node, the NICs between them).
LOOPBACK_ENV: dict[str, tuple[str, ...]] = {
    "network": ("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_NVLS_ENABLE=0"),
    "nvlink": ("NCCL_P2P_LEVEL=NVL", "NCCL_SHM_DISABLE=1", "NCCL_IB_DISABLE=1"),
    "pairs": (),
}
#: NCCL's default subsystems (INIT,BOOTSTRAP,ENV: domain-facts §C.3) and NET, for its GPUDirect RDMA lines per HCA.
DEBUG_ENV = ("NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,NET")
NCCL_TESTS_PACKAGE = (
    "nccl-tests (NVIDIA's nccl-tests: `make` in its source against the node's CUDA and NCCL, or the "
    "image's /usr/local/bin/all_reduce_perf); set the check's `binary` to its path"
)
#: A failure's data says it is a measurement below a threshold (clustercheck.sweep.PERFORMANCE).
PERFORMANCE = "performance"


class NcclRunError(HostError):
    """A run that cannot be judged (`error`): carries the remedy and data (with its action) into the result."""

    def __init__(self, summary: str, remedy: str, data: dict[str, Any], evidence: list[str] | None = None) -> None:
        super().__init__("", summary)
        self.remedy, self.data, self.evidence = remedy, dict(data), tuple(evidence or ())


def run_argv(variant: str, binary: str, gpus: int, min_bytes: str, max_bytes: str, factor: int) -> tuple[str, ...]:
    """`env VARS... all_reduce_perf -b MIN -e MAX -f FACTOR -g GPUS` (the host API passes no environment)."""
    sizes = ("-b", min_bytes, "-e", max_bytes, "-f", str(factor), "-g", str(gpus))
    return ("env", *DEBUG_ENV, *LOOPBACK_ENV[variant], binary, *sizes)


def judge_run(
    stdout: str,
    stderr: str,
    exit_code: int | None,
    *,
    variant: str,
    expect: str,
    require_gdr: bool,
    min_busbw: float,
    binary: str,
    data: dict[str, Any],
) -> Result:
    """What all_reduce_perf printed -> the verdict (pure); NcclRunError for an `error`.

    `variant` is network or nvlink (one node, nccl.loopback) or pairs (two nodes, nccl.pairs: the
    network between them must carry the traffic, P2P inside each node is expected)."""
    from clustercheck.analyzers import nccl_tests
    from clustercheck.analyzers.nccl_log import analyze_text

    n = data.get("gpus", 0)
    data = dict(data)
    log = analyze_text(stdout + "\n" + stderr, "all_reduce_perf", expect=expect or None, expect_gdr=require_gdr)
    data["log"] = {
        k: v
        for k, v in log.to_json().items()
        if k in ("nccl_version", "network", "link_layer", "gpudirect_rdma", "net_channels", "intra_node", "error_count")
    }
    evidence = [f"NCCL log: {f.status.value}: {f.message}" for f in log.findings]
    problems = _problems(log, variant, expect, require_gdr)  # (fail?, message, action)
    slow = False  # a failure of the bus bandwidth threshold (not of wrong results)
    parsed: Any = None
    table: Any = None
    try:
        parsed = nccl_tests.parse(stdout, binary)
        table = nccl_tests.judge(parsed, min_busbw=min_busbw)
    except nccl_tests.NotATable:
        pass
    where = "two-node" if variant == "pairs" else f"{variant} loopback"
    if table is not None and parsed is not None:
        evidence += [f"nccl-tests: {f.status.value}: {f.message}" for f in table.findings]
        peak = table.peak
        data["peak_busbw"] = peak.busbw if peak is not None else None
        data["avg_busbw"] = table.avg_busbw
        thresholds = table.findings[len(parsed.findings) :]  # what judge() added: the busbw verdicts
        for f in table.findings:
            if f.status.value == "fail":
                problems.append((True, f"{f.message} ({n} GPUs, {where})", "INVESTIGATE"))
                slow = slow or f in thresholds
    fails = [(m, a) for is_fail, m, a in problems if is_fail]
    errors = [m for is_fail, m, _ in problems if not is_fail]
    if fails:
        action = next(a for a in ("FIX_CONFIG", "CHECK_CABLE", "INVESTIGATE") if any(x == a for _, x in fails))
        measured = slow and len(fails) == 1  # below the threshold, and nothing else wrong
        return fail(
            "; ".join(m for m, _ in fails),
            remedy=_remedy(log, action),
            data={**data, "action": action, PERFORMANCE: measured},
            evidence=evidence,
            action=action,
        )
    if table is not None and table.peak is None:
        errors.append("the result table has no row with a bus bandwidth")
    elif table is not None and table.avg_busbw is None:
        errors.append(
            "the result table has no closing '# Avg bus bandwidth' line: all_reduce_perf stopped or its output was cut"
        )
    if table is None:
        errors.append(
            f"`{binary}` exited {exit_code} without a result table"
            + (f": {last_line(stderr or stdout)}" if (stderr or stdout).strip() else "")
        )
    if not errors and exit_code != 0:
        errors.append(f"`{binary}` exited {exit_code} although its log and table passed")
    if errors:
        raise NcclRunError(
            "cannot tell: " + "; ".join(errors),
            "run the command on the node by hand and read NCCL's log (`clustercheck nccl-log` on its output)",
            data,
            evidence,
        )
    peak = table.peak if table is not None else None
    if peak is None:  # not reached: no table, or no peak, is an error above
        raise NcclRunError("cannot tell: no bus bandwidth", "run the command by hand", data, evidence)
    what = "over NVLink P2P" if variant == "nvlink" else f"through the NICs ({headline(log)})"
    return ok(
        f"{n} GPUs {what}; peak bus bandwidth {peak.busbw:.1f} GB/s (at least {min_busbw:g})",
        data=data,
        evidence=evidence,
    )


def headline(report: Any) -> str:
    """The worst finding's message; for an ok report, every ok finding (network, GPUDirect RDMA)."""
    status = report.status.value
    same = [f.message for f in report.findings if f.status.value == status]
    if status == "ok":
        return "; ".join(same) or "no findings"
    return str(same[0])


def _problems(log: Any, variant: str, expect: str, require_gdr: bool) -> list[tuple[bool, str, str]]:
    """What the NCCL log shows against the variant: (a failure, else cannot tell), message, action."""
    out: list[tuple[bool, str, str]] = []
    if not log.nccl_lines:
        return [(False, "the output has no NCCL INFO lines (NCCL_DEBUG=INFO was not honoured?)", "")]
    if log.error_count:
        first = next((f.message for f in log.findings if "transport error" in f.message), "transport errors")
        out.append((True, first, "INVESTIGATE"))
    channels = dict(log.intra_node)
    if variant == "nvlink":
        if log.net_channels:
            out.append(
                (
                    True,
                    f"{log.net_channels} channel(s) went over the network ({log.network or 'NET'}) instead of NVLink: "
                    "a GPU pair has no NVLink P2P",
                    "INVESTIGATE",
                )
            )
        off = {k: v for k, v in channels.items() if not k.startswith("P2P")}
        if off:
            shown = ", ".join(f"{k} ({v})" for k, v in off.items())
            out.append((True, f"channels not over NVLink P2P: {shown}", "INVESTIGATE"))
        if not log.net_channels and not any(k.startswith("P2P") for k in channels):
            out.append((False, "the log shows no P2P channel lines: cannot tell that NVLink carried the traffic", ""))
        return out
    socket = log.network == "socket" or any(h.get("network") == "socket" for h in log.hosts.values())
    if socket:
        cause = next((f.message for f in log.findings if f.status.value != "ok" and "socket" in f.message.lower()), "")
        if cause.startswith("fell back to TCP sockets"):  # the analyzer's finding says it already
            cause = cause[len("fell back to TCP sockets") :].lstrip(": ")
        out.append(
            (True, "NCCL fell back to TCP sockets: " + (cause or "it selected the Socket network"), "FIX_CONFIG")
        )
        return out
    if log.network is None:
        out.append((False, "the log shows no network selection ('Using network ...', NET/... lines)", ""))
        return out
    for f in log.findings:
        if f.status.value == "fail" and "transport error" not in f.message:
            out.append((True, f.message, "FIX_CONFIG"))
    inside = {k: v for k, v in channels.items() if k.startswith(("P2P", "SHM"))}
    if inside and not log.net_channels:  # beside network channels, the NICs are proven all the same
        shown = ", ".join(f"{v} channel(s) over {k}" for k, v in inside.items())
        said = "P2P/SHM not disabled?" if variant == "network" else "the ranks ran on one node?"
        out.append((False, f"{shown}: this traffic did not go through the NICs ({said})", ""))
    if not log.net_channels:
        out.append(
            (False, "the log shows no network channel ('via NET/...'): cannot tell the traffic left the node", "")
        )
    return out


def _remedy(log: Any, action: str) -> str:
    fixes = [f.remedy for f in log.findings if f.status.value == "fail" and f.remedy]
    if action == "FIX_CONFIG" and fixes:
        return str(fixes[0])
    if action == "FIX_CONFIG":
        return "expose /dev/infiniband and the verbs libraries to the container, and unset NCCL_IB_DISABLE/NCCL_NET"
    return (
        "run rdma.bandwidth to find the HCA port that is slow or failing, check its counters (`perfquery`) and "
        "cable; for NVLink, `nvidia-smi nvlink -s`"
    )


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


__all__ = [
    "DEBUG_ENV",
    "LOOPBACK_ENV",
    "NCCL_TESTS_PACKAGE",
    "PERFORMANCE",
    "NcclRunError",
    "headline",
    "judge_run",
    "last_line",
    "run_argv",
]
