"""CUDA toolkit <-> NVIDIA driver compatibility: NVIDIA's tables and the rules that judge them.

Host-free and pure: `stack.cuda_compat` feeds it the image's CUDA version and the host's
driver. Every row names its source; the sources are summarized in docs/domain-facts.md §A.
NVIDIA's rows as published, each with its source, are kept in the repository as data
(tests/corpus/cuda/toolkit-driver-versions.csv and forward-compat-matrix.csv), and
tests/test_versions.py checks the tables below against them row by row:

- Table 3 of the CUDA release notes, "CUDA Toolkit and Corresponding Driver Versions"
  (CUDA 13.2 Update 2 notes; rows up to 13.1 identical in the 13.1 notes):
  https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html
  - the driver each toolkit release ships with, i.e. what it needs without any
  compatibility mode (§A.1). Rows before CUDA 11 come from Table 2 of the CUDA
  Compatibility guide (§A.2).
- Table 2 of the same release notes, "CUDA Toolkit and Minimum Required Driver Version for
  CUDA Minor Version Compatibility" (§A.2), with the exact floors named in `MINOR_COMPAT_FLOOR`.
- The forward-compatibility matrix of the CUDA Compatibility guide (615 edition):
  https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html (§A.4).

The rules (§A.2-A.4):
1. driver >= the toolkit release's own driver: ok.
2. CUDA 11+: same major and driver >= that major's floor: works under minor-version
   compatibility, but PTX JIT of newer code fails and some APIs return
   cudaErrorCallRequiresNewerDriver: warn.
3. The image ships cuda-compat (libcuda from a newer driver) on a data-center GPU and a
   driver branch that package supports: ok with forward compatibility.
4. Otherwise (below the major's floor, a newer major, or CUDA 10 and older without its
   exact driver): CUDA cannot initialize: fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustercheck.result import Status

A1 = "CUDA release notes Table 3 (domain-facts §A.1)"
A2 = "CUDA Compatibility guide Table 2 (domain-facts §A.2)"


@dataclass(frozen=True)
class ToolkitRow:
    """One CUDA toolkit release and the Linux x86_64 driver it ships with (and needs)."""

    cuda: str  # "12.4.1": major.minor.update, as CUDA_VERSION spells it
    release: str  # "12.4 Update 1", as the table spells it
    driver: str  # "550.54.15"
    source: str


# Newest first. The third number of a toolkit version is its update (12.4.1 = 12.4 Update 1),
# except 11.0, whose 11.0.1 was the RC and 11.0.2 the GA (the table says so).
TOOLKIT_DRIVERS: tuple[ToolkitRow, ...] = (
    ToolkitRow("13.2.2", "13.2 Update 2", "595.71.05", A1),
    ToolkitRow("13.2.1", "13.2 Update 1", "595.58.03", A1),
    ToolkitRow("13.2.0", "13.2 GA", "595.45.04", A1),
    ToolkitRow("13.1.1", "13.1 Update 1", "590.48.01", A1),
    ToolkitRow("13.1.0", "13.1 GA", "590.44.01", A1),
    ToolkitRow("13.0.2", "13.0 Update 2", "580.95.05", A1),
    ToolkitRow("13.0.1", "13.0 Update 1", "580.82.07", A1),
    ToolkitRow("13.0.0", "13.0 GA", "580.65.06", A1),
    ToolkitRow("12.9.1", "12.9 Update 1", "575.57.08", A1),
    ToolkitRow("12.9.0", "12.9 GA", "575.51.03", A1),
    ToolkitRow("12.8.1", "12.8 Update 1", "570.124.06", A1),
    ToolkitRow("12.8.0", "12.8 GA", "570.26", A1),
    # There is no CUDA 12.7 (same source).
    ToolkitRow("12.6.3", "12.6 Update 3", "560.35.05", A1),
    ToolkitRow("12.6.2", "12.6 Update 2", "560.35.03", A1),
    ToolkitRow("12.6.1", "12.6 Update 1", "560.35.03", A1),
    ToolkitRow("12.6.0", "12.6 GA", "560.28.03", A1),
    ToolkitRow("12.5.1", "12.5 Update 1", "555.42.06", A1),
    ToolkitRow("12.5.0", "12.5 GA", "555.42.02", A1),
    ToolkitRow("12.4.1", "12.4 Update 1", "550.54.15", A1),
    ToolkitRow("12.4.0", "12.4 GA", "550.54.14", A1),
    ToolkitRow("12.3.1", "12.3 Update 1", "545.23.08", A1),
    ToolkitRow("12.3.0", "12.3 GA", "545.23.06", A1),
    ToolkitRow("12.2.2", "12.2 Update 2", "535.104.05", A1),
    ToolkitRow("12.2.1", "12.2 Update 1", "535.86.09", A1),
    ToolkitRow("12.2.0", "12.2 GA", "535.54.03", A1),
    ToolkitRow("12.1.1", "12.1 Update 1", "530.30.02", A1),
    ToolkitRow("12.1.0", "12.1 GA", "530.30.02", A1),
    ToolkitRow("12.0.1", "12.0 Update 1", "525.85.12", A1),
    ToolkitRow("12.0.0", "12.0 GA", "525.60.13", A1),
    ToolkitRow("11.8.0", "11.8 GA", "520.61.05", A1),
    ToolkitRow("11.7.1", "11.7 Update 1", "515.48.07", A1),
    ToolkitRow("11.7.0", "11.7 GA", "515.43.04", A1),
    ToolkitRow("11.6.2", "11.6 Update 2", "510.47.03", A1),
    ToolkitRow("11.6.1", "11.6 Update 1", "510.47.03", A1),
    ToolkitRow("11.6.0", "11.6 GA", "510.39.01", A1),
    ToolkitRow("11.5.2", "11.5 Update 2", "495.29.05", A1),
    ToolkitRow("11.5.1", "11.5 Update 1", "495.29.05", A1),
    ToolkitRow("11.5.0", "11.5 GA", "495.29.05", A1),
    ToolkitRow("11.4.4", "11.4 Update 4", "470.82.01", A1),
    ToolkitRow("11.4.3", "11.4 Update 3", "470.82.01", A1),
    ToolkitRow("11.4.2", "11.4 Update 2", "470.57.02", A1),
    ToolkitRow("11.4.1", "11.4 Update 1", "470.57.02", A1),
    ToolkitRow("11.4.0", "11.4.0 GA", "470.42.01", A1),
    ToolkitRow("11.3.1", "11.3.1 Update 1", "465.19.01", A1),
    ToolkitRow("11.3.0", "11.3.0 GA", "465.19.01", A1),
    ToolkitRow("11.2.2", "11.2.2 Update 2", "460.32.03", A1),
    ToolkitRow("11.2.1", "11.2.1 Update 1", "460.32.03", A1),
    ToolkitRow("11.2.0", "11.2.0 GA", "460.27.03", A1),
    ToolkitRow("11.1.1", "11.1.1 Update 1", "455.32", A1),
    ToolkitRow("11.1.0", "11.1 GA", "455.23", A1),
    ToolkitRow("11.0.3", "11.0.3 Update 1", "450.51.06", A1),
    ToolkitRow("11.0.2", "11.0.2 GA", "450.51.05", A1),
    ToolkitRow("11.0.1", "11.0.1 RC", "450.36.06", A1),
    # Before CUDA 11 each minor release needs its own driver: no minor-version compatibility.
    ToolkitRow("10.2.0", "10.2", "440.33", A2),
    ToolkitRow("10.1.0", "10.1", "418.39", A2),
    ToolkitRow("10.0.0", "10.0", "410.48", A2),
)

#: The lowest driver that runs any toolkit of a major under minor-version compatibility.
MINOR_COMPAT_FLOOR: dict[int, tuple[str, str]] = {
    # Release notes Table 2 says ">= 580"; the earliest 580 build is 13.0 GA's 580.65.06,
    # which the compatibility guide's own example uses (§A.2, an inference for the patch level).
    13: ("580.65.06", "release notes Table 2 (>= 580) and 13.0 GA's driver (domain-facts §A.2)"),
    # ">= 525"; 525.60.13 is 12.0 GA's driver and the floor NVIDIA libraries state (cuDNN 9 matrix).
    12: ("525.60.13", "release notes Table 2 (>= 525) and 12.0 GA's driver (domain-facts §A.2)"),
    # "by upgrading to Tesla Recommended Drivers 450.80.02 ... minor version compatibility is
    # possible across the CUDA 11.x family" (release notes footnote).
    11: ("450.80.02", "release notes Table 2 footnote (domain-facts §A.2)"),
}

#: Driver branches each cuda-compat-<major>-<minor> package supports, from the forward
#: compatibility matrix of the CUDA Compatibility guide (615 edition, domain-facts §A.4).
#: A package not listed here is judged only by the image's own NVIDIA_REQUIRE_CUDA.
FORWARD_COMPAT: dict[tuple[int, int], tuple[int, ...]] = {
    (12, 3): (535,),  # "cuda-compat-12-x (12.3-12.6) are C only on 535"
    (12, 4): (535,),
    (12, 5): (535,),
    (12, 6): (535,),
    (12, 8): (535,),  # "cuda-compat-12-8 C on 535"
    (12, 9): (535, 570),  # "cuda-compat-12-9 C on 535 and 570"
    (13, 0): (535, 570),  # "cuda-compat-13-0 C on 535 and 570"
    (13, 4): (535, 570, 580, 590, 595, 610),  # "cuda-compat-13-4 C on 535...610"
}

_DATACENTER = re.compile(r"\b(Tesla|[ABHLTV]\d{1,3}[A-Z]?|G[BH]\d{3})\b")


def version_key(version: str) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); ValueError for text that is not a dotted version."""
    if not re.fullmatch(r"\d+(\.\d+)*", version.strip()):
        raise ValueError(f"{version!r} is not a version number like 535.104.05")
    return tuple(int(part) for part in version.strip().split("."))


