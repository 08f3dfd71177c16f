"""Real image roots and a stand-in RDMA node, for the tests that run the in-image probes for real.

- `base_rootfs()`: Debian bookworm from `debootstrap --variant=minbase` (Debian's packages, the
  mirror this machine's apt is configured with), pruned of docs and apt lists; built once and
  cached in $XDG_CACHE_HOME/clustercheck-tests (default ~/.cache/clustercheck-tests). Cold: about a
  minute; warm: nothing.
- `image(dest, ...)`: a copy of it, with rdma-core's libibverbs1/ibverbs-providers/librdmacm1
  installed by dpkg inside it (`verbs=True`), optionally moved under a site prefix registered in
  /etc/ld.so.conf.d, and with NVIDIA's CUDA runtime and NCCL libraries from their pip wheels laid
  out as NGC images (the CUDA and libnccl2 .deb layout) or as pip installs them.
- `StandinNode`: the HCAs are the one thing this machine lacks. It runs a command in a private
  mount namespace (`unshare -m`) where /sys/class/infiniband and /sys/class/infiniband_verbs are
  folders of plain files written with the values of fixtures/rdma/healthy-ndr (real ibstat of
  ConnectX-7 NDR nodes), and /dev/infiniband holds real character devices made with mknod (major
  231 for uverbs/umad/issm, 10:56 for rdma_cm, as a real listing shows:
  Mellanox/k8s-rdma-shared-dev-plugin#98). Everything else is this machine: the checks' commands,
  `bwrap` as the container runtime, the rootfs. Nothing outside the namespace changes.

When the cache is cold and a download fails (no network), the tests skip with the reason, except
under CI (CI=true), where they fail: CI must run them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SUITE = "bookworm"
IN_CI = os.environ.get("CI", "").lower() in ("true", "1", "yes")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "clustercheck-tests"

#: rdma-core's runtime packages, with what libibverbs1/librdmacm1 depend on beyond minbase.
VERBS_DEBS = ("libnl-3-200", "libnl-route-3-200", "libibverbs1", "ibverbs-providers", "librdmacm1")
#: NVIDIA's wheels: CUDA 12 and CUDA 13 runtimes (the CUDA 13 one dropped the -cuXX suffix), NCCL.
WHEELS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-nccl-cu12")
PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "var/cache/apt", "var/lib/apt/lists")


def unavailable(why: str) -> None:
    """Skip with the reason, or fail under CI, which must run these tests."""
    if IN_CI:
        pytest.fail(f"{why} (CI=true: the real-container tests must run; README, 'What ran in a real container')")
    pytest.skip(why)


def _run(
    argv: Sequence[str],
    what: str,
    timeout: float = 900,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env
        )
    except FileNotFoundError:
        unavailable(f"{what}: {argv[0]} is not installed")
        raise AssertionError("unreachable") from None
    except subprocess.TimeoutExpired:
        unavailable(f"{what} did not finish within {timeout:g} s")
        raise AssertionError("unreachable") from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        unavailable(f"{what} failed (exit {proc.returncode}): {tail}")
    return str(proc.stdout)


_HELD: list[int] = []  # re-entrant: a builder holding the lock calls others


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One builder at a time (parallel test runs share the cache)."""
    if _HELD:
        yield
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _HELD.append(1)
        try:
            yield
        finally:
            _HELD.pop()


def _need_root() -> None:
    if os.geteuid() != 0:
        unavailable("building a rootfs (debootstrap, dpkg in a chroot, mknod) needs root")


