"""RDMA inside the job's container: Apptainer and Enroot/Pyxis images see the HCAs, or say why not.

Runs the job image the way jobs do (`apptainer exec --nv IMAGE`, `enroot start IMAGE`, or
the site's own launcher from the profile) with a small read-only `sh -c` probe inside it
that lists /dev/infiniband, /sys/class/infiniband, libibverbs and its providers, `ulimit -l`,
the NCCL_*/MELLANOX_* environment and /etc/nccl.conf (checks/rdma.py `PROBE_SCRIPT`), and
compares with the host (checks/rdma.py gather). Only when something is missing does it read
the runtime's configuration to say why: /etc/apptainer/apptainer.conf, or
/etc/enroot/enroot.conf, /etc/enroot/enroot.conf.d/*.conf and `ls -1 /etc/enroot/hooks.d`.
Also runs `apptainer --version` / `enroot version` to tell a missing runtime. Starting an
image writes nothing but the runtime's own cache and temporary files.

Because the probe goes through the host API like any command, `clustercheck record`
captures it and replay is strict.
"""

# Sources: docs/domain-facts.md §E.1 (Apptainer `mount dev`, --contain), §E.2
# (Enroot /dev handling, ENROOT_RESTRICT_DEV, 99-mellanox.sh), NVIDIA/enroot enroot.in (how
# enroot.conf values are read and which count as false).

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from clustercheck import Host, Result, Size, check, fail, ok, skip
from clustercheck.errors import CommandTimeout, HostError
from clustercheck.facts.image import ImageProbe, image_probe, image_trouble, runtime_version, show_limit
from clustercheck.facts.infiniband import RdmaNode, library_problems, natural_key, rdma, span
from clustercheck.registry import human_size

NO_SIZE = Size(0)

# -- what the image lacks ------------------------------------------------------------------


class Gap(NamedTuple):
    """What the probe found missing inside the image, against the host."""

    devices: tuple[str, ...]  # host /dev/infiniband/{uverbs*,rdma_cm} absent inside
    hcas: tuple[str, ...]  # host HCAs absent from /sys/class/infiniband inside
    libraries: tuple[str, ...]  # library problems
    memlock: str  # "" or why the limit inside is too low

    @property
    def any(self) -> bool:
        return bool(self.devices or self.hcas or self.libraries or self.memlock)


def needed_devices(node: RdmaNode) -> list[str]:
    """The host devices jobs need inside: every uverbs device and rdma_cm."""
    names = [p for p in node.devices if re.fullmatch(r"/dev/infiniband/(uverbs\d+|rdma_cm)", p)]
    return sorted(names, key=natural_key)


def compare(node: RdmaNode, probe: ImageProbe, providers: Sequence[str], min_memlock: Size) -> Gap:
    inside = set(probe.devices)
    memlock = ""
    if min_memlock and probe.memlock_bytes is not None and probe.memlock_bytes < min_memlock:
        memlock = f"locked-memory limit inside is {show_limit(probe.memlock_bytes)}, expected {human_size(min_memlock)}"
    elif min_memlock and probe.memlock_bytes is None:
        memlock = "`ulimit -l` printed nothing inside the image"
    return Gap(
        tuple(d for d in needed_devices(node) if d not in inside),
        tuple(h for h in node.hcas if h not in set(probe.hcas)),
        tuple(library_problems(probe.libraries, providers, "in the image")),
        memlock,
    )


def short(devices: Sequence[str]) -> str:
    """['/dev/infiniband/rdma_cm', '/dev/infiniband/uverbs0', ...] -> 'rdma_cm, uverbs0..uverbs7'."""
    names = sorted((d.rsplit("/", 1)[-1] for d in devices), key=natural_key)
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(re.sub(r"\d+$", "", name), []).append(name)
    return ", ".join(span(g) for g in groups.values())


def describe_gap(gap: Gap, total_devices: int) -> list[str]:
    said = []
    if gap.devices and len(gap.devices) == total_devices:
        said.append(f"/dev/infiniband is missing inside (the host has {short(gap.devices)})")
    elif gap.devices:
        said.append(f"{len(gap.devices)} of {total_devices} host RDMA devices are missing inside: {short(gap.devices)}")
    if gap.hcas:
        said.append(f"HCAs {span(gap.hcas)} are not visible in /sys/class/infiniband inside")
    said += list(gap.libraries)
    if gap.memlock:
        said.append(gap.memlock)
    return said


