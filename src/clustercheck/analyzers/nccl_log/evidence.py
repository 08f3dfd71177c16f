"""The evidence a scan accumulates, per host and for the job: what `state.Scanner` fills and the rules
(`rules.judge`) read. Plain data, no behaviour, so both import it and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustercheck.analyzers.nccl_log.grammar import Ref

#: Caps that keep memory constant whatever the input holds.
MAX_ERRORS = 50
MAX_HOSTS = 4096


@dataclass
class _Host:
    name: str
    networks: dict[str, Ref] = field(default_factory=dict)  # "Using network X": X -> first line
    devices: dict[str, tuple[str, Ref]] = field(default_factory=dict)  # HCA -> (link layer, line)
    ib_line: Ref | None = None
    sockets: dict[str, Ref] = field(default_factory=dict)  # NET/Socket interfaces (transport)
    socket_lines_24: dict[str, Ref] = field(default_factory=dict)  # NET/Socket lines of NCCL <= 2.4
    other_nets: dict[str, Ref] = field(default_factory=dict)  # NET/<plugin> : Using
    oob: str | None = None
    bootstrap: str | None = None
    seen: int = 0
    first: Ref | None = None
    ofi_provider: tuple[str, Ref] | None = None
    ofi_nics: int | None = None
    ofi_plugin: tuple[str, Ref] | None = None
    ibext_plugin: Ref | None = None
    gdr_hca: dict[str, tuple[bool, Ref]] = field(default_factory=dict)
    causes: dict[str, tuple[str, Ref]] = field(default_factory=dict)
    env: dict[str, tuple[str, Ref]] = field(default_factory=dict)
    version: tuple[str, Ref] | None = None
    devs: set[int] = field(default_factory=set)
    ranks: set[tuple[int, int]] = field(default_factory=set)  # (rank, nranks) of Init COMPLETE lines
    nnodes: set[int] = field(default_factory=set)
    local_ranks: set[int] = field(default_factory=set)
    nvls_channels: int | None = None
    nvls: dict[str, Ref] = field(default_factory=dict)
    channels: dict[str, list[Any]] = field(default_factory=dict)  # class -> [count, first Ref]
    net_gdr: list[Any] = field(default_factory=lambda: [0, 0, None, None])  # gdr, nogdr, ref gdr, ref nogdr
    errors: int = 0
    events: int = 0
    error_nets: dict[str, Ref] = field(default_factory=dict)  # NET/<x> named by a transport error
    roce_gid: bool = False  # an IPv4-mapped GID (::ffff:a.b.c.d) in an error: RoCE v2


@dataclass
class _Job:
    hosts: dict[str, _Host] = field(default_factory=dict)
    net: dict[tuple[str, bool], list[Any]] = field(default_factory=dict)  # (name, gdr) -> [count, Ref]
    pxn: int = 0
    intra: dict[str, list[Any]] = field(default_factory=dict)  # class -> [count, Ref]
    errors: list[tuple[Ref, str, str | None]] = field(default_factory=list)  # (ref, text, host)
    error_count: int = 0
    init_failures: list[tuple[Ref, str, str | None]] = field(default_factory=list)
    events: list[tuple[Ref, str]] = field(default_factory=list)
    event_count: int = 0
    garbled: int = 0
    overlong: int = 0
    cut: int = 0  # lines cut at MAX_KEPT
    cut_ref: Ref | None = None
    nccl_lines: int = 0
    lines: int = 0
    sources: list[str] = field(default_factory=list)
    versions: dict[str, Ref] = field(default_factory=dict)
    foreign: dict[str, Ref] = field(default_factory=dict)
    has_bootstrap: bool = False
    garbled_refs: set[Ref] = field(default_factory=set)
    remote_peer: Ref | None = None  # a completion error from a peer on another address
