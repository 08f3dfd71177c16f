"""The software stack inside the job's container image against the host: CUDA and NCCL.

Reads: one shell script run inside the image the jobs use (`apptainer exec --cleanenv
IMAGE sh -c ...` for .sif images, `enroot start IMAGE sh -c ...` for enroot/Pyxis .sqsh
images) or, for an unpacked image (`rootfs:`), the same script over that directory on the
host. The script prints /usr/local/cuda/version.json, the image's environment, and the
names of the CUDA, NCCL and NCCL net plugin libraries it finds (plus the "NCCL version"
string of a libnccl.so.2 without a versioned name). It writes nothing. The host side
comes from the `nvml` probe (see checks/gpu.py).

Versions given in the profile (`cuda_version:`, `nccl_version:`) replace looking inside an
image. The CUDA <-> driver rules and NVIDIA's tables are in clustercheck.analyzers.versions.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.analyzers.versions import (
    CudaVersion,
    ForwardCompat,
    judge_cuda,
    parse_require_cuda,
    version_key,
)
from clustercheck.errors import HostError

from .gpu import gpus

# Where pip puts wheels: Debian/Ubuntu's pip as root (dist-packages), python.org builds (the
# official python images), distribution site-packages, conda. Globs expand under $R.
_PIP_DIRS = (
    "/usr/local/lib/python3*/dist-packages",
    "/usr/local/lib/python3*/site-packages",
    "/usr/lib/python3*/dist-packages",
    "/usr/lib/python3*/site-packages",
    "/opt/conda/lib/python3*/site-packages",
)
# The directories searched for libraries, besides the image's LD_LIBRARY_PATH and the folders its
# /etc/ld.so.conf.d/*.conf gives the loader: CUDA's own, the distributions' multiarch and lib64
# directories, HPC-X's and AWS's NCCL net plugins, and NVIDIA's wheels (nvidia-nccl-cu12's
# libnccl.so.2 and nvidia-cuda-runtime(-cu12)'s libcudart.so.12/.13 carry no version in their names).
_LIB_DIRS = " ".join(
    [
        "/usr/local/cuda/lib64 /usr/local/cuda/compat /usr/local/cuda/compat/lib /usr/local/cuda/compat/lib.real",
        "/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/local/lib",
        "/opt/hpcx/nccl_rdma_sharp_plugin/lib /opt/amazon/ofi-nccl/lib /opt/amazon/aws-ofi-nccl/lib",
        *(f"{d}/nvidia/{lib}/lib" for d in _PIP_DIRS for lib in ("nccl", "cuda_runtime", "cu13")),
    ]
)

#: Run inside the image (or with R=rootfs over an unpacked one). POSIX sh; prints sections. It
#: needs no tool of the image's but sh (files are read with `read`), except grep for the NCCL
#: banner, whose absence it reports (`### missing`).
#: The script is part of the recorded command: changing it means re-recording fixtures.
IMAGE_SCRIPT = (
    "R=${CLUSTERCHECK_ROOT:-}\n"
    'show() { for f in "$@"; do [ -r "$f" ] || continue; '
    'while IFS= read -r l || [ -n "$l" ]; do printf \'%s\\n\' "$l"; done < "$f"; done; }\n'
    "echo '### version.json'\n"
    'show "$R/usr/local/cuda/version.json"\n'
    "echo '### env'\n"
    'if [ -n "$R" ]; then show "$R/etc/environment" "$R"/.singularity.d/env/*.sh; '
    "elif command -v env >/dev/null 2>&1; then env; else export -p; fi\n"
    "echo '### libraries'\n"
    "nccl=''\n"
    'env_dirs=$(IFS=:; for d in ${LD_LIBRARY_PATH:-}; do echo "$d"; done)\n'
    'conf_dirs=$(for c in "$R"/etc/ld.so.conf.d/*.conf; do [ -r "$c" ] || continue; '
    'while read -r l _; do case "$l" in /*) echo "$l";; esac; done < "$c"; done)\n'
    # globs in the directory list (python3*) expand under $R, in the inner loop only
    "set -f\n"
    f"for d in $env_dirs {_LIB_DIRS} $conf_dirs; do\n"
    "  set +f\n"
    '  for f in "$R"$d/libcudart.so.* "$R"$d/libcuda.so.* "$R"$d/libnccl.so* "$R"$d/libnccl-net*.so; do\n'
    '    [ -e "$f" ] || continue\n'
    '    echo "${f#"$R"}"\n'
    '    case "$f" in */libnccl.so.2) [ -z "$nccl" ] && nccl="$f";; esac\n'
    "  done\n"
    "  set -f\n"
    "done\n"
    "echo '### pip'\n"
    f"for d in {' '.join(_PIP_DIRS)}; do\n"
    "  set +f\n"
    '  for f in "$R"$d/nvidia_*.dist-info; do [ -e "$f" ] && echo "${f#"$R"}"; done\n'
    "  set -f\n"
    "done\n"
    "set +f\n"
    "echo '### nccl-version'\n"
    "if [ -n \"$nccl\" ] && ! command -v grep >/dev/null 2>&1; then echo '### missing'; echo grep; "
    'elif [ -n "$nccl" ]; then grep -a -o -m 1 \'NCCL version [0-9][0-9.]*[+a-z0-9.]*\' "$nccl" | '
    '{ read -r v && echo "$v"; }; fi\n'
    "true\n"
)

#: A pip wheel's metadata folder -> (package, version): nvidia_nccl_cu12-2.32.3.dist-info.
_DIST_INFO = re.compile(r"/(nvidia_[a-z0-9_]+?)-(\d+(?:\.\d+)+)[^/]*\.dist-info$")


@dataclass(frozen=True)
class ImageFacts:
    """What the script saw inside an image."""

    where: str  # the image path or rootfs, for messages
    version_json: str | None = None  # version.json's "cuda" version
    env: dict[str, str] = field(default_factory=dict)
    libraries: tuple[str, ...] = ()
    nccl_string: str | None = None  # "2.21.5+cuda12.4" from the library's own banner
    pip: tuple[str, ...] = ()  # NVIDIA wheels' .dist-info folders
    missing: tuple[str, ...] = ()  # tools the script needed and the image lacks

    def cuda(self) -> tuple[CudaVersion, str] | None:
        """The image's CUDA version and where it came from, in order of trust."""
        if self.version_json:
            try:
                return CudaVersion.parse(self.version_json), f"/usr/local/cuda/version.json ({self.version_json})"
            except ValueError:
                pass
        if "CUDA_VERSION" in self.env:
            try:
                return CudaVersion.parse(self.env["CUDA_VERSION"]), f"CUDA_VERSION={self.env['CUDA_VERSION']}"
            except ValueError:
                pass
        for path in self.libraries:
            m = re.search(r"/libcudart\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
            if m:
                return CudaVersion.parse(m.group(1)), path.rsplit("/", 1)[-1]
        # pip wheels name the library libcudart.so.12 / .13; the version is the wheel's
        wheel = self.wheel("nvidia_cuda_runtime", "nvidia_cuda_runtime_cu")
        if wheel:
            return CudaVersion.parse(wheel[0]), wheel[1]
        return None

    def wheel(self, *names: str) -> tuple[str, str] | None:
        """(version, path) of the first NVIDIA wheel whose package is one of `names` (a trailing
        `_cu` also matches `_cu11`, `_cu12`, ...)."""
        for path in self.pip:
            m = _DIST_INFO.search(path)
            if m and any(
                m.group(1) == n or (n.endswith("_cu") and re.fullmatch(n + r"\d+", m.group(1))) for n in names
            ):
                return m.group(2), path
        return None

    def compat_driver(self) -> str | None:
        """The driver version of the image's cuda-compat libcuda (/usr/local/cuda*/compat/...)."""
        for path in self.libraries:
            m = re.search(r"/compat/(?:lib(?:\.real)?/)?libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
            if m:
                return m.group(1)
        return None

    def nccl(self) -> tuple[str, str] | None:
        """The image's NCCL version and where it came from, in order of trust."""
        for path in self.libraries:
            m = re.search(r"/libnccl\.so\.(\d+\.\d+\.\d+)$", path)
            if m:
                return m.group(1), path
        if "NCCL_VERSION" in self.env:
            m = re.match(r"(\d+\.\d+\.\d+)", self.env["NCCL_VERSION"])
            if m:
                return m.group(1), f"NCCL_VERSION={self.env['NCCL_VERSION']}"
        if self.nccl_string:
            m = re.match(r"(\d+\.\d+\.\d+)", self.nccl_string)
            if m:
                return m.group(1), f"the library's banner 'NCCL version {self.nccl_string}'"
        wheel = self.wheel("nvidia_nccl_cu")
        if wheel:
            return wheel
        return None

    def net_plugins(self) -> list[str]:
        return [p for p in self.libraries if re.search(r"/libnccl-net[^/]*\.so$", p)]


def parse_image_probe(text: str, where: str) -> ImageFacts:
    """The script's output -> ImageFacts. Lines before the first section (an entrypoint's
    banner, e.g. an NGC image's) are ignored."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("### "):
            current = sections.setdefault(line[4:].strip(), [])
        elif current is not None:
            current.append(line)
    version = None
    raw = "\n".join(sections.get("version.json", [])).strip()
    if raw:
        try:
            cuda = json.loads(raw).get("cuda", {})
            version = str(cuda.get("version")) if isinstance(cuda, dict) and cuda.get("version") else None
        except (ValueError, AttributeError):
            m = re.search(r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([^"]+)"', raw)
            version = m.group(1) if m else None
    env = {}
    for line in sections.get("env", []):
        line = line.strip()
        if line.startswith("export "):  # apptainer's env scripts
            line = line[len("export ") :]
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name] = value.strip().strip("\"'")
    libraries = tuple(dict.fromkeys(line.strip() for line in sections.get("libraries", []) if line.strip()))
    banner = " ".join(sections.get("nccl-version", [])).strip()
    m = re.search(r"NCCL version (\S+)", banner)
    pip = tuple(dict.fromkeys(line.strip() for line in sections.get("pip", []) if line.strip()))
    missing = tuple(line.strip() for line in sections.get("missing", []) if line.strip())
    return ImageFacts(where, version, env, libraries, m.group(1) if m else None, pip, missing)


def _runtime_argv(image: str, runtime: str) -> tuple[str, ...]:
    kind = runtime.lower()
    if kind == "auto":
        if image.endswith(".sif"):
            kind = "apptainer"
        elif image.endswith((".sqsh", ".squashfs")):
            kind = "enroot"
        else:
            raise ValueError(f"cannot tell the runtime of image {image}: name it with `runtime: apptainer|enroot`")
    if kind in ("apptainer", "singularity"):
        # --cleanenv: the image's environment, not the host's (CUDA_VERSION must be the image's)
        return (kind, "exec", "--cleanenv", image, "sh", "-c", IMAGE_SCRIPT)
    if kind == "enroot":
        # NVIDIA_VISIBLE_DEVICES=void: skip the GPU hook, so the host's libcuda is not mounted in
        return ("enroot", "start", "--env", "NVIDIA_VISIBLE_DEVICES=void", image, "sh", "-c", IMAGE_SCRIPT)
    raise ValueError(f"runtime: {runtime!r} is not one of auto, apptainer, singularity, enroot")


#: On the node, when starting an image failed: what the image path is. Read-only; sh, od, wc.
IMAGE_FILE_SCRIPT = (
    'f=$1; if [ -d "$f" ]; then echo folder; elif [ ! -e "$f" ]; then echo absent; '
    'elif [ ! -r "$f" ]; then echo unreadable; else echo file; wc -c < "$f"; '
    'od -An -tx1 -N4 "$f"; od -An -tu8 -j40 -N8 "$f" 2>/dev/null; fi; true'
)


def image_trouble(host: Host, image: str) -> str:
    """Why the runtime could not start `image`, as far as the file itself tells; "" when it looks fine.

    A squashfs (enroot's .sqsh, the payload of a .sif) records its length in its superblock
    (`bytes_used`, at byte 40): a shorter file was cut off in a copy.
    """
    if not image.startswith("/"):
        return ""  # a registry reference (docker://..., nvcr.io#...), not a file on the node
    try:
        answer = host.run("sh", "-c", IMAGE_FILE_SCRIPT, "image-file", image)
    except HostError:  # a replayed fixture without this look, a deadline: the runtime's words stand alone
        return ""
    words = answer.stdout.split()
    if answer.timed_out or not words:
        return ""
    if words[0] == "folder":
        return (
            f"{image} is a folder, not an image file (for an unpacked image or an Apptainer sandbox use "
            "`rootfs:`, or `command:` with the runtime's own syntax)"
        )
    if words[0] == "absent":
        return f"{image} does not exist on the node"
    if words[0] == "unreadable":
        return f"{image} is not readable on the node by the user clustercheck runs as"
    try:
        size = int(words[1])
        magic = "".join(words[2:6])
        used = int(words[6]) if len(words) > 6 else None
    except (IndexError, ValueError):
        return ""
    if size == 0:
        return f"{image} is empty (0 bytes)"
    if magic == "68737173" and used is not None and size < used:
        return f"{image} is truncated: its squashfs superblock says {used} bytes, the file has {size}"
    if magic == "68737173" and used is None:
        return f"{image} is truncated: {size} bytes, shorter than a squashfs superblock"
    return ""


def _why_not_started(result_text: str) -> str:
    """The runtime's own words, or what a missing shell looks like."""
    lines = [x.strip() for x in result_text.splitlines() if x.strip()]
    for line in lines:
        # bwrap: `execvp sh: No such file or directory`; apptainer: `"sh": executable file not found`
        if re.search(r"""(?:^|[\s"'])sh["']?: .*(?:No such file|not found)""", line):
            return f"the image has no /bin/sh ({line[:200]})"
    return (lines[-1] if lines else "no output")[:300]


def image_facts(host: Host, image: str, rootfs: str, runtime: str, command: tuple[str, ...] = ()) -> ImageFacts:
    """Look inside the image once per host per run (both stack checks share it)."""

    def gather(h: Host) -> ImageFacts:
        if rootfs:
            root = f"CLUSTERCHECK_ROOT={rootfs.rstrip('/')}"
            argv: tuple[str, ...] = ("env", root, "LD_LIBRARY_PATH=", "sh", "-c", IMAGE_SCRIPT)
            where = rootfs
        elif command:
            argv, where = (*command, "sh", "-c", IMAGE_SCRIPT), image or shlex.join(command)
        else:
            argv, where = _runtime_argv(image, runtime), image
        result = h.run(*argv, timeout=120)
        # the evidence names the script instead of spelling out its 30 lines
        h.observations[-1] = h.observations[-1].replace(shlex.quote(IMAGE_SCRIPT), "'<image probe script>'")
        if result.timed_out:
            raise HostError(h.name, f"looking inside {where} did not finish within {result.duration_s:.0f} s")
        said = _why_not_started(result.stderr + "\n" + result.stdout)
        if result.exit_code == 127 and argv[0] != "env" and not result.stdout.strip() and "/bin/sh" not in said:
            raise HostError(h.name, f"{argv[0]} is not installed on the node: cannot look inside {where}")
        if result.exit_code != 0 or "### version.json" not in result.stdout:
            trouble = image_trouble(h, image) if image and not rootfs else ""
            cause = f". Cause: {trouble}" if trouble else ""
            raise HostError(h.name, f"`{argv[0]} {argv[1]}` on {where} exited {result.exit_code}: {said}{cause}")
        facts = parse_image_probe(result.stdout, where)
        if rootfs and not (facts.version_json or facts.env or facts.libraries or facts.pip):
            kind = h.run("sh", "-c", IMAGE_FILE_SCRIPT, "image-file", rootfs).stdout.split()
            if kind and kind[0] != "folder":
                what = {"absent": "does not exist", "unreadable": "is not readable"}.get(
                    kind[0], "is a file, not a folder"
                )
                raise HostError(h.name, f"rootfs {rootfs} {what} on the node: `rootfs:` names an unpacked image folder")
        return facts

    return host.fact(f"stack.image {shlex.join((image, rootfs, runtime, *command))}", gather)


@check(needs=["probe nvml", "command apptainer or enroot"], timeout=150)
def cuda_compat(
    host: Host,
    *,
    image: str = "",
    rootfs: str = "",
    runtime: str = "auto",
    command: tuple[str, ...] = (),
    cuda_version: str = "",
) -> Result:
    """The image's CUDA runs on this host's driver (NVIDIA's compatibility rules).

    Why: a container built for a newer CUDA than the host driver supports either fails at
    start ("CUDA driver version is insufficient for CUDA runtime version", error 803/804)
    or runs in minor-version compatibility, where PTX JIT of newer code fails at runtime.
    Other tools diff versions against a golden list; this applies NVIDIA's rules.

    How: reads the image's CUDA version inside the image: /usr/local/cuda/version.json,
    then the CUDA_VERSION variable, then a libcudart.so.X.Y.Z name, then the version of the
    nvidia-cuda-runtime(-cuXX) wheel pip installed (in that order of trust), or takes
    `cuda_version` from the profile. Judges it against the host driver
    (NVML) with the tables of CUDA's release notes (domain-facts §A): ok when the driver is
    at least the toolkit's own; ok with forward compatibility when the image ships
    cuda-compat for a data-center GPU and a driver branch it supports (its
    NVIDIA_REQUIRE_CUDA, else NVIDIA's matrix); warn under minor-version compatibility
    (same major, driver >= the major's floor); fail below the floor.

    The image: `image` is a .sif (run with `apptainer exec`) or an enroot .sqsh (run with
    `enroot start`; `runtime:` overrides the guess), `rootfs` an unpacked image directory
    on the node (an enroot container or an Apptainer sandbox), or `command` the site's own
    launcher, run as `COMMAND sh -c SCRIPT` (e.g. `[srun, -N1, "--container-image=..."]`,
    `[apptainer, exec, --contain, IMAGE]`, or `[bwrap, --ro-bind, ROOTFS, /, ...]`). When the
    runtime cannot start the image, the error says why: no /bin/sh in it, or the file is a
    folder, absent, empty or a truncated squashfs.

    Fix: install the driver branch the image needs, or use an image built for a CUDA the
    driver supports (<= the host's CUDA version), or, on data-center GPUs, an image with
    the cuda-compat package for this driver branch.
    """
    if not (image or rootfs or command or cuda_version):
        return skip("no container image named by the profile (set image:, rootfs:, command: or cuda_version:)")
    record = gpus(host)
    if record.driver_version is None:
        return skip(f"no NVIDIA driver on the host ({record.error or 'no version reported'}): gpu.count judges that")
    evidence = [f"host driver {record.driver_version}, CUDA {record.cuda_version or 'n/a'} (from {record.source})"]
    compat = None
    if cuda_version:
        cuda, source = CudaVersion.parse(cuda_version), f"the profile's cuda_version {cuda_version}"
    else:
        facts = image_facts(host, image, rootfs, runtime, command)
        found = facts.cuda()
        if found is None:
            return fail(
                f"no CUDA found in {facts.where}: no /usr/local/cuda/version.json, CUDA_VERSION or libcudart.so.X.Y",
                remedy="Check that this is the image jobs use, or give `cuda_version:` in the profile.",
                evidence=evidence,
            )
        cuda, source = found
        compat_driver = facts.compat_driver()
        answering = [g for g in record.gpus if g.error is None and g.name]
        if compat_driver and answering:
            branches = parse_require_cuda(facts.env.get("NVIDIA_REQUIRE_CUDA", ""))
            compat = ForwardCompat(compat_driver, answering[0].name or "", branches)
            evidence.append(f"image ships cuda-compat: libcuda {compat_driver}")
        evidence += [f"in {facts.where}: {lib}" for lib in facts.libraries if "cuda" in lib]
    evidence.insert(0, f"image CUDA {cuda} from {source}")
    verdict = judge_cuda(cuda, record.driver_version, host_cuda=record.cuda_version, compat=compat)
    data = {
        "image_cuda": str(cuda),
        "source": source,
        "driver": record.driver_version,
        **verdict.to_json(),
        "facts": {"image CUDA": str(cuda)},
    }
    older = f"CUDA {record.cuda_version} or older" if record.cuda_version else "an older CUDA"
    remedy = (
        f"Install a driver >= {verdict.needs or verdict.floor} on the node, or use an image built for {older}, "
        "or (data-center GPUs) an image whose cuda-compat package supports this driver branch."
    )
    if verdict.status.value == "fail":
        return fail(verdict.summary, remedy=remedy, data=data, evidence=evidence)
    if verdict.status.value == "warn":
        return warn(
            verdict.summary,
            remedy=remedy + " Minor-version compatibility works for code compiled to SASS for these GPUs; "
            "PTX-only kernels (JIT) fail with cudaErrorUnsupportedPtxVersion.",
            data=data,
            evidence=evidence,
        )
    return ok(verdict.summary, data=data, evidence=evidence)


@check(needs=["command apptainer or enroot"], timeout=150)
def nccl(
    host: Host,
    *,
    image: str = "",
    rootfs: str = "",
    runtime: str = "auto",
    command: tuple[str, ...] = (),
    nccl_version: str = "",
    min_version: str = "",
    net_plugin: str = "",
) -> Result:
    """The image's NCCL is at least `min_version`, with the expected net plugin (if any).

    Why: an image with an old NCCL misses transport fixes (and, for NVLink SHARP or new
    NICs, whole features); a missing or wrong external net plugin (HPC-X's IBext/SHARP,
    AWS's libfabric) makes NCCL fall back to its internal IB transport or to TCP sockets,
    slowly and silently.

    How: the NCCL version from a libnccl.so.2.X.Y file name, else the NCCL_VERSION
    variable, else the library's own "NCCL version X.Y.Z" banner (pip wheels ship only
    libnccl.so.2), else the nvidia-nccl-cuXX wheel's version, or `nccl_version` from the
    profile; the net plugins are the libnccl-net*.so files found (and NCCL_NET_PLUGIN). `net_plugin`: "" reports only,
    "any" requires one, "none" forbids one, other text must appear in a plugin's path.

    The image: `image` is a .sif (run with `apptainer exec`) or an enroot .sqsh (run with
    `enroot start`; `runtime:` overrides the guess), `rootfs` an unpacked image directory
    on the node (an enroot container or an Apptainer sandbox), or `command` the site's own
    launcher, run as `COMMAND sh -c SCRIPT` (e.g. `[srun, -N1, "--container-image=..."]`,
    `[apptainer, exec, --contain, IMAGE]`, or `[bwrap, --ro-bind, ROOTFS, /, ...]`). When the
    runtime cannot start the image, the error says why: no /bin/sh in it, or the file is a
    folder, absent, empty or a truncated squashfs.

    Fix: use an image with a newer NCCL (or install libnccl2 in it); add the site's net
    plugin (e.g. HPC-X's nccl_rdma_sharp_plugin, aws-ofi-nccl) and put it on LD_LIBRARY_PATH.
    """
    if not (image or rootfs or command or nccl_version):
        return skip("no container image named by the profile (set image:, rootfs:, command: or nccl_version:)")
    plugins: list[str] = []
    plugin_env = ""
    if nccl_version:
        version, source = nccl_version, "the profile's nccl_version"
        evidence = [f"NCCL {version} from {source}"]
    else:
        facts = image_facts(host, image, rootfs, runtime, command)
        found = facts.nccl()
        plugins, plugin_env = facts.net_plugins(), facts.env.get("NCCL_NET_PLUGIN", "")
        evidence = [f"in {facts.where}: {lib}" for lib in facts.libraries if "nccl" in lib]
        unread = [lib for lib in facts.libraries if lib.endswith("/libnccl.so.2")]
        if found is None and unread and "grep" in facts.missing:
            raise HostError(
                host.name,
                f"{facts.where} has {unread[0]} but no grep to read its version banner, and no "
                "libnccl.so.2.X.Y name, NCCL_VERSION or nvidia-nccl wheel tells it: give `nccl_version:`",
            )
        if found is None:
            return fail(
                f"no NCCL found in {facts.where} (no libnccl.so.2.X.Y, NCCL_VERSION, NCCL banner or nvidia-nccl wheel)",
                remedy="Check that this is the image jobs use; install libnccl2 in it, or give `nccl_version:`.",
                evidence=evidence,
            )
        version, source = found
        evidence.insert(0, f"NCCL {version} from {source}")
    shown_plugins = ", ".join(_plugin_name(p) for p in plugins) if plugins else "none"
    plugin_text = f"net plugin {shown_plugins}" + (f" (NCCL_NET_PLUGIN={plugin_env})" if plugin_env else "")
    data = {
        "nccl": version,
        "source": source,
        "net_plugins": plugins,
        "nccl_net_plugin": plugin_env,
        "facts": {"image NCCL": version},
    }
    problems = []
    if min_version and version_key(version) < version_key(min_version):
        problems.append(f"NCCL {version} is older than the minimum {min_version}")
    wanted = net_plugin.strip()
    if wanted == "any" and not plugins:
        problems.append("no NCCL net plugin (libnccl-net*.so) in the image, expected one")
    elif wanted == "none" and plugins:
        problems.append(f"NCCL net plugin {shown_plugins} present, expected none")
    elif wanted not in ("", "any", "none") and not any(wanted in p for p in [*plugins, plugin_env]):
        problems.append(f"no NCCL net plugin matching {wanted!r} (found {shown_plugins})")
    if problems:
        return fail(
            "; ".join(problems),
            remedy="Use an image with a newer NCCL and the site's net plugin (HPC-X nccl_rdma_sharp_plugin, "
            "aws-ofi-nccl), on LD_LIBRARY_PATH; check with NCCL_DEBUG=INFO (`NET/Plugin` lines).",
            data=data,
            evidence=evidence,
        )
    floor = f" (>= {min_version})" if min_version else ""
    return ok(f"NCCL {version}{floor}, {plugin_text}", data=data, evidence=evidence)


def _plugin_name(path: str) -> str:
    """'/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so' -> 'libnccl-net.so (nccl_rdma_sharp_plugin)'."""
    parts = path.split("/")
    owner = parts[-3] if len(parts) >= 3 and parts[-2] in ("lib", "lib64") else parts[-2] if len(parts) >= 2 else ""
    return f"{parts[-1]} ({owner})" if owner else parts[-1]
