"""Storage readiness: shared filesystem mounts, the read pattern of tokenized shards, checkpoint writes.

Reads: /proc/mounts (the `mount_table` fact of clustercheck.facts.mounts: one parser), the Lustre
client's version file. Runs: `stat -f` on each required path (bounded: a hung NFS or
Lustre server blocks it in D state, and it is killed), and for the two measuring checks
one `python3 -c SCRIPT ARGS` on the node. The script writes only inside a private folder
it creates (`mkdtemp`, so the name is unique), refuses to fill the filesystem beyond a
margin, stops at its own deadline (well before the command's timeout) and removes the
folder on success, failure, timeout and SIGTERM/SIGINT/SIGHUP. It prints one JSON
object; record/replay stores that like any other command output.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from clustercheck import Host, Result, Size, check, fail, ok, warn
from clustercheck.errors import HostError
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.mounts import mount_table
from clustercheck.registry import human_size

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


@check(needs=["file /proc/mounts", "command stat"], timeout=30, action="FIX_CONFIG")
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

    Action: FIX_CONFIG (a path not mounted, of the wrong type or with the wrong options);
    INVESTIGATE when a mount does not answer (the file server, the network or this node's client:
    reboot only once the server is known good).
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
        hung = any(" did not answer stat within " in p for p in problems)
        return fail(
            "; ".join(problems + option_problems),
            remedy=remedy,
            data=data,
            evidence=evidence,
            action="INVESTIGATE" if hung else "FIX_CONFIG",
        )
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


# -- measuring on the node ----------------------------------------------------------------

#: The script `storage.read_pattern` and `storage.checkpoint_write` run as `python3 -c SCRIPT
#: ARGS` (one command, so it works over SSH and records like any command): the module
#: clustercheck/facts/scripts/storage_probe.py, as text. Standard library only; Python 3.6+
#: (what older node images carry). It prints one JSON object.
SCRIPT = script_text("storage_probe.py")


GIB, MIB, SMALL_FILE = Size(1 << 30), Size(1 << 20), Size(16 << 10)
#: Seconds the measuring command gets beyond its budget: interpreter start, removal of its folder.
CLEANUP_S = 20.0


def gpu_count(host: Host) -> tuple[int | None, str]:
    """The node's GPU count from the `nvml` probe, or None and why not."""
    try:
        record = host.probe("nvml")
    except Exception as exc:  # no NVML / nvidia-smi on this node: the caller says what it did instead
        return None, f"GPU count unknown ({exc})"
    gpus = record.get("gpus") if isinstance(record, dict) else None
    if isinstance(record, dict) and record.get("error") and not gpus:
        return None, f"GPU count unknown ({record['error']})"
    if not isinstance(gpus, list):
        return None, "GPU count unknown (the nvml record has no GPU list)"
    return len(gpus), f"{len(gpus)} GPUs (nvml probe)" if gpus else "no GPUs (the nvml probe found none)"


def measure(host: Host, args: dict[str, Any], python: str) -> dict[str, Any]:
    """Run SCRIPT on the node with `args`; its JSON, or HostError saying why there is none."""
    # the script stops itself at budget_s (and its alarm at budget_s + 5); the margin covers
    # interpreter start and the removal of its folder. A command killed at the check's deadline
    # (SIGKILL) could not remove its folder: refuse a budget the check's time cannot hold.
    # host.deadline is the earliest of the check's timeout, --host-timeout and the run's --timeout.
    left = host.deadline - time.monotonic() if host.deadline is not None else None
    if left is not None and args["budget_s"] + CLEANUP_S > left:
        raise HostError(
            host.name,
            f"not measured: budget {args['budget_s']:g} s + {CLEANUP_S:g} s to clean up does not fit in the "
            f"{max(0.0, left):.0f} s left to this check (its timeout, --host-timeout or the run's --timeout): "
            "lower `budget` or raise the check's `timeout` (and the run's --timeout)",
        )
    argv = (python, "-c", SCRIPT, json.dumps(args, sort_keys=True))
    # the evidence says what the script was instead of quoting all of it
    named = shown_with(argv, SCRIPT, f"<clustercheck storage script, {len(SCRIPT)} characters>")
    result = host.run(*argv, timeout=args["budget_s"] + CLEANUP_S, shown_as=named)
    line = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        if result.timed_out:
            raise HostError(host.name, f"the measurement did not finish within {result.duration_s:.0f} s")
        detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.exit_code}"
        hint = f" ({python} not found on the node)" if result.exit_code == 127 else ""
        raise HostError(host.name, f"the measurement printed no result{hint}: {detail}")
    if record.get("refused"):
        raise HostError(host.name, f"refused to measure: {record['refused']}")
    if record.get("interrupted"):
        raise HostError(host.name, f"the measurement was interrupted ({record['interrupted']})")
    if record.get("error"):
        raise HostError(host.name, f"the measurement failed: {record['error']}")
    return record