@dataclass(frozen=True)
class CudaVersion:
    """A CUDA toolkit version; `update` is None when the source does not say (12.1.20230222)."""

    major: int
    minor: int
    update: int | None = None

    @classmethod
    def parse(cls, text: str) -> CudaVersion:
        """'12.4.1', '12.4', '12.1.20230222' (version.json's date stamp), '12.2.140' (a build number).

        The third number is the update only when it is small: date stamps and build numbers
        leave the update unknown.
        """
        m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?(?:[-+.].*)?\s*", text)
        if not m:
            raise ValueError(f"{text!r} is not a CUDA version like 12.4 or 12.4.1")
        third = int(m.group(3)) if m.group(3) else None
        return cls(int(m.group(1)), int(m.group(2)), third if third is not None and third < 10 else None)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}" + (f".{self.update}" if self.update is not None else "")

    @property
    def major_minor(self) -> tuple[int, int]:
        return (self.major, self.minor)


def toolkit_row(cuda: CudaVersion) -> ToolkitRow | None:
    """The table row for a toolkit version; None when the table does not know its major.minor.

    An unknown update uses the minor's first release (its GA), an update newer than the
    table the newest row of that minor.
    """
    rows = [r for r in TOOLKIT_DRIVERS if CudaVersion.parse(r.cuda).major_minor == cuda.major_minor]
    if not rows:
        return None
    if cuda.update is None:
        return rows[-1]
    fitting = [r for r in rows if (CudaVersion.parse(r.cuda).update or 0) <= cuda.update]
    return fitting[0] if fitting else rows[-1]


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA major.minor a driver runs without compatibility modes, from Table 3."""
    key = version_key(driver)
    for row in TOOLKIT_DRIVERS:
        if version_key(row.driver) <= key:
            cuda = CudaVersion.parse(row.cuda)
            return f"{cuda.major}.{cuda.minor}"
    return None


def is_datacenter_gpu(name: str) -> bool:
    """Whether a GPU's name is a data-center part (Tesla, A100, H100, L40S, T4, ...).

    Forward compatibility is "applicable only for NVIDIA Data Center GPUs" (§A.4). NVML has
    no data-center flag, so the product name is matched (an inference: GeForce and RTX
    workstation names do not match; the "NGC Server Ready" RTX SKUs are not recognised).
    """
    return "GeForce" not in name and "RTX" not in name and bool(_DATACENTER.search(name))


def parse_require_cuda(text: str) -> tuple[int, ...]:
    """Driver branches an image's NVIDIA_REQUIRE_CUDA accepts on data-center GPUs.

    'cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536' ->
    (470, 535): the branches its cuda-compat package was built for (the nvidia/cuda base
    images encode them so, domain-facts §A.4 and §B.3).
    """
    branches = set()
    for alternative in text.split():
        terms = alternative.split(",")
        if "brand=tesla" not in terms:
            continue
        for term in terms:
            m = re.fullmatch(r"driver>=(\d+)(?:\.\d+)*", term)
            if m:
                branches.add(int(m.group(1)))
    return tuple(sorted(branches))


@dataclass(frozen=True)
class CudaVerdict:
    status: Status
    summary: str
    rule: str  # "toolkit driver", "minor-version compatibility", "forward compatibility", "unsupported"
    needs: str | None  # the driver the image's toolkit ships with
    floor: str | None  # the major's minor-version-compatibility floor

    def to_json(self) -> dict[str, object]:
        return {"status": self.status.value, "rule": self.rule, "needs_driver": self.needs, "floor": self.floor}


@dataclass(frozen=True)
class ForwardCompat:
    """What the image offers for forward compatibility and where it would run."""

    compat_driver: str  # the version of the image's compat libcuda (e.g. 550.54.15)
    gpu_name: str
    branches: tuple[int, ...] = ()  # from the image's NVIDIA_REQUIRE_CUDA, if it has one


def judge_cuda(
    image: CudaVersion,
    driver: str,
    *,
    host_cuda: str | None = None,
    compat: ForwardCompat | None = None,
) -> CudaVerdict:
    """Can a container built with CUDA `image` run on a host with `driver`? (the rules above).

    `host_cuda` is the CUDA version the driver reports (NVML/nvidia-smi); when None it is
    read from Table 3.
    """
    driver_k = version_key(driver)
    host_cuda = host_cuda or driver_cuda(driver) or "unknown"
    row = toolkit_row(image)
    floor = MINOR_COMPAT_FLOOR.get(image.major)
    floor_driver = floor[0] if floor else None
    host = f"host driver {driver} supports CUDA {host_cuda}"

    if row is None:  # a toolkit newer (or other) than the table: judge by what the driver reports
        newest = TOOLKIT_DRIVERS[0].cuda.rsplit(".", 1)[0]
        head = f"image CUDA {image} is not in NVIDIA's table (which ends at CUDA {newest})"
        if floor:
            head += f"; CUDA {image.major} needs driver >= {floor[0]} with minor-version compatibility"
        try:
            supported = CudaVersion.parse(host_cuda).major_minor >= image.major_minor
        except ValueError:
            supported = False
        if supported:
            return CudaVerdict(Status.OK, f"{head}; {host}: ok", "toolkit driver", None, floor_driver)
        needs = None
    else:
        needs = row.driver
        head = f"image CUDA {image} needs driver >= {row.driver}"
        if driver_k >= version_key(row.driver):
            return CudaVerdict(Status.OK, f"{head}; {host}: ok", "toolkit driver", needs, floor_driver)
        # below the toolkit's own driver: say what else could make it run
        if floor and version_key(floor[0]) < version_key(row.driver):
            head += f" (or >= {floor[0]} with minor-version compatibility)"
        elif not floor:
            head += " (no minor-version compatibility before CUDA 11)"

    forward = _forward(image, driver_k, compat)
    if forward.startswith("ok"):
        return CudaVerdict(Status.OK, f"{head}; {host}: {forward}", "forward compatibility", needs, floor_driver)
    note = f" ({forward})" if forward else ""
    if floor and driver_k >= version_key(floor[0]):
        return CudaVerdict(
            Status.WARN,
            f"{head}; {host}: minor-version compatibility only, PTX JIT unavailable{note}",
            "minor-version compatibility",
            needs,
            floor[0],
        )
    why = f"below CUDA {image.major}'s minimum driver" if floor else "older than the toolkit's driver"
    return CudaVerdict(
        Status.FAIL,
        f"{head}; {host}: {why}, CUDA cannot initialize (CUDA driver version is insufficient){note}",
        "unsupported",
        needs,
        floor_driver,
    )


def _forward(image: CudaVersion, driver_k: tuple[int, ...], compat: ForwardCompat | None) -> str:
    """'ok with forward compatibility ...', or why the image's cuda-compat does not help ('' if none)."""
    if compat is None:
        return ""
    # cuda-compat-X-Y carries the libcuda of the driver CUDA X.Y shipped with (§A.4): a compat
    # library at least that new is the image's own toolkit's, even past the end of the table
    row = toolkit_row(image)
    shipped = row.driver if row else TOOLKIT_DRIVERS[0].driver
    if version_key(compat.compat_driver) >= version_key(shipped):
        compat_cuda: str | None = f"{image.major}.{image.minor}"
    else:
        compat_cuda = driver_cuda(compat.compat_driver)
    name = f"cuda-compat {compat_cuda or '?'} (libcuda {compat.compat_driver})"
    if compat_cuda is None or CudaVersion.parse(compat_cuda).major_minor < image.major_minor:
        return f"the image's {name} is older than its CUDA {image}"
    if not is_datacenter_gpu(compat.gpu_name):
        return f"the image's {name} needs a data-center GPU, not {compat.gpu_name} (error 804)"
    branch = driver_k[0]
    key = CudaVersion.parse(compat_cuda).major_minor
    supported = compat.branches or FORWARD_COMPAT.get(key, ())
    where = "the image's NVIDIA_REQUIRE_CUDA" if compat.branches else "NVIDIA's forward-compatibility matrix"
    if not supported:
        return f"the image's {name}: no supported driver branches known for it"
    if branch not in supported:
        shown = ", ".join(f"R{b}" for b in supported)
        return f"the image's {name} supports driver branches {shown} ({where}), not R{branch}"
    return f"ok with forward compatibility: the image's {name} supports R{branch} on a data-center GPU ({where})"
