"""The table format: for people at a terminal. One table per host, then a totals line.

Each host's table is titled with the host and its status and lists every check: id,
status (ok green, warn yellow, fail red, skip dim, error magenta) and summary, and, when a
problem row names one, the action it asks for (result.ACTIONS: RESET_GPU, REBOOT, ...); with
verbose, the summary cell also holds the evidence (indented, dim), the remedy and what the
action means. Several hosts: the action is a column of the problems by check and is named
after each problem of the by-host lines.

Colour only when `out` is a terminal (rich decides; FORCE_COLOR, TTY_COMPATIBLE and
NO_COLOR are honoured). Text from checks is never read as rich markup, and control
characters in it are spelled out (`\\x1b`), so command output cannot drive the terminal.
Width: the terminal's; off a terminal (a pipe, a file) $COLUMNS, else 120 columns.
"""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from clustercheck.formats.text import escape_controls
from clustercheck.result import ACTIONS, CheckResult, HostReport, Report, Status

__all__ = ["STATUS_STYLES", "render"]

#: Width when `out` is not a terminal (a file, a pipe, a test).
DEFAULT_WIDTH = 120

STATUS_STYLES = {
    Status.OK: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
    Status.ERROR: "magenta",
}


def _text(text: str, style: str = "") -> Text:
    """Check-provided text, never markup, controls spelled out, tabs expanded."""
    return Text(escape_controls(text).expandtabs(8), style=style)


def _status(status: Status) -> Text:
    return Text(status.value, style=STATUS_STYLES[status])


def _details(check: CheckResult) -> RenderableType:
    """Verbose summary cell: the summary, then the evidence indented, then the remedy."""
    parts: list[RenderableType] = [_text(check.summary)]
    if check.evidence:
        parts.append(Padding(_text("\n".join(check.evidence), style="dim"), (0, 0, 0, 2)))
    if check.remedy:
        parts.append(Text.assemble(("remedy: ", "bold cyan"), _text(check.remedy)))
    if check.action:
        parts.append(Text.assemble(("action: ", "bold cyan"), f"{check.action}: {ACTIONS.get(check.action, '')}"))
    return Group(*parts)


def _host_table(host: HostReport, *, verbose: bool, id_width: int) -> Table:
    table = Table(
        box=box.ROUNDED,
        show_lines=verbose,
        highlight=False,
    )
    table.add_column("check", no_wrap=True, min_width=id_width)
    table.add_column("status", no_wrap=True, min_width=5)
    actions = any(c.action for c in host.checks)
    if actions:  # only where a problem names one: a healthy host's table keeps its three columns
        table.add_column("action", no_wrap=True)
    table.add_column("summary", overflow="fold")
    for check in host.checks:
        summary = _details(check) if verbose else _text(check.summary)
        if actions:
            table.add_row(_text(check.id), _status(check.status), _action(check.action), summary)
        else:
            table.add_row(_text(check.id), _status(check.status), summary)
    return table


def _action(action: str) -> Text:
    return Text(action, style="bold cyan")


def _count(n: int, status: Status) -> Text:
    return Text(f"{n} {status.value}", style=STATUS_STYLES[status] if n else "")


def _footer(report: Report, *, separator: str) -> Text:
    """`3 hosts: 1 ok, 1 warn, 1 fail · checks: 20 ok, 2 warn, 1 fail, 3 skip, 0 error`.

    Hosts list only the statuses some host has; checks list every status.
    """
    hosts = [h.status for h in report.hosts]
    host_counts = [_count(hosts.count(s), s) for s in Status if hosts.count(s)]
    counts = report.counts()
    check_counts = [_count(counts[s.value], s) for s in Status]
    noun = "host" if len(hosts) == 1 else "hosts"
    return Text.assemble(
        f"{len(hosts)} {noun}",
        ": " if host_counts else "",
        Text(", ").join(host_counts),
        f" {separator} checks: ",
        Text(", ").join(check_counts),
    )


