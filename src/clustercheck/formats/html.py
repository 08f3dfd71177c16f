"""The html format: one self-contained page for a fleet (no network fetches, inline CSS).

What an admin would rather look at than read for 500 nodes: the totals, a nodes x checks
grid (each cell its status letter on its status colour, with a legend, so it reads without
colour too; hover for the summary), the hosts that could not be reached by cause, one row
per distinct problem with its folded hostlist and the action it asks for (the same grouping
as the table format), drift from the majority, stragglers, and each host's details (evidence,
remedy and action) in a collapsible section. Every text from checks is HTML-escaped.
"""

from __future__ import annotations

from html import escape
from typing import TextIO

from clustercheck.analyzers.fleet import summarize
from clustercheck.hostlist import fold
from clustercheck.result import ACTIONS, Report, Status

_COLOURS = {
    Status.OK: "#2e7d32",
    Status.WARN: "#f9a825",
    Status.FAIL: "#c62828",
    Status.SKIP: "#9e9e9e",
    Status.ERROR: "#8e24aa",
}

#: The letter in each grid cell: the grid must read without colour (and in print).
LETTERS = {Status.OK: "O", Status.WARN: "W", Status.FAIL: "F", Status.SKIP: "S", Status.ERROR: "E"}
# Text on each colour: dark on the light ones (contrast at least 4.5:1, WCAG AA).
_INK = {Status.OK: "#fff", Status.WARN: "#000", Status.FAIL: "#fff", Status.SKIP: "#000", Status.ERROR: "#fff"}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th.check{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;white-space:nowrap}
td.cell{width:1.5em;min-width:1.5em;height:1.5em;padding:0;text-align:center;vertical-align:middle;
font:bold 12px/1 ui-monospace,monospace}
#grid th.host{white-space:nowrap}
.st{border-radius:3px;padding:0 5px}
#legend span.st{display:inline-block;min-width:1.2em;text-align:center;font:bold 12px/1.5 ui-monospace,monospace}
#legend{margin:.4em 0}#legend>span{margin-right:1.2em;white-space:nowrap}
details{margin:.3em 0}summary{cursor:pointer}pre{margin:.2em 0 .2em 1.5em;color:#555;white-space:pre-wrap}
details td:last-child,#groups td:last-child,#unreachable td:last-child,pre{overflow-wrap:anywhere}
""" + "".join(f".s-{s.value}{{background:{c};color:{_INK[s]}}}" for s, c in _COLOURS.items())


def _badge(status: Status) -> str:
    return f'<span class="st s-{status.value}">{status.value}</span>'


def _action(action: str) -> str:
    """An action as a machine-readable code: `<code class="action">REBOOT</code>` (empty: none)."""
    return f'<code class="action">{escape(action)}</code>' if action else ""


def _table_head(title: str, table_id: str, *columns: str) -> str:
    heads = "".join(f"<th>{c}</th>" for c in columns)
    return f'<h2>{title}</h2>\n<table id="{table_id}"><tr>{heads}</tr>\n'


def render(report: Report, out: TextIO, *, verbose: bool = False) -> None:
    fleet = summarize(report)
    checks = list(dict.fromkeys(c.id for h in report.hosts for c in h.checks))
    counts = report.counts()
    w = out.write
    w('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    w(f"<title>clustercheck {escape(report.profile)}: {report.status.value}</title>")
    w(f"<style>{_CSS}</style></head><body>\n")
    w(f"<h1>clustercheck {escape(report.version)} &middot; profile {escape(report.profile)} &middot; ")
    w(f'{_badge(report.status)}</h1>\n<p id="totals">{len(report.hosts)} hosts: ')
    w(", ".join(f"{len(h)} {s}" for s, h in fleet.hosts_by_status.items() if h))
    w(" &middot; checks: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + "</p>\n")

    w('<h2>Nodes &times; checks</h2>\n<p id="legend">')
    for status, letter in LETTERS.items():
        w(f'<span><span class="st s-{status.value}">{letter}</span> {status.value}</span>')
    w('<span><span class="st" style="border:1px solid #ddd">&nbsp;</span> not run on this host</span></p>\n')
    w('<table id="grid"><thead><tr><th>host</th>')
    w("".join(f'<th class="check">{escape(c)}</th>' for c in checks) + "</tr></thead><tbody>\n")
    for host in report.hosts:
        by_id = {c.id: c for c in host.checks}
        w(f'<tr class="host" data-host="{escape(host.host)}">')
        w(f'<th class="host"><a href="#h-{escape(host.host)}">{escape(host.host)}</a></th>')
        for check_id in checks:
            c = by_id.get(check_id)
            if c is None:
                w('<td class="cell"></td>')
                continue
            tip = escape(f"{check_id}: {c.status.value}: {c.summary}" + (f" [{c.action}]" if c.action else ""))
            w(f'<td class="cell s-{c.status.value}" title="{tip}">{LETTERS[c.status]}</td>')
        w("</tr>\n")
    w("</tbody></table>\n")

    if fleet.unreachable:
        w(_table_head("Unreachable hosts", "unreachable", "hosts", "cause"))
        for u in fleet.unreachable:
            messages = "".join(f"{escape(h)}: {escape(m)}\n" for h, m in u.messages)
            w(f"<tr><td>{escape(fold(u.hosts))}&nbsp;({len(u.hosts)})</td><td>{escape(u.cause)}")
            w(f"<details><summary>each host</summary><pre>{messages}</pre></details></td></tr>\n")
        w("</table>\n")
    if fleet.groups:
        actions = any(g.action for g in fleet.groups)
        columns = ("status", "check", "hosts", *(("action",) if actions else ()), "summary")
        w(_table_head("Problems by check", "groups", *columns))
        for g in fleet.groups:  # one row per distinct problem (analyzers.fleet folds them)
            w(f"<tr><td>{_badge(g.status)}</td><td>{escape(g.check)}</td>")
            w(f"<td>{escape(fold(g.hosts))}&nbsp;({len(g.hosts)})</td>")
            if actions:
                w(f"<td>{_action(g.action)}</td>")
            w(f"<td>{escape(g.summary)}</td></tr>\n")
        w("</table>\n")
    if fleet.drift:
        w(_table_head("Drift from the majority", "drift", "fact", "majority", "differing hosts"))
        for d in fleet.drift:
            others = "<br>".join(f"{escape(v)} on {escape(fold(h))}" for v, h in d.others)
            majority = f"{escape(d.majority)} ({d.majority_hosts} hosts)"
            w(f"<tr><td>{escape(d.fact)}</td><td>{majority}</td><td>{others}</td></tr>\n")
        w("</table>\n")
    if fleet.stragglers:
        w(_table_head("Stragglers", "stragglers", "host", "checks took", "fleet median"))
        for s in fleet.stragglers:
            w(f"<tr><td>{escape(s.host)}</td><td>{s.duration_s:.1f} s</td><td>{s.median_s:.1f} s</td></tr>\n")
        w("</table>\n")

    w("<h2>Hosts</h2>\n")
    for host in report.hosts:
        is_open = " open" if host.status in (Status.FAIL, Status.ERROR) and len(report.hosts) <= 50 else ""
        w(f'<details id="h-{escape(host.host)}"{is_open}>')
        w(f"<summary>{escape(host.host)} {_badge(host.status)}</summary>\n")
        w("<table><tr><th>check</th><th>status</th><th>summary</th></tr>\n")
        for c in host.checks:
            detail = ""
            if c.evidence:
                detail += "<pre>" + escape("\n".join(c.evidence)) + "</pre>"
            if c.remedy:
                detail += f"<div><b>remedy:</b> {escape(c.remedy)}</div>"
            if c.action:
                detail += f"<div><b>action:</b> {_action(c.action)}: {escape(ACTIONS.get(c.action, ''))}</div>"
            w(f"<tr><td>{escape(c.id)}</td><td>{_badge(c.status)}</td><td>{escape(c.summary)}{detail}</td></tr>\n")
        w("</table></details>\n")
    w("</body></html>\n")
