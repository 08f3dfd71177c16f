"""RDMA readiness: InfiniBand/RoCE HCAs and ports, the devices jobs open, locked memory, NCCL settings.

Reads, in one shell command per node (`sh -c`, read only): `grep -H .` over
/sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer},
/sys/class/infiniband/*/fw_ver and /sys/class/infiniband_verbs/uverbs*/ibdev; `stat` of
/dev/infiniband/*; a listing of libibverbs.so.1 and the verbs providers
(`<libdir>/libibverbs/lib<name>-rdmav<N>.so`). Only when sysfs shows no HCA: `ibstat`, then
`ibv_devinfo`. For the locked-memory limit: `pgrep -o -x slurmd`, /proc/<pid>/limits and
slurm.conf. For NCCL settings: /etc/nccl.conf, `ls -1 /sys/class/net` (only when
NCCL_SOCKET_IFNAME is set) and, when the profile names the job image, the in-image RDMA
probe. Nothing here writes.

The check `rdma.nccl_env` lives here for now (the `nccl` module is the NCCL log analysis);
its id may move to `nccl.env`.

Gathering and parsing live in facts modules: clustercheck.facts.infiniband (sysfs, ibstat,
ibv_devinfo, verbs libraries), clustercheck.facts.image (the in-image probe, shared with
container.py), clustercheck.facts.slurm_conf (slurm.conf).
"""

# Sources: docs/domain-facts.md §F (sysfs formats), §C.2/§C.5 (what NCCL logs
# when RDMA is missing), §C.3 (NCCL variables and the NCCL_IB_HCA syntax).

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence

from clustercheck import Host, Result, Size, check, fail, ok, skip, warn
from clustercheck.errors import HostError, NotRecorded
from clustercheck.facts.image import image_probe, runtime_version, show_limit
from clustercheck.facts.infiniband import library_problems, natural_key, port_selected, rdma, span
from clustercheck.facts.nccl_env import (  # NCCL's reading of its settings, shared with `clustercheck job`
    GDR_OFF,  # noqa: F401  (the names below stay importable from here: tests and site checks use them)
    MAX_IF_ENTRIES,  # noqa: F401
    Findings,  # noqa: F401
    IfEntry,  # noqa: F401
    IfList,  # noqa: F401
    Setting,
    judge_nccl_settings,
    parse_nccl_conf,
    parse_nccl_if_list,  # noqa: F401
    strtoll,  # noqa: F401
)
from clustercheck.facts.nccl_env import effective_settings as _context
from clustercheck.facts.slurm_conf import first_settings as parse_slurm_conf  # the forgiving lookup memlock needs
from clustercheck.registry import human_size


