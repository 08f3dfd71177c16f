"""What the logs say, accumulated: per host and for the job, from the lines the scan picked out
(and from channel counts); `Scanner.report()` hands it to the rules.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import clustercheck.analyzers.nccl_log.knobs as knobs
from clustercheck.analyzers.nccl_log.evidence import MAX_ERRORS, MAX_HOSTS, _Host, _Job
from clustercheck.analyzers.nccl_log.grammar import (
    _BAD_EVENTS,
    _BOOTSTRAP,
    _CHANNEL_LINE,
    _COMM_COMPLETE,
    _COMM_INIT,
    _COMM_SIZES,
    _DEVICE,
    _ENV_SET,
    _GDR_HCA,
    _IFACE,
    _NET_PLUGIN_LINE,
    _NVLS_CHANNELS,
    _OFI_NICS,
    _OFI_PLUGIN,
    _OFI_PROVIDER,
    _OOB,
    _RANK_NRANKS,
    _SEEN_CAP,
    _VERSION,
    _WARN_KINDS,
    MAX_KEPT,
    NetTail,
    Ref,
    _tail_class,
    parse_net_tail,
    split_parts,
)
from clustercheck.analyzers.nccl_log.rules import LogReport, judge
from clustercheck.analyzers.nccl_log.scan import Partial, _fork_available, _scan_range, _scan_stream


def _tasks(size: int, jobs: int, head: int = 0) -> list[tuple[int, int, bool]]:
    """The stretches a large file is cut into for `jobs` processes: (start, end, first). `head`: the
    bytes of the exact start, the first stretch whole (as one process reads it), the rest cut after."""
    pieces = max(jobs * 4, (size - head) // (64 << 20))
    step = max(1, -(-(size - head) // pieces))
    rest = [(start, min(size, start + step), start == 0) for start in range(head, size, step)]
    return ([(0, head, True)] if head else []) + rest


def _default_signals() -> None:
    """A scan worker's SIGTERM and SIGINT: the defaults, whatever its parent had installed."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _exact_head(stream: IO[bytes], size: int) -> int | None:
    """Where a file's exact start ends, as one process reading it from the start would end it (the
    end of the block in which EXACT_CHANNELS channel lines were counted); None where a line is
    longer than a block (the single scan's overlong rule then decides the blocks)."""
    from clustercheck.analyzers.nccl_log.grep import Unsuitable, _Pread, cuts, exact_start

    mm = _Pread(stream.fileno(), size)
    try:
        ends, whole = exact_start(cuts(mm, 0, size), mm, 0, knobs.EXACT_CHANNELS)
    except Unsuitable:
        return None
    return size if whole else (ends[-1] if ends else 0)


def _grep_wanted() -> bool:
    import os

    return knobs.GREP and os.environ.get("CLUSTERCHECK_NCCL_GREP", "1") != "0"


