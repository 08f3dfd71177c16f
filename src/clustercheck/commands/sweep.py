"""`clustercheck sweep`: prove idle nodes through Slurm, drain what fails, resume what passes.

For each node of a hostlist or a partition (`-p/--partition`) that is idle right before it is
tested, one exclusive allocation (`srun -w NODE --exclusive --immediate`, inside `--reservation`
when named) runs `clustercheck run --local -p PROFILE -f json` on the node. A node running a job
is never tested; one drained, downed or rebooting by anyone else is never touched. A failing
node is drained with the owned reason (`clustercheck: <check>: <summary> action=<ACTION>`),
recorded as `health` records its own (clustercheck.slurm.apply_decision: the same path); a node
the sweep drained is tested again, inside a reservation of its own after a resume (Slurm runs no
job on a drained node), and stays up only when it passes. A failure of a performance check
(data `performance: true`) is measured once more before a drain. The decisions are in
clustercheck.sweep; this module talks to Slurm.

SIGTERM (or Ctrl-C) stops the allocations, drains again every node it had resumed to test, with
the reason it had, and deletes the reservations it created: no node is left drained by it
without a reason, and no reservation behind.

`--ssh HOSTLIST` runs the profile over SSH (the fleet runner) on nodes not yet in a partition:
the same second pass and report, nothing to drain.

`--pairs` (nccl.pairs) then runs two-node `all_reduce_perf` (`srun -w A,B -N2 --exclusive
--immediate`, in the same reservation) on pairs of the nodes that passed, chosen from Slurm's
topology (--topology, else topology.yaml/topology.conf beside slurm.conf: a ring within each leaf
switch, one pair across each leaf boundary), in rounds of pairs that share no node, inside the
site's image (`--pairs-image`: srun --container-image for Pyxis/Enroot, or `apptainer exec --nv`
with `--pairs-mounts` as its binds), with NCCL_DEBUG=INFO, judged by nccl.loopback's judge
(clustercheck.facts.nccl_run). The straggler, the node slow in every pair it is in, is measured
again and drained (INVESTIGATE) only when the second pass confirms it; a pair that fails
otherwise (TCP sockets, no GPUDirect RDMA) fails both of its nodes in the report, undrained.

When the profile runs rdma.bandwidth (or `--pairs-checks rdma.bandwidth` says so), the same
pairs then run its pair form (rdma.pairs): one `srun -w A,B -N2 --label` of
facts/scripts/rdma_pair.sh, the `ib_write_bw` server on A and the client on B to A's NodeAddr,
per HCA port (the same HCA name and port number at both ends), from host memory and from the
GPU memory the profile's `cuda` names, each end bounded by the check's run_timeout and the pair by
its timeout, each end judged against its own port's rate; the node whose ports are slow in every
pair it is in is measured again and drained (CHECK_CABLE).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from clustercheck import __version__, cli
from clustercheck import slurm as slurm_mod
from clustercheck import sweep as logic
from clustercheck.app import AcceptOpt, ChecksDirOpt, IdentityOpt, PortOpt, SshConfigOpt, UserOpt
from clustercheck.errors import ClusterCheckError, UsageError
from clustercheck.facts.infiniband import is_hca_name
from clustercheck.result import HostReport, Report, Status
from clustercheck.transports import make_transports

#: The profile a sweep runs unless told otherwise (profiles/deep.yaml).
DEFAULT_PROFILE = "deep"


class Interrupted(BaseException):
    """SIGTERM or SIGINT during a sweep: stop, clean up, say what was left."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Outcome(NamedTuple):
    """What the sweep did with one node."""

    node: str
    done: str  # "drained", "resumed", "passed", "kept", "skipped", "error", "interrupted", "left"
    why: str
    reason: str | None = None  # the drain reason set
    passes: int = 0  # how many times the profile ran on the node
    command: list[str] | None = None  # the scontrol command carried out
    seconds: float = 0.0  # the node's whole turn: state reads, allocations, runs, decision
    srun_s: float = 0.0  # of which inside srun (allocation, prolog, the node's run of the profile)

    def to_json(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in self._asdict().items()}


class PairOptions(NamedTuple):
    """`--pairs`: two-node all_reduce_perf on pairs of the nodes that passed (nccl.pairs)."""

    min_busbw: float = 20.0
    image: str = ""
    runtime: str = "pyxis"
    mounts: str = ""
    expect: str = ""
    require_gdr: bool = True
    binary: str = "all_reduce_perf"
    srun_args: tuple[str, ...] = ()
    timeout: float = 300.0
    topology: str | None = None
    min_bytes: str = "8M"
    max_bytes: str = "1G"
    checks: tuple[str, ...] = (logic.PAIRS_CHECK,)  # nccl.pairs and/or rdma.bandwidth (its pair form)


class Options(NamedTuple):
    nodes: str | None = None
    partition: str | None = None
    profile: str = DEFAULT_PROFILE
    checks_dirs: tuple[str, ...] = ()
    reservation: str | None = None
    jobs: int = 8
    run_timeout: float = 3600.0
    record_file: str = logic.DEFAULT_RECORD_FILE
    clustercheck: tuple[str, ...] = ()
    scontrol: str = "scontrol"
    srun: str = "srun"
    sinfo: str = "sinfo"
    scancel: str = "scancel"
    scontrol_timeout: float = 20.0
    dry_run: bool = False
    second_pass: bool = True
    pairs: PairOptions | None = None
    rdma: logic.RdmaSpec | None = None  # rdma.bandwidth between two nodes: the profile's parameters


