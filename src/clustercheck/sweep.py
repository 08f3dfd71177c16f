"""`clustercheck sweep`, its decisions: pure, so every branch is tested without Slurm.

The sweep takes nodes through Slurm one exclusive allocation each, runs a profile on them
(`clustercheck run --local -p PROFILE -f json` inside the allocation), drains what fails and
resumes what it drained once it passes. The Slurm side (sinfo, scontrol, srun, reservations,
signals) is in clustercheck.commands.sweep; this module says, from what those print:

- which nodes to test (`plan`): idle ones only, never one running a job or drained, downed or
  rebooting by anyone else; a node the sweep itself drained (its record proves it, as
  `health`'s does: clustercheck.slurm.recorded_drain) is tested again to be resumed;
- what runs on each (`node_argv`, `srun_argv`, `reservation_argv`);
- which failures are measured a second time (`needs_second_pass`, `merge_passes`): a failed
  check whose data says `performance: true` (a bandwidth, a throughput) is run once more
  before a drain, and the second measurement decides: one slow run is not a bad node;
- what to do once the node is judged (`retest_decision`), through slurm.decide, the same rules
  as `clustercheck health`, with the failed check's action in the drain reason;
- for `--pairs` (nccl.pairs; rdma.bandwidth between two nodes, rdma.pairs): which pairs of the
  nodes that passed to measure together
  (`leaf_groups`, `choose_pairs`, `schedule`), how (`pair_srun_argv`, inside the site's image),
  each pair's verdict (`judge_pair`: nccl.loopback's judge, clustercheck.facts.nccl_run), the
  straggler (`stragglers`: slow in every pair it is in, proven by a partner fast elsewhere) and
  each node's `nccl.pairs` result (`pair_results`); and for rdma.bandwidth's pair form what
  each pair runs (`rdma_pair_argv`: ib_write_bw's server on one node, its client on the other,
  per HCA port, facts/scripts/rdma_pair.sh), its verdict (`judge_rdma_pair`: each end against
  its port's rate, facts.perftest.judge_bw), its straggler and each node's `rdma.pairs` result.
"""

from __future__ import annotations

import itertools
import math
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from clustercheck.facts import script_text
from clustercheck.result import CheckResult, Status
from clustercheck.slurm import Decision, NodeState, recorded_drain

#: Where the sweep keeps the reasons it set, on the host it runs on ({node}: the node).
DEFAULT_RECORD_FILE = "/var/lib/clustercheck/sweep-{node}.json"
#: Every sweep job and reservation is named with this, then the sweep's own token.
NAME_PREFIX = "clustercheck-sweep"
#: The id of the result a node the sweep did not run the profile on gets in the merged report.
SWEEP_CHECK = "sweep.node"
#: A check's data says it is a performance measurement with `performance: true`.
PERFORMANCE = "performance"
#: How long srun waits for the allocation of an idle node before giving up (--immediate).
IMMEDIATE_S = 30

