"""The software stack inside the job's container image against the host: CUDA and NCCL.

Reads: one shell script run inside the image the jobs use (`apptainer exec --cleanenv
IMAGE sh -c ...` for .sif images, `enroot start IMAGE sh -c ...` for enroot/Pyxis .sqsh
images) or, for an unpacked image (`rootfs:`), the same script over that directory on the
host. The script prints /usr/local/cuda/version.json, the image's environment, and the
names of the CUDA, NCCL and NCCL net plugin libraries it finds (plus the "NCCL version"
string of a libnccl.so.2 without a versioned name). It writes nothing. The host side
comes from the `nvml` probe (clustercheck.facts.gpu); the script and its parser are
clustercheck.facts.image.

Versions given in the profile (`cuda_version:`, `nccl_version:`) replace looking inside an
image. The CUDA <-> driver rules and NVIDIA's tables are in clustercheck.analyzers.versions.
"""

from __future__ import annotations

from clustercheck import Host, Result, check, fail, ok, skip, warn
from clustercheck.analyzers.versions import (
    CudaVersion,
    ForwardCompat,
    judge_cuda,
    parse_require_cuda,
    version_key,
)
from clustercheck.errors import HostError
from clustercheck.facts.gpu import gpus
from clustercheck.facts.image import image_facts


@check(needs=["probe nvml", "command apptainer or enroot"], timeout=150, action="FIX_CONFIG")
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

    Action: FIX_CONFIG (the node's driver or the image: the remedy says which).
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


@check(needs=["command apptainer or enroot"], timeout=150, action="FIX_CONFIG")
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

    Action: FIX_CONFIG (the image's NCCL or net plugin).
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
