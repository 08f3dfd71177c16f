"""Promise: no parser of untrusted text is super-linear, so a hostile node, fixture or log cannot
hold the interpreter past a budget (a quadratic regex holds the GIL: no timer fires meanwhile).

Each parser gets 1 MB inputs built to hit backtracking (long runs of one character, a start
literal repeated without its terminator, nested brackets) and must finish well inside a few
seconds; before the fixes each of these took minutes or hours (one 800 KB slurm.conf line kept
`run --timeout 10` past 30 s). Hypothesis checks that the linear forms give the same answers as
the patterns they replaced, on short inputs where the old ones are still fast.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from checks import monitoring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import cli

from clustercheck import hostlist
from clustercheck.analyzers import nccl_log, nccl_tests, topology
from clustercheck.analyzers.nccl_log import grammar
from clustercheck.errors import UsageError
from clustercheck.facts import slurm_conf

MB = 1 << 20
# Generous: linear code does each input in well under a second on a loaded two-core machine;
# the quadratic forms these inputs were built against need minutes or more.
BOUND_S = 6.0


def timed(parse: Callable[[Any], object], text: Any) -> float:
    start = time.perf_counter()
    # refusing hostile input is fine; taking forever is not
    with contextlib.suppress(ValueError, UsageError, topology.TopologyError, monitoring.ScrapeParseError):
        parse(text)
    return time.perf_counter() - start


def repeat(unit: str, size: int = MB) -> str:
    return unit * (size // len(unit))


HOSTILE: list[tuple[str, Callable[[Any], object], str]] = [
    # the slurm.conf parser of rdma.memlock (first_settings): a key retried at every position of a long word
    ("rdma slurm.conf: one long word", slurm_conf.first_settings, repeat("a")),
    ("rdma slurm.conf: words without =", slurm_conf.first_settings, repeat("ab ")),
    ("rdma slurm.conf: an unclosed quote", slurm_conf.first_settings, "A=" + repeat('"a')),
    # slurm.conf / topology.conf Key=Value lines
    ("slurm.conf: many pairs on one line", topology.parse_slurm_conf, "NodeName=n1 " + repeat("Weight=1 ")),
    ("topology.conf: many pairs", topology.parse_topology_conf, "SwitchName=s1 " + repeat("LinkSpeed=1 ")),
    ("gres: unclosed parentheses", topology.parse_gres_gpus, repeat("gpu:1(")),
    ("gres.conf: long names", slurm_conf.parse_gres_conf, "NodeName=" + repeat("a1")),
    # hostlists: python-hostlist folds long digit-rich names in quadratic time and recurses per group
    ("hostlist: one long name", hostlist.expand, repeat("a1")),
    ("hostlist: nested brackets", hostlist.expand, repeat("[")),
    ("hostlist: bracket groups", hostlist.expand, repeat("[1]")),
    ("hostlist: many names", hostlist.expand, repeat("a[1-9],")),
    ("hostlist fold: one long name", lambda s: hostlist.fold([s, s + "2"]), repeat("a1", 64 * 1024)),
    # ibnetdiscover: links per node
    (
        "ibnetdiscover: one switch, many ports",
        topology.parse_ibnetdiscover,
        'Switch 36 "S-0001"\n'
        + "".join(f'[{i}] "H-{i:016x}"[1]\n' for i in range(20000))
        + "\n"
        + "".join(f'Ca 1 "H-{i:016x}"\n[1] "S-0001"[{i}]\n\n' for i in range(0, 20000, 7)),
    ),
    # NCCL log lines (each one of the kinds the scanner parses): host prefixes, spliced lines,
    # device and interface lists, channel lines, WARN messages
    ("nccl log: '>' runs in a prefix", nccl_log.analyze_text, repeat(">") + " NCCL WARN x\n"),
    ("nccl log: ']' runs in a prefix", nccl_log.analyze_text, repeat("]") + " NCCL WARN x\n"),
    ("nccl log: spliced-looking prefix", nccl_log.analyze_text, repeat("a#") + " NCCL WARN x\n"),
    ("nccl log: device brackets", nccl_log.analyze_text, repeat("[1]") + " NCCL WARN x\n"),
    ("nccl log: many markers on a line", nccl_log.analyze_text, repeat("h:1:2 [0] NCCL WARN x ", 3 * MB)),
    ("nccl log: channel starts", nccl_log.analyze_text, repeat("NCCL INFO Channel ") + " via NET/IB/0\n"),
    (
        "nccl log: socket interfaces",
        nccl_log.analyze_text,
        "h:1:2 [0] NCCL INFO NET/Socket : Using " + repeat("[1]a:b") + "\n",
    ),
    (
        "nccl log: NET tails",
        nccl_log.analyze_text,
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/" + repeat("a/1") + "\n",
    ),
    ("nccl log: nvls digits", nccl_log.analyze_text, "h:1:2 [0] NCCL INFO " + repeat("1") + " coll channels\n"),
    ("nccl log: OFI warn", nccl_log.analyze_text, "h:1:2 [0] NCCL WARN " + repeat("NET/OFI ") + "\n"),
    ("nccl log: many hostile lines", nccl_log.analyze_text, repeat("[1]" * 300 + " NCCL WARN x\n")),
    # nccl-tests output
    ("nccl-tests: parameter lines", nccl_tests.parse, repeat("nThread 1 nGpus 1 ")),
    # Prometheus pages: one search of the page per counter family
    (
        "scrape: many counter families",
        monitoring.parse_scrape,
        "".join(f"# TYPE m{i} counter\nm{i} 1\n" for i in range(40000)),
    ),
]


@pytest.mark.parametrize(("what", "parse", "text"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_megabyte_parses_in_linear_time(what: str, parse: Callable[[Any], object], text: str) -> None:
    took = timed(parse, text)
    assert took < BOUND_S, f"{what}: {took:.1f} s for {len(text)} characters"


def test_eight_hundred_kb_slurm_conf_line_keeps_run_timeout(tmp_path: Path) -> None:
    """The reported case through the CLI: topology with an 18 KB node name and an 800 KB line."""
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s0 Nodes=" + "a1" * 9000 + "\n")
    start = time.perf_counter()
    r = cli("topology", "--conf", conf, timeout=60)
    assert time.perf_counter() - start < 20
    assert r.returncode == 64, r.stdout + r.stderr
    assert f"{conf}:1" in r.stderr and "longer than 64 characters" in r.stderr
    assert "Traceback" not in r.stderr
    big = tmp_path / "slurm.conf"
    big.write_text("NodeName=gpu[001-004] " + "a" * 800_000 + "\n")
    ok = tmp_path / "ok.conf"
    ok.write_text("SwitchName=s0 Nodes=gpu[001-004]\n")
    start = time.perf_counter()
    r = cli("topology", "--conf", ok, "--slurm-conf", big, timeout=60)
    assert time.perf_counter() - start < 20
    assert r.returncode == 64 and f"{big}:1" in r.stderr, r.stdout + r.stderr


# -- the linear forms answer as the old patterns did --------------------------------------------

OLD_SLURM_PAIR = re.compile(r"([A-Za-z]\w*)\s*=\s*(\"[^\"]*\"|\S+)")
OLD_HOST = re.compile(r"(?:^|(?<=[\s>\]:|]))([^\s:|]+):(\d+):(\d+) \[(-?\d+)\]")
OLD_SPLICED = re.compile(r"[^\s:|\[\]]+:\d+:")
OLD_TAIL_PREFIX = re.compile(r"([^\s:|]+):(\d+):(\d+) \[(-?\d+)\] $")
OLD_NVLS = re.compile(r"(\d+) nvls channels")
OLD_PARAMS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+).*?minBytes\s+(\d+)\s+maxBytes\s+(\d+)")

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = st.sampled_from(
    ["a", "B", "1", "_", " ", "\t", ":", "|", ">", "]", "[", "=", '"', "#", "-", ".", "0", "x", "nvls channels"]
)
LINES = st.lists(PIECES, max_size=40).map("".join)


def groups(m: re.Match[str] | None) -> tuple[Any, ...] | None:
    return None if m is None else (m.start(), *m.groups())


@FUZZ
@given(LINES)
def test_slurm_conf_pairs_match_the_old_parser_on_keys_that_start_words(line: str) -> None:
    # The old pattern also found a key inside a word that starts with a digit or `_` ("1Key=v");
    # slurm.conf keys never do, so the comparison leaves those words out.
    if re.search(r"(?<![A-Za-z])[0-9_]\w*[A-Za-z]", line):
        return
    old: dict[str, str] = {}
    for m in OLD_SLURM_PAIR.finditer(line.split("#", 1)[0].strip()):
        old.setdefault(m.group(1).lower(), m.group(2).strip('"'))
    new = {k: v for k, (v, _) in slurm_conf.first_settings(line).items()}
    assert new == old


@FUZZ
@given(LINES)
def test_nccl_prefix_patterns_match_the_old_ones(text: str) -> None:
    assert groups(grammar._HOST.search(text)) == groups(OLD_HOST.search(text))
    assert bool(grammar._SPLICED.search(text)) == bool(OLD_SPLICED.search(text))
    assert groups(grammar._TAIL_PREFIX.search(text + " [0] ")) == groups(OLD_TAIL_PREFIX.search(text + " [0] "))
    new = re.search(r"(?<!\d)(\d+) nvls channels", text)
    assert (new and new.group(1)) == ((m := OLD_NVLS.search(text)) and m.group(1))


# Two lines of a real table (tests/corpus/nccl_tests/aws-awsome-allreduce-2x-p5-srun-prefixed.txt).
TABLE = [
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "           8             2     float     sum      -1    69.12    0.00    0.00      0"
    "    72.43    0.00    0.00      0",
]


@FUZZ
@given(st.lists(st.sampled_from(["nThread", "nGpus", "minBytes", "maxBytes", " ", "1", "x"]), max_size=30))
def test_nccl_tests_parameters_match_the_old_pattern(words: list[str]) -> None:
    line = " ".join(words)
    m = OLD_PARAMS.search(line)
    if "nThread" not in line:
        return
    report = nccl_tests.parse([f"# {line}", *TABLE], "-")
    want = None if m is None else [int(g) for g in m.groups()]
    got = report.params
    assert (None if not got else [got["nThread"], got["nGpus"], got["minBytes"], got["maxBytes"]]) == want


@FUZZ
@given(st.lists(st.sampled_from(["gpu", ":", "2", "(", ")", "S", ",", "a"]), max_size=20).map("".join))
def test_gres_parentheses_removed_as_before(text: str) -> None:
    assert topology._without_parentheses(text) == re.sub(r"\(.*?\)", "", text)


NAMES = st.lists(
    st.builds(
        lambda prefix, number, width, suffix: f"{prefix}{number:0{width}d}{suffix}",
        st.sampled_from(["gpu", "n", "r1n", "login-"]),
        st.integers(0, 300),
        st.integers(1, 4),
        st.sampled_from(["", "-ib", "b"]),
    ),
    min_size=1,
    max_size=40,
)


@FUZZ
@given(NAMES)
def test_fold_then_expand_gives_the_names_back(names: list[str]) -> None:
    assert set(hostlist.expand(hostlist.fold(names))) == set(names)


@FUZZ
@given(NAMES, st.text(alphabet="ab1", min_size=65, max_size=200))
def test_fold_keeps_overlong_names_whole(names: list[str], long: str) -> None:
    folded = hostlist.fold([*names, long])
    assert folded.endswith("," + long)
    assert set(hostlist.expand(folded.removesuffix("," + long))) == set(names)


def test_hostlist_limits_are_slurms() -> None:
    assert hostlist.expand("gpu[001-003],login1") == ["gpu001", "gpu002", "gpu003", "login1"]
    assert len(hostlist.expand("n[1-65536]")) == 65536
    with pytest.raises(UsageError, match="more than 65536 hosts"):
        hostlist.expand("n[1-65536],m1")
    with pytest.raises(UsageError, match="longer than 64 characters"):
        hostlist.expand("a" * 65, max_name=hostlist.SLURM_MAX_NAME)
    assert hostlist.expand("a" * 64, max_name=hostlist.SLURM_MAX_NAME) == ["a" * 64]
    with pytest.raises(UsageError, match="bracket groups"):
        hostlist.expand("[1]" * 20000)  # python-hostlist recursed past the stack limit (a traceback)
