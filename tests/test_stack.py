"""stack.* checks: the image probe script run for real over an unpacked image on this machine,
its output parsed, and the verdicts over the H100 fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import FIXTURES, cli
from tests.test_gpu import healthy_record, node, run

from clustercheck.facts.image import IMAGE_SCRIPT, parse_image_probe

H100 = FIXTURES / "gpu-h100"
IMAGE = "/shared/containers/train.sif"
APPTAINER = ("apptainer", "exec", "--cleanenv", IMAGE, "sh", "-c", IMAGE_SCRIPT)


def recorded_image_output(fixture: str) -> str:
    (folder,) = (H100 / fixture / "commands").glob("apptainer_*")
    return (folder / "stdout").read_text()


def test_parse_the_recorded_image() -> None:
    facts = parse_image_probe(recorded_image_output("healthy"), IMAGE)
    assert facts.version_json == "12.4.1"
    assert facts.cuda() == (facts.cuda()[0], "/usr/local/cuda/version.json (12.4.1)")  # type: ignore[index]
    assert str(facts.cuda()[0]) == "12.4.1"  # type: ignore[index]
    assert facts.compat_driver() == "550.54.15"
    assert facts.nccl() == ("2.21.5", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")
    assert facts.net_plugins() == ["/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"]
    assert facts.env["NVIDIA_REQUIRE_CUDA"].startswith("cuda>=12.4 ")


def test_an_entrypoint_banner_before_the_sections_is_ignored() -> None:
    text = "\n== PyTorch ==\nNVIDIA Release 24.05 (build 92775930)\n" + recorded_image_output("healthy")
    assert parse_image_probe(text, IMAGE).nccl() == ("2.21.5", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")


def test_order_of_trust_for_cuda_and_nccl() -> None:
    env_only = (
        "### version.json\n### env\nCUDA_VERSION=12.2.2\nNCCL_VERSION=2.19.3-1\n### libraries\n### nccl-version\n"
    )
    facts = parse_image_probe(env_only, "img")
    assert facts.cuda() is not None and str(facts.cuda()[0]) == "12.2.2"  # type: ignore[index]
    assert facts.nccl() == ("2.19.3", "NCCL_VERSION=2.19.3-1")
    libs_only = (
        "### version.json\n### env\n### libraries\n/usr/local/cuda/lib64/libcudart.so.12.1.105\n"
        "/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "### nccl-version\nNCCL version 2.18.1+cuda12.1\n"
    )
    facts = parse_image_probe(libs_only, "img")
    assert str(facts.cuda()[0]) == "12.1"  # type: ignore[index]  # 105 is cudart's build, not an update
    assert facts.nccl() == ("2.18.1", "the library's banner 'NCCL version 2.18.1+cuda12.1'")
    assert parse_image_probe("", "img").cuda() is None


@given(st.text(max_size=500))
@settings(max_examples=200, deadline=None)
def test_parse_image_probe_takes_any_text(text: str) -> None:
    facts = parse_image_probe("### version.json\n" + text, "img")
    facts.cuda(), facts.nccl(), facts.compat_driver(), facts.net_plugins()


# -- the script for real, over an unpacked image -------------------------------------------------


def unpacked_image(root: Path, *, pip_nccl: bool = False) -> Path:
    """A minimal image tree as enroot unpacks one: files named as CUDA and NCCL install them."""
    (root / "usr/local/cuda/lib64").mkdir(parents=True)
    (root / "usr/local/cuda/version.json").write_text(
        '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "12.2.2"\n   }\n}\n'
    )
    (root / "usr/local/cuda/lib64/libcudart.so.12.2.140").write_bytes(b"\x7fELF")
    (root / "etc").mkdir()
    (root / "etc/environment").write_text("CUDA_VERSION=12.2.2\nNCCL_VERSION=2.19.3-1\n")
    if pip_nccl:  # nvidia-nccl-cu12 ships only libnccl.so.2, with the version in its banner
        lib = root / "usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib"
        lib.mkdir(parents=True)
        (lib / "libnccl.so.2").write_bytes(b"\x7fELF\x00junk\x00NCCL version 2.20.5+cuda12.4\x00more")
        (root / "etc/environment").write_text("CUDA_VERSION=12.2.2\n")
    else:
        lib = root / "usr/lib/x86_64-linux-gnu"
        lib.mkdir(parents=True)
        (lib / "libnccl.so.2.19.3").write_bytes(b"\x7fELF")
        (lib / "libnccl.so.2").symlink_to("libnccl.so.2.19.3")
    plugin = root / "opt/hpcx/nccl_rdma_sharp_plugin/lib"
    plugin.mkdir(parents=True)
    (plugin / "libnccl-net.so").write_bytes(b"\x7fELF")
    return root


def local_run(tmp_path: Path, checks: str) -> dict[str, dict[str, Any]]:
    profile = tmp_path / "p.yaml"
    profile.write_text("name: t\nchecks:\n" + checks)
    proc = cli("run", "--local", "--profile", profile, "--format", "json")
    assert "Traceback" not in proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    return {c["id"]: c for c in host["checks"]}


def test_the_script_runs_over_an_unpacked_image_on_this_machine(tmp_path: Path) -> None:
    root = unpacked_image(tmp_path / "rootfs")
    pip = unpacked_image(tmp_path / "pip-rootfs", pip_nccl=True)
    checks = local_run(
        tmp_path,
        f"  stack.nccl: {{rootfs: {root}, min_version: '2.18', net_plugin: nccl_rdma_sharp_plugin}}\n"
        f"  stack.cuda_compat: {{rootfs: {root}}}\n",
    )
    nccl = checks["stack.nccl"]
    assert nccl["status"] == "ok", nccl
    assert nccl["summary"] == "NCCL 2.19.3 (>= 2.18), net plugin libnccl-net.so (nccl_rdma_sharp_plugin)"
    assert nccl["data"]["source"] == "/usr/lib/x86_64-linux-gnu/libnccl.so.2.19.3"
    assert any("'<image probe script>'" in e for e in nccl["evidence"])
    if checks["stack.cuda_compat"]["status"] == "skip":  # no driver here: nothing to judge against
        assert "no NVIDIA driver on the host" in str(checks["stack.cuda_compat"]["summary"])
    pip_checks = local_run(tmp_path, f"  stack.nccl: {{rootfs: {pip}, min_version: '2.21'}}\n")
    assert pip_checks["stack.nccl"]["status"] == "fail"
    assert pip_checks["stack.nccl"]["summary"] == "NCCL 2.20.5 is older than the minimum 2.21"


# -- verdicts over the H100 fixtures --------------------------------------------------------------


def test_the_h100_scenarios(tmp_path: Path) -> None:
    healthy = run(H100 / "healthy", "stack.cuda_compat", image=IMAGE)
    assert healthy.status.value == "ok" and healthy.summary.endswith("host driver 550.54.15 supports CUDA 12.4: ok")
    major = run(H100 / "cuda-major-too-new", "stack.cuda_compat", image=IMAGE)
    assert major.status.value == "fail"
    assert major.summary.startswith("image CUDA 13.0.1 needs driver >= 580.82.07")
    assert "below CUDA 13's minimum driver" in major.summary and "not R550" in major.summary
    minor = run(H100 / "cuda-minor-compat", "stack.cuda_compat", image=IMAGE)
    assert minor.status.value == "warn" and "minor-version compatibility only, PTX JIT unavailable" in minor.summary
    assert "PTX" in minor.remedy


def test_forward_compatibility_on_r535(tmp_path: Path) -> None:
    record = healthy_record()
    record.update(driver_version="535.104.05", cuda_version="12.2")
    result = run(node(tmp_path, record=record), "stack.cuda_compat", image=IMAGE)
    assert result.status.value == "ok" and result.data["rule"] == "forward compatibility"
    assert "cuda-compat 12.4 (libcuda 550.54.15) supports R535" in result.summary


def test_versions_given_in_the_profile(tmp_path: Path) -> None:
    folder = node(tmp_path)
    given_cuda = run(folder, "stack.cuda_compat", cuda_version="12.6")
    assert given_cuda.status.value == "warn" and given_cuda.data["source"] == "the profile's cuda_version 12.6"
    assert run(folder, "stack.nccl", nccl_version="2.18.3", min_version="2.19.3").status.value == "fail"
    assert run(folder, "stack.cuda_compat").status.value == "skip"
    assert run(folder, "stack.nccl").summary.startswith("no container image named by the profile")


def test_net_plugin_expectations(tmp_path: Path) -> None:
    folder = H100 / "healthy"
    assert run(folder, "stack.nccl", image=IMAGE, net_plugin="any").status.value == "ok"
    none = run(folder, "stack.nccl", image=IMAGE, net_plugin="none")
    assert none.status.value == "fail" and "present, expected none" in none.summary
    aws = run(folder, "stack.nccl", image=IMAGE, net_plugin="ofi-nccl")
    assert aws.status.value == "fail" and "no NCCL net plugin matching 'ofi-nccl'" in aws.summary


def replace_image_command(folder: Path, code: int, stdout: str, stderr: str) -> None:
    (cmd,) = (folder / "commands").glob("apptainer_*")
    meta = yaml.safe_load((cmd / "command.yaml").read_text())
    meta["exit_code"] = code
    (cmd / "command.yaml").write_text(yaml.safe_dump(meta))
    (cmd / "stdout").write_text(stdout)
    (cmd / "stderr").write_text(stderr)


def test_missing_runtime_or_image_is_an_error_with_the_reason(tmp_path: Path) -> None:
    folder = node(tmp_path)
    replace_image_command(folder, 127, "", "apptainer: command not found\n")
    result = run(folder, "stack.cuda_compat", image=IMAGE)
    assert result.status.value == "error"
    assert result.summary == f"apptainer is not installed on the node: cannot look inside {IMAGE}"
    fatal = (
        "FATAL:   could not open image /shared/containers/train.sif: failed to retrieve path: no such file or directory"
    )
    replace_image_command(folder, 255, "", fatal + "\n")
    result = run(folder, "stack.nccl", image=IMAGE)
    assert result.status.value == "error" and result.summary.endswith("exited 255: " + fatal)
    unknown = run(folder, "stack.nccl", image="/shared/containers/train.tar")
    assert unknown.status.value == "error" and "runtime: apptainer|enroot" in unknown.summary


def test_an_image_without_cuda_fails(tmp_path: Path) -> None:
    folder = node(tmp_path)
    replace_image_command(folder, 0, "### version.json\n### env\nPATH=/usr/bin\n### libraries\n### nccl-version\n", "")
    result = run(folder, "stack.cuda_compat", image=IMAGE)
    assert result.status.value == "fail" and result.summary.startswith(f"no CUDA found in {IMAGE}")


def test_enroot_images_use_enroot_start(tmp_path: Path) -> None:
    folder = node(tmp_path)
    (cmd,) = (folder / "commands").glob("apptainer_*")
    meta = yaml.safe_load((cmd / "command.yaml").read_text())
    sqsh = "/shared/containers/train.sqsh"
    meta["argv"] = ["enroot", "start", "--env", "NVIDIA_VISIBLE_DEVICES=void", sqsh, "sh", "-c", IMAGE_SCRIPT]
    enroot = folder / "commands" / "enroot"
    shutil.move(cmd, enroot)
    (enroot / "command.yaml").write_text(yaml.safe_dump(meta))
    result = run(folder, "stack.nccl", image=sqsh)
    assert result.status.value == "ok" and result.summary.startswith("NCCL 2.21.5")


# -- pip wheels, missing tools, and images that cannot start (the real ones: test_container_real.py) --


def test_pip_wheels_give_the_versions_their_library_names_lack() -> None:
    # the file names of nvidia-cuda-runtime 13.5.37 and nvidia-nccl-cu12 2.32.3 as pip installs them
    site = "/usr/local/lib/python3.11/dist-packages"
    text = (
        f"### version.json\n### env\nPATH=/usr/bin\n### libraries\n{site}/nvidia/nccl/lib/libnccl.so.2\n"
        f"{site}/nvidia/cu13/lib/libcudart.so.13\n### pip\n{site}/nvidia_cuda_runtime-13.5.37.dist-info\n"
        f"{site}/nvidia_nccl_cu12-2.32.3.dist-info\n### nccl-version\n"
    )
    facts = parse_image_probe(text, "img")
    cuda = facts.cuda()
    assert cuda is not None and str(cuda[0]) == "13.5" and cuda[1].endswith("nvidia_cuda_runtime-13.5.37.dist-info")
    assert facts.nccl() == ("2.32.3", f"{site}/nvidia_nccl_cu12-2.32.3.dist-info")
    cu12 = parse_image_probe(text.replace("nvidia_cuda_runtime-13.5.37", "nvidia_cuda_runtime_cu12-12.9.79"), "i")
    assert str(cu12.cuda()[0]) == "12.9"  # type: ignore[index]


def test_an_image_without_grep_cannot_tell_its_nccl(tmp_path: Path) -> None:
    folder = node(tmp_path)
    lib = "/usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2"
    out = f"### version.json\n### env\nPATH=/usr/bin\n### libraries\n{lib}\n### pip\n"
    out += "### nccl-version\n### missing\ngrep\n"
    replace_image_command(folder, 0, out, "")
    result = run(folder, "stack.nccl", image=IMAGE)
    assert result.status.value == "error"
    assert result.summary == (
        f"{IMAGE} has {lib} but no grep to read its version banner, and no libnccl.so.2.X.Y name, NCCL_VERSION "
        "or nvidia-nccl wheel tells it: give `nccl_version:`"
    )


def test_what_is_wrong_with_an_image_file(tmp_path: Path) -> None:
    from clustercheck.facts.image import image_trouble
    from clustercheck.host import Host
    from clustercheck.transports.local import LocalTransport

    host = Host(LocalTransport("local"))
    (tmp_path / "unpacked").mkdir()
    (tmp_path / "empty.sqsh").write_bytes(b"")
    # a squashfs superblock: magic hsqs, bytes_used (offset 40) larger than the file
    head = bytearray(96)
    head[0:4] = b"hsqs"
    head[40:48] = (1 << 20).to_bytes(8, "little")
    (tmp_path / "cut.sqsh").write_bytes(bytes(head))
    (tmp_path / "tiny.sqsh").write_bytes(b"hsqs\x00\x00")
    assert image_trouble(host, str(tmp_path / "unpacked")).startswith(f"{tmp_path}/unpacked is a folder")
    assert image_trouble(host, str(tmp_path / "nope.sif")) == f"{tmp_path}/nope.sif does not exist on the node"
    assert image_trouble(host, str(tmp_path / "empty.sqsh")) == f"{tmp_path}/empty.sqsh is empty (0 bytes)"
    assert image_trouble(host, str(tmp_path / "cut.sqsh")) == (
        f"{tmp_path}/cut.sqsh is truncated: its squashfs superblock says 1048576 bytes, the file has 96"
    )
    assert "shorter than a squashfs superblock" in image_trouble(host, str(tmp_path / "tiny.sqsh"))
    assert image_trouble(host, "docker://nvcr.io/nvidia/pytorch:24.05-py3") == ""


def test_a_rootfs_that_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "image.sqsh").write_bytes(b"hsqs")
    checks = local_run(tmp_path, f"  stack.nccl: {{rootfs: {tmp_path / 'image.sqsh'}}}\n")
    assert checks["stack.nccl"]["status"] == "error"
    assert checks["stack.nccl"]["summary"] == (
        f"rootfs {tmp_path / 'image.sqsh'} is a file, not a folder on the node: "
        "`rootfs:` names an unpacked image folder"
    )


def test_a_missing_shell_is_told_from_a_missing_file() -> None:
    from clustercheck.facts.image import _why_not_started

    assert _why_not_started("bwrap: execvp sh: No such file or directory\n").startswith("the image has no /bin/sh")
    fatal = 'FATAL:   "sh": executable file not found in $PATH'
    assert _why_not_started(fatal) == f"the image has no /bin/sh ({fatal})"
    missing = "FATAL:   could not open image /shared/sh/train.sif: no such file or directory"
    assert _why_not_started(missing) == missing
