"""The entry point (`clustercheck`, `python -m clustercheck`): above the CLI's modules.

The plain fast paths (cli.fast_run, cli.fast_prolog, commands.nccl.fast_nccl_log) run without
importing Typer; anything else, `--help` included, goes to the Typer application (app.py).
Each returns the command's exit code, and everything runs inside cli.guarded, the one error
boundary, which returns that code or turns an exception into its message and code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from clustercheck import cli
from clustercheck.result import ExitCode


def _fast_nccl_log(args: list[str]) -> int | None:
    if args[:1] != ["nccl-log"]:
        return None
    from clustercheck.commands.nccl import fast_nccl_log

    return fast_nccl_log(args[1:])


def _typer(args: list[str]) -> int:
    """The Typer application, with click's standalone mode off: app() returns the command's
    return value (an Exit's code for --help, --version), and click's own errors are raised to
    here, shown as Typer shows them, with Typer's usage exit 2 ("a check failed" here) made 64."""
    import typer

    from clustercheck.app import app

    try:
        returned = app(args=args, prog_name="clustercheck", standalone_mode=False)
    except typer.TyperException as exc:  # click's ClickException (Typer vendors click): a usage error
        show = getattr(exc, "show", None)  # what Typer calls for one (rich_markup_mode=None)
        if callable(show):
            show()
        else:
            print(f"Error: {exc.format_message()}", file=sys.stderr)
        return int(ExitCode.USAGE) if exc.exit_code == 2 else exc.exit_code
    except typer.Abort:  # EOF at a prompt
        print("Aborted!", file=sys.stderr)
        return 1
    except SystemExit as exc:  # click still exits for a closed stdout (EPIPE) and shell completion
        if cli.reader_gone(exc):  # the boundary's to answer, as for the fast paths
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else ExitCode.USAGE)
        return int(ExitCode.USAGE if code == 2 else code)
    return 0 if returned is None else int(returned)  # a command with nothing to say returns None


def _dispatch(args: list[str]) -> int:
    paths: tuple[Callable[[list[str]], int | None], ...] = (cli.fast_run, cli.fast_prolog, _fast_nccl_log)
    for path in paths:
        code = path(args)
        if code is not None:
            return code
    return _typer(args)


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: run the command and map everything to a documented exit code."""
    args = sys.argv[1:] if argv is None else argv
    cli._command[:] = args
    code = cli.guarded(lambda: _dispatch(args))
    cli.flush_stdout()
    sys.exit(code)
