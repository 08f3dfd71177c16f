"""NCCL as jobs see it: recent job logs (fallback to TCP, GPUDirect RDMA, transport errors) and
nccl-tests bus bandwidth.

Reads: for `nccl.log`, the newest files matching the profile's globs (`ls -1td` through `sh`),
then per file one `sh -c` script of `grep -n -a` passes that sends back only the NCCL lines
that decide the verdict (network selection, device lists, WARN lines, versions), network
channel lines without GPUDirect RDMA, shared-memory channel lines, the first 2000 channel lines
and `grep -c` counts, each line cut at MAX_LINE (4 KiB) bytes by `cut` and marked by `awk`
(a cut line makes the check an error naming FILE:LINE, unless the rest already shows a
failure): a multi-GB job log, or a 200 MB line, never crosses the network whole. Runs: for
`nccl.busbw`, `nvidia-smi -L` (to count GPUs, unless the profile says) and `all_reduce_perf`
(from nccl-tests) when it is installed; this one loads the GPUs for a few seconds, so keep
it out of prolog profiles. Nothing here writes.
"""

# Sources: docs/domain-facts.md §C.1-C.2 (log prefix and transport lines, how
# they changed across NCCL versions), §C.4 (GPUDirect RDMA), §C.5 (missing RDMA devices).

from __future__ import annotations

import fnmatch
import re
import shlex
from typing import Any

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.nccl_run import (
    NCCL_TESTS_PACKAGE,
    NcclRunError,
    headline,
    judge_run,
    last_line,
    run_argv,
)

# What `nccl.log` sends back of a file, section by section (see the module docstring).
_SECTIONS = ("rare", "nogdr", "shm", "channels", "counts")
_COUNTED = ("via NET/", "/GDRDMA", "via P2P/", "via SHM")
# The listing (facts/scripts/nccl_list_logs.sh): the newest files matching the profile's globs,
# after "@@denied DIR" lines naming each folder this user cannot list (it hides its logs the way
# an empty one does: the glob stays unexpanded, `ls` says "No such file").
_LIST_SCRIPT = script_text("nccl_list_logs.sh").removesuffix("\n")
DENIED = "@@denied "
ACCESS = (
    "run the check as a user who can read the job logs (root, as the prolog and health do, or the "
    "users' group), or make the log folder readable to it"
)
#: The longest part of a log line that crosses the network (the analyzer's MAX_KEPT): `cut`
#: streams (a 200 MB line never sits whole in any process but grep), and awk marks a line it cut
#: with CUT_MARK so the check can name it. Before, one 200 MB line came back whole in several
#: sections and the check held 1.5 GB.
MAX_LINE = 4096  # nccl_grep_log.sh cuts at it: `cut -b 1-4097 | awk -v n=4096` (a test holds the two together)
CUT_MARK = "\t@@cut"
#: One file's NCCL lines, by sections (facts/scripts/nccl_grep_log.sh): `sh -c _GREP_SCRIPT sh FILE PATTERN`.
_GREP_SCRIPT = script_text("nccl_grep_log.sh").removesuffix("\n")


def _folder(glob: str) -> str:
    """The folder nccl_list_logs.sh names in its `@@denied` line for a glob."""
    return (glob.rsplit("/", 1)[0] or "/") if "/" in glob else "."


def _part_matches(name: str, pattern: str) -> bool:
    if not any(c in pattern for c in "*?[\\"):
        return name == pattern
    if "[:" in pattern or "[=" in pattern or "[." in pattern:
        return True  # a POSIX class fnmatch does not know: the part count still holds
    fn = re.sub(r"\\(.)", lambda m: "[" + m.group(1) + "]" if m.group(1) in "*?[" else m.group(1), pattern)
    return fnmatch.fnmatchcase(name, fn.replace("[^", "[!"))


def glob_matches(path: str, glob: str) -> bool:
    """Whether `path`, a line the listing printed, is a name the shell glob `glob` expands to: as
    many `/`-parts, each matching its part of the glob. `ls` prints a file name holding a newline
    as two lines, and (the glob having a `/`) at most one of them can have the glob's part
    count: a user naming a log `x.out<newline>/etc/...` never gets another file read."""
    parts, globs = path.split("/"), glob.split("/")
    return len(parts) == len(globs) and all(_part_matches(n, g) for n, g in zip(parts, globs, strict=True))


