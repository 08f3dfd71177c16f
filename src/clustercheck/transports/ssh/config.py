"""ssh_config for the SSH transport: paramiko's SSHConfig, plus what it lacks.

paramiko's SSHConfig parses the files and does the Host/Match lookup. What this module adds:
`Include` (paramiko has none: the included files are spliced in before parsing, relative to
~/.ssh or to the -F file's folder, globbed, at most 16 deep), the system-wide
/etc/ssh/ssh_config after the user's file when no -F is given (first value wins, as in ssh),
%-tokens in UserKnownHostsFile/GlobalKnownHostsFile (paramiko expands them only for the keys it
knows), ProxyJump parsing into jump hosts, and the values as typed fields (`Target`).
Honoured: HostName, User, Port, IdentityFile, IdentitiesOnly, UserKnownHostsFile,
GlobalKnownHostsFile, HostKeyAlias, HashKnownHosts, ProxyJump, ProxyCommand,
ServerAliveInterval, ConnectTimeout, StrictHostKeyChecking=accept-new, Include.
"""

from __future__ import annotations

import contextlib
import getpass
import glob
import math
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

_DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
_DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
_SYSTEM_CONFIG = "/etc/ssh/ssh_config"
_INCLUDE_RE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+)$", re.IGNORECASE)


@dataclass
class Target:
    """Where and how to connect to one host (target or jump host), after the ssh config."""

    name: str  # as typed
    hostname: str
    port: int
    user: str
    identity_files: list[str]
    identity_explicit: bool  # given on the command line: a missing file is an error
    identities_only: bool
    known_hosts: list[str]  # UserKnownHostsFile: checked, and the first one gets new keys
    global_known_hosts: list[str]
    host_key_alias: str | None
    hash_known_hosts: bool
    accept_new: bool
    proxy_jump: str | None
    proxy_command: str | None
    keepalive_s: float
    connect_timeout: float | None  # ssh_config ConnectTimeout, None when unset
    jumps: list[Target] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.hostname}:{self.port}"

    @property
    def key_name(self) -> str:
        """The name of this host in known_hosts, as OpenSSH writes it."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def label(self) -> str:
        """`name (hostname:port)`, or `hostname:port` when the name is the hostname."""
        return self.address if self.name == self.hostname else f"{self.name} ({self.address})"


def load_config(path: str | None) -> paramiko.SSHConfig:
    """The user's config (or `path`, as ssh -F) then, without -F, the system-wide one."""
    if path is not None:
        text = _config_text(path, os.path.dirname(os.path.abspath(path)), 0)
    else:
        user = os.path.expanduser("~/.ssh/config")
        text = _config_text(user, os.path.expanduser("~/.ssh"), 0) if os.path.isfile(user) else ""
        if os.path.isfile(_SYSTEM_CONFIG):
            with contextlib.suppress(OSError):
                # "Host *" ends any block the user file left open; first value wins, as in ssh
                text += "\nHost *\n" + _config_text(_SYSTEM_CONFIG, "/etc/ssh", 0)
    config = _CONFIGS.get(text)
    if config is None:  # parsed once per text, per process: every host of a fleet reads the same files
        if _MATCH_EXEC_RE.search(text):
            _load_invoke()
        config = _CONFIGS[text] = paramiko.SSHConfig.from_text(text)
    return config


_CONFIGS: dict[str, paramiko.SSHConfig] = {}
_MATCH_EXEC_RE = re.compile(r"^\s*match\b[^\n#]*\bexec\b", re.IGNORECASE | re.MULTILINE)


def _load_invoke() -> None:
    """paramiko runs `Match exec` with invoke, which the package keeps from loading with paramiko
    (transports/ssh/__init__.py: 50 ms of start-up that no other config needs): load it now."""
    import paramiko.config as pconfig

    if getattr(pconfig, "invoke", None) is not None:
        return
    try:
        import invoke
    except ImportError as exc:  # not installed: paramiko says so when it meets the line
        pconfig.invoke_import_error = exc
    else:
        pconfig.invoke = invoke  # type: ignore[attr-defined]