def probe_evidence(probe: ImageProbe) -> list[str]:
    return [
        f"probe: `{probe.command}`",
        "inside: /dev/infiniband: " + (short(probe.devices) or "absent"),
        "inside: /sys/class/infiniband: " + (span(sorted(probe.hcas, key=natural_key)) or "absent"),
        "inside: libraries: " + (", ".join(probe.libraries) or "none found"),
        "inside: ulimit -l: " + ("not printed" if probe.memlock_bytes is None else show_limit(probe.memlock_bytes)),
    ]


# -- runtime configuration (pure) ----------------------------------------------------------


def parse_apptainer_conf(text: str) -> list[tuple[str, str, int]]:
    """apptainer.conf / singularity.conf -> [(key, value, line)] for `key = value` lines (`#` comments)."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        found.append((" ".join(key.split()).lower(), value.strip(), number))
    return found


CONTAIN_FLAGS = {"-c", "--contain", "-C", "--containall"}


def apptainer_causes(conf_path: str, conf_text: str | None, command: Sequence[str], gap: Gap) -> list[str]:
    """Why an Apptainer container lacks the host's RDMA devices, from the conf and the command (§E.1)."""
    causes = []
    entries = parse_apptainer_conf(conf_text or "")
    binds = [v for k, v, _ in entries if k == "bind path" and v.split(":", 1)[0].rstrip("/") == "/dev/infiniband"]
    if gap.devices:
        for key, value, line in entries:
            if key == "mount dev" and value.lower() in ("minimal", "no") and not binds:
                causes.append(
                    f"{conf_path}:{line}: `mount dev = {value}` gives containers "
                    + ("only null, zero, random, urandom and shm" if value.lower() == "minimal" else "no host /dev")
                    + ", and no `bind path = /dev/infiniband` brings the HCAs back"
                )
        contain = [a for a in command if a in CONTAIN_FLAGS]
        if contain and not binds:
            causes.append(
                f"the job command uses {contain[0]}, which builds a minimal /dev without /dev/infiniband "
                "(`--nv` restores only the GPUs)"
            )
    if gap.hcas:
        for key, value, line in entries:
            if key == "mount sys" and value.lower() == "no":
                causes.append(
                    f"{conf_path}:{line}: `mount sys = no` hides /sys/class/infiniband, which libibverbs reads"
                )
    if (gap.devices or gap.hcas) and conf_text is None:
        causes.append(f"{conf_path} is absent, so the runtime's cause could not be read")
    return causes


ENROOT_FALSE = re.compile(r"^(no?|N[oO]?|[fF](alse)?|FALSE)$")


def enroot_setting_on(value: str) -> bool:
    """enroot's config::fini: a value is false when empty or matching no/n/No/false/FALSE (NVIDIA/enroot enroot.in)."""
    return bool(value) and not ENROOT_FALSE.match(value)