def _strays(strays: list[str]) -> str:
    shown = ", ".join(repr(s[:120]) for s in strays[:3]) + (" ..." if len(strays) > 3 else "")
    return (
        f"the log listing printed {len(strays)} line{'s' if len(strays) > 1 else ''} matching none of the "
        f"paths' globs ({shown}): a file name with a newline in it, not read"
    )


def parse_sections(text: str) -> dict[str, list[str]]:
    """The grep script's output -> {section: lines}."""
    sections: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@@ ") and line[3:].strip() in sections:
            current = sections[line[3:].strip()]
        elif current is not None:
            current.append(line)
    return sections


def numbered(lines: list[str], cut: list[int] | None = None) -> list[tuple[int, str]]:
    """`grep -n` lines ('12:text') -> [(12, 'text')]; anything else is skipped.

    A line the script cut (CUT_MARK) keeps its first MAX_LINE bytes; its number goes to `cut`.
    """
    out = []
    for line in lines:
        number, sep, text = line.partition(":")
        if sep and number.isdigit():
            if text.endswith(CUT_MARK):
                text = text[: -len(CUT_MARK)]
                if cut is not None:
                    cut.append(int(number))
            out.append((int(number), text[: MAX_LINE + 64]))  # a node that ignored the cap
    return out


def analyze_grep_output(
    text: str, path: str, *, expect: str = "", expect_gdr: bool = False, cut: list[int] | None = None
) -> Any:
    """One file's grep script output -> the analyzer's LogReport (None when it has no NCCL lines).

    The numbers of lines the script cut at MAX_LINE go to `cut` (sorted, once each).
    """
    from clustercheck.analyzers.nccl_log import Scanner

    sections = parse_sections(text)
    scanner = Scanner()
    seen: set[int] = set()
    cut_lines: list[int] = []
    rare = numbered(sections["rare"], cut_lines)
    scanner.feed_lines(rare, path)
    seen.update(n for n, _ in rare)
    for name in ("nogdr", "shm", "channels"):
        fresh = [(n, t) for n, t in numbered(sections[name], cut_lines) if n not in seen]
        seen.update(n for n, _ in fresh)
        scanner.feed_lines(fresh, path, count_channels=False)
    counts: dict[str, int] = {}
    for line in sections["counts"]:
        key, _, value = line.rpartition("\t")
        if key in _COUNTED and value.strip().isdigit():
            counts[key] = int(value)
    scanner.add_channel_totals(
        net=counts.get("via NET/", 0),
        gdr=counts.get("/GDRDMA", 0),
        p2p=counts.get("via P2P/", 0),
        shm=counts.get("via SHM", 0),
    )
    if cut is not None:
        cut[:] = sorted(set(cut_lines))
    report = scanner.report(expect=expect or None, expect_gdr=expect_gdr)
    if not report.nccl_lines and not report.net_channels and not report.intra_node:
        return None
    return report


def _short(result: Any) -> str:
    """A failed command in one line, without the long script it ran."""
    detail = (result.stderr or "").strip().splitlines()[-1:] or [f"exit {result.exit_code}"]
    return f"{result.argv[0]} exited {result.exit_code}: {detail[0][:200]}" if not result.timed_out else "timed out"


