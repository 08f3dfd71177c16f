"""`clustercheck health`: slurm.conf's HealthCheckProgram, with safe draining.

The decisions (drain with an owned reason, never touch an admin's drain, resume only its own,
refine a bare "Prolog error") are in clustercheck.slurm; this module gives them options and --help.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from clustercheck import cli, slurm
from clustercheck.commands.prolog import ChecksDirOpt, ReplayOpt, SlurmProfileOpt, SyslogOpt, TrustOpt


class HealthFormat(str, Enum):
    table = "table"
    json = "json"


def health(
    profile: SlurmProfileOpt = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help="The Slurm node name [default: $SLURMD_NODENAME, else the short host name]."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the scontrol command it would run; change nothing.")
    ] = False,
    replay: ReplayOpt = None,
    checks_dir: ChecksDirOpt = None,
    budget: Annotated[
        float,
        typer.Option("--budget", min=1.0, help="Hard limit in seconds (Slurm kills a HealthCheckProgram after 60 s)."),
    ] = slurm.HEALTH_BUDGET,
    state_file: Annotated[
        str,
        typer.Option(
            "--state-file", help="The prolog's state file, to explain a 'Prolog error' drain ({node}: the node)."
        ),
    ] = slurm.DEFAULT_STATE_FILE,
    record_file: Annotated[
        str | None,
        typer.Option(
            "--record-file",
            help="Where health keeps the drain reasons it set (only those it resumes; {node}: the node) "
            f"[default: beside a --state-file given, else {slurm.DEFAULT_RECORD_FILE}].",
        ),
    ] = None,
    scontrol: Annotated[str, typer.Option("--scontrol", help="The scontrol command to use.")] = "scontrol",
    fmt: Annotated[HealthFormat, typer.Option("--format", "-f", help="Output format.")] = HealthFormat.table,
    syslog_socket: SyslogOpt = slurm.DEFAULT_SYSLOG,
    trust_fixture_code: TrustOpt = False,
) -> int:
    """Check this node (slurm.conf HealthCheckProgram=) and drain or resume it, safely.

    A failed check drains the node with Reason="clustercheck: <check>: <summary>" and keeps a
    record of that reason. Only a reason it recorded is ever resumed, once every check passes;
    any other drain is never touched. Slurm's bare "Prolog error" is replaced by the reason in
    the prolog's state file when that file shows clustercheck's prolog failed this node for the
    job the drain followed. Running it again changes nothing.
    """
    options = slurm.HealthOptions(
        profile=profile,
        budget=budget,
        replay=replay,
        checks_dirs=tuple(checks_dir or ()),
        node=node,
        state_file=state_file,
        dry_run=dry_run,
        scontrol=scontrol,
        syslog_socket=syslog_socket,
        fmt=fmt.value,
        debug=cli.state.debug,
        record_file=record_file,
        trust_fixture_code=trust_fixture_code,
    )
    return slurm.health(options)


def register(app: typer.Typer) -> None:
    app.command("health")(health)
