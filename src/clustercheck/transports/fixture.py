"""Recorded fixtures: record a host's answers into plain files, replay them strictly.

A fixture is a folder people can read, diff and edit::

    fixture.yaml               host, profile, transport, clustercheck, recorded_at, note,
                               expect: {check id: status}, absent: [files absent on the node]
    commands/<slug>/command.yaml   argv, exit_code, duration_s, timed_out
    commands/<slug>/stdout, stderr
    files/<absolute path>      exact copies (files/proc/meminfo ...)
    probes/<name>.json         a probe's normalized record (probes/<name>.error: why it failed)

The key of a command is its logical argv (no ssh/sudo/timeout wrapper), so a fixture
recorded over SSH replays a local check. Replay is strict: anything not recorded raises
NotRecorded naming what to re-record, so the check reports `error`, never a silent pass.

Fixtures are data people send each other, so neither side trusts a path: recording writes
only normalised paths under its folder (a node's `..` is refused) without following links, and
replay opens each piece step by step with O_NOFOLLOW, only regular files (a FIFO would block
the open itself), at most MAX_FILE_BYTES each and MAX_HOST_BYTES a host. Everything recorded
goes through clustercheck.redact first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import math
import os
import re
import shlex
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clustercheck.errors import FixtureError, HostError, NotRecorded
from clustercheck.host import CommandResult
from clustercheck.redact import redact, redact_argv
from clustercheck.transports.base import Transport

MANIFEST = "fixture.yaml"
MAX_FILE_BYTES = 64 * 1024 * 1024  # one file of a fixture (the largest shipped one is under 60 KB)
MAX_HOST_BYTES = 512 * 1024 * 1024  # everything one replayed host reads


def _slug(argv: Sequence[str]) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", " ".join(argv)).strip("_.")
    return slug[:60] or "command"


# -- paths and files, inside the fixture folder only ---------------------------------------------


def node_path(path: str) -> tuple[str, ...]:
    """A node's file path as its parts under files/ (`//etc/./x` -> etc, x).

    ValueError, saying why, for anything that is not a plain absolute path: a relative one,
    one that climbs with `..` (a node's `Include ../../../x` must never become a path outside
    the fixture), a NUL byte, the root itself.
    """
    if not path.startswith("/"):
        raise ValueError("not an absolute path")
    if "\0" in path:
        raise ValueError("it holds a NUL byte")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ValueError("it climbs with `..`")
    if not parts:
        raise ValueError("it names the root folder")
    return parts


def _shown(root: Path, parts: Sequence[str]) -> Path:
    return root.joinpath(*parts)


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
_KINDS[stat.S_IFSOCK] = "a socket"


def _walk(root: Path, parts: Sequence[str], *, want_dir: bool) -> int | None:
    """An fd of root/parts (a folder when want_dir, else a regular file), None when absent.

    Never through a symbolic link (each step is opened relative to the last with O_NOFOLLOW,
    after an lstat), never anything but a regular file at the end (a FIFO would block the
    open itself, before any timeout could start; O_NONBLOCK covers a swap after the lstat).
    Raises FixtureError naming the piece; IsADirectoryError for a folder where a file was asked.
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the user's own path: may be a link
    except (OSError, ValueError):
        return None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            shown = _shown(root, parts[: i + 1])
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError, ValueError):
                return None
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    return None
                raise FixtureError(f"{shown}: cannot be read: {exc.strerror or exc}") from None
            if stat.S_ISLNK(st.st_mode):
                raise FixtureError(
                    f"{shown}: a symbolic link; a fixture holds only plain files and folders "
                    "(replay never follows a link, which could lead out of the folder)"
                )
            if not last or want_dir:
                if not stat.S_ISDIR(st.st_mode):
                    return None
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            elif stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(shown))
            elif not stat.S_ISREG(st.st_mode):
                kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a plain file")
                raise FixtureError(f"{shown}: {kind}, not a regular file; a fixture holds only plain files")
            else:
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                new = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise FixtureError(f"{shown}: became a symbolic link while it was read") from None
                raise FixtureError(f"{shown}: cannot be read: {exc.strerror or exc}") from None
            os.close(fd)
            fd = new
        opened, fd = fd, -1
        return opened
    finally:
        if fd >= 0:
            os.close(fd)


