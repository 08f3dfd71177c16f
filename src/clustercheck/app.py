"""The Typer application: every subcommand, its options and help.

Imported by `clustercheck.main` for everything but the fast paths (cli.fast_*) (Typer 0.29 pulls in
pydantic, ~85 ms: too much for a Slurm prolog that runs on every job start).
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clustercheck import __version__, cli

if TYPE_CHECKING:
    from clustercheck.profile import Profile
from clustercheck.errors import UsageError
from clustercheck.formats import Format
from clustercheck.transports import make_transports

app = typer.Typer(
    name="clustercheck",
    help="Is this Slurm GPU node really ready for training jobs? Finds the invisible failures.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class ListFormat(str, Enum):
    table = "table"
    json = "json"


def _version(value: bool) -> None:
    if value:
        print(f"clustercheck {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of crashes and of failing checks.")] = False,
) -> None:
    cli.state.debug = debug


# -- shared options -----------------------------------------------------------------------

ProfileOpt = Annotated[
    str | None, typer.Option("--profile", "-p", help="A profile's YAML path or a bundled profile's name.")
]
LocalOpt = Annotated[bool, typer.Option("--local", help="Check this node (the default).")]
SshOpt = Annotated[
    str | None, typer.Option("--ssh", help="Check these hosts over SSH: a Slurm hostlist, e.g. 'gpu[001-064]'.")
]
ChecksDirOpt = Annotated[
    list[Path] | None, typer.Option("--checks", help="A folder of site check modules (repeatable).")
]
SshConfigOpt = Annotated[
    Path | None, typer.Option("--ssh-config", help="Use this ssh_config instead of ~/.ssh/config (as ssh -F).")
]
UserOpt = Annotated[str | None, typer.Option("--user", "-l", help="SSH user (default: ssh_config, then you).")]
IdentityOpt = Annotated[
    list[str] | None, typer.Option("--identity", "-i", help="SSH private key file (repeatable; agent keys too).")
]
PortOpt = Annotated[int | None, typer.Option("--port", help="SSH port (default: ssh_config, then 22).")]
AcceptOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys", help="Trust and record host keys not yet in known_hosts (never changed ones)."
    ),
]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, help="Hosts checked at once.")]


class View(str, Enum):
    check = "check"
    host = "host"


ByOpt = Annotated[
    View,
    typer.Option("--by", help="Several hosts in a table: problems by check, or one line per problem host."),
]
AllHostsOpt = Annotated[
    bool, typer.Option("--all", help="Several hosts in a table: every host's checks, not only the problem hosts'.")
]
CommandTimeoutOpt = Annotated[
    float, typer.Option("--command-timeout", min=0.1, help="Seconds one command or file read may take.")
]


# -- commands -------------------------------------------------------------------------------


@app.command()
def run(
    profile: ProfileOpt = None,
    local: LocalOpt = False,
    ssh: SshOpt = None,
    replay: Annotated[
        list[Path] | None,
        typer.Option("--replay", help="Replay a recorded fixture, or a folder of them (a recorded cluster)."),
    ] = None,
    checks_dir: ChecksDirOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here (atomically).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show evidence and remedies.")] = False,
    by: ByOpt = View.check,
    all_hosts: AllHostsOpt = False,
    timeout: Annotated[float | None, typer.Option("--timeout", min=0.1, help="Seconds the whole run may take.")] = None,
    command_timeout: CommandTimeoutOpt = 10.0,
    host_timeout: Annotated[
        float | None, typer.Option("--host-timeout", min=0.1, help="Seconds one host's checks may take together.")
    ] = None,
    jobs: JobsOpt = 32,
    ssh_config: SshConfigOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    port: PortOpt = None,
    accept_new_host_keys: AcceptOpt = False,
    trust_fixture_code: Annotated[
        bool,
        typer.Option(
            "--trust-fixture-code",
            help="Let the profile a --replay fixture names load its own check code (check_dirs, extends).",
        ),
    ] = False,
) -> int:
    """Run a profile's checks on this node, on hosts over SSH, or on recorded fixtures."""
    transports = make_transports(
        local,
        ssh,
        replay,
        ssh_config=ssh_config,
        user=user,
        identity=identity,
        port=port,
        accept_new_host_keys=accept_new_host_keys,
    )
    return cli.execute_run(
        profile,
        transports,
        checks_dirs=tuple(checks_dir or ()),
        fmt=fmt.value,
        output=output,
        verbose=verbose,
        timeout=timeout,
        command_timeout=command_timeout,
        host_timeout=host_timeout,
        jobs=jobs,
        by=by.value,
        all_hosts=all_hosts,
        trust_fixture_code=trust_fixture_code,
    )


