"""Judging: what the accumulated state of a job means, as findings and a verdict.

`judge()` runs the rules in order; each rule is a function of the job's state (and what the
rules before it worked out) that adds its findings.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clustercheck.analyzers.nccl_log.evidence import _Host, _Job
from clustercheck.analyzers.nccl_log.grammar import WC_STATUS, Ref, network_kind
from clustercheck.result import Status, worst

# Causes of a TCP fallback, most telling first.
_CAUSE_ORDER = (
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "init",
    "libibverbs",
    "ibv_open",
    "efa_empty",
    "no_device",
)


@dataclass(frozen=True)
class Finding:
    """One conclusion, with the log lines it rests on."""

    status: Status
    message: str
    refs: tuple[Ref, ...] = ()
    remedy: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status.value,
            "message": self.message,
            "lines": [r.line for r in self.refs],
            "refs": [str(r) for r in self.refs],
        }
        if self.remedy:
            out["remedy"] = self.remedy
        return out


@dataclass(frozen=True)
class LogReport:
    """What the logs show, and the verdict. `to_json()` is the documented, stable shape."""

    nccl_version: str | None
    network: str | None
    link_layer: str | None
    gpudirect_rdma: bool | None
    net_channels: int
    single_node: bool | None
    errors: tuple[tuple[Ref, str], ...]
    error_count: int
    hosts: dict[str, dict[str, Any]]
    status: Status
    findings: tuple[Finding, ...]
    intra_node: dict[str, int]
    net_plugins: tuple[str, ...]
    sources: tuple[str, ...]
    lines: int
    nccl_lines: int
    garbled_lines: int
    skipped_long_lines: int
    cut_lines: int = 0  # lines longer than MAX_KEPT, read only up to it
    first_cut: Ref | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "nccl_version": self.nccl_version,
            "network": self.network,
            "link_layer": self.link_layer,
            "gpudirect_rdma": self.gpudirect_rdma,
            "net_channels": self.net_channels,
            "errors": [{"line": r.line, "file": r.file, "text": t} for r, t in self.errors],
            "hosts": self.hosts,
            "status": self.status.value,
            "findings": [f.to_json() for f in self.findings],
            "single_node": self.single_node,
            "intra_node": self.intra_node,
            "net_plugins": list(self.net_plugins),
            "error_count": self.error_count,
            "files": list(self.sources),
            "garbled_lines": self.garbled_lines,
            "skipped_long_lines": self.skipped_long_lines,
            "cut_lines": self.cut_lines,
        }


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+", 1)[0])[:3])


def _host_network(h: _Host, bootstrap_24: bool) -> tuple[str | None, str | None, Ref | None]:
    """(kind, NCCL's own name, line) of the network a host selected for inter-node traffic."""
    if h.networks:
        # several communicators may have chosen differently; a socket choice is the one to report
        ordered = sorted(h.networks.items(), key=lambda kv: (network_kind(kv[0]) != "socket", kv[1].line))
        name, ref = ordered[0]
        return network_kind(name), name, ref
    if h.devices and h.ib_line:
        return "ib", "IB", h.ib_line
    if h.ofi_provider:
        return "ofi", f"OFI ({h.ofi_provider[0]})", h.ofi_provider[1]
    if h.other_nets:
        name, ref = next(iter(h.other_nets.items()))
        return network_kind(name), name, ref
    if h.socket_lines_24 and not bootstrap_24:
        ref = next(iter(h.socket_lines_24.values()))
        return "socket", "Socket", ref
    if h.sockets:
        return "socket", "Socket", next(iter(h.sockets.values()))
    if h.error_nets:  # only a transport error names the network (an excerpt of a failure)
        name, ref = next(iter(h.error_nets.items()))
        return network_kind(name), name, ref
    return None, None, None


def _link_layer(links: set[str]) -> str | None:
    kinds = {"infiniband" if link.upper().startswith("IB") else "roce" for link in links if link}
    kinds.discard("")
    links_known = {k for k in kinds if k in ("infiniband", "roce")}
    if not links_known:
        return None
    return links_known.pop() if len(links_known) == 1 else "mixed"


@dataclass
class Context:
    """What the rules read, and what the first of them work out for the later ones."""

    job: _Job
    expect: str | None
    expect_gdr: bool
    hosts: dict[str, _Host] = field(default_factory=dict)  # the hosts worth reporting
    findings: list[Finding] = field(default_factory=list)
    version: str | None = None
    per_host: dict[str, tuple[str | None, str | None, Ref | None]] = field(default_factory=dict)
    network: str | None = None
    net_channels: int = 0
    gdr_yes: int = 0
    gdr_no: int = 0
    gpudirect_rdma: bool | None = None
    link_layer: str | None = None
    single_node: bool | None = None
    host_json: dict[str, dict[str, Any]] = field(default_factory=dict)
    expected_net: str | None = None
    init_failed: list[tuple[Ref, str]] = field(default_factory=list)

    @property
    def inter_node(self) -> bool:
        return self.single_node is False


def judge(job: _Job, *, expect: str | None, expect_gdr: bool) -> LogReport:
    """The job's state -> the verdict: the facts first (each a step that fills `Context`), then the
    rules that add findings, in the order they are reported."""
    c = Context(job, expect, expect_gdr)
    for step in FACTS:
        step(c)
    for rule in RULES:
        rule(c)
    status = worst(f.status for f in c.findings)
    nvls = {k: v[0] for k, v in sorted(job.intra.items())}
    plugins = sorted({nm for (nm, _) in job.net} | {n for h in c.hosts.values() for n in h.networks})
    socket_or_none = c.network in ("socket", None)
    return LogReport(
        nccl_version=c.version,
        network=c.network,
        link_layer=c.link_layer,
        gpudirect_rdma=c.gpudirect_rdma,
        net_channels=c.net_channels,
        single_node=c.single_node,
        errors=tuple((r, t) for r, t, _ in job.errors)
        + tuple(c.init_failed if socket_or_none and c.init_failed else ()),
        error_count=job.error_count + (len(c.init_failed) if socket_or_none else 0),
        hosts=c.host_json,
        status=status,
        findings=tuple(c.findings),
        intra_node=nvls,
        net_plugins=tuple(plugins),
        sources=tuple(job.sources),
        lines=job.lines,
        nccl_lines=job.nccl_lines,
        garbled_lines=job.garbled,
        skipped_long_lines=job.overlong,
        cut_lines=job.cut,
        first_cut=job.cut_ref,
    )


# -- facts: what the state says, worked out once ----------------------------------------------------


def visible_hosts(c: Context) -> None:
    """Every host, except a paste that lost the first characters of line 1 ('pgds-aihub0007' for
    'tpgds-aihub0007')."""
    job = c.job
    c.hosts = {
        k: h
        for k, h in job.hosts.items()
        if not (h.seen <= 1 and h.first and h.first.line == 1 and any(o != k and o.endswith(k) for o in job.hosts))
    }


def nccl_version(c: Context) -> None:
    """The job's NCCL version (the oldest printed); several versions in one job warn."""
    job = c.job
    if job.versions:
        c.version = min(job.versions, key=_version_key)
        if len(job.versions) > 1:
            refs = tuple(job.versions[v] for v in sorted(job.versions, key=_version_key))
            c.findings.append(
                Finding(
                    Status.WARN,
                    "different NCCL versions in one job: " + ", ".join(sorted(job.versions, key=_version_key)),
                    refs[:4],
                    "Use one container image / NCCL build for every rank.",
                )
            )
    for h in c.hosts.values():
        if h.version is None and c.version is not None and len(job.versions) == 1:
            h.version = (c.version, job.versions[c.version])


def host_networks(c: Context) -> None:
    """The network each host selected; NCCL <= 2.4 prints its bootstrap interface as NET/Socket."""
    job, hosts, version = c.job, c.hosts, c.version
    old = version is not None and _version_key(version) < (2, 5)
    any_bootstrap_24 = old or (
        version is None
        and not job.has_bootstrap
        and any(h.socket_lines_24 for h in hosts.values())
        and (any(h.devices or h.ofi_provider for h in hosts.values()) or any(not g[1] for g in job.net))
    )
    for name, h in hosts.items():
        bootstrap_24 = any_bootstrap_24 and not h.networks
        c.per_host[name] = _host_network(h, bootstrap_24)
        transport = (not bootstrap_24 and not h.networks and not h.sockets) or (
            h.networks and any(network_kind(n) == "socket" for n in h.networks)
        )
        if h.socket_lines_24 and transport:
            h.sockets.update(h.socket_lines_24)


def job_network(c: Context) -> None:
    """The job's network and GPUDirect RDMA: channel lines are trusted over the init lines."""
    job = c.job
    c.net_channels = sum(n for n, _ in job.net.values())
    by_kind: Counter[str] = Counter()
    for (name, _gdr), (n, _ref) in job.net.items():
        by_kind[network_kind(name)] += n
    chosen = [k for k, _, _ in c.per_host.values() if k]
    if by_kind:
        c.network = by_kind.most_common(1)[0][0]
        if "socket" in by_kind:
            c.network = "socket" if by_kind["socket"] >= by_kind[c.network] else c.network
    elif chosen:
        kinds = Counter(chosen)
        # a host-level fallback among RDMA hosts is reported per host (socket_findings)
        c.network = "socket" if kinds.get("socket", 0) == len(chosen) else kinds.most_common(1)[0][0]
    c.gdr_yes = sum(n for (_, gdr), (n, _) in job.net.items() if gdr)
    c.gdr_no = c.net_channels - c.gdr_yes
    c.gpudirect_rdma = None if c.net_channels == 0 else c.gdr_no == 0


def link_layers(c: Context) -> None:
    """InfiniBand, RoCE or both, from the HCAs NCCL listed (or an IPv4-mapped GID in an error)."""
    links: set[str] = set()
    for h in c.hosts.values():
        links |= {link.split("/", 1)[0] for link, _ in h.devices.values()}
        if h.roce_gid and not h.devices:
            links.add("RoCE")
    c.link_layer = _link_layer(links) if c.network in ("ib", None) else None
    if c.network is None and not links:
        c.link_layer = None


def single_node(c: Context) -> None:
    """Single node or not, as NCCL saw it."""
    job, hosts = c.job, c.hosts
    nnodes = set().union(*(h.nnodes for h in hosts.values())) if hosts else set()
    named = [n for n in hosts if n not in ("unknown", "(more hosts)")]
    if (nnodes and max(nnodes) > 1) or c.net_channels > 0 or len(named) > 1 or job.remote_peer:
        c.single_node = False
    elif nnodes:
        c.single_node = True
    else:
        c.single_node = None
        if len(named) == 1:
            ranks = hosts[named[0]].ranks
            sizes = {n for _, n in ranks}
            if len(sizes) == 1:
                size = sizes.pop()
                if {r for r, _ in ranks} >= set(range(size)):
                    c.single_node = True  # every rank of the communicator printed from this host


def host_views(c: Context) -> None:
    """The per-host part of the report."""
    for name, h in c.hosts.items():
        kind, net_name, net_ref = c.per_host[name]
        g_yes, g_no = h.net_gdr[0], h.net_gdr[1]
        if g_yes or g_no:
            host_gdr: bool | None = g_no == 0
        elif c.gpudirect_rdma is not None and kind not in (None, "socket") and c.inter_node and h.networks:
            host_gdr = c.gpudirect_rdma if c.gdr_no == 0 else None
        else:
            host_gdr = None
        devices = [f"{d}/{link}" for d, (link, _) in h.devices.items()]
        if not devices and h.ofi_provider and kind == "ofi":
            devices = [f"{h.ofi_provider[0]}" + (f" ({h.ofi_nics} NICs)" if h.ofi_nics else "")]
        chan_nets = [ch[4:].removesuffix("/GDRDMA") for ch in h.channels if ch.startswith("NET/")]
        if chan_nets and (net_name is None or kind != "socket"):
            net_name = chan_nets[0]
            kind = kind or network_kind(net_name)
        c.host_json[name] = {
            "network": kind,
            "net_plugin": net_name,
            "reason": None,
            "devices": devices,
            "interfaces": sorted(h.sockets) if kind == "socket" else [],
            "oob": h.oob,
            "link_layer": _link_layer({link.split("/", 1)[0] for link, _ in h.devices.values()}),
            "gpudirect_rdma": host_gdr,
            "gdr_hcas": {hca: enabled for hca, (enabled, _) in h.gdr_hca.items()},
            "intra_node": sorted(ch for ch in h.channels if not ch.startswith("NET/")),
            "nvls_channels": h.nvls_channels,
            "nccl_version": h.version[0] if h.version else None,
            "cuda_devices": sorted(h.devs),
            "errors": h.errors,
            "line": net_ref.line if net_ref else None,
        }
    c.expected_net = None if c.expect in (None, "") else ("ib" if c.expect == "roce" else c.expect)
    c.init_failed = [(r, t) for r, t, _ in c.job.init_failures]


#: The facts, in the order they build on each other.
FACTS: tuple[Callable[[Context], None], ...] = (
    visible_hosts,
    nccl_version,
    host_networks,
    job_network,
    link_layers,
    single_node,
    host_views,
)


# -- rules: each adds its findings ----------------------------------------------------------------


def transport_errors(c: Context) -> None:
    """Transport errors (completion errors, failed verbs calls, ...) fail."""
    job = c.job
    if job.error_count:
        first = job.errors[0]
        c.findings.append(
            Finding(
                Status.FAIL,
                f"NCCL reported {job.error_count} transport error{'s' if job.error_count > 1 else ''}: "
                f"{_explain_warn(first[1])}",
                tuple(r for r, _, _ in job.errors[:5]),
                _error_remedy(first[1]),
            )
        )


def async_events(c: Context) -> None:
    """InfiniBand async events (port changes) warn: fabric instability, not a failure by itself."""
    job = c.job
    if job.event_count:
        first_event = job.events[0]
        c.findings.append(
            Finding(
                Status.WARN,
                f"InfiniBand async events ({job.event_count}): {first_event[1]} - the subnet manager or a port "
                "changed state during the job (fabric instability, not a NCCL failure by itself)",
                tuple(r for r, _ in job.events[:5]),
                "Check the subnet manager log and the port counters of the hosts' HCAs (ibdiagnet, perfquery).",
            )
        )


def network_used(c: Context) -> None:
    """Which network inter-node traffic used: none shown, TCP sockets (socket_findings), or RDMA."""
    job, hosts, network = c.job, c.hosts, c.network
    socket_hosts = [n for n, (k, _, _) in c.per_host.items() if k == "socket"]
    rdma_hosts = [n for n, (k, _, _) in c.per_host.items() if k in ("ib", "ofi")]
    if network is None:
        if c.single_node is True:
            c.findings.append(Finding(Status.OK, _single_note(job, hosts), _first_intra_refs(job)))
        else:
            c.findings.append(
                Finding(
                    Status.WARN,
                    "insufficient evidence: the log shows no network selection ('Using network', NET/... device "
                    "lines) and no network channel lines",
                    (),
                    "Run with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS including INIT and NET) and keep the whole log.",
                )
            )
            if c.init_failed:
                c.findings.append(_init_failure_finding(c.init_failed, Status.WARN))
    elif network == "socket" or socket_hosts:
        c.findings.extend(
            _socket_findings(
                job,
                hosts,
                c.per_host,
                network,
                socket_hosts,
                rdma_hosts,
                c.single_node,
                c.expected_net,
                c.init_failed,
                c.host_json,
            )
        )
    else:
        if c.init_failed:
            # e.g. aws-ofi-nccl failed but NCCL went on with its own IB: worth knowing, not a fallback
            c.findings.append(_init_failure_finding(c.init_failed, Status.WARN, recovered=network))
        net_ref = next((ref for k, _, ref in c.per_host.values() if k == network and ref), None)
        chan_ref = min((ref for (nm, _), (_, ref) in job.net.items() if ref), key=lambda r: r.line, default=None)
        what = _describe_network(network, c.link_layer, job, hosts)
        if c.inter_node:
            c.findings.append(Finding(Status.OK, f"inter-node traffic over {what}", _refs(net_ref, chan_ref)))
        elif c.single_node is True and c.net_channels == 0:
            c.findings.append(Finding(Status.OK, _single_note(job, hosts) + f" ({what} was set up)", _refs(net_ref)))
        else:
            c.findings.append(
                Finding(
                    Status.OK,
                    f"network {what} selected; the log does not show whether traffic crossed nodes",
                    _refs(net_ref),
                )
            )


def gpudirect_rdma(c: Context) -> None:
    """Network channels without GPUDirect RDMA warn (fail with --expect-gdr), naming the hosts."""
    job, network, net_channels = c.job, c.network, c.net_channels
    if net_channels and network not in ("socket",):
        no_gdr = [(ref, nm) for (nm, gdr), (_, ref) in job.net.items() if not gdr and network_kind(nm) != "socket"]
        if no_gdr:
            hosts_without = sorted(n for n, hj in c.host_json.items() if hj["gpudirect_rdma"] is False)
            why = _gdr_causes(c.hosts, job)
            partial = c.gdr_yes > 0
            status = Status.FAIL if c.expect_gdr else Status.WARN
            msg = (
                f"{c.gdr_no} of {net_channels} network channels do not use GPUDirect RDMA (no /GDRDMA)"
                if partial
                else "inter-node channels do not use GPUDirect RDMA: "
                f"none of {net_channels} network channels has /GDRDMA"
            )
            if hosts_without and (partial or len(hosts_without) < len(c.host_json)):
                msg += " on " + _hostlist(hosts_without)
            if why:
                msg += f"; {why[0]}"
            c.findings.append(
                Finding(
                    status,
                    msg,
                    _refs(*(ref for ref, _ in no_gdr[:3]), *why[1:2]),
                    "Load nvidia_peermem (or use DMA-BUF: open kernel modules, CUDA >= 11.7, kernel >= 5.12), "
                    "expose the RDMA devices to the container, and check NCCL_NET_GDR_LEVEL.",
                )
            )
        elif c.gdr_yes:
            first_gdr = min((ref for (_, gdr), (_, ref) in job.net.items() if gdr and ref), key=lambda r: r.line)
            c.findings.append(
                Finding(Status.OK, f"GPUDirect RDMA on all {net_channels} network channels", _refs(first_gdr))
            )
    elif c.expect_gdr and network not in ("socket",) and c.inter_node:
        c.findings.append(
            Finding(
                Status.WARN,
                "GPUDirect RDMA expected but the log has no network channel lines to confirm it",
                (),
                "Keep NCCL_DEBUG_SUBSYS at its default (INIT) so the 'Channel ... via NET/...' lines are printed.",
            )
        )


def gdr_disabled_hcas(c: Context) -> None:
    """HCAs that report GPU Direct RDMA disabled (printed with NCCL_DEBUG_SUBSYS including NET/GRAPH)."""
    hosts = c.hosts
    disabled = sorted({hca for h in hosts.values() for hca, (on, _) in h.gdr_hca.items() if not on})
    if disabled and c.network not in ("socket",) and not (c.net_channels and c.gdr_no):
        refs = tuple(ref for h in hosts.values() for _, (on, ref) in h.gdr_hca.items() if not on)[:2]
        c.findings.append(
            Finding(
                Status.FAIL if c.expect_gdr else Status.WARN,
                f"GPU Direct RDMA Disabled for HCA {', '.join(disabled)}: inter-node traffic from "
                f"{'this host' if len(hosts) == 1 else 'these hosts'} would not use GPUDirect RDMA",
                refs,
                "Load nvidia_peermem (or use DMA-BUF with the open kernel modules) and check the GPU and HCA share "
                "a PCIe switch (NCCL_NET_GDR_LEVEL).",
            )
        )


def mixed_link_layers(c: Context) -> None:
    """InfiniBand and RoCE HCAs in one job warn: traffic over the minority lowers bandwidth."""
    if c.link_layer != "mixed":
        return
    per_link: dict[str, list[str]] = {}
    for h in c.hosts.values():
        for dev, (link, _) in h.devices.items():
            per_link.setdefault(link.split("/", 1)[0], []).append(dev.split(":", 1)[0])
    minority = min(per_link.items(), key=lambda kv: len(kv[1]))
    ref = next((h.ib_line for h in c.hosts.values() if h.ib_line), None)
    c.findings.append(
        Finding(
            Status.WARN,
            "NCCL uses InfiniBand and RoCE HCAs together: "
            + ", ".join(f"{len(set(v))} {k}" for k, v in sorted(per_link.items()))
            + f"; traffic over {', '.join(sorted(set(minority[1])))} ({minority[0]}) lowers bandwidth",
            _refs(ref),
            f"Restrict NCCL to the intended HCAs, e.g. NCCL_IB_HCA=^{sorted(set(minority[1]))[0]}.",
        )
    )


def one_hca_for_many_gpus(c: Context) -> None:
    """NCCL_IB_HCA narrowed to one HCA for several GPUs: every GPU's inter-node traffic shares it."""
    if not (c.inter_node and c.network == "ib"):
        return
    for h in c.hosts.values():
        hca_env = h.env.get("NCCL_IB_HCA")
        if hca_env and len(h.devices) == 1 and len(h.devs) > 1:
            dev = next(iter(h.devices))
            c.findings.append(
                Finding(
                    Status.WARN,
                    f"{h.name}: NCCL_IB_HCA={hca_env[0]} leaves one HCA ({dev}) for {len(h.devs)} GPUs: "
                    f"expect about 1/{len(h.devs)} of the node's inter-node bandwidth"
                    + (" (PXN routes channels through the GPU nearest the NIC)" if c.job.pxn else ""),
                    _refs(hca_env[1], h.ib_line),
                    "List every HCA the node should use in NCCL_IB_HCA (or unset it).",
                )
            )
            break


def expected_network(c: Context) -> None:
    """--expect: another network than the one asked for fails (sockets are judged by network_used)."""
    if c.expect == "roce" and c.link_layer == "infiniband":
        c.findings.append(Finding(Status.FAIL, "expected RoCE, but the HCAs NCCL uses are InfiniBand", ()))
    network = c.network
    if c.expected_net and network and network != c.expected_net and network != "socket":
        c.findings.append(
            Finding(
                Status.FAIL,
                f"expected {c.expect}, but inter-node traffic uses "
                f"{_describe_network(network, c.link_layer, c.job, c.hosts)}",
                (),
            )
        )


def ibext_disabled_by_hand(c: Context) -> None:
    """Single-process logs where IBext was disabled by hand do not disable NCCL's own IB (NVIDIA/nccl#676)."""
    for h in c.hosts.values():
        env = h.env.get("NCCL_IBEXT_DISABLE")
        if env and env[0].strip() == "1" and "NCCL_IB_DISABLE" not in h.env and c.network is None:
            c.findings.append(
                Finding(
                    Status.OK,
                    "NCCL_IBEXT_DISABLE=1 disables only the external IBext plugin; NCCL's internal IB transport "
                    "still initializes (NCCL_IB_DISABLE=1 forces sockets)",
                    (env[1],),
                )
            )
            break


def efa_missing(c: Context) -> None:
    """libfabric found no EFA device: aws-ofi-nccl cannot use EFA, NCCL falls back."""
    job = c.job
    if "efa_empty" in job.foreign and c.network != "ofi":
        c.findings.append(
            Finding(
                Status.WARN if c.network is None else Status.FAIL,
                "libfabric found no EFA device (fi_getinfo: provider efa output empty list): aws-ofi-nccl cannot "
                "use EFA here, so NCCL falls back to another network",
                (job.foreign["efa_empty"],),
                "Expose the EFA devices (/dev/infiniband/uverbs*) to the container (the EFA device plugin on "
                "Kubernetes, --device on Docker).",
            )
        )


def garbled_lines(c: Context) -> None:
    """Lines two ranks wrote into each other are skipped, and said so."""
    garbled = c.job.garbled
    if garbled:
        c.findings.append(
            Finding(
                Status.OK,
                f"{garbled} garbled line{'s' if garbled > 1 else ''} skipped "
                "(output of two ranks spliced into one line)",
                (),
            )
        )


#: The rules, in the order their findings are reported.
RULES: tuple[Callable[[Context], None], ...] = (
    transport_errors,
    async_events,
    network_used,
    gpudirect_rdma,
    gdr_disabled_hcas,
    mixed_link_layers,
    one_hca_for_many_gpus,
    expected_network,
    ibext_disabled_by_hand,
    efa_missing,
    garbled_lines,
)


def _refs(*refs: Ref | None) -> tuple[Ref, ...]:
    out: list[Ref] = []
    for r in refs:
        if r is not None and r not in out:
            out.append(r)
    return tuple(out)


def _first_intra_refs(job: _Job) -> tuple[Ref, ...]:
    return _refs(*(ref for _, ref in list(job.intra.values())[:2]))


def _single_note(job: _Job, hosts: dict[str, _Host]) -> str:
    intra = ", ".join(f"{k} ({v[0]} channels)" for k, v in sorted(job.intra.items())) or "no channel lines"
    return f"single node, no network was exercised; GPU-to-GPU traffic: {intra}"


def _hostlist(names: Sequence[str]) -> str:
    try:
        from clustercheck.hostlist import fold

        return str(fold(list(names)))
    except Exception:
        return ",".join(names)


def _describe_network(network: str, link_layer: str | None, job: _Job, hosts: dict[str, _Host]) -> str:
    if network == "ib":
        plugins = sorted({nm for (nm, _) in job.net if network_kind(nm) == "ib"})
        if not plugins:
            plugins = sorted({n for h in hosts.values() for n in h.networks if network_kind(n) == "ib"})
        name = "/".join(plugins) if plugins else "IB"
        what = {"infiniband": "InfiniBand", "roce": "RoCE", "mixed": "InfiniBand and RoCE"}.get(link_layer or "", "")
        return f"NCCL's IB verbs transport ({name}{', ' + what if what else ''})"
    if network == "ofi":
        providers = sorted({h.ofi_provider[0] for h in hosts.values() if h.ofi_provider})
        return "aws-ofi-nccl (libfabric" + (f", provider {', '.join(providers)}" if providers else "") + ")"
    if network == "socket":
        return "TCP sockets"
    return network


def _socket_findings(
    job: _Job,
    hosts: dict[str, _Host],
    per_host: dict[str, tuple[str | None, str | None, Ref | None]],
    network: str | None,
    socket_hosts: list[str],
    rdma_hosts: list[str],
    single_node: bool | None,
    expected_net: str | None,
    init_failed: list[tuple[Ref, str]],
    host_json: dict[str, dict[str, Any]],
) -> list[Finding]:
    findings: list[Finding] = []
    cause, cause_ref = _fallback_cause(hosts, socket_hosts, job)
    for n in socket_hosts:
        host_json[n]["reason"] = cause
    sock_ref = next((per_host[n][2] for n in socket_hosts if per_host[n][2]), None)
    socket_chan = min(
        (ref for (nm, _), (_, ref) in job.net.items() if network_kind(nm) == "socket" and ref),
        key=lambda r: r.line,
        default=None,
    )
    refs = _refs(cause_ref, sock_ref, socket_chan)
    ifaces = sorted({i for n in socket_hosts for i in hosts[n].sockets})
    on_lo = ifaces == ["lo"]
    where = f" on {_hostlist(socket_hosts)}" if rdma_hosts and socket_hosts else ""
    if expected_net == "socket":
        findings.append(Finding(Status.OK, "TCP sockets, as expected" + (f" ({cause})" if cause else ""), refs))
    elif single_node is False or (network == "socket" and job.net):
        msg = "fell back to TCP sockets" + where
        msg += f": {cause}" if cause else ": inter-node traffic goes over TCP"
        findings.append(
            Finding(
                Status.FAIL,
                msg + (f" (line {cause_ref.line})" if cause_ref else ""),
                refs,
                _socket_remedy(cause),
            )
        )
    elif single_node is True:
        findings.append(
            Finding(
                Status.WARN if init_failed or on_lo else Status.OK,
                _single_note(job, hosts)
                + "; NCCL selected TCP sockets"
                + (f" ({cause})" if cause else "")
                + ", so a multi-node job from this host would not use RDMA"
                + ("; and over the loopback interface lo a multi-node job cannot work at all" if on_lo else ""),
                refs,
                _socket_remedy(cause) if init_failed or on_lo else "",
            )
        )
    else:
        findings.append(
            Finding(
                Status.WARN,
                "NCCL selected TCP sockets"
                + (f" ({cause})" if cause else "")
                + "; the log does not show whether traffic crossed nodes, but a multi-node job would use TCP"
                + ("; over the loopback interface lo it cannot work at all" if on_lo else ""),
                refs,
                _socket_remedy(cause),
            )
        )
    if expected_net and expected_net != "socket" and findings[-1].status is not Status.FAIL:
        findings.append(
            Finding(
                Status.FAIL,
                f"expected {expected_net}, but NCCL selected TCP sockets" + (f": {cause}" if cause else ""),
                refs,
                _socket_remedy(cause),
            )
        )
    if init_failed and expected_net != "socket":
        status = Status.FAIL if single_node is False else Status.WARN
        findings.append(_init_failure_finding(init_failed, status))
    return findings


def _init_failure_finding(failed: list[tuple[Ref, str]], status: Status, recovered: str | None = None) -> Finding:
    text = failed[0][1]
    if recovered:
        msg = f"a network plugin failed to initialize ({text}); NCCL went on with {recovered}"
    else:
        msg = f"the network NCCL was meant to use failed to initialize: {text}"
    return Finding(
        status,
        msg,
        tuple(r for r, _ in failed[:3]),
        "Check the plugin's requirements (for aws-ofi-nccl: /dev/infiniband inside the container, the EFA "
        "driver and libfabric) and the library path.",
    )


def _fallback_cause(hosts: dict[str, _Host], socket_hosts: list[str], job: _Job) -> tuple[str | None, Ref | None]:
    """The most telling reason the log gives for a socket selection."""
    best: tuple[int, str, Ref] | None = None
    for n in socket_hosts:
        h = hosts[n]
        candidates: list[tuple[str, str, Ref]] = []
        env = h.env.get("NCCL_IB_DISABLE")
        if env and env[0].strip() not in ("0", ""):
            candidates.append(("NCCL_IB_DISABLE", f"NCCL_IB_DISABLE set by environment to {env[0]}", env[1]))
        env = h.env.get("NCCL_NET")
        if env and network_kind(env[0]) == "socket":
            candidates.append(("NCCL_NET", f"NCCL_NET={env[0]} set by environment", env[1]))
        for key, (text, ref) in h.causes.items():
            if key in _CAUSE_ORDER:
                candidates.append((key, text, ref))
        for cand in candidates:
            rank = _CAUSE_ORDER.index(cand[0])
            if best is None or rank < best[0]:
                best = (rank, cand[1], cand[2])
    if best is None and "efa_empty" in job.foreign:
        return "libfabric: provider efa output empty list (no EFA device in the container)", job.foreign["efa_empty"]
    if best is None:
        return None, None
    return best[1], best[2]


def _socket_remedy(cause: str | None) -> str:
    if cause and "IB_DISABLE" in cause:
        return "Unset NCCL_IB_DISABLE (or set it to 0) unless TCP is intended."
    if cause and "NCCL_NET=" in cause:
        return "Unset NCCL_NET or set it to the RDMA network (IB, or the plugin's name)."
    if cause and "libibverbs" in cause:
        return "Install rdma-core (libibverbs and the provider, e.g. libmlx5) in the image, or mount it from the host."
    if cause and ("open device" in cause or "ibv_open" in cause):
        return "Expose /dev/infiniband (and the uverbs devices) to the container; check permissions and memlock."
    if cause and "No device found" in cause:
        return (
            "Check the HCAs are up (ibstat, port State Active) and visible in the container (/dev/infiniband, "
            "/sys/class/infiniband); check NCCL_IB_HCA."
        )
    return (
        "Check the RDMA devices are visible (/dev/infiniband, ibv_devinfo), the plugin loads, and NCCL_IB_DISABLE/"
        "NCCL_NET are not set."
    )


def _gdr_causes(hosts: dict[str, _Host], job: _Job) -> list[Any]:
    for h in hosts.values():
        if "ofi_nogdr" in h.causes:
            text, ref = h.causes["ofi_nogdr"]
            return [f"aws-ofi-nccl says: {text.replace('NET/OFI ', '')}", ref]
        env = h.env.get("NCCL_NET_GDR_LEVEL") or h.env.get("NCCL_IB_GDR_LEVEL")
        if env and env[0].strip().upper() in ("LOC", "0"):
            return [f"NCCL_NET_GDR_LEVEL={env[0]} forbids it", env[1]]
        off = [(hca, ref) for hca, (on, ref) in h.gdr_hca.items() if not on]
        if off:
            return [f"GPU Direct RDMA Disabled for HCA {off[0][0]}", off[0][1]]
    return []


def _explain_warn(text: str) -> str:
    m = re.search(r"(?:status=|with error )(\d+)", text)
    if m and int(m.group(1)) in WC_STATUS:
        return f"{text} (status {m.group(1)} = {WC_STATUS[int(m.group(1))]})"
    return text


def _error_remedy(text: str) -> str:
    m = re.search(r"(?:status=|with error )(\d+)", text)
    code = int(m.group(1)) if m else None
    if code == 12:
        return (
            "Retry counter exceeded: the peer stopped answering or the fabric drops packets; check links, "
            "PFC/ECN on RoCE, and the peer's health."
        )
    if code == 4:
        return (
            "Local protection error: a memory registration problem (GPUDirect RDMA / nvidia_peermem, DMA-BUF) "
            "or a wrong GID index on RoCE (NCCL_IB_GID_INDEX)."
        )
    return "Read the lines around it; check the HCAs' port state and counters and the peer host."
