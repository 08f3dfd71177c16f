"""The node as slurmctld sees it (`scontrol show node`), and the one way scontrol is run."""

from __future__ import annotations

import re
from typing import NamedTuple

from clustercheck.host import CommandResult


class NodeState(NamedTuple):
    """A node's state and drain reason, from `scontrol show node NAME`."""

    name: str
    state: str  # e.g. IDLE+DRAIN, MIXED+DRAIN, DOWN+NOT_RESPONDING
    reason: str | None = None  # without the " [user@time]" scontrol appends
    reason_set_by: str | None = None  # "root@2026-11-29T22:39:01"

    @property
    def base(self) -> str:
        return self.state.split("+")[0].rstrip("*~#%$@^-!")

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.split("+")[1:])

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.base in ("DRAIN", "DRAINED", "DRAINING")

    @property
    def down(self) -> bool:
        return self.base == "DOWN"

    @property
    def reboot_pending(self) -> bool:
        return any(f.startswith("REBOOT") for f in self.flags)


_REASON_BY = re.compile(r"(.*?)\s*\[([^\[\]\s]*@[^\[\]\s]*)\]")


def parse_scontrol_show_node(text: str, node: str) -> NodeState:
    """The node's State= and Reason= from `scontrol show node NODE` (the multi-line format).

    Reason= has its own line, "Reason=<text> [<user>@<time>]" (scontrol's node printer); State=
    is a word on another line. Raises ValueError naming what is missing.
    """
    name_m = re.search(r"(?m)^NodeName=(\S+)", text)
    if name_m is None:
        raise ValueError(f"no NodeName= in `scontrol show node {node}` output")
    if name_m.group(1) != node:
        raise ValueError(f"`scontrol show node {node}` described node {name_m.group(1)}")
    state_m = re.search(r"(?m)(?:^|\s)State=(\S+)", text)
    if state_m is None:
        raise ValueError(f"no State= in `scontrol show node {node}` output")
    reason: str | None = None
    set_by: str | None = None
    reason_m = re.search(r"(?m)^\s*Reason=(.*)$", text)
    if reason_m is not None:
        value = reason_m.group(1).rstrip()
        by = _REASON_BY.fullmatch(value)
        reason, set_by = (by.group(1), by.group(2)) if by else (value, None)
        if reason in ("", "(null)"):
            reason = None
    return NodeState(node, state_m.group(1), reason, set_by)


def _scontrol(argv: list[str], timeout: float) -> CommandResult:
    from clustercheck.transports.local import LocalTransport

    return LocalTransport().run(argv, timeout=timeout)
