"""Every option the plain parsers read, one table a command: the single file's parser (bare.py),
cli's fast `run --local` path and the prolog's own parser (slurm.parse_prolog_args) read their
options from here, without Typer.

The Typer application declares the same options with their help (app.py, commands/);
tests/test_architecture.py asserts that each table here equals what Typer declares (names and
kinds), so a new option cannot reach one parser and miss the other. Standard library only: the
prolog imports this on every job start.
"""

from __future__ import annotations

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


def with_values(spec: Spec, keys: set[str] | None = None) -> dict[str, str]:
    """option -> key for the options that take a value (once or repeated), of `keys` only if given."""
    return {o: k for o, (k, kind) in spec.items() if kind != "flag" and (keys is None or k in keys)}


def flags(spec: Spec, keys: set[str] | None = None) -> dict[str, str]:
    """option -> key for the flags, of `keys` only if given."""
    return {o: k for o, (k, kind) in spec.items() if kind == "flag" and (keys is None or k in keys)}