def _read_inside(root: Path, parts: Sequence[str], *, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of the regular file root/parts (see _walk), None when absent; at most `limit`."""
    fd = _walk(root, parts, want_dir=False)
    if fd is None:
        return None
    shown = _shown(root, parts)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after the lstat
            raise FixtureError(f"{shown}: not a regular file; a fixture holds only plain files")
        if st.st_size > limit:
            raise FixtureError(_too_big(shown, st.st_size, limit))
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew while it was read
                raise FixtureError(_too_big(shown, size, limit))
        return b"".join(chunks)
    except OSError as exc:
        raise FixtureError(f"{shown}: cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _too_big(shown: Path, size: int, limit: int) -> str:
    return (
        f"{shown}: {size} bytes or more, over the {limit // (1 << 20)} MiB a fixture file may hold "
        "(a recording is plain text a check reads; re-record it or cut the file)"
    )


def _list_inside(root: Path, parts: Sequence[str]) -> list[str]:
    """Names in the folder root/parts (never through a link); [] when there is none."""
    fd = _walk(root, parts, want_dir=True)
    if fd is None:
        return []
    try:
        return sorted(os.listdir(fd))
    except OSError as exc:
        raise FixtureError(f"{_shown(root, parts)}: cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _write_inside(root: Path, parts: Sequence[str], data: bytes) -> None:
    """Write root/parts (folders made), never through a symbolic link; OSError when it cannot."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            new = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = new
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        out = os.open(parts[-1], flags, 0o644, dir_fd=fd)
        try:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(_shown(root, parts)))
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(fd)


# -- reading ------------------------------------------------------------------------------