@check(
    needs=["command sh", "command ls", "command grep", "command cut", "command awk"], timeout=60, action="FIX_CONFIG"
)
def log(
    host: Host,
    *,
    paths: tuple[str, ...],
    max_files: int = 3,
    expect: str = "",
    expect_gdr: bool = False,
) -> Result:
    """Recent job logs show inter-node NCCL traffic over RDMA with GPUDirect RDMA, and no transport errors.

    Why: a job that silently falls back from InfiniBand/RoCE or EFA to TCP sockets runs, many
    times slower, and only NCCL's debug log shows it; so do inter-node channels without
    GPUDirect RDMA and transport errors (completion errors, failed verbs calls).

    How: takes the `max_files` newest files matching the `paths` globs (e.g. where jobs write
    their output with NCCL_DEBUG=INFO) and greps each on the node for the NCCL lines that
    matter (see the module docstring), then judges them as `clustercheck nccl-log` does: TCP
    sockets for inter-node traffic, or any network other than `expect` (ib, roce, ofi,
    socket), fails; network channels without GPUDirect RDMA warn (fail with `expect_gdr`);
    transport errors fail. Logs without NCCL lines are passed over.

    Fix: the finding names the cause it read in the log: NCCL_IB_DISABLE or NCCL_NET set,
    libibverbs or the RDMA devices missing in the container, the network plugin failing to
    initialize, nvidia_peermem not loaded; `clustercheck nccl-log FILE` on a copy of the log
    shows every line it rests on.

    Action: FIX_CONFIG (TCP fallback, the wrong HCA or network, GPUDirect RDMA off: the job's
    environment or image); INVESTIGATE (transport errors: a port, cable or the fabric).
    """
    if expect not in ("", "ib", "roce", "ofi", "socket"):
        raise ValueError(f"expect must be one of ib, roce, ofi, socket (or empty), got {expect!r}")
    argv = ("sh", "-c", _LIST_SCRIPT, "sh", str(max(1, max_files)), *paths)
    listing = host.run(*argv, shown_as=shown_with(argv, _LIST_SCRIPT, "'<nccl log listing script>'"))
    if listing.exit_code == 127 or listing.timed_out:
        raise RuntimeError(f"could not list job logs: {listing.describe()}")
    lines = [line for line in listing.stdout.splitlines() if line.strip()]
    folders = {_folder(p) for p in paths}
    denied = sorted({line[len(DENIED) :] for line in lines if line.startswith(DENIED)} & folders)
    listed = [line for line in lines if not line.startswith(DENIED)]
    files = [line for line in listed if any(glob_matches(line, p) for p in paths)]
    strays = [line for line in listed if line not in files]
    if not files and strays:
        raise HostError(host.name, f"cannot tell: {_strays(strays)}")
    if not files and denied:  # not "no job logs": the node did not let us look
        raise HostError(
            host.name, f"cannot tell: {', '.join(denied)} cannot be listed by this user (permission denied); {ACCESS}"
        )
    if not files:
        return skip(f"no job logs match {' '.join(paths)} on this node")
    from clustercheck.analyzers.nccl_log import GREP_PATTERN

    judged: list[tuple[str, Any]] = []
    silent: list[str] = []
    cuts: dict[str, list[int]] = {}
    for path in files:
        argv = ("sh", "-c", _GREP_SCRIPT, "sh", path, GREP_PATTERN)
        shown = shown_with(argv, _GREP_SCRIPT, "'<nccl log grep script>'")
        result = host.run(*argv, shown_as=shown.replace(shlex.quote(GREP_PATTERN), "'<nccl_log.GREP_PATTERN>'"))
        if result.exit_code == 127:
            raise HostError(host.name, f"cannot tell: grep, cut or awk is not installed on the node: {_short(result)}")
        if result.timed_out:
            raise HostError(host.name, f"cannot tell: reading {path} did not finish in time: {_short(result)}")
        if "Permission denied" in result.stderr:  # grep could not open it: no NCCL lines is no answer
            raise HostError(host.name, f"cannot tell: {path} cannot be read by this user (permission denied); {ACCESS}")
        cut: list[int] = []
        report = analyze_grep_output(result.stdout, path, expect=expect, expect_gdr=expect_gdr, cut=cut)
        if cut:
            cuts[path] = cut
        if report is None:
            silent.append(path)
        else:
            judged.append((path, report))
    cut_note = [
        f"{path}: line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines[:5]))}"
        f"{' ...' if len(lines) > 5 else ''} longer than {MAX_LINE} bytes, read only that far"
        for path, lines in cuts.items()
    ]
    if cuts and not any(r.status.value == "fail" for _, r in judged):
        # a cut line may hide what decides the verdict (a WARN, the network): cannot tell
        first, numbers = next(iter(cuts.items()))
        raise HostError(
            host.name,
            f"cannot tell: {first}:{numbers[0]} is an NCCL line longer than {MAX_LINE} bytes, read only that far"
            + (f" ({sum(map(len, cuts.values()))} such lines)" if sum(map(len, cuts.values())) > 1 else "")
            + "; a log this damaged (lines spliced by ranks writing at once, or binary data) needs "
            "`clustercheck nccl-log` on a copy",
        )
    if not judged:
        return skip(
            f"{len(silent)} recent job log{'s' if len(silent) > 1 else ''} without NCCL lines "
            "(jobs need NCCL_DEBUG=INFO for this check)" + (f"; {_strays(strays)}" if strays else "")
        )
    evidence = list(cut_note)  # a failure stands even with cut lines; they are named here
    evidence += [_strays(strays)] if strays else []
    evidence += [f"{d}: cannot be listed by this user (permission denied): its logs were not read" for d in denied]
    data: dict[str, Any] = {"files": {}}
    for path, report in judged:
        j = report.to_json()
        data["files"][path] = {
            k: j[k] for k in ("status", "network", "link_layer", "gpudirect_rdma", "net_channels", "single_node")
        }
        data["files"][path]["errors"] = j["error_count"]
        for f in report.findings:
            at = ", ".join(str(r.line) for r in f.refs[:4])
            evidence.append(f"{path}: {f.status.value}: {f.message}" + (f" (line {at})" if at else ""))
    worst_path, worst_report = max(judged, key=lambda pr: ("ok", "warn", "fail").index(pr[1].status.value))
    status = worst_report.status.value
    others = len(judged) - 1
    summary = f"{worst_path}: {headline(worst_report)}"
    if others:
        counts = {s: sum(1 for _, r in judged if r.status.value == s) for s in ("fail", "warn", "ok")}
        summary += " (" + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(judged)} job logs)"
    remedy = next((f.remedy for f in worst_report.findings if f.status.value == status and f.remedy), "")
    worst = [f.message for f in worst_report.findings if f.status.value == status]
    action = "INVESTIGATE" if worst and all("transport error" in m for m in worst) else "FIX_CONFIG"
    if status == "fail":
        return fail(summary, remedy=remedy, data={**data, "action": action}, evidence=evidence, action=action)
    if status == "warn":
        return warn(summary, remedy=remedy, data={**data, "action": action}, evidence=evidence, action=action)
    return ok(summary, data=data, evidence=evidence)