@app.command()
def record(
    out: Annotated[
        Path, typer.Option("--out", help="The fixture folder to write (one per host under it for several).")
    ],
    profile: ProfileOpt = None,
    local: LocalOpt = False,
    ssh: SshOpt = None,
    note: Annotated[str, typer.Option("--note", help="What this fixture shows (goes into fixture.yaml).")] = "",
    redact_hostnames: Annotated[
        bool, typer.Option("--redact-hostnames", help="Replace the node's name in everything recorded.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a non-empty --out whole (an older recording); never merge.")
    ] = False,
    checks_dir: ChecksDirOpt = None,
    command_timeout: CommandTimeoutOpt = 10.0,
    jobs: JobsOpt = 32,
    ssh_config: SshConfigOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    port: PortOpt = None,
    accept_new_host_keys: AcceptOpt = False,
) -> int:
    """Record what a profile's checks read on real hosts into replayable fixture folders.

    The recording goes into a new private folder beside --out, renamed into place when it is
    done: a recording never merges into an older one, never follows a link planted in the
    folder, and an interrupted one leaves --out as it was.
    """
    import shutil
    import tempfile

    from clustercheck import formats, runner
    from clustercheck import profile as profiles
    from clustercheck.analyzers.fleet import is_unreachable
    from clustercheck.transports.fixture import RecordingTransport

    if profile is None:
        raise UsageError("--profile is required: it decides what is recorded")
    _check_record_out(out, force)
    prof = profiles.load(profile, extra_check_dirs=tuple(checks_dir or ()))
    inner = make_transports(
        local,
        ssh,
        None,
        ssh_config=ssh_config,
        user=user,
        identity=identity,
        port=port,
        accept_new_host_keys=accept_new_host_keys,
    )
    names = [t.host for t in inner] if len(inner) > 1 else []
    for name in names:  # one folder per host, named after it: a plain name only
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            raise UsageError(f"host {name!r}: cannot be a folder name under --out; give hosts by plain names")
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".recording", dir=parent))
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot make a folder beside it: {exc.strerror or exc}") from None
    if names and redact_hostnames:  # one folder per host, named and claimed by an alias, never the name
        names = [f"redacted-host-{i:0{len(str(len(names)))}d}" for i in range(1, len(names) + 1)]
    try:
        recorders = [
            RecordingTransport(
                t, tmp / name if names else tmp, redact_hostnames=(name or True) if redact_hostnames else False
            )
            for t, name in zip(inner, names or [""], strict=False)
        ]
        report = runner.run_profile(prof, recorders, version=__version__, jobs=jobs, command_timeout=command_timeout)
        # A host that could not be reached recorded nothing a replay could stand for: no fixture.
        reached = [(r, h) for r, h in zip(recorders, report.hosts, strict=True) if not is_unreachable(h)]
        for recorder, host in reached:
            expect = {c.id: c.status.value for c in host.checks}
            where = out / recorder.out.relative_to(tmp)  # the fixture's folder once in place
            recorder.write_manifest(
                profile=_profile_from(where, profile), version=__version__, note=note, expect=expect
            )
        for recorder, host in zip(recorders, report.hosts, strict=True):
            if is_unreachable(host) and names and recorder.out.exists():
                shutil.rmtree(recorder.out)
        umask = os.umask(0)
        os.umask(umask)
        for folder in [tmp, *(r.out for r, _ in reached if names)]:
            os.chmod(folder, 0o777 & ~umask)  # mkdtemp's 0700 was for while it was written
        if reached:
            _put_in_place(tmp, out, force)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for recorder, host in zip(recorders, report.hosts, strict=True):
        if is_unreachable(host):
            print(f"not recorded: {host.host} could not be reached (no fixture written for it)", file=sys.stderr)
            continue
        folder = out / recorder.out.relative_to(tmp)
        print(
            f"recorded {host.host} into {folder} (expect: what it got; edit note: and expect:)",
            file=sys.stderr,
        )
    formats.render(report, "table", sys.stderr)
    if len(reached) < len(report.hosts):  # exits as `run` would: the recording is not what was asked
        return int(report.exit_code)
    return 0


