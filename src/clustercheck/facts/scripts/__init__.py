"""Scripts that run on a node, kept here as real files and sent as text.

A shell script (`*.sh`) is POSIX sh: tests/test_scripts.py parses it with dash, bash --posix (and
busybox ash where installed) as the file and as sent, and runs shellcheck over the file where it
is installed. A Python script (`*.py`) is a module like any other (ruff, mypy --strict), valid for
the Python 3.6 a node may carry, and run as `python3 -c TEXT ARGS`.

`clustercheck.facts.script_text(name, **fill)` is what goes to the node: the file without its
comment lines (lines whose first non-blank character is `#`; a `.sh` file only), each `@NAME@`
replaced by `fill["NAME"]`. That text is part of every command argv a fixture records, so a
script's bytes are pinned by a hash in tests/test_scripts.py: changing a script means
re-recording the fixtures that ran it (or updating their recorded argv, as their notes say).

This package holds no code, and loading a script does not import it: it is a package so that
its `.py` scripts install and type-check as modules (clustercheck.facts.scripts.storage_probe).
"""
