"""The in-image probes inside a real namespace container over a real Debian rootfs, with NVIDIA's
real CUDA runtime and NCCL libraries (tests/rootfs.py builds and caches them).

The container runtime is bubblewrap, given to the checks as their `command:` (the site-launcher
parameter): `--dev-bind /dev /dev` is what Apptainer's default `mount dev = yes` and Enroot's
default do (the whole host /dev), `--dev /dev` a minimal /dev (Apptainer's `mount dev = minimal` /
--contain, Enroot's ENROOT_RESTRICT_DEV), `--dev /dev --dev-bind /dev/infiniband /dev/infiniband`
--contain with `--bind /dev/infiniband`. The RDMA node is tests/rootfs.py's StandinNode: HCA
sysfs files and real character devices (mknod) in a private mount namespace. The checks run
through the CLI (`clustercheck run --local`) inside that namespace, or through the check API
with a GPU stand-in (the NVML record of fixtures/gpu-h100/healthy) where a verdict needs a driver.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests import rootfs
from tests.helpers import CORPUS, FIXTURES, REPO

from clustercheck import __version__, runner
from clustercheck import profile as profiles
from clustercheck.facts.image import image_facts
from clustercheck.host import Host
from clustercheck.transports.local import LocalTransport

# a cold cache builds the rootfs and images in the first test's setup (about 100 s here)
pytestmark = pytest.mark.timeout(900)

SYS = ["--ro-bind", "/sys", "/sys", "--proc", "/proc"]
FULL_DEV = ["--dev-bind", "/dev", "/dev"]
MINIMAL_DEV = ["--dev", "/dev"]
CONTAIN_BIND = ["--dev", "/dev", "--dev-bind", "/dev/infiniband", "/dev/infiniband"]
CONF = CORPUS / "container_conf"
# NVIDIA/enroot Makefile (HOOKS): the standard hooks a package installs, without 99-mellanox.sh
HOOKS = ["10-aptfix.sh", "10-cgroups.sh", "10-devices.sh", "10-home.sh", "10-localtime.sh", "10-shadow.sh"]


def bwrap(image: str, dev: list[str]) -> list[str]:
    return ["bwrap", "--ro-bind", f"/srv/images/{image}", "/", *dev, *SYS]


@pytest.fixture(scope="module")
def images() -> dict[str, rootfs.Image]:
    rootfs.need_tools()
    return {
        "verbs": rootfs.cached_image("verbs", verbs=True, cuda="ngc12"),
        "bare": rootfs.cached_image("bare", cuda="pip12"),
        "site": rootfs.cached_image("site", verbs=True, verbs_prefix="/opt/rdma-core/lib", cuda="pip13"),
        "no-ls": rootfs.cached_image("no-ls", verbs=True, drop=["usr/bin/ls"]),
        "no-shell": rootfs.cached_image("no-shell", verbs=True, drop=["usr/bin/sh", "usr/bin/dash"]),
        "no-tools": rootfs.cached_image("no-tools", verbs=True, drop=["usr/bin/grep", "usr/bin/cat", "usr/bin/ls"]),
    }


@pytest.fixture(scope="module")
def node(images: dict[str, rootfs.Image], tmp_path_factory: pytest.TempPathFactory) -> rootfs.StandinNode:
    etc = tmp_path_factory.mktemp("etc")
    (etc / "apptainer").mkdir()
    lines = (CONF / "apptainer-gediminasa-apptainerbuild-apptainer.conf.txt").read_text().splitlines(keepends=True)
    assert lines[64].startswith("mount dev = yes")
    lines[64] = "mount dev = minimal\n"  # what bwrap --dev /dev gives, as the conf would say it
    (etc / "apptainer/apptainer.conf").write_text("".join(lines))
    (etc / "enroot/hooks.d").mkdir(parents=True)
    (etc / "enroot/enroot.conf.d").mkdir()
    enroot = (CONF / "enroot-aws-ami-role-enroot.conf.txt").read_text()
    (etc / "enroot/enroot.conf").write_text(
        enroot.replace("ENROOT_RESTRICT_DEV        no", "ENROOT_RESTRICT_DEV        y")
    )
    for hook in HOOKS:
        (etc / "enroot/hooks.d" / hook).write_text("")
    root = next(iter(images.values())).root.parent
    squash = tmp_path_factory.mktemp("squash")
    return rootfs.StandinNode(tmp_path_factory.mktemp("node"), srv={"images": root, "etc": etc, "squash": squash})


def run_in_node(node: rootfs.StandinNode, tmp_path: Path, checks: dict[str, Any]) -> dict[str, dict[str, Any]]:
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"name": "real", "checks": checks}))
    argv = node.argv(
        [sys.executable, "-m", "clustercheck", "run", "--local", "--profile", str(profile), "--format", "json"]
    )
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, "NO_COLOR": "1"}
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    return {c["id"]: c for c in host["checks"]}


def apptainer(command: list[str], **more: Any) -> dict[str, Any]:
    return {"command": command, "conf": "/srv/etc/apptainer/apptainer.conf", **more}


# -- RDMA inside a real container -------------------------------------------------------------


def test_the_probe_tells_a_full_dev_from_a_minimal_one(node: rootfs.StandinNode, tmp_path: Path) -> None:
    full = run_in_node(node, tmp_path, {"container.apptainer_rdma": apptainer(bwrap("verbs", FULL_DEV))})
    check = full["container.apptainer_rdma"]
    assert check["status"] == "ok", check
    assert check["summary"].startswith("inside the image: the host's rdma_cm, uverbs0..uverbs7, 8 HCAs, libibverbs")
    assert "bubblewrap 0.8" in check["evidence"][0] or check["evidence"][0].startswith("apptainer: bubblewrap")
    assert "inside: /dev/infiniband: issm0..issm7, rdma_cm, umad0..umad7, uverbs0..uverbs7" in check["evidence"]

    minimal = run_in_node(node, tmp_path, {"container.apptainer_rdma": apptainer(bwrap("verbs", MINIMAL_DEV))})
    check = minimal["container.apptainer_rdma"]
    assert check["status"] == "fail", check
    assert check["summary"].startswith(
        "inside the image: /dev/infiniband is missing inside (the host has rdma_cm, uverbs0..uverbs7). "
        "Cause: /srv/etc/apptainer/apptainer.conf:65: `mount dev = minimal`"
    )
    assert "inside: /dev/infiniband: absent" in check["evidence"]
    assert check["data"]["missing_hcas"] == []  # /sys is bound: the HCAs are seen, only /dev is short

    bound = run_in_node(node, tmp_path, {"container.apptainer_rdma": apptainer(bwrap("verbs", CONTAIN_BIND))})
    assert bound["container.apptainer_rdma"]["status"] == "ok", bound


def test_enroot_restrict_dev_in_a_real_container(node: rootfs.StandinNode, tmp_path: Path) -> None:
    checks = run_in_node(
        node,
        tmp_path,
        {"container.enroot_rdma": {"command": bwrap("verbs", MINIMAL_DEV), "conf_dir": "/srv/etc/enroot"}},
    )
    check = checks["container.enroot_rdma"]
    assert check["status"] == "fail", check
    assert "/srv/etc/enroot/enroot.conf:58: `ENROOT_RESTRICT_DEV y` replaces /dev" in check["summary"]
    assert "/srv/etc/enroot/hooks.d has no 99-mellanox.sh" in check["summary"]


def test_an_image_without_rdma_core(node: rootfs.StandinNode, tmp_path: Path) -> None:
    check = run_in_node(node, tmp_path, {"container.apptainer_rdma": apptainer(bwrap("bare", FULL_DEV))})[
        "container.apptainer_rdma"
    ]
    assert check["status"] == "fail"
    assert check["summary"] == (
        "inside the image: no libibverbs.so.1 in the image; no mlx5 verbs provider (libmlx5-rdmav*.so) in the image"
    )


def test_a_site_prefix_in_ld_so_conf_d_is_found(
    images: dict[str, rootfs.Image], node: rootfs.StandinNode, tmp_path: Path
) -> None:
    """libibverbs under /opt/rdma-core/lib, listed in /etc/ld.so.conf.d: the image's loader finds it,
    so must the probe."""
    cache = subprocess.run(
        ["chroot", str(images["site"].root), "ldconfig", "-p"], capture_output=True, text=True, check=True
    )
    assert "libibverbs.so.1 (libc6,x86-64) => /opt/rdma-core/lib/libibverbs.so.1" in cache.stdout
    check = run_in_node(node, tmp_path, {"container.apptainer_rdma": apptainer(bwrap("site", FULL_DEV))})[
        "container.apptainer_rdma"
    ]
    assert check["status"] == "ok", check
    assert any("/opt/rdma-core/lib/libibverbs.so.1" in e for e in check["evidence"])


def test_a_rootfs_without_ls_or_without_a_shell(node: rootfs.StandinNode, tmp_path: Path) -> None:
    checks = run_in_node(
        node,
        tmp_path,
        {
            "container.apptainer_rdma": apptainer(bwrap("no-ls", FULL_DEV)),  # the probe needs no ls
            "container.enroot_rdma": {"command": bwrap("no-shell", FULL_DEV), "conf_dir": "/srv/etc/enroot"},
            "stack.nccl": {"command": bwrap("no-shell", FULL_DEV)},
        },
    )
    assert checks["container.apptainer_rdma"]["status"] == "ok", checks["container.apptainer_rdma"]
    no_shell = checks["container.enroot_rdma"]
    assert no_shell["status"] == "error"
    assert "the probe did not run inside the image" in no_shell["summary"]
    assert "bwrap: execvp sh: No such file or directory" in no_shell["summary"]
    stack = checks["stack.nccl"]
    assert stack["status"] == "error"
    assert "the image has no /bin/sh (bwrap: execvp sh: No such file or directory)" in stack["summary"]


def test_nccl_settings_inside_an_image_without_grep_or_cat(
    images: dict[str, rootfs.Image], node: rootfs.StandinNode, tmp_path: Path
) -> None:
    """An image that lacks grep and cat still shows its NCCL settings: an empty answer is not health."""
    tools = images["no-tools"].root
    assert not (tools / "usr/bin/grep").exists() and not (tools / "usr/bin/cat").exists()
    command = ["bwrap", "--setenv", "NCCL_IB_DISABLE", "1", *bwrap("no-tools", FULL_DEV)[1:]]
    checks = run_in_node(node, tmp_path, {"rdma.nccl_env": {"image_command": command, "conf": "/srv/etc/none.conf"}})
    check = checks["rdma.nccl_env"]
    assert check["status"] == "fail", check
    assert "in the image: NCCL_IB_DISABLE=1 (image environment)" in check["summary"], check["summary"]


# -- bad input: an image that is a folder or a truncated squashfs, a runtime that hangs --------

# What `enroot start IMAGE.sqsh` does without squashfuse: unpack the squashfs, start a container on it.
SQUASH_LAUNCHER = (
    'D=$(mktemp -d); unsquashfs -q -n -f -d "$D/root" "$0" >&2 && '
    'bwrap --ro-bind "$D/root" / --dev /dev --ro-bind /sys /sys --proc /proc "$@"; rc=$?; rm -rf "$D"; exit $rc'
)


@pytest.fixture(scope="module")
def squashfs(images: dict[str, rootfs.Image], node: rootfs.StandinNode) -> tuple[Path, Path]:
    """A real squashfs of the image without a shell (the smallest at hand), and a copy cut at half,
    in the folder the node shows as /srv/squash."""
    good = rootfs.squashfs_of(images["no-shell"], "no-shell")
    cut = node.srv["squash"] / "cut.sqsh"
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    return good, cut


def test_an_image_that_is_a_folder_or_a_truncated_squashfs(
    squashfs: tuple[Path, Path], node: rootfs.StandinNode, tmp_path: Path
) -> None:
    good, cut = squashfs
    folder = "/srv/images/verbs"
    truncated = f"/srv/squash/{cut.name}"

    def launch(image: str) -> list[str]:
        return ["sh", "-c", SQUASH_LAUNCHER, image]

    checks = run_in_node(
        node,
        tmp_path,
        {
            "stack.nccl": {"image": truncated, "command": launch(truncated)},
            "container.enroot_rdma": {"image": folder, "command": launch(folder), "conf_dir": "/srv/etc/enroot"},
        },
    )
    stack = checks["stack.nccl"]
    assert stack["status"] == "error", stack
    size = cut.stat().st_size
    (used,) = struct.unpack_from("<Q", good.read_bytes(), 40)  # squashfs bytes_used (the file is padded to 4 KiB)
    assert used <= good.stat().st_size
    assert (
        f"Cause: {truncated} is truncated: its squashfs superblock says {used} bytes, the file has {size}"
        in stack["summary"]
    )
    enroot = checks["container.enroot_rdma"]
    assert enroot["status"] == "error", enroot
    assert f"Cause: {folder} is a folder, not an image file" in enroot["summary"]


def test_a_runtime_that_hangs_is_an_error_within_the_budget(node: rootfs.StandinNode, tmp_path: Path) -> None:
    hang = ["sh", "-c", 'sleep 300; exec "$@"', "hung-runtime"]  # an image on a dead parallel file system
    start = time.monotonic()
    checks = run_in_node(
        node,
        tmp_path,
        {
            "container.apptainer_rdma": apptainer(hang, timeout=3),
            "stack.nccl": {"command": hang, "timeout": 3},
        },
    )
    took = time.monotonic() - start
    assert took < 20, took
    assert checks["container.apptainer_rdma"]["status"] == "error"
    assert "did not finish within" in checks["container.apptainer_rdma"]["summary"]
    assert checks["stack.nccl"]["status"] == "error"
    assert "did not finish within" in checks["stack.nccl"]["summary"]


# -- CUDA and NCCL: NVIDIA's real libraries ----------------------------------------------------


class GpuStandin(LocalTransport):
    """This machine for commands and files; the NVML record of an 8 x H100 node (driver 550.54.15)."""

    def probe(self, name: str, *, timeout: float) -> Any:
        assert name == "nvml"
        return json.loads((FIXTURES / "gpu-h100/healthy/probes/nvml.json").read_text())


def stack_checks(tmp_path: Path, params: dict[str, Any]) -> dict[str, Any]:
    profile = tmp_path / "stack.yaml"
    profile.write_text(yaml.safe_dump({"name": "s", "checks": {"stack.nccl": params, "stack.cuda_compat": params}}))
    report = runner.run_profile(profiles.load(str(profile)), [GpuStandin("h100-standin")], version=__version__)
    return {c.id: c for c in report.hosts[0].checks}


def test_ngc_layout_versions_from_real_libraries(images: dict[str, rootfs.Image], tmp_path: Path) -> None:
    versions = {name: rootfs.wheel_version(path) for name, path in rootfs.wheels().items()}
    runtime, nccl = versions["nvidia-cuda-runtime-cu12"], versions["nvidia-nccl-cu12"]
    root = str(images["verbs"].root)
    for params in ({"rootfs": root}, {"command": ["bwrap", "--ro-bind", root, "/", *MINIMAL_DEV, *SYS]}):
        checks = stack_checks(tmp_path, params)
        assert checks["stack.nccl"].status.value == "ok", checks["stack.nccl"]
        assert checks["stack.nccl"].summary == f"NCCL {nccl}, net plugin none"
        assert checks["stack.nccl"].data["source"] == f"/usr/lib/x86_64-linux-gnu/libnccl.so.{nccl}"
        cuda = checks["stack.cuda_compat"]
        assert cuda.data["source"] == f"libcudart.so.{runtime}"
        assert cuda.data["image_cuda"] == ".".join(runtime.split(".")[:2])
        # CUDA 12.9 on driver 550 (CUDA 12.4): minor-version compatibility
        assert cuda.status.value == "warn" and "minor-version compatibility" in cuda.summary, cuda


def test_pip_layout_versions_from_real_wheels(images: dict[str, rootfs.Image], tmp_path: Path) -> None:
    """pip's libcudart.so.12/.13 and libnccl.so.2 carry no version in their names."""
    wheels = rootfs.wheels()
    nccl = rootfs.wheel_version(wheels["nvidia-nccl-cu12"])
    cu12 = rootfs.wheel_version(wheels["nvidia-cuda-runtime-cu12"])
    cu13 = rootfs.wheel_version(wheels["nvidia-cuda-runtime"])
    bare = stack_checks(
        tmp_path, {"command": ["bwrap", "--ro-bind", str(images["bare"].root), "/", *MINIMAL_DEV, *SYS]}
    )
    assert bare["stack.nccl"].status.value == "ok"
    # the library's own banner, read inside the container
    assert bare["stack.nccl"].data["source"].startswith(f"the library's banner 'NCCL version {nccl}+cuda")
    assert bare["stack.cuda_compat"].data["source"].endswith(f"/nvidia_cuda_runtime_cu12-{cu12}.dist-info")
    assert bare["stack.cuda_compat"].data["image_cuda"] == ".".join(cu12.split(".")[:2])
    site = stack_checks(tmp_path, {"rootfs": str(images["site"].root)})
    cuda13 = site["stack.cuda_compat"]
    assert cuda13.data["image_cuda"] == ".".join(cu13.split(".")[:2]) and cuda13.data["image_cuda"].startswith("13.")
    assert cuda13.status.value == "fail" and "needs driver >= 580" in cuda13.summary, cuda13


def test_the_probe_reads_the_wheels_inside_a_real_container(images: dict[str, rootfs.Image]) -> None:
    """The check API's gather, over this machine as the node, for both pip images."""
    host = Host(LocalTransport("local"), command_timeout=60)
    for name, runtime_lib in (
        ("bare", "nvidia/cuda_runtime/lib/libcudart.so.12"),
        ("site", "nvidia/cu13/lib/libcudart.so.13"),
    ):
        command = ("bwrap", "--ro-bind", str(images[name].root), "/", *MINIMAL_DEV, *SYS)
        facts = image_facts(host, "", "", "auto", command)
        assert f"/{rootfs.SITE_PACKAGES}/{runtime_lib}" in facts.libraries
        assert f"/{rootfs.SITE_PACKAGES}/nvidia/nccl/lib/libnccl.so.2" in facts.libraries
        assert facts.nccl_string is not None and facts.nccl_string.startswith(
            rootfs.wheel_version(rootfs.wheels()["nvidia-nccl-cu12"])
        )
