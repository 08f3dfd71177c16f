"""Slurm hostlist expressions (`gpu[001-016,020]`, `r[1-2]n[01-08]`), via python-hostlist.

python-hostlist (NSC) implements Slurm's syntax, zero padding and several bracket groups
included, and is the implementation other HPC tools use; we wrap its errors and bound its work.

Bounds (hostile configs, fixtures and fabrics reach these functions): a host name is at most
`MAX_NAME` characters, an expression names at most `MAX_HOSTS` hosts, and a name holds at most
`MAX_GROUPS` bracket groups. Slurm's own limits (src/common/hostlist.c): MAXHOSTNAMELEN 64 for
its host-name buffers ("hostnames will probably be truncated if longer"), MAX_RANGE and
MAX_RANGES 64K hosts (domain-facts §D.6); `MAX_NAME` allows DNS names (253) for `--hosts`, and
callers that read Slurm node names pass `max_name=SLURM_MAX_NAME`. Beyond those bounds
python-hostlist goes quadratic (folding names with many digit groups: 18 KB took 24 s) or
recursive (a name of 20,000 bracket groups overflows the stack).
"""

from __future__ import annotations

from collections.abc import Iterable

from clustercheck.errors import UsageError

#: Slurm's host-name buffer (MAXHOSTNAMELEN, src/common/hostlist.c).
SLURM_MAX_NAME = 64
#: A DNS name (253) with room to spare: the longest host name any caller accepts.
MAX_NAME = 255
#: Slurm's MAX_RANGE / MAX_SLURM_NODES: 64K hosts.
MAX_HOSTS = 64 * 1024
#: Bracket groups in one name (`r[1-2]n[01-08]` has 2); more cannot fit in MAX_NAME anyway.
MAX_GROUPS = 16


def _pieces(expression: str) -> list[str]:
    """Split at the commas outside brackets, in one pass: 'a[1,2],b' -> ['a[1,2]', 'b']."""
    out: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(expression):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(expression[start:i])
            start = i + 1
    out.append(expression[start:])
    return [p for p in (p.strip() for p in out) if p]


def _shown(expression: str) -> str:
    return repr(expression) if len(expression) <= 80 else f"{expression[:60]!r}... ({len(expression)} characters)"


def _too_long(max_name: int) -> str:
    if max_name == SLURM_MAX_NAME:
        return f"a host name longer than {max_name} characters (Slurm's MAXHOSTNAMELEN)"
    return f"a host name longer than {max_name} characters (a DNS name has at most 253)"


def expand(expression: str, *, max_name: int = MAX_NAME, max_hosts: int = MAX_HOSTS) -> list[str]:
    """'gpu[01-03],login1' -> ['gpu01', 'gpu02', 'gpu03', 'login1'] (duplicates removed, order kept).

    UsageError for bad syntax, a name longer than `max_name`, or more than `max_hosts` hosts.
    """
    import hostlist

    hosts: dict[str, None] = {}
    total = 0
    for piece in _pieces(expression.strip()):
        groups = piece.count("[")
        if groups > MAX_GROUPS:
            raise UsageError(
                f"bad hostlist {_shown(expression)}: {groups} bracket groups in one name (at most {MAX_GROUPS})"
            )
        outside = len(piece) - sum(len(part.partition("]")[0]) + 2 for part in piece.split("[")[1:])
        if outside > max_name:
            raise UsageError(f"bad hostlist {_shown(expression)}: {_too_long(max_name)}")
        try:
            names = hostlist.expand_hostlist(piece)
        except (hostlist.BadHostlist, RecursionError, ValueError) as exc:
            raise UsageError(
                f"bad hostlist {_shown(expression)}: {exc} (Slurm syntax: gpu[001-016,020],login1)"
            ) from None
        total += len(names)
        if total > max_hosts:
            raise UsageError(f"the hostlist {_shown(expression)} names more than {max_hosts} hosts (Slurm's limit)")
        for name in names:
            if len(name) > max_name:
                raise UsageError(f"bad hostlist {_shown(expression)}: {_too_long(max_name)}")
            hosts[name] = None
    if not hosts:
        raise UsageError(f"the hostlist {_shown(expression)} names no host")
    return list(hosts)


def fold(hosts: Iterable[str]) -> str:
    """['gpu01', 'gpu02', 'gpu03'] -> 'gpu[01-03]'.

    Names longer than SLURM_MAX_NAME are listed as they are, after the folded ones: folding
    them is quadratic in their length, and no Slurm node has such a name.
    """
    import hostlist

    names = list(hosts)
    short = [n for n in names if len(n) <= SLURM_MAX_NAME]
    long = list(dict.fromkeys(n for n in names if len(n) > SLURM_MAX_NAME))
    folded = str(hostlist.collect_hostlist(short)) if short else ""
    return ",".join(p for p in (folded, *long) if p)
