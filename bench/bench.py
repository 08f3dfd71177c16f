#!/usr/bin/env python3
"""Wall time of the Slurm prolog path, side by side with its baselines and with LBNL NHC.

Runs N rounds (default 15); each round runs, one after the other and in a rotating order:

  python-pass        `<venv python> -c pass`              interpreter start-up, the floor
  import             `<venv python> -c "import clustercheck"`
  clustercheck       `<venv>/bin/clustercheck run --local --profile prolog --format json`
  prolog             `<venv>/bin/clustercheck prolog --state-file TMP --syslog-socket ''`
                     (the Slurm prolog mode: the same profile, plus the job environment, the
                     watchdog and the state file; no syslog, so a benchmark does not flood it)
  prolog-replay      `clustercheck prolog --replay fixtures/prolog-gpu/driver-gone ...`: the GPU
                     prolog judging a recorded GPU node (its files, commands and NVML record
                     replayed: no NVML start-up, which is reported apart)
  prolog-cpu         `clustercheck prolog --profile prolog-cpu ...`: the CPU node's prolog, live
  nhc                `$NHC -a -c $NHC_CONF -l LOG -t 10 MARK_OFFLINE=0 OFFLINE_NODE=: ONLINE_NODE=:`
                     (only when $NHC is set): bench/nhc.conf, the GPU prolog's checks said the
                     NHC way
  nhc-cpu            the same with $NHC_CPU_CONF (default bench/nhc-cpu.conf): the CPU prolog's
  nvml, nvidia-smi   only where this machine has an NVIDIA driver (/proc/driver/nvidia):
                     `python -c "from clustercheck.probes import nvml; nvml.local()"` beside the
                     same import alone (NVML's own start-up: pynvml, nvmlInit, the record,
                     nvmlShutdown), and `nvidia-smi -L` (what each nvidia-smi line of NHC starts)
  pyz-prolog         `python3 clustercheck.pyz prolog ...`: the single file (tools/build_pyz.py,
                     built from this checkout) run by a venv with no packages (a node's own
                     python3), its cache unpacked; `pyz-pass` is that python's `-c pass`
  pyz-first          the same with an empty cache: the first job after an upgrade unpacks it
  pyz-first-8x       8 of those at once on one empty cache (8 job steps starting together):
                     the wall time until all 8 have ended

and reports the median and 90th percentile wall time of each, the peak RSS of each (median
of 3 extra, untimed runs under GNU `/usr/bin/time -f %M`), and the ratios of both clustercheck
rows to NHC and to python-pass. Timings on shared machines move by tens of percent between runs,
so only figures from the same run are compared.

Environment:
  NHC        path of an `nhc` executable; unset: NHC is reported as not installed here
  NHC_CONF   its config (default: bench/nhc.conf beside this script)
  NHC_CPU_CONF  the CPU prolog's config (default: bench/nhc-cpu.conf)
  NHC_ARGS   extra arguments for nhc (shell words), e.g. "-D /opt/nhc/etc"
  NHC's own NHC_CFG_* variables (e.g. NHC_CFG_PREFIX) pass through to it.

Always exits 0 once it has measured, target met or not; it prints whether the target
(each clustercheck prolog-path median <= the median of NHC on the same checks) held. Exits 2 when it cannot run at all.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROFILE = "prolog"
TIME = "/usr/bin/time"  # GNU time, for peak RSS
RSS_RUNS = 3


@dataclass
class Subject:
    key: str
    label: str
    argv: list[str]
    env: dict[str, str]
    wall_ms: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)  # from separate, untimed runs under GNU time
    exit_codes: set[int] = field(default_factory=set)
    note: str = ""
    prepare: Callable[[], None] | None = None  # before each run, untimed (empty the cache)
    at_once: int = 1  # start this many copies together; the time is until the last one ends


def run_once(argv: list[str], env: dict[str, str], capture: Path | None = None) -> tuple[float, int]:
    """Run argv once, output to /dev/null (or to `capture`): (wall ms, exit code)."""
    with open(capture, "wb") if capture else contextlib.nullcontext(subprocess.DEVNULL) as out:
        start = time.perf_counter()
        rc = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL, env=env)
        return (time.perf_counter() - start) * 1000.0, rc


def run_subject(s: Subject) -> tuple[float, int]:
    if s.prepare is not None:
        s.prepare()
    if s.at_once == 1:
        return run_once(s.argv, s.env)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            s.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=s.env
        )
        for _ in range(s.at_once)
    ]
    codes = [p.wait() for p in procs]
    return (time.perf_counter() - start) * 1000.0, max(codes)


def single_file(tmpdir: str, env: dict[str, str], prolog_args: list[str]) -> list[Subject]:
    """The single file's rows: built here, run by a python3 with no packages at all."""
    tmp = Path(tmpdir)
    pyz = tmp / "clustercheck.pyz"
    built = subprocess.run(
        [sys.executable, str(HERE.parent / "tools" / "build_pyz.py"), "--source", str(HERE.parent), "-o", str(pyz)],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        print(f"bench: the single file did not build: {built.stderr.strip()}", file=sys.stderr)
        return []
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp / "bare")], check=True)
    python = str(tmp / "bare" / "bin" / "python3")
    warm, first = tmp / "cache-warm", tmp / "cache-first"

    def empty() -> None:
        shutil.rmtree(first, ignore_errors=True)

    def cache(path: Path) -> dict[str, str]:
        return {**env, "CLUSTERCHECK_CACHE": str(path)}

    argv = [python, str(pyz), *prolog_args]
    size = f"{pyz.stat().st_size / 1e6:.2f} MB"
    return [
        Subject("pyz-pass", "bare python3 -c pass (the single file's interpreter)", [python, "-c", "pass"], env),
        Subject("pyz-prolog", f"python3 clustercheck.pyz prolog ({size}; cache unpacked)", argv, cache(warm)),
        Subject(
            "pyz-first", "python3 clustercheck.pyz prolog, first run (empty cache)", argv, cache(first), prepare=empty
        ),
        Subject(
            "pyz-first-8x",
            "8 x python3 clustercheck.pyz prolog at once, empty cache",
            argv,
            cache(first),
            prepare=empty,
            at_once=8,
        ),
    ]


