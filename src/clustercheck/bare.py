"""The command line without Typer: what the single file for compute nodes runs.

`dist/clustercheck.pyz` (tools/build_pyz.py) carries clustercheck and its pure-Python
dependencies (PyYAML's pure half, Rich, python-hostlist, nvidia-ml-py, prometheus_client) and
runs on a node's own `python3` with no venv. Typer cannot come: its 0.29 series imports
pydantic, whose core is a C extension built for one Python version. So this module parses the
commands a node needs — `run`, `prolog`, `health`, `checks`, `nccl-log`, `--version` — with plain options,
and hands everything else to Typer when it is importable (a full install), or says what to
install when it is not. Option names, defaults and exit codes are the Typer application's
(app.py, commands/; tests/test_dist.py compares the option names), and the work is done by the
same functions. `prolog` is cli.fast_prolog's: the prolog's own parser and policy; `nccl-log` is
commands.nccl.fast_nccl_log's, the Typer-free path the full install takes for plain arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from clustercheck import __version__, cli, options
from clustercheck.errors import UsageError
from clustercheck.transports import make_transports

COMMANDS = ("run", "prolog", "health", "checks", "nccl-log")

# The distributions a command may need that the single file does not carry (C extensions).
NOT_CARRIED = {
    "typer": "typer",
    "pydantic": "typer",
    "pydantic_core": "typer",
    "paramiko": "paramiko",
    "cryptography": "paramiko",
    "bcrypt": "paramiko",
    "nacl": "paramiko",
    "psutil": "psutil",
    "pygments": "pygments",
    "markdown_it": "markdown-it-py",
}

USAGE = f"""\
Usage: clustercheck [--debug] COMMAND [OPTIONS]   (clustercheck {__version__}, the single file)

  run        [--local | --replay DIR...] --profile P [--checks DIR] [--format F] [--output FILE]
             [--verbose] [--by check|host] [--all] [--timeout S] [--command-timeout S]
             [--host-timeout S] [--jobs N]
  prolog     [--profile P] [--budget S] [--replay DIR] [--checks DIR] [--state-file PATH]
             [--on-internal-error pass|fail] [--syslog-socket PATH] [--dry-run]
             [--trust-fixture-code]
  health     [--profile P] [--node NAME] [--dry-run] [--replay DIR] [--checks DIR] [--budget S]
             [--state-file PATH] [--record-file PATH] [--scontrol PATH] [--format table|json]
             [--syslog-socket PATH] [--trust-fixture-code]
  checks     [--format table|json] [--checks DIR] [--profile P]
  nccl-log   FILE... (- for stdin) [--format table|json] [--expect ib|roce|ofi|socket]
             [--expect-gdr] [--jobs N]
  --version

