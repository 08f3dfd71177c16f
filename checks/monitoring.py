"""Monitoring readiness: would Prometheus actually see this node's GPUs?

`monitoring.dcgm_exporter` fetches the dcgm-exporter's metrics page and checks that it
is complete (a series for every GPU the node has, matched by UUID, with the fields the
profile requires) and fresh (a counter advances between scrapes). `monitoring.hostengine`
checks the standalone DCGM host engine (nv-hostengine) runs and listens.

Reads: the `nvml` probe's record (facts.gpu: the GPUs' indexes and UUIDs), `ps -e -ww -o comm= -o args=`
(the same listing node.services reads), `systemctl is-active UNIT` (only for a daemon that
is not running, to say why), /proc/net/tcp and /proc/net/tcp6. Fetches the exporter's
page ON THE NODE with the first of `curl`, `wget`, `python3` it has (the endpoint is
usually bound to the node itself, and this way the scrape works locally, over SSH and in
record/replay), and waits between scrapes with `sleep` on the node (so a replay does not
wait). Nothing here writes; a scrape is the
plain HTTP GET Prometheus makes.

The Prometheus text format is parsed with the Prometheus project's own parser
(prometheus_client), imported only when a page is parsed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clustercheck import Host, Result, check, fail, ok, skip
from clustercheck.errors import HostError
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.gpu import gpus
from clustercheck.facts.processes import process_names, processes

if TYPE_CHECKING:
    from clustercheck.probes.nvml import GpuRecord

#: (index, UUID) of one GPU, as NVML and nvidia-smi number and name it.
GpuId = tuple[int, str]

# -- facts: the node's GPUs and processes --------------------------------------------------


def gpu_ids(record: GpuRecord) -> list[GpuId]:
    """The node's GPU record (facts.gpu) -> [(index, UUID)] of the GPUs the exporter must cover.

    A GPU NVML could not query (lost, no UUID) is left out: DCGM cannot see it either, and
    the GPU checks report it. A record that lists no GPU because of an error (no driver,
    NVML failing) raises ValueError with the probe's reason: the check cannot tell.
    """
    if not record.gpus and record.error:
        raise ValueError(f"the node's GPUs could not be listed: {record.error}")
    return [(gpu.index, gpu.uuid) for gpu in record.gpus if gpu.uuid]


def node_gpus(host: Host) -> list[GpuId]:
    """The node's GPUs as (index, UUID), from the nvml probe's record: what the exporter must cover."""
    try:
        return gpu_ids(gpus(host))
    except ValueError as exc:  # the record is malformed, or says why it lists no GPU
        raise HostError(host.name, str(exc)) from None


def find_process(procs: Iterable[tuple[str, str]], name: str) -> str | None:
    """The args of the first process that answers to `name` (comm is cut to 15 characters)."""
    for comm, args in procs:
        names = process_names(comm, args)
        if name in names or name[:15] in names:
            return args or comm
    return None


def running_process(host: Host, name: str) -> str | None:
    """The args of the process named `name`; None when none runs; "" when `ps` itself failed.

    For the exporter this is context for a message (the page it serves is what counts; a
    container's process shows in the node's ps as well), so a failing ps must not turn a
    good scrape into an error; its observation stays in the evidence.
    """
    try:
        return find_process(processes(host), name)
    except HostError:
        return ""


def unit_state(host: Host, unit: str) -> str | None:
    """`systemctl is-active UNIT` (active, inactive, failed ...), None where there is no systemd."""
    result = host.run("systemctl", "is-active", unit)
    words = result.stdout.split()
    # no systemctl (127), or no systemd running it ("System has not been booted with systemd")
    if result.exit_code == 127 or result.timed_out or not words:
        return None
    return words[0]


# -- the Prometheus text format -----------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One sample of a scrape: metric name, labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


class ScrapeParseError(ValueError):
    """A metrics page that is not the Prometheus text format; the message names the line."""


_TYPE_LINE = re.compile(r"^#[ \t]*TYPE[ \t]+(\S+)\s", re.MULTILINE)


def parse_scrape(text: str) -> list[Series]:
    """A Prometheus text-format page -> its samples, parsed by prometheus_client.

    Raises ScrapeParseError naming the first bad line (the parser itself does not say
    which line it choked on).
    """
    from prometheus_client.parser import text_string_to_metric_families

    # The names the page declares with `# TYPE`, read once (a search of the whole page per
    # family was quadratic in a page of many families).
    declared = {m.group(1) for m in _TYPE_LINE.finditer(text)}
    try:
        series = []
        for family in text_string_to_metric_families(text):
            # The parser renames the samples of a `# TYPE X counter` family to X_total
            # (OpenMetrics style); dcgm-exporter's counters have no such suffix, so give
            # back the name as written unless the page itself declared X_total.
            munged = family.type == "counter" and family.name + "_total" not in declared
            for sample in family.samples:
                name = sample.name
                if munged and name == family.name + "_total":
                    name = family.name
                series.append(Series(name, dict(sample.labels), float(sample.value)))
        return series
    except Exception as exc:  # the parser raises ValueError mostly, but not only
        whole = _one_line(exc)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except Exception as exc:
            raise ScrapeParseError(f"line {n}: {_one_line(exc)}: {line.strip()[:80]!r}") from None
    raise ScrapeParseError(whole)


def _one_line(message: object) -> str:
    return " ".join(str(message).split())[:200] or "unparseable"


# DCGM writes a "blank" when it has no value for a field: 0x7ffffffffffffff0 plus 0-15 for
# 64-bit integers (rounded to 2**63 once a parser reads it as a float) and 2**47 plus 0-15
# for doubles; +1 not found, +2 not supported, +3 no permission
# (NVIDIA/DCGM dcgmlib/dcgm_structs.h, DCGM_INT64_BLANK, DCGM_FP64_BLANK). The exporter
# passes them through, e.g. MEMORY_TEMP 9223372036854775794 in its README sample.
_INT64_BLANK = float(0x7FFFFFFFFFFFFFF0)
_FP64_BLANK = 140737488355328.0


def is_blank(value: float) -> bool:
    """Whether a value is one of DCGM's blanks (not found, not supported, no permission)."""
    return value >= _INT64_BLANK or _FP64_BLANK <= value < _FP64_BLANK + 16 or math.isnan(value)