def _mirror() -> str:
    """The Debian mirror apt uses here (deb822 .sources or a sources.list line)."""
    texts = [p.read_text() for p in sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    for text in texts:
        for stanza in text.split("\n\n"):
            m = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            if m and re.search(rf"^Suites:.*\b{SUITE}\b", stanza, re.M) and "security" not in m.group(1):
                return m.group(1)
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in lists:
        for line in path.read_text().splitlines() if path.exists() else []:
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and m.group(2) == SUITE:
                return m.group(1)
    unavailable("no Debian mirror for bookworm in /etc/apt: cannot debootstrap")
    raise AssertionError("unreachable")


def _ensure_tool(tool: str, package: str) -> None:
    if shutil.which(tool):
        return
    _need_root()
    _run(
        ["apt-get", "install", "-y", "-qq", package],
        f"apt-get install {package}",
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if not shutil.which(tool):
        unavailable(f"{tool} is still missing after apt-get install {package}")


def need_tools() -> None:
    """The runtime and builders these tests drive: installed from Debian's packages when missing (root)."""
    _ensure_tool("unshare", "util-linux")
    _ensure_tool("bwrap", "bubblewrap")
    _ensure_tool("debootstrap", "debootstrap")
    _ensure_tool("mksquashfs", "squashfs-tools")


def base_rootfs() -> Path:
    """Debian bookworm minbase, cached."""
    done = CACHE / "rootfs" / f"{SUITE}-minbase"
    if (done / ".clustercheck-complete").exists():
        return done
    _need_root()
    with _locked():
        if (done / ".clustercheck-complete").exists():
            return done
        _ensure_tool("debootstrap", "debootstrap")
        partial = done.with_name(done.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        _run(
            ["debootstrap", "--variant=minbase", SUITE, str(partial), _mirror()],
            f"the rootfs cache ({done}) is cold, and debootstrap --variant=minbase {SUITE}",
        )
        for rel in PRUNE:
            shutil.rmtree(partial / rel, ignore_errors=True)
            (partial / rel).mkdir(parents=True, exist_ok=True)
        (partial / ".clustercheck-complete").write_text(f"debootstrap --variant=minbase {SUITE}\n")
        shutil.rmtree(done, ignore_errors=True)
        partial.rename(done)
    return done


def debs(names: Sequence[str]) -> list[Path]:
    """Debian packages by name, downloaded with `apt-get download` once (same suite as the rootfs)."""
    folder = CACHE / "debs"
    found = {n: sorted(folder.glob(f"{n}_*.deb")) for n in names}
    missing = [n for n, paths in found.items() if not paths]
    if missing:
        with _locked():
            folder.mkdir(parents=True, exist_ok=True)
            _run(["apt-get", "download", *missing], "apt-get download " + " ".join(missing), cwd=folder)
        found = {n: sorted(folder.glob(f"{n}_*.deb")) for n in names}
    return [found[n][-1] for n in names]


def wheels() -> dict[str, Path]:
    """NVIDIA's wheels unpacked once: {package name: folder holding nvidia/ and the .dist-info}."""
    folder = CACHE / "wheels"
    out: dict[str, Path] = {}
    with _locked():
        folder.mkdir(parents=True, exist_ok=True)
        for name in WHEELS:
            stem = name.replace("-", "_")
            got = sorted(p for p in folder.glob(f"{stem}-*.whl"))
            if not got:
                _run(
                    [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                     "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_17_x86_64",
                     "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "-d", str(folder), name],
                    f"pip download {name}",
                )  # fmt: skip
                got = sorted(p for p in folder.glob(f"{stem}-*.whl"))
            if not got:
                unavailable(f"pip download {name} wrote no wheel")
            unpacked = folder / got[-1].name.removesuffix(".whl")
            if not (unpacked / ".clustercheck-complete").exists():
                shutil.rmtree(unpacked, ignore_errors=True)
                with zipfile.ZipFile(got[-1]) as zf:
                    zf.extractall(unpacked)
                (unpacked / ".clustercheck-complete").write_text(got[-1].name + "\n")
            out[name] = unpacked
    return out


def dist_info(unpacked: Path) -> Path:
    (info,) = unpacked.glob("*.dist-info")
    return info


def wheel_version(unpacked: Path) -> str:
    """The wheel's own version, from its METADATA (what the tests expect the checks to read)."""
    text = (dist_info(unpacked) / "METADATA").read_text()
    m = re.search(r"^Version: (\S+)", text, re.M)
    assert m, unpacked
    return m.group(1)


def _place(src: Path, dest: Path) -> None:
    """A real library file at dest: hard-linked from the cache (NCCL is 470 MB), else copied."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


@dataclass
class Image:
    root: Path
    notes: list[str] = field(default_factory=list)  # what was put where, for fixture notes


def image(
    dest: Path,
    *,
    verbs: bool = False,
    verbs_prefix: str = "",
    cuda: str = "",
    drop: Sequence[str] = (),
) -> Image:
    """A copy of the base rootfs at `dest`, then:

    verbs: dpkg -i rdma-core's runtime packages inside it (chroot).
    verbs_prefix: e.g. "/opt/rdma-core/lib": libibverbs.so.1* and librdmacm.so.1* moved there and
        the folder registered in /etc/ld.so.conf.d/rdma-core.conf, ldconfig run (a site build).
    cuda: "ngc12" (CUDA 12 runtime and NCCL named and placed as NVIDIA's .debs do),
        "pip12" / "pip13" (as `pip install` puts the wheels in /usr/local/lib/python3.11/dist-packages).
    drop: paths to delete inside (e.g. "usr/bin/ls", or "bin/sh" and "usr/bin/dash" for no shell).
    """
    _need_root()
    base = base_rootfs()
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _run(["cp", "-a", str(base), str(dest)], "copying the base rootfs")
    (dest / ".clustercheck-complete").unlink()
    img = Image(dest, [f"Debian {SUITE} from debootstrap --variant=minbase"])
    if verbs:
        packages = debs(VERBS_DEBS)
        inside = dest / "tmp" / "debs"
        inside.mkdir(parents=True)
        for deb in packages:
            shutil.copy2(deb, inside / deb.name)
        _run(["chroot", str(dest), "dpkg", "-i", *(f"/tmp/debs/{d.name}" for d in packages)], "dpkg -i rdma-core")
        shutil.rmtree(inside)
        img.notes.append("dpkg -i " + " ".join(d.name for d in packages))
    if verbs_prefix:
        lib = dest / "usr/lib/x86_64-linux-gnu"
        target = dest / verbs_prefix.lstrip("/")
        target.mkdir(parents=True)
        for path in sorted([*lib.glob("libibverbs.so.1*"), *lib.glob("librdmacm.so.1*")]):
            shutil.move(path, target / path.name)
        conf = dest / "etc/ld.so.conf.d/rdma-core.conf"
        conf.write_text(f"# site build of rdma-core\n{verbs_prefix}\n")
        _run(["chroot", str(dest), "ldconfig"], "ldconfig in the image")
        img.notes.append(
            f"libibverbs.so.1/librdmacm.so.1 moved to {verbs_prefix}, listed in /etc/ld.so.conf.d/rdma-core.conf"
        )
    if cuda:
        _lay_out_nvidia(img, cuda)
    for rel in drop:
        path = dest / rel.lstrip("/")
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        img.notes.append(f"removed /{rel.lstrip('/')}")
    return img


#: Bump when image() builds differently: cached images with another stamp are rebuilt.
BUILDER = "1"


def cached_image(name: str, **options: Any) -> Image:
    """image(CACHE/images/NAME, **options), built once: tests only read it (bwrap --ro-bind)."""
    dest = CACHE / "images" / name
    stamp = json.dumps({"builder": BUILDER, "suite": SUITE, **options}, sort_keys=True)
    done = dest / ".clustercheck-image"
    if done.exists() and done.read_text().splitlines()[0] == stamp:
        return Image(dest, done.read_text().splitlines()[1:])
    with _locked():
        if done.exists() and done.read_text().splitlines()[0] == stamp:
            return Image(dest, done.read_text().splitlines()[1:])
        partial = dest.with_name(name + ".partial")
        img = image(partial, **options)
        (partial / ".clustercheck-image").write_text("\n".join([stamp, *img.notes]) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    return Image(dest, img.notes)


def squashfs_of(img: Image, name: str) -> Path:
    """A real squashfs (mksquashfs, lzo as enroot makes them) of a cached image, cached beside it."""
    _ensure_tool("mksquashfs", "squashfs-tools")
    _ensure_tool("unsquashfs", "squashfs-tools")
    out = CACHE / "squashfs" / f"{name}.sqsh"
    stamp = out.with_suffix(".stamp")
    key = (img.root / ".clustercheck-image").read_text()
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    with _locked():
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        _run(
            ["mksquashfs", str(img.root), str(partial), "-comp", "lzo", "-noappend", "-quiet", "-e", "usr/share"],
            "mksquashfs",
        )
        partial.rename(out)
        stamp.write_text(key)
    return out


SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # where Debian's python3-pip installs as root


def _lay_out_nvidia(img: Image, layout: str) -> None:
    got = wheels()
    nccl = got["nvidia-nccl-cu12"]
    nccl_lib = nccl / "nvidia/nccl/lib/libnccl.so.2"
    if layout == "ngc12":
        rt = got["nvidia-cuda-runtime-cu12"]
        version = wheel_version(rt)  # 12.9.79: cuda-cudart-12-9 names the library libcudart.so.12.9.79
        major_minor = ".".join(version.split(".")[:2])
        lib = img.root / f"usr/local/cuda-{major_minor}/targets/x86_64-linux/lib"
        _place(rt / "nvidia/cuda_runtime/lib/libcudart.so.12", lib / f"libcudart.so.{version}")
        (lib / "libcudart.so.12").symlink_to(f"libcudart.so.{version}")
        (img.root / "usr/local/cuda").symlink_to(f"cuda-{major_minor}")
        (img.root / f"usr/local/cuda-{major_minor}/lib64").symlink_to("targets/x86_64-linux/lib")
        nv = wheel_version(nccl)  # libnccl2 installs libnccl.so.2.X.Y and the libnccl.so.2 link
        multiarch = img.root / "usr/lib/x86_64-linux-gnu"
        _place(nccl_lib, multiarch / f"libnccl.so.{nv}")
        (multiarch / "libnccl.so.2").symlink_to(f"libnccl.so.{nv}")
        img.notes.append(
            f"libcudart.so.{version} (nvidia-cuda-runtime-cu12 {version}) in /usr/local/cuda-{major_minor}/targets/"
            f"x86_64-linux/lib with /usr/local/cuda and lib64 links, libnccl.so.{nv} (nvidia-nccl-cu12 {nv}) in "
            "/usr/lib/x86_64-linux-gnu, as NVIDIA's cuda-cudart and libnccl2 packages (NGC images) place them"
        )
    elif layout in ("pip12", "pip13"):
        rt = got["nvidia-cuda-runtime-cu12" if layout == "pip12" else "nvidia-cuda-runtime"]
        site = img.root / SITE_PACKAGES
        for unpacked in (rt, nccl):
            for path in sorted(unpacked.rglob("*")):
                rel = path.relative_to(unpacked)
                if rel.name == ".clustercheck-complete" or path.is_dir():
                    continue
                _place(path, site / rel)
        img.notes.append(
            f"{dist_info(rt).name.removesuffix('.dist-info')} and {dist_info(nccl).name.removesuffix('.dist-info')} "
            f"unpacked into /{SITE_PACKAGES} as pip installs them"
        )
    else:
        raise ValueError(layout)


# -- the stand-in node ---------------------------------------------------------------------------

#: fixtures/rdma/healthy-ndr's HCA values (real ibstat of ConnectX-7 NDR nodes, in sysfs formats).
PORT = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}
FW = "28.41.1000"

NAMESPACE_SCRIPT = r"""set -e
W="$1"; shift
mount --make-rprivate /
mkdir -p "$W/mnt/class" "$W/mnt/dev"
mount --bind /sys/class "$W/mnt/class"
mount -t tmpfs -o mode=755 classes /sys/class
for e in "$W"/mnt/class/*; do n=${e##*/}; mkdir "/sys/class/$n"; mount --bind "$e" "/sys/class/$n"; done
for n in infiniband infiniband_verbs; do mkdir "/sys/class/$n"; mount --bind "$W/sys/$n" "/sys/class/$n"; done
mount --rbind /dev "$W/mnt/dev"
mount -t tmpfs -o mode=755 dev /dev
for e in "$W"/mnt/dev/* "$W"/mnt/dev/.[!.]*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  n=${e##*/}
  if [ -L "$e" ]; then ln -s "$(readlink "$e")" "/dev/$n"
  elif [ -d "$e" ]; then mkdir "/dev/$n"; mount --rbind "$e" "/dev/$n"
  else : > "/dev/$n"; mount --bind "$e" "/dev/$n"; fi
done
mkdir /dev/infiniband
mount --bind "$W/devices" /dev/infiniband
mount -t tmpfs -o mode=755 srv /srv
for e in "$W"/srv/*; do [ -e "$e" ] || continue; mkdir "/srv/${e##*/}"; mount --rbind "$e" "/srv/${e##*/}"; done
exec "$@"
"""


class StandinNode:
    """An RDMA node in a private mount namespace: HCA sysfs files, real /dev/infiniband char devices.

    `srv` maps names to folders shown under /srv inside (e.g. {"images": ...}), so commands and
    recorded fixtures name /srv/images/... instead of this machine's paths.
    """

    def __init__(self, work: Path, hcas: int = 8, srv: dict[str, Path] | None = None) -> None:
        _need_root()
        if not shutil.which("unshare"):
            unavailable("unshare (util-linux) is not installed")
        self.work = work
        self.hcas = [f"mlx5_{i}" for i in range(hcas)]
        for i, hca in enumerate(self.hcas):
            port = work / "sys/infiniband" / hca / "ports/1"
            port.mkdir(parents=True)
            for name, value in PORT.items():
                (port / name).write_text(value + "\n")
            (work / "sys/infiniband" / hca / "fw_ver").write_text(FW + "\n")
            verbs = work / "sys/infiniband_verbs" / f"uverbs{i}"
            verbs.mkdir(parents=True)
            (verbs / "ibdev").write_text(hca + "\n")
        devices = work / "devices"
        devices.mkdir()
        # majors/minors and modes of a real listing (Mellanox/k8s-rdma-shared-dev-plugin#98)
        nodes = [("rdma_cm", 10, 56, 0o666)]
        for i in range(hcas):
            nodes += [
                (f"uverbs{i}", 231, 192 + i, 0o666),
                (f"umad{i}", 231, i, 0o600),
                (f"issm{i}", 231, 64 + i, 0o600),
            ]
        for name, major, minor, mode in nodes:
            os.mknod(devices / name, mode | 0o020000, os.makedev(major, minor))
            os.chmod(devices / name, mode)
        (work / "srv").mkdir()
        self.srv = dict(srv or {})
        for name, folder in (srv or {}).items():  # bound at /srv/NAME inside (mount follows the link)
            (work / "srv" / name).symlink_to(folder.resolve())
        (work / "ns.sh").write_text(NAMESPACE_SCRIPT)

    def argv(self, command: Sequence[str]) -> list[str]:
        """`command` run inside the node's namespace."""
        return ["unshare", "-m", "sh", str(self.work / "ns.sh"), str(self.work), *command]