def _config_text(path: str, base: str, depth: int) -> str:
    """The file's text with `Include` lines replaced by the files they name (paramiko lacks Include)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    if depth > 16:
        raise ValueError(f"{path}: too many nested Include")
    out: list[str] = []
    for line in lines:
        m = _INCLUDE_RE.match(line)
        if not m:
            out.append(line)
            continue
        for pattern in shlex.split(m.group(1), comments=True):
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = os.path.join(base, pattern)
            for included in sorted(glob.glob(pattern)):
                if os.path.isfile(included):
                    out.append(_config_text(included, base, depth + 1))
    return "\n".join(out) + "\n"


def target_for(
    config: paramiko.SSHConfig,
    name: str,
    user: str | None,
    port: int | None,
    identity: list[str] | None,
    accept_new: bool,
) -> Target:
    opts = config.lookup(name)
    hostname = str(opts.get("hostname", name))
    the_user = user or opts.get("user") or getpass.getuser()
    the_port = port or int(opts.get("port", 22))
    home = os.path.expanduser("~")

    def expand(p: str) -> str:
        p = p.replace("%d", home).replace("%u", getpass.getuser()).replace("%r", the_user)
        p = p.replace("%h", hostname).replace("%n", name).replace("%p", str(the_port)).replace("%%", "%")
        return os.path.expanduser(p)

    def paths(key: str, default: Sequence[str]) -> list[str]:
        value = opts.get(key)
        if value is None:
            return [os.path.expanduser(p) for p in default]
        if str(value).lower() == "none":
            return []
        return [expand(p) for p in shlex.split(str(value))]

    if identity:
        identity_files = [os.path.expanduser(p) for p in identity]
    else:
        identity_files = [os.path.expanduser(p) for p in opts.get("identityfile", []) if p.lower() != "none"]
    proxy_command = opts.get("proxycommand")
    proxy_jump = opts.get("proxyjump")
    return Target(
        name=name,
        hostname=hostname,
        port=the_port,
        user=the_user,
        identity_files=identity_files,
        identity_explicit=bool(identity),
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
        known_hosts=paths("userknownhostsfile", _DEFAULT_KNOWN_HOSTS),
        global_known_hosts=paths("globalknownhostsfile", _DEFAULT_GLOBAL_KNOWN_HOSTS),
        host_key_alias=opts.get("hostkeyalias"),
        hash_known_hosts=str(opts.get("hashknownhosts", "no")).lower() == "yes",
        accept_new=accept_new or str(opts.get("stricthostkeychecking", "")).lower() == "accept-new",
        proxy_jump=None if proxy_jump is None or proxy_jump.lower() == "none" else proxy_jump,
        proxy_command=None if proxy_command is None or proxy_command.lower() == "none" else proxy_command,
        keepalive_s=float(opts.get("serveraliveinterval", 0) or 0) or 30.0,
        connect_timeout=_seconds(opts.get("connecttimeout")),
    )


def _seconds(value: Any) -> float | None:
    """ConnectTimeout's value: seconds, or None when unset ("none" or 0: the default)."""
    if value is None or str(value).strip().lower() == "none":
        return None
    number = float(str(value).strip())  # a bad value: _resolve() names the config file
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"ConnectTimeout {value!r} is not a number of seconds")
    return number or None


def jump_hosts(config: paramiko.SSHConfig, spec: str, accept_new: bool, depth: int = 0) -> list[Target]:
    """The jump hosts of a ProxyJump value, in order; the first one's own ProxyJump comes first."""
    if depth > 8:
        raise ValueError("ProxyJump loops")
    hops: list[Target] = []
    for i, item in enumerate(spec.split(",")):
        item = item.strip().removeprefix("ssh://")
        user, _, rest = item.rpartition("@")
        host, port = rest, None
        m = re.fullmatch(r"\[(.+)\](?::(\d+))?|([^:]+)(?::(\d+))?", rest)
        if m:
            host = m.group(1) or m.group(3)
            port = int(m.group(2) or m.group(4)) if (m.group(2) or m.group(4)) else None
        hop = target_for(config, host, user or None, port, None, accept_new)
        hop.proxy_command = None
        if i == 0 and hop.proxy_jump:
            hops.extend(jump_hosts(config, hop.proxy_jump, accept_new, depth + 1))
        hops.append(hop)
    return hops
