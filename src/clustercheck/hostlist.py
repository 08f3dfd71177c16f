"""Slurm hostlist expressions (`gpu[001-016,020]`, `r[1-2]n[01-08]`), via python-hostlist.

python-hostlist (NSC) implements Slurm's syntax, zero padding and several bracket groups
included, and is the implementation other HPC tools use; we only wrap its errors.
"""

from __future__ import annotations

from collections.abc import Iterable

from clustercheck.errors import UsageError


def expand(expression: str) -> list[str]:
    """'gpu[01-03],login1' -> ['gpu01', 'gpu02', 'gpu03', 'login1'] (duplicates removed, order kept)."""
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(expression.strip())
    except hostlist.BadHostlist as exc:
        raise UsageError(f"bad hostlist {expression!r}: {exc} (Slurm syntax: gpu[001-016,020],login1)") from exc
    if not hosts:
        raise UsageError(f"the hostlist {expression!r} names no host")
    return list(dict.fromkeys(hosts))


def fold(hosts: Iterable[str]) -> str:
    """['gpu01', 'gpu02', 'gpu03'] -> 'gpu[01-03]'."""
    import hostlist

    return str(hostlist.collect_hostlist(list(hosts)))