def _readers(host: Host, readers: int) -> tuple[int, int | None, str]:
    gpus, said = gpu_count(host)
    if readers > 0:
        return readers, gpus, f"{readers} readers (profile); {said}"
    if gpus:
        return gpus, gpus, f"{gpus} readers, one per GPU; {said}"
    return 4, gpus, f"4 readers (default: {said})"


def _workers_said(workers: object, readers: int) -> str:
    """How the random reads ran (nothing for a record from before worker processes)."""
    if not isinstance(workers, int) or workers < 1:
        return ""
    if workers == 1:
        return "; random reads in one process (its threads)"
    if workers >= readers:
        return f"; random reads in {workers} processes (one per reader)"
    return f"; random reads in {workers} processes (up to {-(-readers // workers)} readers in one)"


def _cleanup_evidence(record: dict[str, Any]) -> str:
    swept = record.get("swept") or []
    earlier = f"; removed {len(swept)} left by a killed earlier run ({', '.join(swept[:3])})" if swept else ""
    if record.get("removed"):
        return f"scratch folder {record.get('dir')} created and removed{earlier}"
    return f"scratch folder {record.get('dir')} could NOT be removed: remove it by hand{earlier}"


def threshold(absolute: float, per_gpu: float, gpus: int | None, unit: str) -> tuple[float, str]:
    """The larger of `absolute` and `per_gpu` x `gpus`, and how it was reached (for the summary)."""
    if per_gpu and gpus and per_gpu * gpus > absolute:
        return per_gpu * gpus, f"{per_gpu:g} {unit} per GPU x {gpus} GPUs"
    return absolute, f"{absolute:g} {unit}"


