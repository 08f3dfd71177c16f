"""Connecting the SSH transport: TCP (or ProxyCommand, or a jump host's tunnel), the handshake,
the host key check (known_hosts.py), public-key authentication (identity files, then the agent).

ConnectTimeout (10 s when unset) bounds the TCP connect, the banner and each authentication
step. What a connection attempt opens is listed in `pending` while it runs, so close() in
another thread can abort it instead of waiting for it.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import paramiko

from clustercheck.errors import Unreachable
from clustercheck.host import in_thread
from clustercheck.transports.ssh.config import Target
from clustercheck.transports.ssh.known_hosts import KnownHosts, check_host_key
from clustercheck.transports.ssh.session import WINDOW

# paramiko logs tracebacks at ERROR level from its transport thread (e.g. "Exception
# (client): Error reading SSH protocol banner"). With no handler configured anywhere,
# Python's last-resort handler would print them on stderr; our errors say it better.
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
if _PARAMIKO_LOG.level == logging.NOTSET:
    _PARAMIKO_LOG.setLevel(logging.CRITICAL)

DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds, when neither the caller nor ssh_config's ConnectTimeout says


class Connection:
    """An authenticated paramiko transport, and the jump hosts' transports under it."""

    def __init__(self, transport: paramiko.Transport, under: list[paramiko.Transport]) -> None:
        self.transport = transport
        self.under = under

    def alive(self) -> bool:
        return self.transport.is_active()

    def close(self) -> None:
        for t in [self.transport, *reversed(self.under)]:
            with contextlib.suppress(Exception):
                t.close()


def open_connection(target: Target, timeout: float, pending: list[Any]) -> Connection:
    """Connect through the jump hosts to the target. What it opens is in `pending` while it
    runs, for close() in another thread to abort it."""
    under: list[paramiko.Transport] = []
    try:
        via: paramiko.Transport | None = None
        for hop in target.jumps:
            via = _handshake(hop, via, timeout, target, pending)
            under.append(via)
        return Connection(_handshake(target, via, timeout, target, pending), under)
    except BaseException:
        for t in reversed(under):
            with contextlib.suppress(Exception):
                t.close()
        raise


def _handshake(
    t: Target, via: paramiko.Transport | None, timeout: float, final: Target, pending: list[Any]
) -> paramiko.Transport:
    """Connect, check the host key, authenticate: an active transport, or Unreachable."""
    host = final.name
    through = "" if t is final else f" (jump host for {final.name})"
    sock = _socket(t, via, timeout, host, through, pending)
    pending.append(sock)
    transport: paramiko.Transport | None = None
    try:
        transport = paramiko.Transport(sock, default_window_size=WINDOW)
        pending.append(transport)
        transport.banner_timeout = timeout
        transport.auth_timeout = timeout
        known = KnownHosts(t.known_hosts + t.global_known_hosts)
        _prefer_known_key_types(transport, known.key_types(t.key_name))
        try:
            transport.start_client(timeout=timeout)
        except Exception as exc:
            raise Unreachable(host, _handshake_failure(t, exc, timeout) + through) from exc
        try:  # start_client() returns quietly when its timeout expires mid-handshake
            server_key = transport.get_remote_server_key()
        except paramiko.SSHException as exc:
            raise Unreachable(
                host, f"{t.label()}{through} did not complete the SSH handshake within {timeout:g} s"
            ) from exc
        check_host_key(t, server_key, known, host, through)
        _authenticate(t, transport, host, through)
        transport.set_keepalive(int(t.keepalive_s))
        return transport
    except BaseException:
        if transport is not None:
            transport.close()
        with contextlib.suppress(Exception):
            sock.close()
        raise