class Scanner:
    """What NCCL logs say, accumulated over inputs; then `report()` judges it."""

    def __init__(self) -> None:
        self.job = _Job()
        self._count_job_channels = True

    def host(self, name: str | None) -> _Host:
        key = name if name else "unknown"
        h = self.job.hosts.get(key)
        if h is None:
            if len(self.job.hosts) >= MAX_HOSTS:
                key = "(more hosts)"
                h = self.job.hosts.get(key)
                if h is not None:
                    return h
            h = self.job.hosts[key] = _Host(key)
        return h

    # -- input ---------------------------------------------------------------------------------
    def feed_stream(self, stream: IO[bytes], name: str) -> None:
        """Scan a whole binary stream (a file or stdin)."""
        self.job.sources.append(name)
        self.add(_scan_stream(stream, name))

    def feed_path(self, path: str, *, jobs: int = 1) -> None:
        """Scan a file; a large one through GNU grep beside this process, else in stretches on up to
        `jobs` processes."""
        size = Path(path).stat().st_size
        # fork only a process that runs no other thread: a child forked beside a thread that holds
        # a lock (an embedding program's, a test runner's) can wait on it for ever
        parallel = jobs > 1 and size >= knobs.PARALLEL_MIN and _fork_available() and threading.active_count() == 1
        if size >= knobs.GREP_MIN and _grep_wanted():
            import copy

            import clustercheck.analyzers.nccl_log.grep as grep

            before = copy.deepcopy(self.job)  # the lines parsed early are taken back where grep cannot answer
            try:
                with open(path, "rb", buffering=0) as stream:
                    # one stretch whatever `jobs`: the same greps read the whole file either way (they
                    # are the parallel part, beside this process), and more stretches only cut the
                    # exact start short at the first one's end and cost CPU (320 MB on 2 CPUs: 1.33 s
                    # against 1.12 s; 4.3 GB: 2.41x grep's time against 2.13x)
                    parts = grep.scan_file(path, stream, [(0, size, True)], self._parse_early)
            except grep.Unsuitable:
                self.job = before
            except grep.GrepFailed as exc:  # never a partial result: the whole file again, in Python
                import sys

                self.job = before
                print(f"clustercheck: {exc}; reading {path} in Python instead", file=sys.stderr)
            else:
                self.job.sources.append(path)
                for part in parts:
                    self.add(part)
                return
        head = None
        if parallel:  # the exact start is one stretch, as one process reads it: the same report
            with open(path, "rb", buffering=0) as stream:
                head = _exact_head(stream, size)
        if head is None or head >= size:
            self.job.sources.append(path)
            with open(path, "rb", buffering=0) as stream:  # a log still written: up to the size it had
                self.add(_scan_stream(stream, path, size))
            return
        import multiprocessing

        self.job.sources.append(path)
        offset = 0
        # The workers end by the pool's own sentinel (close, join); terminate() is only for an error.
        # Their SIGTERM and SIGINT are the defaults: a handler the caller installed (a sweep's, a
        # test's) would otherwise make a worker ignore terminate(), and join() wait for ever.
        pool = multiprocessing.get_context("fork").Pool(jobs, initializer=_default_signals)
        try:
            for part in pool.imap(_scan_range, [(path, *task) for task in _tasks(size, jobs, head)]):
                self.add(part, offset)
                offset += part.lines
            pool.close()
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()

    def _parse_early(self, part: Partial) -> None:
        """The lines of the file's exact start, parsed while the greps read the rest (add() skips them)."""
        for line, raw in part.records:
            self.parse(raw, Ref(part.name, line))
        part.parsed = len(part.records)

    def add(self, part: Partial, offset: int = 0) -> None:
        """Merge the evidence of one stretch whose first line is line `offset + 1` of its input."""
        job, name = self.job, part.name
        job.lines = max(job.lines, offset + part.lines)
        job.overlong += part.overlong
        if part.cut:
            job.cut += part.cut
            job.cut_ref = job.cut_ref or Ref(name, offset + part.cut_line)
        for line, raw in itertools.islice(part.records, part.parsed, None):  # (those _parse_early left)
            self.parse(raw, Ref(name, offset + line))
        for host, (n, devs) in part.repeats.items():  # INFO lines that repeat one parsed for the host
            h = self.host(host)
            h.seen += n
            job.nccl_lines += n
            for dev in sorted(devs):
                if len(h.devs) < 1024:
                    h.devs.add(dev)
        for (host, cls_name, job_counts), (n, line) in part.channels.items():
            self._count_channel(host, (cls_name, part.tails.get(cls_name)), Ref(name, offset + line), n, job_counts)
        for key, (n, line) in part.net.items():
            entry = job.net.get(key)
            if entry is None:
                job.net[key] = [n, Ref(name, offset + line)]
            else:
                entry[0] += n
        job.pxn += part.pxn
        for cls_name, (n, line) in part.intra.items():
            entry = job.intra.get(cls_name)
            if entry is None:
                job.intra[cls_name] = [n, Ref(name, offset + line)]
            else:
                entry[0] += n
        for what, line in part.foreign.items():
            job.foreign.setdefault(what, Ref(name, offset + line))

    def feed_lines(self, lines: Iterable[tuple[int, str]], name: str, *, count_channels: bool = True) -> None:
        """Lines already picked out (e.g. by grep on a node), with their line numbers.

        With `count_channels=False` channel lines are attributed to their hosts but not counted
        job-wide (the counts come from `add_channel_totals`).
        """
        if name not in self.job.sources:
            self.job.sources.append(name)
        self._count_job_channels = count_channels
        try:
            for number, text in lines:
                self.job.lines = max(self.job.lines, number)
                if len(text) > MAX_KEPT:  # keep the head of an overlong line, and say it was cut
                    text = text[:MAX_KEPT]
                    self.job.cut += 1
                    self.job.cut_ref = self.job.cut_ref or Ref(name, number)
                self.parse(text, Ref(name, number))
        finally:
            self._count_job_channels = True

    def add_channel_totals(self, *, net: int, gdr: int, p2p: int = 0, shm: int = 0) -> None:
        """Job-wide channel line counts (``grep -c`` on a node); names and first lines come from the
        channel lines attributed with `feed_lines(..., count_channels=False)`."""
        job = self.job
        seen: dict[tuple[str, bool], Ref] = {}
        intra: dict[str, list[Any]] = {}
        for h in job.hosts.values():
            for cls, (n, ref) in h.channels.items():
                if cls.startswith("NET/"):
                    key = (cls[4:].removesuffix("/GDRDMA"), cls.endswith("/GDRDMA"))
                    if key not in seen or ref.line < seen[key].line:
                        seen[key] = ref
                else:
                    entry = intra.setdefault(cls, [0, ref])
                    entry[0] += n
        for with_gdr, total in ((True, gdr), (False, max(0, net - gdr))):
            names = [k for k in seen if k[1] is with_gdr]
            if total and names:
                job.net[names[0]] = [total, seen[names[0]]]
            elif total:
                job.net[("?", with_gdr)] = [total, None]
        p2p_classes = {c: v for c, v in intra.items() if c.startswith("P2P/")}
        if p2p:
            top = max(p2p_classes.items(), key=lambda kv: kv[1][0]) if p2p_classes else ("P2P", [0, None])
            job.intra[top[0]] = [p2p, top[1][1]]
            for cls, (n, ref) in p2p_classes.items():
                if cls != top[0]:
                    job.intra[cls] = [n, ref]
        if shm:
            job.intra["SHM"] = [shm, intra.get("SHM", [0, None])[1]]

    def add_channel_counts(self, counts: dict[str, int], ref: Ref | None = None) -> None:
        """Job-wide channel counts gathered elsewhere (grep -c on a node): 'NET/IB/0/GDRDMA' or 'SHM' -> lines."""
        for cls, n in counts.items():
            if n <= 0:
                continue
            if cls.startswith("NET/"):
                tail = parse_net_tail(cls[4:])
                if tail is not None:
                    entry = self.job.net.setdefault((tail.name, tail.gdr), [0, ref])
                    entry[0] += n
            else:
                entry = self.job.intra.setdefault(cls, [0, ref])
                entry[0] += n

    # -- one line --------------------------------------------------------------------------------
    def parse(self, raw: str, ref: Ref) -> None:
        """Parse one raw line (any kind) into the job's state."""
        parts = split_parts(raw.rstrip("\r\n"))
        if parts is None:
            if "fi_getinfo: provider" in raw and "output empty list" in raw:
                self.job.foreign.setdefault("efa_empty", ref)
            elif "libibverbs: Warning: no userspace device-specific driver" in raw:
                self.job.foreign.setdefault("ibverbs_driver", ref)
            return
        host, dev, level, message = parts
        job = self.job
        if level == "GARBLED":
            if ref not in job.garbled_refs:
                job.garbled += 1
                if len(job.garbled_refs) < _SEEN_CAP:
                    job.garbled_refs.add(ref)
            known = [n for n in job.hosts if host and host.endswith(n) and n != "unknown"]
            if not known:
                return
            host, level = max(known, key=len), "INFO"
        job.nccl_lines += 1
        if level == "VERSION":
            m = _VERSION.search(message)
            if m:
                job.versions.setdefault(m.group(1), ref)
            return
        if level == "INFO" and message.startswith(("Channel", "Ring")) and _CHANNEL_LINE.match(message):
            self._channel(host, message, ref)
            return
        h = self.host(host)
        h.seen += 1
        h.first = h.first or ref
        if dev is not None and len(h.devs) < 1024:
            h.devs.add(dev)
        if level == "WARN":
            self._warn(h, message, ref)
        else:
            self._info(h, message, ref)

    def _channel(self, host: str | None, message: str, ref: Ref) -> None:
        m = _CHANNEL_LINE.match(message)
        cls = _tail_class(m.group(1)) if m else ()
        if cls:
            self._count_channel(host, cls, ref, 1, self._count_job_channels)

    def _count_channel(
        self, host: str | None, cls: tuple[str, NetTail | None], ref: Ref, n: int, job_counts: bool
    ) -> None:
        name, net = cls
        job = self.job
        h = self.host(host)
        h.seen += n
        h.first = h.first or ref
        if net is not None:
            if job_counts:
                entry = job.net.get((net.name, net.gdr))
                if entry is None:
                    job.net[(net.name, net.gdr)] = [n, ref]
                else:
                    entry[0] += n
                if net.proxy is not None:
                    job.pxn += n
            g = h.net_gdr
            g[0 if net.gdr else 1] += n
            if net.gdr:
                g[2] = g[2] or ref
            else:
                g[3] = g[3] or ref
        elif job_counts:
            entry = job.intra.get(name)
            if entry is None:
                job.intra[name] = [n, ref]
            else:
                entry[0] += n
        hc = h.channels.get(name)
        if hc is None:
            h.channels[name] = [n, ref]
        else:
            hc[0] += n

    def _info(self, h: _Host, msg: str, ref: Ref) -> None:
        job = self.job
        if msg.startswith("Using network "):
            net = msg[len("Using network ") :].strip()
            h.networks.setdefault(net, ref)
        elif msg.startswith(("NET/", "Net/IB")):
            self._net_line(h, msg, ref)
        elif msg.startswith("NCCL version "):
            m = _VERSION.match(msg)
            if m:
                job.versions.setdefault(m.group(1), ref)
                if h.version is None:
                    h.version = (m.group(1), ref)
        elif msg.startswith("NCCL_"):
            m = _ENV_SET.match(msg)
            if m:
                h.env.setdefault(m.group(1), (m.group(2).strip(), ref))
        elif msg.startswith("comm "):
            m = _COMM_SIZES.match(msg)
            if m:
                h.nnodes.add(int(m.group(3)))
                h.local_ranks.add(int(m.group(4)))
                if len(h.ranks) < 4096:
                    h.ranks.add((int(m.group(1)), int(m.group(2))))
                return
            m = _COMM_COMPLETE.match(msg)
            if m and len(h.ranks) < 4096:
                h.ranks.add((int(m.group(1)), int(m.group(2))))
        elif msg.startswith("Bootstrap"):
            job.has_bootstrap = True
            m = _BOOTSTRAP.match(msg)
            if m and h.bootstrap is None:
                h.bootstrap = m.group(1)
        elif msg.startswith(("ncclCommInit", "[Rank ")):
            m = _COMM_INIT.search(msg)
            if m and len(h.ranks) < 4096:
                h.ranks.add((int(m.group(1)), int(m.group(2))))
        elif msg.startswith("rank "):
            m = _RANK_NRANKS.match(msg)
            if m and len(h.ranks) < 4096:
                h.ranks.add((int(m.group(1)), int(m.group(2))))
        elif msg[:1].isdigit():
            m = _NVLS_CHANNELS.search(msg)
            if m:
                n = int(m.group(1))
                h.nvls_channels = n if h.nvls_channels is None else max(h.nvls_channels, n)
                if n:
                    h.nvls.setdefault("used", ref)
        elif msg.startswith("NVLS multicast support is "):
            h.nvls.setdefault("not available" if " not " in msg[:30] else "available", ref)
        elif msg.startswith("Connected NVLS"):
            h.nvls.setdefault("used", ref)
        elif msg.startswith(("Count not open libibverbs", "Could not open libibverbs")):
            h.causes.setdefault("libibverbs", (msg, ref))
        elif msg.startswith("P2P plugin IBext"):
            h.ibext_plugin = h.ibext_plugin or ref
        elif msg.startswith("Failed to init") and "net plugin" in msg.lower():
            h.causes.setdefault("init", (msg, ref))

    def _net_line(self, h: _Host, msg: str, ref: Ref) -> None:
        m = _NET_PLUGIN_LINE.match(msg)
        if not m:
            if msg.startswith("NET : Using interface"):  # NCCL 2.3: the socket interfaces
                iface = msg.split("interface", 1)[1].strip().split(":", 1)[0]
                h.sockets.setdefault(iface, ref)
            elif msg.startswith("Net/IB") and "returned 0 devices" in msg:
                h.causes.setdefault("no_device", (msg, ref))
            elif msg.startswith("NET/OFI "):
                self._ofi_line(h, msg, ref)
            return
        plugin, rest = m.group(1), m.group(2).strip()
        if plugin == "OFI":
            self._ofi_line(h, msg, ref)
            return
        g = _GDR_HCA.match(rest)
        if g:
            h.gdr_hca[g.group(3)] = (g.group(1) == "Enabled", ref)
            return
        if plugin == "IB":
            if rest.startswith("No device found"):
                h.causes.setdefault("no_device", (msg, ref))
            elif rest.startswith("Unable to open device"):
                h.causes.setdefault("ibv_open", (msg, ref))
            elif rest.startswith("Using") and "[" in rest:
                for dev in _DEVICE.finditer(rest):
                    link = dev.group(4)
                    name = f"{dev.group(2)}:{dev.group(3)}"
                    h.devices.setdefault(name, (link + (dev.group(5) or ""), ref))
                h.ib_line = h.ib_line or ref
                oob = _OOB.search(rest)
                if oob:
                    h.oob = oob.group(1)
            return
        if plugin == "Socket":
            if rest.startswith("Using") and "[" in rest:
                for found in _IFACE.finditer(rest):
                    h.socket_lines_24.setdefault(found.group(2), ref)
            return
        if plugin == "Plugin":
            return
        if rest.startswith("Using"):  # another plugin's device line, e.g. NET/FastSocket
            h.other_nets.setdefault(plugin, ref)

    def _ofi_line(self, h: _Host, msg: str, ref: Ref) -> None:
        m = _OFI_PROVIDER.match(msg)
        if m:
            if h.ofi_provider is None:
                h.ofi_provider = (m.group(1), ref)
                nics = _OFI_NICS.search(msg)
                if nics:
                    h.ofi_nics = int(nics.group(1))
            return
        m = _OFI_PLUGIN.match(msg)
        if m:
            if h.ofi_plugin is None:
                h.ofi_plugin = (m.group(1), ref)
            return
        if "disabling GDR" in msg or "GDR not supported" in msg:
            h.causes.setdefault("ofi_nogdr", (msg, ref))

    def _warn(self, h: _Host, msg: str, ref: Ref) -> None:
        job = self.job
        kind = "benign"
        for pattern, k in _WARN_KINDS:  # on a message of at most MAX_KEPT characters
            if pattern.search(msg):
                kind = k
                break
        if kind == "event":
            m = re.search(r"Got async event ?: ?(.*)$", msg)
            event = (m.group(1) if m else msg).strip().lower()
            if any(bad in event for bad in _BAD_EVENTS):
                kind = "runtime"
            else:
                job.event_count += 1
                h.events += 1
                if len(job.events) < MAX_ERRORS:
                    job.events.append((ref, msg))
                return
        if kind == "cause":
            h.causes.setdefault("libibverbs", (msg, ref))
            return
        if kind == "init":
            if "Unable to open device" in msg:
                h.causes.setdefault("ibv_open", (msg, ref))
            else:
                h.causes.setdefault("init", (msg, ref))
            if len(job.init_failures) < MAX_ERRORS:
                job.init_failures.append((ref, msg, h.name))
            return
        if kind == "runtime":
            if "ibv_open_device" in msg:
                h.causes.setdefault("ibv_open", (msg, ref))
                if len(job.init_failures) < MAX_ERRORS:
                    job.init_failures.append((ref, msg, h.name))
                return
            job.error_count += 1
            h.errors += 1
            if len(job.errors) < MAX_ERRORS:
                job.errors.append((ref, msg, h.name))
            net = re.match(r"NET/(\w+)\s*:", msg)
            if net:
                h.error_nets.setdefault(net.group(1), ref)
            gid = re.search(r"localGid (\S+)", msg)
            if gid and gid.group(1).startswith("::ffff:"):
                h.roce_gid = True  # IPv4-mapped GID: RoCE v2
            peer = re.search(r"from peer (\d+\.\d+\.\d+\.\d+)<", msg)
            if peer and gid and gid.group(1).startswith("::ffff:") and gid.group(1)[7:] != peer.group(1):
                job.remote_peer = job.remote_peer or ref

    # -- the verdict -------------------------------------------------------------------------------
    def report(self, *, expect: str | None = None, expect_gdr: bool = False) -> LogReport:
        return judge(self.job, expect=expect, expect_gdr=expect_gdr)