@check(needs=["command python3"], timeout=90, action="INVESTIGATE")
def read_pattern(
    host: Host,
    *,
    path: str,
    size: Size = GIB,
    readers: int = 0,
    workers: int = 0,
    budget: float = 30.0,
    seq_block: Size = MIB,
    meta_files: int = 2000,
    meta_size: Size = SMALL_FILE,
    free_margin: float = 0.10,
    min_seq_mb_s: float = 0.0,
    per_gpu_seq_mb_s: float = 0.0,
    min_iops_4k: float = 0.0,
    per_gpu_iops_4k: float = 0.0,
    min_iops_128k: float = 0.0,
    max_p99_ms: float = 0.0,
    min_files_s: float = 0.0,
    per_gpu_files_s: float = 0.0,
    o_direct: bool = True,
    dataset: bool = False,
    python: str = "python3",
) -> Result:
    """The filesystem at `path` feeds this node's GPUs: sequential, small random and small-file reads.

    Why: LLM pretraining reads tokenized shards at every epoch start, all nodes at once:
    large sequential reads (WebDataset tars, Parquet), small random reads inside large
    memory-mapped files (Megatron `.bin/.idx`), and many opens of small files. A shared
    filesystem that cannot keep up leaves GPUs idle, and no other check sees it.

    How: one `python3 -c SCRIPT` on the node creates a private folder (unique name) under
    `path`, writes `size` of data in one file per reader (fsync'd), then measures with
    `readers` parallel readers (default: one per GPU from the nvml probe, else 4):
    (1) sequential reads in `seq_block` blocks, MB/s; (2) random 4 KiB and 128 KiB reads
    inside the files, IOPS and p50/p99 latency, the readers spread over `workers` processes
    (default 0: one process per reader, as fio's jobs, up to 64; 1: threads of one process,
    whose interpreter lock caps 4 KiB IOPS well below a fast NVMe drive's);
    (3) open+fstat+read+close of `meta_files` small files, files/s. With `dataset: true`,
    `path` is an existing dataset, read read-only (nothing is written or created): its files
    of 4 MiB or more (up to 64) are read sequentially (up to `size` in all) and at random, and up to `meta_files` of its
    files of 1 MiB or less are opened and read. The page cache is bypassed with O_DIRECT
    where the filesystem supports it (and `o_direct` is true), else dropped with
    posix_fadvise(DONTNEED) before each phase; the evidence says which (tmpfs lives in
    memory: its figures are memory speed either way). The small files' dentries and
    inodes stay cached after they are written, so files/s is an upper bound. In each read
    phase the readers open their files (and draw their random offsets) first and start
    together, and a figure is over the span from the first reader's start to the last one's
    end; a random phase ends for all readers once one has done 20000 reads (as fio's jobs run
    for the same time). p50/p99 are latencies of single reads: of every read where reads
    take 20 us or more, else of a sample of whole chunks (about 1 read in 8, weighed by the
    reads it stands for), so that clock readings do not cap IOPS on tmpfs. Everything runs
    within `budget` seconds (phases stop at their share of it) and the folder is removed on success,
    failure, timeout and SIGTERM. It refuses to run when the writes would leave less than
    `free_margin` of the filesystem free. Thresholds: `min_seq_mb_s` or
    `per_gpu_seq_mb_s` x GPU count (the larger of the two), likewise `min_iops_4k` /
    `per_gpu_iops_4k` and `min_files_s` / `per_gpu_files_s`; `min_iops_128k`, `max_p99_ms`
    (4 KiB reads). A figure under its threshold fails, naming the pattern and both numbers;
    a per-GPU threshold on a node whose GPUs cannot be counted is an error, not a pass.

    Fix: check the client's mount options (`storage.mounts`: rsize/wsize, Lustre stripe
    settings with `lfs getstripe`), the node's storage network links and the file servers'
    load; stage hot datasets to local NVMe; pack small files into shards (WebDataset tars).

    Action: INVESTIGATE (a performance measurement: the result's data has `performance: true`, so
    `clustercheck sweep` measures again before it drains; slow reads are more often the shared
    filesystem's than the node's).
    """
    if workers < 0:
        raise ValueError(f"workers must be 0 (one process per reader, up to 64) or more, got {workers}")
    n, gpus, readers_said = _readers(host, readers)
    args = {
        "mode": "read",
        "path": path,
        "size": int(size),
        "readers": n,
        "seq_block": int(seq_block),
        "budget_s": budget,
        "margin": free_margin,
        "meta_files": meta_files,
        "meta_size": int(meta_size),
        "max_ops": 20000,
        "o_direct": o_direct,
        "dataset": dataset,
        "workers": workers,
    }
    per_gpu = {"per_gpu_seq_mb_s": per_gpu_seq_mb_s, "per_gpu_iops_4k": per_gpu_iops_4k}
    per_gpu["per_gpu_files_s"] = per_gpu_files_s
    for name, value in per_gpu.items():
        if value and not gpus:
            raise HostError(host.name, f"{name} needs the GPU count: {readers_said}")
    r = measure(host, args, python)
    seq, r4, r128, meta = r["seq"], r["rand_4k"], r["rand_128k"], r["meta"]
    cache = r.get("cache", "?") + (f" (O_DIRECT: {r['o_direct_error']})" if r.get("o_direct_error") else "")
    evidence = [
        readers_said + _workers_said(r.get("workers"), n),
        f"page cache: {cache}",
        (
            f"read-only on an existing dataset: {r['dataset']['large_files']} files of 4 MiB or more, "
            f"{r['dataset']['small_files']} of 1 MiB or less; nothing written"
            + (
                f"; {r['dataset']['denied_dirs']} folders this user may not list were not read "
                f"({', '.join(r['dataset'].get('denied', []))})"
                if r["dataset"].get("denied_dirs")
                else ""
            )
            if r.get("read_only")
            else f"wrote {human_size(r['written_bytes'])} in {r['write_seconds']:g} s"
        ),
        f"sequential: {human_size(seq['bytes'])} read in {seq['seconds']:g} s = {seq['mb_s']:g} MB/s",
        f"random 4 KiB: {r4['ops']} reads in {r4['seconds']:g} s = {r4['iops']:g} IOPS, "
        f"p50 {r4['p50_ms']} ms, p99 {r4['p99_ms']} ms",
        f"random 128 KiB: {r128['ops']} reads in {r128['seconds']:g} s = {r128['iops']:g} IOPS "
        f"({r128['mb_s']:g} MB/s), p50 {r128['p50_ms']} ms, p99 {r128['p99_ms']} ms",
        f"small files: {meta['files']} of {meta['created']} opened+read in {meta['seconds']:g} s = "
        f"{meta['files_s']:g} files/s",
    ]
    if not r.get("read_only"):
        evidence.append(_cleanup_evidence(r))
    no_small = meta["created"] == 0  # a dataset without small files: that pattern was not measured
    seq_need, seq_why = threshold(min_seq_mb_s, per_gpu_seq_mb_s, gpus, "MB/s")
    iops_need, iops_why = threshold(min_iops_4k, per_gpu_iops_4k, gpus, "IOPS")
    files_need, files_why = threshold(min_files_s, per_gpu_files_s, gpus, "files/s")
    problems = []
    if seq_need and seq["mb_s"] < seq_need:
        problems.append(f"sequential reads {seq['mb_s']:g} MB/s, expected at least {seq_need:g} MB/s ({seq_why})")
    if iops_need and r4["iops"] < iops_need:
        problems.append(f"random 4 KiB reads {r4['iops']:g} IOPS, expected at least {iops_need:g} IOPS ({iops_why})")
    if min_iops_128k and r128["iops"] < min_iops_128k:
        problems.append(f"random 128 KiB reads {r128['iops']:g} IOPS, expected at least {min_iops_128k:g}")
    if max_p99_ms and (r4["p99_ms"] or 0) > max_p99_ms:
        problems.append(f"random 4 KiB read p99 latency {r4['p99_ms']} ms, expected at most {max_p99_ms:g} ms")
    if files_need and not no_small and meta["files_s"] < files_need:
        problems.append(
            f"small files {meta['files_s']:g} files/s, expected at least {files_need:g} files/s ({files_why})"
        )
    data = {
        "path": path,
        "readers": n,
        "gpus": gpus,
        "measured": {k: r[k] for k in ("seq", "rand_4k", "rand_128k", "meta")},
        "performance": True,  # a measurement: `clustercheck sweep` measures again before it drains
    }
    figures = (
        f"{seq['mb_s']:g} MB/s sequential, {r4['iops']:g} IOPS 4 KiB (p99 {r4['p99_ms']} ms), "
        f"{r128['iops']:g} IOPS 128 KiB, "
        + ("no small files to open" if no_small else f"{meta['files_s']:g} files/s")
        + f" with {n} readers on {path}"
        + (" (existing dataset, read-only)" if r.get("read_only") else "")
    )
    if problems:
        return fail(
            "; ".join(problems),
            remedy="Check the mount options (rsize/wsize, Lustre striping), the storage network and the file "
            "servers' load; stage hot data to local NVMe; pack small files into shards.",
            data=data,
            evidence=[figures, *evidence],
        )
    thresholds = any((seq_need, iops_need, min_iops_128k, max_p99_ms, files_need))
    return ok(figures + ("" if thresholds else " (no thresholds in the profile)"), data=data, evidence=evidence)


