"""The entry point (`clustercheck`, `python -m clustercheck`): above the CLI's modules.

The plain fast paths (cli.fast_local_run, cli.fast_prolog, commands.nccl.fast_nccl_log) run without
importing Typer; anything else, `--help` included, goes to the Typer application (app.py).
Everything runs inside cli.guarded, the one error boundary that picks exit codes.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from clustercheck import cli
from clustercheck.result import ExitCode


def _fast_nccl_log(args: list[str]) -> bool:
    if args[:1] != ["nccl-log"]:
        return False
    from clustercheck.commands.nccl import fast_nccl_log

    return fast_nccl_log(args[1:])


def _dispatch(args: list[str]) -> None:
    if cli.fast_local_run(args) or cli.fast_prolog(args) or _fast_nccl_log(args):
        return
    from clustercheck.app import app

    try:
        app(args=args, prog_name="clustercheck")
    except SystemExit as exc:  # Typer always ends this way
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else ExitCode.USAGE)
        # Typer's own usage errors exit 2, which means "a check failed" here: remap them.
        cli.state.exit_code = int(ExitCode.USAGE if code == 2 else (code or cli.state.exit_code))


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: run the command and map everything to a documented exit code."""
    args = sys.argv[1:] if argv is None else argv
    cli._command[:] = args
    sys.exit(cli.guarded(lambda: _dispatch(args)))
