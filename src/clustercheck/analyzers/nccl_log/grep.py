"""The byte-level pass of a large file by GNU grep: the same evidence as the pure-Python scan, faster.

Past the exact start of a file (its first EXACT_CHANNELS channel lines, still read by scan.py),
the Python scan only looks at lines that hold one of the lean line kinds (`_RARE_LEAN`), and at
channel lines (`via NET/`, `via SHM`) that are not common ones (`_COMMON`: IB with GPUDirect RDMA,
no proxy), which it only counts. Here, in the C locale and side by side: `grep -a -n -b -F`
prints the candidates of the lean kinds, and another the channel lines, with their line numbers
and byte offsets, straight into `grep -v -n -B 1 -E COMMON_ERE`, so only the lines that change the
verdict reach Python; the filter numbers the lines it reads, and its number for the line the channel
grep reads after the file (`_Sentinel`) says how many channel lines grep printed, the line before it
(printed as context) which was the last. Python runs the very same code (scan._Collector) on the
lines, with the real line numbers, and counts the common lines the filter left out. So the
Partials, and everything judged from them, are the pure-Python path's.

Where this cannot promise that, the caller scans in Python (`Unsuitable`): no GNU grep, a line
longer than a block (the Python reader's overlong-line rule depends on how reads fall), a file
replaced while read, or one that grew by channel lines while they were counted (Python reads it
up to the size it had). A grep that fails or is killed is an error (`GrepFailed`), never a
partial result.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import secrets
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import IO

import clustercheck.analyzers.nccl_log.knobs as knobs
from clustercheck.analyzers.nccl_log.grammar import _COMMON, COMMON_ERE, COMMON_KEY
from clustercheck.analyzers.nccl_log.scan import _RARE_LEAN_LINE, Partial, _blocks, _Collector

#: Bytes of each grep's output held while the exact start is still being read (grep waits beyond it).
_HELD = 8 << 20
#: Bytes of output handed to the collectors at a time.
_TAKE = 2 << 20
_LINE_NO = re.compile(rb"^([0-9]+):", re.MULTILINE)
#: The greps start reading at a multiple of this below the exact start's end (and leave out what
#: they print before it): read() from a file offset a few bytes short of a page's end cost a grep
#: 73 us a call against 20 us from a page's start (strace -c, 96 KiB reads, Linux 6.18), 0.1-0.2 s
#: of system time a grep on the 320 MB bench log.
_ALIGN = 4096


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


def cuts(mm: _Pread, begin: int, stop: int) -> Iterator[int]:
    """Where scan._blocks ends its blocks reading [begin, stop): it reads BLOCK bytes at a time and
    cuts after the last newline read; the last block ends at `stop`. Unsuitable when some read holds
    no newline (a line longer than a block: the reader's overlong rule would depend on the reads)."""
    block = knobs.BLOCK
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
        yield last
    if last < stop:
        yield stop  # the final line without a newline: the reader adds one


def exact_start(blocks: Iterator[int], mm: _Pread, begin: int, exact: int) -> tuple[list[int], bool]:
    """The ends of the blocks read the exact way, from `blocks` (cuts() of a stretch): until the exact
    start has counted `exact` channel lines, as scan._Collector.feed_block counts them; and whether
    that is the whole stretch. The rest of `blocks` is left to read."""
    ends: list[int] = []
    start = begin
    while exact > 0:
        end = next(blocks, None)
        if end is None:
            return ends, True
        ends.append(end)
        data = mm.read(start, end)
        if b"NCCL" in data:
            exact -= data.count(b" via ")
        start = end
    return ends, False


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
    """One stretch of the file (as scan.py's processes cut them): its collector, the blocks of its
    exact start (`ends`), and where its lean part begins (`lean_start`; `stop` when it has none)."""

    def __init__(self, name: str, begin: int, stop: int, mm: _Pread | None, exact: int) -> None:
        self.collector = _Collector(name, exact_channels=exact)
        self.begin, self.stop = begin, stop
        self.blocks = cuts(mm, begin, stop) if mm is not None else iter(())
        self.ends, whole = exact_start(self.blocks, mm, begin, exact) if mm is not None else ([], True)
        self.lean_start = stop if whole else (self.ends[-1] if self.ends else begin)

    def check(self) -> None:
        """Read the rest of the stretch's block ends: Unsuitable where a line is longer than a block."""
        for _ in self.blocks:
            pass


#: The lines the first grep prints: a superset of the lines `_RARE_LEAN` finds (scan._Collector._rare
#: keeps exactly those). Fixed strings: grep's multi-string search reads a log where every line holds
#: "NCCL " at about `grep -c`'s speed, which its regex engine does not (a regex for the same lines
#: costs twice as much, and so does a string that starts with a space: " : " is on every channel
#: line). "Bootstrap: ", not the "Bootstrap timings" every rank prints for every communicator.
RARE_STRINGS = (
    "NCCL WARN",
    "NCCL version ",
    "NCCL INFO NET/",
    "NCCL INFO Net/IB",
    "NCCL INFO NET : Using",
    "NCCL INFO Using network ",
    "NCCL INFO Bootstrap: ",
    "NCCL INFO Bootstrap : ",
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
#: The lines the second grep prints: every line scan._Collector._channels_lean looks at. A third
#: grep (`-v`) leaves out the common ones (COMMON_ERE), so Python reads only the lines that change the
#: verdict (no GPUDirect RDMA, another network, a proxy, shared memory), and counts the rest.
VIA_STRINGS = ("via NET/", "via SHM")
#: A line the channel grep prints holds one of VIA_STRINGS.
_VIA_TEXT = re.compile("|".join(map(re.escape, VIA_STRINGS)).encode())


def scan_file(
    path: str,
    stream: IO[bytes],
    tasks: list[tuple[int, int, bool]],
    exact_read: Callable[[Partial], None] | None = None,
) -> list[Partial]:
    """The Partials of the stretches `tasks` ((start, end, first) as scan.py cuts a file), their line
    numbers counted from the start of the file; Unsuitable or GrepFailed where grep cannot say it.
    `exact_read` is given the first Partial once its exact start is read, while the greps read on."""
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
        exact = knobs.EXACT_CHANNELS if first else 0
        stretches.append(_Stretch(path, begin, stop, mm if stop > begin else None, exact))
    lean = [s for s in stretches if s.lean_start < s.stop]
    if not lean:
        raise Unsuitable("the exact start is the whole file")
    x = lean[0].lean_start  # where the lean scan starts
    g = x - x % _ALIGN  # where the greps start reading (the lines they print before x are left out)
    early = mm.read(g, x)
    procs: list[subprocess.Popen[bytes]] = []
    outputs: list[_Output] = []
    cond = threading.Condition()
    sentinel = _Sentinel()
    try:
        procs.append(_start(grep, path, fd, g, RARE_STRINGS))
        outputs.append(_Output(procs[-1], cond))
        procs.append(_start(grep, path, fd, g, VIA_STRINGS, sentinel))
        procs.append(_start_filter(grep, procs[-1]))
        outputs.append(_Output(procs[-1], cond))
        for s in stretches:  # every block holds a newline (or the Python scan reads the file)
            s.check()
        head = stretches[0]
        line = 1
        if head.ends:  # the exact start, in Python, while the greps read the rest
            stream.seek(0)
            limit = head.ends[-1]
            got: list[int] = []
            pos = 0
            for buf, end, n in _blocks(stream, head.collector.out, limit):
                head.collector.feed_block(buf, end, line)
                line += n
                pos = min(pos + end, limit)  # the reader ends a last line without a newline with one
                got.append(pos)
            if got != head.ends or head.collector.out.overlong:
                raise Unsuitable("the exact start was read differently")
            if exact_read is not None:
                exact_read(head.collector.out)
        before = (line - 1, x)  # (the lines before x, x)
        base = line - 1 - early.count(b"\n")  # what grep's numbers for its lines (from g on) add to
        printed_early = sum(1 for t in early.split(b"\n")[:-1] if _VIA_TEXT.search(t))
        rare = _RareFeeder(lean, g, base, before)
        via = _LeanFeeder(lean, g, base, before, printed_early, sentinel)
        while True:
            with cond:
                while not any(o.ready() for o in outputs) and not all(o.done for o in outputs):
                    cond.wait()
                if all(o.done and not o.ready() for o in outputs):
                    break
                pieces = [o.take() if o.ready() else b"" for o in outputs]
            try:
                if pieces[0]:
                    rare.feed(pieces[0])
                if pieces[1]:
                    via.feed(pieces[1])
            except (ValueError, IndexError) as e:  # a line cut short: a grep killed mid-write, most likely
                _check(procs, path, wait=0.5)
                raise GrepFailed(f"grep's output on {path} ends in the middle of a line") from e
        _check(procs, path)
        if os.fstat(fd).st_size < size:  # a log that grows is read up to the size it had
            raise GrepFailed(f"{path} was cut short while it was read")
        if via.printed is None:
            raise GrepFailed("the filter of grep's channel lines did not pass on the last one")
        # a line grep read past the size the file had when this scan began (grep ends a last line
        # without a newline with one): read up to that size in Python
        end = size + (mm.read(size - 1, size) != b"\n")
        if via.final is not None and via.final[1] > end:
            raise Unsuitable(f"{path} grew by channel lines while grep read it")
        if rare.last[1] > end:
            raise Unsuitable(f"{path} grew by a line grep read while it was written")
        _add_common(lean, mm, via, head)
        known = [rare.last, via.last]
        if via.final is not None:
            known.append(via.final)
        last_line, last_end = max(known, key=lambda t: t[1])
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
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
    parts = [s.collector.out for s in stretches]
    parts[-1].lines = total
    for part in parts[:-1]:
        part.lines = 0
    return parts


def _check(procs: list[subprocess.Popen[bytes]], path: str, wait: float | None = None) -> None:
    """GrepFailed for the first grep that failed or was killed; with `wait`, only those that end
    within that many seconds are asked (the others are killed by the caller)."""
    for proc in procs:
        if wait is None:  # its stderr read to the end first: a grep blocked on a full pipe never exits
            err = proc.stderr.read() if proc.stderr else b""
            code = proc.wait()
        else:
            try:
                code = proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            err = proc.stderr.read() if proc.stderr else b""  # it has exited: its stderr ends
        if code not in (0, 1):
            what = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            raise GrepFailed(f"grep on {path} failed ({what}): {err.decode(errors='replace').strip()}")


def grep_argv(grep: str, strings: tuple[str, ...]) -> list[str]:
    """The command line of the grep for `strings` (RARE_STRINGS, VIA_STRINGS): each line that holds one,
    after its line number and byte offset, in the C locale (the caller's environment)."""
    argv = [grep, "-a", "-n", "-b", "-F"]
    for text in strings:
        argv += ["-e", text]
    return argv


def filter_argv(grep: str) -> list[str]:
    """The command line of the filter: the channel grep's lines but the common ones, each after the
    number of its line in what the filter read (`N:`), and the line before each as context (`N-`:
    so the line before the sentinel, the last channel line, is printed whatever it is)."""
    return [grep, "-a", "-v", "-n", "-B", "1", "-E", "-e", COMMON_ERE]


class _Sentinel:
    """The line the channel grep reads after the file, from a pipe of its own (`-h - /dev/fd/N`): it
    prints it as `1:0:TEXT`, never a common line, after every line of the file. TEXT holds a token
    of this scan, so no line of the file can pass for it."""

    def __init__(self) -> None:
        self.text = b"via SHM (the end of the channel lines " + secrets.token_hex(8).encode() + b")"

    def argv(self, fd: int) -> list[str]:
        return ["-h", "-", f"/dev/fd/{fd}"]

    def pipe(self) -> int:
        """The read end of a pipe that holds the line (its write end closed)."""
        r, w = os.pipe()
        try:
            os.write(w, self.text + b"\n")
        finally:
            os.close(w)
        return r


def _start(
    grep: str, path: str, fd: int, x: int, strings: tuple[str, ...], sentinel: _Sentinel | None = None
) -> subprocess.Popen[bytes]:
    """`grep -a -n -b -F` for `strings` on the file from offset x, on an open file of its own
    (a shared one would share its offset with this process's reads); then `sentinel`'s line."""
    if not os.path.isdir("/dev/fd") and sentinel is not None:
        raise Unsuitable("no /dev/fd")
    own = os.open(f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else path, os.O_RDONLY)
    tail = -1
    try:
        if os.fstat(own).st_ino != os.fstat(fd).st_ino:
            raise Unsuitable(f"{path} was replaced while it was read")
        os.lseek(own, x, os.SEEK_SET)
        argv = grep_argv(grep, strings)
        if sentinel is not None:
            tail = sentinel.pipe()
            argv += sentinel.argv(tail)
        return subprocess.Popen(
            argv,
            stdin=own,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "LC_ALL": "C"},
            pass_fds=(tail,) if tail >= 0 else (),
        )
    except OSError as e:
        raise Unsuitable(f"grep did not start: {e}") from e
    finally:
        os.close(own)
        if tail >= 0:
            os.close(tail)


def _start_filter(grep: str, channels: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """`filter_argv`, reading the output of the channel grep `channels` (this process keeps none of
    that pipe: the filter sees its end when that grep exits)."""
    out = channels.stdout
    assert out is not None
    with contextlib.suppress(OSError, AttributeError):  # fewer, larger reads and writes (Linux)
        fcntl.fcntl(out.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    try:
        return subprocess.Popen(
            filter_argv(grep),
            stdin=out,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "LC_ALL": "C"},
        )
    except OSError as e:
        raise Unsuitable(f"grep did not start: {e}") from e
    finally:
        out.close()


class _Feeder:
    """What a grep's lines are fed to: the stretches (`lean`, `si` the current one), where the grep
    began (`g`: its offsets add to it) and what its line numbers add to (`base`), the lines it printed
    that the exact start read (those that start before `skip`), and the last line fed (`last`: its
    number and where it ends; at first `before`, the exact start's line count and end)."""

    def __init__(self, lean: list[_Stretch], g: int, base: int, before: tuple[int, int]) -> None:
        self.lean, self.si, self.g, self.base = lean, 0, g, base
        self.skip = before[1] - g
        self.last = before


class _RareFeeder(_Feeder):
    """The candidate lines of the lean kinds -> each stretch's collector (scan._Collector._rare);
    their order is all that matters, not the blocks."""

    def feed(self, data: bytes) -> None:
        at, n = 0, len(data)
        if self.skip:
            at = _split_at(data, 0, self.skip)
            if at < n:
                self.skip = 0
        while at < n:
            if self.si >= len(self.lean):
                return  # lines written to the file after this scan took its size: not read
            s = self.lean[self.si]
            cut = _split_at(data, at, s.stop - self.g)
            if cut > at:
                piece = data[at:cut]
                self.last = _last(piece, self.g, self.base)
                out = s.collector.out
                records, cut_line = len(out.records), out.cut_line
                s.collector._rare(piece, len(piece), 1, _RARE_LEAN_LINE, header=True)
                _renumber(out, piece, self.base, records, cut_line)
                at = cut
            if cut < n:
                self.si += 1


class _LeanFeeder(_Feeder):
    """The channel lines that are not common ones -> the collector of their stretch
    (scan._Collector.lean_line), one by one with their line numbers; and from the filter's numbers
    (the n-th channel line grep printed, the first `early` of them before the exact start's end):
    how many it printed (`printed`, at the sentinel), the last of them (`final`: its line and where
    it ends, printed as context if it is a common one), and which one is the first common line after
    the exact start (`gap`: whether the filter left out a number, the first of them `after`'s next;
    `after` is the line and end of the one before it)."""

    def __init__(
        self, lean: list[_Stretch], g: int, base: int, before: tuple[int, int], early: int, sentinel: _Sentinel
    ) -> None:
        super().__init__(lean, g, base, before)
        self.count = 0  # lines fed
        self.early = early
        self.sentinel = sentinel.text
        self.printed: int | None = None
        self.final: tuple[int, int] | None = None
        self.gap = False
        self.after = before
        self._expected = early + 1
        self._previous: tuple[int, int, int] | None = None  # (number, line, end) of the line before

    def feed(self, data: bytes) -> None:
        at, n = 0, len(data)
        lean, x, base = self.lean, self.g, self.base
        while at < n:
            nl = data.find(b"\n", at)
            if nl < 0:
                nl = n
            colon = data.find(b":", at, nl)
            if colon < 0:  # the filter's `--` between groups of lines
                at = nl + 1
                continue
            dash = data.find(b"-", at, colon)  # `N-` before a line printed as context
            number, offset, text = _header(data, (dash if dash >= 0 else colon) + 1)
            read = int(data[at : dash if dash >= 0 else colon])  # the filter's number for the line
            if offset == 0 and number == 1 and data[text:nl] == self.sentinel:  # after every line grep printed
                self._end(read - 1)
                at = nl + 1
                continue
            self._previous = (read, base + number, x + offset + nl + 1 - text)
            if dash >= 0:
                at = nl + 1
                continue
            if not self.gap and read > self.early:
                if read == self._expected:
                    self._expected += 1
                    self.after = self._previous[1:]
                else:
                    self.gap = True
            if offset < self.skip:
                at = nl + 1
                continue
            while self.si < len(lean) and x + offset >= lean[self.si].stop:
                self.si += 1
            if self.si >= len(lean):  # lines written to the file after this scan took its size: not read
                at = nl + 1
                continue
            self.count += 1
            self.last = self._previous[1:]
            lean[self.si].collector.lean_line(data[text:nl], base + number)
            at = nl + 1

    def _end(self, printed: int) -> None:
        if printed > 0:
            if self._previous is None or self._previous[0] != printed:
                raise GrepFailed("the filter of grep's channel lines did not print the last one")
            self.final = self._previous[1:]
        if not self.gap and self._expected <= printed:  # the common lines come after the last one printed
            self.gap = True
        self.printed = printed


def _first_common(mm: _Pread, fed: _LeanFeeder) -> tuple[int, int]:
    """(line, offset) of the first common line after the exact start: the first channel line after
    `fed.after` (the gap the filter's numbers show is one line)."""
    line, pos = fed.after
    longest = max(map(len, VIA_STRINGS))
    while pos < mm.size:
        data = mm.read(pos, pos + (1 << 20) + longest)
        hits = [at for at in (data.find(t.encode()) for t in VIA_STRINGS) if at >= 0]
        if hits:
            start = data.rfind(b"\n", 0, min(hits)) + 1
            end = data.find(b"\n", start)
            if _COMMON.search(data, start, len(data) if end < 0 else end) is None:
                raise GrepFailed("grep left out a channel line that is not a common one")
            return line + 1 + data.count(b"\n", 0, start), pos + start  # (line: the one before pos)
        cut = data.rfind(b"\n", 0, 1 << 20) + 1 or 1 << 20  # on at a line's start (else past the window)
        line += data.count(b"\n", 0, cut)
        pos += cut
    raise GrepFailed("grep left out channel lines the file does not hold")


def _add_common(lean: list[_Stretch], mm: _Pread, fed: _LeanFeeder, head: _Stretch) -> None:
    """The common lines (printed by grep, left out by the filter, but the `early` ones grep printed
    before the exact start's end) counted under COMMON_KEY, in the stretch and at the place of their
    first line (before a later line of another kind with the same key: IB with a proxy), unless the
    exact start holds the key already (its place and line stand)."""
    assert fed.printed is not None
    common = fed.printed - fed.count - fed.early
    if common <= 0:
        return
    if any(cls == "NET/IB/GDRDMA" for _, cls, _ in head.collector.out.channels):
        net = lean[0].collector.out.net
        net.setdefault(COMMON_KEY, [0, 0])[0] += common
        return
    if not fed.gap:
        raise GrepFailed("grep left out channel lines that are not common ones")
    line, offset = _first_common(mm, fed)
    target = next((s for s in lean if offset < s.stop), lean[-1])
    net = target.collector.out.net
    had = net.pop(COMMON_KEY, None)
    if had is not None:
        common, line = common + had[0], min(line, had[1])
    items = list(net.items())
    at = next((i for i, (_, (_, first)) in enumerate(items) if first > line), len(items))
    items.insert(at, (COMMON_KEY, [common, line]))
    net.clear()
    net.update(items)


def _last(data: bytes, x: int, base: int) -> tuple[int, int]:
    """(line number, where it ends in the file) of the last line in data."""
    number, offset, text = _header(data, data.rfind(b"\n", 0, len(data) - 1) + 1)
    return base + number, x + offset + (len(data) - text)


def _renumber(out: Partial, piece: bytes, base: int, records: int, cut: int) -> None:
    """Lines counted within `piece` (1 = its first) -> lines of the file, in the records added to
    `out` since it held `records` of them, and its first cut line (grep's headers say the lines)."""
    new_cut = out.cut_line != cut
    if len(out.records) == records and not new_cut:
        return
    numbers = [base + int(m) for m in _LINE_NO.findall(piece)]
    for i in range(records, len(out.records)):
        line, raw = out.records[i]
        out.records[i] = (numbers[line - 1], raw)
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
