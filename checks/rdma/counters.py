"""rdma.counters: IB/RoCE port error counters judged as increases, and link flaps.

Reads, in one shell command per node (read only): `grep -H .` over
/sys/class/infiniband/*/ports/*/{link_layer,state} and every file of
/sys/class/infiniband/*/ports/*/counters/ and hw_counters/ (twice, `sleep` between, with
`sample_s`); /proc/sys/kernel/random/boot_id; the kernel log (`dmesg`, else `journalctl -k
-b`, the kernel_log fact gpu.xid shares) for mlx5 link down/up lines; the log files the profile
names (syslog) for networkd's carrier lines. The parsers are clustercheck.facts.infiniband's
(parse_counters, counter_delta, parse_link_events, count_flaps).
"""

# Sources: drivers/infiniband/core/sysfs.c (counter names and widths, PORT_PMA_ATTR);
# infiniband-diags' error_thresholds example (SymbolErrorCounter=10, LinkErrorRecoveryCounter=10,
# VL15Dropped=100) for the defaults; corpus ib_sysfs/gpud-sys-class-infiniband-h100.0 (a real
# tree: saturated link_downed 255, 4-bit counters at 15) and kernel_log/ (mlx5 and networkd lines).

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.errors import CommandTimeout, HostError, NotRecorded
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.infiniband import (
    Delta,
    Flaps,
    Port,
    PortCounters,
    count_flaps,
    counter_delta,
    is_saturated,
    natural_key,
    parse_counters,
    parse_link_events,
    parse_port_attrs,
    port_selected,
    span,
    split_sections,
)

from . import _may_have_hcas


class Rule(NamedTuple):
    """How one counter is judged: the largest increase allowed, and what more means."""

    limit: int
    status: str  # "fail" or "warn"
    meaning: str


# Cable/physical-layer counters fail (CHECK_CABLE); congestion, buffer and transport-retry
# counters warn (INVESTIGATE): they rise with load and misconfiguration, not only with a bad link.
RULES: dict[str, Rule] = {
    "symbol_error": Rule(10, "fail", "symbol errors (bit errors on the wire: cable, transceiver, port)"),
    "link_error_recovery": Rule(10, "fail", "link retrainings (the link recovered from errors)"),
    "port_rcv_errors": Rule(10, "fail", "malformed packets received (CRC errors and the like)"),
    "local_link_integrity_errors": Rule(5, "fail", "local link integrity errors (physical errors above the limit)"),
    "excessive_buffer_overrun_errors": Rule(5, "warn", "buffer overruns (flow control lost: credits, congestion)"),
    "port_rcv_remote_physical_errors": Rule(100, "warn", "packets marked bad by a remote link (EBP)"),
    "port_rcv_switch_relay_errors": Rule(100, "warn", "packets the switch could not relay"),
    "port_xmit_discards": Rule(100, "warn", "outbound packets discarded (congestion or a down peer)"),
    "port_xmit_constraint_errors": Rule(100, "warn", "outbound packets dropped by partition/filter constraints"),
    "port_rcv_constraint_errors": Rule(100, "warn", "inbound packets dropped by partition/filter constraints"),
    "VL15_dropped": Rule(100, "warn", "subnet management packets dropped"),
    "out_of_sequence": Rule(100, "warn", "packets out of sequence (RoCE: drops in a lossy fabric, see roce.qos)"),
    "packet_seq_err": Rule(100, "warn", "NAKs for packet sequence errors (retransmissions)"),
    "implied_nak_seq_err": Rule(100, "warn", "implied NAK sequence errors (retransmissions)"),
    "rnr_nak_retry_err": Rule(10, "warn", "receiver-not-ready retries exhausted (a QP went to error)"),
    "local_ack_timeout_err": Rule(10, "warn", "ACK timeouts (a QP retried until it gave up: lost packets)"),
}
FLAPS = "link_downed"  # judged against max_flaps, with the kernel log's link lines
_THRESHOLD_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]{0,79})\s*=\s*(\d{1,12})\s*$")