def _profile_from(fixture: Path, ref: str) -> str:
    """The manifest's profile: a file's path relative to the fixture folder (how replay reads it)."""
    path = Path(ref)
    try:
        if not path.is_file():
            return ref  # a bundled name
        return os.path.relpath(path.resolve(), fixture.resolve())
    except (OSError, ValueError):
        return ref


def _check_record_out(out: Path, force: bool) -> None:
    """Refuse an --out that is a link, or that holds anything, unless --force (checked again at the end)."""
    if out.name in ("", ".", ".."):  # `.`, `/`, `a/..`: renaming into place would replace a folder in use
        raise UsageError(f"--out {out}: name the fixture's own folder, e.g. --out fixtures/gpu017")
    if out.is_symlink():
        raise UsageError(f"--out {out}: a symbolic link; give the folder's own path (a link is never followed)")
    if not out.exists():
        return
    if out.is_dir():
        try:
            empty = _empty(out)
        except OSError as exc:
            raise UsageError(f"--out {out}: cannot be read: {exc.strerror or exc}") from None
        if empty:
            return
    if not force:
        kind = "the folder is not empty (an older recording?)" if out.is_dir() else "exists and is not a folder"
        raise UsageError(f"--out {out}: {kind}; record into a new folder, or pass --force to replace it whole")


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return not any(entries)