def parse_enroot_conf(text: str) -> list[tuple[str, str, int]]:
    """enroot.conf -> [(ENROOT_KEY, value, line)]: `KEY value` or `KEY=value`, `#` lines are comments."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(ENROOT_[A-Z_]+)[ \t=]+(.*?)\s*$", raw)
        if m:
            found.append((m.group(1), m.group(2), number))
        elif re.match(r"^\s*ENROOT_[A-Z_]+\s*$", raw):
            found.append((raw.strip(), "", number))
    return found


def enroot_causes(
    confs: Sequence[tuple[str, str]],
    hooks: list[str] | None,
    hooks_dir: str,
    environment: dict[str, str],
    gap: Gap,
    unlisted: str = "",
) -> list[str]:
    """Why an Enroot container lacks the host's RDMA devices (domain-facts §E.2): RESTRICT_DEV, hooks, MELLANOX_*.

    `hooks` None: hooks.d is absent, or with `unlisted` (ls's error) could not be listed, which
    says nothing about 99-mellanox.sh."""
    settings: dict[str, tuple[str, str]] = {}  # key -> (value, file:line); later files win, as enroot reads them
    for path, text in confs:
        for key, value, line in parse_enroot_conf(text):
            settings[key] = (value, f"{path}:{line}")
    causes = []
    restrict = [
        k for k in ("ENROOT_RESTRICT_DEV", "ENROOT_UNSHARE_IPC") if enroot_setting_on(settings.get(k, ("", ""))[0])
    ]
    has_hook = hooks is not None and "99-mellanox.sh" in hooks
    visible = environment.get("MELLANOX_VISIBLE_DEVICES", "")
    if gap.devices or gap.hcas:
        for key in restrict:
            value, where = settings[key]
            causes.append(f"{where}: `{key} {value}` replaces /dev with a minimal tmpfs without /dev/infiniband")
        if restrict and not has_hook and unlisted:
            causes.append(
                f"{hooks_dir} could not be listed ({unlisted}): whether 99-mellanox.sh binds the HCAs back is unknown"
            )
        elif restrict and not has_hook:
            causes.append(f"{hooks_dir} has no 99-mellanox.sh to bind the HCAs back")
        elif restrict and visible in ("", "void", "none"):
            causes.append(
                "99-mellanox.sh binds HCAs only when MELLANOX_VISIBLE_DEVICES is set (to `all` or indices), "
                f"and it is {visible or 'unset'} inside"
            )
        elif has_hook and visible not in ("", "void", "none", "all"):
            causes.append(
                f"MELLANOX_VISIBLE_DEVICES={visible} makes 99-mellanox.sh expose only those HCAs and hide the others"
            )
        if not causes:
            causes.append(
                "enroot binds the host /dev by default (mounts.d/10-system.fstab); look for a site hook or mount "
                f"in {hooks_dir} or mounts.d that hides it"
            )
    return causes


def _absent(stderr: str) -> bool:
    """ls's words for a path that does not exist (GNU: "No such file or directory")."""
    return "No such file" in stderr or "not found" in stderr


def _first(text: str) -> str:
    return next((x.strip() for x in text.splitlines() if x.strip()), "")[:200]


# -- the checks ----------------------------------------------------------------------------


def judge(
    host: Host,
    *,
    runtime: str,
    argv: Sequence[str],
    image: str,
    required: bool,
    providers: Sequence[str],
    min_memlock: Size,
    explain: Callable[[Gap, ImageProbe], tuple[list[str], list[str]]],
    remedy: str,
) -> Result:
    version = runtime_version(host, argv[0])
    if version is None:
        said = f"{argv[0]} is not installed on this node (exit 127)"
        if required:
            return fail(said + f", but the profile requires {runtime}", remedy=f"Install {runtime} on the node.")
        return skip(said + f": {runtime} containers are not used here")
    node = rdma(host)
    host_devices = needed_devices(node)
    if not host_devices and not node.hcas:
        return skip("the host has no RDMA devices to pass into containers (see rdma.devices)")
    try:
        probe = image_probe(host, argv)
    except CommandTimeout:
        raise
    except HostError as exc:  # the runtime did not start the image: say what is wrong with the file, if anything
        trouble = image_trouble(host, image) if image else ""
        if trouble:
            raise HostError(host.name, f"{exc}. Cause: {trouble}") from None
        raise
    gap = compare(node, probe, providers, min_memlock)
    evidence = [f"{runtime}: {version}", *probe_evidence(probe)]
    data: dict[str, object] = {
        "command": probe.command,
        "missing_devices": list(gap.devices),
        "missing_hcas": list(gap.hcas),
        "library_problems": list(gap.libraries),
        "memlock_inside": None if probe.memlock_bytes in (None, float("inf")) else probe.memlock_bytes,
    }
    if gap.any:
        causes: list[str] = []
        if gap.devices or gap.hcas:  # the runtime's configuration explains only what it hides
            causes, more_evidence = explain(gap, probe)
            evidence += more_evidence
        data["causes"] = causes
        said = "; ".join(describe_gap(gap, len(host_devices)))
        if causes:
            said += ". Cause: " + "; ".join(causes)
        return fail(f"inside the image: {said}", remedy=remedy, data=data, evidence=evidence)
    memlock = "" if probe.memlock_bytes is None else f", ulimit -l {show_limit(probe.memlock_bytes)}"
    return ok(
        f"inside the image: the host's {short(host_devices)}, "
        f"{len(probe.hcas)} HCAs, libibverbs with the {', '.join(providers) or 'installed'} provider{memlock}",
        data=data,
        evidence=evidence,
    )


@check(needs=["command apptainer", "file /etc/apptainer/apptainer.conf"], timeout=120, action="FIX_CONFIG")
def apptainer_rdma(
    host: Host,
    *,
    image: str = "",
    command: tuple[str, ...] = (),
    conf: str = "/etc/apptainer/apptainer.conf",
    required: bool = False,
    providers: tuple[str, ...] = ("mlx5",),
    min_memlock: Size = NO_SIZE,
) -> Result:
    """Inside the Apptainer image jobs run, every host uverbs device, rdma_cm and the verbs libraries are there.

    Why: the most common invisible failure of multi-node training. The container sees the
    GPUs (`--nv`) but not /dev/infiniband, or the image has no libibverbs, so NCCL prints
    `NET/IB : No device found.` (an INFO line, not an error) and quietly uses TCP sockets
    at a fraction of the speed.

    How: runs a read-only probe inside the image the way jobs do, `apptainer exec --nv
    IMAGE sh -c '...'` (or `command`, the site's launcher, e.g. `[apptainer, exec, --nv,
    --contain, IMAGE]`), and compares with the host: every /dev/infiniband/uverbsN and
    rdma_cm present inside, every host HCA in /sys/class/infiniband inside, libibverbs.so.1
    and the `providers` (default mlx5) in the image. With `min_memlock` set (useful when
    `command` runs the probe as a job step, e.g. through srun) the `ulimit -l` inside must
    reach it. When something is missing it reads `conf` and names the line: `mount dev =
    minimal|no` (only null, zero, random, urandom and shm are kept), `mount sys = no`,
    `--contain`/`--containall` in the command, no `bind path = /dev/infiniband`. No
    `apptainer` on the node: skip, or fail when `required`. No `image`: skip.

    Fix: `mount dev = yes` in apptainer.conf (the default; the whole host /dev is bound), or
    add `bind path = /dev/infiniband` (also what `--contain` needs: `--bind /dev/infiniband`);
    install rdma-core's libibverbs and the provider (`libibverbs1 ibverbs-providers`) in the
    image.

    Action: FIX_CONFIG (apptainer.conf, the bind options or the image: the cause names which).
    """
    if not image and not command:
        return skip("no image given: set `image:` to the .sif (or registry reference) jobs run")
    argv = command or ("apptainer", "exec", "--nv", image)

    def explain(gap: Gap, probe: ImageProbe) -> tuple[list[str], list[str]]:
        extra: list[str] = []
        text = host.read_optional(conf)
        causes = apptainer_causes(conf, text, argv, gap)
        for key, value, line in parse_apptainer_conf(text or ""):
            if key in ("mount dev", "mount sys") or (key == "bind path" and "infiniband" in value):
                extra.append(f"{conf}:{line}: {key} = {value}")
        return causes, extra

    return judge(
        host,
        runtime="apptainer",
        argv=argv,
        image=image,
        required=required,
        providers=providers,
        min_memlock=min_memlock,
        explain=explain,
        remedy="Set `mount dev = yes` in apptainer.conf (or add `bind path = /dev/infiniband`; with --contain, "
        "`--bind /dev/infiniband`); keep `mount sys = yes`; install libibverbs and its provider in the image "
        "(rdma-core: libibverbs1 + ibverbs-providers).",
    )


@check(needs=["command enroot", "file /etc/enroot/enroot.conf", "command ls"], timeout=120, action="FIX_CONFIG")
def enroot_rdma(
    host: Host,
    *,
    image: str = "",
    command: tuple[str, ...] = (),
    conf_dir: str = "/etc/enroot",
    required: bool = False,
    providers: tuple[str, ...] = ("mlx5",),
    min_memlock: Size = NO_SIZE,
) -> Result:
    """Inside the Enroot/Pyxis image jobs run, every host uverbs device, rdma_cm and the verbs libraries are there.

    Why: as for Apptainer, a container without /dev/infiniband or libibverbs makes NCCL fall
    back to TCP sockets without an error. Enroot binds the host /dev by default, but
    `ENROOT_RESTRICT_DEV` (or `ENROOT_UNSHARE_IPC`) replaces it with a minimal tmpfs, and the
    99-mellanox.sh hook that brings HCAs back acts only when MELLANOX_VISIBLE_DEVICES is set,
    and only for mlx4/mlx5.

    How: runs the read-only probe in the image with `enroot start IMAGE sh -c '...'` (a
    squashfs image: Linux 4.18+ with fuse-overlayfs and squashfuse), or through `command`
    (the site's launcher, e.g. `[srun, -N1, --container-image=nvcr.io#nvidia/pytorch:24.05-py3]`
    for Pyxis), and compares with the host as container.apptainer_rdma does. When something
    is missing it reads `conf_dir`/enroot.conf and enroot.conf.d/*.conf (naming the file and
    line of ENROOT_RESTRICT_DEV), lists `conf_dir`/hooks.d for 99-mellanox.sh and looks at
    MELLANOX_VISIBLE_DEVICES inside. No `enroot` on the node: skip, or fail when `required`.

    Fix: set `ENROOT_RESTRICT_DEV no` (the default), or keep it and install the standard
    99-mellanox.sh hook in hooks.d with `MELLANOX_VISIBLE_DEVICES=all` in the job (or image)
    environment; install libibverbs and its provider in the image.

    Action: FIX_CONFIG (enroot.conf, its hooks or the image: the cause names which).
    """
    if not image and not command:
        return skip("no image given: set `image:` to the squashfs image (or use `command:` for Pyxis)")
    argv = command or ("enroot", "start", image)
    hooks_dir = f"{conf_dir.rstrip('/')}/hooks.d"

    def explain(gap: Gap, probe: ImageProbe) -> tuple[list[str], list[str]]:
        extra: list[str] = []
        main = f"{conf_dir.rstrip('/')}/enroot.conf"
        confs: list[tuple[str, str]] = []
        text = host.read_optional(main)
        if text is not None:
            confs.append((main, text))
        listing = host.run("ls", "-1", f"{conf_dir.rstrip('/')}/enroot.conf.d")
        if not listing.ok and not _absent(listing.stderr):  # a later file there could undo RESTRICT_DEV
            extra.append(f"{conf_dir.rstrip('/')}/enroot.conf.d: could not be listed: {_first(listing.stderr)}")
        for name in sorted(listing.stdout.split()) if listing.ok else []:
            if name.endswith(".conf"):
                path = f"{conf_dir.rstrip('/')}/enroot.conf.d/{name}"
                more = host.read_optional(path)
                if more is not None:
                    confs.append((path, more))
        answer = host.run("ls", "-1", hooks_dir)
        hooks = answer.stdout.split() if answer.ok else None
        unlisted = "" if answer.ok or _absent(answer.stderr) else _first(answer.stderr) or f"exit {answer.exit_code}"
        shown = " ".join(hooks) if hooks is not None else f"could not be listed: {unlisted}" if unlisted else "absent"
        extra.append(f"{hooks_dir}: {shown}")
        for path, body in confs:
            for key, value, line in parse_enroot_conf(body):
                if key in ("ENROOT_RESTRICT_DEV", "ENROOT_UNSHARE_IPC"):
                    extra.append(f"{path}:{line}: {key} {value}")
        return enroot_causes(confs, hooks, hooks_dir, dict(probe.environment), gap, unlisted), extra

    return judge(
        host,
        runtime="enroot",
        argv=argv,
        image=image,
        required=required,
        providers=providers,
        min_memlock=min_memlock,
        explain=explain,
        remedy="Set `ENROOT_RESTRICT_DEV no` in enroot.conf, or install the standard 99-mellanox.sh hook in "
        "hooks.d and set MELLANOX_VISIBLE_DEVICES=all for jobs; install libibverbs and its provider in the image "
        "(rdma-core: libibverbs1 + ibverbs-providers).",
    )
