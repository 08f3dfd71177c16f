"""Run a profile's checks on hosts: hosts in parallel (bounded), checks in profile order.

Nothing a host does stops the run: an exception in a check becomes that check's `error`
result; an unreachable host, or a transport that raises what it should not (a bug), becomes
`error` results for its checks; an exception in the caller's `on_host_done` (a closed stdout)
stops the run and is raised again in the caller's thread; a run that outlives
`timeout` reports what finished and `error` for the rest. Workers are daemon threads, so
a host stuck in a syscall cannot keep the process alive after the report is out.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence

from clustercheck import registry
from clustercheck.errors import HostError, Unreachable
from clustercheck.host import DEFAULT_COMMAND_TIMEOUT, Host
from clustercheck.profile import CheckConfig, Profile
from clustercheck.result import CheckResult, HostReport, Report, Result, Status
from clustercheck.transports.base import Transport

OnHostDone = Callable[[HostReport], None]


def run_checks(
    host: Host,
    checks: Sequence[CheckConfig],
    *,
    debug: bool = False,
    done: list[CheckResult] | None = None,
    host_timeout: float | None = None,
    run_deadline: float | None = None,
    run_timeout: float | None = None,
) -> list[CheckResult]:
    """Run checks on one host in order; results are appended to `done` as they finish.

    `host_timeout` bounds all of the host's checks together (a per-host deadline), on top
    of each check's own budget; `run_deadline` (monotonic, the run's --timeout) bounds them
    too, so a check sees in `host.deadline` what is left of the run (storage checks refuse a
    budget that would outlive it: a command killed at the run's end cannot clean up). A check
    that ends after `run_deadline` did not finish within the run (its commands were cut at the
    run's end): it is reported so, as run_profile reports the hosts it stops, not as its result.
    """
    results = [] if done is None else done
    host_deadline = None if host_timeout is None else time.monotonic() + host_timeout
    if run_deadline is not None:
        host_deadline = run_deadline if host_deadline is None else min(host_deadline, run_deadline)
    for config in checks:
        if host.unreachable is not None:  # one connection attempt per host, not one per check
            results.append(CheckResult(config.id, Status.ERROR, f"not run: host unreachable: {host.unreachable}"))
        elif host_deadline is not None and time.monotonic() >= host_deadline:
            limit = "the run's --timeout" if host_deadline == run_deadline else f"--host-timeout {host_timeout:g} s"
            why = f"not run: the host's deadline ({limit}) expired"
            results.append(CheckResult(config.id, Status.ERROR, why))
        else:
            result = run_one(host, config, debug=debug, deadline=host_deadline)
            if run_deadline is not None and time.monotonic() >= run_deadline:
                of = f" of {run_timeout:g} s" if run_timeout is not None else ""
                result = CheckResult(config.id, Status.ERROR, f"not finished: the run's --timeout{of} expired")
            results.append(result)
    return results


def run_one(host: Host, config: CheckConfig, *, debug: bool = False, deadline: float | None = None) -> CheckResult:
    spec = registry.lookup(config.id)
    assert spec is not None, f"profile validation let an unknown check through: {config.id}"
    host.observations = []
    start = time.monotonic()
    host.deadline = min(start + config.timeout, deadline or float("inf"))
    data: dict[str, object] = {}
    action = ""
    try:
        result = spec.func(host, **config.params)
        if not isinstance(result, Result):
            raise TypeError(f"the check returned {type(result).__name__}, not a Result (use ok/warn/fail/skip)")
        status, summary, remedy = result.status, result.summary, result.remedy
        if status in (Status.FAIL, Status.WARN):
            action = result.action or spec.action
        evidence = list(result.evidence)
        data = dict(result.data)
        if status is Status.ERROR:
            raise TypeError("checks may not return `error` themselves; raise an exception instead")
    except Unreachable as exc:
        host.unreachable = str(exc)
        status, summary, remedy, evidence = Status.ERROR, f"host unreachable: {exc}", "", []
    except HostError as exc:  # one may carry the check's remedy and data (a machine-readable action)
        status, summary, remedy = Status.ERROR, str(exc), str(getattr(exc, "remedy", ""))
        data, evidence = dict(getattr(exc, "data", None) or {}), list(getattr(exc, "evidence", ()))
    except FileNotFoundError as exc:  # a file the check needs is absent: it cannot tell
        status, remedy, evidence = Status.ERROR, "", []
        summary = f"cannot tell: {exc.filename or exc} is absent on the node"
    except (Exception, SystemExit) as exc:  # a check (a site's plugin too) that calls sys.exit is its own crash
        status, summary, remedy = Status.ERROR, f"the check crashed: {type(exc).__name__}: {exc}", ""
        evidence = traceback.format_exc().splitlines() if debug else []
    finally:
        host.deadline = None
    evidence += [o for o in host.observations if o not in evidence]
    return CheckResult(config.id, status, summary, tuple(evidence), remedy, time.monotonic() - start, data, action)


def _needed_files(profile: Profile) -> list[str]:
    """The files the profile's checks say they read (`needs=["file /proc/meminfo"]`)."""
    paths: list[str] = []
    for config in profile.checks:
        spec = registry.lookup(config.id)
        for need in spec.needs if spec else ():
            kind, _, path = need.partition(" ")
            if kind == "file" and path.startswith("/") and not any(c in path for c in "<>*?[") and path not in paths:
                paths.append(path)
    return paths


def run_profile(
    profile: Profile,
    transports: Sequence[Transport],
    *,
    version: str,
    jobs: int = 32,
    timeout: float | None = None,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    host_timeout: float | None = None,
    debug: bool = False,
    on_host_done: OnHostDone | None = None,
) -> Report:
    """Run the profile on every transport's host and return the report (hosts in given order)."""
    partial: dict[int, list[CheckResult]] = {i: [] for i in range(len(transports))}
    finished: dict[int, HostReport] = {}
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(transports)):
        todo.put(i)
    done_event = threading.Event()
    lock = threading.Lock()
    stopped = False
    callback_fault: list[BaseException] = []  # on_host_done raised (a closed stdout): the caller's
    run_deadline = None if timeout is None else time.monotonic() + timeout

    def one_host(i: int) -> None:
        transport = transports[i]
        try:
            host = Host(transport, command_timeout=command_timeout)
            try:  # before the checks, so the handshake does not eat the first check's budget
                transport.connect()  # nothing for a transport with no connection (local, replay)
                host.prefetch(_needed_files(profile))  # nothing where read_many is not faster
            except HostError as exc:
                host.unreachable = str(exc) if isinstance(exc, Unreachable) else None
            run_checks(
                host,
                profile.checks,
                debug=debug,
                done=partial[i],
                host_timeout=host_timeout,
                run_deadline=run_deadline,
                run_timeout=timeout,
            )
        except BaseException as exc:  # a transport's bug: this host's error, not a hang
            seen = {c.id for c in partial[i]}
            why = f"clustercheck's own fault on this host: {type(exc).__name__}: {exc}"
            evidence = tuple(traceback.format_exc().splitlines()) if debug else ()
            partial[i] += [CheckResult(c.id, Status.ERROR, why, evidence) for c in profile.checks if c.id not in seen]
        finally:
            with contextlib.suppress(Exception):
                transport.close()

    def worker() -> None:
        while not stopped:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            one_host(i)
            report = HostReport(transports[i].host, tuple(partial[i]))
            with lock:
                if stopped:  # the run's timeout already reported this host
                    return
                finished[i] = report
                try:
                    if on_host_done is not None:
                        on_host_done(report)
                except BaseException as exc:  # raised again in the caller's thread
                    callback_fault.append(exc)
                    done_event.set()
                    return
                if len(finished) == len(transports):
                    done_event.set()

    if not transports:
        done_event.set()
    for n in range(max(1, min(jobs, len(transports)))):
        threading.Thread(target=worker, name=f"clustercheck-worker-{n}", daemon=True).start()
    done_event.wait(timeout)

    hosts: list[HostReport] = []
    late: list[HostReport] = []  # the hosts the run's timeout cut: reported to on_host_done last
    with lock:
        stopped = True
        if callback_fault:
            for transport in transports:
                with contextlib.suppress(Exception):
                    transport.close()
            raise callback_fault[0]
        for i, transport in enumerate(transports):
            if i in finished:
                hosts.append(finished[i])
                continue
            got = list(partial[i])  # before close(): what a check says after it is not its report
            with contextlib.suppress(Exception):  # stop what it still runs; it starts nothing after
                transport.close()
            seen = {c.id for c in got}
            why = f"not finished: the run's --timeout of {timeout:g} s expired"
            got += [CheckResult(c.id, Status.ERROR, why) for c in profile.checks if c.id not in seen]
            hosts.append(HostReport(transport.host, tuple(got)))
            late.append(hosts[-1])
    for report in late:  # after every transport is closed: a callback that raises leaves none open
        if on_host_done is not None:
            on_host_done(report)
    return Report(version, profile.name, tuple(hosts))
