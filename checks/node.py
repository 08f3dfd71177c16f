"""Basic node checks that work on any Linux node: kernel, memory, CPUs, services, modules.

The mount table is clustercheck.facts.mounts (storage.mounts judges it); the process names
node.services reads are clustercheck.facts.processes.

Reads: /proc/sys/kernel/osrelease, /proc/sys/kernel/tainted, /proc/meminfo,
/sys/devices/system/cpu/{online,present}, cpufreq scaling governors (grep),
/proc/modules. Runs: `ps -e`, `systemctl is-active`. Nothing here writes.

These checks are the model the others copy: gather with a `@fact` (one read or command
per subsystem), parse with a pure `parse_*` function, judge in the check, and say what was
observed against what was expected, with units.
"""

from __future__ import annotations

import fnmatch
import re

from clustercheck import Host, Result, Size, check, fact, fail, ok, skip, warn
from clustercheck.errors import HostError
from clustercheck.facts.processes import PROCESS_NAMES, parse_process_names
from clustercheck.registry import human_size

# -- kernel -------------------------------------------------------------------------------

# Documentation/admin-guide/tainted-kernels.rst: bit -> (letter, meaning)
TAINT_FLAGS = {
    0: ("P", "proprietary module loaded"),
    1: ("F", "module force-loaded"),
    2: ("S", "kernel running on an out-of-spec system"),
    3: ("R", "module force-unloaded"),
    4: ("M", "processor reported a machine check exception"),
    5: ("B", "bad page referenced or unexpected page flags"),
    6: ("U", "taint requested by userspace"),
    7: ("D", "kernel died recently (OOPS or BUG)"),
    8: ("A", "ACPI table overridden"),
    9: ("W", "kernel issued a warning"),
    10: ("C", "staging driver loaded"),
    11: ("I", "platform firmware bug worked around"),
    12: ("O", "out-of-tree module loaded"),
    13: ("E", "unsigned module loaded"),
    14: ("L", "soft lockup occurred"),
    15: ("K", "kernel live patched"),
    16: ("X", "auxiliary taint"),
    17: ("T", "kernel built with the struct randomization plugin"),
    18: ("N", "in-kernel test run"),
}


def parse_taint(value: str) -> list[tuple[str, str]]:
    """/proc/sys/kernel/tainted (a decimal bit mask) -> [(letter, meaning)] of the set bits."""
    mask = int(value.strip() or "0")
    return [TAINT_FLAGS.get(bit, ("?", f"unknown taint bit {bit}")) for bit in range(64) if mask >> bit & 1]


def tainted(release: str, taints: list[tuple[str, str]]) -> str:
    """'kernel 5.15.0-91-generic is tainted: D (kernel died recently (OOPS or BUG)); ...': the warn and fail summary."""
    return f"kernel {release} is tainted: " + "; ".join(f"{letter} ({meaning})" for letter, meaning in taints)


def release_key(release: str) -> tuple[int, ...]:
    """'5.15.0-91-generic' -> (5, 15, 0, 91): the numbers, in order, for comparing releases."""
    return tuple(int(n) for n in re.findall(r"\d+", release.split("+")[0])[:4])


