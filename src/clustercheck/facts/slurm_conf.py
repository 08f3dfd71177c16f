"""slurm.conf (and the other `Key=Value` files of Slurm): the one parser, and how to gather it.

Pure parsing (host-free):

- `read_conf_lines()`: Slurm's `Key=Value` file syntax (slurm.conf, topology.conf, gres.conf,
  cgroup.conf): `#` comments (`\\#` keeps a literal one), `\\` line continuations,
  case-insensitive keys, spaces around `=` (`NodeName = gpu[001-013]`, as puppet-managed site
  files write them), quoted values, `Include FILE`. What is not `Key=Value` is a `ConfError`
  naming FILE:LINE, as slurmctld refuses it.
- `parse_slurm_conf()` -> `SlurmConf`: global parameters (the last setting wins, with its file
  and line), the NodeName lines (hostlists expanded, names at most 64 characters,
  `NodeName=DEFAULT` merged into the lines after it), following `Include` through a callback.
- `first_settings()`: the forgiving lookup of one file's keys (first setting wins, never raises),
  for a check that wants one parameter even from a file slurmctld would refuse.
- `parse_gres_gpus()` (a `Gres=` value), `parse_gres_conf()`, `parse_cgroup_conf()`.

Gathering (through the Host API, once per host per run): `locate()` finds the first of the config
folders holding a slurm.conf, `read_slurm_conf()` reads it and asks the node for each file it
`Include`s by its real path (relative names resolve in the config folder, as slurmd's do).
`NEEDS` is what a check reading slurm.conf declares: real paths, never prose.

Values are NamedTuples, not dataclasses: creating a dataclass costs ~0.5 ms at import, and the
prolog may read slurm.conf in every job.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from clustercheck.errors import HostError, UsageError
from clustercheck.hostlist import MAX_NAME, SLURM_MAX_NAME, expand

if TYPE_CHECKING:
    from clustercheck.host import Host

# /etc/slurm, then where a configless slurmd keeps its copy.
CONFIG_DIRS = ("/etc/slurm", "/run/slurm/conf", "/var/spool/slurmd/conf-cache")
# What a check that reads slurm.conf declares; included files are found at run time.
NEEDS = ("file /etc/slurm/slurm.conf",)
MAX_INCLUDE_DEPTH = 8


class ConfError(UsageError):
    """A slurm.conf, topology, gres.conf or cgroup.conf file that cannot be read: FILE:LINE: why."""


# -- Slurm's Key=Value file syntax -----------------------------------------------------------------

# Key, optional operator (Slurm accepts `+=`, `-=` in a few files), then a quoted or bare value.
_PAIR_RE = re.compile(r'\s*([A-Za-z][A-Za-z0-9_.]*)\s*[-+*/]?=\s*(?:"([^"]*)"|([^\s"]+))')
_INCLUDE_RE = re.compile(r"^\s*include\s+(\S.*?)\s*$", re.IGNORECASE)
_BLANK_REST = re.compile(r"\s*\Z")


class ConfLine(NamedTuple):
    """One logical line of a Slurm config file: its `Key=Value` pairs in order."""

    source: str
    line: int  # the first physical line
    pairs: tuple[tuple[str, str], ...]
    include: str | None = None  # `Include FILE`

    @property
    def key(self) -> str:
        """The first key, lower case: it says what the line defines (switchname, nodename ...)."""
        return self.pairs[0][0].lower() if self.pairs else "include"

    def get(self, key: str) -> str | None:
        key = key.lower()
        return next((v for k, v in self.pairs if k.lower() == key), None)

    def keys(self) -> list[str]:
        return [k.lower() for k, _ in self.pairs]

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def read_conf_lines(text: str, source: str) -> list[ConfLine]:
    """Slurm config text -> logical lines; ConfError (FILE:LINE) for what is not `Key=Value`.

    The one reader of Slurm's `Key=Value` files (slurm.conf, topology.conf, gres.conf, cgroup.conf)."""
    out: list[ConfLine] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        body = _strip_comment(raw)
        if not pending:
            start = number
        stripped = body.rstrip()
        if stripped.endswith("\\"):  # continuation: Slurm joins the next physical line
            pending += stripped[:-1] + " "
            continue
        logical, pending = pending + body, ""
        if logical.strip():
            out.append(_conf_line(logical, source, start))
    if pending.strip():
        out.append(_conf_line(pending, source, start))
    return out