def parse_seconds(value: str) -> float:
    """'300s' / '5m' / '1h' / '90' -> seconds; ValueError naming the value otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h)?\s*", value)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"expected a duration like 300s, 5m or 1h, got {value!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2) or "s"]


@check(needs=["command python3"], timeout=90, action="INVESTIGATE")
def checkpoint_write(
    host: Host,
    *,
    path: str,
    checkpoint_size: Size,
    checkpoint_budget: str = "300s",
    nodes_in_job: int = 1,
    size: Size = GIB,
    writers: int = 0,
    budget: float = 30.0,
    free_margin: float = 0.10,
    python: str = "python3",
) -> Result:
    """This node writes checkpoints fast enough for its share of a checkpoint within the budget.

    Why: a training job stops while it writes a checkpoint (or cannot afford to write one
    as often as it should); a filesystem that cannot take the job's checkpoint in its time
    budget costs GPU hours at every save, and a node that writes slowly holds back the job.

    How: one `python3 -c SCRIPT` on the node writes `size` of data with `writers` parallel
    writers (default: one per GPU, else 4), each to its own file in a private folder it
    creates under `path` and removes afterwards, fsync included in the time, and reports
    GB/s. The job must write `checkpoint_size` in `checkpoint_budget` across
    `nodes_in_job` nodes: e.g. 2 TB in 300 s is 6.67 GB/s, 0.42 GB/s per node of 16. A node
    below its share fails with that arithmetic. Refuses to run when the writes would leave
    less than `free_margin` of the filesystem free; bounded by `budget` seconds.

    Fix: check the checkpoint filesystem's mount options and the node's storage network;
    write checkpoints asynchronously or sharded across all ranks; stage to local NVMe and
    drain to the shared filesystem in the background.

    Action: INVESTIGATE (a performance measurement: data `performance: true`, measured again by
    `clustercheck sweep` before a drain).
    """
    budget_s = parse_seconds(checkpoint_budget)
    if nodes_in_job < 1:
        raise ValueError(f"nodes_in_job must be at least 1, got {nodes_in_job}")
    n, _, said = _readers(host, writers)
    args = {
        "mode": "write",
        "path": path,
        "size": int(size),
        "readers": n,
        "budget_s": budget,
        "margin": free_margin,
        "meta_files": 0,
        "meta_size": 0,
    }
    r = measure(host, args, python)
    w = r["write"]
    job_gb_s = checkpoint_size / budget_s / 1e9
    need = job_gb_s / nodes_in_job
    projected = checkpoint_size / nodes_in_job / (w["gb_s"] * 1e9) if w["gb_s"] else float("inf")
    arithmetic = (
        f"{human_size(checkpoint_size)} ({checkpoint_size / 1e12:.3g} TB) in {budget_s:g} s needs "
        f"{job_gb_s:.3g} GB/s across the job, {need:.3g} GB/s per node of {nodes_in_job}"
    )
    evidence = [
        said.replace("readers", "writers"),
        f"wrote {human_size(w['bytes'])} with fsync in {w['seconds']:g} s = {w['gb_s']:g} GB/s",
        arithmetic,
        _cleanup_evidence(r),
    ]
    data = {
        "gb_s": w["gb_s"],
        "needed_gb_s": round(need, 4),
        "projected_s": round(projected, 1),
        "writers": n,
        "performance": True,  # a measurement: `clustercheck sweep` measures again before it drains
    }
    if w["gb_s"] < need:
        return fail(
            f"writes {w['gb_s']:g} GB/s, needs {need:.3g} GB/s: {arithmetic}; this node's share "
            f"({human_size(checkpoint_size / nodes_in_job)}) would take {projected:.0f} s",
            remedy="Check the checkpoint filesystem's mount options and the storage network; write checkpoints "
            "sharded and asynchronously, or stage them to local NVMe and drain in the background.",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"writes {w['gb_s']:g} GB/s, needs {need:.3g} GB/s ({arithmetic}); its share takes {projected:.0f} s",
        data=data,
        evidence=evidence,
    )