PORTS_GLOB = "/sys/class/infiniband/*/ports/*"
READ = f"grep -H . {PORTS_GLOB}/counters/* {PORTS_GLOB}/hw_counters/*"  # a line of both scripts
# The gather, as real files in facts/scripts/: one reading, or (sample_s > 0) two with a sleep
# between. Only the window's length varies, a number filled in as Python writes it.
_ONCE = script_text("rdma_counters.sh").removesuffix("\n")
_NUMBER_RE = re.compile(r"\d{1,6}(?:\.\d{1,12})?(?:e-\d{1,3})?")


def gather_script(sample_s: float) -> str:
    """The one command: port attributes, the counters, and (with a window) the counters again.

    `sample_s` goes into the script only as the digits of a number (ValueError otherwise)."""
    if isinstance(sample_s, bool) or not isinstance(sample_s, (int, float)) or not math.isfinite(sample_s):
        raise ValueError(f"sample_s: {sample_s!r} is not a number of seconds")
    if not sample_s > 0:
        return _ONCE
    seconds = f"{sample_s:g}"
    if not _NUMBER_RE.fullmatch(seconds):
        raise ValueError(f"sample_s: {sample_s!r} is not a number of seconds from 0 (off) to 300")
    return script_text("rdma_counters_window.sh", SAMPLE_S=seconds).removesuffix("\n")


def parse_thresholds(entries: tuple[str, ...] | list[str]) -> dict[str, Rule]:
    """`name=N` entries over the defaults; ValueError naming a bad one."""
    rules = dict(RULES)
    for entry in entries:
        m = _THRESHOLD_RE.match(str(entry))
        if not m:
            raise ValueError(f"thresholds: {entry!r} is not COUNTER=N (e.g. symbol_error=10)")
        name, limit = m.group(1), int(m.group(2))
        if name == FLAPS:
            raise ValueError("thresholds: link_downed is judged by max_flaps (how many link downs are allowed)")
        old = rules.get(name)
        rules[name] = Rule(limit, old.status if old else "warn", old.meaning if old else name.replace("_", " "))
    return rules