class Sweeper:
    """One sweep over Slurm: its reservations, its jobs, the nodes it resumed to test, cleanup."""

    def __init__(self, opts: Options, out: Any = None) -> None:
        self.opts = opts
        self.out = out or sys.stderr
        self.token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.job_name = f"{logic.NAME_PREFIX}-{self.token}"
        self.user = getpass.getuser()
        self.lock = threading.Lock()
        self.stopping = False
        self.created: list[str] = []  # reservations this sweep made (deleted at the end)
        self.resumed: dict[str, str] = {}  # node -> the reason it had, while resumed for a retest
        self.procs: set[subprocess.Popen[str]] = set()
        self.outcomes: dict[str, Outcome] = {}
        self.reports: dict[str, HostReport] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="clustercheck-sweep-"))
        self.pool: ThreadPoolExecutor | None = None
        self.srun_s: dict[str, float] = {}  # node -> seconds spent in srun
        self.pair_srun_s: list[float] = []  # seconds each pair's srun took
        self.gpus: dict[str, int] = {}  # node -> GPUs Slurm knows there (Gres=), all asked for
        self.futures: dict[str, Future[Outcome]] = {}
        self.groups: list[tuple[str, list[str]]] | None = None  # the topology's leaves, for --pairs
        self.topology_source = ""  # where the leaves came from
        self.pair_runs: list[logic.PairRun] = []
        self.pair_doc: dict[str, Any] | None = None  # the report's "pairs" section
        self.addrs: dict[str, str] = {}  # node -> its NodeAddr (where a pair's client finds its server)
        self.rdma_runs: list[logic.RdmaPairRun] = []
        self.rdma_srun_s: list[float] = []

    # -- Slurm ------------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        slurm_mod.say(f"clustercheck sweep: {line}", self.out)

    def scontrol(self, *args: str) -> Any:
        return slurm_mod._scontrol([self.opts.scontrol, *args], self.opts.scontrol_timeout)

    def state(self, node: str) -> slurm_mod.NodeState:
        shown = self.scontrol("show", "node", node)
        if not shown.ok:
            said = (shown.stderr or shown.stdout).strip().splitlines()
            raise ClusterCheckError(f"cannot read node {node}'s state: {shown.describe()}: {said[0] if said else ''}")
        try:
            state = slurm_mod.parse_scontrol_show_node(shown.stdout, node)
        except ValueError as exc:
            raise ClusterCheckError(str(exc)) from None
        addr = re.search(r"(?:^|\s)NodeAddr=(\S+)", shown.stdout)
        with self.lock:
            self.gpus[node] = logic.node_gpus(shown.stdout)
            self.addrs[node] = addr.group(1) if addr else node
        return state

    def record_path(self, node: str) -> Path:
        return slurm_mod.state_path(self.opts.record_file, node)

    def record(self, node: str) -> dict[str, Any] | None:
        return slurm_mod.read_state(self.record_path(node))

    def nodes(self) -> list[str]:
        """The hostlist given, or the partition's nodes (sinfo)."""
        from clustercheck.hostlist import SLURM_MAX_NAME, expand

        names = expand(self.opts.nodes, max_name=SLURM_MAX_NAME) if self.opts.nodes else []
        if self.opts.partition:
            argv = [self.opts.sinfo, "-h", "-N", "-p", self.opts.partition, "-o", "%N"]
            listed = slurm_mod._scontrol(argv, self.opts.scontrol_timeout)
            if not listed.ok:
                raise ClusterCheckError(
                    f"cannot list partition {self.opts.partition}: {listed.describe()}: {listed.stderr.strip()}"
                )
            found = list(dict.fromkeys(line.strip() for line in listed.stdout.splitlines() if line.strip()))
            if not found:
                raise UsageError(f"-p/--partition {self.opts.partition}: sinfo lists no node in it")
            names = [n for n in names if n in found] if names else found
        if not names:
            raise UsageError("no node to sweep: give a hostlist, -p/--partition, or --ssh HOSTLIST")
        return names

    def check_record_folder(self, node: str) -> None:
        """The record must be writable before any node is drained: without it no drain could be resumed."""
        folder = self.record_path(node).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".clustercheck-probe-"):
                pass
        except OSError as exc:
            raise UsageError(
                f"--record-file {self.opts.record_file}: cannot write in {folder} ({exc.strerror or exc}): the sweep "
                "keeps there the drain reasons it sets, without which it could never resume a node"
            ) from None

    def reservation_exists(self, name: str) -> bool:
        return bool(self.scontrol("show", "reservation", name).ok)

    def reserve(self, name: str, nodes: Sequence[str]) -> str | None:
        """Create a reservation; None when made, else what scontrol said (busy nodes: a job runs)."""
        with self.lock:
            if self.stopping:
                return "the sweep is stopping"
        minutes = (1 + self.opts.second_pass) * logic.time_limit_minutes(self.opts.run_timeout) + 5
        if self.opts.pairs is not None:  # the pairs' rounds after the nodes (a ring and the boundaries: 8 at most)
            if logic.PAIRS_CHECK in self.opts.pairs.checks:
                minutes += (1 + self.opts.second_pass) * 8 * logic.time_limit_minutes(self.opts.pairs.timeout)
            if self.opts.rdma is not None:
                minutes += (1 + self.opts.second_pass) * 8 * logic.time_limit_minutes(self.opts.rdma.budget)
        argv = logic.reservation_argv(name, nodes, user=self.user, minutes=minutes, scontrol=self.opts.scontrol)
        made = slurm_mod._scontrol(argv, self.opts.scontrol_timeout)
        if not made.ok:
            return " ".join((made.stderr or made.stdout).split()) or made.describe()
        with self.lock:
            self.created.append(name)
        return None

    def unreserve(self, name: str) -> None:
        done = self.scontrol("delete", f"ReservationName={name}")
        if done.ok or "Invalid reservation" in (done.stderr + done.stdout):
            with self.lock:
                if name in self.created:
                    self.created.remove(name)
        else:
            self.say(f"could not delete reservation {name}: {done.describe()} {done.stderr.strip()}")

    # -- one node ---------------------------------------------------------------------------------
    def run_profile(self, node: str, reservation: str | None, attempt: int) -> tuple[HostReport | None, str]:
        """The profile on the node, inside one exclusive allocation: its report, or why none."""
        command = logic.node_argv(
            self.opts.clustercheck, self.opts.profile, self.opts.checks_dirs, self.opts.run_timeout
        )
        argv = logic.srun_argv(
            node,
            command,
            job_name=self.job_name,
            seconds=self.opts.run_timeout,
            reservation=reservation,
            partition=self.opts.partition,
            gpus=self.gpus.get(node, 0),
            srun=self.opts.srun,
        )
        ran = self._srun(argv, self.opts.run_timeout + logic.IMMEDIATE_S + 60)
        if ran is None:
            return None, "the sweep was interrupted before the run"
        returncode, stdout, stderr, timed_out, took = ran
        with self.lock:
            self.srun_s[node] = self.srun_s.get(node, 0.0) + took
        if timed_out:
            return None, f"the run on {node} did not end within {self.opts.run_timeout:g} s: stopped"
        with self.lock:
            if self.stopping:
                return None, "the sweep was interrupted during the run"
        if logic.allocation_refused(stderr) and not stdout.strip():
            said = " ".join(stderr.split())[:300]
            return None, f"Slurm did not give {node} to the sweep (a job took it?): {said}"
        try:
            doc = json.loads(stdout)
            body = next(iter(doc["hosts"].values()))
        except (ValueError, KeyError, TypeError, StopIteration, AttributeError):
            said = " ".join((stderr or stdout).split())[-300:]
            return None, f"`{shlex.join(argv)}` exited {returncode} without a report: {said or '(no output)'}"
        doc["hosts"] = {node: body}  # the node's Slurm name (its own host name may differ)
        path = self.folder / f"{node}.{attempt}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        from clustercheck.commands.report import read_results

        try:
            merged = read_results([path])
        except UsageError as exc:
            return None, f"the report of {node} is not a clustercheck report: {exc}"
        return merged.hosts[0], ""

    def sweep_node(self, node: str, reservation: str | None) -> Outcome:
        record = self.record(node)
        before = self.state(node)  # right before: a job may have started since the first look
        planned = logic.plan(before, record, reserved_ok=reservation is not None)
        if planned.kind == "skip":
            return Outcome(node, "skipped", planned.why)
        own: str | None = None
        if planned.kind == "retest":  # a drained node runs no job: resume it inside a reservation of its own
            if reservation is None:
                own = f"{self.job_name}-{node}"
                refused = self.reserve(own, [node])
                if refused is not None:
                    return Outcome(node, "skipped", f"could not reserve {node} to test it again: {refused}")
                reservation = own
            with self.lock:
                if self.stopping:
                    return Outcome(node, "interrupted", "the sweep was interrupted: left drained")
                self.resumed[node] = before.reason or ""
            resumed = self.scontrol("update", f"NodeName={node}", "State=RESUME")
            if not resumed.ok:
                with self.lock:
                    self.resumed.pop(node, None)
                return Outcome(node, "error", f"could not resume {node} to test it: {resumed.stderr.strip()}")
        try:
            return self._judge(node, planned, before, record, reservation)
        finally:
            with self.lock:
                pending = node in self.resumed  # interrupted: cleanup drains it again, then unreserves
            if own is not None and not pending:
                self.unreserve(own)

    def _judge(
        self,
        node: str,
        planned: logic.Plan,
        before: slurm_mod.NodeState,
        record: dict[str, Any] | None,
        reservation: str | None,
    ) -> Outcome:
        report, why = self.run_profile(node, reservation, 1)
        passes = 1
        if report is not None and self.opts.second_pass and logic.needs_second_pass(report.checks):
            again, _ = self.run_profile(node, reservation, 2)
            passes = 2
            report = HostReport(node, logic.merge_passes(report.checks, again.checks if again else None))
        with self.lock:
            stopping = self.stopping
        if stopping:
            return Outcome(node, "interrupted", "the sweep was interrupted during the run", passes=passes)
        if report is None:
            self.reports[node] = HostReport(node, (logic.skipped(node, why, Status.ERROR),))
            if planned.kind == "retest":  # not proven: its drain comes back
                return self._redrain(node, before, f"not tested: {why}", passes)
            return Outcome(node, "error", why, passes=passes)
        self.reports[node] = report
        checks = report.checks
        if planned.kind == "retest":
            assert planned.entry is not None
            decision = logic.retest_decision(
                slurm_mod.decide(before, checks, None, record, with_action=True), before, planned.entry
            )
            if decision.action == "none":
                with self.lock:
                    self.resumed.pop(node, None)
                return Outcome(node, "resumed", decision.why, passes=passes)
            same = decision.reason == before.reason
            return self._apply(node, decision, self.record(node), passes, resumed=True, kept=same)
        now = self.state(node)
        decision = slurm_mod.decide(now, checks, None, record, with_action=True)
        if decision.action == "none":
            failed = any(c.status is Status.FAIL for c in checks)
            return Outcome(node, "left" if failed else "passed", decision.why, passes=passes)
        return self._apply(node, decision, record, passes)

    def _redrain(self, node: str, before: slurm_mod.NodeState, why: str, passes: int) -> Outcome:
        record = self.record(node)
        decision = slurm_mod.Decision("drain", why, before.reason)
        return self._apply(node, decision, record, passes, resumed=True, kept=True)

    def _apply(
        self,
        node: str,
        decision: slurm_mod.Decision,
        record: dict[str, Any] | None,
        passes: int,
        *,
        resumed: bool = False,
        kept: bool = False,
    ) -> Outcome:
        done = slurm_mod.apply_decision(
            decision,
            node,
            record_file=self.record_path(node),
            record=record,
            scontrol=self.opts.scontrol,
            timeout=self.opts.scontrol_timeout,
            who="sweep",
        )
        argv = decision.argv(node, self.opts.scontrol)
        if done is not None and not done.ok:
            return Outcome(node, "error", f"`{shlex.join(argv or [])}` failed: {done.stderr.strip()}", passes=passes)
        if resumed:
            with self.lock:
                self.resumed.pop(node, None)
        verb = {"drain": "drained", "resume": "resumed"}.get(decision.action, "left")
        if resumed and decision.action == "drain" and kept:
            verb = "kept"  # drained again with the reason it had
        return Outcome(node, verb, decision.why, decision.reason, passes, argv)

    # -- the whole sweep --------------------------------------------------------------------------
    def run(self) -> None:
        nodes = self.nodes()
        if self.opts.pairs is not None:  # a bad topology file stops the sweep before it touches a node
            self.load_topology(nodes)
        if not self.opts.dry_run:
            self.check_record_folder(nodes[0])
        reservation = self.opts.reservation
        if reservation and not self.reservation_exists(reservation):
            first = [logic.plan(self.state(n), self.record(n), reserved_ok=True) for n in nodes]
            wanted = [p.node for p in first if p.kind != "skip"]
            if wanted and not self.opts.dry_run:
                refused = self.reserve(reservation, wanted)
                if refused is not None:
                    raise ClusterCheckError(f"could not create reservation {reservation}: {refused}")
                self.say(f"created reservation {reservation} for {len(wanted)} node(s)")
        if self.opts.dry_run:
            for n in nodes:
                planned = logic.plan(self.state(n), self.record(n), reserved_ok=reservation is not None)
                self.outcomes[n] = Outcome(n, "skipped" if planned.kind == "skip" else "would test", planned.why)
            if self.opts.pairs is not None:
                would = [n for n in nodes if self.outcomes[n].done == "would test"]
                pairs = logic.choose_pairs(self.leaf_groups(would))
                self.pair_doc = self._pairs_doc(pairs, [], [], planned_only=True)
            return
        # no `with`: on SIGTERM, cleanup stops the allocations before it waits for the workers
        self.pool = ThreadPoolExecutor(max_workers=max(1, self.opts.jobs))
        for n in nodes:
            self.futures[n] = self.pool.submit(self._guarded, n, reservation)
        for node, future in self.futures.items():
            self.outcomes[node] = self._wait(future)
        if self.opts.pairs is not None:
            self.run_pairs(nodes, reservation)

    @staticmethod
    def _wait(future: Future[Any]) -> Any:
        while True:  # a timeout lets the signal handler run in this thread
            try:
                return future.result(timeout=0.2)
            except TimeoutError:
                continue

    # -- nccl.pairs: two-node all_reduce_perf on pairs of the nodes that passed --------------------
    def load_topology(self, nodes: Sequence[str]) -> None:
        """The leaf switches of Slurm's topology (--topology, else topology.yaml or topology.conf
        beside slurm.conf); without one every node is in one group."""
        from clustercheck.analyzers.topology import TopologyError, parse_topology

        assert self.opts.pairs is not None
        path = self.opts.pairs.topology
        if path is None:
            folder = Path(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf").parent
            path = next((str(folder / n) for n in ("topology.yaml", "topology.conf") if (folder / n).is_file()), None)
        if path is None:
            self.topology_source = "no topology.yaml or topology.conf beside slurm.conf: the nodes as one group"
            return
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
            topo = parse_topology(text, path)
        except OSError as exc:
            raise UsageError(f"--topology {path}: cannot read it ({exc.strerror or exc})") from None
        except TopologyError as exc:
            raise UsageError(f"--topology {path}: {exc}") from None
        self.topology_source = path
        self.groups = [(leaf, list(topo.switches[leaf].nodes)) for leaf in topo.leaves]

    def leaf_groups(self, nodes: Sequence[str]) -> list[tuple[str, list[str]]]:
        leaves = [leaf for leaf, _ in self.groups or ()]
        under = {n: [leaf] for leaf, members in self.groups or () for n in members}
        return logic.leaf_groups(under, leaves, nodes)

    def run_pairs(self, nodes: Sequence[str], reservation: str | None) -> None:
        """Pairs of the nodes that passed, measured in rounds of pairs that share no node: nccl.pairs
        (all_reduce_perf) and rdma.bandwidth's pair form (ib_write_bw per HCA port), as asked; a
        straggler is measured again and drained only when the second pass confirms it."""
        opts = self.opts.pairs
        assert opts is not None
        started = time.monotonic()
        passed = [n for n in nodes if self.outcomes.get(n, Outcome(n, "", "")).done in ("passed", "resumed")]
        pairs = logic.choose_pairs(self.leaf_groups(passed))
        found: dict[str, list[Any]] = {}  # node -> its pair results (nccl.pairs, rdma.pairs)
        drain: dict[str, Any] = {}  # node -> the straggler result it is drained for (the first)
        slow: list[str] = []
        first_slow: list[str] = []
        if logic.PAIRS_CHECK in opts.checks:
            runs = self._measure(pairs, reservation, 1)
            slow = logic.stragglers(runs, opts.min_busbw)
            first_slow = list(slow)
            if slow and self.opts.second_pass:
                again = [p for p in pairs if set(p.nodes) & set(slow)]
                runs = logic.merge_pair_passes(runs, self._measure(again, reservation, 2))
                slow = [n for n in logic.stragglers(runs, opts.min_busbw) if n in slow]
            self.pair_runs = runs
            results = logic.pair_results(passed, runs, slow, opts.min_busbw, confirmed=self.opts.second_pass)
            for node, result in results.items():
                found.setdefault(node, []).append(result)
                if result.status is Status.FAIL and node in slow:
                    drain.setdefault(node, result)
        rdma_doc = None
        if self.opts.rdma is not None:
            rdma_doc = self.run_rdma_pairs(passed, pairs, reservation, found, drain)
        for node, mine in found.items():
            before = self.reports.get(node)
            self.reports[node] = HostReport(node, (*(before.checks if before else ()), *mine))
            if node in drain:
                self.outcomes[node] = self._drain_straggler(node, drain[node])
                continue
            bad = [r for r in mine if r.status in (Status.FAIL, Status.ERROR)]
            if bad:
                o = self.outcomes[node]
                why = f"{bad[0].id} {bad[0].status.value}: {bad[0].summary} (a pair's failure: not drained)"
                self.outcomes[node] = o._replace(done="left", why=why)
        self.pair_doc = self._pairs_doc(
            pairs, self.pair_runs, slow, first_slow=first_slow, seconds=time.monotonic() - started
        )
        if rdma_doc is not None:
            self.pair_doc["rdma"] = rdma_doc

    def run_rdma_pairs(
        self,
        passed: Sequence[str],
        pairs: Sequence[logic.Pair],
        reservation: str | None,
        found: dict[str, list[Any]],
        drain: dict[str, Any],
    ) -> dict[str, Any]:
        """rdma.bandwidth between the two nodes of each pair, per HCA port: the report's
        `rdma.pairs` results (into `found`), its stragglers (into `drain`), and its section."""
        spec = self.opts.rdma
        assert spec is not None
        runs = self._measure_rdma(pairs, reservation, 1)
        slow = logic.rdma_stragglers(runs)
        first_slow = list(slow)
        if slow and self.opts.second_pass:
            again = [p for p in pairs if set(p.nodes) & set(slow)]
            runs = logic.merge_rdma_passes(runs, self._measure_rdma(again, reservation, 2))
            slow = [n for n in logic.rdma_stragglers(runs) if n in slow]
        self.rdma_runs = runs
        results = logic.rdma_pair_results(passed, runs, slow, confirmed=self.opts.second_pass)
        for node, result in results.items():
            found.setdefault(node, []).append(result)
            if result.status is Status.FAIL and node in slow:
                drain.setdefault(node, result)
        with self.lock:
            srun_s = sum(self.rdma_srun_s)
        return {
            "check": logic.RDMA_CHECK,
            "min_fraction": spec.min_fraction,
            "expected_rate": spec.expected_rate or None,
            "port": spec.port,
            "pairs": [r.to_json() for r in runs],
            "stragglers": list(slow),
            "measured_slow_once": [n for n in first_slow if n not in slow],
            "srun_s": round(srun_s, 3),
        }

    def _drain_straggler(self, node: str, result: Any) -> Outcome:
        passes = self.outcomes[node].passes
        decision = slurm_mod.decide(self.state(node), (result,), None, self.record(node), with_action=True)
        if decision.action != "drain":
            return self.outcomes[node]._replace(done="left", why=f"{result.summary}: {decision.why}")
        return self._apply(node, decision, self.record(node), passes)

    def _pairs_doc(
        self,
        pairs: Sequence[logic.Pair],
        runs: Sequence[logic.PairRun],
        slow: Sequence[str],
        *,
        first_slow: Sequence[str] = (),
        seconds: float = 0.0,
        planned_only: bool = False,
    ) -> dict[str, Any]:
        opts = self.opts.pairs
        assert opts is not None
        doc: dict[str, Any] = {
            "checks": [
                *([logic.PAIRS_CHECK] if logic.PAIRS_CHECK in opts.checks else []),
                *([logic.RDMA_PAIRS_CHECK] if self.opts.rdma is not None else []),
            ],
            "topology": self.topology_source,
            "min_busbw": opts.min_busbw,
            "image": opts.image or None,
            "runtime": opts.runtime if opts.image else None,
            "rounds": len(logic.schedule(pairs)),
        }
        if planned_only:
            doc["planned"] = [{"nodes": list(p.nodes), "leaf": p.leaf, "across": p.across} for p in pairs]
            return doc
        doc["seconds"] = round(seconds, 3)
        if logic.PAIRS_CHECK not in opts.checks:
            return doc
        with self.lock:
            srun_s = sum(self.pair_srun_s)
        doc.update(
            pairs=[r.to_json() for r in runs],
            stragglers=list(slow),
            measured_slow_once=[n for n in first_slow if n not in slow],
            seconds=round(seconds, 3),
            srun_s=round(srun_s, 3),
        )
        return doc

    def _measure(self, pairs: Sequence[logic.Pair], reservation: str | None, attempt: int) -> list[logic.PairRun]:
        assert self.pool is not None
        by_pair: dict[logic.Pair, logic.PairRun] = {}
        for number, batch in enumerate(logic.schedule(pairs), 1):
            futures = [(p, self.pool.submit(self.run_pair, p, reservation, attempt)) for p in batch]
            for pair, future in futures:
                by_pair[pair] = self._wait(future)._replace(round=number)
        return [by_pair[p] for p in pairs]

    def run_pair(self, pair: logic.Pair, reservation: str | None, attempt: int) -> logic.PairRun:
        """all_reduce_perf on the two nodes of `pair`, one exclusive allocation, judged."""
        from clustercheck.facts.nccl_run import run_argv

        opts = self.opts.pairs
        assert opts is not None
        gpus = max(1, min(self.gpus.get(pair.a, 0), self.gpus.get(pair.b, 0)))
        command = run_argv("pairs", opts.binary, gpus, opts.min_bytes, opts.max_bytes, 2)
        argv = logic.pair_srun_argv(
            pair,
            command,
            job_name=self.job_name,
            seconds=opts.timeout,
            reservation=reservation,
            partition=self.opts.partition,
            gpus=gpus if self.gpus.get(pair.a) else 0,
            srun=self.opts.srun,
            extra=opts.srun_args,
            image=opts.image,
            runtime=opts.runtime,
            mounts=opts.mounts,
        )
        shown = shlex.join(argv)
        ran = self._srun(argv, opts.timeout + logic.IMMEDIATE_S + 60)
        if ran is None:
            return logic.PairRun(pair, Status.ERROR, "the sweep was interrupted before the run", command=shown)
        returncode, stdout, stderr, timed_out, srun_s = ran
        with self.lock:
            self.pair_srun_s.append(srun_s)
        if timed_out:
            why = f"all_reduce_perf on {pair.a} and {pair.b} did not end within {opts.timeout:g} s: stopped"
            return logic.PairRun(pair, Status.ERROR, why, command=shown)
        return self._judge_pair(pair, stdout, stderr, returncode, gpus, shown)._replace(seconds=srun_s)

    def _measure_rdma(
        self, pairs: Sequence[logic.Pair], reservation: str | None, attempt: int
    ) -> list[logic.RdmaPairRun]:
        assert self.pool is not None
        by_pair: dict[logic.Pair, logic.RdmaPairRun] = {}
        for number, batch in enumerate(logic.schedule(pairs), 1):
            futures = [(p, self.pool.submit(self.run_rdma_pair, p, reservation, attempt)) for p in batch]
            for pair, future in futures:
                by_pair[pair] = self._wait(future)._replace(round=number)
        return [by_pair[p] for p in pairs]

    def rdma_hcas(self, node: str) -> list[str]:
        """The HCAs rdma.bandwidth judged on the node in its own run (its data's ports), in order."""
        report = self.reports.get(node)
        for c in report.checks if report else ():
            if c.id == logic.RDMA_CHECK and isinstance(c.data, dict) and isinstance(c.data.get("ports"), dict):
                return [str(h) for h in c.data["ports"]]
        return []

    def run_rdma_pair(self, pair: logic.Pair, reservation: str | None, attempt: int) -> logic.RdmaPairRun:
        """ib_write_bw per HCA port between the two nodes of `pair` (the server on the first, the
        client on the second to its NodeAddr), one exclusive allocation, judged."""
        spec = self.opts.rdma
        assert spec is not None
        hcas = list(spec.devices) or self.rdma_hcas(pair.a)
        if not hcas:
            why = f"no HCA to measure on {pair.a}: its rdma.bandwidth result names none (set the check's `devices`)"
            return logic.RdmaPairRun(pair, Status.ERROR, why)
        odd = [h for h in hcas if not is_hca_name(h)]
        if odd:  # names the node's own report gave: never passed on to a script
            why = f"{pair.a}'s rdma.bandwidth result names HCAs that sysfs cannot list: {', '.join(map(repr, odd))}"
            return logic.RdmaPairRun(pair, Status.ERROR, why, remedy="set rdma.bandwidth's `devices` in the profile")
        runs = logic.rdma_runs(spec, hcas)
        addr = self.addrs.get(pair.a) or pair.a
        gpus = min(self.gpus.get(pair.a, 0), self.gpus.get(pair.b, 0)) if spec.cuda else 0
        argv = logic.pair_srun_argv(
            pair,
            logic.rdma_pair_argv(spec, pair, addr, runs),
            job_name=self.job_name,
            seconds=spec.budget,
            reservation=reservation,
            partition=self.opts.partition,
            gpus=gpus,
            srun=self.opts.srun,
            extra=("--label",),
        )
        shown = shlex.join(argv).replace(shlex.quote(logic.RDMA_PAIR_SCRIPT), "'<rdma pair script>'")
        ran = self._srun(argv, spec.budget + logic.IMMEDIATE_S + 60)
        if ran is None:
            return logic.RdmaPairRun(pair, Status.ERROR, "the sweep was interrupted before the run", command=shown)
        returncode, stdout, stderr, timed_out, srun_s = ran
        with self.lock:
            self.rdma_srun_s.append(srun_s)
            stopping = self.stopping
        if stopping:
            return logic.RdmaPairRun(pair, Status.ERROR, "the sweep was interrupted during the run", command=shown)
        if timed_out:
            why = f"ib_write_bw between {pair.a} and {pair.b} did not end within {spec.budget:g} s: stopped"
            return logic.RdmaPairRun(pair, Status.ERROR, why, command=shown, seconds=srun_s)
        if logic.allocation_refused(stderr) and not stdout.strip():
            said = " ".join(stderr.split())[:300]
            why = f"Slurm did not give {pair.a} and {pair.b} to the sweep (a job took one?): {said}"
            return logic.RdmaPairRun(pair, Status.SKIP, why, command=shown, seconds=srun_s)
        run = logic.judge_rdma_pair(pair, stdout, stderr, spec, runs, server_addr=addr, command=shown)
        if not stdout.strip():  # srun's own failure: its exit code beside what it said
            run = run._replace(summary=f"{run.summary} (srun exited {returncode})")
        return run._replace(seconds=srun_s)

    def _srun(self, argv: list[str], timeout: float) -> tuple[int, str, str, bool, float] | None:
        """Start one srun, unless the sweep is stopping (None), and wait for it within `timeout`,
        stopping it past that: (exit code, stdout, stderr, timed out, seconds)."""
        with self.lock:
            if self.stopping:
                return None
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
            )
            self.procs.add(proc)
        started = time.monotonic()
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.terminate()  # srun cancels the job step and its allocation
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=10)
            proc.kill()
            proc.wait()
            stdout, stderr, timed_out = "", "", True
        finally:
            with self.lock:
                self.procs.discard(proc)
        return proc.returncode, stdout, stderr, timed_out, time.monotonic() - started

    def _judge_pair(
        self, pair: logic.Pair, stdout: str, stderr: str, returncode: int, gpus: int, shown: str
    ) -> logic.PairRun:
        from clustercheck.facts.nccl_run import NCCL_TESTS_PACKAGE

        opts = self.opts.pairs
        assert opts is not None
        with self.lock:
            if self.stopping:
                return logic.PairRun(pair, Status.ERROR, "the sweep was interrupted during the run", command=shown)
        if logic.allocation_refused(stderr) and not stdout.strip():
            said = " ".join(stderr.split())[:300]
            why = f"Slurm did not give {pair.a} and {pair.b} to the sweep (a job took one?): {said}"
            return logic.PairRun(pair, Status.SKIP, why, command=shown)
        missing = ("execve(): ", "command not found", "No such file or directory")
        if returncode != 0 and "NCCL" not in stdout and any(w in stderr + stdout for w in missing):
            where = f"in {opts.image}" if opts.image else f"on {pair.a} or {pair.b}"
            why = f"{opts.binary} is not installed {where}: {' '.join(stderr.split())[-200:]}"
            return logic.PairRun(pair, Status.ERROR, why, remedy=f"install {NCCL_TESTS_PACKAGE}", command=shown)
        return logic.judge_pair(
            pair,
            stdout,
            stderr,
            returncode,
            gpus=2 * gpus,
            min_busbw=opts.min_busbw,
            expect=opts.expect,
            require_gdr=opts.require_gdr,
            binary=opts.binary,
            command=shown,
        )

    def _guarded(self, node: str, reservation: str | None) -> Outcome:
        start = time.monotonic()
        try:
            outcome = self.sweep_node(node, reservation)
        except ClusterCheckError as exc:
            outcome = Outcome(node, "error", str(exc))
        with self.lock:
            srun_s = self.srun_s.get(node, 0.0)
        return outcome._replace(seconds=time.monotonic() - start, srun_s=srun_s)

    def cleanup(self, interrupted: bool) -> list[str]:
        """Stop the allocations, drain again what was resumed for a test, delete the reservations
        made; what could not be cleaned up."""
        problems: list[str] = []
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for proc in procs:
            with contextlib.suppress(OSError):
                proc.terminate()  # srun cancels its job step and allocation
        if interrupted:
            cancel = [
                self.opts.scancel,
                f"--name={self.job_name}",
                f"--user={self.user}",
            ]
            slurm_mod._scontrol(cancel, self.opts.scontrol_timeout)
        deadline = time.monotonic() + 15
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)  # the workers see `stopping` and return
        for node, future in self.futures.items():
            if node not in self.outcomes and future.done() and not future.cancelled():
                self.outcomes[node] = future.result()
            elif node not in self.outcomes:
                self.outcomes[node] = Outcome(
                    node, "interrupted", "the sweep was interrupted before it reached the node"
                )
        with self.lock:
            resumed = dict(self.resumed)
        for node, reason in resumed.items():
            outcome = self._redrain_now(node, reason)
            self.outcomes[node] = outcome
            if outcome.done == "error":
                problems.append(outcome.why)
        for name in list(self.created):
            self.unreserve(name)
            if name in self.created:
                problems.append(f"reservation {name} is still there: `scontrol delete ReservationName={name}`")
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
        return problems

    def _redrain_now(self, node: str, reason: str) -> Outcome:
        decision = slurm_mod.Decision("drain", "the sweep was interrupted before it could tell: drained again", reason)
        try:
            done = slurm_mod.apply_decision(
                decision,
                node,
                record_file=self.record_path(node),
                record=self.record(node),
                scontrol=self.opts.scontrol,
                timeout=self.opts.scontrol_timeout,
                who="sweep",
            )
        except ClusterCheckError as exc:
            return Outcome(node, "error", str(exc))
        if done is not None and not done.ok:
            return Outcome(node, "error", f"could not drain {node} again ({reason}): {done.stderr.strip()}")
        with self.lock:
            self.resumed.pop(node, None)
        return Outcome(node, "kept", decision.why, reason, 0, decision.argv(node, self.opts.scontrol))


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGINT raise Interrupted in the main thread while the sweep runs."""

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, handler)
    try:
        yield
    finally:  # the cleanup that follows must not be cut short by a second signal
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)


# -- the report ---------------------------------------------------------------------------------------


def merged_report(
    profile: str, nodes: Sequence[str], sweeper_reports: dict[str, HostReport], outcomes: dict[str, Outcome]
) -> Report:
    hosts = []
    for node in nodes:
        if node in sweeper_reports:
            hosts.append(sweeper_reports[node])
        else:
            outcome = outcomes.get(node)
            why = outcome.why if outcome else "not reached"
            status = Status.ERROR if outcome is not None and outcome.done in ("error", "interrupted") else Status.SKIP
            hosts.append(HostReport(node, (logic.skipped(node, why, status),)))
    return Report(__version__, profile, tuple(hosts))


def write_reports(
    report: Report,
    outcomes: dict[str, Outcome],
    out_json: Path | None,
    out_html: Path | None,
    pairs: dict[str, Any] | None = None,
) -> None:
    from clustercheck import formats
    from clustercheck.analyzers.fleet import summarize

    if out_json is not None:

        def render_json(out: Any) -> None:
            doc = {
                **report.to_json(),
                "fleet": summarize(report).to_json(),
                "sweep": {n: o.to_json() for n, o in outcomes.items()},
            }
            if pairs is not None:
                doc["pairs"] = pairs
            json.dump(doc, out, indent=2)
            out.write("\n")

        cli.write_output(render_json, out_json)
    if out_html is not None:
        cli.write_output(lambda out: formats.render(report, "html", out), out_html)


def _lines(outcomes: dict[str, Outcome], pairs: dict[str, Any] | None = None) -> list[str]:
    lines = []
    for o in outcomes.values():
        line = f"{o.node}: {o.done}: {o.why}"
        if o.reason and o.done in ("drained", "kept"):
            line += f"\n  reason: {o.reason}"
        lines.append(line)
    for p in (pairs or {}).get("planned", ()):
        lines.append(f"pair {'+'.join(p['nodes'])} ({'across ' if p['across'] else ''}{p['leaf']}): would run")
    for p in (pairs or {}).get("pairs", ()):
        busbw = f"{p['busbw']:g} GB/s" if p["busbw"] is not None else "no busbw"
        gdr = {True: "GDR", False: "no GDR"}.get(p["gdr"], "GDR ?")
        twice = ", measured twice" if p["passes"] > 1 else ""
        lines.append(
            f"pair {'+'.join(p['nodes'])} ({'across ' if p['across'] else ''}{p['leaf']}): {p['status']}: "
            f"{p['transport'] or '?'}, {gdr}, {busbw}{twice}: {p['summary']}"
        )
    if pairs is not None and pairs.get("pairs") == [] and not pairs.get("planned"):
        lines.append("pairs: none measured (fewer than two nodes passed their own runs)")
    if pairs is not None and "stragglers" in pairs:
        slow = ", ".join(pairs["stragglers"]) or "none"
        lines.append(f"straggler (slow in every pair it is in): {slow}")
    rdma = (pairs or {}).get("rdma")
    if rdma is not None:
        for p in rdma["pairs"]:
            twice = ", measured twice" if p["passes"] > 1 else ""
            where = f"{'across ' if p['across'] else ''}{p['leaf']}"
            lines.append(f"rdma pair {'+'.join(p['nodes'])} ({where}): {p['status']}{twice}: {p['summary']}")
        if not rdma["pairs"]:
            lines.append("rdma pairs: none measured (fewer than two nodes passed their own runs)")
        slow = ", ".join(rdma["stragglers"]) or "none"
        lines.append(f"rdma straggler (ports slow in every pair it is in): {slow}")
    return lines


# -- over SSH: nodes not yet in a partition -------------------------------------------------------------


def ssh_sweep(
    hosts: str, profile: str, checks_dirs: tuple[Path, ...], jobs: int, timeout: float, second_pass: bool, **ssh: Any
) -> tuple[Report, dict[str, Outcome]]:
    from clustercheck import profile as profiles
    from clustercheck import runner

    transports = make_transports(False, hosts, None, **ssh)
    prof = profiles.load(profile, extra_check_dirs=checks_dirs)
    first = runner.run_profile(prof, transports, version=__version__, jobs=jobs, timeout=timeout)
    by_host = {h.host: h for h in first.hosts}
    again = [t for t in transports if logic.needs_second_pass(by_host[t.host].checks)] if second_pass else []
    outcomes = {
        h.host: Outcome(h.host, "passed" if h.status is not Status.FAIL else "left", "over SSH", passes=1)
        for h in first.hosts
    }
    if again:
        fresh = make_transports(False, ",".join(t.host for t in again), None, **ssh)
        second = runner.run_profile(prof, fresh, version=__version__, jobs=jobs, timeout=timeout)
        for h in second.hosts:
            merged = HostReport(h.host, logic.merge_passes(by_host[h.host].checks, h.checks))
            by_host[h.host] = merged
            done = "left" if merged.status is Status.FAIL else "passed"
            outcomes[h.host] = Outcome(h.host, done, "over SSH, measured twice", passes=2)
    for o in list(outcomes.values()):
        if o.done == "left":
            outcomes[o.node] = o._replace(why=o.why + ": failing (not in Slurm: nothing drained)")
    return Report(__version__, prof.name, tuple(by_host[h.host] for h in first.hosts)), outcomes


# -- the command ------------------------------------------------------------------------------------------


def sweep(
    nodes: Annotated[
        str | None,
        typer.Argument(help="The nodes: a Slurm hostlist, e.g. 'gpu[001-064]' (with --partition: those in it)."),
    ] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", help="Sweep this Slurm partition's nodes (sinfo -p).")
    ] = None,
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="The profile each node runs (a bundled name or a YAML path).")
    ] = DEFAULT_PROFILE,
    checks_dir: ChecksDirOpt = None,
    reservation: Annotated[
        str | None,
        typer.Option(
            "--reservation",
            help="Run inside this Slurm reservation: an existing one is used (and kept); one that does not "
            "exist is created on the idle nodes and deleted at the end.",
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Nodes tested at once.")] = 8,
    run_timeout: Annotated[
        float, typer.Option("--run-timeout", min=1.0, help="Seconds one node's run of the profile may take.")
    ] = 3600.0,
    record_file: Annotated[
        str,
        typer.Option("--record-file", help="Where the sweep keeps the drain reasons it set ({node}: the node)."),
    ] = logic.DEFAULT_RECORD_FILE,
    node_command: Annotated[
        str | None,
        typer.Option(
            "--node-command",
            help="How a node starts clustercheck (shell words) [default: this interpreter -m clustercheck].",
        ),
    ] = None,
    out_json: Annotated[Path | None, typer.Option("--out-json", help="Write the merged report as JSON here.")] = None,
    out_html: Annotated[
        Path | None, typer.Option("--out-html", help="Write the merged report as an html page.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say which nodes it would test; run nothing.")] = False,
    no_second_pass: Annotated[
        bool, typer.Option("--no-second-pass", help="Drain on one failed performance measurement.")
    ] = False,
    ssh: Annotated[
        str | None, typer.Option("--ssh", help="Nodes not in Slurm yet: run over SSH (a hostlist); drains nothing.")
    ] = None,
    pairs: Annotated[
        bool,
        typer.Option(
            "--pairs",
            help="After the per-node runs, two-node all_reduce_perf (srun -N2) on pairs of the nodes that passed: "
            "within each leaf switch and across each leaf boundary (nccl.pairs), and ib_write_bw per HCA port between "
            "them when the profile runs rdma.bandwidth (rdma.pairs); drains the straggler.",
        ),
    ] = False,
    pairs_min_busbw: Annotated[
        float, typer.Option("--pairs-min-busbw", min=0.001, help="GB/s: a pair's peak bus bandwidth at least this.")
    ] = 20.0,
    pairs_image: Annotated[
        str | None, typer.Option("--pairs-image", help="Run the pairs inside the site's container image.")
    ] = None,
    pairs_runtime: Annotated[
        str,
        typer.Option(
            "--pairs-runtime",
            help="How the image runs: pyxis (srun --container-image, Enroot) or apptainer (apptainer exec --nv).",
        ),
    ] = "pyxis",
    pairs_mounts: Annotated[
        str | None,
        typer.Option(
            "--pairs-mounts", help="The site's bind options: SRC:DST[,...] (--container-mounts, apptainer --bind)."
        ),
    ] = None,
    pairs_expect: Annotated[
        str, typer.Option("--pairs-expect", help="The network the pairs must use: ib, roce or ofi [default: any RDMA].")
    ] = "",
    pairs_no_gdr: Annotated[
        bool, typer.Option("--pairs-no-gdr", help="Do not require GPUDirect RDMA on the pairs' network channels.")
    ] = False,
    pairs_binary: Annotated[
        str, typer.Option("--pairs-binary", help="all_reduce_perf's name or path (on the nodes, or in the image).")
    ] = "all_reduce_perf",
    pairs_srun_args: Annotated[
        str | None,
        typer.Option("--pairs-srun-args", help="More srun options for the pairs (shell words), e.g. '--mpi=pmix'."),
    ] = None,
    pairs_timeout: Annotated[
        float, typer.Option("--pairs-timeout", min=1.0, help="Seconds one pair's run may take.")
    ] = 300.0,
    pairs_checks: Annotated[
        str | None,
        typer.Option(
            "--pairs-checks",
            help="What --pairs measures, comma-separated: nccl.pairs (all_reduce_perf) and rdma.bandwidth "
            "(ib_write_bw per HCA port, server on one node, client on the other, with the profile's rdma.bandwidth "
            "parameters) [default: nccl.pairs, and rdma.bandwidth when the profile runs it].",
        ),
    ] = None,
    topology: Annotated[
        Path | None,
        typer.Option(
            "--topology",
            help="Slurm's topology.conf or topology.yaml for --pairs [default: the one beside slurm.conf].",
        ),
    ] = None,
    ssh_config: SshConfigOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    port: PortOpt = None,
    accept_new_host_keys: AcceptOpt = False,
) -> int:
    """Prove idle nodes through Slurm: drain what fails (with its action), resume what passes.

    Each idle node of NODES or --partition gets one exclusive allocation running the profile
    (default: deep). A node running a job is never tested, a drain someone else set is never
    touched, and a node this sweep drained is resumed only once it passes. A failed performance
    check is measured once more before a drain. SIGTERM drains again what it had resumed and
    deletes the reservations it made. The exit code is the merged report's.

    --pairs: then two-node all_reduce_perf (srun -N2) on pairs of the nodes that passed, within
    each leaf switch of Slurm's topology and across each leaf boundary, inside --pairs-image;
    each pair's transport, GPUDirect RDMA and bus bandwidth go in the report, and the node slow in
    every pair it is in is drained (INVESTIGATE) once a second measurement confirms it. With
    rdma.bandwidth in the profile, ib_write_bw also runs between the two nodes of each pair, per
    HCA port, judged against each end's port rate (rdma.pairs; its straggler: CHECK_CABLE).
    """
    for path, option in ((out_json, "--out-json"), (out_html, "--out-html")):
        cli.check_output(path, option)
    if ssh is not None:
        if nodes or partition or reservation or pairs:
            raise UsageError(
                "--ssh HOSTLIST runs without Slurm: give no NODES, --partition, --reservation or --pairs (srun -N2)"
            )
        report, outcomes = ssh_sweep(
            ssh,
            profile,
            tuple(checks_dir or ()),
            jobs,
            run_timeout,
            not no_second_pass,
            ssh_config=ssh_config,
            user=user,
            identity=identity,
            port=port,
            accept_new_host_keys=accept_new_host_keys,
        )
        return _finish(report, outcomes, out_json, out_html)
    command = tuple(shlex.split(node_command)) if node_command else (sys.executable, "-m", "clustercheck")
    options = Options(
        nodes=nodes,
        partition=partition,
        profile=_profile_ref(profile),
        checks_dirs=tuple(str(Path(d).resolve()) for d in checks_dir or ()),
        reservation=reservation,
        jobs=jobs,
        run_timeout=run_timeout,
        record_file=record_file,
        clustercheck=command,
        dry_run=dry_run,
        second_pass=not no_second_pass,
        pairs=_pair_options(
            pairs,
            pairs_min_busbw,
            pairs_image,
            pairs_runtime,
            pairs_mounts,
            pairs_expect,
            pairs_no_gdr,
            pairs_binary,
            pairs_srun_args,
            pairs_timeout,
            topology,
            pairs_checks,
        ),
    )
    prof = _check_profile(options)
    if options.pairs is not None:
        options = options._replace(rdma=_rdma_spec(prof, options.pairs, explicit=pairs_checks is not None))
    sweeper = Sweeper(options)
    interrupted: Interrupted | None = None
    try:
        with signals_raise():
            sweeper.run()
    except Interrupted as exc:
        interrupted = exc
    finally:
        problems = sweeper.cleanup(interrupted is not None)
    names = list(sweeper.outcomes)
    report = merged_report(options.profile, names, sweeper.reports, sweeper.outcomes)
    if interrupted is not None:
        for line in _lines(sweeper.outcomes, sweeper.pair_doc):
            slurm_mod.say(line, sys.stdout)
        write_reports(report, sweeper.outcomes, out_json, out_html, sweeper.pair_doc)
        left = "; ".join(problems) if problems else "no node left resumed, no reservation left"
        raise ClusterCheckError(f"sweep interrupted by {interrupted}: {left}")
    for problem in problems:
        slurm_mod.say(f"clustercheck sweep: {problem}", sys.stderr)
    return _finish(report, sweeper.outcomes, out_json, out_html, sweeper.pair_doc)


def _pair_options(
    pairs: bool,
    min_busbw: float,
    image: str | None,
    runtime: str,
    mounts: str | None,
    expect: str,
    no_gdr: bool,
    binary: str,
    srun_args: str | None,
    timeout: float,
    topology: Path | None,
    checks: str | None = None,
) -> PairOptions | None:
    given = [image, mounts, srun_args, topology, checks]
    if not pairs:
        if any(v is not None for v in given):
            raise UsageError(
                "--pairs-image, --pairs-mounts, --pairs-srun-args, --pairs-checks and --topology need --pairs"
            )
        return None
    known = (logic.PAIRS_CHECK, logic.RDMA_CHECK)
    wanted = tuple(dict.fromkeys(c.strip() for c in (checks or "").split(",") if c.strip()))
    if checks is not None and (not wanted or any(c not in known for c in wanted)):
        raise UsageError(f"--pairs-checks takes {' and/or '.join(known)} (comma-separated), got {checks!r}")
    if runtime not in ("pyxis", "apptainer"):
        raise UsageError(f"--pairs-runtime must be pyxis or apptainer, got {runtime!r}")
    if expect not in ("", "ib", "roce", "ofi"):
        raise UsageError(f"--pairs-expect must be ib, roce or ofi (or empty: any RDMA network), got {expect!r}")
    if mounts and not image:
        raise UsageError("--pairs-mounts binds into the image: give --pairs-image too")
    try:
        extra = tuple(shlex.split(srun_args or ""))
    except ValueError as exc:
        raise UsageError(f"--pairs-srun-args {srun_args!r}: {exc}") from None
    return PairOptions(
        min_busbw=min_busbw,
        image=image or "",
        runtime=runtime,
        mounts=mounts or "",
        expect=expect,
        require_gdr=not no_gdr,
        binary=binary,
        srun_args=extra,
        timeout=timeout,
        topology=str(topology) if topology is not None else None,
        checks=wanted or (logic.PAIRS_CHECK, logic.RDMA_CHECK),
    )


def _profile_ref(profile: str) -> str:
    """A profile path as the nodes must read it (absolute); a bundled name as it is."""
    path = Path(profile)
    return str(path.resolve()) if path.suffix in (".yaml", ".yml") or path.exists() else profile


def _check_profile(options: Options) -> Any:
    """The profile loads here before any node is touched (a typo must not drain a partition)."""
    from clustercheck import profile as profiles

    return profiles.load(options.profile, extra_check_dirs=tuple(Path(d) for d in options.checks_dirs))


def _rdma_spec(prof: Any, pairs: PairOptions, *, explicit: bool) -> logic.RdmaSpec | None:
    """rdma.bandwidth's pair form, with the profile's parameters for it: when --pairs-checks names
    it (the profile must run the check), or by default when the profile runs it."""
    if logic.RDMA_CHECK not in pairs.checks:
        return None
    config = next((c for c in prof.checks if c.id == logic.RDMA_CHECK), None)
    if config is None:
        if explicit:
            raise UsageError(
                f"--pairs-checks {logic.RDMA_CHECK}: the profile {prof.name!r} does not run {logic.RDMA_CHECK}, whose "
                "parameters (devices, port, min_fraction, cuda, ...) the pair form takes: add it to the profile"
            )
        return None
    return logic.RdmaSpec.from_params(config.params, config.timeout)


def _finish(
    report: Report,
    outcomes: dict[str, Outcome],
    out_json: Path | None,
    out_html: Path | None,
    pairs: dict[str, Any] | None = None,
) -> int:
    from clustercheck import formats

    write_reports(report, outcomes, out_json, out_html, pairs)
    formats.render(report, "table", sys.stdout)
    for line in _lines(outcomes, pairs):
        slurm_mod.say(line, sys.stdout)
    return int(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)


__all__ = ["Options", "Outcome", "Sweeper", "register", "sweep"]
