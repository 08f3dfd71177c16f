"""Progress of a multi-host run, on stderr (stdout carries only the report).

On a terminal: a Rich live line (hosts done / total, failures so far, the slowest hosts).
Otherwise (a log, a CI job): one plain line per host as it finishes (for a host that could not
be reached, why: `[3/64] gpu017 unreachable: connection refused (port 22)`).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from clustercheck.result import HostReport, Status


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.done = 0
        self.bad = 0
        self.start = time.monotonic()
        self.durations: dict[str, float] = {}
        self._lock = threading.Lock()
        self._live: Any = None
        if _isatty(self.stream):
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._line(), console=Console(file=self.stream), transient=True, refresh_per_second=8)
            self._live.start()

    def _line(self) -> Any:
        from rich.text import Text

        slow = sorted(self.durations.items(), key=lambda kv: -kv[1])[:3]
        slowest = ", ".join(f"{h} {d:.1f} s" for h, d in slow)
        return Text.assemble(
            (f"{self.done}/{self.total} hosts", "bold"),
            f" · {self.bad} with failures or errors · {time.monotonic() - self.start:.0f} s",
            f" · slowest: {slowest}" if slowest else "",
        )

    def host_done(self, host: HostReport) -> None:
        with self._lock:
            self.done += 1
            self.bad += host.status in (Status.FAIL, Status.ERROR)
            seconds = sum(c.duration_s for c in host.checks)
            self.durations[host.host] = seconds
            if self._live is not None:
                self._live.update(self._line())
            else:
                from clustercheck.analyzers.fleet import is_unreachable, unreachable_cause, unreachable_message

                state = host.status.value
                if is_unreachable(host):  # say why once here, as the report will
                    state = f"unreachable: {unreachable_cause(unreachable_message(host.checks[0]) or '', host.host)}"
                print(
                    f"clustercheck: [{self.done}/{self.total}] {host.host} {state} ({seconds:.1f} s)",
                    file=self.stream,
                    flush=True,
                )

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