def peak_rss_kb(argv: list[str], env: dict[str, str], tmpdir: str) -> int | None:
    """Peak RSS (KiB) of argv as GNU time reports it (%M); None without /usr/bin/time.

    Not from wait4(2) in this process: Linux charges a child, at exec, the peak RSS of the
    memory it was forked from, so every direct child of this Python process would show at
    least this process's own ~15 MiB. GNU time is small, and the command is its child.
    """
    if not os.access(TIME, os.X_OK):
        return None
    report = Path(tmpdir) / "rss"
    subprocess.call(
        [TIME, "-f", "%M", "-o", str(report), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        return int(report.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def nhc_version(path: str) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "unknown"
    m = re.search(r'^NHC_VERSION="([^"]+)"', text, re.MULTILINE)
    return m.group(1) if m else "unknown"


def bash_version() -> str:
    try:
        out = subprocess.run(["bash", "--version"], capture_output=True, text=True, check=False).stdout
        return out.splitlines()[0] if out else "unknown"
    except OSError:
        return "not found"


REPLAY = "fixtures/prolog-gpu/driver-gone"  # a recorded GPU node (its driver gone), the GPU prolog's own fixture
CPU_PROFILE = "prolog-cpu"


def uptime_text() -> str:
    """The load averages (1/5/15 min) as `uptime` shows them: the CPUs here are shared."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def nhc_subject(key: str, label: str, nhc_path: str, conf: str, log: Path, env: dict[str, str]) -> Subject:
    nhc_env = dict(env)
    nhc_env.setdefault("NHC_BENCH_THREADS", str(os.cpu_count() or 1))
    # never mark the node offline/online through the resource manager from a benchmark: NHC's own
    # variables, as `VAR=value` arguments (every NHC version takes them; 1.5 has no -r)
    # -a: run every check line, as clustercheck runs every check (without it NHC stops at the first
    # failure, here the modules line on a VM without /proc/modules, and times fewer checks)
    argv = [nhc_path, "-a", "-c", conf, "-l", str(log), "-t", "10"]
    argv += shlex.split(os.environ.get("NHC_ARGS", ""))  # options first: getopts stops at VAR=value
    argv += ["MARK_OFFLINE=0", "OFFLINE_NODE=:", "ONLINE_NODE=:"]
    return Subject(key, f"{label}: nhc {nhc_version(nhc_path)} ({Path(conf).name})", argv, nhc_env)


def nhc_broken(log: Path, codes: list[int]) -> str:
    """Why an NHC row did not run its checks (its scripts not found, ...), or '' when it did."""
    logged = log.read_text(errors="replace").splitlines() if log.exists() else []
    # its scripts not loaded (wrong -D): no checks ran, exit 0; with -a the exit code is the number
    # of failed checks, so a non-zero code counts only with "Health check failed" in its log
    broken = [ln.strip() for ln in logged if re.search(r"\b(nhc_\w+|check_\w+): command not found", ln)]
    judged = any("Health check failed" in ln for ln in logged)
    if codes and (broken or (set(codes) - {0} and not judged)):
        said = broken[:1]
        return f"exited {','.join(map(str, codes))} but did not run its checks" + (
            f" ({said[0][:120]}; NHC_ARGS='-D PREFIX/etc/nhc' names its scripts)" if said else ""
        )
    return ""


def state_note(state_file: Path) -> str:
    """A prolog row's warm-up verdict, from its state file."""
    try:
        state = json.loads(state_file.read_text())
        note = f"verdict {state['verdict']} (exit {state['exit_code']}), " + ", ".join(
            f"{c['id']}={c['status']}" for c in state["checks"]
        )
        if state["verdict"] == "internal-error":
            note += f"; internal error: {state.get('error')}: figures are meaningless"
        return note
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"no readable state file ({type(exc).__name__}); figures are suspect"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", "-n", type=int, default=15, help="measured rounds (default 15)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default 1)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown to FILE ('-': stdout)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    # started in the background (`make bench &`, nohup), SIGINT is ignored and every child inherits
    # that: NHC then cannot stop its watchdog with SIGINT and waits ~6 s for it on every run
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    python = sys.executable  # the venv's own interpreter (never a pyenv shim)
    bindir = Path(python).parent
    console = bindir / "clustercheck"
    if not console.exists():
        print(f"bench: {console} not found: install the package into this venv (make venv)", file=sys.stderr)
        return 2
    replay = HERE.parent / REPLAY
    if not (replay / "fixture.yaml").is_file():
        print(f"bench: {replay}/fixture.yaml not found: run from a checkout of clustercheck", file=sys.stderr)
        return 2

    # Children write bytecode like an installed package has it (pip compiles at install time);
    # a sandbox's PYTHONDONTWRITEBYTECODE=1 would make every run recompile clustercheck's modules.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    tmp = tempfile.TemporaryDirectory(prefix="clustercheck-bench-")
    states = {key: Path(tmp.name) / f"{key}-state.json" for key in ("prolog", "prolog-replay", "prolog-cpu")}

    def prolog(key: str, *extra: str) -> list[str]:
        return [str(console), "prolog", *extra, "--state-file", str(states[key]), "--syslog-socket", ""]

    subjects = [
        Subject("pass", "python -c pass", [python, "-c", "pass"], env),
        Subject("import", "python -c 'import clustercheck'", [python, "-c", "import clustercheck"], env),
        Subject(
            "clustercheck",
            f"clustercheck run --local --profile {PROFILE} --format json",
            [str(console), "run", "--local", "--profile", PROFILE, "--format", "json"],
            env,
        ),
        Subject("prolog", f"clustercheck prolog (profile {PROFILE}; state file, no syslog)", prolog("prolog"), env),
        Subject(
            "prolog-replay",
            f"clustercheck prolog --replay {REPLAY} (profile {PROFILE}, a recorded GPU node)",
            prolog("prolog-replay", "--replay", str(replay)),
            env,
        ),
        Subject(
            "prolog-cpu",
            f"clustercheck prolog --profile {CPU_PROFILE} (this node)",
            prolog("prolog-cpu", "--profile", CPU_PROFILE),
            env,
        ),
    ]
    # ordinary keys: the single file's rows have their own state file
    subjects += single_file(
        tmp.name, env, ["prolog", "--state-file", str(Path(tmp.name) / "pyz-state.json"), "--syslog-socket", ""]
    )
    # NVML's own start-up, apart: only where there is a driver to start (a GPU node)
    nvml_state = ""
    if os.path.exists("/proc/driver/nvidia"):
        probe = "from clustercheck.probes import nvml"
        subjects.append(Subject("nvml-import", f"python -c '{probe}'", [python, "-c", probe], env))
        started = probe + "; nvml.local()"
        subjects.append(Subject("nvml", f"python -c '{started}'", [python, "-c", started], env))
        smi = shutil.which("nvidia-smi")
        if smi:
            subjects.append(Subject("nvidia-smi", "nvidia-smi -L", [smi, "-L"], env))
    else:
        nvml_state = (
            "not measured: this machine has no NVIDIA driver (no /proc/driver/nvidia); "
            "run bench/bench.py on a GPU node to add it"
        )
    nhc_path = os.environ.get("NHC", "")
    nhc_conf = os.environ.get("NHC_CONF", str(HERE / "nhc.conf"))
    nhc_cpu_conf = os.environ.get("NHC_CPU_CONF", str(HERE / "nhc-cpu.conf"))
    nhc_logs = {"nhc": Path(tmp.name) / "nhc.log", "nhc-cpu": Path(tmp.name) / "nhc-cpu.log"}
    nhc_state = "not installed here (set NHC to an nhc executable)"
    if nhc_path:
        if not (os.path.isfile(nhc_path) and os.access(nhc_path, os.X_OK)):
            nhc_state = f"NHC={nhc_path} is not an executable file"
        else:
            subjects.append(nhc_subject("nhc", "GPU prolog's checks", nhc_path, nhc_conf, nhc_logs["nhc"], env))
            subjects.append(
                nhc_subject("nhc-cpu", "CPU prolog's checks", nhc_path, nhc_cpu_conf, nhc_logs["nhc-cpu"], env)
            )
            nhc_state = ""

    load_before = uptime_text()
    # Warm-up: fills the page cache and bytecode caches; its output is checked, its times dropped.
    for _ in range(args.warmup):
        for s in subjects:
            capture = Path(tmp.name) / f"{s.key}.out"
            _, rc = run_once(s.argv, s.env, capture) if s.at_once == 1 and not s.prepare else run_subject(s)
            s.exit_codes.add(rc)
    cc = next(s for s in subjects if s.key == "clustercheck")
    if args.warmup:
        try:
            report = json.loads((Path(tmp.name) / "clustercheck.out").read_text())
            hosts = report["hosts"]
            checks = [c for h in hosts.values() for c in h["checks"]]
            cc.note = f"{len(checks)} checks: " + ", ".join(f"{c['id']}={c['status']}" for c in checks)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            cc.note = f"its output is not a clustercheck JSON report ({type(exc).__name__}); figures are suspect"
        for s in subjects:
            if s.key in states:
                s.note = state_note(states[s.key])
    if any(rc not in (0, 1, 2, 3) for rc in cc.exit_codes):
        cc.note += f"; exit codes {sorted(cc.exit_codes)}: the run failed, figures are meaningless"

    for r in range(args.rounds):
        order = subjects[r % len(subjects) :] + subjects[: r % len(subjects)]
        for s in order:
            wall, rc = run_subject(s)
            s.wall_ms.append(wall)
            s.exit_codes.add(rc)
    for _ in range(RSS_RUNS):
        for s in subjects:
            if s.at_once > 1:
                continue
            if s.prepare is not None:
                s.prepare()
            rss = peak_rss_kb(s.argv, s.env, tmp.name)
            if rss is not None:
                s.rss_kb.append(rss)
    load_after = uptime_text()

    by = {s.key: s for s in subjects}
    med = {s.key: statistics.median(s.wall_ms) for s in subjects}

    lines: list[str] = []
    lines.append(f"Date: {_dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}")
    lines.append(
        f"Machine: {platform.node()}, {os.cpu_count()} CPUs (nproc), Linux {platform.release()}, "
        f"Python {platform.python_version()} ({python}), {bash_version()}"
    )
    # NHC's copy lives in a folder of this machine: the report names it by its layout (PREFIX, as
    # "Redoing the NHC side" lays it out), never by this machine's path
    prefix = os.environ.get("NHC_CFG_PREFIX", "")

    def shown(value: str) -> str:
        return value.replace(prefix, "PREFIX") if prefix else value

    shown_env = " ".join(
        f"{k}={shlex.quote(shown(os.environ[k]))}"
        for k in ("NHC", "NHC_CONF", "NHC_CPU_CONF", "NHC_ARGS", "NHC_CFG_PREFIX")
        if os.environ.get(k)
    )
    cmd = " ".join(shlex.quote(a) for a in [python, *sys.argv])
    lines.append(f"Command: `{(shown_env + ' ') if shown_env else ''}{cmd}`")
    lines.append(f"Rounds: {args.rounds} measured (+{args.warmup} warm-up), interleaved, order rotating each round")
    # a busy machine slows every row: the ratios of one run still compare, the absolute figures less
    lines.append(f"Load average (1, 5, 15 min, as uptime shows it) before: {load_before}; after: {load_after}")
    lines.append("")
    lines.append("| what | median ms | p90 ms | min ms | peak RSS MiB | exit codes |")
    lines.append("| --- | ---: | ---: | ---: | ---: | --- |")
    for s in subjects:
        rss_txt = f"{statistics.median(s.rss_kb) / 1024:.1f}" if s.rss_kb else "n/a (no /usr/bin/time)"
        codes = ",".join(map(str, sorted(s.exit_codes)))
        lines.append(
            f"| {s.label} | {med[s.key]:.1f} | {p90(s.wall_ms):.1f} | {min(s.wall_ms):.1f} | {rss_txt} | {codes} |"
        )
    if nhc_state:
        lines.append(f"| nhc | {nhc_state} | | | | |")
    lines.append("")
    lines.append(f"clustercheck / python -c pass: {med['clustercheck'] / med['pass']:.2f}x (median over median)")
    lines.append(
        f"clustercheck above interpreter start-up: {med['clustercheck'] - med['pass']:.1f} ms; "
        f"importing the package: {med['import'] - med['pass']:.1f} ms"
    )
    if cc.note:
        lines.append(f"clustercheck warm-up run: {cc.note}")
    lines.append(
        f"clustercheck prolog / python -c pass: {med['prolog'] / med['pass']:.2f}x; "
        f"prolog mode / run --local: {med['prolog'] / med['clustercheck']:.2f}x"
    )
    for key, what in (
        ("prolog", "clustercheck prolog"),
        ("prolog-replay", "clustercheck prolog --replay"),
        ("prolog-cpu", f"clustercheck prolog --profile {CPU_PROFILE}"),
    ):
        if by[key].note:
            lines.append(f"{what} warm-up run: {by[key].note}")
    if "pyz-prolog" in by:
        lines.append(
            f"single file prolog / venv prolog: {med['pyz-prolog'] / med['prolog']:.2f}x "
            f"({med['pyz-prolog'] - med['prolog']:+.1f} ms); above its python -c pass: "
            f"{med['pyz-prolog'] - med['pyz-pass']:.1f} ms"
        )
        lines.append(
            f"single file, first run after an upgrade (unpacking): {med['pyz-first']:.1f} ms "
            f"(+{med['pyz-first'] - med['pyz-prolog']:.1f} ms); 8 at once: all done in {med['pyz-first-8x']:.1f} ms"
        )
    if "nvml" in by:
        smi = f"; one `nvidia-smi -L`: {med['nvidia-smi']:.1f} ms" if "nvidia-smi" in by else ""
        lines.append(
            f"NVML start-up: {med['nvml'] - med['nvml-import']:.1f} ms (import pynvml, nvmlInit, the record, "
            f"nvmlShutdown; median over median){smi}"
        )
    else:
        lines.append(f"NVML start-up: {nvml_state}")
    for key in ("nhc", "nhc-cpu"):
        if key in by:
            why = nhc_broken(nhc_logs[key], sorted(by[key].exit_codes))
            if why:
                nhc_state = f"({key}) {shown(why)}"
                del by[key]
    if "nhc" in by and "nhc-cpu" in by:
        # a watchdog that one SIGINT did not stop costs at least one more second (see the Reading)
        stalls = ", ".join(
            f"{sum(w > min(by[k].wall_ms) + 900 for w in by[k].wall_ms)} of {len(by[k].wall_ms)} ({k})"
            for k in ("nhc", "nhc-cpu")
        )
        lines.append(f"NHC runs 0.9 s or more over its fastest (a watchdog that SIGINT did not stop): {stalls}")
        lines.append(f"clustercheck / NHC: {med['clustercheck'] / med['nhc']:.2f}x (median over median)")
        lines.append(f"clustercheck prolog / NHC: {med['prolog'] / med['nhc']:.2f}x (median over median)")
        judged = [
            ("clustercheck", "run --local --profile prolog", "nhc"),
            ("prolog", "clustercheck prolog", "nhc"),
            ("prolog-replay", f"clustercheck prolog --replay {REPLAY}", "nhc"),
        ]
        if "pyz-prolog" in by:  # what a node without the venv runs: the single file, its cache unpacked
            judged.append(("pyz-prolog", "single file clustercheck.pyz prolog", "nhc"))
        judged.append(("prolog-cpu", f"clustercheck prolog --profile {CPU_PROFILE} (vs nhc-cpu.conf)", "nhc-cpu"))
        for key, what, peer in judged:
            held = med[key] <= med[peer]
            verdict = "TARGET HELD" if held else "TARGET MISSED"
            lines.append(
                f"{verdict}: {what} median {med[key]:.1f} ms {'<=' if held else '>'} NHC median {med[peer]:.1f} ms"
            )
    else:
        lines.append(f"TARGET NOT EVALUATED: NHC {nhc_state}")

    tmp.cleanup()
    if args.markdown:
        # Markdown: a hard line break (two spaces) after each non-table line.
        md = "\n".join(ln + "  " if ln and not ln.startswith("|") else ln for ln in lines) + "\n"
        md = RESULTS_HEADER + md.replace(f"{HERE.parent}/", "") + RESULTS_NOTES  # paths relative to the repo
        if args.markdown == "-":
            sys.stdout.write(md)
            return 0
        write_section(Path(args.markdown), md)
    print("\n".join(lines))
    return 0


START, END = "<!-- bench_prolog -->", "<!-- /bench_prolog -->"


def write_section(path: Path, md: str) -> None:
    """Replace this benchmark's part of `path`, keeping the other benchmarks' marked sections."""
    old = path.read_text() if path.exists() else ""
    block = f"{START}\n{md}{END}\n"
    if START in old and END in old:
        before, rest = old.split(START, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        new = before + block + ("\n" + after if after else "")
    else:  # an older file: its prolog part is the unmarked text before the first marked section
        head, sep, tail = old.partition("<!-- /bench_summary -->")
        summary, body = (head + sep + "\n", tail) if sep else ("", old)
        at = body.find("<!-- bench_")
        others = body[at:] if at >= 0 else ""
        new = summary + block + ("\n" + others if others else "")
    path.write_text(new)


RESULTS_HEADER = """# Prolog path: clustercheck vs LBNL NHC

Target (issues #2, #6 and #16): `clustercheck run --local --profile prolog --format json` and
`clustercheck prolog` (the Slurm prolog mode: what slurmd runs on every job start) with the
GPU-aware default profile (profiles/prolog.yaml), live on this node and replaying a recorded GPU
node (fixtures/prolog-gpu/driver-gone), each take at most LBNL NHC's wall time on the same checks
said the NHC way (bench/nhc.conf); the CPU node's prolog (profiles/prolog-cpu.yaml) at most NHC's
on its checks (bench/nhc-cpu.conf). Measured in the same run, with `python -c pass` beside them;
NVML's own start-up is reported apart. Written by `make bench`; only figures from one run are
comparable (these machines are shared and noisy: the load line says how busy this one was).

## Figures

"""

RESULTS_NOTES = """
## Reading

- Both tools report the same problems on this VM: it has no `/proc/modules` (a kernel without
  module support) and no NVIDIA driver, so `node.modules` is `error` and `gpu.count` fails (exit
  2: the GPU prolog refuses the job on a GPU node whose driver is gone), and NHC's modules line
  and its nvidia-smi lines fail. All run every other check first; the exit codes do not change
  the timings. The recorded GPU node (fixtures/prolog-gpu/driver-gone, recorded on such a VM with
  BNL SDCC's slurm.conf giving it 2 GPUs) is the same case replayed: its files, commands and NVML
  record come from the fixture, so NHC live on this VM runs the same checks on the same state.
- NVML's own start-up (loading libnvidia-ml, nvmlInit, the per-GPU queries, nvmlShutdown) is in
  no row above: this VM has no driver, and the replay reads the recorded NVML record. On a GPU
  node the run adds the `nvml` rows (`NVML start-up:` line): clustercheck pays it once per
  prolog, NHC once per nvidia-smi line (four in bench/nhc.conf). It has not been measured for
  this section: no GPU machine was available to this work.
- NHC runs every command of a check (`check_cmd_output`, `check_cmd_status`, `check_cmd_dmesg`)
  under a watchdog process of its own and stops it with SIGINT after the command, waiting in
  0.1 s steps (`kill_watchdog`): each command line costs about 0.1 s, plus 0.1 s for the main
  watchdog. When SIGINT does not stop a watchdog (it arrived before the watchdog set its trap:
  seen with commands that end at once, like a missing nvidia-smi, and more often on a busy
  machine) NHC sends SIGINT again each second, up to four times, then SIGKILL: that run takes 1 to
  5 s longer. The `0.9 s or more over its fastest` line counts those runs; the medians include
  them, as a site's prolog would pay them.
- The clustercheck prolog path imports neither Typer (0.29 pulls in pydantic: ~85 ms), Rich,
  paramiko nor psutil: `main.main()` runs a plain `run --local` and `prolog` itself
  (tests/test_cli.py and tests/test_prolog.py assert it). What remains is interpreter start-up,
  the package and PyYAML imports, and the profile load; the four checks take well under a
  millisecond each.
- `clustercheck prolog` does what `run` does plus reading the job environment, starting its
  watchdog thread and writing the JSON state file atomically; it prints a one-line verdict
  instead of the JSON report. It runs with `--syslog-socket ''` (no syslog: a benchmark must not
  flood it; one datagram to /dev/log costs microseconds, and this VM has no /dev/log).
- The single file's rows (`make dist`'s dist/clustercheck.pyz, built here from the checkout) run
  it with a venv that has no packages, as a node's own `python3`: its start-up misses the venv's
  site-packages (`.pth` files, the editable install's finder), and adds the reading of its ~1 MB
  of payload comment lines (~10 ms). The first run of a build unpacks it and compiles the
  prolog's modules (clustercheck, PyYAML) once; 8 first runs at once wait on one lock for that.
- Sites run NHC with its watchdog on (`-t`), which is what is compared here; its command checks
  refuse to run without one (`Command timeout 5 exceeds NHC timeout 0`).

## Redoing the NHC side

NHC is not a Debian 12 package and is not committed here. From a clone of the `mej/nhc`
repository, branch `dev` at 7d9cec9 (2023-09-20, `NHC_VERSION="1.5"`; master stops at 1.4.3 and
has no such line), take `nhc` and every `scripts/*.nhc` (as NHC installs them: the command and
filesystem checks live in lbnl_cmd.nhc and lbnl_fs.nhc):

    git -C nhc archive 7d9cec9 nhc scripts | tar -x -C SRC
    mkdir -p PREFIX/sbin PREFIX/etc/nhc/scripts PREFIX/libexec/nhc PREFIX/var/run/nhc PREFIX/var/log
    install -m 755 SRC/nhc PREFIX/sbin/nhc && cp SRC/scripts/*.nhc PREFIX/etc/nhc/scripts/

then `make bench NHC=PREFIX/sbin/nhc NHC_ARGS="-D PREFIX/etc/nhc" NHC_CFG_PREFIX=PREFIX` (-D: where
its scripts are; NHC_CFG_PREFIX: the report writes that folder as PREFIX). bench.py runs it with
`-a -c bench/nhc.conf -l LOG -t 10 MARK_OFFLINE=0 OFFLINE_NODE=: ONLINE_NODE=:` (-a: every check
line, not only those before the first failure; never drain or resume through Slurm), and the same
with bench/nhc-cpu.conf. `bench/nhc.conf` says which clustercheck check each of its lines matches,
and what NHC cannot say the same way.
"""


if __name__ == "__main__":
    sys.exit(main())
