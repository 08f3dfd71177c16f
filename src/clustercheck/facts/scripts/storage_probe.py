"""The measuring script of storage.read_pattern and storage.checkpoint_write (checks/storage.py).

It runs on the node as `python3 -c TEXT ARGS` (one command, so it works over SSH and records like
any command): TEXT is this file as it is, ARGS one JSON object (mode, path, size, readers, ...).
Standard library only, and Python 3.6+ (what older node images carry): annotations are strings
(a 3.6 interpreter evaluates those of a function when it defines it) and no syntax newer than 3.6
(tests/test_scripts.py checks both). It prints one JSON object.

It writes only inside a private folder it creates (`mkdtemp`), refuses to fill the filesystem
beyond a margin, stops at its own deadline and removes the folder on success, failure, timeout
and SIGTERM/SIGINT/SIGHUP; data files are unlinked as soon as they are created, so even a SIGKILL
leaves no data behind, and a later run sweeps the folders of killed runs.

The text is part of the argv recorded in fixtures (fixtures/storage-*): changing it means
updating the recorded argv (tests/test_scripts.py holds its hash).
"""

import bisect
import fcntl
import json
import marshal
import mmap
import os
import random
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

A: "dict[str, Any]" = {}  # the arguments
OUT: "dict[str, Any]" = {}  # what is printed at the end
T0 = 0.0
BUDGET = 0.0
STOP = threading.Event()
MB = 1 << 20
KEEP: "list[int]" = []  # fds of the unlinked data files: the kernel frees their blocks when this process dies
DENIED: "list[str]" = []  # folders of the dataset this user may not list: their files were not read
PREFIX = ".clustercheck-storage-"


def _sig(n: int, f: object) -> None:
    raise SystemExit(128 + n)


def left(frac: float) -> float:
    return T0 + BUDGET * frac


def drop(path: str, sync: bool = True) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if sync:
            os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def parallel(n: int, fn: "Callable[[int], None]", started: "Callable[[], None] | None" = None) -> float:
    errs: list[str] = []

    def run(i: int) -> None:
        try:
            fn(i)
        except BaseException as e:
            errs.append(f"{type(e).__name__}: {e}")
            STOP.set()

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    t = time.monotonic()
    for th in ts:
        th.start()
    if started is not None:
        started()
    for th in ts:
        th.join()
    if errs:
        raise RuntimeError(errs[0])
    return time.monotonic() - t


class Gate:
    """Readers start reading together, once all are ready: the time each spends opening its files and
    drawing its offsets is not part of what is measured (nor is fio's job set-up). Readers may be
    threads of this process or of its worker processes: pipes made before the fork. A reader says
    it is ready (a byte down `ready`) and waits until `go` reads as closed; `release()` (this
    process's main thread) closes it once every reader is ready, or at the phase's deadline."""

    def __init__(self, n: int, until: float) -> None:
        self.n, self.until = n, until
        self.ready_r, self.ready_w = os.pipe()
        self.go_r, self.go_w = os.pipe()

    def ready(self) -> None:
        os.write(self.ready_w, b"r")

    def wait(self) -> None:
        select.select([self.go_r], [], [], max(0.0, self.until - time.monotonic()))

    def in_worker(self) -> None:  # a forked worker: only this process's main thread may open the gate
        os.close(self.go_w)
        os.close(self.ready_r)

    def release(self) -> None:
        left = self.n
        try:
            while left > 0:
                t = self.until - time.monotonic()
                if t <= 0 or not select.select([self.ready_r], [], [], t)[0]:
                    break
                left -= len(os.read(self.ready_r, left))
        finally:
            os.close(self.go_w)

    def close(self) -> None:
        for fd in (self.ready_r, self.ready_w, self.go_r):
            os.close(fd)


