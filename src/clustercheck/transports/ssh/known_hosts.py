"""Host keys for the SSH transport: checked against known_hosts as OpenSSH does.

paramiko.HostKeys is used for what it does well: hashing a name (`hash_host`), both to match
a hashed `|1|salt|hash` entry and to write one (HashKnownHosts). Its parser is not used, for
what it lacks: `@revoked` lines (it reads the marker as a host name), `@cert-authority` lines,
wildcard and negated patterns (`*.cluster`, `!login*`), several keys of one type for a name,
key types it cannot load (it drops them, and a changed key would then read as unknown), and
the file and line of an entry for the messages (`where`).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import os
import re
import shlex
import threading
from dataclasses import dataclass

import paramiko

from clustercheck.errors import Unreachable
from clustercheck.transports.ssh.config import Target

_KNOWN_HOSTS_LOCK = threading.Lock()


def check_host_key(t: Target, key: paramiko.PKey, known: KnownHosts, host: str, through: str) -> None:
    name = t.key_name
    blob = key.asbytes()
    offered = f"{key.get_name()} {fingerprint(key)}"
    entries = known.lookup(name)
    for e in entries:
        if e.revoked and e.blob == blob:
            raise Unreachable(host, f"the SSH host key of {t.label()}{through} ({offered}) is REVOKED in {e.where}")
    good = [e for e in entries if not e.revoked]
    if any(e.blob == blob for e in good):
        return
    if good:
        old = good[0]
        raise Unreachable(
            host,
            f"REFUSED: the SSH host key of {t.label()}{through} has CHANGED: the server offers {offered}, "
            f"{old.where} has {old.key_type} {old.fingerprint}. It may be a man-in-the-middle attack, or the "
            f"node was reinstalled. If you trust the new key: `ssh-keygen -R {shlex.quote(name)} -f "
            f"{shlex.quote(old.path)}`, then re-run with --accept-new-host-keys.",
        )
    if not t.accept_new:
        where = t.known_hosts[0] if t.known_hosts else "~/.ssh/known_hosts"
        scan = f"ssh-keyscan {'-p ' + str(t.port) + ' ' if t.port != 22 else ''}{t.hostname} >> {where}"
        raise Unreachable(
            host,
            f"unknown SSH host key for {t.label()}{through} ({offered}): not in "
            f"{', '.join(t.known_hosts + t.global_known_hosts) or 'any known_hosts file'}. "
            f"Check it, then re-run with --accept-new-host-keys, or add it with `{scan}`.",
        )
    if not t.known_hosts:
        raise Unreachable(host, f"cannot record the host key of {t.label()}: UserKnownHostsFile is none")
    record_host_key(t.known_hosts[0], name, key, t.hash_known_hosts)


def record_host_key(path: str, name: str, key: paramiko.PKey, hashed: bool) -> None:
    stored = paramiko.HostKeys.hash_host(name) if hashed else name
    line = f"{stored} {key.get_name()} {key.get_base64()}\n"
    folder = os.path.dirname(path)
    with _KNOWN_HOSTS_LOCK:
        if folder:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.seek(0, os.SEEK_END)
                if f.tell() > 0:
                    f.seek(f.tell() - 1)
                    if f.read(1) != "\n":
                        line = "\n" + line
                f.write(line)
                f.flush()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def fingerprint(key: paramiko.PKey) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class KnownKey:
    patterns: tuple[str, ...]
    key_type: str
    blob: bytes
    revoked: bool
    path: str
    lineno: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"

    @property
    def fingerprint(self) -> str:
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")

    def matches(self, name: str) -> bool:
        hit = False
        for p in self.patterns:
            if p.startswith("|1|"):
                hit = hit or _hashed_match(p, name)
            elif p.startswith("!"):
                if _glob_match(p[1:], name):
                    return False
            elif _glob_match(p, name):
                hit = True
        return hit


def _glob_match(pattern: str, name: str) -> bool:
    """known_hosts patterns: only `*` and `?` are special (not `[`, as in "[host]:port")."""
    if "*" not in pattern and "?" not in pattern:
        return pattern.lower() == name.lower()
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.IGNORECASE) is not None


@dataclass(frozen=True)
class _File:
    """One known_hosts file's entries, and the plain ones indexed by name: a fleet's file names
    every node, and a scan of it per host (thousands of entries) cost more than the handshake."""

    entries: list[KnownKey]
    by_name: dict[str, list[int]]  # a plain name (lower case) -> the entries naming it, by index
    patterned: list[int]  # entries with a wildcard, a negation or a hashed name: matched one by one


_PARSED: dict[str, tuple[tuple[int, int, int], _File]] = {}


class KnownHosts:
    """The keys of several known_hosts files (parsed once per file version, per process)."""

    def __init__(self, paths: list[str]) -> None:
        self.files = [_parse_known_hosts(path) for path in paths]
        self._found: dict[str, list[KnownKey]] = {}

    def lookup(self, name: str) -> list[KnownKey]:
        """The entries that name `name`, in file order (the files, then their lines)."""
        found = self._found.get(name)
        if found is None:
            found = []
            for f in self.files:
                hits = f.by_name.get(name.lower(), [])
                hits = sorted([*hits, *(i for i in f.patterned if f.entries[i].matches(name))])
                found += [f.entries[i] for i in hits]
            self._found[name] = found
        return found

    def key_types(self, name: str) -> list[str]:
        types: list[str] = []
        for e in self.lookup(name):
            if not e.revoked and e.key_type not in types:
                types.append(e.key_type)
        return types


def _plain(pattern: str) -> bool:
    return not pattern.startswith(("|1|", "!")) and "*" not in pattern and "?" not in pattern


def _parse_known_hosts(path: str) -> _File:
    try:
        st = os.stat(path)
    except OSError:
        return _File([], {}, [])
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _PARSED.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    entries: list[KnownKey] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return _File([], {}, [])
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = ""
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3 or marker == "@cert-authority":
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except ValueError:
            continue
        entries.append(KnownKey(tuple(fields[0].split(",")), fields[1], blob, marker == "@revoked", path, lineno))
    by_name: dict[str, list[int]] = {}
    patterned: list[int] = []
    for i, e in enumerate(entries):
        if all(_plain(p) for p in e.patterns):
            for p in dict.fromkeys(p.lower() for p in e.patterns):
                by_name.setdefault(p, []).append(i)
        else:
            patterned.append(i)
    parsed = _File(entries, by_name, patterned)
    _PARSED[path] = (stamp, parsed)
    return parsed


def _hashed_match(pattern: str, name: str) -> bool:
    """A `|1|salt|hash` entry names `name` (paramiko hashes it with the entry's salt)."""
    try:
        hashed = paramiko.HostKeys.hash_host(name, pattern)
    except Exception:  # a salt that is not base64, or not 20 bytes
        return False
    return hmac.compare_digest(hashed.encode(), pattern.encode("utf-8", errors="replace"))