@check(needs=["file /proc/sys/kernel/osrelease", "file /proc/sys/kernel/tainted"], timeout=5, action="FIX_CONFIG")
def kernel(
    host: Host,
    *,
    allowed: tuple[str, ...] = (),
    min_release: str = "",
    fail_taints: tuple[str, ...] = ("D", "M", "B", "L"),
    warn_taints: tuple[str, ...] = ("W",),
) -> Result:
    """The kernel release is one the site allows, and the kernel is not tainted by a crash.

    Why: a node booted into the wrong kernel lacks the NVIDIA/OFED modules built for the
    expected one; a kernel tainted by an OOPS (D), a machine check (M), a bad page (B) or
    a soft lockup (L) is not fit for a multi-day job even if it still answers.

    How: reads the release from /proc/sys/kernel/osrelease and matches it against
    `allowed` (shell patterns such as `5.15.0-*-generic`) and `min_release` (numeric
    comparison: 5.15.0-91 < 5.15.0-101); decodes the taint mask of /proc/sys/kernel/tainted.
    Letters in `fail_taints` fail, letters in `warn_taints` warn; the proprietary-module
    taint (P) of the NVIDIA driver is normal.

    Fix: boot the node into the site's kernel; for a crash taint, read `dmesg`/the BMC's
    event log, fix the cause (hardware or driver) and reboot before releasing the node.

    Action: FIX_CONFIG (a kernel not allowed or too old); REBOOT (an OOPS or soft-lockup taint, D
    or L); INVESTIGATE (a machine-check or bad-page taint, M or B, which point at hardware, and
    the warning taint W).
    """
    release = host.read("/proc/sys/kernel/osrelease").strip()
    taints = parse_taint(host.read("/proc/sys/kernel/tainted"))
    data = {"release": release, "taints": [t[0] for t in taints], "facts": {"kernel": release}}
    evidence = [f"kernel release {release}"] + [f"taint {letter}: {meaning}" for letter, meaning in taints]
    if allowed and not any(fnmatch.fnmatchcase(release, p) for p in allowed):
        return fail(
            f"kernel {release}, expected one of {', '.join(allowed)}",
            remedy="Boot the node into an allowed kernel (check the default boot entry).",
            data=data,
            evidence=evidence,
        )
    if min_release and release_key(release) < release_key(min_release):
        return fail(
            f"kernel {release} is older than the minimum {min_release}",
            remedy="Update the kernel (and rebuild the NVIDIA/OFED modules for it), then reboot.",
            data=data,
            evidence=evidence,
        )
    bad = [t for t in taints if t[0] in fail_taints]
    if bad:
        return fail(
            tainted(release, bad),
            remedy="Read `dmesg` and the BMC event log for the cause, fix it, and reboot before releasing the node.",
            data=data,
            evidence=evidence,
            action="INVESTIGATE" if any(letter in "MB" for letter, _ in bad) else "REBOOT",
        )
    worrying = [t for t in taints if t[0] in warn_taints]
    if worrying:
        return warn(
            tainted(release, worrying),
            remedy="Read `dmesg` for the warning's stack trace; it often names a failing driver.",
            data=data,
            evidence=evidence,
            action="INVESTIGATE",
        )
    return ok(f"kernel {release}, no crash taint", data=data, evidence=evidence)


NO_SIZE = Size(0)

# -- memory -------------------------------------------------------------------------------


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {field: bytes} ('MemTotal: 16318292 kB' -> 16709931008)."""
    fields = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$", line)
        if m:
            fields[m.group(1)] = int(m.group(2)) * (1024 if line.rstrip().endswith("kB") else 1)
    return fields


@fact
def meminfo(host: Host) -> dict[str, int]:
    return parse_meminfo(host.read("/proc/meminfo"))


@check(needs=["file /proc/meminfo"], timeout=5, action="REPLACE_HW")
def memory(host: Host, *, min_total: Size, min_available: Size = NO_SIZE) -> Result:
    """The node has at least `min_total` of memory, and `min_available` of it free.

    Why: a failed DIMM is often mapped out at boot and the node comes up smaller, which
    no job notices until data loaders or pinned host buffers run out of memory.

    How: compares MemTotal (and MemAvailable) of /proc/meminfo with the minimums. MemTotal
    is below the installed memory by what firmware and the kernel reserve: set `min_total`
    a few percent under the installed size.

    Fix: check the BMC event log and `dmidecode -t memory` for a missing or failed DIMM;
    for low MemAvailable, look for leftover processes of earlier jobs or a full tmpfs.

    Action: REPLACE_HW (less memory than installed: a failed or mapped-out DIMM); INVESTIGATE
    (too little available: leftover processes or a full tmpfs).
    """
    info = meminfo(host)
    if "MemTotal" not in info:
        raise ValueError("/proc/meminfo has no MemTotal line")
    total, available = info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))
    data = {"total_bytes": total, "available_bytes": available}
    evidence = [f"MemTotal: {human_size(total)}", f"MemAvailable: {human_size(available)}"]
    if total < min_total:
        return fail(
            f"{human_size(total)} of memory, expected at least {human_size(min_total)}",
            remedy="Look for a failed or mapped-out DIMM: BMC event log, `dmidecode -t memory`, "
            "`dmesg | grep -i edac`.",
            data=data,
            evidence=evidence,
        )
    if available < min_available:
        return fail(
            f"{human_size(available)} of memory available, expected at least {human_size(min_available)}",
            remedy="Look for processes left by earlier jobs (`ps aux --sort=-rss`) and full tmpfs mounts "
            "(`df -t tmpfs`).",
            data=data,
            evidence=evidence,
            action="INVESTIGATE",
        )
    return ok(f"{human_size(total)} of memory, {human_size(available)} available", data=data, evidence=evidence)


# -- CPUs ---------------------------------------------------------------------------------


MAX_CPUS = 1 << 16  # above any kernel's NR_CPUS (8192 with MAXSMP): a list past it is not a real node's


def parse_cpu_list(text: str) -> set[int]:
    """Kernel CPU list format ('0-3,8,10-11') -> {0, 1, 2, 3, 8, 10, 11}.

    ValueError for anything else, and for CPU numbers of MAX_CPUS or more (a hostile
    `0-999999999999` would otherwise fill the memory before any time budget could stop it).
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if not 0 <= first <= last < MAX_CPUS:
            raise ValueError(f"{part.strip()!r} is not a range of CPU numbers below {MAX_CPUS}")
        cpus.update(range(first, last + 1))
    return cpus


