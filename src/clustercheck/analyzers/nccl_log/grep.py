"""The byte-level pass of a large file by GNU grep: the same evidence as the pure-Python scan, faster.

Past the exact start of a file (its first EXACT_CHANNELS channel lines, still read by scan.py),
the Python scan only looks at lines that hold one of the lean line kinds (`_RARE_LEAN`) or a
channel counted by kind (`via NET/...`, `via SHM`). Two `grep -a -n -b -F` (C locale, side by
side) print those lines, with their line numbers and byte offsets, and read every other byte at
grep's speed; Python then runs the very same code (scan._Collector) on the printed lines, the
channel lines block by block where scan._blocks cuts its blocks, and puts the real line numbers
back. So the Partials, and everything judged from them, are the pure-Python path's, byte for byte.

Where this cannot promise that, the caller scans in Python (`Unsuitable`): no GNU grep, a line
longer than a block (the Python reader's overlong-line rule depends on how reads fall), a file
that changes while read. A grep that fails or is killed is an error (`GrepFailed`), never a
partial result.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import threading
from typing import IO

import clustercheck.analyzers.nccl_log.knobs as knobs
from clustercheck.analyzers.nccl_log.grammar import _CHANNEL, _RARE_LEAN
from clustercheck.analyzers.nccl_log.scan import Partial, _blocks, _Collector

#: Bytes of each grep's output held while the exact start is still being read (grep waits beyond it).
_HELD = 8 << 20
#: Bytes of output handed to the collectors at a time.
_TAKE = 2 << 20
_LINE_NO = re.compile(rb"^([0-9]+):", re.MULTILINE)


class Unsuitable(Exception):
    """This input is scanned in Python (the reason is the message)."""


class GrepFailed(OSError):
    """grep failed or was killed: no result from it."""


_GREP: dict[tuple[str, int, int], bool] = {}


def gnu_grep() -> str | None:
    """The path of GNU grep on PATH, or None (absent, or another grep); asked once per binary."""
    path = shutil.which("grep")
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_ino, st.st_mtime_ns)
    if key not in _GREP:
        try:
            out = subprocess.run(
                [path, "--version"], capture_output=True, timeout=10, env={**os.environ, "LC_ALL": "C"}, check=False
            )
            _GREP[key] = out.returncode == 0 and out.stdout.startswith(b"grep (GNU grep)")
        except (OSError, subprocess.SubprocessError):
            _GREP[key] = False
    return path if _GREP[key] else None


def cuts(mm: _Pread, begin: int, stop: int) -> list[int]:
    """Where scan._blocks ends its blocks reading [begin, stop): it reads BLOCK bytes at a time and
    cuts after the last newline read; the last block ends at `stop`. Unsuitable when some read holds
    no newline (a line longer than a block: the reader's overlong rule would depend on the reads)."""
    block = knobs.BLOCK
    out: list[int] = []
    last = begin
    pos = begin
    while pos < stop:
        pos = min(stop, pos + block)
        nl = mm.rfind(b"\n", last, pos)
        if nl < 0:
            if pos == stop and stop == mm.size:  # the file's last line, without a newline
                break
            raise Unsuitable("a line longer than a block")
        last = nl + 1
        out.append(last)
    if last < stop:
        out.append(stop)  # the final line without a newline: the reader adds one
    return out


def exact_end(mm: _Pread, ends: list[int], begin: int, exact: int) -> int:
    """The index into `ends` of the first block read the lean way (the exact start has counted
    `exact` channel lines by then); len(ends) when the exact start lasts the whole stretch."""
    if exact <= 0:
        return 0
    start = begin
    for i, end in enumerate(ends):
        if mm.find(b"NCCL", start, end) >= 0:
            exact -= len(_CHANNEL.findall(mm.read(start, end)))
            if exact <= 0:
                return i + 1
        start = end
    return len(ends)


class _Output:
    """One grep's output, read by a thread and held up to _HELD bytes; whole lines taken in order."""

    def __init__(self, proc: subprocess.Popen[bytes], cond: threading.Condition) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        with contextlib.suppress(OSError, AttributeError):  # fewer, larger writes from grep (Linux)
            fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        self.chunks: collections.deque[bytes] = collections.deque()
        self.held = 0
        self.done = False
        self.rest = b""
        self.error: BaseException | None = None
        self.cond = cond
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                data = os.read(self.fd, 1 << 20)
                with self.cond:
                    if not data:
                        self.done = True
                        self.cond.notify_all()
                        return
                    self.chunks.append(data)
                    self.held += len(data)
                    self.cond.notify_all()
                    while self.held > _HELD and not self.done:
                        self.cond.wait()
        except BaseException as e:  # handed to the reader of the output
            with self.cond:
                self.error, self.done = e, True
                self.cond.notify_all()

    def ready(self) -> bool:
        """Something to take (call with the condition held)."""
        return bool(self.chunks) or (self.done and (bool(self.rest) or self.error is not None))

    def take(self) -> bytes:
        """Whole lines read so far, a few MB at most (call with the condition held); b"" if none."""
        if self.error is not None:
            raise GrepFailed(f"reading grep's output: {self.error}")
        taken = [self.rest]
        size = len(self.rest)
        while self.chunks and size < _TAKE:
            chunk = self.chunks.popleft()
            taken.append(chunk)
            size += len(chunk)
            self.held -= len(chunk)
        self.cond.notify_all()
        data = b"".join(taken)
        if self.done and not self.chunks:
            self.rest = b""
            return data + b"\n" if data and not data.endswith(b"\n") else data
        nl = data.rfind(b"\n") + 1
        self.rest = data[nl:]
        return data[:nl]

    def stop(self) -> None:
        """Let the reading thread end (after a failure)."""
        with self.cond:
            self.done = True
            self.cond.notify_all()


def _header(data: bytes, at: int) -> tuple[int, int, int]:
    """(line number, offset, where the text starts) of the output line starting at `at`."""
    a = data.index(b":", at)
    b = data.index(b":", a + 1)
    return int(data[at:a]), int(data[a + 1 : b]), b + 1


def _split_at(data: bytes, lo: int, offset: int) -> int:
    """The start of the first output line in data[lo:] (lo a line start) whose offset is at least
    `offset`; len(data) if none. Lines come in the order of their offsets: a binary search."""
    hi = len(data)
    if lo >= hi or _header(data, lo)[1] >= offset:
        return lo
    while True:  # the line at lo is below `offset`; the answer is a line start in (lo, hi]
        nxt = data.find(b"\n", lo, hi) + 1
        if nxt <= 0 or nxt >= hi:
            return hi
        at = data.rfind(b"\n", lo, (lo + hi) // 2) + 1
        if at <= lo:
            at = nxt
        if _header(data, at)[1] >= offset:
            hi = at
        else:
            lo = at


class _Stretch:
    """One stretch of the file (as scan.py's processes cut them): its collector and its blocks."""

    def __init__(self, name: str, begin: int, stop: int, ends: list[int], first_lean: int, exact: int) -> None:
        self.collector = _Collector(name, exact_channels=exact)
        self.begin, self.stop = begin, stop
        self.ends = ends
        self.block = first_lean  # index of the next block to feed
        self.block_start = ends[first_lean - 1] if first_lean else begin


#: The lines each grep prints: a superset of the lines `_RARE_LEAN` finds (scan._Collector._rare
#: keeps exactly those), and exactly the lines `_VIA` finds something in. Fixed strings: grep's
#: multi-string search reads a log where every line holds "NCCL " at about `grep -c`'s speed, which
#: its regex engine does not (a regex for the same lines costs twice as much).
RARE_STRINGS = (
    "NCCL WARN",
    "NCCL version ",
    "NCCL INFO NET/",
    "NCCL INFO Net/IB",
    "NCCL INFO NET : Using",
    "NCCL INFO Using network ",
    "NCCL INFO Bootstrap",
    "NCCL INFO NCCL version ",
    "NCCL INFO NCCL_IB_DISABLE set",
    "NCCL INFO NCCL_NET set",
    "NCCL INFO NCCL_NET_PLUGIN set",
    "NCCL INFO NCCL_IBEXT_DISABLE set",
    "NCCL INFO Count not open",
    "NCCL INFO Could not open lib",
    "NCCL INFO P2P plugin",
    "NCCL INFO Failed to init",
    "NCCL INFO rank ",
)
VIA_STRINGS = ("via NET/", "via SHM")


def scan_file(path: str, stream: IO[bytes], tasks: list[tuple[int, int, bool]]) -> list[Partial]:
    """The Partials of the stretches `tasks` ((start, end, first) as scan.py cuts a file), their line
    numbers counted from the start of the file; Unsuitable or GrepFailed where grep cannot say it."""
    grep = gnu_grep()
    if grep is None:
        raise Unsuitable("no GNU grep")
    fd = stream.fileno()
    size = os.fstat(fd).st_size
    if size == 0:
        raise Unsuitable("empty")
    mm = _Pread(fd, size)
    stretches: list[_Stretch] = []
    for start, end, first in tasks:
        begin = 0 if start == 0 else _line_start(mm, start)
        stop = _line_start(mm, end)
        if stop <= begin:
            stretches.append(_Stretch(path, begin, begin, [], 0, 0))
            continue
        ends = cuts(mm, begin, stop)
        exact = knobs.EXACT_CHANNELS if first else 0
        stretches.append(_Stretch(path, begin, stop, ends, exact_end(mm, ends, begin, exact), exact))
    lean = [s for s in stretches if s.block < len(s.ends)]
    if not lean:
        raise Unsuitable("the exact start is the whole file")
    x = lean[0].block_start  # where the lean scan starts
    procs: list[subprocess.Popen[bytes]] = []
    outputs: list[_Output] = []
    cond = threading.Condition()
    try:
        for strings in (RARE_STRINGS, VIA_STRINGS):
            procs.append(_start(grep, path, fd, x, strings))
            outputs.append(_Output(procs[-1], cond))
        head = stretches[0]
        line = 1
        if head.block:  # the exact start, in Python, while the greps read the rest
            stream.seek(0)
            limit = head.ends[head.block - 1]
            got: list[int] = []
            pos = 0
            for buf, end, n in _blocks(stream, head.collector.out, limit):
                head.collector.feed_block(buf, end, line)
                line += n
                pos = min(pos + end, limit)  # the reader ends a last line without a newline with one
                got.append(pos)
            if got != head.ends[: head.block] or head.collector.out.overlong:
                raise Unsuitable("the exact start was read differently")
        base = line - 1  # lines before x
        rare, via = _RareFeeder(lean, x, base), _ViaFeeder(lean, mm, x, base)
        while True:
            with cond:
                while not any(o.ready() for o in outputs) and not all(o.done for o in outputs):
                    cond.wait()
                if all(o.done and not o.ready() for o in outputs):
                    break
                pieces = [o.take() if o.ready() else b"" for o in outputs]
            if pieces[0]:
                rare.feed(pieces[0])
            if pieces[1]:
                via.feed(pieces[1])
        via.close()
        for proc in procs:
            err = proc.stderr.read() if proc.stderr else b""
            code = proc.wait()
            if code not in (0, 1):
                what = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
                raise GrepFailed(f"grep on {path} failed ({what}): {err.decode(errors='replace').strip()}")
        if os.fstat(fd).st_size < size:  # a log that grows is read up to the size it had
            raise GrepFailed(f"{path} was cut short while it was read")
        last_line, last_end = max((rare.last, via.last, (base, x)), key=lambda t: t[1])
        total = last_line + _count_lines(mm, last_end, size)
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        raise
    finally:
        for o in outputs:
            o.stop()
        for o in outputs:  # the readers end at the pipe's end (grep exited or was killed) ...
            o.thread.join(timeout=10)
        for proc in procs:  # ... before their descriptors are closed (and their numbers reused)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
    parts = [s.collector.out for s in stretches]
    parts[-1].lines = total
    for part in parts[:-1]:
        part.lines = 0
    return parts


def _start(grep: str, path: str, fd: int, x: int, strings: tuple[str, ...]) -> subprocess.Popen[bytes]:
    """`grep -a -n -b -F` for `strings` on the file from offset x, on an open file of its own
    (a shared one would share its offset with this process's reads)."""
    own = os.open(f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else path, os.O_RDONLY)
    try:
        if os.fstat(own).st_ino != os.fstat(fd).st_ino:
            raise Unsuitable(f"{path} was replaced while it was read")
        os.lseek(own, x, os.SEEK_SET)
        argv = [grep, "-a", "-n", "-b", "-F"]
        for text in strings:
            argv += ["-e", text]
        return subprocess.Popen(
            argv, stdin=own, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "LC_ALL": "C"}
        )
    except OSError as e:
        raise Unsuitable(f"grep did not start: {e}") from e
    finally:
        os.close(own)


class _RareFeeder:
    """The candidate lines of the lean kinds -> each stretch's collector (scan._Collector._rare);
    their order is all that matters, not the blocks."""

    def __init__(self, lean: list[_Stretch], x: int, base: int) -> None:
        self.lean, self.si, self.x, self.base = lean, 0, x, base
        self.last = (base, x)  # the last printed line: (its number, where it ends)

    def feed(self, data: bytes) -> None:
        at, n = 0, len(data)
        while at < n:
            if self.si >= len(self.lean):
                return  # lines written to the file after this scan took its size: not read
            s = self.lean[self.si]
            cut = _split_at(data, at, s.stop - self.x)
            if cut > at:
                piece = data[at:cut]
                self.last = _last(piece, self.x, self.base)
                out = s.collector.out
                records, cut_line = len(out.records), out.cut_line
                s.collector._rare(piece, len(piece), 1, _RARE_LEAN, header=True)
                _renumber(out, piece, self.base, records, None, None, cut_line)
                at = cut
            if cut < n:
                self.si += 1


class _ViaFeeder:
    """The channel lines counted by kind -> each stretch's collector, block by block as
    scan._blocks cuts them (scan._Collector._channels_fast counts per block)."""

    def __init__(self, lean: list[_Stretch], mm: _Pread, x: int, base: int) -> None:
        self.lean, self.si, self.mm, self.x, self.base = lean, 0, mm, x, base
        self.pending: list[bytes] = []  # the printed lines of the current block so far
        self.last = (base, x)

    def feed(self, data: bytes) -> None:
        at, n = 0, len(data)
        while at < n:
            if self.si >= len(self.lean):
                return  # lines written to the file after this scan took its size: not read
            s = self.lean[self.si]
            end = s.ends[s.block]
            cut = _split_at(data, at, end - self.x)
            if cut > at:
                self.pending.append(data[at:cut])
                self.last = _last(self.pending[-1], self.x, self.base)
                at = cut
            if cut < n:  # the rest is in later blocks: this one is whole
                self._block()

    def _block(self) -> None:
        s = self.lean[self.si]
        if self.pending:
            _feed(s, b"".join(self.pending), self.mm, self.base)
            self.pending.clear()
        s.block_start = s.ends[s.block]
        s.block += 1
        if s.block >= len(s.ends):
            self.si += 1

    def close(self) -> None:
        if self.pending:
            self._block()


def _last(data: bytes, x: int, base: int) -> tuple[int, int]:
    """(line number, where it ends in the file) of the last line in data."""
    number, offset, text = _header(data, data.rfind(b"\n", 0, len(data) - 1) + 1)
    return base + number, x + offset + (len(data) - text)


def _feed(s: _Stretch, piece: bytes, mm: _Pread, base: int) -> None:
    """One block's printed channel lines (with grep's headers) -> the collector."""
    c = s.collector
    out = c.out
    if piece.find(b"NCCL") < 0 and mm.find(b"NCCL", s.block_start, s.ends[s.block]) < 0:
        return  # scan._Collector.feed_block skips a block without NCCL
    channels, net = len(out.channels), len(out.net)
    c._channels_fast(piece, len(piece), 1, header=True)
    _renumber(out, piece, base, None, channels, net, None)


def _renumber(
    out: Partial, piece: bytes, base: int, records: int | None, channels: int | None, net: int | None, cut: int | None
) -> None:
    """Lines counted within `piece` (1 = its first) -> lines of the file, in what was added to `out`
    since it held `records` records, `channels` and `net` entries (grep's headers say the lines)."""
    new_records = records is not None and len(out.records) > records
    new_channels = channels is not None and len(out.channels) > channels
    new_net = net is not None and len(out.net) > net
    new_cut = cut is not None and out.cut_line != cut
    if not (new_records or new_channels or new_net or new_cut):
        return
    numbers = [base + int(m) for m in _LINE_NO.findall(piece)]
    if records is not None:
        for i in range(records, len(out.records)):
            line, raw = out.records[i]
            out.records[i] = (numbers[line - 1], raw)
    if channels is not None:
        for key in list(out.channels)[channels:]:
            out.channels[key][1] = numbers[out.channels[key][1] - 1]
    if net is not None:
        for net_key in list(out.net)[net:]:
            out.net[net_key][1] = numbers[out.net[net_key][1] - 1]
    if new_cut:
        out.cut_line = numbers[out.cut_line - 1]


def _line_start(mm: _Pread, pos: int) -> int:
    """scan._next_line_start, by pread."""
    nl = mm.find(b"\n", pos - 1, mm.size)
    return mm.size if nl < 0 else nl + 1


def _count_lines(mm: _Pread, start: int, size: int) -> int:
    """Lines in [start, size) as the reader counts them (a last line without a newline is one)."""
    n = 0
    pos = start
    while pos < size:
        end = min(size, pos + (1 << 20))
        n += mm.read(pos, end).count(b"\n")
        pos = end
    if size > start and mm.read(size - 1, size) != b"\n":
        n += 1
    return n


class _Pread:
    """Searches in a file by pread of small windows: no mapping, so no page of the file counts
    in this process's resident memory (a mapped file's touched pages do, and their neighbours)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size

    def read(self, start: int, end: int) -> bytes:
        start, end = max(0, start), min(self.size, end)
        return os.pread(self.fd, end - start, start) if end > start else b""

    def find(self, sub: bytes, start: int, end: int) -> int:
        pos = max(0, start)
        while pos < end:
            stop = min(end, pos + (1 << 16))
            data = self.read(pos, min(end, stop + len(sub) - 1))
            at = data.find(sub)
            if at >= 0:
                return pos + at
            pos = stop
        return -1

    def rfind(self, sub: bytes, start: int, end: int) -> int:
        stop = end
        while stop > start:
            pos = max(start, stop - (1 << 13))
            data = self.read(pos, min(end, stop + len(sub) - 1))
            at = data.rfind(sub)
            if at >= 0:
                return pos + at
            stop = pos
        return -1