def _validate(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    problems = []
    try:
        parse_thresholds(tuple(params.get("thresholds") or ()))
    except ValueError as exc:
        problems.append(str(exc))
    sample = params.get("sample_s", 0.0)
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 <= sample <= 300:  # NaN too
        problems.append(f"sample_s: {sample!r} is not a number of seconds from 0 (off) to 300")
    flaps = params.get("max_flaps", 0)
    if not isinstance(flaps, int) or isinstance(flaps, bool) or flaps < 0:
        problems.append(f"max_flaps: {flaps!r} is not a count (0: any link down fails)")
    for path in params.get("log_files") or ():
        if not str(path).startswith("/"):
            problems.append(f"log_files: {path!r} is not an absolute path")
    return problems


def _cannot_tell(host: Host, message: str, data: dict[str, object], evidence: list[str]) -> HostError:
    exc = HostError(host.name, message)
    exc.data = data  # type: ignore[attr-defined]  # the runner keeps a HostError's data and evidence
    exc.evidence = evidence  # type: ignore[attr-defined]
    return exc


def _boot_id(host: Host) -> str | None:
    try:
        text = host.read_optional("/proc/sys/kernel/random/boot_id")
    except HostError:  # not recorded in a fixture
        return None
    value = (text or "").strip()
    return value if re.fullmatch(r"[0-9a-f-]{36}", value) else None


_STAMP_RE = re.compile(r"^\s{0,40}\[\s{0,12}(\d{1,10}\.\d{1,9})\]")


def _last_stamp(text: str) -> float | None:
    for line in reversed(text.splitlines()[-200:]):
        m = _STAMP_RE.match(line)
        if m:
            return float(m.group(1))
    return None


def _flap_text(f: Flaps, where: str) -> str:
    name = f"{f.interface}" + (f" ({f.pci})" if f.pci else "")
    now = "" if f.up_now is None else (", up again" if f.up_now else ", still down")
    return f"{name} lost its link {f.downs} time{'s' if f.downs != 1 else ''} ({where}{now})"


@check(
    needs=["command sh", "command grep", "command dmesg", "file /proc/sys/kernel/random/boot_id"],
    timeout=20,
    validate=_validate,
    action="CHECK_CABLE",
)
def counters(
    host: Host,
    *,
    names: tuple[str, ...] = (),
    sample_s: float = 0.0,
    thresholds: tuple[str, ...] = (),
    max_flaps: int = 0,
    kernel_log: bool = True,
    log_files: tuple[str, ...] = (),
) -> Result:
    """No IB/RoCE port gained more errors than its thresholds, and no link flapped.

    Why: a cable or transceiver going bad shows first as symbol errors, link retrainings
    (link_error_recovery) and link downs; NCCL then sees retransmissions, hangs or a rail
    dropping out mid-job, long before the port goes DOWN for rdma.ports to see. The counters
    only ever add up, so their totals say little about a port that has run for months: what
    matters is how fast they rise now.

    How: reads every file of /sys/class/infiniband/<HCA>/ports/<N>/counters/ (the IB
    PortCounters) and hw_counters/ (the driver's, e.g. mlx5's RoCE out_of_sequence,
    packet_seq_err, rnr_nak_retry_err, local_ack_timeout_err) and judges how much each rose:
    over a window of `sample_s` seconds (read, sleep on the node, read again: one command), or,
    with `sample_s: 0`, since this check's previous run in `clustercheck prolog` or `health` (a
    marker beside the prolog's state file keeps the readings and the boot id; the first run,
    a new boot, or `clustercheck run`, which keeps no state, has nothing to compare and skips,
    saying so). `thresholds` takes `COUNTER=N` entries (the most a counter may rise) over the
    defaults (symbol_error, link_error_recovery, port_rcv_errors 10, local_link_integrity 5
    fail; congestion and retry counters warn). A link flap is a link_downed increase, an mlx5
    `Link down` after a `Link up` in the kernel log, or networkd's `lost carrier` in
    `log_files` (e.g. /var/log/syslog); more than `max_flaps` fails. A counter that went
    backwards (cleared, or a 32-bit hw counter that wrapped) is no error burst: it is said and
    taken as the new base. An IB error counter at its maximum (link_downed 255, a 4-bit counter
    at 15) has stopped counting: that warns. `names` selects HCAs as in rdma.ports. No
    readable counters (a container without /sys/class/infiniband) is an error, never ok; a node
    with no RDMA stack at all (no ib_core in /proc/modules, or no /proc/modules and no
    /sys/class/infiniband) skips without running the gather, so the prolog runs it everywhere.

    Fix: symbol errors, retrainings, link downs: reseat or replace the cable or transceiver
    (`mlxlink -d <HCA> -m -c` shows the BER and the cable), check the switch port at the other
    end. Congestion counters: see the fabric's load and, on RoCE, roce.qos (PFC/ECN). After
    the repair clear the counters: `perfquery -C <HCA> -P <port> -R`.
    """
    rules = parse_thresholds(thresholds)
    if sample_s < 0:
        raise ValueError(f"sample_s: {sample_s!r} is negative")
    if sample_s > 0 and host.deadline is not None:
        left = host.deadline - time.monotonic()
        if sample_s + 2 > left:
            raise HostError(
                host.name,
                f"cannot tell: a window of sample_s {sample_s:g} s does not fit the check's budget ({left:.0f} s "
                "left): raise the check's timeout or shorten sample_s",
            )
    if not _may_have_hcas(host):
        # the prolog runs this on every node: one without an RDMA stack is told apart by two reads
        # (/proc/modules, /sys/class/infiniband), without starting the gather
        return skip(
            "no RDMA stack on this node (no ib_core module, no /sys/class/infiniband): no counters to judge",
            data={"sample_s": sample_s},
        )
    script = gather_script(sample_s)
    argv = ("sh", "-c", script)
    named = shown_with(argv, script, "'<rdma counters gather script>'")
    result = host.run(*argv, timeout=host.command_timeout + sample_s, shown_as=named)
    if result.timed_out:
        raise CommandTimeout(host.name, f"reading the port counters did not finish within {result.duration_s:.1f} s")
    sections = split_sections(result.stdout)
    if "counters" not in sections:
        raise HostError(host.name, f"the counter gather printed no sections: {result.describe()}")
    attrs = parse_port_attrs(sections.get("ports", []))
    first = parse_counters(sections.get("counters", []))
    keys = sorted(set(attrs) | set(first), key=lambda k: (natural_key(k[0]), k[1]))
    chosen = [k for k in keys if port_selected(Port(k[0], k[1]), names)]
    data: dict[str, object] = {"sample_s": sample_s}
    refused = [line for line in result.stderr.splitlines() if "ermission denied" in line][:5]
    if not chosen:
        which = f" of HCAs matching {', '.join(names)}" if names else ""
        return skip(f"no RDMA port{which} under /sys/class/infiniband: no counters to judge", data=data)
    evidence = [
        f"{h} port {p}: {attrs.get((h, p), {}).get('link_layer', '?')}, {attrs.get((h, p), {}).get('state', '?')}"
        for h, p in chosen
    ]
    # a port with only hw_counters/ (a RoCE driver without the IB PMA counters) is judged by those
    unreadable = [
        f"{h} port {p}"
        for h, p in chosen
        if not ((got := first.get((h, p))) is not None and (got.counters or got.hw_counters))
    ]
    if len(unreadable) == len(chosen):
        why = f" ({'; '.join(refused)})" if refused else ""
        raise _cannot_tell(
            host,
            f"cannot tell: no error counter readable under {PORTS_GLOB}/counters/ for {span(unreadable)}{why}: "
            "in a container sysfs may hide them; run the check on the host",
            data,
            evidence,
        )

    # -- the readings to compare ---------------------------------------------------------------
    boot = _boot_id(host)
    from clustercheck import slurm

    previous = slurm.read_marker("rdma.counters")
    same_boot = bool(previous and boot and previous.get("boot_id") == boot)
    before: dict[tuple[str, int], PortCounters] | None = None
    if sample_s > 0:
        after = parse_counters(sections.get("after", []))
        if not after:
            raise _cannot_tell(
                host, "cannot tell: the second reading of the sampled window printed no counters", data, evidence
            )
        before, window = first, f"over a {sample_s:g} s window"
    else:
        after = first
        window = "since the previous run"
        if same_boot and previous is not None:
            before = _from_marker(previous.get("counters"))
            at = previous.get("time")
            if before is not None and isinstance(at, (int, float)):
                evidence.append(f"previous reading {max(time.time() - at, 0):.0f} s ago (same boot)")
    data["window"] = window if before is not None else "none"

    # -- counters --------------------------------------------------------------------------------
    fails: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    saturated: list[str] = []
    rebased: list[str] = []
    judged: list[dict[str, object]] = []
    kept: dict[str, dict[str, int]] = {}
    for key in chosen:
        now = after.get(key)
        if now is None:
            continue
        label = now.label
        kept[f"{key[0]}:{key[1]}"] = {
            n: v for n, v in (*now.counters.items(), *now.hw_counters.items()) if n in rules or n == FLAPS
        }
        for name, value in now.counters.items():
            if (name in rules or name == FLAPS) and is_saturated(name, value):
                saturated.append(f"{label} {name} {value}")
        then = before.get(key) if before is not None else None
        if then is None:
            continue
        rises: dict[str, int] = {}
        for name in sorted({*rules, FLAPS}):
            hw = name not in now.counters and name in now.hw_counters
            old, new = then.value(name), now.value(name)
            if old is None or new is None:
                continue
            d: Delta = counter_delta(name, old, new, hw=hw)
            if d.increase is None:
                rebased.append(
                    f"{label} {name} went from {old} to {new} (cleared, or a 32-bit counter wrapped): "
                    "taken as the new base, not counted"
                )
                continue
            if d.increase:
                rises[name] = d.increase
            if name == FLAPS:
                if d.increase > max_flaps:
                    fails.append(
                        f"{label} went down {d.increase} time{'s' if d.increase != 1 else ''} {window} "
                        f"(link_downed {old} -> {new})"
                    )
                continue
            rule = rules[name]
            if d.increase > rule.limit:
                said = f"{label} {name} +{d.increase} {window} (limit {rule.limit}): {rule.meaning}"
                (fails if rule.status == "fail" else warns).append(said)
        judged.append({"hca": key[0], "port": key[1], "increases": rises})
        if rises:
            evidence.append(f"{label} {window}: " + ", ".join(f"{n} +{v}" for n, v in sorted(rises.items())))
    if saturated:
        warns.append(f"saturated (an IB error counter stops at its maximum and counts no more): {_fold(saturated)}")
    if unreadable:
        notes.append(f"no counters readable for {span(unreadable)}")
    data.update({"ports": judged, "saturated": saturated, "rebased": rebased})

    # -- link flaps in the logs --------------------------------------------------------------------
    flaps: list[dict[str, object]] = []
    marker_logs: dict[str, dict[str, object]] = {}
    last_uptime: float | None = None
    if kernel_log:
        # imported here: every rdma module loads with rdma.ports on the prolog path (~10 ms of import)
        from clustercheck.facts.kernel_log import kernel_log as shared_kernel_log

        try:
            text, source = shared_kernel_log(host)  # read once per run, shared with gpu.xid
        except NotRecorded:  # a replay strictly lacking it: re-record, never judged without
            raise
        except HostError as exc:
            text, source = None, str(exc).removeprefix("cannot tell: ")
        if text is None:
            notes.append(f"kernel log unreadable ({source[:160]}): flaps judged from link_downed only")
        else:
            after_uptime = previous.get("uptime_s") if same_boot and previous else None
            after_uptime = after_uptime if isinstance(after_uptime, (int, float)) else None
            last_uptime = _last_stamp(text)
            part = "since the previous run" if after_uptime is not None else "since boot"
            evidence.append(f"{len(text.splitlines())} lines of kernel log from `{source}`; judged {part}")
            for f in count_flaps(parse_link_events(text), after_uptime=after_uptime):
                flaps.append(f._asdict() | {"log": source})
                if f.downs > max_flaps:
                    fails.append(_flap_text(f, f"{source} lines {', '.join(map(str, f.lines[:6]))}"))
    # a log file outlives a boot: what an earlier run judged of it is kept by its first line (a rotated
    # file starts over) and, per interface, how many carrier losses it had then
    old_logs = previous.get("logs") if previous and isinstance(previous.get("logs"), dict) else {}
    for path in log_files:
        log = host.read_optional(path)
        if log is None:
            notes.append(f"{path} is absent")
            continue
        head = log.split("\n", 1)[0][:200]
        seen = old_logs.get(path) if isinstance(old_logs, dict) else None
        judged_downs = seen.get("downs") if isinstance(seen, dict) and seen.get("head") == head else None
        skip_n = (
            {str(k): v for k, v in judged_downs.items() if isinstance(v, int)} if isinstance(judged_downs, dict) else {}
        )
        events = parse_link_events(log)
        totals: dict[str, int] = {}
        for e in events:
            if e.source == "carrier" and not e.up:
                totals[e.interface] = totals.get(e.interface, 0) + 1
        marker_logs[path] = {"head": head, "downs": totals}
        before_n = sum(skip_n.values())
        evidence.append(
            f"{path}: {len(events)} link lines" + (f", {before_n} losses judged before" if before_n else "")
        )
        for f in count_flaps(events, skip=skip_n):
            flaps.append(f._asdict() | {"log": path})
            if f.downs > max_flaps:
                fails.append(_flap_text(f, f"{path} lines {', '.join(map(str, f.lines[:6]))}"))
    data["flaps"] = flaps
    data["problems"] = fails + warns
    if boot and slurm.marker_folder() is not None:
        marker: dict[str, object] = {"name": "rdma.counters", "boot_id": boot, "time": round(time.time(), 3)}
        marker["counters"] = kept
        if last_uptime is not None:
            marker["uptime_s"] = last_uptime
        if marker_logs:
            marker["logs"] = marker_logs
        data["marker"] = marker
    evidence += rebased + notes
    if previous and not same_boot and sample_s == 0:
        evidence.append("the previous reading is of another boot: counters start over, this reading is the new base")

    # -- verdict -------------------------------------------------------------------------------------
    remedy = (
        "Reseat or replace the cable/transceiver of the ports named (`mlxlink -d HCA -m -c` shows the BER and the "
        "cable), check the switch port at the far end; congestion counters: see the fabric's load and roce.qos on "
        "RoCE. After a repair clear the counters: `perfquery -C HCA -P PORT -R`."
    )
    back = (
        f"; {len(rebased)} counter{'s' if len(rebased) != 1 else ''} went backwards (cleared, or a 32-bit counter "
        "wrapped): taken as the new base"
        if rebased
        else ""
    )
    if fails:
        return fail("; ".join(fails + warns) + back, remedy=remedy, data=data, evidence=evidence)
    if warns:
        return warn("; ".join(warns) + back, remedy=remedy, data=data, evidence=evidence, action="INVESTIGATE")
    if unreadable:
        raise _cannot_tell(host, f"cannot tell: {notes[0]} (sysfs hides them in some containers)", data, evidence)
    ports_said = f"{len(judged) or len(chosen)} port{'s' if len(chosen) != 1 else ''}"
    if before is None:
        why = (
            "no earlier reading on this boot (first run, or a new boot)"
            if slurm.marker_folder() is not None
            else "`clustercheck run` keeps no reading between runs (set sample_s to judge a window)"
        )
        return skip(
            f"counters of {ports_said} read, nothing to compare them with: {why}; no link flap in the logs read",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"{ports_said}: no error counter above its threshold {window}, no link flap{back}",
        data=data,
        evidence=evidence,
    )


def _fold(entries: list[str]) -> str:
    """'mlx5_0 port 1 x 15', 'mlx5_1 port 1 x 15' -> 'x 15 on mlx5_0 port 1, mlx5_1 port 1' (span for many)."""
    groups: dict[str, list[str]] = {}
    for entry in entries:
        hca, _, rest = entry.partition(" port ")
        port, _, what = rest.partition(" ")
        groups.setdefault(what, []).append(f"{hca} port {port}")
    return "; ".join(
        f"{what} on {span(where)}" + (f" ({len(where)} ports)" if len(where) > 3 else "")
        for what, where in groups.items()
    )


def _from_marker(value: object) -> dict[tuple[str, int], PortCounters] | None:
    """The readings a marker kept ({"mlx5_0:1": {name: value}}), or None when it holds none usable."""
    if not isinstance(value, dict):
        return None
    out: dict[tuple[str, int], PortCounters] = {}
    for label, counts in value.items():
        hca, _, port = str(label).rpartition(":")
        if not hca or not port.isdigit() or not isinstance(counts, dict):
            continue
        kept = {str(k): int(v) for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
        out[(hca, int(port))] = PortCounters(hca, int(port), kept, {})
    return out or None
