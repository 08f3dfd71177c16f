#!/usr/bin/env python3
"""Fleet runs over SSH: clustercheck vs ClusterShell's clush and pdsh on 256 loopback hosts.

Starts a real OpenSSH server fleet on loopback (tests/sshd.py: one sshd daemon per host by
default, --hosts-per-daemon up to 16, one port, throwaway keys; addresses 127.0.1.1-128 and
127.0.2.1-128 for 256 hosts), each daemon in a PID namespace with a /proc of its own (unless
--shared-pid-namespace): a node's sessions see the node's processes, not those of other
"nodes" sharing this kernel (clustercheck reads the processes that started during each of its
commands to kill what it left behind; in one shared namespace that is every other host's ~120
live processes, about 4-8 ms of node CPU a host that no real node pays, and with 16 hosts a
daemon the other 15 hosts' sessions). Then it runs, interleaved and in a rotating order, for a
few rounds:

  clustercheck            `clustercheck run --ssh HOSTS --ssh-config CFG -p base -f json --jobs J`
                          (paramiko: one connection and one session per host for all its commands; it
                          negotiates curve25519-sha256)
  clustercheck-1cmd       the same, with a profile of one check that runs clush's probe command
                          as one command (a diagnostic: the transport alone, not the 6 commands)
  clush / clush-c25519    `clush -f J -w HOSTS -o "-F CFG [-oKexAlgorithms=curve25519-sha256]" CMD`
  pdsh / pdsh-c25519      `pdsh -R ssh -f J -w HOSTS CMD`, ssh options in PDSH_SSH_ARGS_APPEND

CMD is one shell command that reads what the `base` profile reads on a node:
/proc/sys/kernel/osrelease and tainted, /sys/devices/system/cpu/online and present,
/proc/meminfo and `ps -e -ww -o comm= -o args=`. The plain clush/pdsh rows use OpenSSH's
default key exchange (sntrup761x25519, ~0.1 s of CPU per handshake on each end); the c25519
rows force curve25519-sha256, what paramiko negotiates: compare clustercheck with those. The
default-kex rows are context and 3-4x slower, so they run one measured round unless
--default-kex-rounds says more (a full run then stays within ~5 minutes).

Reports per tool: median wall time; CPU seconds of the tool (user+sys, its ssh children
included) and of the sshd side (the fleet daemons' reaped children, and the session processes
that outlive their sshd: each daemon is the first process of its namespace and reaps them, or,
with --shared-pid-namespace, the bench is their subreaper: counted either way), both per host; per-host
wall cost (wall x jobs / hosts: how long one of the J slots spends on a host); peak RSS (GNU
`/usr/bin/time -f %M`: the largest single process, so for clush/pdsh one of its ssh clients or
itself, not their sum); and the ratio clustercheck / clush. Output goes to /dev/null, except in
the first measured round, where it is kept and checked: every host must have answered.

Every sshd it starts is stopped by its PID, always. Exits 0 once it has measured (target met
or not; it says which), 2 when it cannot run (no sshd, no venv console script).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as _dt
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # tests.sshd: the test suite's real-sshd fleet

TIME = "/usr/bin/time"  # GNU time, for peak RSS
C25519 = "KexAlgorithms=curve25519-sha256"
PROBE = (
    "cat /proc/sys/kernel/osrelease /proc/sys/kernel/tainted /sys/devices/system/cpu/online "
    "/sys/devices/system/cpu/present /proc/meminfo; ps -e -ww -o comm= -o args="
)
TICK = os.sysconf("SC_CLK_TCK")
WARMUP_HOSTS = 16
# A diagnostic row: clush's probe command as one clustercheck check, so that clustercheck
# differs from clush only in its transport (paramiko, Python), not in how many commands it runs.
ONE_COMMAND_CHECK = f"""from clustercheck import Host, Result, check, ok


@check(timeout=30)
def probe(host: Host) -> Result:
    \"\"\"One command that reads what the base profile reads (clush's probe command).\"\"\"
    out = host.output("sh", "-c", {PROBE!r})
    return ok(f"{{len(out.splitlines())}} lines")
