"""GPU copy bandwidth: nvbandwidth host<->device and device<->device, against per-SKU thresholds.

`gpu.bandwidth` runs `nvbandwidth -t TESTCASES -j` on the node (through the host API, so
locally, over SSH and in record/replay alike; without `-j` where an older nvbandwidth does not
know it) and reads what it printed with clustercheck.facts.nvbandwidth. This module only judges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError

if TYPE_CHECKING:  # the reader is imported when the check runs: gpu.* checks load this module on the prolog path
    from clustercheck.facts.nvbandwidth import NvbRun, Testcase

#: The testcases the check runs by default, and the threshold parameter of each family.
DEFAULT_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
_FAMILIES = (("host_to_device", "min_h2d"), ("device_to_host", "min_d2h"), ("device_to_device", "min_d2d"))
#: The default budget, seconds: nvbandwidth's run time grows with the GPU pairs (56 on 8 GPUs for a
#: device-to-device testcase) and the buffer size (`-b`, MiB); a profile's `timeout` overrides it.
BUDGET = 300.0


class BandwidthError(HostError):
    """The check's `error`: carries the remedy and data into the result."""

    def __init__(self, summary: str, remedy: str, data: Mapping[str, Any]) -> None:
        super().__init__("", summary)
        self.remedy, self.data, self.evidence = remedy, dict(data), ()


def _error(summary: str, remedy: str, data: Mapping[str, Any]) -> NoReturn:
    raise BandwidthError(summary, remedy, data)


def _family(test: str) -> str | None:
    return next((param for prefix, param in _FAMILIES if test.startswith(prefix)), None)