def format_cpu_list(cpus: set[int]) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8'."""
    parts, ordered = [], sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@check(
    needs=["file /sys/devices/system/cpu/online", "file /sys/devices/system/cpu/present", "command grep"],
    timeout=5,
    action="FIX_CONFIG",
)
def cpu(host: Host, *, expected: int = 0, governor: str = "") -> Result:
    """Every CPU is online (`expected` of them, when set), with the required frequency governor.

    Why: CPUs taken offline (by an admin, a firmware error or a bad BIOS setting) starve
    data loaders and skew Slurm's CPU binding; the `powersave` governor slows the host side
    of every training step.

    How: compares /sys/devices/system/cpu/online with /sys/devices/system/cpu/present
    (any present CPU offline fails) and, when `expected` is more than 0, with `expected`;
    when `governor` is set, reads every CPU's
    cpufreq/scaling_governor with one `grep` (skipped where the node has no cpufreq, as VMs).

    Fix: `echo 1 > /sys/devices/system/cpu/cpuN/online`, check BIOS SMT settings; set the
    governor with `cpupower frequency-set -g performance` (and in the node image).

    Action: FIX_CONFIG (CPUs offline, a count that is not the node's, the wrong governor: BIOS
    and OS settings).
    """
    lists = {}
    for name in ("online", "present"):
        path = f"/sys/devices/system/cpu/{name}"
        try:
            lists[name] = parse_cpu_list(host.read(path))
        except ValueError as exc:
            raise HostError(host.name, f"cannot tell: {path} is not a CPU list: {str(exc)[:200]}") from None
    online, present = lists["online"], lists["present"]
    if not present:  # every Linux node has CPU 0: an empty list is no evidence
        raise HostError(host.name, "cannot tell: /sys/devices/system/cpu/present lists no CPUs")
    offline = present - online
    data: dict[str, object] = {"online": len(online), "present": len(present), "facts": {"cpus online": len(online)}}
    evidence = [f"online CPUs: {format_cpu_list(online)}", f"present CPUs: {format_cpu_list(present)}"]
    if offline:
        return fail(
            f"{len(online)} of {len(present)} CPUs online: "
            + (f"CPU {format_cpu_list(offline)} is" if len(offline) == 1 else f"CPUs {format_cpu_list(offline)} are")
            + " offline",
            remedy="Bring them online (`echo 1 > /sys/devices/system/cpu/cpuN/online`) "
            "or find why firmware disabled them.",
            data=data,
            evidence=evidence,
        )
    if expected and len(online) != expected:
        return fail(
            f"{len(online)} CPUs online, expected {expected}",
            remedy="Check BIOS settings (SMT/hyper-threading, sockets) and `lscpu` against the node's specification.",
            data=data,
            evidence=evidence,
        )
    if governor:
        result = host.run("sh", "-c", "grep -H . /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")
        found: dict[str, list[str]] = {}
        for line in result.stdout.splitlines():
            path, _, value = line.partition(":")
            m = re.search(r"/cpu(\d+)/", path)
            if m and value:
                found.setdefault(value.strip(), []).append(m.group(1))
        data["governors"] = {k: len(v) for k, v in found.items()}
        if not found:
            return ok(
                f"{len(online)} CPUs online; no cpufreq governor on this node (governor not judged)",
                data=data,
                evidence=evidence,
            )
        wrong = {k: v for k, v in found.items() if k != governor}
        if wrong:
            shown = "; ".join(f"{len(v)} CPUs use {k}" for k, v in wrong.items())
            return warn(
                f"{len(online)} CPUs online, but {shown}, expected {governor}",
                remedy=f"`cpupower frequency-set -g {governor}` and set it in the node image.",
                data=data,
                evidence=evidence,
            )
    return ok(
        f"{len(online)} CPUs online" + (f", governor {governor}" if governor else ""), data=data, evidence=evidence
    )


