"""What clustercheck keeps and says on a node: the JSON state file (atomic), per-check markers kept
between runs (`read_marker`, `marker_folder`: e.g. how far gpu.xid read the kernel log), syslog.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clustercheck.result import CheckResult

DEFAULT_STATE_FILE = "/run/clustercheck/prolog.json"


DEFAULT_SYSLOG = "/dev/log"


LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO = 3, 4, 5, 6


_LOG_DAEMON = 3 << 3


def syslog(message: str, severity: int, socket_path: str = DEFAULT_SYSLOG) -> bool:
    """Send one RFC 3164 line (facility daemon, tag clustercheck[PID]) to the syslog socket.

    The same datagram libc's syslog(3) sends, but to a socket we can name (tests, containers).
    Returns False when there is no syslog to send to; never raises and never blocks.
    """
    if not socket_path:
        return False
    import socket  # here, not at the top: ~2 ms the prolog spends only when it logs

    stamp = time.strftime("%b %e %H:%M:%S")
    line = f"<{_LOG_DAEMON | severity}>{stamp} clustercheck[{os.getpid()}]: {message}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.connect(socket_path)
            sock.send(line.encode("utf-8", "replace")[:8192])
        return True
    except OSError:
        return False


def state_path(template: str, node: str) -> Path:
    """The state file for `node`: `{node}` in the template is replaced by the node's name."""
    return Path(template.replace("{node}", node.replace("/", "_")))


def write_state(path: Path, state: Mapping[str, Any]) -> None:
    """Write the JSON state atomically (a reader never sees half a file); folders are made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_state(path: Path) -> dict[str, Any] | None:
    """The prolog's last state, or None when absent or unreadable (never raises)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _now() -> tuple[str, float]:
    """ISO 8601 local time with its UTC offset, and the epoch (no datetime import: prolog path)."""
    stamp = time.time()
    local = time.localtime(stamp)
    offset = local.tm_gmtoff or 0
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return time.strftime("%Y-%m-%dT%H:%M:%S", local) + f"{sign}{hours:02d}:{minutes:02d}", stamp


_state_folder: Path | None = None


_state_writable = False


def set_state_folder(folder: Path | None, *, writable: bool) -> None:
    global _state_folder, _state_writable
    _state_folder, _state_writable = folder, writable


def read_marker(name: str) -> dict[str, Any] | None:
    """A check's marker from the previous prolog/health run (None: none, or not in those modes)."""
    if _state_folder is None:
        return None
    return read_state(_state_folder / f"{name}.marker.json")


def marker_folder() -> Path | None:
    """Where prolog/health keep markers between runs (None elsewhere: a check then looks at all)."""
    return _state_folder


def write_markers(checks: Sequence[CheckResult]) -> list[str]:
    """Write the markers the checks returned (data["marker"] = {"name": ..., ...}); problems."""
    problems: list[str] = []
    if _state_folder is None or not _state_writable:
        return problems
    for c in checks:
        marker = c.data.get("marker") if isinstance(c.data, Mapping) else None
        if isinstance(marker, Mapping) and re.fullmatch(r"[a-z0-9_.-]{1,40}", str(marker.get("name", ""))):
            try:
                write_state(_state_folder / f"{marker['name']}.marker.json", marker)
            except OSError as exc:
                problems.append(f"{c.id}'s marker could not be written: {exc.strerror or exc}")
    return problems