def validate(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    """Load-time rules: testcases the check has a threshold for, positive thresholds, no prolog."""
    problems = []
    for test in params.get("tests", ()):
        if _family(test) is None:
            problems.append(
                f"testcase {test!r} has no threshold here: use host_to_device_*, device_to_host_* or "
                "device_to_device_* testcases (`nvbandwidth -l` lists them)"
            )
    if not params.get("tests"):
        problems.append("tests is empty: name at least one nvbandwidth testcase")
    for name in ("min_h2d", "min_d2h", "min_d2d"):
        if not params.get(name, 0) > 0:
            problems.append(f"{name} must be a bandwidth above 0 GB/s, got {params.get(name)!r}")
    prolog = next((p for p in profiles if "prolog" in p.lower()), None)
    if prolog is not None:
        problems.append(
            f"nvbandwidth copies between every GPU pair for a minute or more and takes the GPUs: not in a prolog "
            f"profile (this one is or extends {prolog!r}); run it from a profile for nodes out of service (deep)"
        )
    return problems


@check(
    needs=["command nvbandwidth"],
    timeout=BUDGET,
    validate=validate,
    action="REPLACE_HW",
)
def bandwidth(
    host: Host,
    *,
    min_h2d: float,
    min_d2h: float,
    min_d2d: float,
    tests: tuple[str, ...] = DEFAULT_TESTS,
    binary: str = "nvbandwidth",
    buffer_mib: int = 0,
) -> Result:
    """nvbandwidth's host-to-device, device-to-host and device-to-device copies reach the thresholds.

    Why: a GPU whose PCIe link trained down (x8 or Gen3 on a Gen5 slot, a bad riser) or whose
    NVLink to a peer is degraded passes static checks and still slows every job that moves data
    to it; measuring the copies finds it and names the GPU or the GPU pair (Azure's aznhc and
    DCGM's nvbandwidth plugin run the same tool).

    How: runs `nvbandwidth -t TESTS -j` (`-b buffer_mib` when set; an nvbandwidth too old for
    `-j` is rerun without it and its text matrices are read) and reads every testcase's matrix.
    Each GPU's host-to-device and device-to-host copy (GB/s) must reach `min_h2d` / `min_d2h`,
    every GPU pair's device-to-device copy `min_d2d` (the N/A diagonal is no pair). Thresholds
    are per site and SKU, from a healthy node of the kind (e.g. 24-27 GB/s each way and 22-26
    GB/s between GPUs on PCIe Gen4 x16 in the corpus; NVLink pairs far more). Its run time grows
    with the GPU pairs (56 on 8 GPUs) and the buffer (`buffer_mib`, nvbandwidth's default 512
    MiB); the budget is the check's `timeout` (300 s), after which nvbandwidth and its children
    are killed. Refused in prolog profiles at load time. A testcase nvbandwidth waived
    (one GPU: no pair; no peer access) is not measured: not applicable on one GPU, a warning
    otherwise; all waived is a skip. An ASSERT (nvbandwidth aborted, e.g. a data pattern
    mismatch after a copy), output cut short or garbage, and a missing testcase are errors,
    never a pass.

    Fix: for a slow GPU, compare `nvidia-smi -q` (PCIe Link Width and Generation, current
    against max) with a healthy node and reseat the GPU or riser; for a slow pair, `nvidia-smi
    nvlink -s` and `nvidia-smi topo -m`; rerun once, and a GPU slow again is a hardware case
    (action REPLACE_HW).

    Action: REPLACE_HW (a GPU or pair slow again after a rerun); INVESTIGATE (an ASSERT, or pairs
    not measured). A slow copy says `performance: true` in its data: the sweep measures it once
    more before a drain; an ASSERT, a cut or garbage output is an error, not a measurement.
    """
    from clustercheck.facts.nvbandwidth import PACKAGE, NvbParseError, parse_nvbandwidth

    argv = [binary, "-t", *tests]
    if buffer_mib > 0:
        argv += ["-b", str(buffer_mib)]
    result = host.run(*argv, "-j", timeout=BUDGET)
    if (
        not result.timed_out
        and result.exit_code not in (0, 127)
        and "-j" in (result.stdout + result.stderr)
        and "unrecognised option" in (result.stdout + result.stderr).lower()
    ):
        result = host.run(*argv, timeout=BUDGET)  # before -j (v0.2-v0.4): text matrices
    command = result.command
    data: dict[str, Any] = {"command": command, "exit_code": result.exit_code, "action": None}
    if result.timed_out:
        _error(
            f"`{command}` did not finish within {result.duration_s:.0f} s; it was stopped",
            "raise the check's timeout (a smaller buffer_mib runs faster), or look for a GPU that hangs copies",
            data,
        )
    if result.exit_code == 127 or (result.exit_code == 126 and not result.stdout.strip()):
        _error(
            f"{binary} is not installed on {host.name} (`{command}`: not found)",
            f"install {PACKAGE}, or set the check's `binary` to its path",
            {**data, "action": "FIX_CONFIG"},
        )
    try:
        run = parse_nvbandwidth(result.stdout)
    except NvbParseError as exc:
        tail = " ".join(result.stderr.split())[:200]
        _error(
            f"cannot judge `{command}` (exit {result.exit_code}): {exc}" + (f"; stderr: {tail}" if tail else ""),
            "run the command on the node by hand; output cut short or garbage is not a pass",
            data,
        )
    return judge(
        run,
        tests=tests,
        thresholds={"min_h2d": min_h2d, "min_d2h": min_d2h, "min_d2d": min_d2d},
        data=data,
        exit_code=result.exit_code,
    )


def _pair(case: Testcase, row: int, col: int) -> str:
    if case.name.startswith("device_to_device"):
        arrow = "<-" if "<-" in case.description else "->"
        return f"GPU {row} {arrow} GPU {col}"
    return f"GPU {col}"


def judge(
    run: NvbRun,
    *,
    tests: Sequence[str],
    thresholds: Mapping[str, float],
    data: Mapping[str, Any],
    exit_code: int | None,
) -> Result:
    """A read nvbandwidth run -> the verdict (pure); BandwidthError for an `error`."""
    data = {**data, "nvbandwidth": run.version or None, "driver": run.driver or None, "format": run.format}
    if run.aborted:
        _error(
            f"nvbandwidth aborted: {run.aborted}",
            "rerun once; an ASSERT that repeats on the same GPUs (a data pattern mismatch after a copy) is a GPU or "
            "NVLink fault to investigate (`nvidia-smi -q` for ECC and XID errors)",
            {**data, "action": "INVESTIGATE"},
        )
    gpus = max((len(c.matrix[0]) for c in run.testcases.values() if c.matrix), default=len(run.devices))
    measured: dict[str, Any] = {}
    slow: list[tuple[float, str, str, float]] = []  # (GB/s, testcase, where, threshold)
    waived: list[str] = []
    not_measured: list[str] = []
    evidence = [
        f"nvbandwidth {run.version or '(version not shown)'}, driver {run.driver or '(not shown)'}, {run.format}"
    ]
    for test in tests:
        case = run.testcases.get(test)
        if case is None:
            _error(
                f"nvbandwidth printed no result for {test} (it ran {', '.join(run.testcases) or 'nothing'})",
                "check the testcase name (`nvbandwidth -l`) and the tool's version",
                data,
            )
        if case.waived:
            waived.append(test)
            evidence.append(f"{test}: waived")
            continue
        if case.status.lower() != "passed":
            _error(
                f"nvbandwidth's {test} ended {case.status!r}", "rerun the testcase by hand and read its message", data
            )
        floor = thresholds[_family(test) or ""]
        values: dict[str, float] = {}
        for r, row in enumerate(case.matrix):
            for c, value in enumerate(row):
                if value is None:
                    if case.name.startswith("device_to_device") and r != c:
                        not_measured.append(f"{test} {_pair(case, r, c)}")
                    continue
                where = _pair(case, r, c)
                values[where] = value
                if value < floor:
                    slow.append((value, test, where, floor))
        measured[test] = values
        low = min(values.values(), default=None)
        evidence.append(
            f"{test}: {len(values)} value(s), lowest {low:g} GB/s (at least {floor:g})"
            if low is not None
            else f"{test}: no value"
        )
    data = {**data, "gpus": gpus, "measured": measured, "waived": waived, "not_measured": not_measured}
    data["slow"] = [{"testcase": t, "where": w, "gbps": v, "threshold": f} for v, t, w, f in sorted(slow)]
    if slow:
        slow.sort()
        named = "; ".join(f"{w} {t} {v:g} GB/s (at least {f:g})" for v, t, w, f in slow[:6])
        more = f" and {len(slow) - 6} more" if len(slow) > 6 else ""
        return fail(
            f"slow copies: {named}{more}",
            remedy="compare `nvidia-smi -q` (PCIe Link Width/Generation) and `nvidia-smi nvlink -s` with a healthy "
            "node, reseat the GPU or riser, rerun once; slow again means replace the part",
            data={**data, "action": "REPLACE_HW", "performance": True},  # measured below the thresholds
            evidence=evidence,
        )
    if not measured:
        return skip(
            f"nothing measured: nvbandwidth waived {', '.join(waived)}"
            + (" (one GPU: no device pair)" if gpus == 1 else " (peer-to-peer access unavailable)"),
            data=data,
            evidence=evidence,
        )
    if exit_code not in (0, None):
        _error(f"`{data.get('command')}` exited {exit_code} although its results passed", "rerun it by hand", data)
    multi_waived = [t for t in waived if not (gpus == 1 and t.startswith(("device_to_device", "all_to_one", "one_to")))]
    if multi_waived or not_measured:
        what = multi_waived + not_measured[:4]
        return warn(
            f"not measured: {', '.join(what)} (nvbandwidth waived it: peer-to-peer access between the GPUs is "
            "unavailable); the rest reached the thresholds",
            remedy="check `nvidia-smi topo -p2p r` and that the IOMMU/ACS settings allow peer access",
            data={**data, "action": "INVESTIGATE"},
            evidence=evidence,
            action="INVESTIGATE",
        )
    lows = ", ".join(f"{t} {min(v.values()):g}" for t, v in measured.items() if v)
    note = f"; {', '.join(waived)} not applicable on one GPU" if waived else ""
    return ok(f"{gpus} GPU(s), lowest copy GB/s: {lows}{note}", data=data, evidence=evidence)


__all__ = ["BandwidthError", "bandwidth", "judge", "validate"]