@check(needs=["command nvidia-smi", "command all_reduce_perf"], timeout=300, action="INVESTIGATE")
def busbw(
    host: Host,
    *,
    min_busbw: float,
    binary: str = "all_reduce_perf",
    gpus: int = 0,
    min_bytes: str = "1",
    max_bytes: str = "8G",
    required: bool = False,
) -> Result:
    """all_reduce_perf (nccl-tests) on this node's GPUs reaches a peak bus bandwidth of `min_busbw` GB/s.

    Why: a node whose NVLink/NVSwitch or PCIe path is degraded (a link down, a GPU on the wrong
    PCIe generation, P2P disabled) still passes every static check and then slows every job it
    joins; the bus bandwidth nccl-tests measures shows it.

    How: runs `binary -b min_bytes -e max_bytes -f 2 -g GPUS` (GPUS from `gpus`, or the
    count of `nvidia-smi -L`) and reads its table as `clustercheck nccl-tests` does: the peak
    busbw (the best of out-of-place and in-place over all sizes) below `min_busbw` fails, as
    do wrong results. Without the binary it skips (errors with `required`). It loads the GPUs:
    run it from a health profile on idle nodes, not in a prolog.

    Fix: compare with a healthy node of the same kind (`nvidia-smi topo -m`, `nvidia-smi nvlink
    -s`, the PCIe link width and speed in `nvidia-smi -q`), reseat or replace the part, and
    check NCCL_P2P_DISABLE/NCCL_P2P_LEVEL are not set on the node.

    Action: INVESTIGATE (compare with a healthy node of the kind before replacing a part). A
    failure that is only the bus bandwidth below `min_busbw` says `performance: true` in its data
    (the sweep measures it once more before a drain); wrong results do not.
    """
    found = host.run("sh", "-c", 'command -v -- "$1"', "sh", binary)
    if found.exit_code != 0 or not found.stdout.strip():
        message = f"{binary} (nccl-tests) is not installed on this node (not in PATH)"
        if required:
            raise RuntimeError(message)
        return skip(message)
    n = gpus
    if n <= 0:
        listing = host.output("nvidia-smi", "-L")
        n = sum(1 for line in listing.splitlines() if line.startswith("GPU "))
        if n == 0:
            raise RuntimeError("nvidia-smi -L lists no GPU")
    run = host.run(binary, "-b", min_bytes, "-e", max_bytes, "-f", "2", "-g", str(n))
    if run.timed_out:
        raise RuntimeError(f"{binary} did not finish within the check's time budget: {run.describe()}")
    from clustercheck.analyzers import nccl_tests

    try:
        parsed = nccl_tests.parse(run.stdout, binary)
    except nccl_tests.NotATable:
        detail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"{shlex.join(run.argv)} exited {run.exit_code} without a result table: {detail[0]}"
        ) from None
    report = nccl_tests.judge(parsed, min_busbw=min_busbw)
    thresholds = report.findings[len(parsed.findings) :]  # what judge() added: the busbw verdict
    peak = report.peak
    assert peak is not None
    data = {
        "peak_busbw": peak.busbw,
        "peak_size": peak.size,
        "avg_busbw": report.avg_busbw,
        "gpus": n,
        "rows": len(report.rows),
        "wrong": sum(r.out_of_place.wrong + r.in_place.wrong for r in report.rows),
    }
    evidence = [f"{f.status.value}: {f.message}" for f in report.findings]
    bad = [f for f in report.findings if f.status.value == "fail"]
    avg = f", avg {report.avg_busbw:g} GB/s" if report.avg_busbw is not None else ""
    if bad:
        data["performance"] = all(f in thresholds for f in bad)  # a measurement below the threshold only
        return fail(
            "; ".join(f.message for f in bad) + f" ({n} GPUs{avg})",
            remedy="Compare `nvidia-smi topo -m` and `nvidia-smi nvlink -s` with a healthy node; check the PCIe "
            "links (`nvidia-smi -q`: Link Width, Link Generation) and that NCCL_P2P_DISABLE is not set.",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"peak bus bandwidth {peak.busbw:.1f} GB/s on {n} GPUs (at least {min_busbw:g} GB/s){avg}",
        data=data,
        evidence=evidence,
    )


