"""The mount table: /proc/mounts as {mount point: source, type, options}."""

from __future__ import annotations

import re

from clustercheck import Host, fact


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040 ...)
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> dict[str, dict[str, object]]:
    """/proc/mounts -> {mount point: {source, type, options}}; the last mount on a point wins."""
    mounts: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mounts[_unescape(parts[1])] = {
                "source": _unescape(parts[0]),
                "type": parts[2],
                "options": parts[3].split(","),
            }
    return mounts


@fact
def mount_table(host: Host) -> dict[str, dict[str, object]]:
    return parse_mounts(host.read("/proc/mounts"))