class _Console(Console):
    """Rich's console, except that a reader who closed the pipe (`| head`) is an ordinary
    BrokenPipeError for the caller (cli.write_output: the exit code stays the verdict), where rich
    itself would exit 1 ("warn") from inside the table."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(32, "the reader closed the output")


def render(
    report: Report,
    out: TextIO,
    *,
    verbose: bool = False,
    width: int | None = None,
    force_terminal: bool | None = None,
    by: str = "check",
    all_hosts: bool = False,
) -> None:
    """Tables of the report onto `out`.

    One host: its table. Several: the fleet view (hosts by status, unreachable hosts by
    cause, problems by check or, with `by="host"`, one line per problem host, drift,
    stragglers); `verbose` puts the problem hosts' tables (every host's with `all_hosts`)
    with evidence and remedies before it. `width` defaults to the terminal's, else 120;
    `force_terminal` overrides rich's guess whether `out` is a terminal (colour).
    """
    if width is None and not _isatty(out):
        width = piped_width()
    console = _Console(
        file=out,
        width=width,
        force_terminal=force_terminal,
        markup=False,
        emoji=False,
        highlight=False,
    )
    id_width = max((len(c.id) for h in report.hosts for c in h.checks), default=5)
    fleet = len(report.hosts) > 1
    if not fleet:
        shown: tuple[HostReport, ...] = report.hosts
    elif all_hosts:
        shown = report.hosts
    elif verbose:
        # The problem hosts; a host that could not be reached has only "not run" rows,
        # which the unreachable block says once.
        from clustercheck.analyzers.fleet import is_unreachable

        shown = tuple(h for h in report.hosts if h.status not in _QUIET and not is_unreachable(h))
    else:
        shown = ()
    for host in shown:
        # The title is a line of its own, as a Table title would be padded with blanks.
        console.print(Text.assemble(_text(host.host, style="bold"), " ", _status(host.status)))
        if not fleet and _print_unreachable(console, host):
            continue
        console.print(_host_table(host, verbose=verbose, id_width=id_width))
        console.print()
    if fleet:
        _print_fleet(console, report, by=by, verbose=verbose)
    if fleet and not verbose:
        hint = "-v: the problem hosts' checks with evidence and remedies"
        hint += " · --by check: problems by check" if by == "host" else " · --by host: one line per host"
        if console.encoding.lower().startswith("utf"):
            console.print(Text(f"({hint})", style="dim"))
        else:
            console.print(Text(f"({hint.replace(' · ', '; ')})", style="dim"))
    separator = "·" if console.encoding.lower().startswith("utf") else "-"
    console.print(_footer(report, separator=separator))


_QUIET = (Status.OK, Status.SKIP)


def _print_unreachable(console: Console, host: HostReport) -> bool:
    """One host that could not be reached: why, once, instead of a "not run" row per check."""
    from clustercheck.analyzers.fleet import is_unreachable, unreachable_message

    if not is_unreachable(host):
        return False
    message = unreachable_message(host.checks[0]) or ""
    n = len(host.checks)
    console.print(Text.assemble(("unreachable", STATUS_STYLES[Status.ERROR]), ": ", _text(message)))
    console.print(Text(f"({n} check{'s' if n != 1 else ''} not run)", style="dim"))
    console.print()
    return True


def _print_fleet(console: Console, report: Report, *, by: str, verbose: bool) -> None:
    """Several hosts: what they share, in a few lines (problems, unreachable hosts, drift, stragglers)."""
    from clustercheck.analyzers.fleet import summarize
    from clustercheck.hostlist import fold

    fleet = summarize(report)
    for status, hosts in fleet.hosts_by_status.items():
        if hosts:
            noun = "host" if len(hosts) == 1 else "hosts"
            console.print(Text.assemble(_status(Status(status)), f" {len(hosts)} {noun}: ", fold(hosts)))
    console.print()
    for unreachable in fleet.unreachable:
        line = Text.assemble(
            ("unreachable", STATUS_STYLES[Status.ERROR]), ": ", fold(unreachable.hosts), ": ", _text(unreachable.cause)
        )
        console.print(line)
        if verbose:
            for host, message in unreachable.messages:
                console.print(Padding(Text.assemble((host, "bold"), ": ", _text(message)), (0, 0, 0, 2)))
    if fleet.unreachable:
        console.print()
    if by == "host":
        rows = [h for h in fleet.hosts if h.problems]  # the unreachable ones are above
        if rows:
            console.print(Text("problems by host", style="bold"))
            table = Table(box=box.SIMPLE_HEAD, highlight=False)
            table.add_column("host", no_wrap=True)
            table.add_column("status", no_wrap=True)
            table.add_column("problems", overflow="fold")
            for h in rows:
                table.add_row(_text(h.host), _status(h.status), _text(h.line()))
            console.print(table)
    elif fleet.groups:
        console.print(Text("problems by check", style="bold"))
        table = Table(box=box.SIMPLE_HEAD, highlight=False)
        actions = any(g.action for g in fleet.groups)
        columns = ("status", "check", "hosts", *(("action",) if actions else ()), "summary")
        for column in columns:
            table.add_column(column, overflow="fold", no_wrap=column in ("status", "action"))
        for group in fleet.groups:
            cells = [_status(group.status), _text(group.check), _text(f"{fold(group.hosts)} ({len(group.hosts)})")]
            if actions:
                cells.append(_action(group.action))
            table.add_row(*cells, _text(group.summary))
        console.print(table)
    if fleet.drift:
        console.print(Text("drift from the majority", style="bold"))
        table = Table(box=box.SIMPLE_HEAD, highlight=False)
        for column in ("fact", "majority", "differing hosts"):
            table.add_column(column, overflow="fold")
        for drift in fleet.drift:
            others = "; ".join(f"{value} on {fold(hosts)}" for value, hosts in drift.others)
            table.add_row(_text(drift.fact), _text(f"{drift.majority} ({drift.majority_hosts} hosts)"), _text(others))
        console.print(table)
    if fleet.stragglers:
        slow = ", ".join(f"{s.host} {s.duration_s:.1f} s" for s in fleet.stragglers)
        console.print(
            Text.assemble(("stragglers", "bold"), f" (fleet median {fleet.stragglers[0].median_s:.1f} s): ", slow)
        )
        console.print()


def piped_width() -> int:
    """Width off a terminal (a pipe, a file): $COLUMNS when it is a number (20 or more), else 120."""
    import os

    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= 20 else DEFAULT_WIDTH


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
