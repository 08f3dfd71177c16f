"""`clustercheck prolog`: the fast profile on every job start, as slurm.conf's Prolog.

The work is in clustercheck.slurm; `clustercheck.main` runs a plain `prolog ...` command line there
without importing Typer (the prolog is on every job's path). This module gives it its
options and --help, and handles everything the fast path hands over.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from clustercheck import cli, slurm


class OnInternalError(str, Enum):
    pass_ = "pass"
    fail = "fail"


# Options `prolog` and `health` share (health imports them from here).
SlurmProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        help="A profile's YAML path or a bundled profile's name [default: prolog; with --replay, the fixture's].",
    ),
]
ReplayOpt = Annotated[
    Path | None,
    typer.Option("--replay", help="Judge a recorded fixture instead of this node (tests and fire drills)."),
]
ChecksDirOpt = Annotated[
    list[Path] | None, typer.Option("--checks", help="A folder of site check modules (repeatable).")
]
SyslogOpt = Annotated[str, typer.Option("--syslog-socket", help="The syslog socket ('' for none).")]
TrustOpt = Annotated[
    bool,
    typer.Option(
        "--trust-fixture-code",
        help="Let the profile a --replay fixture names load its own check code (check_dirs, extends).",
    ),
]


def prolog(
    profile: SlurmProfileOpt = None,
    budget: Annotated[
        float,
        typer.Option(
            "--budget", min=0.1, help="Hard limit in seconds for the whole prolog; unfinished checks are errors."
        ),
    ] = slurm.PROLOG_BUDGET,
    replay: ReplayOpt = None,
    checks_dir: ChecksDirOpt = None,
    state_file: Annotated[
        str | None,
        typer.Option(
            "--state-file",
            help="Where the verdict is written as JSON; {node} is replaced by the node's name; '' for none "
            f"[default: {slurm.DEFAULT_STATE_FILE}; with --replay or --dry-run: none].",
        ),
    ] = None,
    on_internal_error: Annotated[
        OnInternalError,
        typer.Option(
            "--on-internal-error",
            help="When clustercheck itself cannot judge the node (a bug, a broken profile): pass the node "
            "(logged loudly) or fail it (Slurm drains it).",
        ),
    ] = OnInternalError.pass_,
    syslog_socket: Annotated[
        str | None,
        typer.Option(
            "--syslog-socket",
            help=f"The syslog socket ('' for none) [default: {slurm.DEFAULT_SYSLOG}; with --replay and no "
            "--state-file, or --dry-run: none].",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Judge the node and show what would be written; write and log nothing."),
    ] = False,
    trust_fixture_code: TrustOpt = False,
) -> int:
    """Judge this node for the job about to start (slurm.conf Prolog=): exit non-zero only when
    it must not run the job.

    Reads SLURMD_NODENAME, SLURM_JOB_ID and the job's GPUs from the prolog environment, never
    calls Slurm commands, and writes the verdict to syslog and to the state file. A failed check
    exits 2: Slurm drains the node ("Prolog error") and requeues the job. Warnings and checks
    that could not tell let the job run, and so does every fault of clustercheck itself (a
    mistake on this command line, a closed stdout, a crash, the budget), unless
    --on-internal-error fail: it is said on stderr and in syslog.
    """
    options = slurm.PrologOptions(
        profile=profile,
        budget=budget,
        replay=replay,
        checks_dirs=tuple(checks_dir or ()),
        state_file=state_file,
        on_internal_error=on_internal_error.value,
        syslog_socket=syslog_socket,
        debug=cli.state.debug,
        dry_run=dry_run,
        trust_fixture_code=trust_fixture_code,
    )
    return cli.run_prolog(options)


def register(app: typer.Typer) -> None:
    app.command("prolog")(prolog)
