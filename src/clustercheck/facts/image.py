"""Inside the job's container image: the two in-image probes and how to run them.

- The RDMA probe (`PROBE_SCRIPT`, `image_probe()` -> `ImageProbe`): what a job started from the
  image sees of RDMA: /dev/infiniband, /sys/class/infiniband, verbs libraries, `ulimit -l`, NCCL_*
  variables and /etc/nccl.conf. It runs through the site's own launch command (rdma.nccl_env,
  container.*_rdma), which keeps the host's devices and limits as a job would.
- The stack probe (`IMAGE_SCRIPT`, `image_facts()` -> `ImageFacts`): CUDA's version.json, the
  image's own environment, the CUDA/NCCL libraries and NVIDIA wheels, NCCL's banner. It runs with
  `apptainer exec --cleanenv` / `enroot start` (or over an unpacked rootfs on the host), so the
  environment is the image's, not the host's.

They stay two scripts: both are part of commands recorded in fixtures (argv and all), their
launches differ on purpose (the RDMA probe must see what a job sees, the stack probe must not see
the host's environment), and one merged script would change every recorded argv.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from clustercheck import Host
from clustercheck.errors import CommandTimeout, HostError
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.infiniband import LIBRARY_SCAN, split_sections
from clustercheck.registry import human_size

if TYPE_CHECKING:
    from clustercheck.analyzers.versions import CudaVersion


def show_limit(value: float) -> str:
    return "unlimited" if value == float("inf") else human_size(value)


# -- the RDMA probe: what a job started from the image sees of RDMA ----------------------

#: Sent as `LAUNCH... sh -c PROBE_SCRIPT` (the file without its comments, the last newline dropped
#: as recorded); prints `## name` sections.
PROBE_SCRIPT = script_text("rdma_image_probe.sh", LIBRARY_SCAN=LIBRARY_SCAN).removesuffix("\n")

#: What one image probe may take: starting a multi-GB image from a parallel file system is slow.
#: The check's own `timeout` (its budget) caps it.
PROBE_TIMEOUT = 600.0


class ImageProbe(NamedTuple):
    """What the probe saw inside the image."""

    command: str
    devices: tuple[str, ...]  # /dev/infiniband/... present
    hcas: tuple[str, ...]  # names under /sys/class/infiniband
    libraries: tuple[str, ...]
    memlock_bytes: float | None  # inf when unlimited, None when not printed
    environment: tuple[tuple[str, str], ...]  # NCCL_*/MELLANOX_* inside
    nccl_conf: str


def parse_probe(text: str, command: str = "") -> ImageProbe:
    """The probe's output (`## devices` ... sections) -> ImageProbe."""
    s = split_sections(text)
    memlock_bytes: float | None = None
    for line in s.get("memlock", []):
        value = line.strip()
        if value == "unlimited":
            memlock_bytes = float("inf")
        elif value.isdigit():
            memlock_bytes = int(value) * 1024.0  # `ulimit -l` counts KiB
    env = []
    for line in s.get("environment", []):
        name, sep, value = line.partition("=")
        if sep:
            env.append((name, value))
    return ImageProbe(
        command,
        tuple(d for d in s.get("devices", []) if d.startswith("/dev/")),
        tuple(s.get("hcas", [])),
        tuple(sorted(set(s.get("libraries", [])))),
        memlock_bytes,
        tuple(env),
        "\n".join(s.get("nccl.conf", [])),
    )


def runtime_version(host: Host, argv0: str) -> str | None:
    """The runtime's version line, or None when it is not installed (exit 127)."""
    answer = host.run(*(("enroot", "version") if argv0 == "enroot" else (argv0, "--version")))
    if answer.exit_code == 127:
        return None
    lines = (answer.stdout.strip() or answer.stderr.strip()).splitlines()
    return lines[0] if answer.ok and lines else f"{argv0} (version unknown)"


def image_probe(host: Host, argv: Sequence[str]) -> ImageProbe:
    """Run the probe through `argv` (a command that runs `sh -c SCRIPT` inside the job image), once per run."""
    full = (*argv, "sh", "-c", PROBE_SCRIPT)

    def gather(h: Host) -> ImageProbe:
        result = h.run(
            *full, timeout=PROBE_TIMEOUT, shown_as=shown_with(full, PROBE_SCRIPT, "'<rdma image probe script>'")
        )
        shown = shlex.join(argv) + " sh -c PROBE"
        if result.timed_out:
            raise CommandTimeout(h.name, f"`{shown}` did not finish within {result.duration_s:.1f} s")
        if "## devices" not in result.stdout:
            first = next((x.strip() for x in (result.stderr + result.stdout).splitlines() if x.strip()), "no output")
            raise HostError(
                h.name, f"the probe did not run inside the image: `{shown}` exited {result.exit_code}: {first[:300]}"
            )
        return parse_probe(result.stdout, shown)

    return host.fact("rdma.image_probe " + shlex.join(full), gather)


# -- the stack probe: CUDA and NCCL inside the image ---------------------------------------

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

#: Run inside the image (or with CLUSTERCHECK_ROOT=rootfs over an unpacked one): scripts/image_stack_probe.sh.
#: The script is part of the recorded command: changing it means re-recording fixtures.
IMAGE_SCRIPT = script_text("image_stack_probe.sh", LIB_DIRS=_LIB_DIRS, PIP_DIRS=" ".join(_PIP_DIRS))

#: A pip wheel's metadata folder -> (package, version): nvidia_nccl_cu12-2.32.3.dist-info.
_DIST_INFO = re.compile(r"/(nvidia_[a-z0-9_]+?)-(\d+(?:\.\d+)+)[^/]*\.dist-info$")


class ImageFacts(NamedTuple):
    """What the script saw inside an image (a NamedTuple, not a dataclass: rdma.* imports this
    module on the prolog path, and a dataclass costs milliseconds at import)."""

    where: str  # the image path or rootfs, for messages
    version_json: str | None = None  # version.json's "cuda" version
    env: dict[str, str] = {}  # noqa: RUF012  (never mutated: parse_image_probe builds a new one)
    libraries: tuple[str, ...] = ()
    nccl_string: str | None = None  # "2.21.5+cuda12.4" from the library's own banner
    pip: tuple[str, ...] = ()  # NVIDIA wheels' .dist-info folders
    missing: tuple[str, ...] = ()  # tools the script needed and the image lacks

    def cuda(self) -> tuple[CudaVersion, str] | None:
        """The image's CUDA version and where it came from, in order of trust."""
        from clustercheck.analyzers.versions import CudaVersion  # only where an image is judged

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
        import json  # only where an image is looked into (json costs the prolog's import ms)

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


#: On the node, when starting an image failed: what the image path is (scripts/image_file.sh).
IMAGE_FILE_SCRIPT = script_text("image_file.sh").removesuffix("\n")


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
        # the evidence names the script instead of spelling out its 30 lines
        result = h.run(*argv, timeout=120, shown_as=shown_with(argv, IMAGE_SCRIPT, "'<image probe script>'"))
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