The other commands (--ssh fleets, record, explain, profiles, topology, report, ...)
need the full install: pip install clustercheck (README: Install).
"""

# option -> (key, kind), one table a command: clustercheck.options (Typer declares the same)
Spec = options.Spec
_RUN: Spec = options.RUN
_HEALTH: Spec = options.HEALTH
_CHECKS: Spec = options.CHECKS
SPECS = {"run": _RUN, "health": _HEALTH, "checks": _CHECKS}


def _usage() -> NoReturn:
    print(USAGE, end="")
    sys.exit(0)


# run's options for --ssh: the single file has no SSH (paramiko's cryptography is a C extension)
SSH_OPTIONS = tuple(options.RUN_SSH)


def run(args: Sequence[str]) -> int:
    if any(a.partition("=")[0] in SSH_OPTIONS for a in args):
        raise _not_carried("paramiko", "run --ssh")
    opts, positional = options.parse("run", args, _RUN, on_help=_usage)
    options.no_positional("run", positional)
    where, how = cli.run_arguments(opts)
    return cli.execute_run(opts.get("profile"), make_transports(**where), **how)


def prolog(args: Sequence[str]) -> int:
    # cli's fast path is the prolog's own parser: what it does with a mistake is the prolog's
    # policy (--on-internal-error), never a usage exit that drains the node; only --help is left
    code = cli.fast_prolog(["--debug", "prolog", *args] if cli.state.debug else ["prolog", *args])
    if code is None:
        print(USAGE, end="")
        return 0
    return code


def health(args: Sequence[str]) -> int:
    from clustercheck import slurm

    opts, positional = options.parse("health", args, _HEALTH, on_help=_usage)
    options.no_positional("health", positional)
    values = {k: v for k, v in opts.items() if k not in ("checks", "format")}
    if "budget" in values:
        values["budget"] = options.number("health", "--budget", values["budget"], 1.0)
    if "replay" in values:
        values["replay"] = Path(values["replay"])
    chosen = slurm.HealthOptions(
        checks_dirs=tuple(Path(c) for c in opts["checks"]),
        fmt=options.choice("health", "--format", opts.get("format", "table"), ("table", "json")),
        debug=cli.state.debug,
        **values,
    )
    return slurm.health(chosen)


def checks(args: Sequence[str]) -> int:
    import json

    from clustercheck import registry

    opts, positional = options.parse("checks", args, _CHECKS, on_help=_usage)
    options.no_positional("checks", positional)
    fmt = options.choice("checks", "--format", opts.get("format", "table"), ("table", "json"))
    dirs = tuple(Path(d) for d in opts["checks"])
    if "profile" in opts:  # its check_dirs too, and every problem in it at once
        from clustercheck import profile as profiles

        profiles.load(opts["profile"], extra_check_dirs=dirs)
    else:
        for d in dirs:
            try:
                registry.load_dir(d)
            except UsageError as exc:
                raise UsageError(f"--checks {d}: {exc}") from None
    specs = registry.all_checks()
    if fmt == "json":
        json.dump([s.to_json() for s in specs], sys.stdout, indent=2)
        print()
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("check", "what it expects", "reads", "parameters", show_lines=True)
    for s in specs:
        params = "\n".join(
            f"{p.name}: {p.type_name}" + (" (required)" if p.required else f" = {p.default!r}") for p in s.params
        )
        table.add_row(s.id, s.title, "\n".join(s.needs), params)
    Console().print(table)
    return 0


def nccl_log(args: Sequence[str]) -> int:
    """`nccl-log`: commands.nccl.fast_nccl_log, the same parser, scan and report as the full install's."""
    from clustercheck.commands.nccl import fast_nccl_log

    code = fast_nccl_log(list(args))
    if code is not None:
        return code
    try:
        import typer  # noqa: F401  (a full install beside the node's python3: its answer)
    except ImportError:
        raise UsageError(
            f"nccl-log {' '.join(args)}: the single file takes FILE... (- for stdin), --format table|json, "
            "--expect ib|roce|ofi|socket, --expect-gdr and --jobs N (N >= 1), each once"
        ) from None
    from clustercheck.main import main as full

    full(["--debug", "nccl-log", *args] if cli.state.debug else ["nccl-log", *args])


def _not_carried(module: str, what: str) -> UsageError:
    dist = NOT_CARRIED.get(module, module)
    why = {
        "typer": "its pydantic core is a C extension, built for one Python version",
        "paramiko": "its cryptography is a C extension, built for one Python version",
        "psutil": "a C extension, built for one Python version",
    }.get(dist, "to keep it small")
    return UsageError(
        f"{what} needs {dist}, which the single file does not carry ({why}): "
        f"install clustercheck with pip (`pip install clustercheck`, README: Install) to use it"
    )


def main(argv: list[str] | None = None) -> NoReturn:
    """The single file's entry point, through cli.guarded: the one error boundary, same exit codes."""
    args = sys.argv[1:] if argv is None else list(argv)
    cli._command[:] = args  # for the --debug hint
    while args and args[0] == "--debug":
        cli.state.debug = True
        args.pop(0)
    command = args[0] if args else "--help"
    handlers = {"run": run, "prolog": prolog, "health": health, "checks": checks, "nccl-log": nccl_log}

    def body() -> int:
        if command == "--version":
            print(f"clustercheck {__version__}")
            return 0
        if command in ("--help", "-h"):
            print(USAGE, end="")
            return 0
        try:
            if command in handlers:
                return handlers[command](args[1:])
            try:
                import typer  # noqa: F401  (a full install beside the node's python3: use it)
            except ImportError:
                raise _not_carried("typer", f"`clustercheck {command}`") from None
            from clustercheck.main import main as full

            full(["--debug", *args] if cli.state.debug else args)
        except ModuleNotFoundError as exc:  # a C-extension dependency the single file does not carry
            top = (exc.name or "").partition(".")[0]
            if top in NOT_CARRIED:
                raise _not_carried(top, " ".join(args[:1]) or "this") from None
            raise

    code = cli.guarded(body)
    cli.flush_stdout()
    sys.exit(code)