def _socket(
    t: Target, via: paramiko.Transport | None, timeout: float, host: str, through: str, pending: list[Any]
) -> Any:
    if via is not None:
        try:
            return via.open_channel("direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0), timeout=timeout)
        except paramiko.ChannelException as exc:
            raise Unreachable(
                host, f"the jump host could not connect to {t.label()}{through}: {exc.text}; check HostName and Port"
            ) from exc
        except Exception as exc:
            raise Unreachable(host, f"the jump host did not open a tunnel to {t.label()}{through}: {exc}") from exc
    if t.proxy_command:
        try:
            return paramiko.ProxyCommand(t.proxy_command)
        except Exception as exc:
            raise Unreachable(host, f"ProxyCommand for {t.label()} failed to start: {exc}") from exc
    try:
        return _tcp_connect(t.hostname, t.port, timeout, pending)
    except socket.gaierror as exc:
        raise Unreachable(
            host,
            f"cannot resolve the host name {t.hostname!r}{through} ({exc.strerror}); check the name or its HostName",
        ) from exc
    except ConnectionRefusedError as exc:
        raise Unreachable(
            host, f"connection refused by {t.label()}{through}: is sshd running there, on port {t.port}?"
        ) from exc
    except TimeoutError as exc:
        raise Unreachable(
            host, f"no answer from {t.label()}{through} within {timeout:g} s: host down, or a firewall drops SSH?"
        ) from exc
    except OSError as exc:
        raise Unreachable(host, f"cannot connect to {t.label()}{through}: {exc.strerror or exc}") from exc


class _Socket(socket.socket):
    """A TCP socket that sends at once and acknowledges at once (TCP_NODELAY, TCP_QUICKACK).

    SSH is a conversation of small messages, and Linux's Nagle and delayed ACK stall it: where
    one end sends two small packets in a row (paramiko's NEWKEYS then its service request;
    sshd's host-keys notice then its answer to our channel open), the second waits for the
    ACK of the first, which the other end delays by 40 ms. Measured on loopback sshd, one
    connection and the base profile's two requests: 140 ms a host, 88 of them such stalls,
    against 47 ms with both options. TCP_QUICKACK does not stick (the kernel goes back to
    delayed ACKs), so it is set again after each read: one setsockopt per read.
    """

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        with contextlib.suppress(OSError):
            self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return data


_QUICKACK = getattr(socket, "TCP_QUICKACK", 12)  # Linux; elsewhere setsockopt fails and is ignored


def _tcp_connect(hostname: str, port: int, timeout: float, pending: list[Any]) -> socket.socket:
    """socket.create_connection(), with the name lookup bounded by the timeout too."""
    end = time.monotonic() + timeout
    try:
        ipaddress.ip_address(hostname)
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except ValueError:
        lookup = lambda: socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)  # noqa: E731
        try:
            infos = in_thread(lookup, timeout, f"resolving {hostname}")
        except TimeoutError:
            raise socket.gaierror(errno.ETIMEDOUT, f"no answer from DNS within {timeout:g} s") from None
    error: OSError = OSError(f"no address for {hostname}")
    for family, kind, proto, _, addr in infos:
        sock = _Socket(family, kind, proto)
        pending.append(sock)
        try:
            sock.settimeout(max(end - time.monotonic(), 0.01))
            sock.connect(addr)
            sock.settimeout(None)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _handshake_failure(t: Target, exc: BaseException, timeout: float) -> str:
    text = str(exc) or type(exc).__name__
    if "banner" in text.lower() or isinstance(exc, EOFError):
        return (
            f"{t.label()} did not answer as an SSH server within {timeout:g} s ({text}): "
            "wrong port, or sshd overloaded (MaxStartups)?"
        )
    if isinstance(exc, paramiko.ProxyCommandFailure):
        return f"ProxyCommand for {t.label()} failed: {text}"
    return f"SSH handshake with {t.label()} failed: {text}"


def _prefer_known_key_types(transport: paramiko.Transport, known_types: list[str]) -> None:
    """Ask the server for a key type we know for it first (as ssh does), so it is comparable."""
    if not known_types:
        return
    options = transport.get_security_options()
    available = list(options.key_types)
    wanted: list[str] = []
    for kt in known_types:
        for candidate in ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if kt == "ssh-rsa" else [kt]:
            if candidate in available and candidate not in wanted:
                wanted.append(candidate)
    options.key_types = wanted + [k for k in available if k not in wanted]


def _authenticate(t: Target, transport: paramiko.Transport, host: str, through: str) -> None:
    tried: list[str] = []
    allowed: list[str] | None = None
    for label, key in _keys(t, tried):
        try:
            remaining = transport.auth_publickey(t.user, key)
        except paramiko.BadAuthenticationType as exc:
            allowed = list(exc.allowed_types)
            tried.append(f"{label}: server does not take keys")
            break
        except paramiko.AuthenticationException as exc:
            if not transport.is_active() or "timeout" in str(exc).lower():
                raise Unreachable(
                    host, f"SSH authentication with {t.label()}{through} got no answer ({describe(exc)})"
                ) from exc
            tried.append(f"{label}: rejected")
            continue
        except Exception as exc:
            raise Unreachable(host, f"SSH authentication with {t.label()}{through} broke off: {exc}") from exc
        if transport.is_authenticated():
            return
        allowed = list(remaining)
        tried.append(f"{label}: accepted, but the server wants more ({', '.join(remaining)})")
        break
    detail = "; ".join(tried) or "no key to try (no IdentityFile, no agent, no ~/.ssh/id_*)"
    more = f"; the server accepts only: {', '.join(allowed)}" if allowed else ""
    raise Unreachable(
        host,
        f"SSH authentication failed as {t.user}@{t.label()}{through} ({detail}{more}). "
        "Check the user (--user), the key (--identity, IdentityFile, ssh-agent) and the node's authorized_keys.",
    )


def _keys(t: Target, tried: list[str]) -> Iterator[tuple[str, paramiko.PKey]]:
    """Keys to offer, in ssh's order: identity files, then agent keys; else the default id_* files."""
    files = list(t.identity_files)
    if not files:
        files = [os.path.expanduser(f"~/.ssh/id_{kind}") for kind in ("rsa", "ecdsa", "ed25519")]
    for path in files:
        if not os.path.exists(path):
            if t.identity_explicit:
                tried.append(f"{path}: no such file")
            continue
        try:
            key = _load_key(path)
        except paramiko.PasswordRequiredException:
            tried.append(f"{path}: encrypted (add it to ssh-agent)")
            continue
        except Exception as exc:
            tried.append(f"{path}: unreadable ({exc})")
            continue
        yield path, key
    if t.identities_only and t.identity_files:
        return
    agent: paramiko.Agent | None = None
    try:
        agent = paramiko.Agent()
        for i, key in enumerate(agent.get_keys()):
            yield f"agent key {i + 1} ({key.get_name()})", key
    except paramiko.SSHException as exc:
        tried.append(f"ssh-agent: {exc}")
    finally:
        if agent is not None:
            agent.close()


_KEYS: dict[tuple[str, int, int, int], paramiko.PKey] = {}


def _load_key(path: str) -> paramiko.PKey:
    """A private key file, parsed once per file version, per process (not once per host)."""
    st = os.stat(path)
    stamp = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    key = _KEYS.get(stamp)
    if key is None:
        key = _KEYS[stamp] = paramiko.PKey.from_path(path)
    return key


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
