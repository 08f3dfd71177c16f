"""Every option the plain parsers read, one table a command: the single file's parser (bare.py),
cli's fast `run` path and the prolog's own parser (slurm.parse_prolog_args) read their
options from here, without Typer.

The Typer application declares the same options with their help (app.py, commands/);
tests/test_architecture.py asserts that each table here equals what Typer declares (names and
kinds), so a new option cannot reach one parser and miss the other. Standard library only: the
prolog imports this on every job start.

`parse` is the one plain parser of these tables (the single file's and the full install's fast
`run`), and `number` / `choice` read its values, each raising a UsageError that names the option.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from clustercheck.errors import UsageError

# option -> (key, kind): kind "value" (once), "multi" (repeatable) or "flag"
Spec = dict[str, tuple[str, str]]

#: run's options for --ssh (the single file has no SSH: paramiko's cryptography is a C extension)
RUN_SSH: Spec = {
    "--ssh": ("ssh", "value"),
    "--ssh-config": ("ssh_config", "value"),
    "--user": ("user", "value"),
    "-l": ("user", "value"),
    "--identity": ("identity", "multi"),
    "-i": ("identity", "multi"),
    "--port": ("port", "value"),
    "--accept-new-host-keys": ("accept_new_host_keys", "flag"),
}
#: run's other options
RUN: Spec = {
    "--profile": ("profile", "value"),
    "-p": ("profile", "value"),
    "--local": ("local", "flag"),
    "--replay": ("replay", "multi"),
    "--checks": ("checks", "multi"),
    "--format": ("format", "value"),
    "-f": ("format", "value"),
    "--output": ("output", "value"),
    "-o": ("output", "value"),
    "--verbose": ("verbose", "flag"),
    "-v": ("verbose", "flag"),
    "--by": ("by", "value"),
    "--all": ("all_hosts", "flag"),
    "--timeout": ("timeout", "value"),
    "--command-timeout": ("command_timeout", "value"),
    "--host-timeout": ("host_timeout", "value"),
    "--jobs": ("jobs", "value"),
    "-j": ("jobs", "value"),
    "--trust-fixture-code": ("trust_fixture_code", "flag"),
}
PROLOG: Spec = {
    "--profile": ("profile", "value"),
    "-p": ("profile", "value"),
    "--budget": ("budget", "value"),
    "--replay": ("replay", "value"),
    "--checks": ("checks", "multi"),
    "--state-file": ("state_file", "value"),
    "--on-internal-error": ("on_internal_error", "value"),
    "--syslog-socket": ("syslog_socket", "value"),
    "--dry-run": ("dry_run", "flag"),
    "--trust-fixture-code": ("trust_fixture_code", "flag"),
}
HEALTH: Spec = {
    "--profile": ("profile", "value"),
    "-p": ("profile", "value"),
    "--node": ("node", "value"),
    "--dry-run": ("dry_run", "flag"),
    "--replay": ("replay", "value"),
    "--checks": ("checks", "multi"),
    "--budget": ("budget", "value"),
    "--state-file": ("state_file", "value"),
    "--record-file": ("record_file", "value"),
    "--scontrol": ("scontrol", "value"),
    "--format": ("format", "value"),
    "-f": ("format", "value"),
    "--syslog-socket": ("syslog_socket", "value"),
    "--trust-fixture-code": ("trust_fixture_code", "flag"),
}
CHECKS: Spec = {
    "--format": ("format", "value"),
    "-f": ("format", "value"),
    "--checks": ("checks", "multi"),
    "--profile": ("profile", "value"),
    "-p": ("profile", "value"),
}
#: each command's whole table, as its Typer command declares it
COMMANDS: dict[str, Spec] = {"run": {**RUN, **RUN_SSH}, "prolog": PROLOG, "health": HEALTH, "checks": CHECKS}


def with_values(spec: Spec) -> dict[str, str]:
    """option -> key for the options that take a value (once or repeated)."""
    return {o: k for o, (k, kind) in spec.items() if kind != "flag"}


def flags(spec: Spec) -> dict[str, str]:
    """option -> key for the flags."""
    return {o: k for o, (k, kind) in spec.items() if kind == "flag"}


def parse(
    command: str, args: Sequence[str], spec: Spec, on_help: Callable[[], Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """`--opt VALUE`, `--opt=VALUE`, flags and positional arguments: ({key: value, True for a flag,
    [values] for a repeatable one}, positional); a UsageError for anything else. `--help` / `-h`
    in an option's place calls `on_help` (which does not return), or is a UsageError without one."""
    opts: dict[str, Any] = {key: [] for key, kind in spec.values() if kind == "multi"}
    positional: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--help", "-h"):
            if on_help is not None:
                on_help()
            raise UsageError(f"{command}: {arg}")
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


def number(command: str, name: str, value: str | None, low: float, kind: type = float) -> Any:
    """An option's number (None when not given), at least `low` and below 1e9 (so never nan or inf)."""
    if value is None:
        return None
    try:
        got = kind(value)
    except ValueError:
        raise UsageError(f"{command}: {name} {value!r} is not a number") from None
    if not low <= got < 1e9:
        raise UsageError(f"{command}: {name} must be at least {low:g}")
    return got


def choice(command: str, name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise UsageError(f"{command}: {name} {value!r}: choose one of {', '.join(choices)}")
    return value


def no_positional(command: str, positional: list[str]) -> None:
    if positional:
        raise UsageError(f"{command}: unexpected argument {positional[0]!r}")