"""


def _shown(path: str) -> str:
    """A path as a reader can use it: relative to the repository when inside it, else its name."""
    repo = Path(__file__).resolve().parents[1]
    inside = Path(path).absolute().is_relative_to(repo)
    return os.path.relpath(path, repo) if inside else os.path.basename(path)


@dataclass
class Subject:
    key: str
    label: str
    argv: list[str]
    env: dict[str, str]
    command: str  # as a user would type it, for the report
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # the tool and its children (user+sys)
    sshd_cpu_s: list[float] = field(default_factory=list)  # the server side of the same run
    rss_kb: list[int] = field(default_factory=list)
    exit_codes: set[int] = field(default_factory=set)
    rounds: int = 1_000_000  # at most this many measured rounds
    answered: int | None = None  # hosts that answered in the warm-up run
    note: str = ""
    missing: str = ""  # why it was not run

    def on_hosts(self, full: str, hosts: str) -> Subject:
        """The same command on other hosts (the warm-up's few)."""
        argv = [hosts if a == full else a for a in self.argv]
        return Subject(self.key, self.label, argv, self.env, self.command)


def addresses(n: int) -> list[str]:
    """n loopback "nodes": 127.0.1.1-128, 127.0.2.1-128, 127.0.3.1-128, ..."""
    return [f"127.0.{1 + i // 128}.{1 + i % 128}" for i in range(n)]


def hostlist(addrs: list[str]) -> str:
    """Slurm/ClusterShell/pdsh hostlist for addresses(n): '127.0.1.[1-128],127.0.2.[1-64]'."""
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for a in addrs:
        prefix, last = a.rsplit(".", 1)
        groups[prefix].append(int(last))
    return ",".join(f"{p}.[{min(v)}-{max(v)}]" if len(v) > 1 else f"{p}.{v[0]}" for p, v in groups.items())


def daemon_pids(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """The sshd daemons' PIDs: each Popen's own, or, where it is `unshare --fork`, its child (the
    daemon, the first process of its PID namespace, which reaps its sessions and their orphans)."""
    pids = []
    for p in procs:
        pid = p.pid
        with contextlib.suppress(OSError, ValueError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "unshare":
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                pid = int(children[0]) if children else pid
        pids.append(pid)
    return pids


def sshd_cpu_s(pids: list[int]) -> float:
    """CPU seconds of the sshd daemons and of their children reaped so far (connections, shells)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / TICK


_ORPHANS = [0.0]  # CPU seconds of reaped orphans (processes of the fleet's sessions that outlived sshd)
_KEEP: set[int] = set()  # this process's children that are no orphans: the sshd daemons


def become_subreaper() -> None:
    """Orphans of the fleet (a session's processes whose sshd exited first) come to this process,
    not to init, so that their CPU is counted on the node side (PR_SET_CHILD_SUBREAPER)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)


def reap_orphans(keep: set[int]) -> None:
    """Reap this process's children that are not the fleet's daemons, adding their CPU."""
    keep = keep | _KEEP
    try:
        kids = {int(k) for t in Path("/proc/self/task").iterdir() for k in (t / "children").read_text().split()}
    except (OSError, ValueError):
        return
    for pid in kids - keep:
        with contextlib.suppress(ChildProcessError, OSError):
            got, _, usage = os.wait4(pid, os.WNOHANG)
            if got:
                _ORPHANS[0] += usage.ru_utime + usage.ru_stime


def node_cpu_s(pids: list[int]) -> float:
    """CPU seconds of the node side so far: the daemons and their reaped children, and orphans."""
    reap_orphans(set(pids))
    return sshd_cpu_s(pids) + _ORPHANS[0]


def settle(pids: list[int], limit_s: float = 10.0) -> None:
    """Wait until the daemons have reaped every connection, so the next run starts clean."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            reap_orphans(set(pids))
            busy = any(Path(f"/proc/{p}/task/{p}/children").read_text().split() for p in pids)
            mine = {k for t in Path("/proc/self/task").iterdir() for k in (t / "children").read_text().split()}
            if not busy and not mine - {str(p) for p in (*pids, *_KEEP)}:
                return
        except OSError:
            time.sleep(0.5)  # no /proc/.../children on this kernel: give them a moment
            return
        time.sleep(0.05)


def run_once(s: Subject, capture: Path | None, rss_file: Path) -> tuple[float, float, int, int | None]:
    """Run a subject once: (wall s, CPU s of it and its children, exit code, peak RSS KiB)."""
    timed = os.access(TIME, os.X_OK)
    argv = [TIME, "-f", "%M", "-o", str(rss_file), *s.argv] if timed else s.argv
    with open(capture, "wb") if capture else contextlib.nullcontext(subprocess.DEVNULL) as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL, env=s.env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
    rss = None
    if timed:
        with contextlib.suppress(OSError, ValueError, IndexError):
            rss = int(rss_file.read_text().split()[-1])
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, rss


def check_output(s: Subject, path: Path, hosts: list[str]) -> None:
    """Count the hosts that answered in a captured run (every one must have)."""
    text = path.read_text(errors="replace")
    if s.key.startswith("clustercheck"):
        try:
            report = json.loads(text)["hosts"]
        except (ValueError, KeyError, TypeError) as exc:
            s.note = f"its output is not a clustercheck JSON report ({type(exc).__name__})"
            s.answered = 0
            return
        statuses: collections.Counter[str] = collections.Counter()
        answered = 0
        for h in report.values():
            checks = h["checks"]
            statuses.update(f"{c['id']}={c['status']}" for c in checks)
            answered += all(c["status"] != "error" for c in checks)
        s.answered = answered
        s.note = ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items()))
    else:  # "HOST: line" per output line
        seen = {m.group(1) for m in re.finditer(r"^(\S+): MemTotal:", text, re.MULTILINE)}
        s.answered = len(seen & set(hosts))
        lines = text.count("\n")
        s.note = f"{lines} output lines, {lines / max(s.answered, 1):.0f} per host"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=256, help="loopback hosts (default 256)")
    ap.add_argument("--jobs", "-j", type=int, default=64, help="hosts at once, for every tool (default 64)")
    ap.add_argument("--rounds", "-n", type=int, default=3, help="measured rounds (default 3)")
    ap.add_argument("--profile", "-p", default="base", help="clustercheck profile (default base)")
    ap.add_argument(
        "--default-kex-rounds",
        type=int,
        default=1,
        help="measured rounds of the clush/pdsh rows with OpenSSH's default key exchange, context for the "
        "target rather than the target, and 3-4x slower (default 1)",
    )
    ap.add_argument(
        "--no-openssh-defaults",
        action="store_true",
        help="skip the clush/pdsh rows with OpenSSH's default key exchange (the slow ones)",
    )
    ap.add_argument(
        "--no-diagnostic",
        action="store_true",
        help="skip the diagnostic row (clush's probe command as one clustercheck check)",
    )
    ap.add_argument(
        "--shared-pid-namespace",
        action="store_true",
        help="run the fleet's sshd daemons in this PID namespace: every host's sessions then see all 256 "
        "hosts' processes in /proc (by default each daemon has a PID namespace and /proc of its own)",
    )
    ap.add_argument(
        "--hosts-per-daemon",
        type=int,
        default=1,
        metavar="N",
        help="loopback hosts each sshd daemon (and so each PID namespace) serves, 1 to 16 (default 1: every host "
        "sees its own processes in /proc, as a node does; 16 was the old way, where each host's sessions saw 15 "
        "other hosts' processes too)",
    )
    ap.add_argument(
        "--tools",
        default="",
        metavar="KEYS",
        help="run only these rows, by key, comma-separated: clustercheck, clustercheck-1cmd, clush, clush-c25519, "
        "pdsh, pdsh-c25519 (default: all; clustercheck always runs)",
    )
    ap.add_argument("--markdown", metavar="FILE", help="write the report as Markdown to FILE (default: stdout)")
    args = ap.parse_args()
    if not 1 <= args.hosts_per_daemon <= 16:
        ap.error("--hosts-per-daemon: 1 to 16 (OpenSSH listens on at most 16 addresses a daemon)")
    if not args.shared_pid_namespace and (os.geteuid() != 0 or not shutil.which("unshare")):
        ap.error("PID namespaces for the fleet need root and unshare(1) (util-linux); or --shared-pid-namespace")
    if min(args.rounds, args.default_kex_rounds, args.hosts, args.jobs) < 1:
        ap.error("--rounds, --default-kex-rounds, --hosts and --jobs must be at least 1")
    if args.hosts > 128 * 254:
        ap.error("--hosts: at most 32512 loopback addresses (127.0.1.1 ... 127.0.254.128)")

    python = sys.executable
    console = Path(python).parent / "clustercheck"
    if not console.exists():
        print(f"bench_fleet: {console} not found: install the package into this venv (make venv)", file=sys.stderr)
        return 2
    for tool in ("/usr/sbin/sshd", "ssh-keygen"):
        if not shutil.which(tool):
            print(f"bench_fleet: {tool} not found: install Debian's openssh-server", file=sys.stderr)
            return 2

    from tests.sshd import start_fleet, start_sshd, stop_sshd

    # `kill` or make's SIGTERM: unwind through the finally below, which stops every sshd.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    become_subreaper()
    tmp = Path(tempfile.mkdtemp(prefix="clustercheck-fleet-"))
    server = proc = None
    fleet_procs: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    try:
        try:
            server, proc = start_sshd(tmp / "sshd")
            addrs = addresses(args.hosts)
            fleet, fleet_procs = start_fleet(
                server,
                addrs,
                tmp / "fleet",
                pid_namespaces=not args.shared_pid_namespace,
                per_daemon=args.hosts_per_daemon,
            )
        except BaseException as exc:  # tests.sshd says why through pytest.fail (a BaseException)
            if isinstance(exc, KeyboardInterrupt):
                raise
            print(f"bench_fleet: cannot start the sshd fleet: {exc}", file=sys.stderr)
            return 2
        _KEEP.update([proc.pid, *(p.pid for p in fleet_procs)])
        pids = daemon_pids(fleet_procs)  # the sshd daemons (in namespaces: unshare's children)
        _KEEP.update(pids)
        # The fleet's own config names 127.0.0.*; ours covers any address. BatchMode: never a prompt.
        cfg = tmp / "ssh_config"
        cfg.write_text(
            f"Host *\n    Port {server.port}\n    User {server.user}\n    IdentityFile {server.client_key}\n"
            f"    IdentitiesOnly yes\n    UserKnownHostsFile {fleet.known_hosts}\n"
            "    GlobalKnownHostsFile /dev/null\n    BatchMode yes\n    LogLevel ERROR\n"
        )
        hl = hostlist(addrs)
        site = tmp / "site"
        site.mkdir()
        (site / "bench.py").write_text(ONE_COMMAND_CHECK)
        one = tmp / "one-command.yaml"
        one.write_text(f"name: one-command\ncheck_dirs: [{site}]\nchecks:\n  bench.probe:\n")
        subjects = make_subjects(console, hl, cfg, one, args)
        wanted = {k.strip() for k in args.tools.split(",") if k.strip()}
        unknown = wanted - {s.key for s in subjects} - {"clush", "clush-c25519", "pdsh", "pdsh-c25519"}
        if unknown:
            print(f"bench_fleet: --tools: no row {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        if wanted:
            subjects = [s for s in subjects if s.key == "clustercheck" or s.key in wanted]
        runnable = [s for s in subjects if not s.missing]

        # Warm-up on a few hosts (page cache, bytecode, sshd's first forks); times dropped.
        for s in runnable:
            settle(pids)
            run_once(s.on_hosts(hl, hostlist(addrs[:WARMUP_HOSTS])), None, tmp / "rss")
        for r in range(args.rounds):
            order = runnable[r % len(runnable) :] + runnable[: r % len(runnable)]
            for s in order:
                if len(s.wall_s) >= s.rounds:
                    continue
                # The first round's output is kept and checked: every host must have answered.
                capture = tmp / f"{s.key}.out" if r == 0 else None
                settle(pids)
                before = node_cpu_s(pids)
                wall, cpu, rc, rss = run_once(s, capture, tmp / "rss")
                if capture is not None:
                    check_output(s, capture, addrs)
                    capture.unlink()
                settle(pids)
                s.sshd_cpu_s.append(node_cpu_s(pids) - before)
                s.wall_s.append(wall)
                s.cpu_s.append(cpu)
                s.exit_codes.add(rc)
                if rss is not None:
                    s.rss_kb.append(rss)
        elapsed = time.monotonic() - started
        md = report(subjects, args, python, tmp, hl, elapsed)
    finally:
        for pid in daemon_pids(fleet_procs):  # by PID, each one we started (unshare ignores SIGTERM:
            with contextlib.suppress(ProcessLookupError):  # its sshd, once it exits, ends it)
                os.kill(pid, signal.SIGTERM)
        for p in fleet_procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        if server is not None and proc is not None:
            stop_sshd(server, proc)
        shutil.rmtree(tmp, ignore_errors=True)

    if args.markdown and args.markdown != "-":
        Path(args.markdown).write_text(md)
        print(md, end="")
    else:
        sys.stdout.write(md)
    return 0


def make_subjects(console: Path, hl: str, cfg: Path, one: Path, args: argparse.Namespace) -> list[Subject]:
    # Children write bytecode like an installed package has it; a sandbox's
    # PYTHONDONTWRITEBYTECODE=1 would make every run recompile clustercheck's modules.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    jobs = str(args.jobs)
    # Not `-o /dev/null`: clustercheck writes -o files atomically (a temporary file renamed
    # over the target), which as root would replace /dev/null itself.
    cc = [str(console), "run", "--ssh", hl, "--ssh-config", str(cfg), "-p", args.profile, "-f", "json"]
    cc += ["--jobs", jobs]
    subjects = [Subject("clustercheck", f"clustercheck -p {args.profile}", cc, env, shlex.join(cc) + " >/dev/null")]
    if not args.no_diagnostic:
        argv = [*cc[:6], "-p", str(one), *cc[8:]]
        label = "clustercheck, 1 command/host (diagnostic)"
        subjects.append(Subject("clustercheck-1cmd", label, argv, env, shlex.join(argv) + " >/dev/null"))
    variants = [("", "OpenSSH default kex"), (C25519, "curve25519")]
    if args.no_openssh_defaults:
        variants = variants[1:]
    clush = shutil.which("clush")
    for kex, what in variants:
        ssh_opts = f"-F {cfg}" + (f" -o{kex}" if kex else "")
        key = "clush" + ("-c25519" if kex else "")
        argv = [clush or "clush", "-f", jobs, "-w", hl, "-o", ssh_opts, PROBE]
        s = Subject(key, f"clush -f {jobs} ({what})", argv, env, shlex.join(argv) + " >/dev/null")
        s.rounds = args.rounds if kex else args.default_kex_rounds
        s.missing = "" if clush else "not installed (apt-get install clustershell)"
        subjects.append(s)
    pdsh = shutil.which("pdsh")
    for kex, what in variants:
        ssh_opts = f"-F {cfg}" + (f" -o{kex}" if kex else "")
        key = "pdsh" + ("-c25519" if kex else "")
        argv = [pdsh or "pdsh", "-R", "ssh", "-f", jobs, "-w", hl, PROBE]
        shown = f"PDSH_SSH_ARGS_APPEND={shlex.quote(ssh_opts)} {shlex.join(argv)} >/dev/null"
        s = Subject(key, f"pdsh -R ssh -f {jobs} ({what})", argv, {**env, "PDSH_SSH_ARGS_APPEND": ssh_opts}, shown)
        s.rounds = args.rounds if kex else args.default_kex_rounds
        s.missing = "" if pdsh else "not installed (apt-get install pdsh)"
        subjects.append(s)
    return subjects


def report(subjects: list[Subject], args: argparse.Namespace, python: str, tmp: Path, hl: str, elapsed: float) -> str:
    n = args.hosts
    per = args.hosts_per_daemon
    slots = min(args.jobs, n)
    lines = [
        f"# Fleet runs over SSH: clustercheck vs clush and pdsh on {n} loopback hosts",
        "",
        f"Target (issue 16): clustercheck's `{args.profile}` profile on {n} hosts, every host judged, takes at most",
        "the wall time of `pdsh -R ssh` with curve25519 (the fastest peer) running a comparable probe set, same",
        "fan-out, same run; per-host client CPU reported (the tool CPU column). Written by",
        "`bench/bench_fleet.py`; only figures from one run are comparable (shared, noisy machines).",
        "",
        "## Figures",
        "",
        f"Date: {_dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}  ",
        f"Machine: {platform.node()}, {os.cpu_count()} CPUs (nproc), Linux {platform.release()}, "
        f"Python {platform.python_version()}, {tool_versions()}  ",
        f"Command: `{shlex.join([_shown(python), *sys.argv])}`  ",
        f"Hosts: {n} loopback addresses ({hl}), served by {-(-n // per)} sshd daemons on one port "
        f"({per} address{'es' if per > 1 else ''} each), on the same CPUs as the tools; fan-out {args.jobs} for "
        "every tool; "
        + (
            "all daemons in the bench's PID namespace (every session sees all hosts' processes in /proc)  "
            if args.shared_pid_namespace
            else "each daemon in a PID namespace with a /proc of its own (a host's sessions see their own "
            "processes, as on a node)  "
            if per == 1
            else f"each daemon in a PID namespace with a /proc of its own (its {per} hosts' sessions see their "
            "own processes and each other's, not the other hosts')  "
        ),
        f"Rounds: {args.rounds} measured ({min(args.rounds, args.default_kex_rounds)} for the OpenSSH-default-kex "
        f"rows), interleaved, order rotating, after a warm-up on {WARMUP_HOSTS} hosts; "
        f"the first round's output is checked; the whole bench took {elapsed:.0f} s  ",
        f"Probe command for clush/pdsh: `{PROBE}`  ",
        "",
        "| what | median wall s | min s | max s | tool CPU ms/host | sshd CPU ms/host "
        f"| wall x {slots} slots / hosts, ms | peak RSS MiB | exit codes | hosts answered |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for s in subjects:
        if s.missing:
            lines.append(f"| {s.label} | {s.missing} | | | | | | | | |")
            continue
        wall = median(s.wall_s)
        rss = f"{median([float(v) for v in s.rss_kb]) / 1024:.0f}" if s.rss_kb else "n/a"
        if len(s.rss_kb) > 1 and max(s.rss_kb) > 1.2 * median([float(v) for v in s.rss_kb]):
            rss += f" (max {max(s.rss_kb) / 1024:.0f})"
        lines.append(
            f"| {s.label} | {wall:.2f} | {min(s.wall_s):.2f} | {max(s.wall_s):.2f} "
            f"| {median(s.cpu_s) / n * 1000:.1f} | {median(s.sshd_cpu_s) / n * 1000:.1f} "
            f"| {wall * slots / n * 1000:.0f} | {rss} | {','.join(map(str, sorted(s.exit_codes)))} "
            f"| {s.answered}/{n} |"
        )
    lines += [
        "",
        "Tool CPU: user+sys of the tool and its children (clush's and pdsh's ssh clients included). sshd CPU: the "
        "server side of the same run (the daemons' reaped connections and sessions). Peak RSS: GNU time's %M, the "
        f"largest single process (for clush/pdsh one process, not their {slots} ssh clients together).",
        "",
        "Exact commands (CFG: a throwaway ssh_config with Port, User, IdentityFile, UserKnownHostsFile, BatchMode; "
        "one-command.yaml: a profile whose one check runs the probe command with `host.output('sh', '-c', PROBE)`):",
        "",
    ]
    for s in subjects:
        shown = s.command.replace(f"{tmp}/ssh_config", "CFG").replace(f"{tmp}/", "").replace(f"{ROOT}/", "")
        lines.append(f"- {s.key}: `{shown}`" + (f" ({s.missing})" if s.missing else ""))
    lines.append("")
    by = {s.key: s for s in subjects if not s.missing and s.wall_s}
    cc = by["clustercheck"]
    lines.append(f"clustercheck's checked run: {cc.note}  ")
    for s in by.values():
        if s.key.startswith(("clush", "pdsh")):  # the probe's output depends on this machine's process count
            lines.append(f"{s.label}'s checked run: {s.note}  ")
    for key in ("clush-c25519", "clush", "pdsh-c25519", "pdsh"):
        if key in by:
            ratio = median(cc.wall_s) / median(by[key].wall_s)
            lines.append(f"clustercheck / {by[key].label}: {ratio:.2f}x (median over median)  ")
    if "pdsh-c25519" in by:
        c = by["pdsh-c25519"]
        judged = cc.answered == n
        held = median(cc.wall_s) <= median(c.wall_s) and judged
        lines.append(
            f"{'TARGET HELD' if held else 'TARGET MISSED'}: clustercheck {median(cc.wall_s):.2f} s "
            f"{'<=' if median(cc.wall_s) <= median(c.wall_s) else '>'} {c.label} {median(c.wall_s):.2f} s "
            f"(the fastest peer), {cc.answered}/{n} hosts judged  "
        )
    else:
        lines.append("TARGET NOT EVALUATED: pdsh -R ssh with curve25519 did not run (not installed, or --tools)  ")
    if any(s.answered is not None and s.answered < n for s in by.values()):
        lines.append("WARNING: a tool did not reach every host in its checked run; its figures are suspect  ")
    lines += ["", "## Reading", "", *reading(by, n, args.jobs)]
    return "\n".join(lines) + "\n"


def reading(by: dict[str, Subject], n: int, jobs: int) -> list[str]:
    cc = by["clustercheck"]
    wall = median(cc.wall_s)
    client = median(cc.cpu_s) / n  # the admin node's CPU seconds per host
    server = median(cc.sshd_cpu_s) / n
    here = 60 / wall * n
    # On a real fleet the sshd side runs on the nodes and the admin node pays the client side;
    # one clustercheck process does its Python work on one core at a time (the GIL).
    per_core = 60 / client if client > 0 else float("inf")
    out = [
        f"- Capacity: {n} hosts took {wall:.1f} s here, about {here:.0f} hosts per 60 s, with every node's sshd on "
        f"the same {os.cpu_count()} CPUs as clustercheck (a floor). On a real fleet the node side "
        f"({server * 1000:.0f} ms of CPU per host here) runs on the nodes, and the admin node pays "
        f"{client * 1000:.0f} ms of CPU per host: one clustercheck process, one core for its Python work, tops "
        f"out near {per_core:.0f} hosts per 60 s, memory is no limit (peak RSS "
        + (f"{median([float(v) for v in cc.rss_kb]) / 1024:.0f} MiB" if cc.rss_kb else "n/a")
        + f" at {n} hosts), and network round trips set the rest: raise --jobs while the CPU is idle.",
        f"- So `clustercheck run --ssh` from one admin node suits up to ~{min(here, per_core):.0f} nodes within a "
        "minute (measured here) and a few thousand at best; beyond that, or when every node must answer within "
        "seconds, or for checks that need a job's allocation (GPUs), run it on the nodes themselves with the "
        "`srun` recipe and merge the per-node JSON with `clustercheck report`: no SSH, each node checks itself.",
    ]
    one = by.get("clustercheck-1cmd")
    if one is not None:
        out.append(
            f"- Where clustercheck's time goes: the diagnostic row runs clush's probe as one command per host: "
            f"{median(one.wall_s):.1f} s against {wall:.1f} s for `{cc.label}`, which reads its files with one `head` "
            f"and its `ps` in one session per host. The transport (paramiko, Python) costs "
            f"{median(one.cpu_s) / n * 1000:.0f} ms of CPU per host for one command; each command is one more "
            "request on the host's one session: a `timeout`, the command, and for a check's command a look at the "
            "processes started since it began."
        )
    return out


def tool_versions() -> str:
    out = []
    for argv, pattern in (
        (["ssh", "-V"], r"OpenSSH_\S+"),
        (["clush", "--version"], r"clush \S+"),
        (["pdsh", "-V"], r"pdsh-\S+"),
    ):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            m = re.search(pattern, p.stdout + p.stderr)
            out.append(m.group(0).rstrip(",") if m else f"{argv[0]} ?")
        except (OSError, subprocess.TimeoutExpired):
            out.append(f"{argv[0]}: not installed")
    try:
        import paramiko

        out.append(f"paramiko {paramiko.__version__}")
    except ImportError:
        pass
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())