# -- services -----------------------------------------------------------------------------


@check(needs=["command ps", "command systemctl"], timeout=10, action="RESTART_SERVICE")
def services(host: Host, *, running: tuple[str, ...] = (), units: tuple[str, ...] = ()) -> Result:
    """The processes in `running` run, and the systemd `units` are active.

    Why: GPU nodes need daemons that jobs do not start themselves: nvidia-persistenced
    (else every job start pays driver initialisation), nvidia-fabricmanager on NVSwitch
    systems (else CUDA fails with error 802), munge and slurmd.

    How: matches names against `ps -e` (the process's name or its argv[0]'s base name,
    as comm is cut to 15 characters; only those two names are read, never the arguments)
    and asks `systemctl is-active` for the units.

    Fix: `systemctl enable --now UNIT`; read `journalctl -u UNIT` for why it stopped.

    Action: RESTART_SERVICE (the summary names the processes and units).
    """
    if not running and not units:
        return skip("no processes or units required by the profile")
    missing, evidence = [], []
    if running:
        names = parse_process_names(host.output(*PROCESS_NAMES))
        if not names:  # ps lists itself at least: an empty answer is no evidence of anything
            raise HostError(host.name, "cannot tell: `ps -e` listed no processes")
        for name in running:
            if name in names or name[:15] in names:
                evidence.append(f"process {name} is running")
            else:
                missing.append(f"process {name} is not running")
    if units:
        result = host.run("systemctl", "is-active", *units)
        if result.exit_code == 127 or result.timed_out:
            raise RuntimeError(f"cannot ask systemd about units: {result.describe()}")
        states = result.stdout.split()
        for unit, state in zip(units, states + ["unknown"] * (len(units) - len(states)), strict=False):
            if state == "active":
                evidence.append(f"unit {unit} is active")
            else:
                missing.append(f"unit {unit} is {state}")
    data = {"missing": missing}
    if missing:
        return fail(
            "; ".join(missing),
            remedy="`systemctl enable --now UNIT`; `journalctl -u UNIT` tells why it stopped.",
            data=data,
            evidence=evidence,
        )
    said = [f"{len(running)} processes running"] * bool(running) + [f"{len(units)} units active"] * bool(units)
    return ok(", ".join(said), data=data, evidence=evidence)


# -- kernel modules -----------------------------------------------------------------------


def parse_modules(text: str) -> set[str]:
    """/proc/modules -> names of the loaded modules."""
    return {line.split()[0] for line in text.splitlines() if line.strip()}


@check(needs=["file /proc/modules"], timeout=5, action="FIX_CONFIG")
def modules(host: Host, *, loaded: tuple[str, ...] = (), absent: tuple[str, ...] = ()) -> Result:
    """The kernel modules in `loaded` are loaded and those in `absent` are not.

    Why: GPUDirect RDMA silently stays off without `nvidia_peermem`; CUDA IPC and UVM need
    `nvidia_uvm`; RDMA needs `ib_uverbs` (and `rdma_ucm`); `nouveau` loaded blocks the
    NVIDIA driver.

    How: reads /proc/modules (module names use underscores there: nvidia_peermem).

    Fix: `modprobe MODULE` and add it to /etc/modules-load.d/; blacklist unwanted ones.

    Action: FIX_CONFIG.
    """
    if not loaded and not absent:
        return skip("no modules required or forbidden by the profile")
    present = parse_modules(host.read("/proc/modules"))
    norm = {m.replace("-", "_") for m in present}
    missing = [m for m in loaded if m.replace("-", "_") not in norm]
    unwanted = [m for m in absent if m.replace("-", "_") in norm]
    problems = [f"module {m} is not loaded" for m in missing] + [f"module {m} is loaded" for m in unwanted]
    data = {"missing": missing, "unwanted": unwanted}
    if problems:
        return fail(
            "; ".join(problems),
            data=data,
            remedy="`modprobe MODULE` (persist in /etc/modules-load.d/); "
            "blacklist unwanted ones and rebuild the initramfs.",
        )
    return ok(
        f"{len(loaded)} required modules loaded" + (f", {len(absent)} unwanted absent" if absent else ""), data=data
    )
