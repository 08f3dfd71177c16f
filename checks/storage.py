"""Storage readiness: shared filesystem mounts, the read pattern of tokenized shards, checkpoint writes.

Reads: /proc/mounts (the `node.mount_table` fact: one parser for both modules), the Lustre
client's version file. Runs: `stat -f` on each required path (bounded: a hung NFS or
Lustre server blocks it in D state, and it is killed), and for the two measuring checks
one `python3 -c SCRIPT ARGS` on the node. The script writes only inside a private folder
it creates (`mkdtemp`, so the name is unique), refuses to fill the filesystem beyond a
margin, stops at its own deadline (well before the command's timeout) and removes the
folder on success, failure, timeout and SIGTERM/SIGINT/SIGHUP. It prints one JSON
object; record/replay stores that like any other command output.
"""

from __future__ import annotations

import re

from clustercheck import Host, Result, Size, check, fail, ok, warn
from clustercheck.registry import human_size

# relative: the runtime package is clustercheck.checks, mypy's is checks
from .node import mount_table

# -- mounts -------------------------------------------------------------------------------

_OPTION_RE = re.compile(r"^(?:(?P<type>[a-z0-9_.]+):)?(?P<name>[A-Za-z0-9_.-]+)(?:(?P<op>>=|<=|=)(?P<value>\S+))?$")


def parse_options(options: list[str]) -> dict[str, str]:
    """['rw', 'rsize=1048576', 'hard'] -> {'rw': '', 'rsize': '1048576', 'hard': ''}."""
    out: dict[str, str] = {}
    for option in options:
        name, _, value = option.partition("=")
        out[name] = value
    return out


def parse_option_rule(rule: str) -> tuple[str, str, str, str]:
    """'nfs:rsize>=1MiB' -> ('nfs', 'rsize', '>=', '1MiB'); 'hard' -> ('', 'hard', '', '').

    The optional `TYPE:` prefix limits the rule to mounts whose type starts with TYPE
    (`nfs:` covers nfs and nfs4). Raises ValueError for a malformed rule.
    """
    m = _OPTION_RE.match(rule.strip())
    if not m:
        raise ValueError(f"mount option rule {rule!r}: expected [TYPE:]NAME[>=|<=|=VALUE], e.g. nfs:rsize>=1MiB")
    if m.group("op") in (">=", "<=") and m.group("value"):
        try:  # a malformed number is the profile's mistake: say so now, naming the rule
            Size.parse(m.group("value"))
        except ValueError as exc:
            raise ValueError(f"mount option rule {rule!r}: {exc}") from None
    return m.group("type") or "", m.group("name"), m.group("op") or "", m.group("value") or ""


def judge_option(rule: str, fstype: str, options: dict[str, str], *, forbid: bool = False) -> str | None:
    """What is wrong with `options` under `rule` (None: nothing, or the rule does not apply)."""
    rtype, name, op, value = parse_option_rule(rule)
    if rtype and not fstype.startswith(rtype):
        return None
    if forbid:
        if name in options and (not op or options[name] == value):
            return f"has option {name}{'=' + options[name] if options[name] else ''}, which the profile forbids"
        return None
    if name not in options:
        return f"lacks option {name}" + (f" (expected {name}{op}{value})" if op else "")
    if op == "=" and options[name] != value:
        return f"has {name}={options[name]}, expected {name}={value}"
    if op in (">=", "<="):
        try:
            have = int(options[name])
        except ValueError:
            return f"has {name}={options[name]}, not a number (expected {name}{op}{value})"
        want = Size.parse(value)
        if (op == ">=" and have < want) or (op == "<=" and have > want):
            return f"has {name}={have} ({human_size(have)}), expected {name}{op}{value}"
    return None


def expected_types(types: tuple[str, ...], path: str) -> list[str]:
    """Types allowed at `path`: entries `PATH=t1|t2` for that path, else the plain entries."""
    specific = [t.split("=", 1)[1] for t in types if "=" in t and t.split("=", 1)[0].rstrip("/") == path.rstrip("/")]
    chosen = specific or [t for t in types if "=" not in t]
    return [part for t in chosen for part in t.split("|") if part]