def _worker(
    j: int,
    n: int,
    w: int,
    fn: "Callable[[int], None]",
    until: float,
    per: "dict[str, list[Any]]",
    me: int,
    prctl: "Callable[..., int] | None",
    wfd: int,
) -> None:
    """Worker process j: readers j, j+w, ... as its threads; sends their results down `wfd`."""
    signal.alarm(max(1, int(until - time.monotonic()) + 5))
    if prctl is not None:
        prctl(1, signal.SIGKILL)
    if os.getppid() != me:
        os._exit(1)
    ids = list(range(j, n, w))
    res: dict[str, Any]
    try:
        parallel(len(ids), lambda k: fn(ids[k]))
        res = {key: [values[i] for i in ids] for key, values in per.items()}
    except BaseException as e:
        res = {"err": f"{type(e).__name__}: {e}"}
    data = memoryview(marshal.dumps(res))
    while data:
        data = data[os.write(wfd, data) :]


def forked(n: int, w: int, fn: "Callable[[int], None]", until: float, per: "dict[str, list[Any]]", gate: Gate) -> None:
    # readers i, i+w, ... run as threads of worker process j = i % w: one interpreter lock per
    # process, like fio, whose jobs are processes. A worker never returns into this script
    # (os._exit: no cleanup, no print), dies with this process (PR_SET_PDEATHSIG) and stops at
    # `until` like a thread. Each reader's results (per[key][i]) come back down a pipe.
    prctl: Callable[..., int] | None
    try:
        import ctypes

        prctl = ctypes.CDLL(None).prctl
    except Exception:
        prctl = None
    me = os.getpid()
    kids: list[tuple[int, int, int]] = []
    errs: list[str] = []
    try:
        for j in range(min(w, n)):
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(rfd)
                    gate.in_worker()
                    _worker(j, n, w, fn, until, per, me, prctl, wfd)
                finally:
                    os._exit(0)
            os.close(wfd)
            kids.append((pid, rfd, j))
        gate.release()
        for _pid, rfd, j in kids:
            chunks = []
            while True:
                b = os.read(rfd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
            try:
                res = marshal.loads(b"".join(chunks))
            except (EOFError, ValueError, TypeError):
                res = {"err": f"worker process {j} ended without a result"}
            if "err" in res:
                errs.append(res["err"])
                continue
            for key, values in per.items():
                for k, i in enumerate(range(j, n, w)):
                    values[i] = res[key][k]
    finally:
        for pid, rfd, _j in kids:
            os.close(rfd)
            try:
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except OSError:
                pass
    if errs:
        raise RuntimeError(errs[0])


def write_files(d: str, n: int, size: int, until: float, sync: bool) -> "tuple[list[int], float, list[str]]":
    block = 4 * MB
    buf = os.urandom(block)
    done = [0] * n
    per = max(block, size // n // block * block)
    fds: list[int] = []
    for i in range(n):  # unlinked at once: even a SIGKILL leaves no data behind
        p = os.path.join(d, f"f{i:03d}")
        fds.append(os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        KEEP.append(fds[i])
        os.unlink(p)

    def w(i: int) -> None:
        fd = fds[i]
        while done[i] < per and time.monotonic() < until and not STOP.is_set():
            done[i] += os.write(fd, buf[: min(block, per - done[i])])
        if sync:
            os.fsync(fd)

    secs = parallel(n, w)
    return done, secs, [f"/proc/self/fd/{fd}" for fd in fds]


def opener(path: str, direct: bool) -> int:
    return os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))


#: Filesystems whose files live in memory: no device alignment for O_DIRECT, no page cache to bypass.
MEMORY_FS = ("tmpfs", "ramfs")


def fs_type(path: str) -> str:
    """The type of the filesystem that holds the file at `path` (as /proc/self/mountinfo names the
    mount with its device number), "" where it cannot be told."""
    try:
        st = os.stat(path)
        dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] == dev and " - " in line:
                    return line.split(" - ", 1)[1].split()[0]
    except (OSError, IndexError):
        pass
    return ""


def pct(xs: "list[float]", p: float) -> "float | None":
    return round(xs[min(len(xs) - 1, int(len(xs) * p))] * 1000, 3) if xs else None


