"""Facts: one module per data source a check reads on a node.

Each module holds how to gather the source through the Host API (the commands it runs, the files
it reads, with real paths) and a pure parser of what comes back. Checks (checks/*.py) judge
facts; they import facts modules, never each other (tests/test_architecture.py).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clustercheck.host import Host


def shorten_last_observation(host: Host, script: str, label: str) -> None:
    """Evidence shows `sh -c '<label>'` instead of a long script (the fixture keeps the script)."""
    if host.observations:
        host.observations[-1] = host.observations[-1].replace(shlex.quote(script), f"'{label}'")
