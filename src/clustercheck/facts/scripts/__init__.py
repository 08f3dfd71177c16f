"""Scripts that run on a node, kept here as real files and sent as text.

A shell script (`*.sh`) is POSIX sh: tests/test_scripts.py parses it with dash, bash --posix (and
busybox ash where installed) as the file and as sent, and runs shellcheck over the file where it
is installed. A Python script (`*.py`) is a module like any other (ruff, mypy --strict), valid for
the Python 3.6 a node may carry, and run as `python3 -c TEXT ARGS`.

`text(name, **fill)` is what goes to the node: the file without its comment lines (lines whose
first non-blank character is `#`; a `.sh` file only), each `@NAME@` replaced by `fill["NAME"]`.
That text is part of every command argv a fixture records, so a script's bytes are pinned by a
hash in tests/test_scripts.py: changing a script means re-recording the fixtures that ran it.
"""

from __future__ import annotations

import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))


def text(name: str, **fill: str) -> str:
    """The script `name` of this folder as it is sent, placeholders `@KEY@` filled from `fill`."""
    with open(os.path.join(_HERE, name), encoding="utf-8") as f:
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