def percentiles(groups: "list[tuple[float, list[float]]]", ps: "list[float]") -> "list[float | None]":
    """pct(p) for each p of ps over latency samples in groups (weight, samples), each sample of a
    group standing for `weight` reads (see rand_reads): the least sample at which the reads that it
    and the samples up to it stand for are more than a share p of all the reads the samples stand
    for. Where every weight is the same, that is pct(sorted(samples), p). Sorting floats and a
    binary search over them: (latency, weight) pairs took 2.7 s to sort for 64 readers."""
    groups = [(wt, sorted(xs)) for wt, xs in groups if xs]
    every = sorted(x for _, xs in groups for x in xs)
    if not every:
        return [None for _ in ps]
    total = sum(wt * len(xs) for wt, xs in groups)
    out: list[float | None] = []
    for p in ps:  # a weight is 1 or more: a margin far under one keeps sums' rounding from deciding ties
        want = total * p + total * 1e-9
        lo, hi = 0, len(every) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(wt * bisect.bisect_right(xs, every[mid]) for wt, xs in groups) > want:
                hi = mid
            else:
                lo = mid + 1
        out.append(round(every[lo] * 1000, 3))
    return out


#: Reads a random reader draws before it starts (past that many it draws more as it reads).
DRAWN = 1 << 15
#: Worker processes for `workers: 0`: one per reader, as fio's jobs, even beyond the CPUs. Two
#: readers that share a process share its interpreter lock, and each read's release of it wakes
#: the other: on 2 CPUs, 4 readers on tmpfs took 2.24/2.25/2.14/1.57 us of CPU per 4 KiB read in
#: 2 processes against 1.88/2.10/2.15/1.54 in 4 (four runs side by side; IOPS 0.80-0.91 of fio's
#: against 0.81-1.01), where the kernel shares the CPUs out in time slices. Never worse, at times better.
MAX_WORKERS = 64


def reads(
    d: str,
    files: "list[str]",
    sizes: "list[int]",
    n: int,
    bs: int,
    until: float,
    direct: bool,
    rnd: bool,
    w: int = 1,
    single: bool = False,
) -> "dict[str, Any]":
    # per reader: bytes, reads, latencies (random reads) and its span (first and last moment of reading)
    per: dict[str, list[Any]] = {"got": [0] * n, "ops": [0] * n, "span": [None] * n}
    for key in ("lat", "sampled", "stands"):  # see rand_reads
        per[key] = [[] for _ in range(n)]
    per["cpu"] = [None] * n  # random readers' CPU time (user + system) over their reading
    gate = Gate(n, until)
    stop = mmap.mmap(-1, 1)  # shared with the worker processes: a random reader that ends stops them all

    def r(i: int) -> None:
        fds: list[int] = []
        buf: mmap.mmap | None = None
        try:
            try:
                buf = mmap.mmap(-1, bs)  # page-aligned, as O_DIRECT needs; filled in place, no object per read
                for f in files:
                    fds.append(opener(os.path.join(d, f), direct))
                if rnd:
                    for fd in fds:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                    rng = random.Random(i)
                    chunks = draw(rng, fds, sizes, bs)
            finally:
                gate.ready()
            gate.wait()
            if rnd:

                def more() -> "list[tuple[list[int], list[int]]]":
                    return draw(rng, fds, sizes, bs)

                lat, sampled = per["lat"][i], per["sampled"][i]
                cpu = getattr(time, "thread_time", None)  # Python 3.7+
                c0 = cpu() if cpu else 0.0
                per["span"][i], per["got"][i], per["ops"][i], per["stands"][i] = rand_reads(
                    chunks, more, buf, until, stop, lat, sampled, single
                )
                per["cpu"][i] = cpu() - c0 if cpu else None
            else:
                t0 = time.monotonic()
                got = 0
                cap = A["size"] // n  # files i, i+n, ... (a file per reader when they are as many)
                for k in range(i, len(fds), n) if i < len(fds) else [i % len(fds)]:
                    off = 0
                    end = min(sizes[k], cap - got)
                    while off < end and time.monotonic() < until and not STOP.is_set():
                        m = os.preadv(fds[k], [buf], off)
                        if m <= 0:
                            break
                        off += m
                        got += m
                per["span"][i], per["got"][i] = (t0, time.monotonic()), got
        finally:
            if rnd:
                stop[0] = 1
            for fd in fds:
                os.close(fd)
            if buf is not None:
                buf.close()

    # (on an exception, readers may still run: the gate's pipes and `stop` are left to the exit)
    if w > 1:
        forked(n, w, r, until, per, gate)
    else:
        parallel(n, r, gate.release)
    gate.close()
    spans = [s for s in per["span"] if s]
    if not spans:
        raise RuntimeError("no reader started")
    secs = max(1e-6, max(b for _, b in spans) - min(a for a, _ in spans))
    got = sum(per["got"])
    res: dict[str, Any] = {"bytes": got, "seconds": round(secs, 4), "mb_s": round(got / secs / 1e6, 1)}
    if rnd:
        groups = []  # each reader's two lists of samples, a sample standing for its share of the reads they stand for
        for i in range(n):
            stands = per["stands"][i] or [0, 0]
            for xs, reads_of in ((per["lat"][i], stands[0]), (per["sampled"][i], stands[1])):
                if xs:
                    groups.append((reads_of / len(xs), xs))
        p50, p99 = percentiles(groups, [0.5, 0.99])
        ops = sum(per["ops"])
        res.update(ops=ops, iops=round(ops / secs, 1), p50_ms=p50, p99_ms=p99)
        if None not in per["cpu"]:
            res["cpu_s"] = round(sum(per["cpu"]), 4)
    return res