#: Node state flags that say the node is not ready for a test, whatever its base state.
_NOT_READY = frozenset(
    {
        "NOT_RESPONDING",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "POWER_DOWN",
        "POWER_UP",
        "FAIL",
        "INVALID_REG",
        "COMPLETING",
        "PLANNED",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
    }
)
#: A reservation flag on the node: fine only inside a reservation the sweep uses.
_RESERVED = frozenset({"RESERVED", "MAINT"})
_BUSY = ("ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "COMP")


class Plan(NamedTuple):
    """What the sweep does with one node, from its Slurm state: test it, test it again to resume
    the sweep's own drain (`retest`), or leave it alone (`skip`, with why)."""

    node: str
    kind: str  # "test", "retest", "skip"
    why: str
    state: NodeState | None = None
    entry: Mapping[str, Any] | None = None  # the record of the sweep's drain, for a retest


def plan(state: NodeState, record: Mapping[str, Any] | None, *, reserved_ok: bool = False) -> Plan:
    """Whether to test the node now (the state is read right before each decision)."""
    node = state.name
    shown = state.state + (f", reason {state.reason!r}" if state.reason else "")
    if state.reboot_pending:
        return Plan(node, "skip", f"{node} has a reboot pending ({shown}): left alone", state)
    if state.base in _BUSY or "COMPLETING" in state.flags:
        return Plan(node, "skip", f"{node} is {shown}: running a job, never tested beside one", state)
    entry = recorded_drain(state, record) if state.drained else None
    not_ready = sorted(state.flags & (_NOT_READY | (frozenset() if reserved_ok else _RESERVED)))
    if state.base != "IDLE" or not_ready:
        if state.drained and entry is None:
            return Plan(node, "skip", f"{node} is {shown}, not drained by this sweep: left alone", state)
        flags = f" ({', '.join(not_ready)})" if not_ready else ""
        return Plan(node, "skip", f"{node} is {shown}: not idle{flags}, left alone", state)
    if entry is not None:
        return Plan(node, "retest", f"drained by clustercheck sweep ({state.reason}): tested again", state, entry)
    if state.drained or state.down:
        return Plan(node, "skip", f"{node} is {shown}, not drained by this sweep: left alone", state)
    return Plan(node, "test", f"{node} is {state.state}: idle", state)


def node_argv(clustercheck: Sequence[str], profile: str, checks_dirs: Sequence[str], timeout: float) -> list[str]:
    """The command each node runs inside its allocation: the profile, judged on the node itself."""
    argv = [*clustercheck, "run", "--local", "-p", profile, "-f", "json", "--timeout", f"{timeout:g}"]
    for folder in checks_dirs:
        argv += ["--checks", folder]
    return argv


def time_limit_minutes(seconds: float) -> int:
    """srun's --time for a run of `seconds`: whole minutes, with one to spare for the allocation."""
    return max(1, math.ceil(seconds / 60)) + 1


def node_gpus(show_node: str) -> int:
    """The GPUs Slurm knows on the node, from `scontrol show node`'s Gres= (`gpu:8`, `gpu:h100:8(S:0-1)`,
    `gpu:a100:4,nvme:1`, `(null)`): an exclusive allocation gets no GPU it does not ask for."""
    m = re.search(r"(?m)^\s*Gres=(\S+)", show_node)
    total = 0
    for part in re.split(r",(?![^(]*\))", m.group(1) if m else ""):
        fields = re.sub(r"\(.*?\)", "", part).split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def srun_argv(
    node: str,
    command: Sequence[str],
    *,
    job_name: str,
    seconds: float,
    reservation: str | None = None,
    partition: str | None = None,
    gpus: int = 0,
    srun: str = "srun",
) -> list[str]:
    """One exclusive allocation of `node` (no other job beside it), with every GPU of it (--exclusive
    alone gives none where cgroups constrain devices), that gives up rather than wait for a node a job
    took meanwhile (--immediate)."""
    argv = [srun, "-w", node, "-N1", "-n1", "--exclusive", f"--immediate={IMMEDIATE_S}", f"--job-name={job_name}"]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    argv.append(f"--time={time_limit_minutes(seconds)}")
    if reservation:
        argv.append(f"--reservation={reservation}")
    if partition:
        argv.append(f"--partition={partition}")
    return [*argv, *command]


def reservation_argv(
    name: str, nodes: Sequence[str], *, user: str, minutes: int, scontrol: str = "scontrol"
) -> list[str]:
    """A reservation of `nodes` for the sweep's user. Without IGNORE_JOBS Slurm refuses it while a
    job runs on one of them ("Requested nodes are busy"): no test ever lands beside a job. Its
    duration ends it by itself should the sweep be killed outright."""
    return [
        scontrol,
        "create",
        "reservation",
        f"ReservationName={name}",
        f"Nodes={','.join(nodes)}",
        "StartTime=now",
        f"Duration={minutes}",
        f"Users={user}",
    ]


def allocation_refused(stderr: str) -> bool:
    """srun's words when the node was not given (busy, drained, reserved meanwhile)."""
    words = ("Unable to allocate resources", "Requested nodes are busy", "Required node not available")
    return any(w in stderr for w in words)


# -- the second pass ---------------------------------------------------------------------------------


def is_performance(check: CheckResult) -> bool:
    return isinstance(check.data, Mapping) and check.data.get(PERFORMANCE) is True


def needs_second_pass(checks: Sequence[CheckResult]) -> bool:
    """A node whose every failure is a performance measurement is measured once more before a
    drain; one that also fails otherwise is drained for that anyway."""
    failed = [c for c in checks if c.status is Status.FAIL]
    return bool(failed) and all(is_performance(c) for c in failed)


def merge_passes(first: Sequence[CheckResult], second: Sequence[CheckResult] | None) -> tuple[CheckResult, ...]:
    """The first pass's results, each failed performance check replaced by its second measurement
    (which decides: pass or fail again), the first one kept in its evidence and data. A second pass
    that did not measure (it could not run, or has no result for the check) makes it an `error`:
    measured slow once is not evidence enough to drain."""
    again = {c.id: c for c in second or ()}
    merged: list[CheckResult] = []
    for c in first:
        if c.status is not Status.FAIL or not is_performance(c):
            merged.append(c)
            continue
        then = {"status": c.status.value, "summary": c.summary}
        said = f"first pass: {c.status.value}: {c.summary}"
        later = again.get(c.id)
        if later is None or later.status is Status.ERROR:
            why = "its second pass did not run" if later is None else f"its second pass: {later.summary}"
            merged.append(
                replace(
                    c,
                    status=Status.ERROR,
                    summary=f"measured once below the threshold ({c.summary}); {why}: not enough to drain",
                    evidence=(said, *c.evidence),
                    data={**c.data, "first_pass": then},
                    action="",
                )
            )
            continue
        merged.append(
            replace(
                later,
                summary=later.summary + (" (second pass; the first failed)" if later.status is not Status.FAIL else ""),
                evidence=(said, *later.evidence),
                data={**later.data, "first_pass": then, "second_pass": True},
            )
        )
    return tuple(merged)


# -- judging a node the sweep drained before ----------------------------------------------------------


def retest_decision(decision: Decision, before: NodeState, entry: Mapping[str, Any]) -> Decision:
    """What to do with a node the sweep had drained, resumed (inside a reservation) to test it again.

    `decision` is slurm.decide on the node as it was before (drained by clustercheck, with its
    record): `resume` means it passes, and it stays up; anything else (it still fails, or a check
    could not tell) drains it again, with the new reason or the one it had."""
    if decision.action == "resume":
        return Decision("none", f"resumed: {decision.why}")
    checks = tuple(str(c) for c in entry.get("checks") or ())
    if decision.action == "drain" and decision.reason:
        return Decision("drain", decision.why, decision.reason, decision.check, decision.checks)
    return Decision("drain", f"drained again: {decision.why}", before.reason, entry.get("check"), checks)


def skipped(node: str, why: str, status: Status = Status.SKIP) -> CheckResult:
    """The merged report's entry for a node the profile did not run on (why: its state, or what
    went wrong running it)."""
    return CheckResult(SWEEP_CHECK, status, why)


# -- nccl.pairs: two-node all_reduce_perf on pairs chosen from the topology ---------------------------

#: The id of the pairs' results in the merged report (one per node, naming its pairs).
PAIRS_CHECK = "nccl.pairs"
#: The group of nodes under no leaf switch of the topology (or of a sweep without one).
NO_LEAF = "(no leaf)"


class Pair(NamedTuple):
    """Two nodes measured together; `leaf` names the leaf switch they share, or both (`across`)."""

    a: str
    b: str
    leaf: str
    across: bool = False

    @property
    def name(self) -> str:
        return f"{self.a}+{self.b}"

    @property
    def nodes(self) -> tuple[str, str]:
        return (self.a, self.b)


class PairRun(NamedTuple):
    """One measured pair: the verdict of its run (facts.nccl_run.judge_run), what the report shows."""

    pair: Pair
    status: Status
    summary: str
    transport: str | None = None  # NCCL's network (ib, roce, ofi, socket)
    gdr: bool | None = None  # GPUDirect RDMA on every network channel (None: no network channel seen)
    busbw: float | None = None  # peak bus bandwidth, GB/s
    action: str = ""
    remedy: str = ""
    evidence: tuple[str, ...] = ()
    passes: int = 1
    first: Mapping[str, Any] | None = None  # the first pass's verdict, for a pair measured twice
    command: str = ""
    seconds: float = 0.0  # inside srun: the allocation, the Prolog, the run
    round: int = 0  # the round of pairs that share no node it ran in (0: not run)

    def slow(self, min_busbw: float) -> bool:
        return self.busbw is not None and self.busbw < min_busbw

    def to_json(self) -> dict[str, Any]:
        return _pair_run_json(self, {"transport": self.transport, "gdr": self.gdr, "busbw": self.busbw})


def _pair_run_json(run: PairRun | RdmaPairRun, measured: Mapping[str, Any]) -> dict[str, Any]:
    """A pair run's JSON in the report (nccl.pairs' and rdma.pairs' alike): the pair, the verdict,
    what the run measured, then how it was run."""
    out: dict[str, Any] = {
        "nodes": list(run.pair.nodes),
        "leaf": run.pair.leaf,
        "across": run.pair.across,
        "status": run.status.value,
        "summary": run.summary,
        **measured,
        "passes": run.passes,
    }
    if run.action:
        out["action"] = run.action
    if run.first is not None:
        out["first_pass"] = dict(run.first)
    if run.command:
        out["command"] = run.command
    out["srun_s"], out["round"] = round(run.seconds, 3), run.round
    return out


def leaf_groups(
    node_leaves: Mapping[str, Sequence[str]] | None, leaves: Sequence[str], nodes: Sequence[str]
) -> list[tuple[str, list[str]]]:
    """The nodes by leaf switch, in the topology's order of leaves (`leaves`) and the sweep's order of
    nodes; nodes under no leaf (or every node, without a topology) form one group of their own."""
    by_leaf: dict[str, list[str]] = {leaf: [] for leaf in leaves}
    loose: list[str] = []
    for node in dict.fromkeys(nodes):
        under = list((node_leaves or {}).get(node) or ())
        if under and under[0] in by_leaf:
            by_leaf[under[0]].append(node)
        else:
            loose.append(node)
    groups = [(leaf, members) for leaf, members in by_leaf.items() if members]
    if loose:
        groups.append((NO_LEAF, loose))
    return groups


def choose_pairs(groups: Sequence[tuple[str, Sequence[str]]]) -> list[Pair]:
    """Within each leaf a ring (a+b, b+c, c+a: every node in two pairs, so one slow node shows as the
    node slow in both of its pairs), a single pair for two nodes; and one pair across each boundary
    between consecutive leaves (the last node of one with the first of the next)."""
    pairs: list[Pair] = []
    for leaf, members in groups:
        if len(members) == 2:
            pairs.append(Pair(members[0], members[1], leaf))
        elif len(members) > 2:
            pairs += [Pair(members[i], members[(i + 1) % len(members)], leaf) for i in range(len(members))]
    for (leaf1, first), (leaf2, second) in itertools.pairwise(groups):
        pairs.append(Pair(first[-1], second[0], f"{leaf1}|{leaf2}", across=True))
    return pairs


def schedule(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """Rounds of pairs that share no node (each allocation is exclusive), in order, greedily."""
    rounds: list[list[Pair]] = []
    left = list(pairs)
    while left:
        busy: set[str] = set()
        now: list[Pair] = []
        for pair in left:
            if not busy & set(pair.nodes):
                now.append(pair)
                busy.update(pair.nodes)
        rounds.append(now)
        left = [p for p in left if p not in now]
    return rounds


def pair_srun_argv(
    pair: Pair,
    command: Sequence[str],
    *,
    job_name: str,
    seconds: float,
    reservation: str | None = None,
    partition: str | None = None,
    gpus: int = 0,
    srun: str = "srun",
    extra: Sequence[str] = (),
    image: str = "",
    runtime: str = "pyxis",
    mounts: str = "",
) -> list[str]:
    """One exclusive two-node allocation of the pair, one task per node driving every GPU of it
    (`-g GPUS`), inside the site's image: Pyxis/Enroot through srun's --container-image and
    --container-mounts, or `apptainer exec --nv --bind MOUNTS IMAGE` around the command."""
    argv = [srun, "-w", f"{pair.a},{pair.b}", "-N2", "--ntasks-per-node=1", "--exclusive"]
    argv += [f"--immediate={IMMEDIATE_S}", f"--job-name={job_name}"]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    argv.append(f"--time={time_limit_minutes(seconds)}")
    if reservation:
        argv.append(f"--reservation={reservation}")
    if partition:
        argv.append(f"--partition={partition}")
    argv += list(extra)
    inner = list(command)
    if image and runtime == "pyxis":
        argv.append(f"--container-image={image}")
        if mounts:
            argv.append(f"--container-mounts={mounts}")
    elif image and runtime == "apptainer":
        inner = ["apptainer", "exec", "--nv", *(["--bind", mounts] if mounts else []), image, *inner]
    return [*argv, *inner]


def judge_pair(
    pair: Pair,
    stdout: str,
    stderr: str,
    exit_code: int | None,
    *,
    gpus: int,
    min_busbw: float,
    expect: str = "",
    require_gdr: bool = True,
    binary: str = "all_reduce_perf",
    command: str = "",
) -> PairRun:
    """A pair's srun output -> its verdict, by nccl.loopback's judge (facts.nccl_run)."""
    from clustercheck.facts.nccl_run import NcclRunError, judge_run

    data: dict[str, Any] = {"gpus": gpus}
    try:
        result = judge_run(
            stdout,
            stderr,
            exit_code,
            variant="pairs",
            expect=expect,
            require_gdr=require_gdr,
            min_busbw=min_busbw,
            binary=binary,
            data=data,
        )
        status, summary, remedy, evidence = result.status, result.summary, result.remedy, result.evidence
        data, action = dict(result.data), result.action
    except NcclRunError as exc:
        status, summary, remedy, evidence = Status.ERROR, str(exc), exc.remedy, exc.evidence
        data, action = exc.data, ""
    log = data.get("log") or {}
    busbw = data.get("peak_busbw")
    return PairRun(
        pair,
        status,
        summary,
        transport=log.get("network"),
        gdr=log.get("gpudirect_rdma") if isinstance(log.get("gpudirect_rdma"), bool) else None,
        busbw=float(busbw) if isinstance(busbw, (int, float)) else None,
        action=action,
        remedy=remedy,
        evidence=tuple(evidence),
        command=command,
    )


def stragglers(runs: Sequence[PairRun], min_busbw: float) -> list[str]:
    """The nodes slow in every pair they are in (bus bandwidth below `min_busbw`), proven by a
    partner that is fast in another pair: a slow pair whose two nodes are slow everywhere names
    neither (one node of the two, or the fabric between them: not told apart), and every pair slow
    names none (the threshold or the fabric, not one node)."""
    return slow_everywhere([(r.pair, r.slow(min_busbw)) for r in runs if r.busbw is not None])


def slow_everywhere(measured: Sequence[tuple[Pair, bool]]) -> list[str]:
    """The straggler rule on measured pairs, (pair, slow): the nodes slow in every pair they are in
    with a partner fast in another pair (nccl.pairs' bus bandwidth, rdma.pairs' ports alike)."""
    pairs_of: dict[str, list[tuple[Pair, bool]]] = {}
    for pair, slow in measured:
        for node in pair.nodes:
            pairs_of.setdefault(node, []).append((pair, slow))
    fast = {n for n, rs in pairs_of.items() if any(not slow for _, slow in rs)}
    named = []
    for node, rs in pairs_of.items():
        if node in fast:
            continue
        partners = {p for pair, _ in rs for p in pair.nodes if p != node}
        if partners & fast:
            named.append(node)
    return named


def merge_pair_passes(first: Sequence[PairRun], second: Sequence[PairRun]) -> list[PairRun]:
    """The first pass's runs, each pair measured again replaced by its second run (which decides),
    the first one kept in `first`."""
    again = {r.pair: r for r in second}
    out = []
    for r in first:
        later = again.get(r.pair)
        if later is None:
            out.append(r)
            continue
        then = {"status": r.status.value, "summary": r.summary, "busbw": r.busbw}
        out.append(later._replace(passes=r.passes + 1, first=then))
    return out


def pair_results(
    nodes: Sequence[str], runs: Sequence[PairRun], slow_nodes: Sequence[str], min_busbw: float, *, confirmed: bool
) -> dict[str, CheckResult]:
    """One `nccl.pairs` result per node in some pair, naming each of its pairs' transport, GDR and
    busbw: the straggler fails (INVESTIGATE); a pair that failed otherwise (TCP sockets, no GPUDirect
    RDMA, transport errors) fails both of its nodes with its action; a slow pair of the straggler is
    the straggler's, not its partner's; a slow pair told apart by no other pair fails both."""
    results: dict[str, CheckResult] = {}
    for node in nodes:
        mine = [r for r in runs if node in r.pair.nodes]
        if not mine:
            continue
        shown = "; ".join(_pair_line(r, node) for r in mine)
        data = {"pairs": [r.to_json() for r in mine]}
        evidence = tuple(f"{r.pair.name}: {r.status.value}: {r.summary}" for r in mine)
        if node in slow_nodes:
            second = " (measured twice)" if confirmed else ""
            results[node] = CheckResult(
                PAIRS_CHECK,
                Status.FAIL,
                f"{node} is slow in every pair it is in{second}: {shown}; at least {min_busbw:g} GB/s",
                evidence,
                "its partners are fast in their other pairs: run nccl.loopback and rdma.bandwidth on it to find the "
                "slow NIC, GPU or cable",
                data={**data, "straggler": True, PERFORMANCE: True},
                action="INVESTIGATE",
            )
            continue
        own = [
            r
            for r in mine
            if r.status is not Status.OK and not (r.slow(min_busbw) and set(r.pair.nodes) & set(slow_nodes))
        ]
        results[node] = _node_verdict(PAIRS_CHECK, mine, own, shown, evidence, data, "INVESTIGATE", show_all=True)
    return results


def _node_verdict(
    check_id: str,
    mine: Sequence[PairRun | RdmaPairRun],
    own: Sequence[PairRun | RdmaPairRun],
    shown: str,
    evidence: tuple[str, ...],
    data: Mapping[str, Any],
    action: str,
    *,
    show_all: bool,
) -> CheckResult:
    """A node's pairs result (nccl.pairs' and rdma.pairs' alike) when it is not the straggler, from
    `own`, its pairs that did not pass and are not the straggler's: the first failed one fails it
    (with its action, else `action`; `show_all` adds every pair's line), one that could not tell is
    an error (never a pass), none run is a skip, and otherwise it passes."""
    failed = [r for r in own if r.status is Status.FAIL]
    if failed:
        worst = failed[0]
        summary = f"{worst.pair.name}: {worst.summary}" + (f" ({shown})" if show_all else "")
        return CheckResult(
            check_id, Status.FAIL, summary, evidence, worst.remedy, data=data, action=worst.action or action
        )
    told = [r for r in own if r.status is not Status.SKIP]
    if told:  # could not tell: never a pass
        worst = told[0]
        return CheckResult(
            check_id, Status.ERROR, f"{worst.pair.name}: {worst.summary}", evidence, worst.remedy, data=data
        )
    if own and len(own) == len(mine):  # no pair of it ran (Slurm gave a job its nodes meanwhile)
        return CheckResult(check_id, Status.SKIP, f"{own[0].pair.name}: {own[0].summary}", evidence)
    return CheckResult(check_id, Status.OK, shown, evidence, data=data)


def _pair_line(run: PairRun, node: str) -> str:
    other = run.pair.b if run.pair.a == node else run.pair.a
    where = "across leaves" if run.pair.across else f"leaf {run.pair.leaf}"
    if run.busbw is None:
        return f"with {other} ({where}): {run.transport + ', ' if run.transport else ''}{run.status.value}"
    gdr = {True: "GDR", False: "no GDR"}.get(run.gdr, "GDR ?") if run.gdr is not None else "GDR ?"
    return f"with {other} ({where}): {run.transport or '?'}, {gdr}, {run.busbw:g} GB/s"


# -- rdma.bandwidth between two nodes (rdma.pairs) ------------------------------------------------

#: The check whose parameters the pair form takes (HCAs, port, threshold, GPU memory, sizes, budget).
RDMA_CHECK = "rdma.bandwidth"
#: The id of the pair form's results in the merged report (one per node, naming its pairs' ports).
RDMA_PAIRS_CHECK = "rdma.pairs"
#: perftest's out-of-band TCP port (`-p`, its default): run k of a pair listens on OOB_PORT + k.
OOB_PORT = 18515
#: The pair script (facts/scripts/rdma_pair.sh), as sent.
RDMA_PAIR_SCRIPT = script_text("rdma_pair.sh")


class RdmaSpec(NamedTuple):
    """rdma.bandwidth's parameters as the profile sets them (the check's defaults otherwise)."""

    devices: tuple[str, ...] = ()
    port: int = 1
    min_fraction: float = 0.9
    expected_rate: float = 0.0
    cuda: tuple[str, ...] = ()
    size: int = 8388608
    iterations: int = 5000
    gid_index: int = -1
    binary: str = "ib_write_bw"
    run_timeout: float = 60.0
    budget: float = 600.0  # the check's timeout: one pair's whole run, every port and memory

    @classmethod
    def from_params(cls, params: Mapping[str, Any], timeout: float) -> RdmaSpec:
        fields = {k: params[k] for k in cls._fields if k in params}
        fields.update(devices=tuple(fields.get("devices", ())), cuda=tuple(fields.get("cuda", ())))
        return cls(**fields, budget=float(timeout))


def rdma_runs(spec: RdmaSpec, hcas: Sequence[str]) -> list[str]:
    """`HCA:host` for each HCA, then `HCA:GPU` for each HCA the profile pairs with a GPU (`cuda`)."""
    runs = []
    for hca in hcas:
        runs.append(f"{hca}:host")
        runs += [f"{hca}:{gpu}" for h, _, gpu in (c.partition(":") for c in spec.cuda) if h == hca]
    return runs


def rdma_pair_argv(spec: RdmaSpec, pair: Pair, server_addr: str, runs: Sequence[str]) -> list[str]:
    """What each node of the pair runs (srun starts it on both): the pair script, the server on
    `pair.a` and the client on `pair.b` to `server_addr` (the server's NodeAddr), one run after
    the other, each end of each run bounded by the check's `run_timeout`."""
    from clustercheck.facts.perftest import bw_argv

    argv = bw_argv(
        spec.binary, "-", size=spec.size, iterations=spec.iterations, gid_index=spec.gid_index, ib_port=spec.port
    )
    options = argv[3:]
    seconds = str(max(1, math.ceil(spec.run_timeout)))
    head = [pair.a, server_addr, spec.binary, str(spec.port), seconds, str(OOB_PORT), " ".join(runs)]
    return ["sh", "-c", RDMA_PAIR_SCRIPT, "sh", *head, *options]


class RdmaPairRun(NamedTuple):
    """One pair's ib_write_bw runs, judged: one entry per run (HCA and memory) in `ports`."""

    pair: Pair
    status: Status
    summary: str
    ports: tuple[Mapping[str, Any], ...] = ()
    slow: bool = False  # failed, and only for runs measured below the threshold
    action: str = ""
    remedy: str = ""
    evidence: tuple[str, ...] = ()
    passes: int = 1
    first: Mapping[str, Any] | None = None
    command: str = ""
    seconds: float = 0.0
    round: int = 0

    @property
    def measured(self) -> bool:
        """Every run measured (a pass, or below the threshold): the straggler rule may use it."""
        return self.status is Status.OK or (self.status is Status.FAIL and self.slow)

    @property
    def lowest(self) -> Mapping[str, Any] | None:
        ends = [end for p in self.ports for end in (p.get("server"), p.get("client")) if end and end.get("fraction")]
        return min(ends, key=lambda e: e["fraction"], default=None)

    def to_json(self) -> dict[str, Any]:
        return _pair_run_json(self, {"ports": [dict(p) for p in self.ports]})


def judge_rdma_pair(
    pair: Pair, stdout: str, stderr: str, spec: RdmaSpec, runs: Sequence[str], *, server_addr: str, command: str = ""
) -> RdmaPairRun:
    """The pair's srun output -> its verdict: each end of each run against its own port's rate (or
    the profile's expected_rate) by facts.perftest.judge_bw; a port not ACTIVE fails; a missing
    tool, an HCA absent at one end, a run cut or timed out, a table that cannot be read are errors."""
    from clustercheck.facts.perftest import PACKAGE, read_pair_sides

    sides = read_pair_sides(stdout)
    said = " ".join(stderr.split())[-300:]
    missing = [node for node in pair.nodes if node in sides and sides[node].missing]
    if missing:
        why = f"{spec.binary} is not installed on {' and '.join(missing)} (not found): the {PACKAGE} package holds it"
        remedy = f"install the {PACKAGE} package on every node, or set rdma.bandwidth's `binary` to its path"
        return RdmaPairRun(pair, Status.ERROR, why, remedy=remedy, command=command)
    if not sides:
        why = f"the pair script printed nothing on {pair.a} or {pair.b}" + (f": {said}" if said else "")
        return RdmaPairRun(pair, Status.ERROR, why, command=command)
    ports: list[dict[str, Any]] = []
    fails: list[tuple[str, str, bool]] = []  # (message, action, measured below the threshold)
    errors: list[str] = []
    for number, run in enumerate(runs):
        hca, _, memory = run.partition(":")
        where = f"{hca} port {spec.port}" + ("" if memory == "host" else f" from GPU {memory}")
        between = f"{where} between {pair.a} (server) and {pair.b} (client)"
        server, client = (_judge_end(role, node, sides.get(node), run, spec) for role, node in
                          (("server", pair.a), ("client", pair.b)))  # fmt: skip
        entry = {"hca": hca, "port": spec.port, "memory": "host" if memory == "host" else f"gpu {memory}"}
        entry.update(server=server, client=client)
        ports.append(entry)
        ends = (server, client)
        timed = [f"the {e['role']} on {e['node']}" for e in ends if e.get("timed_out")]
        if client.get("no_server") and not any(e.get("action") for e in ends):
            errors.append(
                f"{between}: the client found no server at {server_addr}:{OOB_PORT + number} within "
                f"{spec.run_timeout:g} s (the server did not start, or that address is not reachable from {pair.b})"
            )
        elif timed and not any(e.get("action") for e in ends):
            never = " (a server whose client never connected)" if server.get("timed_out") else ""
            errors.append(
                f"{between}: {' and '.join(timed)} did not finish within {spec.run_timeout:g} s and "
                f"{'were' if len(timed) > 1 else 'was'} stopped{never}"
            )
        else:
            fails += [
                (f"{between}: {e['node']}: {e['message']}", e["action"], e["measured"]) for e in ends if e.get("action")
            ]
            errors += [
                f"{where}: the {e['role']} on {e['node']}: {e['message']}" for e in ends if e["status"] == "error"
            ]
        failed, judged = any(e.get("action") for e in ends), all(e["status"] == "ok" for e in ends)
        entry["status"] = "fail" if failed else "ok" if judged else "error"
    evidence = tuple(
        f"{p['hca']} ({p['memory']}) {p[role]['role']} {p[role]['node']}: {p[role]['status']}: {p[role]['message']}"
        for p in ports
        for role in ("server", "client")
    )
    if fails:
        action = next(a for a in ("CHECK_CABLE", "INVESTIGATE", "FIX_CONFIG") if any(a == f[1] for f in fails))
        also = f" (and {len(errors)} run(s) that could not be judged)" if errors else ""
        remedy = {
            "CHECK_CABLE": "reseat or replace the cable/transceiver of the port named (`mlxlink -d HCA` shows link "
            "errors and width) on the node named, and check the NIC's PCIe link; the straggler (slow in every pair) "
            "is the node to look at",
            "INVESTIGATE": "check that a subnet manager runs for the port's fabric (`sminfo`) and that the switch port "
            "is enabled",
            "FIX_CONFIG": "pair the HCA with a GPU under the same PCIe switch (`nvidia-smi topo -m`) and check that "
            "GPUDirect RDMA works (nvidia_peermem or DMA-BUF)",
        }[action]
        return RdmaPairRun(
            pair, Status.FAIL, "; ".join(f[0] for f in fails) + also, tuple(ports),
            slow=all(f[2] for f in fails) and not errors, action=action, remedy=remedy, evidence=evidence,
            command=command,
        )  # fmt: skip
    if errors:
        return RdmaPairRun(
            pair, Status.ERROR, "not proven: " + "; ".join(errors), tuple(ports), evidence=evidence, command=command,
            remedy=f"run the pair by hand: `{spec.binary} -d HCA --report_gbits` on {pair.a}, then the same with "
            f"{server_addr} on {pair.b}; a run without a result table is not a pass",
        )  # fmt: skip
    result = RdmaPairRun(pair, Status.OK, "", tuple(ports), evidence=evidence, command=command)
    low = result.lowest
    summary = f"{len(ports)} run(s) of {len({p['hca'] for p in ports})} port(s)"
    if low is not None:
        summary += f", lowest {low['gbps']:g} Gb/s = {low['fraction']:.1%} of {low['node']}'s {low['rate_gbps']:g} Gb/s"
    return result._replace(summary=summary + f" (at least {spec.min_fraction:.0%})")


#: coreutils timeout's exit codes for "stopped at its limit": 124 (after TERM), 137 (after -k's KILL)
TIMED_OUT = (124, 137)


def _signal_name(number: int) -> str:
    try:
        return f" ({signal.Signals(number).name})"
    except ValueError:
        return ""


def _judge_end(role: str, node: str, side: Any, run: str, spec: RdmaSpec) -> dict[str, Any]:
    """One end of one run -> its entry: node, role, status, message, and for a failure its action
    and whether it is a measurement below the threshold (`measured`)."""
    from clustercheck.facts.infiniband import parse_rate, parse_state
    from clustercheck.facts.perftest import PerftestParseError, judge_bw, parse_bw

    hca, _, memory = run.partition(":")
    where = f"{hca} port {spec.port}" + ("" if memory == "host" else f" from GPU {memory}")
    entry: dict[str, Any] = {"node": node, "role": role, "where": where}

    def said(status: str, message: str, action: str = "", measured: bool = False, **more: Any) -> dict[str, Any]:
        entry.update(status=status, message=message, **more)
        if action:
            entry.update(action=action, measured=measured)
        return entry

    got = side.runs.get(run) if side is not None else None
    if got is None:
        return said("error", "did not run (no output for it: the pair's run was stopped?)")
    if got.skipped:
        return said("error", "not run: an earlier run of the pair timed out")
    state = parse_state(got.state) if got.state else ""
    entry.update(state=state or None, sysfs_rate=got.rate or None)
    if not state:
        return said("error", f"{hca} has no port {spec.port} (sysfs shows no state): not the same HCAs at both ends?")
    if state != "ACTIVE":
        if state == "DOWN":
            return said("fail", f"{hca} port {spec.port} is DOWN: no bandwidth can be measured", "CHECK_CABLE")
        return said(
            "fail", f"{hca} port {spec.port} is {state}, not ACTIVE (no subnet manager answers?)", "INVESTIGATE"
        )
    rate = parse_rate(got.rate) if got.rate else None
    target = spec.expected_rate if spec.expected_rate > 0 else rate
    if spec.expected_rate > 0 and rate is not None and rate < spec.expected_rate:
        why = f"{hca} port {spec.port} links at {rate:g} Gb/s, below the expected {spec.expected_rate:g} Gb/s"
        return said("fail", why, "CHECK_CABLE")
    if got.no_server:
        return said("error", "found no server to connect to", no_server=True)
    if got.rc is None:
        return said("error", "its output was cut (no end line: the pair's run was stopped)")
    if got.rc in TIMED_OUT:
        return said("error", f"did not finish within {spec.run_timeout:g} s: stopped", timed_out=True)
    if got.rc > 128:  # not timeout's kill: the tool died of a signal (SIGSEGV 139, SIGABRT 134)
        name = _signal_name(got.rc - 128)
        return said("error", f"{spec.binary} crashed: killed by signal {got.rc - 128}{name} (exit {got.rc})")
    if got.rc in (126, 127):
        return said("error", f"{spec.binary} could not be started (exit {got.rc})")
    try:
        table = parse_bw(got.output)
    except PerftestParseError as exc:
        return said("error", f"exited {got.rc}: {exc}")
    if target is None:
        return said("error", f"the rate of {hca} is unknown (sysfs shows none): set rdma.bandwidth's expected_rate")
    verdict = judge_bw(table, target, min_fraction=spec.min_fraction)
    figures = {k: v for k, v in verdict.to_json().items() if k in ("gbps", "rate_gbps", "fraction", "bytes")}
    if verdict.status == "ok" and got.rc != 0:
        return said("error", f"exited {got.rc} although its table passed", **figures)
    if verdict.status == "fail":
        return said("fail", verdict.message, "CHECK_CABLE" if memory == "host" else "FIX_CONFIG", True, **figures)
    return said(verdict.status, verdict.message, **figures)


def rdma_stragglers(runs: Sequence[RdmaPairRun]) -> list[str]:
    """The nodes whose ports are slow in every pair they are in, proven by a partner fast in
    another pair (the rule of `stragglers`, on pairs whose every run was measured)."""
    return slow_everywhere([(r.pair, r.status is Status.FAIL) for r in runs if r.measured])


def merge_rdma_passes(first: Sequence[RdmaPairRun], second: Sequence[RdmaPairRun]) -> list[RdmaPairRun]:
    """The first pass's runs, each pair measured again replaced by its second run (which decides)."""
    again = {r.pair: r for r in second}
    out = []
    for r in first:
        later = again.get(r.pair)
        if later is None:
            out.append(r)
        else:
            out.append(later._replace(passes=r.passes + 1, first={"status": r.status.value, "summary": r.summary}))
    return out


def rdma_pair_results(
    nodes: Sequence[str], runs: Sequence[RdmaPairRun], slow_nodes: Sequence[str], *, confirmed: bool
) -> dict[str, CheckResult]:
    """One `rdma.pairs` result per node in some pair: the straggler fails (CHECK_CABLE); a pair
    that failed otherwise (a port DOWN, slow and not told apart) fails both of its nodes with its
    action; a slow pair of the straggler is the straggler's; a pair not judged is an error."""
    results: dict[str, CheckResult] = {}
    for node in nodes:
        mine = [r for r in runs if node in r.pair.nodes]
        if not mine:
            continue
        shown = "; ".join(_rdma_line(r, node) for r in mine)
        data = {"pairs": [r.to_json() for r in mine]}
        evidence = tuple(f"{r.pair.name}: {r.status.value}: {r.summary}" for r in mine)
        if node in slow_nodes:
            second = " (measured twice)" if confirmed else ""
            ports = [e["where"] for r in mine for p in r.ports for e in (p.get("server"), p.get("client"))
                     if e and e.get("node") == node and e.get("measured")]  # fmt: skip
            named = ", ".join(dict.fromkeys(ports)) or "its ports"
            results[node] = CheckResult(
                RDMA_PAIRS_CHECK,
                Status.FAIL,
                f"{node}: {named} slow in every pair it is in{second}: {shown}",
                evidence,
                "its partners are fast in their other pairs: reseat or replace the named port's cable or transceiver "
                f"on {node} (`mlxlink -d HCA`), check its NIC's PCIe link",
                data={**data, "straggler": True, PERFORMANCE: True},
                action="CHECK_CABLE",
            )
            continue
        own = [r for r in mine if r.status is not Status.OK and not (r.slow and set(r.pair.nodes) & set(slow_nodes))]
        results[node] = _node_verdict(RDMA_PAIRS_CHECK, mine, own, shown, evidence, data, "CHECK_CABLE", show_all=False)
    return results


def _rdma_line(run: RdmaPairRun, node: str) -> str:
    other = run.pair.b if run.pair.a == node else run.pair.a
    where = "across leaves" if run.pair.across else f"leaf {run.pair.leaf}"
    low = run.lowest
    if low is None:
        return f"with {other} ({where}): {run.status.value}"
    figure = f"{low['gbps']:g} Gb/s = {low['fraction']:.1%} of {low['rate_gbps']:g} Gb/s"
    lowest = f"lowest {figure} ({low['node']} {low['where']})"
    return f"with {other} ({where}): {run.status.value}, {lowest}"