def select(names: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The names matching any shell pattern (all of them when there is no pattern), naturally sorted."""
    chosen = [n for n in names if not patterns or any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return sorted(chosen, key=natural_key)


def hca_patterns(names: Sequence[str]) -> list[str]:
    """The HCA part of `names` entries (`mlx5_0:1` -> `mlx5_0`)."""
    return [n.split(":", 1)[0] for n in names]


# -- rdma.devices ----------------------------------------------------------------------------


def _has_wildcard(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


# rdma-core names the library libibverbs.so.1.<minor>.<PACKAGE_VERSION> (libibverbs/CMakeLists.txt:
# `rdma_library(ibverbs ... 1 1.<minor>.${PACKAGE_VERSION}`, Documentation/versioning.md), so the file
# libibverbs.so.1 points at says which rdma-core it is: libibverbs.so.1.14.44.0 is rdma-core 44.0.
_LIBIBVERBS_RE = re.compile(r"/libibverbs\.so\.1\.\d{1,4}\.(\d{1,6}(?:\.\d{1,6}){0,3}[A-Za-z0-9.]{0,40})$")


def parse_ofed_info(text: str) -> str | None:
    """`ofed_info -s` ('MLNX_OFED_LINUX-23.10-5.1.4.0:', DOCA-OFED's 'OFED-internal-24.10-1.1.4:') -> the
    name without the trailing colon; None for empty output."""
    for line in text.splitlines():
        if line.strip():
            return line.strip().rstrip(":").strip()[:120] or None
    return None


def rdma_core_version(target: str) -> str | None:
    """The resolved libibverbs.so.1 ('/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0') -> '44.0'."""
    m = _LIBIBVERBS_RE.search(target.strip())
    return m.group(1) if m else None


def rdma_stack(host: Host, libraries: Sequence[str]) -> tuple[str | None, str]:
    """(the RDMA userspace stack as a drift fact, evidence): `ofed_info -s` where MLNX_OFED/DOCA-OFED is
    installed, else rdma-core's version from the file libibverbs.so.1 resolves to. None when neither says."""
    try:
        answer = host.run("ofed_info", "-s")
    except NotRecorded:  # a replay recorded before this was read: the fact is left out, never guessed
        return None, "`ofed_info -s` is not in this recording: RDMA stack version not read"
    if answer.ok and (name := parse_ofed_info(answer.stdout)):
        return name, f"`ofed_info -s`: {name}"
    core = [p for p in libraries if p.endswith("/libibverbs.so.1")]
    if not core:
        return None, "no ofed_info and no libibverbs.so.1: RDMA stack version unknown"
    try:
        link = host.run("readlink", "-f", core[0])
    except NotRecorded:
        return None, f"`readlink -f {core[0]}` is not in this recording: rdma-core version not read"
    target = link.stdout.strip() if link.ok else ""
    version = rdma_core_version(target)
    if version is None:
        return None, f"{core[0]} resolves to {target[:200] or '(nothing)'}: no rdma-core version in its name"
    return f"rdma-core {version}", f"no ofed_info; {core[0]} -> {target[:200]}: rdma-core {version}"


def _distinct(values: Iterable[str]) -> str | None:
    seen = sorted({v for v in values if v}, key=natural_key)
    return ", ".join(seen) if seen else None


@check(
    needs=["command sh", "command grep", "command stat", "command ofed_info", "command readlink"],
    timeout=10,
    action="FIX_CONFIG",
)
def devices(
    host: Host,
    *,
    expected: int = 0,
    names: tuple[str, ...] = (),
    providers: tuple[str, ...] = ("mlx5",),
    job_group: str = "",
) -> Result:
    """The node has its RDMA HCAs, each with a uverbs device jobs can open, and the verbs userspace.

    Why: NCCL, UCX and MPI open /dev/infiniband/uverbsN through libibverbs and its provider
    library (libmlx5 for ConnectX). When any piece is missing NCCL does not stop: it logs
    `NET/IB : No device found.` or `Failed to open libibverbs.so` and falls back to TCP
    sockets, at a fraction of the speed.

    How: one `sh -c` on the node lists /sys/class/infiniband (HCAs), maps HCAs to uverbs
    devices through /sys/class/infiniband_verbs/uverbsN/ibdev, `stat`s /dev/infiniband/*
    (mode, owner, group) and lists libibverbs.so.1 and `<libdir>/libibverbs/lib<name>-rdmav*.so`.
    `names` (shell patterns, e.g. `mlx5_[0-7]`) selects the HCAs jobs use; a name without a
    wildcard must exist (a `:port` suffix, as rdma.ports takes it, is ignored here).
    `expected` (when above 0) is how many selected HCAs there must be. Every selected HCA's
    uverbs device and `rdma_cm` must be read-write for others, or for `job_group` when that
    group owns them. `providers` are the verbs providers that must be installed.

    Fix: missing HCAs: `lspci | grep -i mellanox`, `dmesg | grep mlx5`, reseat or replace the
    card, load `mlx5_ib`. Missing uverbs: `modprobe ib_uverbs` (and `rdma_ucm` for rdma_cm).
    Modes: the rdma-core udev rules make uverbs* and rdma_cm 0666. Libraries: install
    rdma-core (`libibverbs1 ibverbs-providers` on Debian/Ubuntu, `libibverbs rdma-core` on
    RHEL) or MLNX_OFED/DOCA-OFED.

    Drift facts (the fleet table): `HCA firmware` (fw_ver of the selected HCAs, each value
    once) and `RDMA stack`: `ofed_info -s` where MLNX_OFED/DOCA-OFED is installed, else
    `rdma-core N` from the file libibverbs.so.1 resolves to (`readlink -f`).

    Action: FIX_CONFIG (load the modules, fix the device modes, install the verbs libraries);
    a card missing from lspci is hardware (REPLACE_HW after a reseat).
    """
    node = rdma(host)
    chosen = select(node.ports, hca_patterns(names))
    evidence = [f"HCAs ({node.source}): {', '.join(node.hcas) or 'none'}"]
    evidence += [f"{h} firmware {node.firmware[h]}" for h in chosen if h in node.firmware]
    evidence += [d.describe() for d in node.devices.values()]
    evidence += [f"library {p}" for p in node.libraries]
    facts: dict[str, str] = {}
    firmware = _distinct(node.firmware[h] for h in chosen if h in node.firmware)
    if firmware:
        facts["HCA firmware"] = firmware
    stack, said = rdma_stack(host, node.libraries)
    evidence.append(said)
    if stack:
        facts["RDMA stack"] = stack
    data: dict[str, object] = {"hcas": chosen, "uverbs": node.uverbs, "libraries": node.libraries, "facts": facts}
    problems: list[str] = []
    if not chosen:
        which = f" matching {', '.join(names)}" if names else ""
        problems.append(
            f"no RDMA HCA{which} under /sys/class/infiniband" + (f", expected {expected}" if expected else "")
        )
    for pattern in hca_patterns(names):
        if not _has_wildcard(pattern) and pattern not in node.ports:
            problems.append(f"HCA {pattern} is missing")
    if expected and chosen and len(chosen) != expected:
        problems.append(f"{len(chosen)} HCAs ({span(chosen)}), expected {expected}")
    unusable: list[str] = []
    for hca in chosen:
        uverbs = node.uverbs_of(hca)
        if uverbs is None:
            problems.append(f"{hca} has no uverbs device (is ib_uverbs loaded?)")
            continue
        dev = node.devices.get(f"/dev/infiniband/{uverbs}")
        if dev is None:
            problems.append(f"/dev/infiniband/{uverbs} (of {hca}) is missing")
        elif not dev.usable_by_jobs(job_group):
            unusable.append(dev.describe())
    cm = node.devices.get("/dev/infiniband/rdma_cm")
    if cm is None:
        problems.append("/dev/infiniband/rdma_cm is missing (is rdma_ucm loaded?)")
    elif not cm.usable_by_jobs(job_group):
        unusable.append(cm.describe())
    if unusable:
        who = f"others or group {job_group}" if job_group else "others"
        problems.append(f"not read-write for {who}, so jobs cannot open them: {'; '.join(unusable)}")
    problems += library_problems(node.libraries, providers, "on the node")
    data["problems"] = problems
    if problems:
        return fail(
            "; ".join(problems),
            remedy="HCAs: `lspci | grep -i mellanox`, `dmesg | grep mlx5`, load mlx5_ib. uverbs/rdma_cm: "
            "`modprobe ib_uverbs rdma_ucm`; the rdma-core udev rules make them 0666. Libraries: install rdma-core "
            "(libibverbs1 + ibverbs-providers, or libibverbs + rdma-core) or MLNX_OFED/DOCA-OFED.",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"{len(chosen)} HCAs ({span(chosen)}), their uverbs devices and rdma_cm usable by jobs, "
        f"libibverbs with the {', '.join(providers) or 'installed'} provider",
        data=data,
        evidence=evidence,
    )


# -- rdma.ports ------------------------------------------------------------------------------


def _may_have_hcas(host: Host) -> bool:
    """False only when the node surely has no RDMA device: /proc/modules lists no ib_core (as
    gpu.peermem reads it), or /sys/class/infiniband does not exist. Saves the RDMA gather (and its
    ibstat/ibv_devinfo fallbacks) on every job start of a node without HCAs."""
    try:
        modules = host.read_optional("/proc/modules")
        if modules is not None:
            return any(line.split()[:1] == ["ib_core"] for line in modules.splitlines())
        return host.read_optional("/sys/class/infiniband") is not None  # a folder: reading it fails
    except HostError:  # a folder that cannot be read as a file (it exists), a fixture without it: look
        return True


@check(needs=["command sh", "command grep"], timeout=10, action="CHECK_CABLE")
def ports(
    host: Host,
    *,
    names: tuple[str, ...] = (),
    min_rate: int = 0,
    link_layer: str = "InfiniBand",
    if_present: bool = False,
) -> Result:
    """Every port of the selected HCAs is ACTIVE and LinkUp, at `min_rate` Gb/s or more, on `link_layer`.

    Why: NCCL uses only ports in state ACTIVE, so a down port silently drops out of the
    `NET/IB : Using` list and its GPUs share another rail. A port that
    trained at a lower rate (a 400 Gb/s NDR port up at 200) is a bad cable or transceiver
    and slows every collective of the job to its speed. A port in INIT has a link but no
    subnet manager configured it.

    How: reads state, phys_state, rate and link_layer of every port under
    /sys/class/infiniband/<HCA>/ports/ (`ibstat` or `ibv_devinfo` when sysfs shows nothing).
    `names` selects HCAs as in rdma.devices; `HCA:N` selects only port N (for a dual-port
    card with one port cabled, e.g. `mlx5_*:1`). `min_rate` is in Gb/s (400 for NDR, 200 for
    HDR; 0 does not judge the rate). `link_layer` is `InfiniBand`, or `Ethernet` for RoCE.
    With `if_present` (the bundled prolog profile) a node without any RDMA port skips: one
    profile serves nodes with and without HCAs.

    Fix: DOWN/Polling: check the cable and the switch port (`ibportstate`, the switch's
    logs), reseat or swap the cable or transceiver. INIT: start or fix the subnet manager
    (`sminfo`). Low rate: `mlxlink -d <HCA> -m` shows the negotiated speed and errors;
    replace the cable. Wrong link layer: `mlxconfig -d <HCA> set LINK_TYPE_P1=1` (IB) or `=2`
    (Ethernet), then reboot.

    Action: CHECK_CABLE (a port down, polling or at a low rate); FIX_CONFIG when the only
    problem is a wrong link layer (the card's LINK_TYPE setting).
    """
    if if_present and not _may_have_hcas(host):
        return skip("no RDMA stack on this node (no ib_core module, no /sys/class/infiniband): nothing to judge")
    node = rdma(host)
    chosen = select(node.ports, hca_patterns(names))
    selected = [p for h in chosen for p in node.ports[h] if port_selected(p, names)]
    evidence = [
        f"{p.label}: state {p.state or '?'}, phys {p.phys_state or '?'}, rate {p.rate or '?'}, "
        f"link layer {p.link_layer or '?'}"
        for p in selected
    ]
    data: dict[str, object] = {
        "source": node.source,
        "ports": [
            {"hca": p.hca, "port": p.port, "state": p.state, "phys_state": p.phys_state, "rate_gbps": p.rate_gbps}
            | {"link_layer": p.link_layer}
            for p in selected
        ],
    }
    if not selected and if_present and not node.ports:
        return skip("no RDMA port on this node (nothing under /sys/class/infiniband): nothing to judge", data=data)
    if not selected:
        which = f" of HCAs matching {', '.join(names)}" if names else ""
        return fail(
            f"no RDMA port{which} under /sys/class/infiniband",
            remedy="See rdma.devices: the HCAs are missing or their driver (mlx5_ib) is not loaded.",
            data=data,
            evidence=evidence,
        )
    problems: list[str] = []
    layer_only = True  # every problem is a wrong link layer (a setting, not a cable)
    unknown_rate: list[str] = []
    for p in selected:
        if p.state != "ACTIVE" or (p.phys_state and p.phys_state != "LinkUp"):
            hint = ": no subnet manager has configured it" if p.state == "INIT" else ""
            phys = f" ({p.phys_state})" if p.phys_state else ""
            problems.append(f"{p.label} is {p.state or 'in an unknown state'}{phys}, expected ACTIVE (LinkUp){hint}")
            layer_only = False
        if min_rate and p.state == "ACTIVE":
            if p.rate_gbps is None:
                unknown_rate.append(p.label)
            elif p.rate_gbps < min_rate:
                problems.append(
                    f"{p.label} runs at {p.rate or f'{p.rate_gbps:g} Gb/sec'}, expected at least {min_rate} Gb/sec"
                )
                layer_only = False
        if link_layer and p.link_layer and p.link_layer.lower() != link_layer.lower():
            problems.append(f"{p.label} link layer is {p.link_layer}, expected {link_layer}")
    data["problems"] = problems
    if problems:
        return fail(
            "; ".join(problems),
            remedy="Down or Polling: check the cable and switch port, reseat or swap the cable/transceiver. "
            "INIT: fix the subnet manager (`sminfo`). Low rate: `mlxlink -d HCA -m`, replace the cable. "
            "Wrong link layer: `mlxconfig -d HCA set LINK_TYPE_P1=1` (IB) or 2 (Ethernet), reboot.",
            data=data,
            evidence=evidence,
            action="FIX_CONFIG" if layer_only else "CHECK_CABLE",
        )
    rates = sorted({p.rate_gbps for p in selected if p.rate_gbps is not None})
    said = f"{len(selected)} ports of {span(chosen)} ACTIVE, LinkUp"
    said += f" at {'/'.join(f'{r:g}' for r in rates)} Gb/sec" if rates else ""
    said += f", {link_layer}" if link_layer else ""
    if unknown_rate:
        return warn(
            f"{said}; the rate of {', '.join(unknown_rate)} is not reported ({node.source}), "
            f"expected at least {min_rate} Gb/sec",
            remedy="Read the rate with `ibstat` or from /sys/class/infiniband/HCA/ports/N/rate.",
            data=data,
            evidence=evidence,
        )
    return ok(said, data=data, evidence=evidence)


# -- rdma.memlock ----------------------------------------------------------------------------


def parse_limits(text: str, name: str = "Max locked memory") -> tuple[float, float] | None:
    """/proc/<pid>/limits -> (soft, hard) of one limit, in its unit; `unlimited` is infinity."""
    for line in text.splitlines():
        if line.startswith(name):
            parts = line[len(name) :].split()
            if len(parts) >= 2:
                try:
                    return tuple(float("inf") if v == "unlimited" else float(int(v)) for v in parts[:2])  # type: ignore[return-value]
                except ValueError:
                    return None
    return None


def memlock_propagated(conf: dict[str, tuple[str, int]]) -> tuple[bool, str]:
    """Whether jobs get MEMLOCK from the submitting shell, and why (SchedMD/slurm etc/slurm.conf.example).

    By default (neither key set) every limit is propagated; PropagateResourceLimits lists
    what is (NONE for nothing), PropagateResourceLimitsExcept what is not.
    """
    if "propagateresourcelimitsexcept" in conf:
        value, line = conf["propagateresourcelimitsexcept"]
        items = {v.strip().upper() for v in value.split(",")}
        if "MEMLOCK" in items or "ALL" in items:
            return False, f"line {line}: PropagateResourceLimitsExcept={value}"
        return True, f"line {line}: PropagateResourceLimitsExcept={value} does not exclude MEMLOCK"
    if "propagateresourcelimits" in conf:
        value, line = conf["propagateresourcelimits"]
        items = {v.strip().upper() for v in value.split(",")}
        if "ALL" in items or "MEMLOCK" in items:
            return True, f"line {line}: PropagateResourceLimits={value}"
        return False, f"line {line}: PropagateResourceLimits={value}"
    return True, "neither PropagateResourceLimits nor PropagateResourceLimitsExcept is set, so all limits propagate"


NO_SIZE = Size(0)
SLURM_CONFS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf")


@check(
    needs=["command pgrep", "file /proc/<slurmd>/limits", "file /etc/slurm/slurm.conf"], timeout=10, action="FIX_CONFIG"
)
def memlock(host: Host, *, minimum: Size = NO_SIZE, slurm_conf: tuple[str, ...] = SLURM_CONFS) -> Result:
    """Jobs get an unlimited locked-memory limit (or at least `minimum`), not the login shell's.

    Why: RDMA registers (pins) every buffer it sends from; with the usual 64 KiB or 8 MiB
    default `ulimit -l`, `ibv_reg_mr` fails and NCCL/MPI abort or fall back to sockets. Slurm
    jobs inherit slurmd's limits, except those propagated from the submitting shell: by
    default Slurm propagates every limit, so a login node's small memlock follows the job
    (Slurm FAQ "memlock"; SchedMD/slurm etc/slurm.conf.example).

    How: finds slurmd (`pgrep -o -x slurmd`), reads `Max locked memory` from
    /proc/<pid>/limits (the soft limit applies), and reads PropagateResourceLimits(Except)
    from the first slurm.conf found in `slurm_conf` (configless nodes keep a copy in
    /run/slurm/conf). `minimum` 0 (the default) means unlimited. MEMLOCK propagated from the
    submit host warns: the limit jobs get is then the login node's, which this node cannot see
    (and `srun --propagate` can still override per job).

    Fix: run slurmd with `LimitMEMLOCK=infinity` (a systemd drop-in: `systemctl edit slurmd`,
    then restart it; limits.conf does not apply to services) and set
    `PropagateResourceLimitsExcept=MEMLOCK` in slurm.conf.

    Action: FIX_CONFIG (slurmd's unit file and slurm.conf).
    """
    found = host.run("pgrep", "-o", "-x", "slurmd")
    if found.exit_code == 127:
        raise HostError(host.name, "pgrep is not installed: cannot find slurmd to read the limit jobs inherit")
    pid = found.stdout.split()[0] if found.stdout.split() else ""
    if not pid.isdigit():
        raise HostError(host.name, "slurmd is not running, so the locked-memory limit jobs inherit cannot be read")
    limits_path = f"/proc/{pid}/limits"
    limits = parse_limits(host.read(limits_path))
    if limits is None:
        raise HostError(host.name, f"{limits_path} has no readable `Max locked memory` line")
    soft, hard = limits
    want = float(minimum) if minimum else float("inf")
    evidence = [f"slurmd (pid {pid}) Max locked memory: soft {show_limit(soft)}, hard {show_limit(hard)}"]
    data: dict[str, object] = {
        "soft": None if soft == float("inf") else soft,
        "hard": None if hard == float("inf") else hard,
    }
    expected = "unlimited" if not minimum else f"at least {human_size(minimum)}"
    if soft < want:
        return fail(
            f"slurmd's locked-memory limit is {show_limit(soft)}, expected {expected}: jobs inherit it and "
            "RDMA memory registration fails",
            remedy="`systemctl edit slurmd` -> [Service] LimitMEMLOCK=infinity, restart slurmd; set "
            "PropagateResourceLimitsExcept=MEMLOCK in slurm.conf.",
            data=data,
            evidence=evidence,
        )
    conf_path, conf_text = "", None
    for path in slurm_conf:
        conf_text = host.read_optional(path)
        if conf_text is not None:
            conf_path = path
            break
    if conf_text is None:
        return warn(
            f"slurmd's locked-memory limit is {show_limit(soft)}, but no slurm.conf was found "
            f"({', '.join(slurm_conf)}) to tell whether jobs get the submitting shell's limit instead",
            remedy="Point `slurm_conf:` at the node's slurm.conf; it should set PropagateResourceLimitsExcept=MEMLOCK.",
            data=data,
            evidence=evidence,
        )
    propagated, why = memlock_propagated(parse_slurm_conf(conf_text))
    evidence.append(f"{conf_path}: {why}")
    data["propagated"] = propagated
    if propagated:
        return warn(
            f"slurmd's locked-memory limit is {show_limit(soft)}, but {conf_path} propagates MEMLOCK ({why}): "
            "jobs get the submitting shell's limit",
            remedy="Set PropagateResourceLimitsExcept=MEMLOCK in slurm.conf and `scontrol reconfigure`.",
            data=data,
            evidence=evidence,
        )
    return ok(
        f"jobs inherit slurmd's locked-memory limit, {show_limit(soft)}; MEMLOCK is not propagated ({conf_path})",
        data=data,
        evidence=evidence,
    )


# -- rdma.nccl_env ---------------------------------------------------------------------------


def _conf_pairs(text: str, path: str, warns: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for name, value, line in parse_nccl_conf(text):
        if name != name.strip() and name.strip().startswith("NCCL_"):
            warns.append(
                f"{path}:{line}: `{name}=` has blanks around the name, which NCCL keeps, so {name.strip()} is not set"
            )
        pairs.append((name, value))
    return pairs


@check(needs=["file /etc/nccl.conf", "command ls"], timeout=120, action="FIX_CONFIG")
def nccl_env(
    host: Host,
    *,
    env: tuple[str, ...] = (),
    conf: str = "/etc/nccl.conf",
    image_command: tuple[str, ...] = (),
    allow_sockets: bool = False,
    allow_no_gdr: bool = False,
) -> Result:
    """No NCCL setting turns the RDMA network off or points it at HCAs or interfaces the node lacks.

    Why: one stale line in /etc/nccl.conf, a module file or an image sends every job to TCP
    sockets without an error: `NCCL_IB_DISABLE=1`, `NCCL_NET=Socket`, an `NCCL_IB_HCA` that
    names no real HCA (`mlx5_9` on a node with mlx5_0..7), an `NCCL_SOCKET_IFNAME` naming no
    interface, or `NCCL_NET_GDR_LEVEL=LOC` (GPUDirect RDMA off). NCCL_IB_HCA has a
    surprising syntax: `^` excludes, `=` makes names exact (otherwise `mlx5_1` also selects
    mlx5_10..19), `:N` picks a port.

    How: takes the job environment the site sets (`env`, `NAME=VALUE` entries), `conf`
    (/etc/nccl.conf, read the way NCCL reads it: no trimming) and, with `image_command` (the
    argv that runs a command in the job image, e.g. `[apptainer, exec, --nv, IMAGE]`), the
    image's NCCL_* environment and /etc/nccl.conf. For bare-metal jobs the effective value of
    a variable is the job environment's, else nccl.conf's; inside the image: job environment,
    image environment, image nccl.conf. NCCL_IB_HCA is matched against this node's HCA ports
    (only ACTIVE ports count, as in NCCL) and NCCL_SOCKET_IFNAME against /sys/class/net.
    `allow_sockets` and `allow_no_gdr` turn those failures into warnings.

    Fix: remove the setting, or correct it to this node's names (`ls /sys/class/infiniband`,
    `ls /sys/class/net`); prefer exact lists (`NCCL_IB_HCA==mlx5_0,mlx5_1`) and let NCCL pick
    HCAs by itself when all of them are for compute.

    Action: FIX_CONFIG (the NCCL setting named, where the evidence says it comes from).
    """
    warns: list[str] = []
    job: list[tuple[str, str]] = []
    for entry in env:
        name, sep, value = entry.partition("=")
        if not sep:
            raise HostError(host.name, f"rdma.nccl_env: env entry {entry!r} is not NAME=VALUE")
        job.append((name, value))
    conf_text = host.read_optional(conf)
    contexts: dict[str, dict[str, Setting]] = {
        "bare metal": _context(
            [("job environment", job), (conf, _conf_pairs(conf_text, conf, warns) if conf_text else [])]
        )
    }
    evidence = [f"{conf}: " + ("absent" if conf_text is None else f"{len(parse_nccl_conf(conf_text))} settings")]
    if image_command and runtime_version(host, image_command[0]) is None:
        evidence.append(f"image not checked: {image_command[0]} is not installed on this node")
    elif image_command:
        probe = image_probe(host, image_command)
        image_conf = _conf_pairs(probe.nccl_conf, "image /etc/nccl.conf", warns)
        contexts["in the image"] = _context(
            [("job environment", job), ("image environment", probe.environment), ("image /etc/nccl.conf", image_conf)]
        )
        evidence.append(f"image probe: `{probe.command}`")
    node = rdma(host)
    names_cache: list[str] = []

    def interfaces() -> list[str]:
        if not names_cache:
            answer = host.run("ls", "-1", "/sys/class/net")
            names_cache.extend(sorted(answer.stdout.split(), key=natural_key) if answer.ok else [])
        return names_cache

    fails: list[str] = []
    data: dict[str, object] = {}
    for label, settings in contexts.items():
        evidence += [f"{label}: {s}" for s in settings.values()]
        data[label] = {s.name: {"value": s.value, "source": s.source} for s in settings.values()}
        found = judge_nccl_settings(
            settings, node.ports, interfaces, allow_sockets=allow_sockets, allow_no_gdr=allow_no_gdr
        )
        prefix = f"{label}: " if len(contexts) > 1 else ""
        fails += [prefix + f for f in found.fails if prefix + f not in fails]
        warns += [prefix + w for w in found.warns if prefix + w not in warns]
    remedy = (
        "Remove the setting or correct it to this node's names (`ls /sys/class/infiniband`, `ls /sys/class/net`); "
        "prefer exact lists such as NCCL_IB_HCA==mlx5_0,mlx5_1, or leave NCCL_IB_HCA unset."
    )
    if fails:
        return fail("; ".join(fails + warns), remedy=remedy, data=data, evidence=evidence)
    if warns:
        return warn("; ".join(warns), remedy=remedy, data=data, evidence=evidence)
    count = sum(len(s) for s in contexts.values())
    if not count:
        return ok("no NCCL_* setting found: NCCL picks the IB HCAs itself", data=data, evidence=evidence)
    return ok(
        f"{count} NCCL setting{'s' if count != 1 else ''} checked; none turns RDMA off or names a missing HCA "
        "or interface",
        data=data,
        evidence=evidence,
    )
