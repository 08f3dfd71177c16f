"""Facts: one module per data source a check reads on a node.

Each module holds how to gather the source through the Host API (the commands it runs, the files
it reads, with real paths) and a pure parser of what comes back. Checks (checks/*.py) judge
facts; they import facts modules, never each other (tests/test_architecture.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def shown_with(argv: Sequence[str], script: str, shown: str) -> str:
    """`argv` as evidence writes it (`Host.run(shown_as=...)`): `script` by a name, e.g.
    `sh -c '<rdma gather script>'`, instead of its many lines (the fixture keeps the script)."""
    return shlex.join(argv).replace(shlex.quote(script), shown)