@check(needs=["file /proc/mounts", "command stat"], timeout=30)
def mounts(
    host: Host,
    *,
    paths: tuple[str, ...],
    rw: bool = True,
    types: tuple[str, ...] = (),
    require_options: tuple[str, ...] = (),
    forbid_options: tuple[str, ...] = (),
    options_status: str = "fail",
    lustre_client: bool = False,
    answer_within: float = 5.0,
) -> Result:
    """Every required path is mounted, of the expected type, with the options training needs, and answers.

    Why: a job whose dataset or checkpoint filesystem is missing fails late or writes
    checkpoints into the root disk; an NFS mount with small `rsize`/`wsize` (64 KiB instead
    of 1 MiB) reads shards at a fraction of the server's speed; `soft` mounts turn a server
    hiccup into corrupt reads and `noac` makes every open a round trip; a hung NFS or
    Lustre server makes every process that touches the mount block in uninterruptible sleep.

    How: looks each path up in /proc/mounts. `types` entries are either plain types
    (`lustre`, `nfs4`) allowed for every path or `PATH=t1|t2` for one path.
    `require_options`/`forbid_options` are rules `[TYPE:]NAME[>=|<=|=VALUE]`
    (`nfs:rsize>=1MiB`, `nfs:hard`, `nfs:noac`): the TYPE prefix limits a rule to mounts
    whose type starts with it. A required option that is wrong gives `options_status`
    (fail, or warn). With `lustre_client` (or any path mounted as lustre), the Lustre
    client's version file must be there. Finally `stat -f` runs on each path with a hard
    limit of `answer_within` seconds: a mount that does not answer fails, and the check
    itself never hangs (the command is killed, over SSH too).

    Fix: mount what is missing (/etc/fstab, the automounter); set the options in fstab
    or the automounter map (`rsize=1048576,wsize=1048576,hard`) and remount; for a mount
    that does not answer, check the file server and the network, then `umount -f -l PATH`.
    """
    if options_status not in ("fail", "warn"):
        raise ValueError(f"options_status must be fail or warn, got {options_status!r}")
    rules = [(r, False) for r in require_options] + [(r, True) for r in forbid_options]
    for rule, _ in rules:
        parse_option_rule(rule)
    table = mount_table(host)
    problems: list[str] = []
    option_problems: list[str] = []
    evidence: list[str] = []
    lustre_seen = False
    for path in paths:
        entry = table.get(path.rstrip("/") or "/")
        if entry is None:
            problems.append(f"{path} is not mounted")
            continue
        fstype, opts = str(entry["type"]), [str(o) for o in entry["options"]]  # type: ignore[attr-defined]
        evidence.append(f"{entry['source']} on {path} type {fstype} ({','.join(opts)})")
        lustre_seen |= fstype == "lustre"
        allowed = expected_types(types, path)
        if allowed and fstype not in allowed:
            problems.append(f"{path} is {fstype}, expected {' or '.join(allowed)}")
        if rw and "rw" not in opts:
            problems.append(f"{path} is mounted read-only, expected read-write")
        parsed = parse_options(opts)
        for rule, forbid in rules:
            wrong = judge_option(rule, fstype, parsed, forbid=forbid)
            if wrong:
                (problems if forbid else option_problems).append(f"{path} ({fstype}) {wrong}")
        answer = host.run("stat", "-f", "-c", "%T", path, timeout=answer_within)
        if answer.timed_out:
            problems.append(f"{path} did not answer stat within {answer_within:g} s")
        elif answer.exit_code != 0:
            problems.append(f"{path}: stat failed: {answer.stderr.strip() or 'exit ' + str(answer.exit_code)}")
    if lustre_client or lustre_seen:
        version = host.read_optional("/sys/fs/lustre/version") or host.read_optional("/proc/fs/lustre/version")
        if version is None:
            problems.append("no Lustre client: neither /sys/fs/lustre/version nor /proc/fs/lustre/version exists")
        else:
            evidence.append(f"Lustre client {version.strip().split()[-1] if version.strip() else '(empty version)'}")
    data = {"paths": list(paths), "problems": problems + option_problems}
    remedy = (
        "Mount what is missing (/etc/fstab, the automounter); set required options in fstab or the automounter "
        "map (e.g. rsize=1048576,wsize=1048576,hard) and remount; for a mount that does not answer, check the "
        "file server and network, then `umount -f -l PATH` and remount."
    )
    if problems or (option_problems and options_status == "fail"):
        return fail("; ".join(problems + option_problems), remedy=remedy, data=data, evidence=evidence)
    if option_problems:
        return warn("; ".join(option_problems), remedy=remedy, data=data, evidence=evidence)
    return ok(
        f"{len(paths)} mounts present"
        + (", read-write" if rw else "")
        + (f", {len(rules)} option rules met" if rules else "")
        + " and answering",
        data=data,
        evidence=evidence,
    )
