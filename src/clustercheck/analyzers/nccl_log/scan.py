"""Reading a log: blocks of a file or stream, the few line kinds that matter found by the regex
engine, the common channel lines counted by it; a large file in stretches on several processes.

What comes out is a `Partial` per stretch: raw evidence (the lines worth parsing, channel counts,
first lines), picklable, interpreted and merged in order by state.Scanner. The sizes that steer
this (BLOCK, MAX_LINE, EXACT_CHANNELS, PARALLEL_MIN) are attributes of nccl_log.knobs, read at
each call, so a caller (or a test) sets them in one place.

A per-line test for a substring of bytes is `find()`, not `in`: CPython (3.11) first tries the operand
of `in` on bytes as an integer, raising and clearing a TypeError each time, which costs more than the
search on a line.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import clustercheck.analyzers.nccl_log.knobs as knobs
from clustercheck.analyzers.nccl_log.grammar import (
    _CHANNEL,
    _COMMON,
    _FOREIGN,
    _HEX,
    _LEAN_VIA,
    _RARE,
    _RARE_LEAN,
    _SEEN_CAP,
    _VIA,
    COMMON_KEY,
    MAX_KEPT,
    NetTail,
    _tail_class,
    prefix_of,
    split_line,
)

#: The most lines one stretch keeps for parsing (with _SEEN_CAP, memory stays constant).
_RECORDS_CAP = 200_000
#: _RARE and _RARE_LEAN run on to the end of the line (what _Collector._rare reads them with).
_RARE_LINE = re.compile(_RARE.pattern + rb".*", re.MULTILINE)
_RARE_LEAN_LINE = re.compile(_RARE_LEAN.pattern + rb".*", _RARE_LEAN.flags)
#: The text after a line's first ` via `.
_VIA_TAIL = re.compile(rb" via (.*)")  # (`.`: any byte but a newline, and the regex engine's fastest loop)
#: In a block read backwards: a ` via ` whose line has `NCCL INFO Channel|Ring ` before it within 512
#: bytes (as _channels_exact looks for it) and no `N` between them; the group is the line's text before
#: that marker (backwards). Greedy is the nearest marker: the run without `N` ends inside it.
_REV_CHANNEL = re.compile(rb" aiv [^\nN]{0,512} (?:lennahC|gniR) OFNI LCCN(.*)")


@dataclass
class Partial:
    """Raw evidence from one stretch of one input, before interpretation; picklable and mergeable.

    Line numbers are relative to the stretch (its first line is 1); `lines` is how many lines
    it holds, so the stretches of a file can be scanned apart and put back together in order.
    """

    name: str
    lines: int = 0
    records: list[tuple[int, str]] = field(default_factory=list)  # the few lines worth parsing
    channels: dict[tuple[str | None, str, bool], list[Any]] = field(default_factory=dict)  # attributed
    net: dict[tuple[str, bool], list[int]] = field(default_factory=dict)  # (name, gdr) -> [count, line]
    intra: dict[str, list[int]] = field(default_factory=dict)  # class -> [count, line]
    tails: dict[str, NetTail] = field(default_factory=dict)
    pxn: int = 0
    foreign: dict[str, int] = field(default_factory=dict)
    overlong: int = 0
    cut: int = 0  # lines longer than MAX_KEPT, kept only up to it
    cut_line: int = 0  # the first of them (relative to the stretch)
    # host -> [lines, CUDA devices] of INFO lines that repeat one already kept for the host (see _rare)
    repeats: dict[str | None, list[Any]] = field(default_factory=dict)
    parsed: int = 0  # records the scanner parsed already (the exact start, while grep read the rest)


class _Collector:
    """Scans blocks of one input for the line kinds that matter (see the module docstring)."""

    def __init__(self, name: str, *, exact_channels: int | None = None) -> None:
        self.out = Partial(name)
        # channel lines still to attribute one by one
        self.exact_left = knobs.EXACT_CHANNELS if exact_channels is None else exact_channels
        self._seen: set[bytes] = set()
        self._said: set[tuple[str | None, bytes]] = set()  # (host, message) of the INFO lines kept
        self._hosts: dict[bytes, tuple[str, str | None, int | None, bool, bool]] = {}  # prefix -> _prefix()
        self._messages: dict[bytes, tuple[bool, bool, bool]] = {}  # INFO message -> _message()
        self._plans: dict[tuple[bytes, bytes], tuple[Any, ...]] = {}  # (prefix, tail) -> _lean_plain's work
        self._prefixes: dict[bytes, str | None] = {}
        self._classes: dict[bytes, tuple[str, NetTail | None] | tuple[()]] = {}

    def feed_block(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        """Lines buf[:end] (whole lines); the first is line `first_line` of the stretch."""
        if self.exact_left > 0:
            if buf.find(b"NCCL", 0, end) < 0:
                return
            # one immutable copy: the many slices of this phase are then hashable without a second copy
            with memoryview(buf) as view:
                data = bytes(view[:end])
            self._rare(data, end, first_line, _RARE_LINE)
            self._foreign(data, end, first_line)
            vias = data.count(b" via ")  # grep.exact_start counts the same way
            self._channels_exact(data, end, first_line, vias)
            self.exact_left -= vias
        else:
            if buf.find(b"NCCL", 0, end) >= 0:
                self._rare(buf, end, first_line, _RARE_LEAN_LINE)
            self._channels_lean(buf, end, first_line)

    def _record(self, buf: bytes | bytearray, start: int, end: int, line: int) -> None:
        out = self.out
        if end - start > MAX_KEPT:  # keep the head of an overlong line, and say it was cut
            end = start + MAX_KEPT
            out.cut += 1
            out.cut_line = out.cut_line or line
        if len(out.records) < _RECORDS_CAP:
            out.records.append((line, buf[start:end].decode("utf-8", "replace")))

    def _rare(
        self, buf: bytes | bytearray, end: int, first_line: int, pattern: re.Pattern[bytes], *, header: bool = False
    ) -> None:
        """Keep the lines `pattern` finds (_RARE_LINE, _RARE_LEAN_LINE: a match runs on to the end of its
        line, so a line has one match). `header`: every line starts with grep's `LINE:OFFSET:`, not kept.

        A line kept already (pointers aside) is not kept again: every rank prints the same lines, often
        for every communicator. Nor is an INFO line whose parse does not depend on how often it comes
        (the host's facts it sets are kept from their first line) once the same host's same message is
        kept: it is counted in `repeats` (Scanner.add: the host's lines and CUDA devices), for every rank
        of a host prints the same init lines, its pid:tid before them. WARN lines, lines with two markers,
        channel lines and GPU Direct RDMA lines (the last of a host's counts) are always kept."""
        rfind, find, count = buf.rfind, buf.find, buf.count
        seen, said, hosts, messages = self._seen, self._said, self._hosts, self._messages
        records, repeats = self.out.records, self.out.repeats
        line_no, last_line_start = first_line, 0
        for m in pattern.finditer(buf, 0, end):
            at, stop = m.span()
            line_start = start = rfind(b"\n", 0, at) + 1
            if header:
                start = find(b":", find(b":", start) + 1) + 1
            line = buf[start:stop]
            if not isinstance(line, bytes):  # a slice of bytes is bytes; of a bytearray, one to copy
                line = bytes(line)
            marker = at - start
            if buf[at + 5] == 73 and stop - start <= MAX_KEPT:  # the I of `NCCL INFO ` (not WARN, version):
                # the usual line, whose prefix and message repeat: what is in them is looked up, not looked for
                raw_prefix, message = line[:marker], line[marker + 10 :]
                known = hosts.get(raw_prefix) or self._prefix(raw_prefix)
                kind = messages.get(message) or self._message(message)
                single = not (known[3] or kind[0])  # the match's marker is the line's only `NCCL `
                hexed = known[4] or kind[1]  # (the marker holds no `0x`, nor makes one with its neighbours)
            else:
                single = False
                hexed = line.find(b"0x") >= 0
            raw = _HEX.sub(b"", line) if hexed else line  # pointers and ids differ per communicator
            if raw in seen:
                continue
            if len(seen) >= _SEEN_CAP:
                seen.clear()
            seen.add(raw)
            if stop - start > MAX_KEPT:  # keep the head of an overlong line, and say it was cut
                line_no += count(b"\n", last_line_start, line_start)
                last_line_start = line_start
                self._record(buf, start, stop, line_no)
                continue
            if len(records) >= _RECORDS_CAP:
                continue
            if not single and line.count(b"NCCL ") > 1:  # spliced lines: the only INFO marker, if it is one
                marker = line.find(b"NCCL INFO ")
                single = marker >= 0 and line.find(b"NCCL INFO ", marker + 10) < 0 and line.find(b"NCCL WARN ") < 0
                if single:
                    raw_prefix, message = line[:marker], line[marker + 10 :]
                    known = hosts.get(raw_prefix) or self._prefix(raw_prefix)
                    kind = messages.get(message) or self._message(message)
            if single and kind[2] and known[0] == "ok":
                host = known[1]
                key = (host, message)
                if key in said:
                    entry = repeats.get(host)
                    if entry is None:
                        entry = repeats[host] = [0, set()]
                    entry[0] += 1
                    if known[2] is not None:
                        entry[1].add(known[2])
                    continue
                if len(said) >= _SEEN_CAP:
                    said.clear()
                said.add(key)
            line_no += count(b"\n", last_line_start, line_start)  # (counted for the lines kept only)
            last_line_start = line_start
            records.append((line_no, line.decode("utf-8", "replace")))

    def _message(self, message: bytes) -> tuple[bool, bool, bool]:
        """Of the text after a line's `NCCL INFO `: whether it holds `NCCL `, `0x`, and whether a repeat of it
        for the same host is counted rather than kept; kept for the next line with it."""
        kind = (
            message.find(b"NCCL ") >= 0,
            message.find(b"0x") >= 0,
            not message.startswith(_ALWAYS_KEPT) and message.find(b"GPU Direct RDMA") < 0,
        )
        if len(self._messages) >= _SEEN_CAP:
            self._messages.clear()
        self._messages[message] = kind
        return kind

    def _prefix(self, raw_prefix: bytes) -> tuple[str, str | None, int | None, bool, bool]:
        """prefix_of() of the text before a line's marker, and whether it holds `NCCL ` and `0x`; kept for
        the next line with it."""
        known = (
            *prefix_of(raw_prefix.decode("utf-8", "replace")),
            raw_prefix.find(b"NCCL ") >= 0,
            raw_prefix.find(b"0x") >= 0,
        )
        if len(self._hosts) >= _SEEN_CAP:
            self._hosts.clear()
        self._hosts[raw_prefix] = known
        return known

    def _foreign(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        if buf.find(b"fi_getinfo", 0, end) < 0 and buf.find(b"libibverbs: Warning", 0, end) < 0:
            return
        for m in _FOREIGN.finditer(buf, 0, end):
            key = "efa_empty" if m.group(0).startswith(b"fi_getinfo") else "ibverbs_driver"
            if key not in self.out.foreign:
                self.out.foreign[key] = first_line + buf.count(b"\n", 0, m.start())

    def _classify(self, tail: bytes) -> tuple[str, NetTail | None] | tuple[()]:
        cls = self._classes.get(tail)
        if cls is None:
            cls = _tail_class(tail.decode("utf-8", "replace"))
            if len(self._classes) > _SEEN_CAP:
                self._classes.clear()
            self._classes[tail] = cls
        return cls

    def _channels_exact(self, buf: bytes, end: int, first_line: int, vias: int) -> None:
        """Every channel line (`_CHANNEL`) attributed to its host by the prefix and the tail around its
        ` via ` (`vias` of them in buf[:end], which is whole lines); each distinct prefix and tail taken
        apart once."""
        if not vias:
            return
        if self._channels_counted(buf, end, first_line, vias):
            return
        prefixes, classes = self._prefixes, self._classes
        channels, tails = self.out.channels, self.out.tails
        for i, line in enumerate(buf[:end].split(b"\n")):
            if line.find(b" via ") < 0:
                continue
            at = line.find(b"NCCL INFO ")
            if at < 0:
                continue
            # one match of _CHANNEL on the line, found without the regex engine: the usual case
            if line.startswith(b"Channel ", at + 10):
                via = line.find(b" via ", at + 18, at + 535)
            elif line.startswith(b"Ring ", at + 10):
                via = line.find(b" via ", at + 15, at + 532)
            else:
                via = -2
            if via == -2 or line.find(b"NCCL INFO ", at + 10) >= 0:
                spans = [(m.start(), m.end()) for m in _CHANNEL.finditer(line)]  # none, or spliced lines
            elif via >= 0:
                spans = [(at, via + 5)]
            else:
                continue
            for at, after in spans:
                # the prefix (host:pid:tid [dev] ) and the tail repeat: take each distinct one apart once
                prefix = line[:at]
                host = prefixes.get(prefix, _UNSET)
                if host is _UNSET:
                    parsed = split_line(line[:MAX_KEPT].decode("utf-8", "replace"))
                    if parsed is None or parsed.level == "GARBLED":
                        self._record(line, 0, len(line), first_line + i)  # the judge counts (and salvages) it
                        continue
                    host = parsed.host
                    if len(prefixes) > _SEEN_CAP:
                        prefixes.clear()
                    prefixes[prefix] = host
                tail = line[after:]  # the text after " via "
                cls = classes.get(tail)
                if cls is None:
                    cls = self._classify(tail)
                if cls:
                    key = (host, cls[0], True)
                    entry = channels.get(key)
                    if entry is None:  # _count, inline: this runs for every channel line at the start
                        channels[key] = [1, first_line + i]
                        if cls[1] is not None:
                            tails[cls[0]] = cls[1]
                    else:
                        entry[0] += 1

    def _channels_counted(self, buf: bytes, end: int, first_line: int, vias: int) -> bool:
        """_channels_exact for a block whose every ` via ` is on a plain channel line (one `NCCL INFO
        Channel|Ring ` before it, within 512 bytes and no `N` between them, no other marker): the same
        counts, keys, first lines and caches, with each distinct prefix and tail looked at once and the
        lines found, mapped to their keys and counted by the regex engine and C loops. False, with
        nothing changed, for any other block (the caller then reads it line by line)."""
        tails = _VIA_TAIL.findall(buf, 0, end)  # the text after each line's first ` via `
        if len(tails) != vias:
            return False  # a line with two
        # the text before each ` via `'s marker, found in the block read backwards (forwards, no regex
        # finds it without trying every line): one per ` via ` exactly when each is on a plain channel line
        befores = _REV_CHANNEL.findall(buf[end - 1 :: -1])
        if len(befores) != vias:
            return False
        prefixes, classes = self._prefixes, self._classes
        new: dict[bytes, str | None] = {}
        hosts: dict[bytes, str | None] = {}  # the line's text before its marker, backwards -> its host
        for before in dict.fromkeys(reversed(befores)):  # in the order of their first lines
            if before.find(b"LCCN") >= 0:
                return False  # a second marker on the line
            prefix = before[::-1]
            host = prefixes.get(prefix, _UNSET)
            if host is _UNSET:
                host = new.get(prefix, _UNSET)
            if host is _UNSET:
                if len(prefix) > MAX_KEPT // 2:
                    return False  # split_line reads the line's first MAX_KEPT bytes
                what, host, _ = prefix_of(prefix.decode("utf-8", "replace"))  # split_line's, for one marker
                if what != "ok":
                    return False  # garbled: recorded for the judge, line by line
                new[prefix] = host
            hosts[before] = host
        names: dict[bytes, str | None] = {}  # tail -> its class name, None where it has none
        nets: dict[bytes, tuple[str, NetTail | None] | tuple[()]] = {}  # tail -> its class
        for tail in dict.fromkeys(tails):
            if tail.find(b"NCCL") >= 0:
                return False
            cls = classes.get(tail)
            if cls is None:
                cls = self._classify(tail)
            nets[tail] = cls
            names[tail] = cls[0] if cls else None
        if len(prefixes) + len(new) > _SEEN_CAP:
            return False  # the cache would be cleared within the block
        prefixes.update(new)
        keys = list(zip(map(hosts.__getitem__, reversed(befores)), map(names.__getitem__, tails), strict=True))
        channels, out_tails = self.out.channels, self.out.tails
        first: dict[tuple[str | None, str | None], int] | None = None
        lines: list[int] = []
        for pair, n in collections.Counter(keys).items():  # in the order of their first lines
            host, name = pair
            if name is None:
                continue
            key = (host, name, True)
            entry = channels.get(key)
            if entry is not None:
                entry[0] += n
                continue
            if first is None:  # each key's first line, and the line of each ` via ` (only where a key is new)
                first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
                pieces = (buf if end == len(buf) else buf[:end]).split(b" via ")
                lines = list(itertools.accumulate(map(bytes.count, pieces, itertools.repeat(b"\n"))))
            at = first[pair]
            channels[key] = [n, first_line + lines[at]]
            net = nets[tails[at]]
            if net and net[1] is not None:
                out_tails[name] = net[1]
        return True

    def _count(self, host: str | None, cls: tuple[str, NetTail | None], line: int, job_counts: bool) -> None:
        out = self.out
        name, net = cls
        key = (host, name, job_counts)
        entry = out.channels.get(key)
        if entry is None:
            out.channels[key] = [1, line]
            if net is not None:
                out.tails[name] = net
        else:
            entry[0] += 1

    def _channels_lean(self, buf: bytes | bytearray, end: int, first_line: int) -> None:
        """Past the exact start: the common network channel lines (`_COMMON`) counted, every other line
        with `via NET/` or `via SHM` read by `lean_line`; the same per line as grep.py's pass."""
        if buf.find(b"via ", 0, end) < 0:
            return
        out = self.out
        common = len(_COMMON.findall(buf, 0, end))
        pending = -1  # where the first common line starts, while its key is still to be added
        if common and COMMON_KEY not in out.net:
            pending = buf.rfind(b"\n", 0, _first(_COMMON, buf, end)) + 1
        rfind, find, count = buf.rfind, buf.find, buf.count
        line_no, counted_to, stop = first_line, 0, -1
        for m in _LEAN_VIA.finditer(buf, 0, end):
            if m.start() <= stop:
                continue  # a second transport on the same line: the line is read whole once
            start = rfind(b"\n", 0, m.start()) + 1
            stop = find(b"\n", m.end(), end)
            if stop < 0:
                stop = end
            line = bytes(buf[start:stop])
            if _COMMON.search(line):
                continue  # counted above (its tail ends the line)
            if 0 <= pending < start:  # keys in the order of their first lines, as grep.py adds them
                out.net.setdefault(COMMON_KEY, [0, first_line + count(b"\n", 0, pending)])
                pending = -1
            line_no += count(b"\n", counted_to, start)
            counted_to = start
            self.lean_line(line, line_no)
        if pending >= 0:  # (an earlier line of another kind may have the key: IB with a proxy)
            out.net.setdefault(COMMON_KEY, [0, first_line + count(b"\n", 0, pending)])
        if common:
            out.net[COMMON_KEY][0] += common

    def lean_line(self, line: bytes, line_no: int) -> None:
        """One channel line past the exact start that is not a common one (`line` without its newline):
        its network channels counted by name and GPUDirect RDMA, and the line attributed to its host
        when one of them lacks GPUDirect RDMA (counted per host) or it uses shared memory (counted for
        the job and the host)."""
        out = self.out
        at = line.find(b"via NET/")
        if at > 0 and line[at - 1] == 32 and line.count(b"via ") == 1:  # one network tail after " via "
            marker = line.find(b"NCCL INFO ", 0, at)
            if marker >= 0 and line.find(b"NCCL INFO ", marker + 10) < 0:
                self._lean_plain(line[:marker], line[at + 8 :], line, line_no)
                return
        no_gdr = shm = False
        for m in _VIA.finditer(line):
            raw_tail = m.group(1)
            if raw_tail is None:
                shm = True
                continue
            cls = self._classify(b"NET/" + raw_tail)
            if not cls or cls[1] is None:
                continue
            tail = cls[1]
            key = (tail.name, tail.gdr)
            entry = out.net.get(key)
            if entry is None:
                entry = out.net[key] = [0, line_no]
                out.tails[cls[0]] = tail
            entry[0] += 1
            if tail.proxy is not None:
                out.pxn += 1
            no_gdr = no_gdr or not tail.gdr
        if no_gdr:  # which hosts have network channels without GPUDirect RDMA, exactly
            self._attribute(line, line_no, job_counts=False)
        if shm:  # no P2P between local GPUs: shared memory
            self._attribute(line, line_no, job_counts=True)

    def _lean_plain(self, prefix: bytes, raw_tail: bytes, line: bytes, line_no: int) -> None:
        """lean_line for a line with one marker and one ` via NET/`: what it adds depends on its prefix
        and tail alone, worked out once per distinct pair (an all-TCP log has every line here)."""
        plan = self._plans.get((prefix, raw_tail))
        if plan is None:
            cls = self._classify(b"NET/" + raw_tail)
            if not cls or cls[1] is None:
                plan = ()
            else:
                host = _UNSET
                if not cls[1].gdr:  # as _attribute: the host of the prefix, the class of the same tail
                    host = self._prefixes.get(prefix, _UNSET)
                    if host is _UNSET:
                        parsed = split_line(line[:MAX_KEPT].decode("utf-8", "replace"))
                        if parsed is not None and parsed.level != "GARBLED":
                            if len(self._prefixes) > _SEEN_CAP:
                                self._prefixes.clear()
                            host = self._prefixes[prefix] = parsed.host
                plan = (cls, host)
            if len(self._plans) > _SEEN_CAP:
                self._plans.clear()
            self._plans[(prefix, raw_tail)] = plan
        if not plan:
            return
        cls, host = plan
        out = self.out
        tail = cls[1]
        assert tail is not None
        key = (tail.name, tail.gdr)
        entry = out.net.get(key)
        if entry is None:
            out.net[key] = [1, line_no]
            out.tails[cls[0]] = tail
        else:
            entry[0] += 1
        if tail.proxy is not None:
            out.pxn += 1
        if host is not _UNSET:
            self._count(host, cls, line_no, False)

    def _attribute(self, line: bytes, line_no: int, *, job_counts: bool) -> None:
        """The line's host and the transport after its first ` via `, counted per host."""
        marker = line.find(b"NCCL INFO ")
        if marker < 0:
            return
        prefix = line[:marker]
        host = self._prefixes.get(prefix, _UNSET)
        if host is _UNSET:
            parsed = split_line(line[:MAX_KEPT].decode("utf-8", "replace"))
            if parsed is None or parsed.level == "GARBLED":
                return
            if len(self._prefixes) > _SEEN_CAP:
                self._prefixes.clear()
            host = self._prefixes[prefix] = parsed.host
        via = line.find(b" via ", marker)
        cls = self._classify(line[via + 5 :]) if via >= 0 else ()
        if cls:
            self._count(host, cls, line_no, job_counts)


def _first(pattern: re.Pattern[bytes], buf: bytes | bytearray, end: int) -> int:
    m = pattern.search(buf, 0, end)
    return m.start() if m else end


_UNSET: Any = object()
#: Messages _rare keeps however often they come: channel lines are counted (and their comm kinds
#: taken apart per line), and the last of a host's GPU Direct RDMA lines counts.
_ALWAYS_KEPT = (b"Channel", b"Ring")


def _scan_stream(stream: IO[bytes], name: str, limit: int | None = None, exact: int | None = None) -> Partial:
    """Scan a stream (up to `limit` bytes) into a Partial; the first `exact` channel lines (default
    EXACT_CHANNELS) are attributed to their hosts one by one."""
    collector = _Collector(name, exact_channels=exact)
    out = collector.out
    line = 1
    for buf, end, n in _blocks(stream, out, limit):
        collector.feed_block(buf, end, line)
        line += n
    out.lines = line - 1
    return out


def _scan_range(task: tuple[str, int, int, bool]) -> Partial:
    """Worker: the lines that start in [start, end) of a file (a line crossing `end` is read whole)."""
    path, start, end, first = task
    with open(path, "rb", buffering=0) as stream:
        begin = 0 if start == 0 else _next_line_start(stream, start)
        stop = _next_line_start(stream, end)
        stream.seek(begin)
        return _scan_stream(stream, path, max(0, stop - begin), knobs.EXACT_CHANNELS if first else 0)


def _next_line_start(stream: IO[bytes], pos: int) -> int:
    """The offset of the first line that starts at or after `pos` (the file's size at the end)."""
    stream.seek(pos - 1)
    while True:
        data = stream.read(1 << 16)
        if not data:
            return stream.tell()
        nl = data.find(b"\n")
        if nl >= 0:
            return stream.tell() - len(data) + nl + 1


def _blocks(stream: IO[bytes], out: Partial, limit: int | None = None) -> Iterator[tuple[bytearray, int, int]]:
    """(buffer, end, lines): buffer[:end] holds whole lines, `lines` of them.

    One buffer is reused (read into, never copied whole): the part of a line cut by a block
    boundary moves to its front. A line longer than MAX_LINE is counted, skipped, and still
    numbered as one line.
    """
    block, max_line = knobs.BLOCK, knobs.MAX_LINE
    buf = bytearray(block)
    keep = 0  # bytes of an unfinished line at the front of buf
    skipping = False
    left = limit
    readinto = getattr(stream, "readinto", None)
    while True:
        size = block if left is None else min(block, left)
        if size <= 0:
            break
        if len(buf) < keep + size:
            buf.extend(bytes(keep + size - len(buf)))
        if readinto is not None:
            with memoryview(buf) as view:
                got = readinto(view[keep : keep + size]) or 0
        else:
            data = stream.read(size)
            got = len(data)
            buf[keep : keep + got] = data
        if not got:
            break
        if left is not None:
            left -= got
        filled = keep + got
        if skipping:
            nl = buf.find(b"\n", keep, filled)
            if nl < 0:
                continue
            del buf[: nl + 1]
            filled -= nl + 1
            skipping = False
            yield bytearray(b"\n"), 1, 1  # the skipped line still counts as a line
        cut = buf.rfind(b"\n", 0, filled) + 1
        if cut == 0:
            if filled > max_line:
                out.overlong += 1
                keep, skipping = 0, True
                del buf[block:]
            else:
                keep = filled
            continue
        yield buf, cut, buf.count(b"\n", 0, cut)
        keep = filled - cut
        if keep:
            buf[:keep] = buf[cut:filled]
    if skipping:
        yield bytearray(b"\n"), 1, 1
    elif keep:
        buf[keep : keep + 1] = b"\n"
        yield buf, keep + 1, 1


def default_jobs() -> int:
    """Processes for a large file: the CPUs this process may use, at most 4 (memory stays small)."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _fork_available() -> bool:
    """Whether multiprocessing has its fork start method: everywhere but Windows (where os has no fork);
    asked without importing multiprocessing, which a run through grep (one process) does not need."""
    import os
    import sys

    return sys.platform != "win32" and hasattr(os, "fork")
