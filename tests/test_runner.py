"""runner.run_profile: a host whose transport misbehaves (a bug of clustercheck's or of a
transport plugin) is reported as that host's `error`, never a hang of the whole run; a fault in
the caller's own callback (a closed stdout) reaches the caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from clustercheck import __version__, runner
from clustercheck import profile as profiles
from clustercheck.result import HostReport, Status
from clustercheck.transports.local import LocalTransport


class Broken(LocalTransport):
    """The local node, whose connect() or run() raises what no transport should."""

    def __init__(self, host: str, where: str, exc: BaseException) -> None:
        super().__init__(host)
        self.where, self.exc = where, exc

    def connect(self) -> None:
        if self.where == "connect":
            raise self.exc

    def run(self, argv: object, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        if self.where == "run":
            raise self.exc
        return super().run(argv, *args, **kwargs)  # type: ignore[arg-type]


T = TypeVar("T")


def _in_thread(body: Callable[[], T], limit: float = 30) -> T:
    """body() in a thread: a hang fails the test instead of stopping the suite."""
    out: list[T] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            out.append(body())
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"run_profile did not return within {limit} s"
    if errors:
        raise errors[0]
    return out[0]


@pytest.mark.parametrize(
    ("where", "exc"),
    [
        ("connect", AttributeError("'NoneType' object has no attribute 'open_session'")),
        ("run", SystemExit(3)),
        ("run", RuntimeError("transport plugin bug")),
    ],
)
def test_a_transport_that_raises_is_that_hosts_error_and_the_others_are_judged(where: str, exc: BaseException) -> None:
    prof = profiles.load("base")
    transports = [LocalTransport(), Broken("bad1", where, exc), LocalTransport()]
    report = _in_thread(lambda: runner.run_profile(prof, transports, version=__version__, jobs=2))
    by_host = {h.host: h for h in report.hosts}
    bad = by_host["bad1"]
    assert [c.id for c in bad.checks] == [c.id for c in prof.checks]  # every check reported
    crashed = [c for c in bad.checks if c.status is Status.ERROR]
    assert crashed, bad.checks
    assert any(type(exc).__name__ in c.summary for c in crashed), [c.summary for c in crashed]
    good = [h for h in report.hosts if h.host != "bad1"]
    assert len(good) == 2
    assert all(c.status is not Status.ERROR or "crashed" not in c.summary for h in good for c in h.checks)


def test_a_callback_that_raises_reaches_the_caller_without_a_hang() -> None:
    prof = profiles.load("base")

    def closed_stdout(report: HostReport) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        _in_thread(
            lambda: runner.run_profile(
                prof, [LocalTransport(), LocalTransport()], version=__version__, jobs=2, on_host_done=closed_stdout
            )
        )


def test_a_check_that_calls_sys_exit_is_its_own_crash_and_the_next_checks_run(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "quitter.py").write_text(
        "import sys\nfrom clustercheck import check\n\n\n@check()\ndef leaves(host):\n"
        '    """Leaves the process."""\n    sys.exit(4)\n'
    )
    prof_file = tmp_path / "p.yaml"
    prof_file.write_text("checks:\n  quitter.leaves:\n  node.kernel:\n")
    prof = profiles.load(str(prof_file), extra_check_dirs=(site,))
    report = _in_thread(lambda: runner.run_profile(prof, [LocalTransport()], version=__version__))
    (host,) = report.hosts
    first, second = host.checks
    assert (first.id, first.status) == ("quitter.leaves", Status.ERROR)
    assert first.summary == "the check crashed: SystemExit: 4", first.summary
    assert second.id == "node.kernel" and "own fault" not in second.summary  # the host's next check ran


def test_a_callback_that_raises_after_the_runs_timeout_leaves_no_transport_open() -> None:
    closed: list[str] = []

    class Slow(LocalTransport):
        def run(self, argv: object, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            time.sleep(5)
            return super().run(argv, *args, **kwargs)  # type: ignore[arg-type]

        def close(self) -> None:
            closed.append(self.host)
            super().close()

    def closed_stdout(report: HostReport) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    prof = profiles.load("base")
    hosts: list[LocalTransport] = [Slow(f"slow{i}") for i in range(3)]
    with pytest.raises(BrokenPipeError):
        _in_thread(
            lambda: runner.run_profile(
                prof, hosts, version=__version__, jobs=3, timeout=0.5, on_host_done=closed_stdout
            )
        )
    assert sorted(set(closed)) == ["slow0", "slow1", "slow2"]