def _put_in_place(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished recording to --out; with --force the old one goes only once the new one is there."""
    import secrets
    import shutil

    _check_record_out(out, force)
    old: Path | None = None
    try:
        if out.is_dir() and _empty(out):
            out.rmdir()
        elif out.exists():  # --force (checked above)
            old = out.with_name(f".{out.name}.replaced.{secrets.token_hex(4)}")
            os.rename(out, old)
        os.rename(tmp, out)
    except OSError as exc:
        if old is not None and not out.exists():
            os.rename(old, out)  # put the old recording back
            old = None
        raise UsageError(f"--out {out}: cannot put the recording in place: {exc.strerror or exc}") from None
    finally:
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def _site_checks(checks_dir: list[Path] | None, profile: str | None) -> Profile | None:
    """Register the site checks of --checks folders and of --profile's check_dirs; the profile, if any."""
    from clustercheck import profile as profiles
    from clustercheck import registry

    dirs = tuple(checks_dir or ())
    if profile is not None:
        return profiles.load(profile, extra_check_dirs=dirs)  # every problem at once, FILE:LINE
    for d in dirs:
        try:
            registry.load_dir(d)
        except UsageError as exc:
            raise UsageError(f"--checks {d}: {exc}") from None
    return None


ListProfileOpt = Annotated[
    str | None, typer.Option("--profile", "-p", help="Also load the site checks of this profile's check_dirs.")
]


@app.command("checks")
def list_checks(
    fmt: Annotated[ListFormat, typer.Option("--format", "-f", help="Output format.")] = ListFormat.table,
    checks_dir: ChecksDirOpt = None,
    profile: ListProfileOpt = None,
) -> None:
    """List every registered check: id, title, what it reads, its parameters.

    Check ids are never cut: the other columns wrap; off a terminal the width is $COLUMNS (else
    120), and below what a table needs, each check is a block of lines.
    """
    from clustercheck import registry

    _site_checks(checks_dir, profile)
    specs = registry.all_checks()
    if fmt is ListFormat.json:
        json.dump([s.to_json() for s in specs], sys.stdout, indent=2)
        print()
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from clustercheck.formats.table import piped_width

    def params(spec: registry.CheckSpec) -> list[str]:
        return [
            f"{p.name}: {p.type_name}" + (" (required)" if p.required else f" = {p.default!r}") for p in spec.params
        ]

    console = Console(width=None if sys.stdout.isatty() else piped_width(), markup=False, highlight=False)
    id_width = max((len(s.id) for s in specs), default=5)
    if console.width < id_width + 48:  # too narrow for four columns: a block per check
        from rich.padding import Padding

        for s in specs:
            console.print(Text(s.id, style="bold"), crop=False, overflow="ignore")
            grid = Table.grid(padding=(0, 1))
            grid.add_column(no_wrap=True)
            grid.add_column(overflow="fold")
            for label, lines in (("expects", [s.title]), ("reads", list(s.needs)), ("parameters", params(s))):
                if lines:
                    grid.add_row(label, Text("\n".join(lines)))
            console.print(Padding(grid, (0, 0, 1, 2)))
        return
    table = Table(show_lines=True, box=box.SQUARE)
    table.add_column("check", no_wrap=True, min_width=id_width)
    for column in ("what it expects", "reads", "parameters"):
        table.add_column(column, overflow="fold")
    for s in specs:
        table.add_row(Text(s.id), Text(s.title), Text("\n".join(s.needs)), Text("\n".join(params(s))))
    console.print(table)


@app.command()
def explain(
    check_id: Annotated[str, typer.Argument(help="A check id, e.g. node.memory.")],
    checks_dir: ChecksDirOpt = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Load this profile's check_dirs, and show how it sets the check."),
    ] = None,
) -> None:
    """Why a check matters, how it decides, and how to fix a failure (site checks too)."""
    import difflib

    from clustercheck import registry

    prof = _site_checks(checks_dir, profile)
    spec = registry.lookup(check_id)
    if spec is None:
        close = difflib.get_close_matches(check_id, registry.known_ids(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        where = "" if checks_dir or profile else " (a site check? give its folder with --checks DIR or --profile P)"
        raise UsageError(f"unknown check {check_id!r}{hint}; `clustercheck checks` lists them{where}")
    print(f"{spec.id}: {spec.title}\n")
    if spec.doc:
        print(spec.doc + "\n")
    print("Parameters:")
    for p in spec.params:
        print(f"  {p.name}: {p.type_name}" + (" (required)" if p.required else f" = {p.default!r}"))
    print(f"  timeout: number = {spec.timeout:g} (seconds; the check's time budget)")
    if spec.needs:
        print("\nReads on the node: " + ", ".join(spec.needs))
    if prof is not None:
        config = next((c for c in prof.checks if c.id == spec.id), None)
        if config is None:
            print(f"\nProfile {prof.name} does not run it.")
        else:
            settings = ", ".join(f"{k} = {v!r}" for k, v in config.params.items())
            timeout = f"timeout {config.timeout:g} s"
            print(f"\nProfile {prof.name} runs it ({config.source}): {settings or 'defaults'}, {timeout}")
    print(f"\nDefined in {spec.source}")


profiles_app = typer.Typer(
    help="List the bundled profiles, print the profile JSON Schema, or show a resolved profile.",
    invoke_without_command=True,
    no_args_is_help=False,
    rich_markup_mode=None,
)
app.add_typer(profiles_app, name="profiles")


@profiles_app.callback()
def list_profiles(
    ctx: typer.Context,
    schema: Annotated[bool, typer.Option("--schema", help="Print the JSON Schema of profiles instead.")] = False,
    checks_dir: Annotated[
        list[Path] | None,
        typer.Option("--checks", help="With --schema: include the site checks of this folder (repeatable)."),
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="With --schema: include this profile's site checks.")
    ] = None,
) -> None:
    """List the bundled profiles (or print the profile JSON Schema for editors, site checks included)."""
    from clustercheck import profile as profiles

    if ctx.invoked_subcommand is not None:
        if schema or checks_dir or profile:
            raise UsageError(
                f"--schema, --checks and --profile go with `profiles`, not `profiles {ctx.invoked_subcommand}`"
            )
        return
    if (checks_dir or profile) and not schema:
        raise UsageError("--checks and --profile go with --schema (`profiles show` resolves a profile)")
    if schema:
        _site_checks(checks_dir, profile)
        json.dump(profiles.json_schema(), sys.stdout, indent=2)
        print()
        return
    for path in profiles.bundled_profiles():
        prof = profiles.load(str(path))
        print(f"{prof.name:<12} {len(prof.checks):>3} checks  {prof.description}")


@profiles_app.command("show")
def show_profile(
    ref: Annotated[str, typer.Argument(metavar="NAME_OR_PATH", help="A bundled profile's name or a YAML path.")],
    checks_dir: ChecksDirOpt = None,
) -> None:
    """The profile after `extends`, as YAML, each setting with the file:line it came from."""
    from clustercheck import profile as profiles

    prof = profiles.load(ref, extra_check_dirs=tuple(checks_dir or ()))
    sys.stdout.write(profiles.explain_sources(prof))


def _register_commands() -> None:
    import importlib
    import pkgutil

    from clustercheck import commands

    for module in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        importlib.import_module(f"clustercheck.commands.{module}").register(app)


_register_commands()