# -- what a complete scrape holds ------------------------------------------------------------

# Old and new names of the same field: DCGM master aliases the old names, and exporter
# names may follow (domain-facts §G); accept both.
ALIASES = {
    "DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL_RATIO",
    "DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_ERROR",
}

#: The fields a complete scrape has for every GPU; "A|B" accepts either (plus the aliases).
DEFAULT_FIELDS = (
    "DCGM_FI_DEV_XID_ERRORS",
    # row remapping is Ampere and later; older GPUs count ECC errors and retired pages
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS|DCGM_FI_DEV_ECC_DBE_VOL_TOTAL|DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
    "|DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    # GPU_UTIL is not reported for MIG instances: the exporter's maintainers point to
    # GR_ENGINE_ACTIVE instead (NVIDIA/dcgm-exporter#216, #430)
    "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE",
)

# What goes unseen without a field: the first name of a group -> the consequence.
CONSEQUENCES = {
    "DCGM_FI_DEV_XID_ERRORS": "XID events will not be alerted on",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "uncorrectable memory errors will not be alerted on",
    "DCGM_FI_DEV_GPU_TEMP": "overheating will not be seen",
    "DCGM_FI_DEV_POWER_USAGE": "power draw and power capping will not be seen",
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization will not be visible",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy use will not be visible",
}

DEFAULT_URL = "http://localhost:9400/metrics"  # the exporter's default listen address (domain-facts §G)
FRESH_FIELD = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


def field_group(entry: str) -> tuple[str, ...]:
    """'A|B' -> ('A', 'B') plus the other name of each aliased field, first name first."""
    names: list[str] = []
    for name in (part.strip() for part in entry.split("|")):
        if not name:
            continue
        others = [new for old, new in ALIASES.items() if old == name] + [
            old for old, new in ALIASES.items() if new == name
        ]
        for candidate in (name, *others):
            if candidate not in names:
                names.append(candidate)
    return tuple(names)


def short_uuid(uuid: str) -> str:
    """'GPU-8a1f6c2e-...' -> 'GPU-8a1f6c2e...': enough to tell GPUs apart in a summary."""
    return uuid[:12] + "..." if len(uuid) > 12 else uuid