@dataclass
class Fixture:
    """A fixture folder, read and checked once, before any check runs."""

    path: Path
    host: str
    profile: str | None
    note: str
    expect: dict[str, str]
    absent: set[str]
    commands: dict[tuple[str, ...], tuple[Path, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Fixture:
        manifest = path / MANIFEST
        meta = _load_yaml(path, (MANIFEST,))
        if not isinstance(meta, dict):
            raise FixtureError(f"{manifest}: a fixture manifest is a mapping (host:, profile:, note:, expect: ...)")
        host = meta.get("host")
        if not isinstance(host, str) or not host:
            raise FixtureError(f"{manifest}: `host:` (the recorded node's name) is missing or not a string")
        expect = meta.get("expect") or {}
        if not isinstance(expect, dict) or not all(
            isinstance(k, str) and v in ("ok", "warn", "fail", "skip", "error") for k, v in expect.items()
        ):
            raise FixtureError(f"{manifest}: `expect:` maps check ids to ok|warn|fail|skip|error")
        absent = meta.get("absent") or []
        if not isinstance(absent, list) or not all(isinstance(a, str) for a in absent):
            raise FixtureError(f"{manifest}: `absent:` is a list of file paths that were absent on the node")
        profile = meta.get("profile")
        fixture = cls(
            path,
            host,
            profile if isinstance(profile, str) else None,
            str(meta.get("note") or ""),
            dict(expect),
            set(absent),
        )
        for slug in _list_inside(path, ("commands",)):
            parts = ("commands", slug, "command.yaml")
            cmd_file = _shown(path, parts)
            try:
                record = _load_yaml(path, parts, missing_ok=True)
            except IsADirectoryError:
                raise FixtureError(f"{cmd_file}: cannot be read: a folder") from None
            if record is _ABSENT:  # not a command's folder
                continue
            argv = record.get("argv") if isinstance(record, dict) else None
            if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                raise FixtureError(f"{cmd_file}: `argv:` must be a non-empty list of strings")
            code = record.get("exit_code")
            timed_out = record.get("timed_out", False)
            if not isinstance(timed_out, bool):
                raise FixtureError(f"{cmd_file}: `timed_out:` must be true or false")
            if not ((code is None and timed_out) or (isinstance(code, int) and not isinstance(code, bool))):
                raise FixtureError(f"{cmd_file}: `exit_code:` must be an integer (or null when it timed out)")
            if _seconds(record.get("duration_s", 0.0)) is None:
                raise FixtureError(f"{cmd_file}: `duration_s:` must be a number of seconds (0 or more)")
            fixture.commands[tuple(argv)] = (cmd_file.parent, record)
        return fixture


def _seconds(value: object) -> float | None:
    """A duration as a float, or None unless a finite number of seconds, 0 or more."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


_ABSENT: Any = object()


def _load_yaml(root: Path, parts: Sequence[str], *, missing_ok: bool = False) -> Any:
    path = _shown(root, parts)
    try:
        data = _read_inside(root, parts)
    except IsADirectoryError:
        if missing_ok:
            raise
        data = None
    if data is None:
        if missing_ok:
            return _ABSENT
        raise FixtureError(f"{path}: missing (a fixture folder needs a {MANIFEST}; see `clustercheck record`)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FixtureError(f"{path}: cannot be read: {exc}") from exc
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise FixtureError(f"{path}:{line}: YAML syntax error: {_one_line(exc.problem or exc)}") from exc
    except yaml.YAMLError as exc:
        raise FixtureError(f"{path}: YAML error: {_one_line(exc)}") from exc
    except Exception as exc:
        # PyYAML's constructors let plain Python errors out for values that match a tag's
        # pattern but are not valid: `2020-13-45`, `!!int abc`, `!!float ` (IndexError) ...
        raise FixtureError(f"{path}: YAML error: {type(exc).__name__}: {_one_line(exc)}") from exc


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def find_fixtures(paths: Iterable[Path]) -> list[Fixture]:
    """Fixtures from folders that are a fixture or hold fixtures (a recorded cluster)."""
    found: list[Fixture] = []
    for path in paths:
        if _has_manifest(path):
            found.append(Fixture.load(path))
            continue
        if not path.is_dir():
            raise FixtureError(f"{path}: no such fixture folder")
        try:
            subs = sorted(p for p in path.iterdir() if _has_manifest(p))
        except OSError as exc:
            raise FixtureError(f"{path}: cannot be read: {exc}") from exc
        if not subs:
            raise FixtureError(f"{path}: holds no {MANIFEST}, and none of its subfolders does")
        for sub in subs:
            if sub.is_symlink():  # a fixture elsewhere, through a link planted in the cluster folder
                raise FixtureError(
                    f"{sub}: a symbolic link to a fixture; replay never follows a link out of the folder "
                    "(give the fixture's own path)"
                )
            found.append(Fixture.load(sub))
    hosts = [f.host for f in found]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        claims = "; ".join(f"{h} in {', '.join(str(f.path) for f in found if f.host == h)}" for h in dupes)
        raise FixtureError(
            f"several fixtures claim the same host: {claims}; one run replays each host once: "
            "replay these one at a time (each is one node's recording)"
        )
    return found


def _has_manifest(folder: Path) -> bool:
    """The folder holds a fixture.yaml of any kind (a link or a FIFO there is refused on loading)."""
    try:
        os.lstat(folder / MANIFEST)
    except (OSError, ValueError):  # absent, unreadable, a name too long
        return False
    return folder.is_dir()


class ReplayTransport:
    """A recorded fixture, replayed strictly (a `base.Transport`)."""

    kind = "replay"

    def __init__(self, fixture: Fixture) -> None:
        self.fixture: Fixture = fixture
        self.host = fixture.host
        self._read_total = 0
        # What the run in progress uses, for the re-record hint (set by cli.execute_run): the
        # profile as the user named it (a path relative to the current folder, or a bundled
        # name) and its --checks folders. Without them, the fixture's own profile.
        self.profile_in_use: str | None = None
        self.checks_in_use: tuple[str, ...] = ()
        self._rerecord: str | None = None

    def _missing(self, what: str) -> NotRecorded:
        if self._rerecord is None:
            self._rerecord = self._rerecord_hint()
        return NotRecorded(self.host, f"fixture {self.fixture.path} has no recording of {what}; {self._rerecord}")

    def _rerecord_hint(self) -> str:
        """A `clustercheck record` command that works when pasted from the current folder."""

        def here(path: Path) -> str:  # relative to the current folder when under it, else absolute
            try:
                absolute = path.resolve()
                relative = os.path.relpath(absolute)
            except (OSError, ValueError):
                return str(path)
            return relative if not relative.startswith("..") else str(absolute)

        profile = self.profile_in_use
        if profile is None and self.fixture.profile is not None:
            beside = self.fixture.path / self.fixture.profile  # a fixture's profile path is relative to it
            try:
                profile = here(beside) if beside.is_file() else self.fixture.profile
            except (OSError, ValueError):
                profile = self.fixture.profile
        try:
            meta = _load_yaml(self.fixture.path, (MANIFEST,))
        except (FixtureError, OSError):
            meta = None
        transport = meta.get("transport") if isinstance(meta, dict) else None
        redacted = self.host.startswith("redacted-host")
        words = ["clustercheck", "record", "--profile", profile or "PROFILE"]
        for folder in self.checks_in_use:
            words += ["--checks", folder]
        target = ["--local"] if transport == "local" or redacted else ["--ssh", self.host]
        words += [*target, "--force", "--out", str(self.fixture.path)]
        command = shlex.join(words)
        if redacted:
            return f"re-record it with `{command}` on the node it was recorded on (its name was redacted)"
        if transport == "local":
            return f"re-record it with `{command}` on {self.host} (it was recorded there with --local)"
        return f"re-record it with `{command}`"

    def _read(self, parts: Sequence[str]) -> bytes | None:
        """A piece of the fixture, within what one host may read in all (MAX_HOST_BYTES)."""
        left = MAX_HOST_BYTES - self._read_total
        try:
            data = _read_inside(self.fixture.path, parts, limit=min(MAX_FILE_BYTES, max(left, 0)))
        except FixtureError as exc:
            if left < MAX_FILE_BYTES and "a fixture file may hold" in str(exc):
                raise FixtureError(
                    f"{_shown(self.fixture.path, parts)}: over what is left of the "
                    f"{MAX_HOST_BYTES // (1 << 20)} MiB one replayed host may read"
                ) from None
            raise
        self._read_total += len(data or b"")
        return data

    def _text(self, parts: Sequence[str], *, errors: str = "replace") -> str:
        try:
            data = self._read(parts)
        except IsADirectoryError:
            raise FixtureError(f"{_shown(self.fixture.path, parts)}: cannot be read: a folder") from None
        return (data or b"").decode("utf-8", errors=errors)

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        argv = tuple(argv)
        entry = self.fixture.commands.get(argv)
        if entry is None:  # recorded with its secrets blanked
            entry = self.fixture.commands.get(tuple(redact_argv(argv)))
        if entry is None:
            raise self._missing(f"`{shlex.join(argv)}`")
        folder, record = entry
        duration = float(record.get("duration_s", 0.0))  # checked by Fixture.load
        stdout = self._text(("commands", folder.name, "stdout"))
        stderr = self._text(("commands", folder.name, "stderr"))
        if record.get("timed_out") or duration > timeout:  # it would not have finished in this budget
            return CommandResult(argv, None, stdout, stderr, min(duration, timeout), timed_out=True)
        return CommandResult(argv, record.get("exit_code"), stdout, stderr, duration)

    def read(self, path: str, *, timeout: float) -> str:
        try:
            parts = node_path(path)
        except ValueError as exc:
            raise self._missing(f"the file {path} ({exc}: a fixture holds only plain absolute paths)") from None
        if path in self.fixture.absent or "/" + "/".join(parts) in self.fixture.absent:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        try:
            data = self._read(("files", *parts))
        except IsADirectoryError:
            data = None
        if data is None:
            raise self._missing(f"the file {path}")
        return data.decode("utf-8", errors="replace")

    def probe(self, name: str, *, timeout: float) -> Any:
        if not name or "/" in name or "\0" in name or name.startswith("."):
            raise self._missing(f"the probe {name!r}")
        error, record = _probe_names(name)
        try:
            message = self._read(("probes", error))
        except IsADirectoryError:
            message = None
        if message is not None:
            raise HostError(self.host, message.decode("utf-8", errors="replace").strip())
        try:
            data = self._read(("probes", record))
        except IsADirectoryError:
            data = None
        if data is None:
            raise self._missing(f"the probe {name!r}")
        shown = _shown(self.fixture.path, ("probes", record))
        try:
            return json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; too deep
            raise FixtureError(f"{shown}: not valid JSON: {_one_line(exc)}") from exc

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        """Nothing: each file is looked up as it is read (what is not recorded is an error there)."""
        return {}

    def connect(self) -> None:
        """Nothing to connect to."""

    def close(self) -> None:
        pass


def _probe_names(name: str) -> tuple[str, str]:
    """<name>.error and <name>.json under probes/ (a name may hold dots: `nvml.v2`)."""
    return f"{name}.error", f"{name}.json"


# -- recording ------------------------------------------------------------------------------


class RecordingTransport:
    """Wraps another transport and writes everything it answers into a fixture folder.

    Every path it writes is a normalised one under `out` (a node's path with `..` is refused,
    never followed out of the folder), written without following symbolic links; `record`
    gives it a new private folder and renames that into place when the recording is done.
    """

    kind = "recording"
    fixture = None  # it writes one; what it records is a live node

    def __init__(self, inner: Transport, out: Path, *, redact_hostnames: bool | str = False) -> None:
        self.inner = inner
        self.out = out
        self.host = inner.host
        self.absent: set[str] = set()
        self._slugs: dict[tuple[str, ...], str] = {}
        self._names: list[str] = []
        if redact_hostnames:
            self._names = sorted({inner.host, inner.host.split(".")[0]}, key=len, reverse=True)
            self.host = redact_hostnames if isinstance(redact_hostnames, str) else "redacted-host"
        out.mkdir(parents=True, exist_ok=True)

    def _clean(self, text: str) -> str:
        text = redact(text)
        for name in self._names:
            text = re.sub(rf"(?<![A-Za-z0-9-]){re.escape(name)}(?![A-Za-z0-9-])", self.host, text)
        return text

    def _write(self, parts: Sequence[str], text: str) -> None:
        try:
            _write_inside(self.out, parts, text.encode("utf-8", errors="surrogateescape"))
        except (OSError, ValueError) as exc:
            where = _shown(self.out, parts)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise HostError(self.host, f"cannot record into {where}: {reason}") from None

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        result = self.inner.run(argv, timeout=timeout)
        key = tuple(redact_argv(argv))  # replay looks a command up by its argv, or by this
        slug = self._slugs.get(key)
        if slug is None:
            base, n = _slug(key), 1
            slug = base
            while slug in self._slugs.values():
                n += 1
                slug = f"{base}-{n}"
            self._slugs[key] = slug
        record = {
            "argv": list(key),
            "exit_code": result.exit_code,
            "duration_s": round(result.duration_s, 4),
            "timed_out": result.timed_out,
        }
        self._write(("commands", slug, "command.yaml"), yaml.safe_dump(record, sort_keys=False))
        self._write(("commands", slug, "stdout"), self._clean(result.stdout))
        self._write(("commands", slug, "stderr"), self._clean(result.stderr))
        return result

    def read(self, path: str, *, timeout: float) -> str:
        try:
            parts = node_path(path)
        except ValueError as exc:
            raise HostError(
                self.host, f"refusing to record the file {path!r}: {exc} (a fixture holds plain absolute paths)"
            ) from None
        try:
            text = self.inner.read(path, timeout=timeout)
        except FileNotFoundError:
            self.absent.add("/" + "/".join(parts))
            raise
        self._write(("files", *parts), self._clean(text))
        return text

    def probe(self, name: str, *, timeout: float) -> Any:
        if not name or "/" in name or "\0" in name or name.startswith("."):
            raise HostError(self.host, f"refusing to record the probe {name!r}: not a plain name")
        error, json_name = _probe_names(name)
        try:
            record = self.inner.probe(name, timeout=timeout)
        except HostError as exc:
            self._write(("probes", error), self._clean(str(exc)) + "\n")
            raise
        text = self._clean(json.dumps(record, indent=2, sort_keys=True))
        self._write(("probes", json_name), text + "\n")
        return record

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        """Nothing: every file goes through read(), which records it (or its absence)."""
        return {}

    def connect(self) -> None:
        """Connect the inner transport up front (SSH; nothing for the others)."""
        self.inner.connect()

    def close(self) -> None:
        self.inner.close()

    def write_manifest(self, *, profile: str, version: str, note: str, expect: dict[str, str]) -> Path:
        manifest = {
            "host": self.host,
            "profile": profile,
            "transport": self.inner.kind,
            "clustercheck": version,
            "recorded_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
            "note": note,
            "expect": expect,
            "absent": sorted(self.absent),
        }
        text = yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)
        _write_inside(self.out, (MANIFEST,), text.encode("utf-8", errors="surrogateescape"))
        return self.out / MANIFEST
