"""Facts: one module per data source a check reads on a node.

Each module holds how to gather the source through the Host API (the commands it runs, the files
it reads, with real paths) and a pure parser of what comes back. Checks (checks/*.py) judge
facts; they import facts modules, never each other (tests/test_architecture.py).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

#: Where the scripts that run on a node live, as real files (facts/scripts/, see its __init__).
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def shown_with(argv: Sequence[str], script: str, shown: str) -> str:
    """`argv` as evidence writes it (`Host.run(shown_as=...)`): `script` by a name, e.g.
    `sh -c '<rdma gather script>'`, instead of its many lines (the fixture keeps the script)."""
    return shlex.join(argv).replace(shlex.quote(script), shown)


def script_text(name: str, **fill: str) -> str:
    """The script `name` of facts/scripts/ as it is sent to a node: a `.sh` file without its
    comment lines (first non-blank character `#`), each `@KEY@` replaced by `fill["KEY"]` (all of
    them, and only those: ValueError otherwise). Here, not in facts/scripts/, so that loading a
    script at import (the prolog path's checks do) imports no module more."""
    with open(os.path.join(SCRIPTS, name), encoding="utf-8") as f:
        raw = f.read()
    if name.endswith(".sh"):
        raw = "".join(line for line in raw.splitlines(keepends=True) if not line.lstrip().startswith("#"))
    wanted = set(re.findall(r"@([A-Z][A-Z0-9_]*)@", raw))
    if wanted != set(fill):
        raise ValueError(f"{name}: placeholders {sorted(wanted)}, filled {sorted(fill)}")
    if not fill:
        return raw
    # one pass: a value holding a placeholder's text is not substituted into
    return re.sub("|".join(re.escape(f"@{key}@") for key in fill), lambda m: fill[m.group(0)[1:-1]], raw)