def _strip_comment(line: str) -> str:
    # `#` starts a comment unless escaped as `\#` (parse_config.c); the escape keeps a literal #.
    out, i = [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and line[i + 1 : i + 2] == "#":
            out.append("#")
            i += 2
            continue
        if ch == "#":
            break
        out.append(ch)
        i += 1
    return "".join(out)


def _conf_line(text: str, source: str, number: int) -> ConfLine:
    m = _INCLUDE_RE.match(text)
    if m and "=" not in text:
        return ConfLine(source, number, (), include=m.group(1).strip('"'))
    pairs: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if _BLANK_REST.match(text, pos):  # not text[pos:].strip(): that copies the rest per pair
            break
        pm = _PAIR_RE.match(text, pos)
        if pm is None:
            bad = text[pos : pos + 200].split()[0]
            raise ConfError(f"{source}:{number}: cannot read {bad[:80]!r}: expected Key=Value pairs")
        value = pm.group(2) if pm.group(2) is not None else pm.group(3)
        pairs.append((pm.group(1), value))
        pos = pm.end()
    return ConfLine(source, number, tuple(pairs))


def expand_names(expression: str, where: str, what: str) -> list[str]:
    """A hostlist of a Slurm file -> names (each at most 64 characters); ConfError names FILE:LINE."""
    try:
        return expand(expression, max_name=SLURM_MAX_NAME)
    except UsageError as exc:
        raise ConfError(f"{where}: {what}: {exc}") from None


# -- slurm.conf: the model ---------------------------------------------------------------------------------------


class NodeDef(NamedTuple):
    """A node as slurm.conf defines it: where, and its parameters (NodeName=DEFAULT merged in)."""

    name: str
    source: str
    line: int
    params: dict[str, str]


class SlurmConf:
    """The parts of slurm.conf clustercheck reads: global parameters and the nodes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.params: dict[str, tuple[str, str, int]] = {}  # lower-case key -> (value, file, line)
        self.nodes: dict[str, NodeDef] = {}
        self.files: list[str] = []

    def get(self, key: str) -> str | None:
        entry = self.params.get(key.lower())
        return entry[0] if entry else None

    def where(self, key: str) -> str:
        entry = self.params.get(key.lower())
        return f"{entry[1]}:{entry[2]}" if entry else self.source

    def node_lines(self) -> dict[str, tuple[str, int]]:
        return {n: (d.source, d.line) for n, d in self.nodes.items()}


# Lines whose first key defines something other than a global parameter.
_RECORD_KEYS = {"nodename", "partitionname", "nodeset", "downnodes", "frontendname", "switchname", "slurmctldhost"}


def parse_slurm_conf(
    text: str,
    source: str = "slurm.conf",
    read_include: Callable[[str], tuple[str, str]] | None = None,
) -> SlurmConf:
    """slurm.conf -> SlurmConf. `read_include(path)` returns (name, text) of an `Include`d file."""
    conf = SlurmConf(source)
    _read_slurm(conf, text, source, read_include, {}, 0)
    return conf


def _read_slurm(
    conf: SlurmConf,
    text: str,
    source: str,
    read_include: Callable[[str], tuple[str, str]] | None,
    defaults: dict[str, str],
    depth: int,
) -> None:
    conf.files.append(source)
    for cl in read_conf_lines(text, source):
        if cl.include is not None:
            if read_include is None:
                raise ConfError(f"{cl.where}: Include {cl.include}: cannot follow includes here")
            if depth > MAX_INCLUDE_DEPTH:
                raise ConfError(f"{cl.where}: Include {cl.include}: includes nested too deep (a loop?)")
            name, included = read_include(cl.include)
            _read_slurm(conf, included, name, read_include, defaults, depth + 1)
            continue
        key = cl.key
        if key == "nodename":
            value = cl.pairs[0][1]
            params = {k.lower(): v for k, v in cl.pairs[1:]}
            if value.upper() == "DEFAULT":
                defaults.update(params)
                continue
            merged = {**defaults, **params}
            for node in expand_names(value, cl.where, "NodeName="):
                conf.nodes[node] = NodeDef(node, source, cl.line, merged)
        elif key not in _RECORD_KEYS:
            for k, v in cl.pairs:
                conf.params[k.lower()] = (v, source, cl.line)


def _without_parentheses(text: str) -> str:
    r"""'gpu:2(S:0-1)' -> 'gpu:2', in one pass (re.sub(r"\(.*?\)") rescans to the end from every
    unclosed `(`: quadratic); an unclosed `(` keeps the rest, as that regex did."""
    out, pos = [], 0
    while True:
        open_at = text.find("(", pos)
        close_at = text.find(")", open_at + 1) if open_at >= 0 else -1
        if close_at < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:open_at])
        pos = close_at + 1


def parse_gres_gpus(gres: str) -> int:
    """slurm.conf `Gres=` -> the number of GPUs: `gpu:8` 8, `gpu:a100:4,gpu:v100:2(S:0-1)` 6, `mps:100` 0."""
    total = 0
    depth, item = 0, ""
    items: list[str] = []
    for ch in gres:  # split on commas outside parentheses: gpu:2(S:0,1),gpu:1
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    for raw in items:
        spec = _without_parentheses(raw).strip()
        if not spec:
            continue
        parts = [p for p in spec.split(":") if p and p.lower() != "no_consume"]
        if not parts or parts[0].lower() != "gpu":
            continue
        count = 1
        if len(parts) > 1:
            m = re.fullmatch(r"(\d+)([KMGTP]?)", parts[-1], re.IGNORECASE)
            if m:
                count = int(m.group(1)) * 1024 ** " KMGTP".index(m.group(2).upper() or " ")
        total += count
    return total


# -- forgiving lookup -----------------------------------------------------------------------------------

# A key starts where no word character precedes it: without the look-behind, sre retried the
# key at every position of a long word (`aaaa...` without `=`), quadratic in the line's length
# (one 800 KB line held the interpreter lock past every budget).
_LOOSE_PAIR = re.compile(r"(?<!\w)([A-Za-z]\w*)\s*=\s*(\"[^\"]*\"|\S+)")


def first_settings(text: str) -> dict[str, tuple[str, int]]:
    """slurm.conf -> {lower-case key: (value, line number)}; the first setting of a key wins.

    Forgiving where `parse_slurm_conf()` is strict: `Key=Value` pairs are picked out of any
    line (one may hold several), `#` starts a comment, and nothing raises, so a check that
    needs one parameter still finds it in a file with a line slurmctld would refuse.
    """
    found: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        for m in _LOOSE_PAIR.finditer(line):
            found.setdefault(m.group(1).lower(), (m.group(2).strip('"'), number))
    return found


# -- gres.conf, cgroup.conf --------------------------------------------------------------------------


class GresLine(NamedTuple):
    """A gres.conf line for GPUs: the nodes it applies to (None: all), its count and device files."""

    line: int
    nodes: tuple[str, ...] | None
    gpus: int
    files: tuple[str, ...]
    type: str
    autodetect: str | None


def parse_gres_conf(text: str, source: str = "gres.conf") -> tuple[str | None, list[GresLine]]:
    """gres.conf -> (the global AutoDetect, the GPU lines). ConfError names a bad line."""
    autodetect: str | None = None
    lines: list[GresLine] = []
    for cl in read_conf_lines(text, source):
        name = cl.get("name")
        detect = cl.get("autodetect")
        nodes_expr = cl.get("nodename")
        nodes = tuple(_expand_gres(nodes_expr, cl.where)) if nodes_expr else None
        if name is None:
            if detect is not None and nodes is None:
                autodetect = detect.lower()
            elif detect is not None:
                lines.append(GresLine(cl.line, nodes, 0, (), "", detect.lower()))
            continue
        if name.lower() != "gpu":
            continue
        file_expr = cl.get("file")
        flat = tuple(_expand_gres(file_expr, cl.where, max_name=MAX_NAME)) if file_expr else ()
        count_text = cl.get("count")
        if count_text is not None:
            m = re.fullmatch(r"(\d+)([KMGTP]?)", count_text, re.IGNORECASE)
            if not m:
                raise ConfError(f"{cl.where}: Count={count_text}: expected a number")
            count = int(m.group(1)) * 1024 ** " KMGTP".index(m.group(2).upper() or " ")
        else:
            count = len(flat) if flat else 1
        lines.append(GresLine(cl.line, nodes, count, flat, cl.get("type") or "", detect.lower() if detect else None))
    return autodetect, lines


def _expand_gres(expression: str, where: str, *, max_name: int = SLURM_MAX_NAME) -> list[str]:
    try:
        return expand(expression, max_name=max_name)
    except Exception as exc:
        raise ConfError(f"{where}: {exc}") from None


def parse_cgroup_conf(text: str, source: str = "cgroup.conf") -> dict[str, tuple[str, ConfLine]]:
    """cgroup.conf -> {lower-case key: (value, the line)}; the last setting of a key wins."""
    out: dict[str, tuple[str, ConfLine]] = {}
    for cl in read_conf_lines(text, source):
        for key, value in cl.pairs:
            out[key.lower()] = (value, cl)
    return out


# -- gathering through the Host API -----------------------------------------------------------------


class ConfUnreadable(HostError):
    """A Slurm file slurmctld could not parse either (FILE:LINE: why): `cannot tell` for most
    checks; slurm.topology fails on it."""


def locate(host: Host, config_dirs: tuple[str, ...] = CONFIG_DIRS) -> tuple[str, str] | None:
    """(the first of `config_dirs` holding a slurm.conf, that file's text), or None."""

    def gather(h: Host) -> tuple[str, str] | None:
        for folder in config_dirs:
            text = h.read_optional(posixpath.join(folder, "slurm.conf"))
            if text is not None:
                return folder, text
        return None

    return host.fact(f"slurm.dir:{config_dirs}", gather)


def read_slurm_conf(host: Host, config_dirs: tuple[str, ...] = CONFIG_DIRS) -> tuple[str, SlurmConf]:
    """(the config folder, slurm.conf with its includes, each read by its real path).

    HostError when no folder holds a slurm.conf or an included file cannot be read (or is a
    pattern), ConfUnreadable when a line is not Slurm syntax; gathered once per host per run.
    """

    def gather(h: Host) -> tuple[str, SlurmConf]:
        found = locate(h, config_dirs)
        if found is None:
            raise HostError(
                h.name,
                "cannot tell: no slurm.conf in " + ", ".join(config_dirs) + " (not a Slurm node? set config_dirs)",
            )
        folder, text = found
        path = posixpath.join(folder, "slurm.conf")

        def include(target: str) -> tuple[str, str]:
            if any(c in target for c in "*?["):
                raise HostError(h.name, f"cannot tell: {path} includes {target}, a pattern this check does not expand")
            full = target if target.startswith("/") else posixpath.join(folder, target)
            return full, h.read(full)

        try:
            return folder, parse_slurm_conf(text, path, include)
        except ConfError as exc:
            raise ConfUnreadable(h.name, str(exc)) from None

    return host.fact(f"slurm.conf:{config_dirs}", gather)