def draw(rng: "random.Random", fds: "list[int]", sizes: "list[int]", bs: int) -> "list[tuple[list[int], list[int]]]":
    """A random reader's next reads, drawn before it starts: the fd and offset of a whole block of a
    file chosen at random, in chunks of 64 reads (fds, offsets; the reader looks at the clock and
    the stop flag after each). One random number per read: its integer part (times the file count)
    chooses the file, its fraction the block."""
    rand = rng.random
    blocks = [max(1, z // bs) for z in sizes]
    nf = len(fds)
    todo = min(A["max_ops"], DRAWN)
    chunks = []
    for s in range(0, todo, CHUNK):
        cf, co = [], []
        for _ in range(min(CHUNK, todo - s)):
            x = rand() * nf
            k = int(x)
            cf.append(fds[k])
            co.append(int((x - k) * blocks[k]) * bs)
        chunks.append((cf, co))
    return chunks


#: Reads in a chunk: the random loop looks at the clock, max_ops, `until` and the stop flags after each.
CHUNK = 64
#: Where reads are fast, one chunk in SAMPLE is timed read by read (see rand_reads).
SAMPLE = 8
#: A chunk whose reads took at least this long on average (seconds) is followed by one timed read by read.
SLOW = 20e-6


def rand_reads(
    chunks: "list[tuple[list[int], list[int]]]",
    more: "Callable[[], list[tuple[list[int], list[int]]]]",
    buf: "mmap.mmap",
    until: float,
    stop: "mmap.mmap",
    lat: "list[float]",
    sampled: "list[float]",
    single: bool = False,
) -> "tuple[tuple[float, float], int, int, list[int]]":
    """The timed loop of one random reader: ((start, end), bytes, reads, [reads that `lat` and
    `sampled` stand for]). It ends when it has done max_ops reads, at `until`, or when another
    reader ended (`stop`), checked after every chunk. Past the reads drawn beforehand (DRAWN), it
    draws fresh ones as it goes rather than reading the same offsets again (those could be in the
    page cache where O_DIRECT is not used).

    Where reads are fast (tmpfs, a page-cache hit) the loop's own cost per read is what caps IOPS,
    so most chunks are read by one `map(os.pread, ...)` call, with the clock read only after the
    chunk, and the latencies come from whole chunks timed read by read:
    - a read's latency is the time from the clock reading just before it to the one just after
      it: the pread call and a fraction of a microsecond of the loop (fio's clat is the time
      from submitting an I/O to its completion). A timed chunk's first read is not timed: it
      runs the timing loop's code after the map calls and took ~1 us longer on tmpfs;
    - the first chunk, and every chunk after one whose reads took SLOW or more on average (a
      disk, NVMe, a network filesystem: there the loop's cost is noise), is timed: its
      latencies go into `lat`, and stand for all the reads of those chunks;
    - after a faster chunk, a chunk is timed only if it is every SAMPLE-th of the reader's
      chunks: its latencies go into `sampled`, and stand for all the reads of the chunks
      read after fast ones (about SAMPLE reads each; `percentiles` weighs them so).
    So p50/p99 are those of every read where reads are slow, and of about 1 read in SAMPLE, in
    whole chunks spread over the phase, where they are fast (at least max_ops x readers /
    SAMPLE samples there: fast readers reach max_ops). On tmpfs (2 CPUs, 5 rounds side by side,
    1 or 4 readers) p50 read 0.002 ms either way, p99 0.007-0.009 ms against 0.004-0.006 with
    every chunk timed, whether all its samples were kept or 1 chunk in 8 (fio's 0.0025): a
    timed chunk's reads have a heavier tail among chunks read by map than among timed ones,
    not at its start (leaving its first 4 reads untimed did not lower it). Where reads take
    20 us or more, every chunk is timed.

    A read is os.preadv into `buf` (page-aligned, as O_DIRECT on a disk needs), or with `single`
    os.pread (a new buffer per read, of no particular alignment: for files read without O_DIRECT
    or kept in memory, MEMORY_FS): the kernel's one-buffer read, as fio's psync engine calls it,
    took 0.3 us less CPU per 4 KiB read on tmpfs (1.95 against 2.25 us, 6 rounds side by side)."""
    mono, pread, preadv, bufs, bs = time.monotonic, os.pread, os.preadv, [buf], len(buf)
    each, each_bs = repeat(bufs), repeat(bs)
    want = A["max_ops"]
    got = ops = k = 0
    stands = [0, 0]  # reads in the chunks whose samples are `lat`, `sampled`
    t = t0 = mono()
    slow = True
    while chunks:
        for fds, offs in chunks:
            k += 1
            start = t
            n = len(fds)
            stands[0 if slow else 1] += n
            if slow or k % SAMPLE == 0:
                add = lat.append if slow else sampled.append
                them = zip(fds, offs)  # noqa: B905 (no strict= before Python 3.10; equal lengths)
                fd, off = next(them)
                got += len(pread(fd, bs, off)) if single else preadv(fd, bufs, off)
                t = mono()
                if single:
                    for fd, off in them:
                        got += len(pread(fd, bs, off))
                        t1 = mono()
                        add(t1 - t)
                        t = t1
                else:
                    for fd, off in them:
                        got += preadv(fd, bufs, off)
                        t1 = mono()
                        add(t1 - t)
                        t = t1
            elif single:
                got += sum(map(len, map(pread, fds, each_bs, offs)))
                t = mono()
            else:
                got += sum(map(preadv, fds, each, offs))
                t = mono()
            ops += n
            slow = t - start >= SLOW * n
            if ops >= want or t >= until or stop[0] or STOP.is_set():
                return (t0, t), got, ops, stands
        chunks = more()
    return (t0, t), got, ops, stands


def scan(root: str, until: float) -> "tuple[list[tuple[str, int]], list[tuple[str, int]]]":
    big: list[tuple[str, int]] = []  # (path, size)
    small: list[tuple[str, int]] = []
    stack = [root]
    while stack and time.monotonic() < until and len(big) + len(small) < 100000:
        top = stack.pop()
        try:
            it = os.scandir(top)
        except PermissionError:
            DENIED.append(top)
            continue
        except OSError:
            continue
        for e in it:
            try:
                if e.name.startswith(PREFIX):
                    continue
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    sz = e.stat(follow_symlinks=False).st_size
                    if sz >= 4 * MB:
                        big.append((e.path, sz))
                    elif 0 < sz <= MB:
                        small.append((e.path, sz))
            except OSError:
                pass
        it.close()
    return big, small


def measure_read(folder: "str | None") -> None:
    n = A["readers"]
    names: list[tuple[str, int]] | None
    if folder is None:  # an existing dataset, read-only: nothing is written
        big, small = scan(A["path"], left(0.15))
        OUT["dataset"] = {"large_files": len(big), "small_files": len(small), "denied_dirs": len(DENIED)}
        if DENIED:
            OUT["dataset"]["denied"] = DENIED[:5]
        if not big and DENIED:
            raise RuntimeError(
                f"no file of 4 MiB or more under {A['path']} that this user may read "
                f"(permission denied: {', '.join(DENIED[:3])})"
            )
        if not big:
            raise RuntimeError(f"no file of 4 MiB or more under {A['path']} to read")
        big = big[: max(64, n)]
        files = [p for p, _ in big]
        sizes = [z for _, z in big]
        d = ""
        names = small[: A["meta_files"]]
        try:
            os.close(opener(files[0], True))
            direct = A["o_direct"]
        except OSError as e:
            direct = False
            OUT["o_direct_error"] = e.strerror
        if not A["o_direct"]:
            OUT["o_direct_error"] = "not used (o_direct: false in the profile)"
        fracs = (0.45, 0.6, 0.75)
    else:
        d = folder
        done, secs, files = write_files(d, n, A["size"], left(0.35), True)
        sizes = done
        names = None
        fracs = (0.55, 0.65, 0.75)
        OUT["written_bytes"] = sum(done)
        OUT["write_seconds"] = round(secs, 3)
    if names is None:
        try:
            if not A["o_direct"]:
                raise OSError(0, "not used (o_direct: false in the profile)")
            os.close(opener(os.path.join(d, files[0]), True))
            direct = True
        except OSError as e:
            direct = False
            OUT["o_direct_error"] = e.strerror
    OUT["cache"] = "O_DIRECT" if direct else "posix_fadvise(DONTNEED)"
    written = names is None

    def evict() -> None:
        if not direct:
            for f in files:
                drop(os.path.join(d, f), written)

    evict()
    OUT["seq"] = reads(d, files, sizes, n, A["seq_block"], left(fracs[0]), direct, False)
    w = int(A.get("workers", 1))  # processes for the random reads; 0: one per reader (up to MAX_WORKERS)
    if w <= 0:
        w = MAX_WORKERS
    OUT["workers"] = w = max(1, min(w, n))
    single = not direct or fs_type(os.path.join(d, files[0])) in MEMORY_FS  # see rand_reads
    OUT["random_read"] = "os.pread" if single else "os.preadv"
    for bs, key, frac in ((4096, "rand_4k", fracs[1]), (131072, "rand_128k", fracs[2])):
        evict()
        OUT[key] = reads(d, files, sizes, n, bs, left(frac), direct, True, w, single)
    if names is None:  # written here: small files of its own for the metadata pass
        md = os.path.join(d, "meta")
        os.mkdir(md)
        names = []
        payload = os.urandom(A["meta_size"])
        until = left(0.83)
        while len(names) < A["meta_files"] and time.monotonic() < until:
            p = os.path.join(md, f"s{len(names):05d}")
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, payload)
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            names.append((p, A["meta_size"]))
    else:
        for p, _ in names:
            drop(p, False)
    count = [0] * n
    until = left(0.93)
    meta = names

    def m(i: int) -> None:
        for p, z in meta[i::n]:
            if time.monotonic() >= until or STOP.is_set():
                break
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fstat(fd)
                os.read(fd, z)
            finally:
                os.close(fd)
            count[i] += 1

    secs = parallel(n, m)
    OUT["meta"] = {
        "files": sum(count),
        "created": len(names),
        "seconds": round(secs, 4),
        "files_s": round(sum(count) / secs, 1),
    }


def measure_write(d: str) -> None:
    n = A["readers"]
    t = time.monotonic()
    done, _, _ = write_files(d, n, A["size"], left(0.8), True)
    secs = time.monotonic() - t
    OUT["write"] = {"bytes": sum(done), "seconds": round(secs, 4), "gb_s": round(sum(done) / secs / 1e9, 3)}


def sweep(root: str) -> "list[str]":
    # folders of earlier runs that were killed (SIGKILL: no cleanup ran): ours (same owner), unlocked
    # (their process is gone: the kernel dropped its flock) and older than a minute
    gone: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return gone
    for e in entries:
        try:
            if not e.name.startswith(PREFIX) or not e.is_dir(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
            if st.st_uid != os.geteuid() or time.time() - st.st_mtime < 60:
                continue
            fd: int | None
            try:
                fd = os.open(os.path.join(e.path, ".lock"), os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                fd = None
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live run holds it
                finally:
                    os.close(fd)
            shutil.rmtree(e.path, ignore_errors=True)
            if not os.path.lexists(e.path):
                gone.append(e.path)
        except OSError:
            continue
    return gone


def main() -> None:
    if A.get("dataset"):
        OUT["read_only"] = True
        try:
            measure_read(None)
        except Exception as e:
            OUT["error"] = f"{type(e).__name__}: {e}"
        return
    st = os.statvfs(A["path"])
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    need = A["size"] + A.get("meta_files", 0) * A.get("meta_size", 0)
    OUT.update(free_bytes=free, total_bytes=total, needed_bytes=need)
    if free - need < A["margin"] * total:
        OUT["refused"] = (
            f"writing {int(need)} bytes would leave less than {A['margin'] * 100:g}% of the filesystem free "
            f"({free} bytes free of {total})"
        )
        return
    swept = sweep(A["path"])
    if swept:
        OUT["swept"] = swept
    try:
        d = tempfile.mkdtemp(prefix=PREFIX, dir=A["path"])
    except OSError as e:
        OUT["refused"] = f"cannot create a private folder in {A['path']}: {e.strerror or e}"
        return
    OUT["dir"] = d
    try:  # held until this process ends, however it ends: a later sweep sees it is alive
        lock = os.open(os.path.join(d, ".lock"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        KEEP.append(lock)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        OUT["lock_error"] = e.strerror or str(e)
    try:
        if A["mode"] == "read":
            measure_read(d)
        else:
            measure_write(d)
    except Exception as e:
        OUT["error"] = f"{type(e).__name__}: {e}"
    finally:
        STOP.set()
        for fd in KEEP:
            os.close(fd)
        shutil.rmtree(d, ignore_errors=True)
        OUT["removed"] = not os.path.exists(d)


def run() -> None:
    """Read the arguments, arm the signals and the watchdog, measure, print the one JSON object."""
    global T0, BUDGET
    A.update(json.loads(sys.argv[1]))
    T0 = time.monotonic()
    BUDGET = float(A["budget_s"])
    OUT.update(mode=A["mode"], readers=A["readers"])
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
        signal.signal(s, _sig)
    signal.alarm(int(BUDGET) + 5)  # a watchdog: a phase that overruns still ends in the cleanup
    try:
        main()
    except Exception as e:
        OUT["error"] = f"{type(e).__name__}: {e}"
    except SystemExit as e:
        code = e.code
        OUT["interrupted"] = f"signal {code - 128:d}" if isinstance(code, int) and code > 128 else str(code)
        raise
    finally:
        OUT["elapsed_s"] = round(time.monotonic() - T0, 3)
        print(json.dumps(OUT, sort_keys=True))
        sys.stdout.flush()


if __name__ == "__main__":
    run()