# -- nccl.loopback: all_reduce_perf on the node's GPUs, traffic forced through the NICs ------------

#: The judge and the environment of each variant live in clustercheck.facts.nccl_run: the sweep's
#: two-node form (nccl.pairs) judges its runs with the same function.
LoopbackError = NcclRunError


def _validate_loopback(params: Any, profiles: tuple[str, ...]) -> list[str]:
    problems = []
    if params.get("variant") not in ("network", "nvlink"):
        problems.append(f"variant must be network or nvlink, got {params.get('variant')!r}")
    if params.get("expect") not in ("", "ib", "roce", "ofi"):
        problems.append(f"expect must be ib, roce, ofi or empty (any RDMA network), got {params.get('expect')!r}")
    if not params.get("min_busbw", 0) > 0:
        problems.append(f"min_busbw must be a bus bandwidth above 0 GB/s, got {params.get('min_busbw')!r}")
    prolog = next((p for p in profiles if "prolog" in p.lower()), None)
    if prolog is not None:
        problems.append(
            "all_reduce_perf takes every GPU and NIC of the node for tens of seconds: not in a prolog profile "
            f"(this one is or extends {prolog!r}); run it from a profile for nodes out of service (deep)"
        )
    return problems


loopback_argv = run_argv


@check(
    needs=["command env", "command all_reduce_perf", "command nvidia-smi"],
    timeout=300,
    validate=_validate_loopback,
    action="INVESTIGATE",
)
def loopback(
    host: Host,
    *,
    min_busbw: float,
    variant: str = "network",
    expect: str = "",
    require_gdr: bool = True,
    binary: str = "all_reduce_perf",
    gpus: int = 0,
    min_bytes: str = "8M",
    max_bytes: str = "1G",
    factor: int = 2,
) -> Result:
    """all_reduce_perf on the node's GPUs with traffic through the NICs: RDMA, GPUDirect RDMA, no errors, busbw.

    Why: the failure clustercheck exists for - a container that sees the GPUs but not
    /dev/infiniband, so NCCL silently runs over TCP - is only proven by running NCCL the way jobs
    run it. With P2P and shared memory disabled, even one node's GPUs talk through its NICs and
    back, so one node proves its NICs, GPUDirect RDMA and NCCL's network choice (Azure's aznhc
    runs the same IB-loopback all_reduce).

    How: runs `env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,NET NCCL_P2P_DISABLE=1
    NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 all_reduce_perf -b MIN -e MAX -f FACTOR -g GPUS`
    (GPUS: `gpus`, or the count of `nvidia-smi -L`; at least 2; sizes 8M..1G by default, seconds
    to a minute). NCCL's log is judged by the nccl-log analyzer: TCP sockets (NCCL_IB_DISABLE,
    no /dev/infiniband or libibverbs in the image) fail, so do a network other than `expect`
    (ib, roce, ofi), network channels without GPUDirect RDMA (`require_gdr`, default on) and
    transport errors; a log that shows no network selection or no network channel is an error.
    The table is read as `clustercheck nccl-tests` does: peak bus bandwidth below `min_busbw`
    GB/s (per site and SKU, from a healthy node of the kind, less a margin) fails, as
    do wrong results. Variant `nvlink`: NCCL_P2P_LEVEL=NVL NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1,
    every channel must be NVLink P2P (a network channel means a GPU pair without NVLink), and
    `min_busbw` is the NVLink figure. The budget is the check's `timeout` (300 s), after which
    all_reduce_perf and its children are killed. Refused in prolog profiles at load time; the tool
    missing, no table, no NCCL lines and a non-zero exit are errors, never a pass.

    Fix: sockets: expose /dev/infiniband and the verbs libraries to the job's container (the
    finding names the cause NCCL printed); no GPUDirect RDMA: load nvidia_peermem (or use DMA-BUF);
    transport errors: the HCA's port counters and cable; low busbw: `rdma.bandwidth` per HCA.

    Action: FIX_CONFIG (TCP sockets, the wrong network, GPUDirect RDMA off); INVESTIGATE (transport
    errors, wrong results, bus bandwidth below `min_busbw`: that failure alone says `performance:
    true` in its data, so the sweep measures it once more before a drain).
    """
    data: dict[str, Any] = {"variant": variant, "action": None}
    n = gpus
    if n <= 0:
        listing = host.run("nvidia-smi", "-L")
        if listing.exit_code == 127:
            raise LoopbackError(
                f"nvidia-smi is not installed on {host.name}: cannot count the GPUs",
                "install the NVIDIA driver's utilities, or set the check's `gpus`",
                {**data, "action": "FIX_CONFIG"},
            )
        n = sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
    if n < 2:
        raise LoopbackError(
            f"{n} GPU(s) on {host.name}: a loopback all_reduce needs at least 2 (one GPU sends nothing)",
            "set the check's `gpus` to the node's GPU count, or leave nccl.loopback out for one-GPU nodes",
            data,
        )
    argv = loopback_argv(variant, binary, n, min_bytes, max_bytes, factor)
    run = host.run(*argv, timeout=300)
    command = shlex.join(argv)
    data.update({"command": command, "gpus": n, "exit_code": run.exit_code})
    if run.timed_out:
        raise LoopbackError(
            f"`{command}` did not finish within {run.duration_s:.0f} s; it was stopped",
            "look for a hung NCCL init (a NIC that does not answer) in `clustercheck nccl-log` of a manual run, or "
            "raise the check's timeout",
            data,
        )
    if run.exit_code == 127 and "NCCL" not in run.stdout:
        raise LoopbackError(
            f"{binary} is not installed on {host.name} ({last_line(run.stderr) or 'not found'})",
            f"install {NCCL_TESTS_PACKAGE}",
            {**data, "action": "FIX_CONFIG"},
        )
    return judge_loopback(
        run.stdout,
        run.stderr,
        run.exit_code,
        variant=variant,
        expect=expect,
        require_gdr=require_gdr,
        min_busbw=min_busbw,
        binary=binary,
        data=data,
    )


judge_loopback = judge_run
