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
from typing import Any, NoReturn

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


def parse(command: str, args: Sequence[str], spec: Spec) -> tuple[dict[str, Any], list[str]]:
    """`--opt VALUE`, `--opt=VALUE`, flags and positional arguments; a UsageError for anything else."""
    opts: dict[str, Any] = {key: [] for key, kind in spec.values() if kind == "multi"}
    positional: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--help", "-h"):
            print(USAGE, end="")
            sys.exit(0)
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, eq, inline = arg.partition("=")
        if name not in spec:
            known = ", ".join(sorted({n for n in spec if n.startswith("--")}))
            raise UsageError(f"{command}: no option {name!r} in the single file (it takes {known})")
        key, kind = spec[name]
        if kind == "flag":
            if eq:
                raise UsageError(f"{command}: {name} takes no value")
            opts[key] = True
            continue
        if eq:
            value = inline
        elif rest:
            value = rest.pop(0)
        else:
            raise UsageError(f"{command}: {name} needs a value")
        if kind == "multi":
            opts[key].append(value)
        elif key in opts:
            raise UsageError(f"{command}: {name} given twice")
        else:
            opts[key] = value
    return opts, positional


def _number(command: str, name: str, value: str | None, low: float, kind: type = float) -> Any:
    if value is None:
        return None
    try:
        number = kind(value)
    except ValueError:
        raise UsageError(f"{command}: {name} {value!r} is not a number") from None
    if not low <= number < 1e9:
        raise UsageError(f"{command}: {name} must be at least {low:g}")
    return number


def _choice(command: str, name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise UsageError(f"{command}: {name} {value!r}: choose one of {', '.join(choices)}")
    return value


def _no_positional(command: str, positional: list[str]) -> None:
    if positional:
        raise UsageError(f"{command}: unexpected argument {positional[0]!r}")


# run's options for --ssh: the single file has no SSH (paramiko's cryptography is a C extension)
SSH_OPTIONS = tuple(options.RUN_SSH)


def run(args: Sequence[str]) -> int:
    if any(a.partition("=")[0] in SSH_OPTIONS for a in args):
        raise _not_carried("paramiko", "run --ssh")
    opts, positional = parse("run", args, _RUN)
    _no_positional("run", positional)
    replay = [Path(r) for r in opts["replay"]]
    transports = make_transports(bool(opts.get("local")), None, replay)
    from clustercheck import formats

    return cli.execute_run(
        opts.get("profile"),
        transports,
        checks_dirs=tuple(Path(c) for c in opts["checks"]),
        fmt=_choice("run", "--format", opts.get("format", "table"), formats.FORMATS),
        output=Path(opts["output"]) if "output" in opts else None,
        verbose=bool(opts.get("verbose")),
        timeout=_number("run", "--timeout", opts.get("timeout"), 0.1),
        command_timeout=_number("run", "--command-timeout", opts.get("command_timeout", "10"), 0.1),
        host_timeout=_number("run", "--host-timeout", opts.get("host_timeout"), 0.1),
        jobs=_number("run", "--jobs", opts.get("jobs", "32"), 1, int),
        by=_choice("run", "--by", opts.get("by", "check"), ("check", "host")),
        all_hosts=bool(opts.get("all_hosts")),
        trust_fixture_code=bool(opts.get("trust_fixture_code")),
    )


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

    opts, positional = parse("health", args, _HEALTH)
    _no_positional("health", positional)
    values = {k: v for k, v in opts.items() if k not in ("checks", "format")}
    if "budget" in values:
        values["budget"] = _number("health", "--budget", values["budget"], 1.0)
    if "replay" in values:
        values["replay"] = Path(values["replay"])
    options = slurm.HealthOptions(
        checks_dirs=tuple(Path(c) for c in opts["checks"]),
        fmt=_choice("health", "--format", opts.get("format", "table"), ("table", "json")),
        debug=cli.state.debug,
        **values,
    )
    return slurm.health(options)


def checks(args: Sequence[str]) -> int:
    import json

    from clustercheck import registry

    opts, positional = parse("checks", args, _CHECKS)
    _no_positional("checks", positional)
    fmt = _choice("checks", "--format", opts.get("format", "table"), ("table", "json"))
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

    sys.exit(cli.guarded(body))
