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
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clustercheck.errors import FixtureError, HostError, NotRecorded
from clustercheck.host import CommandResult, Transport

MANIFEST = "fixture.yaml"
_SECRET_RE = re.compile(
    r"(?i)\b([A-Za-z_][A-Za-z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Za-z0-9_]*)=([^\s\x00'\"]+)"
)


def redact_secrets(text: str) -> str:
    """Blank the values of environment variables whose names look secret."""
    return _SECRET_RE.sub(lambda m: f"{m.group(1)}=<redacted>", text)


def _slug(argv: Sequence[str]) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", " ".join(argv)).strip("_.")
    return slug[:60] or "command"


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
        meta = _load_yaml(manifest)
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
        commands_dir = path / "commands"
        if commands_dir.is_dir():
            for cmd_file in sorted(commands_dir.glob("*/command.yaml")):
                record = _load_yaml(cmd_file)
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


def _load_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FixtureError(
            f"{path}: missing (a fixture folder needs a {MANIFEST}; see `clustercheck record`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
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
        if _is_file(path / MANIFEST):
            found.append(Fixture.load(path))
            continue
        if not path.is_dir():
            raise FixtureError(f"{path}: no such fixture folder")
        try:
            subs = sorted(p for p in path.iterdir() if _is_file(p / MANIFEST))
        except OSError as exc:
            raise FixtureError(f"{path}: cannot be read: {exc}") from exc
        if not subs:
            raise FixtureError(f"{path}: holds no {MANIFEST}, and none of its subfolders does")
        found.extend(Fixture.load(p) for p in subs)
    hosts = [f.host for f in found]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise FixtureError(f"several fixtures claim the same host: {', '.join(dupes)}")
    return found


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # unreadable, a name too long
        return False


class ReplayTransport:
    kind = "replay"

    def __init__(self, fixture: Fixture) -> None:
        self.fixture = fixture
        self.host = fixture.host

    def _missing(self, what: str) -> NotRecorded:
        profile = self.fixture.profile or "PROFILE"
        return NotRecorded(
            self.host,
            f"fixture {self.fixture.path} has no recording of {what}; re-record it with "
            f"`clustercheck record --profile {profile} --ssh {self.host} --out {self.fixture.path}`",
        )

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        argv = tuple(argv)
        entry = self.fixture.commands.get(argv)
        if entry is None:
            raise self._missing(f"`{shlex.join(argv)}`")
        folder, record = entry
        duration = float(record.get("duration_s", 0.0))  # checked by Fixture.load
        stdout = _read_optional(folder / "stdout")
        stderr = _read_optional(folder / "stderr")
        if record.get("timed_out") or duration > timeout:  # it would not have finished in this budget
            return CommandResult(argv, None, stdout, stderr, min(duration, timeout), timed_out=True)
        return CommandResult(argv, record.get("exit_code"), stdout, stderr, duration)

    def read(self, path: str, *, timeout: float) -> str:
        if path in self.fixture.absent:
            raise FileNotFoundError(path)
        local = self.fixture.path / "files" / path.lstrip("/")
        if _is_file(local):
            return _read_text(local)
        raise self._missing(f"the file {path}")

    def probe(self, name: str, *, timeout: float) -> Any:
        error, record = _probe_paths(self.fixture.path, name)
        if _is_file(error):
            raise HostError(self.host, _read_text(error).strip())
        if not _is_file(record):
            raise self._missing(f"the probe {name!r}")
        try:
            return json.loads(_read_text(record, errors="strict"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; too deep
            raise FixtureError(f"{record}: not valid JSON: {_one_line(exc)}") from exc

    def close(self) -> None:
        pass


def _read_text(path: Path, errors: str = "replace") -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FixtureError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    return data.decode("utf-8", errors=errors)


def _read_optional(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:  # a folder, unreadable
        raise FixtureError(f"{path}: cannot be read: {exc.strerror or exc}") from exc


def _probe_paths(folder: Path, name: str) -> tuple[Path, Path]:
    """probes/<name>.error and probes/<name>.json (a name may hold dots: `nvml.v2`)."""
    probes = folder / "probes"
    return probes / f"{name}.error", probes / f"{name}.json"


# -- recording ------------------------------------------------------------------------------


class RecordingTransport:
    """Wraps another transport and writes everything it answers into a fixture folder."""

    kind = "recording"

    def __init__(self, inner: Transport, out: Path, *, redact_hostnames: bool = False) -> None:
        self.inner = inner
        self.out = out
        self.host = inner.host
        self.absent: set[str] = set()
        self._slugs: dict[tuple[str, ...], str] = {}
        self._names: list[str] = []
        if redact_hostnames:
            self._names = sorted({inner.host, inner.host.split(".")[0]}, key=len, reverse=True)
            self.host = "redacted-host"
        out.mkdir(parents=True, exist_ok=True)

    def _clean(self, text: str) -> str:
        text = redact_secrets(text)
        for name in self._names:
            text = re.sub(rf"(?<![A-Za-z0-9-]){re.escape(name)}(?![A-Za-z0-9-])", self.host, text)
        return text

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        result = self.inner.run(argv, timeout=timeout)
        key = tuple(argv)
        slug = self._slugs.get(key)
        if slug is None:
            base, n = _slug(argv), 1
            slug = base
            while slug in self._slugs.values():
                n += 1
                slug = f"{base}-{n}"
            self._slugs[key] = slug
        folder = self.out / "commands" / slug
        folder.mkdir(parents=True, exist_ok=True)
        record = {
            "argv": list(key),
            "exit_code": result.exit_code,
            "duration_s": round(result.duration_s, 4),
            "timed_out": result.timed_out,
        }
        (folder / "command.yaml").write_text(yaml.safe_dump(record, sort_keys=False), encoding="utf-8")
        (folder / "stdout").write_text(self._clean(result.stdout), encoding="utf-8")
        (folder / "stderr").write_text(self._clean(result.stderr), encoding="utf-8")
        return result

    def read(self, path: str, *, timeout: float) -> str:
        try:
            text = self.inner.read(path, timeout=timeout)
        except FileNotFoundError:
            self.absent.add(path)
            raise
        target = self.out / "files" / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self._clean(text), encoding="utf-8")
        return text

    def probe(self, name: str, *, timeout: float) -> Any:
        error, json_path = _probe_paths(self.out, name)
        error.parent.mkdir(parents=True, exist_ok=True)
        try:
            record = self.inner.probe(name, timeout=timeout)
        except HostError as exc:
            error.write_text(self._clean(str(exc)) + "\n", encoding="utf-8")
            raise
        text = self._clean(json.dumps(record, indent=2, sort_keys=True))
        json_path.write_text(text + "\n", encoding="utf-8")
        return record

    def connect(self) -> None:
        """Connect the inner transport up front when it has a connection (SSH)."""
        connect = getattr(self.inner, "connect", None)
        if connect is not None:
            connect()

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
        path = self.out / MANIFEST
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True), encoding="utf-8")
        os.replace(tmp, path)
        return path
