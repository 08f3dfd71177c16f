"""Running the profile on this one node: what both modes (prolog, health) share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clustercheck import __version__
from clustercheck.host import Transport
from clustercheck.result import CheckResult, Report
from clustercheck.transports import make_transports


def _transports(replay: Path | None, node: str | None) -> list[Transport]:
    """This node (named `node` for Slurm), or the one node --replay holds (transports.make_transports)."""
    return make_transports(replay=[replay] if replay is not None else None, node=node, one_node=True)


def _run_checks(
    profile: str | None,
    transports: Sequence[Any],
    checks_dirs: Sequence[Path],
    timeout: float,
    *,
    debug: bool,
    wrap: Any = None,
    trust_fixture_code: bool = False,
) -> Report:
    """Run the profile (default: the bundled `prolog`; with --replay, the fixture's) on one node.

    A profile taken from a fixture loads no code of its own unless trusted (profile.load's
    allow_code): fixtures are data people send each other, and this runs as root.
    """
    from clustercheck import profile as profiles
    from clustercheck import runner

    allow_code = True
    if profile is None:
        if any(t.fixture is not None for t in transports):
            profile = profiles.recorded_profile(transports)
            allow_code = trust_fixture_code
        else:
            profile = "prolog"
    prof = profiles.load(profile, extra_check_dirs=tuple(checks_dirs), allow_code=allow_code)
    return runner.run_profile(
        prof,
        [wrap(t) for t in transports] if wrap else transports,
        version=__version__,
        jobs=1,
        timeout=max(0.1, timeout),
        command_timeout=max(0.1, min(10.0, timeout)),
        debug=debug,
    )


def _checks_of(payload: Mapping[str, Any]) -> tuple[str, str, list[CheckResult]]:
    """(host, profile, results) from a child's report JSON (Report.to_json of one host)."""
    hosts = payload.get("hosts") or {}
    host, entry = next(iter(hosts.items())) if hosts else ("", {"checks": []})
    return str(host), str(payload.get("profile", "")), [CheckResult.from_json(c) for c in entry.get("checks", [])]