def gpu_name(gpu: GpuId) -> str:
    return f"GPU {gpu[0]} ({short_uuid(gpu[1])})"


def _gpu_list(gpus: Sequence[GpuId], total: int) -> str:
    if len(gpus) == total and total > 1:
        return f"all {total} GPUs"
    return ", ".join(gpu_name(g) for g in gpus)


@dataclass
class Coverage:
    """How a scrape's series map onto the node's GPUs."""

    by_gpu: dict[int, list[Series]] = field(default_factory=dict)  # node GPU index -> its series
    foreign: dict[str, int] = field(default_factory=dict)  # UUID not on this node -> series count
    mig: dict[int, list[str]] = field(default_factory=dict)  # GPU index -> GPU instance ids (MIG)


def map_series(series: Iterable[Series], gpus: Sequence[GpuId]) -> Coverage:
    """Assign each per-GPU series to one of the node's GPUs, by UUID, else by its `gpu` index.

    The UUID label is the physical GPU's even on a MIG instance's series (which add
    GPU_I_ID and GPU_I_PROFILE); old exporters spell it `uuid`, old MIG UUIDs are
    MIG-GPU-<uuid>/<gi>/<ci>. A series with neither label (an NVSwitch's, the exporter's
    own) belongs to no GPU.
    """
    by_uuid = {uuid: index for index, uuid in gpus}
    indexes = {index for index, _ in gpus}
    cover = Coverage()
    for s in series:
        uuid = s.labels.get("UUID") or s.labels.get("uuid") or ""
        if uuid.startswith("MIG-GPU-"):
            uuid = uuid[4:].split("/", 1)[0]
        gpu_label = s.labels.get("gpu", "")
        if uuid in by_uuid:
            index: int | None = by_uuid[uuid]
        elif uuid.startswith("GPU-"):
            cover.foreign[uuid] = cover.foreign.get(uuid, 0) + 1
            continue
        elif gpu_label.isdigit() and int(gpu_label) in indexes:
            index = int(gpu_label)
        else:
            index = None
        if index is None:
            continue
        cover.by_gpu.setdefault(index, []).append(s)
        instance = s.labels.get("GPU_I_ID")
        if instance is not None and instance not in cover.mig.setdefault(index, []):
            cover.mig[index].append(instance)
    cover.mig = {i: ids for i, ids in cover.mig.items() if ids}
    return cover


@dataclass
class Findings:
    """What a check found wrong, by kind (each kind has its own remedy), and what it saw."""

    problems: dict[str, list[str]] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, kind: str, message: str) -> None:
        self.problems.setdefault(kind, []).append(message)

    @property
    def messages(self) -> list[str]:
        return [m for ms in self.problems.values() for m in ms]


def judge_scrape(series: Sequence[Series], gpus: Sequence[GpuId], fields: Sequence[str]) -> Findings:
    """Completeness of one scrape: a series for every GPU, every required field for each."""
    found = Findings()
    cover = map_series(series, gpus)
    dcgm = [s for s in series if s.name.startswith("DCGM_")]
    found.data.update(
        series=len(series),
        gpus=len(gpus),
        gpus_exported=len(cover.by_gpu),
        mig_instances={str(i): ids for i, ids in cover.mig.items()},
    )
    if not dcgm:
        found.add("empty", f"no DCGM_ metrics among its {len(series)} series")
        return found
    missing = [g for g in gpus if g[0] not in cover.by_gpu]
    for gpu in missing:
        found.add("gpu", f"{gpu_name(gpu)} has no series")
    for uuid, count in sorted(cover.foreign.items()):
        found.add("gpu", f"{count} series for {short_uuid(uuid)}, which is not a GPU of this node")
    found.data["missing_gpus"] = [uuid for _, uuid in missing]
    absent: dict[str, list[str]] = {}
    present = [g for g in gpus if g[0] in cover.by_gpu]
    for entry in fields:
        names = field_group(entry)
        if not names:
            continue
        label = names[0]
        lacking, blank = [], []
        for gpu in present:
            values = [s.value for s in cover.by_gpu[gpu[0]] if s.name in names]
            if not values:
                lacking.append(gpu)
            elif all(is_blank(v) for v in values):
                blank.append(gpu)
        if present and len(lacking) == len(present):
            others = [n for n in names[1:] if n not in ALIASES.values()]
            nor = f" (nor {', '.join(others)})" if others else ""
            why = CONSEQUENCES.get(label)
            found.add("field", f"{label} absent{nor}" + (f": {why}" if why else ""))
        elif lacking:
            found.add("field", f"{label} missing for {_gpu_list(lacking, len(present))}")
        if blank:
            found.add(
                "field",
                f"{label} is DCGM's blank value (not supported or no data) for {_gpu_list(blank, len(present))}",
            )
        if lacking or blank:
            absent[label] = [uuid for _, uuid in lacking + blank]
    found.data["missing_fields"] = absent
    for index, ids in sorted(cover.mig.items()):
        found.evidence.append(f"GPU {index} is in MIG mode: series for GPU instances {', '.join(ids)}")
    return found


def fresh_values(series: Iterable[Series], gpus: Sequence[GpuId], names: Sequence[str]) -> dict[int, tuple[float, ...]]:
    """GPU index -> the non-blank values of the freshness counter on its series, in a stable order."""
    cover = map_series((s for s in series if s.name in names), gpus)
    values = {}
    for index, found in cover.by_gpu.items():
        ordered = sorted(found, key=lambda s: sorted(s.labels.items()))
        kept = tuple(s.value for s in ordered if not is_blank(s.value))
        if kept:
            values[index] = kept
    return values


# -- fetching the page on the node -------------------------------------------------------------

SCRAPE_TOOLS = ("curl", "wget", "python3")

#: For nodes with neither curl nor wget: facts/scripts/scrape_page.py, run as `python3 -c`.
_PYTHON_FETCH = script_text("scrape_page.py")


def check_url(url: str) -> None:
    """ValueError unless `url` is an http:// or https:// URL with a host and nothing odd in it.

    The profile's `url` reaches curl/wget on the node as an argument: a value such as
    `-o/etc/cron.d/x` or `--config=...` must never become an option, and file://, ftp:// or
    gopher:// are no metrics pages.
    """
    from urllib.parse import urlsplit

    shown = repr(url) if len(url) <= 200 else repr(url[:200]) + "..."
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError(f"url must be an http:// or https:// URL without spaces or control characters, got {shown}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"url is not a valid URL ({exc}): {shown}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url must be an http:// or https:// URL with a host (e.g. {DEFAULT_URL}), got {shown}")


def scrape_argv(tool: str, url: str, timeout: float, number: int) -> tuple[str, ...]:
    """The command that fetches `url` with `tool`, bounded by `timeout` seconds.

    Each scrape of a check names its number in the User-Agent: the exporter ignores it,
    and a recording keeps each scrape apart (a recording is keyed by the command), so a
    replay sees the counters move as they did.

    `--` ends curl's and wget's options before the URL, which `check_url` has already held to
    http(s): a `url` starting with `-` is never an option.
    """
    check_url(url)
    agent = f"clustercheck-scrape-{number}"
    seconds = f"{timeout:g}"
    if tool == "curl":
        return ("curl", "--silent", "--show-error", "--fail", "--noproxy", "*", "--max-time", seconds,
                "--user-agent", agent, "--", url)  # fmt: skip
    if tool == "wget":
        return ("wget", "-nv", "-O", "-", "-T", seconds, "-t", "1", "--no-proxy", "-U", agent, "--", url)
    return ("python3", "-c", _PYTHON_FETCH, url, seconds, agent)


@dataclass(frozen=True)
class Fetched:
    """One scrape: the page, or why there is none (`kind`: connect, timeout, http, other)."""

    tool: str
    page: str | None
    kind: str = ""
    detail: str = ""


# curl's exit codes (curl(1), EXIT CODES): 6 could not resolve, 7 could not connect,
# 22 HTTP error with --fail, 28 timed out, 52 empty reply, 56 receive failure.
# GNU wget's: 4 network failure, 8 the server answered with an error.
def interpret(tool: str, code: int | None, stderr: str, timed_out: bool) -> tuple[str, str]:
    """(kind, detail) of a failed fetch, from the tool's exit code and its own message."""
    detail = next((line.strip() for line in stderr.splitlines() if line.strip()), "")
    detail = re.sub(r"^curl: \(\d+\) ", "", detail)[:200] or f"{tool} exited {code}"
    low = detail.lower()
    if timed_out or (tool == "curl" and code == 28) or "timed out" in low:
        return "timeout", detail
    if (tool == "curl" and code in (6, 7)) or "refused" in low or "name or service not known" in low:
        return "connect", detail
    if (tool == "curl" and code == 22) or (tool == "wget" and code == 8) or "http error" in low:
        return "http", detail
    return "other", detail


def fetch(host: Host, url: str, timeout: float, number: int, tools: Sequence[str] = SCRAPE_TOOLS) -> Fetched:
    """Fetch the page on the node with the first of `tools` it has (exit 127: not there)."""
    for tool in tools:
        # the tool's own limit comes first, so its message says what happened
        argv = scrape_argv(tool, url, timeout, number)
        shown = shown_with(argv, _PYTHON_FETCH, "'<clustercheck scrape script>'") if tool == "python3" else None
        result = host.run(*argv, timeout=timeout + 5, shown_as=shown)
        if result.exit_code == 127 and not result.timed_out:
            continue
        if result.ok:
            return Fetched(tool, result.stdout)
        kind, detail = interpret(tool, result.exit_code, result.stderr, result.timed_out)
        return Fetched(tool, None, kind, detail)
    raise HostError(host.name, f"cannot fetch {url}: none of {', '.join(tools)} is on the node")


# -- the checks ------------------------------------------------------------------------------

_REMEDIES = {
    "down": "Start the exporter: `systemctl enable --now nvidia-dcgm-exporter` (or its container or "
    "DaemonSet); `journalctl -u nvidia-dcgm-exporter` tells why it stopped.",
    "connect": "The exporter runs but nothing answers at the URL: compare its listen address (-a, "
    "DCGM_EXPORTER_LISTEN, default :9400) with this check's `url`.",
    "timeout": "The exporter accepted the connection but did not answer: it is hung, often on a stuck DCGM "
    "host engine. Restart it (and nv-hostengine if it uses -r) and read its log.",
    "http": "The URL answered with an HTTP error: check the path (/metrics) and that it is the exporter's port.",
    "other": "Fetch the URL by hand on the node (`curl -sS URL`) to see what goes wrong.",
    "parse": "The URL did not return Prometheus metrics: is `url` the exporter's /metrics, not another service?",
    "empty": "The exporter answers without GPU metrics: DCGM could not start or sees no GPU; read the "
    "exporter's log and run `dcgmi discovery -l`.",
    "gpu": "A GPU without series is one DCGM lost or the exporter excludes: check `dcgmi discovery -l`, the "
    "exporter's -d/DCGM_EXPORTER_DEVICES_STR, and its log; restart the exporter after a GPU reset. Series "
    "of a GPU not on this node mean `url` points at another node's exporter.",
    "field": "Add the field to the exporter's counters file (-f, default "
    "/etc/dcgm-exporter/default-counters.csv) and restart it; where DCGM does not support a field on this "
    "GPU, require another one (`fields: [...]`, 'A|B' accepts either).",
    "stale": "The exporter serves old values: restart it (and nv-hostengine if it uses -r); its log says "
    "'Failed to collect metrics' when it lost the host engine. Its collection interval (-c, default "
    "30000 ms) must be shorter than `fresh_within`.",
    "freshness": "Name a counter the exporter exports in `fresh_field`, or set `fresh_within: 0`.",
}


def _remedy(kinds: Iterable[str]) -> str:
    return " ".join(dict.fromkeys(_REMEDIES[k] for k in kinds))


#: Problems a restart of the exporter (or its host engine) mends; the others are its configuration.
_RESTART = frozenset({"down", "timeout", "stale", "empty", "gpu"})
_CONFIG = frozenset({"connect", "http", "parse", "field", "freshness"})


def _action(kinds: Iterable[str]) -> str:
    """The action of dcgm_exporter's problems (documented in its docstring)."""
    found = set(kinds)
    if found & _RESTART:
        return "RESTART_SERVICE"
    return "FIX_CONFIG" if found and found <= _CONFIG else "INVESTIGATE"


def _fetch_failure(host: Host, url: str, got: Fetched, timeout: float) -> Findings:
    """Findings for a first scrape that got no page, with the exporter's process state."""
    found = Findings(data={"url": url, "tool": got.tool})
    running = running_process(host, "dcgm-exporter")
    if got.kind == "timeout":
        found.add("timeout", f"{url} did not answer within {timeout:g} s ({got.detail})")
    elif got.kind == "connect" and running == "":
        found.add("connect", f"nothing accepts connections at {url} ({got.detail}; ps failed)")
    elif got.kind == "connect" and running is None:
        state = unit_state(host, "nvidia-dcgm-exporter.service")
        unit = f", nvidia-dcgm-exporter.service is {state}" if state else ""
        found.add(
            "down",
            f"dcgm-exporter is not running (no dcgm-exporter process{unit}): "
            f"{url} refused the connection ({got.detail})",
        )
    elif got.kind == "connect":
        found.add(
            "connect",
            f"dcgm-exporter runs ({(running or '')[:100]}) but nothing accepts connections at {url} ({got.detail})",
        )
    elif got.kind == "http":
        found.add("http", f"{url} answered with an error: {got.detail}")
    else:
        found.add("other", f"fetching {url} with {got.tool} failed: {got.detail}")
    if running:
        found.evidence.append(f"dcgm-exporter process: {running[:200]}")
    return found


def _check_freshness(
    host: Host,
    found: Findings,
    series: Sequence[Series],
    gpus: Sequence[GpuId],
    *,
    url: str,
    tool: str,
    fresh_field: str,
    fresh_within: float,
    timeout: float,
) -> None:
    """Scrape again until the counter changed on every GPU, or `fresh_within` seconds passed."""
    names = field_group(fresh_field)
    first = fresh_values(series, gpus, names)
    exported = {index for index, _ in gpus} & set(map_series(series, gpus).by_gpu)
    if not first:
        if exported:
            found.add("freshness", f"freshness not judged: {fresh_field} is not exported with a value")
        return
    lacking = [g for g in gpus if g[0] in exported and g[0] not in first]
    if lacking:
        found.add("freshness", f"freshness not judged for {_gpu_list(lacking, len(exported))}: no {fresh_field}")
    pending = set(first)
    # A fixed number of waits, not a clock: a replay runs the same scrapes as the recording.
    # The waits are `sleep` on the node, so a replay does not wait at all.
    polls = max(3, math.ceil(fresh_within / 5.0))  # every 5 s, and at least 3 times
    step = f"{fresh_within / polls:.3g}"
    number = 1
    for number in range(2, polls + 2):
        pause = host.run("sleep", step, timeout=float(step) + 5)
        if not pause.ok:  # scraping again at once would call live counters stale
            raise HostError(host.name, f"cannot wait between scrapes on the node: {pause.describe()}")
        got = fetch(host, url, timeout, number, (tool,))
        if got.page is None:
            found.add("stale", f"scrape {number} of {url} failed: {got.detail}")
            return
        try:
            later = fresh_values(parse_scrape(got.page), gpus, names)
        except ScrapeParseError as exc:
            found.add("parse", f"scrape {number} of {url} is not Prometheus text: {exc}")
            return
        pending -= {index for index in pending if later.get(index) != first[index]}
        if not pending:
            break
    after = round(fresh_within / polls * (number - 1), 3)
    waited = f"{after:g} s"
    found.data["fresh_after_s"] = None if pending else after
    if pending:
        stale = [g for g in gpus if g[0] in pending]
        found.add("stale", f"{fresh_field} did not change in {waited} on {_gpu_list(stale, len(first))}")
        found.data["stale_gpus"] = [uuid for _, uuid in stale]
    else:
        found.evidence.append(f"{fresh_field} changed on every GPU within {waited} ({number} scrapes)")


@check(
    needs=[
        "command curl, wget or python3 (to fetch the metrics page on the node)",
        "probe nvml",
        "command ps",
        "command sleep",
        "command systemctl (only when the exporter is down)",
    ],
    timeout=60,
    action="RESTART_SERVICE",
)
def dcgm_exporter(
    host: Host,
    *,
    url: str = DEFAULT_URL,
    fields: tuple[str, ...] = DEFAULT_FIELDS,
    fresh_field: str = FRESH_FIELD,
    fresh_within: float = 35.0,
    scrape_timeout: float = 5.0,
) -> Result:
    """dcgm-exporter answers with a complete and fresh scrape of every GPU of the node.

    Why: "DCGM exporters feeding Prometheus/Grafana" is the last item of a GPU node's
    release checklist, and dcgm-exporter is known to export partial data silently (a GPU
    DCGM lost, a field not collected, values frozen after the host engine restarted;
    NVIDIA/dcgm-exporter#46, #212, #250, #507): dashboards then show a healthy node and
    XID or ECC alerts never fire.

    How: fetches `url` on the node (curl, else wget, else python3) and parses it with the
    Prometheus project's parser. Complete: every GPU of the node (its index and UUID from
    the nvml probe) has series, matched by the UUID label (by the `gpu` label where there is
    none; MIG instances' series count for their GPU), and each entry of `fields` has a value for
    each GPU (default: XID errors; uncorrectable remapped rows or ECC errors; temperature;
    power; utilization - 'A|B' accepts either name, and the old and new DCGM names, such as
    DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_GPU_UTIL_RATIO, are both accepted). DCGM's blank
    values (not supported, no data) count as absent. Fresh: scrapes again every 5 s until
    `fresh_field` (default the energy counter, which grows while a GPU is powered) has
    changed on every GPU, for at most `fresh_within` seconds; the exporter refreshes its
    values every 30 s by default (-c), so keep `fresh_within` above its interval, or 0 to
    skip this part. A page that does not parse, a refused connection and a page that does
    not come within `scrape_timeout` seconds fail; when nothing answers, the summary says
    whether a dcgm-exporter process runs (a container's shows in the node's `ps` too) and
    what systemd says of nvidia-dcgm-exporter.service. Raise the check's `timeout` (60 s)
    along with `fresh_within`.

    Fix: start the exporter (`systemctl enable --now nvidia-dcgm-exporter`, or its
    container); for a missing GPU check `dcgmi discovery -l` and the exporter's log; add
    missing fields to its counters CSV (-f); restart an exporter that serves stale values.

    Action: RESTART_SERVICE (the exporter is down, hung, serves stale values, lost a GPU or exports
    nothing); FIX_CONFIG (a wrong URL or port, an HTTP error, a page that is not metrics, a field
    not collected, a `fresh_field` it does not export); INVESTIGATE for anything else.
    """
    try:
        check_url(url)  # before anything runs: the profile's url becomes an argument on the node
    except ValueError as exc:
        raise HostError(host.name, f"bad parameter: {exc}; fix the profile") from None
    gpus = node_gpus(host)
    if not gpus:
        return skip("no NVIDIA GPU on this node (the nvml probe lists none)")
    got = fetch(host, url, scrape_timeout, 1)
    if got.page is None:
        found = _fetch_failure(host, url, got, scrape_timeout)
        return fail(
            "; ".join(found.messages),
            remedy=_remedy(found.problems),
            data=found.data,
            evidence=found.evidence,
            action=_action(found.problems),
        )
    running = running_process(host, "dcgm-exporter")
    try:
        series = parse_scrape(got.page)
    except ScrapeParseError as exc:
        return fail(
            f"{url} did not return Prometheus metrics: {exc}",
            remedy=_remedy(["parse"]),
            data={"url": url, "tool": got.tool, "bytes": len(got.page)},
            action=_action(["parse"]),
        )
    found = judge_scrape(series, gpus, fields)
    found.data.update(url=url, tool=got.tool)
    found.evidence.insert(0, f"fetched {url} with {got.tool}: {len(series)} series, {len(got.page)} bytes")
    seen = {None: "no dcgm-exporter process seen", "": "processes not listed (ps failed)"}
    found.evidence.insert(1, seen[running] if not running else f"dcgm-exporter process: {running[:200]}")
    if "empty" not in found.problems and fresh_within > 0:
        _check_freshness(
            host,
            found,
            series,
            gpus,
            url=url,
            tool=got.tool,
            fresh_field=fresh_field,
            fresh_within=fresh_within,
            timeout=scrape_timeout,
        )
    if found.problems:
        return fail(
            "; ".join(found.messages),
            remedy=_remedy(found.problems),
            data=found.data,
            evidence=found.evidence,
            action=_action(found.problems),
        )
    mig = found.data["mig_instances"]
    said = f"{len(gpus)} of {len(gpus)} GPUs exported by {url} with {len(fields)} required fields"
    if mig:
        said += f" ({sum(len(v) for v in mig.values())} MIG instances)"
    if fresh_within > 0:
        said += f"; {fresh_field.removeprefix('DCGM_FI_DEV_')} advanced within {found.data['fresh_after_s']:g} s"
    return ok(said, data=found.data, evidence=found.evidence)


# -- nv-hostengine --------------------------------------------------------------------------


def parse_proc_net_tcp(text: str) -> list[tuple[str, int, str]]:
    """/proc/net/tcp or tcp6 -> [(local address, port, state hex)], e.g. ('127.0.0.1', 5555, '0A').

    Addresses are hex in the kernel's byte order (little-endian 32-bit words); the port is
    plain hex; state 0A is LISTEN (include/net/tcp_states.h).
    """
    sockets = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4 or ":" not in parts[1]:
            continue
        address, _, port = parts[1].partition(":")
        try:
            raw = bytes.fromhex(address)
            number = int(port, 16)
        except ValueError:
            continue
        words = [raw[i : i + 4][::-1] for i in range(0, len(raw), 4)]
        flat = b"".join(words)
        if len(flat) == 4:
            shown = ".".join(str(b) for b in flat)
        elif len(flat) == 16:
            import ipaddress

            shown = f"[{ipaddress.IPv6Address(flat).compressed}]"
        else:
            continue
        sockets.append((shown, number, parts[3].upper()))
    return sockets


def listeners(text: str, port: int) -> list[str]:
    """'address:port' of the sockets listening on TCP `port` in a /proc/net/tcp* listing."""
    return [f"{address}:{p}" for address, p, state in parse_proc_net_tcp(text) if p == port and state == "0A"]


@check(
    needs=["command ps", "file /proc/net/tcp", "file /proc/net/tcp6", "command systemctl (when not running)"],
    timeout=10,
    action="RESTART_SERVICE",
)
def hostengine(host: Host, *, port: int = 5555) -> Result:
    """The DCGM host engine (nv-hostengine) runs and listens on TCP `port` (default 5555).

    Why: dcgmi (diagnostics, health watches) and an exporter started with `-r
    localhost:5555` need the standalone host engine; without it they fail or, for the
    exporter, serve stale values. Put this check in a profile only where the site runs
    DCGM as a service (an exporter without -r embeds its own engine).

    How: looks for an nv-hostengine process in `ps -e` (when absent, asks systemd about
    nvidia-dcgm.service to say why) and for a LISTEN socket on `port` in /proc/net/tcp
    and /proc/net/tcp6. With no options nv-hostengine listens on 127.0.0.1:5555; started
    with --domain-socket it listens on a Unix socket instead (set `port: 0` to accept that).

    Fix: `systemctl enable --now nvidia-dcgm` (the unit runs `nv-hostengine -n`);
    `journalctl -u nvidia-dcgm` tells why it stopped; check its --port/--bind-interface.

    Action: RESTART_SERVICE (nv-hostengine not running); FIX_CONFIG (it runs but not on `port`).
    """
    running = find_process(processes(host), "nv-hostengine")
    if running is None:
        state = unit_state(host, "nvidia-dcgm.service")
        unit = f" and nvidia-dcgm.service is {state}" if state else ""
        return fail(
            f"nv-hostengine is not running: no nv-hostengine process{unit}",
            remedy="`systemctl enable --now nvidia-dcgm`; `journalctl -u nvidia-dcgm` tells why it stopped.",
            data={"running": False, "unit": state},
        )
    evidence = [f"nv-hostengine process: {running[:200]}"]
    if port == 0:
        return ok("nv-hostengine is running (its port is not judged: port 0)", evidence=evidence)
    sockets = listeners(host.read("/proc/net/tcp"), port) + listeners(host.read_optional("/proc/net/tcp6") or "", port)
    data = {"running": True, "port": port, "listening": sockets}
    if not sockets:
        hint = (
            " (it was started with --domain-socket: it listens on a Unix socket)"
            if "--domain-socket" in running
            else ""
        )
        return fail(
            f"nv-hostengine runs but nothing listens on TCP port {port}{hint}",
            remedy=f"Start nv-hostengine on port {port} (its --port option), or set this check's `port` to the one "
            "it uses, and give the exporter the same (-r localhost:PORT).",
            data=data,
            evidence=evidence,
            action="FIX_CONFIG",
        )
    return ok(f"nv-hostengine is running and listening on {', '.join(sockets)}", data=data, evidence=evidence)
