"""rdma.* checks: parsers on real ibstat/ibv_devinfo/sysfs/limits formats, the NCCL_IB_HCA syntax
(property-tested), and verdicts over edited copies of the recorded-format fixtures in fixtures/rdma/."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from clustercheck.checks.rdma import memlock_propagated, parse_limits
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli

from clustercheck.facts.image import PROBE_SCRIPT, parse_probe
from clustercheck.facts.infiniband import (
    Port,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_phys_state,
    parse_rate,
    parse_state,
    parse_sysfs,
    split_sections,
)
from clustercheck.facts.nccl_env import (
    Setting,
    judge_nccl_settings,
    parse_nccl_conf,
    parse_nccl_if_list,
    strtoll,
)
from clustercheck.facts.slurm_conf import first_settings as parse_slurm_conf  # what rdma.memlock reads
from clustercheck.result import CheckResult

RDMA = FIXTURES / "rdma"
HEALTHY = RDMA / "healthy-ndr"
IB_TOOLS = CORPUS / "ib_tools"
GATHER = next((HEALTHY / "commands").glob("sh_-c_echo_sysfs*"))


# -- helpers: edited copies of a fixture, run in-process through the replay transport ----------


def variant(tmp_path: Path, source: Path = HEALTHY, files: dict[str, str | None] | None = None) -> Path:
    """A copy of `source` with files replaced (text) or made absent (None)."""
    fixture = tmp_path / source.name
    shutil.copytree(source, fixture)
    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    for path, text in (files or {}).items():
        local = fixture / "files" / path.lstrip("/")
        if text is None:
            local.unlink(missing_ok=True)
            manifest["absent"] = sorted({*manifest.get("absent", []), path})
        else:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(text)
            manifest["absent"] = [a for a in manifest.get("absent", []) if a != path]
    (fixture / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    return fixture


def set_command(fixture: Path, argv: list[str], stdout: str = "", exit_code: int = 0, stderr: str = "") -> None:
    """Record (or replace) one command's answer in a fixture."""
    for record in (fixture / "commands").glob("*/command.yaml"):
        if yaml.safe_load(record.read_text())["argv"] == argv:
            folder = record.parent
            break
    else:
        folder = fixture / "commands" / f"cmd{len(list((fixture / 'commands').iterdir()))}"
        folder.mkdir()
    (folder / "command.yaml").write_text(yaml.safe_dump({"argv": argv, "exit_code": exit_code, "duration_s": 0.01}))
    (folder / "stdout").write_text(stdout)
    (folder / "stderr").write_text(stderr)


def gather_stdout(fixture: Path = HEALTHY) -> str:
    return (next((fixture / "commands").glob("sh_-c_echo_sysfs*")) / "stdout").read_text()


def run_checks(fixture: Path, checks: dict[str, dict[str, Any] | None]) -> dict[str, CheckResult]:
    """Run a profile of `checks` over the fixture, as `clustercheck run --replay` does, in-process."""
    from clustercheck import profile as profiles
    from clustercheck import runner
    from clustercheck.transports.fixture import Fixture, ReplayTransport

    with tempfile.TemporaryDirectory() as folder:  # never beside the fixture: it may be the repository's
        path = Path(folder) / "profile.yaml"
        path.write_text(yaml.safe_dump({"name": "under-test", "checks": checks}))
        prof = profiles.load(str(path))
    report = runner.run_profile(prof, [ReplayTransport(Fixture.load(fixture))], version="test")
    return {c.id: c for c in report.hosts[0].checks}


def one(fixture: Path, check_id: str, params: dict[str, Any] | None = None) -> CheckResult:
    return run_checks(fixture, {check_id: params})[check_id]


# -- parsers on real artifacts -------------------------------------------------------------------


def test_ibstat_cx7_ndr_and_truncated_excerpt() -> None:
    hcas = parse_ibstat((IB_TOOLS / "issue-deepep-303-ibstat-h20-cx7-ndr400-EXCERPT.txt").read_text())
    assert list(hcas) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert hcas["mlx5_0"] == [Port("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "400 Gb/sec", "InfiniBand")]
    # the excerpt is cut after mlx5_2's physical state: what is there is kept, the rest unknown
    assert hcas["mlx5_2"][0].state == "ACTIVE" and hcas["mlx5_2"][0].rate_gbps is None


def test_ibstat_roce_ports() -> None:
    hcas = parse_ibstat((IB_TOOLS / "issue-l2fwd-nv-6-ibstat-cx6dx-roce-2ports.txt").read_text())
    assert {h: (p[0].state, p[0].rate_gbps, p[0].link_layer) for h, p in hcas.items()} == {
        "mlx5_0": ("ACTIVE", 100.0, "Ethernet"),
        "mlx5_1": ("ACTIVE", 100.0, "Ethernet"),
    }


def test_ibstat_skips_debug_lines_and_ibpanic() -> None:
    mlx4 = parse_ibstat((IB_TOOLS / "pr-rdma-core-847-ibstat-mlx4-dualport-with-ibwarn-debug-EXCERPT.txt").read_text())
    port1, port2 = mlx4["mlx4_0"]
    assert (port1.state, port1.phys_state, port1.rate_gbps) == ("DOWN", "Disabled", 10.0)
    assert (port2.state, port2.phys_state, port2.rate_gbps) == ("ACTIVE", "LinkUp", 56.0)
    gpud = parse_ibstat((IB_TOOLS / "pr-gpud-752-ibstat-partial-with-ibpanic-error.txt").read_text())
    assert list(gpud) == ["mlx5_7"]  # the ibpanic line about mlx5_8 adds no HCA
    assert gpud["mlx5_7"][0].rate_gbps == 200.0
    single = parse_ibstat((IB_TOOLS / "issue-nccl-1591-ibstat-h100-cx7-ndr-single-ca-EXCERPT.txt").read_text())
    assert single["mlx5_5"][0].link_layer == "InfiniBand"


def test_ibv_devinfo_real_outputs() -> None:
    azure = parse_ibv_devinfo(
        (IB_TOOLS / "issue-azhpc-images-44-ibv_devinfo-azure-vf-eth-and-ib-EXCERPT.txt").read_text()
    )
    assert azure["rdmaP23800p0s2"] == [Port("rdmaP23800p0s2", 1, "ACTIVE", "", None, "", "Ethernet")]
    assert azure["ibP57247p0s2"] == []  # cut before its port section
    mixed = parse_ibv_devinfo(
        (IB_TOOLS / "issue-deepep-60-ibv_devinfo-mixed-cx6dx-eth-down-cx7-EXCERPT.txt").read_text()
    )
    assert (mixed["mlx5_12"][0].state, mixed["mlx5_12"][0].link_layer) == ("DOWN", "Ethernet")
    flat = parse_ibv_devinfo((IB_TOOLS / "issue-ompi-9087-ibv_devinfo-v-flattened-no-indent-EXCERPT.txt").read_text())
    assert flat == {"mlx5_0": []}


def test_sysfs_formats() -> None:
    # domain-facts §F: "%d: %s", "%u: %s", "%d%s Gb/sec (%dX%s)"; the nccl#451 sample values
    assert parse_state("4: ACTIVE\n") == "ACTIVE" and parse_state("2: INIT") == "INIT"
    assert parse_state("Active") == "ACTIVE" and parse_state("PORT_DOWN (1)") == "DOWN"
    assert parse_state("Initializing") == "INIT"
    assert parse_phys_state("5: LinkUp") == "LinkUp" and parse_phys_state("LINK_UP (5)") == "LinkUp"
    assert parse_phys_state("3: Disabled") == "Disabled"
    assert parse_rate("25 Gb/sec (1X EDR)") == 25.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("400") == 400.0 and parse_rate("garbage") is None
    node = parse_sysfs(split_sections(gather_stdout())["sysfs"])
    assert node.hcas == [f"mlx5_{i}" for i in range(8)]
    assert node.uverbs["uverbs3"] == "mlx5_3" and node.firmware["mlx5_0"] == "28.41.1000"
    assert node.ports["mlx5_7"] == [Port("mlx5_7", 1, "ACTIVE", "LinkUp", 400.0, "400 Gb/sec (4X NDR)", "InfiniBand")]


def test_probe_output_sections() -> None:
    out = "=== NGC banner ===\n## devices\n/dev/infiniband/uverbs0\n## hcas\nmlx5_0\n## libraries\n## memlock\n65536\n"
    out += "## environment\nNCCL_IB_HCA==mlx5_0\n## nccl.conf\nNCCL_DEBUG=WARN\n"
    probe = parse_probe(out)
    assert probe.devices == ("/dev/infiniband/uverbs0",) and probe.hcas == ("mlx5_0",)
    assert probe.memlock_bytes == 65536 * 1024  # ulimit -l counts KiB
    assert probe.environment == (("NCCL_IB_HCA", "=mlx5_0"),)
    assert probe.nccl_conf == "NCCL_DEBUG=WARN"
    assert "## devices" in PROBE_SCRIPT and "ulimit -l" in PROBE_SCRIPT


def test_limits_and_slurm_conf() -> None:
    # the kernel's /proc/<pid>/limits format, read from this machine
    soft_hard = parse_limits(Path("/proc/self/limits").read_text())
    assert soft_hard is not None and soft_hard[0] <= soft_hard[1]
    assert parse_limits((HEALTHY / "files/proc/2214/limits").read_text()) == (float("inf"), float("inf"))
    conf = parse_slurm_conf((HEALTHY / "files/etc/slurm/slurm.conf").read_text())
    assert conf["propagateresourcelimitsexcept"] == ("MEMLOCK", 35)
    assert "propagateresourcelimits" not in conf  # the commented-out line does not count
    assert memlock_propagated(conf) == (False, "line 35: PropagateResourceLimitsExcept=MEMLOCK")
    assert memlock_propagated({})[0] is True  # Slurm's default: every limit propagates
    assert memlock_propagated(parse_slurm_conf("PropagateResourceLimits=NONE"))[0] is False
    assert memlock_propagated(parse_slurm_conf("propagateresourcelimits=ALL"))[0] is True
    assert memlock_propagated(parse_slurm_conf("PropagateResourceLimitsExcept=CORE,STACK"))[0] is True
    assert memlock_propagated(parse_slurm_conf("PropagateResourceLimits=CORE,MEMLOCK"))[0] is True


@given(st.text(max_size=500))
@settings(max_examples=300, deadline=None)
def test_parsers_take_garbage(text: str) -> None:
    parse_ibstat(text)
    parse_ibv_devinfo(text)
    parse_sysfs(text.splitlines())
    parse_probe(text)
    parse_limits(text)
    parse_slurm_conf(text)
    parse_nccl_conf(text)


# -- NCCL_IB_HCA syntax ------------------------------------------------------------------------


def test_nccl_ib_hca_documented_examples() -> None:
    # domain-facts §C.3 (NCCL env docs): prefix by default, `=` exact, `^` exclude, `:port`
    prefix = parse_nccl_if_list("mlx5")
    assert prefix.selects("mlx5_0") and prefix.selects("mlx5_11", 1) and not prefix.selects("mlx4_0")
    exact = parse_nccl_if_list("=mlx5_0:1,mlx5_1:1")
    assert exact.exact and not exact.exclude
    assert exact.selects("mlx5_0", 1) and not exact.selects("mlx5_0", 2) and not exact.selects("mlx5_10", 1)
    excl = parse_nccl_if_list("^=mlx5_1,mlx5_4")
    assert excl.exclude and excl.exact and not excl.selects("mlx5_1", 1) and excl.selects("mlx5_10", 1)
    # "using mlx5_1 without a preceding = will select mlx5_1 as well as mlx5_10 to mlx5_19"
    assert all(parse_nccl_if_list("mlx5_1").selects(f"mlx5_1{i}") for i in range(10))


def test_nccl_ib_hca_surprises_are_findings() -> None:
    assert parse_nccl_if_list("=^mlx5_0").problems  # `=^` is not `^=`
    assert parse_nccl_if_list("=^mlx5_0").entries[0].name == "^mlx5_0"
    assert "read as 0" in parse_nccl_if_list("mlx5_0:abc").problems[0]
    assert parse_nccl_if_list("mlx5_0:abc").entries[0].port == 0
    assert "blanks" in parse_nccl_if_list("mlx5_0, mlx5_1").problems[0]
    assert "leading number" in parse_nccl_if_list("mlx5_0:1x").problems[0]
    many = parse_nccl_if_list(",".join(f"mlx5_{i}" for i in range(40)))
    assert len(many.entries) == 32 and "more than 32" in many.problems[0]
    assert not parse_nccl_if_list("^").selects("mlx5_0", 1)  # `^` alone excludes everything
    assert parse_nccl_if_list("").selects("mlx5_0", 1)  # empty selects everything


NAMES = st.text(alphabet="abcdmlx_0123456789", min_size=1, max_size=12)
ENTRIES = st.lists(st.tuples(NAMES, st.one_of(st.none(), st.integers(1, 4))), min_size=1, max_size=8)


@given(ENTRIES, st.booleans(), st.booleans())
@settings(max_examples=300, deadline=None)
def test_nccl_if_list_round_trip(entries: list[tuple[str, int | None]], exclude: bool, exact: bool) -> None:
    text = (
        ("^" if exclude else "") + ("=" if exact else "") + ",".join(n if p is None else f"{n}:{p}" for n, p in entries)
    )
    parsed = parse_nccl_if_list(text)
    assert (parsed.exclude, parsed.exact, parsed.problems) == (exclude, exact, ())
    assert [(e.name, e.port) for e in parsed.entries] == entries


@given(ENTRIES, st.booleans(), NAMES, st.integers(1, 4))
@settings(max_examples=300, deadline=None)
def test_nccl_if_list_semantics(entries: list[tuple[str, int | None]], exact: bool, device: str, port: int) -> None:
    body = ("=" if exact else "") + ",".join(n if p is None else f"{n}:{p}" for n, p in entries)
    include, exclude = parse_nccl_if_list(body), parse_nccl_if_list("^" + body)
    assert include.selects(device, port) != exclude.selects(device, port)  # `^` is the complement
    expected = any((device == n if exact else device.startswith(n)) and (p is None or p == port) for n, p in entries)
    assert include.selects(device, port) == expected
    if exact:  # an exact list never selects more than the same list read as prefixes
        assert not include.selects(device, port) or parse_nccl_if_list(body[1:]).selects(device, port)


@given(st.text(max_size=200), st.text(alphabet="mlx5_0123456789", max_size=10), st.integers(-1, 9))
@settings(max_examples=300, deadline=None)
def test_nccl_if_list_garbage_never_crashes(value: str, device: str, port: int) -> None:
    parsed = parse_nccl_if_list(value)
    parsed.selects(device, port if port >= 0 else None)
    assert all(isinstance(p, str) and p for p in parsed.problems)
    ports = {"mlx5_0": [Port("mlx5_0", 1, "ACTIVE")]}
    found = judge_nccl_settings({"NCCL_IB_HCA": Setting("NCCL_IB_HCA", value, "test")}, ports, lambda: ["eth0"])
    assert all(isinstance(f, str) for f in found.fails + found.warns)


def test_strtoll_and_nccl_conf() -> None:
    assert [strtoll(v) for v in ("1", "0", "0x10", "010", "true", "1abc", " 2", "")] == [1, 0, 16, 8, 0, 1, 2, None]
    conf = "# site settings\nNCCL_IB_HCA = mlx5_0\nNCCL_DEBUG=WARN\nnot a setting\n"
    assert parse_nccl_conf(conf) == [("NCCL_IB_HCA ", " mlx5_0", 2), ("NCCL_DEBUG", "WARN", 3)]


def eight_ndr() -> dict[str, list[Port]]:
    return {f"mlx5_{i}": [Port(f"mlx5_{i}", 1, "ACTIVE", "LinkUp", 400.0)] for i in range(8)}


def judge(env: dict[str, str], ports: dict[str, list[Port]] | None = None, **kw: bool) -> tuple[list[str], list[str]]:
    found = judge_nccl_settings(
        {k: Setting(k, v, "test") for k, v in env.items()}, ports or eight_ndr(), lambda: ["eno1", "ib0", "lo"], **kw
    )
    return found.fails, found.warns


def test_judge_nccl_settings() -> None:
    assert judge({}) == ([], [])
    fails, _ = judge({"NCCL_IB_HCA": "mlx5_9"})
    assert "selects none of this node's HCA ports (mlx5_0:1..mlx5_7:1)" in fails[0]
    assert judge({"NCCL_IB_HCA": "^mlx5"})[0]  # excludes everything
    assert judge({"NCCL_IB_HCA": "=mlx5_0,mlx5_1:1"}) == ([], [])
    fails, warns = judge({"NCCL_IB_HCA": "mlx5_0,mlx5_9"})
    assert not fails and "entry `mlx5_9` matches no HCA port" in warns[0]
    ports = {**eight_ndr(), **{f"mlx5_1{i}": [Port(f"mlx5_1{i}", 1, "ACTIVE")] for i in range(2)}}
    fails, warns = judge({"NCCL_IB_HCA": "mlx5_1"}, ports)
    assert not fails and "also selects mlx5_10, mlx5_11; write `=mlx5_1`" in warns[0]
    down = {"mlx5_0": [Port("mlx5_0", 1, "DOWN", "Disabled")], "mlx5_1": [Port("mlx5_1", 1, "ACTIVE")]}
    assert "not ACTIVE" in judge({"NCCL_IB_HCA": "=mlx5_0"}, down)[0][0]
    assert "TCP sockets" in judge({"NCCL_IB_DISABLE": "1"})[0][0]
    assert judge({"NCCL_IB_DISABLE": "1"}, allow_sockets=True)[0] == []
    assert "NOT disabled" in judge({"NCCL_IB_DISABLE": "true"})[1][0]
    assert "forces the TCP socket transport" in judge({"NCCL_NET": "socket"})[0][0]
    assert judge({"NCCL_NET": "IB"}) == ([], [])
    assert "matches none of this node's interfaces (eno1, ib0, lo)" in judge({"NCCL_SOCKET_IFNAME": "eth"})[0][0]
    assert judge({"NCCL_SOCKET_IFNAME": "^docker,lo"}) == ([], [])
    assert judge({"NCCL_SOCKET_IFNAME": "=ib0"}) == ([], [])
    assert "GPUDirect RDMA off" in judge({"NCCL_NET_GDR_LEVEL": "LOC"})[0][0]
    assert judge({"NCCL_NET_GDR_LEVEL": "loc"}, allow_no_gdr=True)[0] == []
    assert judge({"NCCL_NET_GDR_LEVEL": "PHB"}) == ([], [])
    assert "host memory" in judge({"NCCL_NET_GDR_READ": "0"})[1][0]


# -- the checks over the fixtures -------------------------------------------------------------


def test_fixtures_say_what_they_were_made_for() -> None:
    """Beyond the statuses of test_fixtures.py: the key words of each fail, and its remedy."""
    cases = {
        "port-down-half-rate": (
            "rdma.ports",
            [
                "mlx5_3 port 1 is DOWN (Disabled), expected ACTIVE (LinkUp)",
                "mlx5_5 port 1 runs at 200 Gb/sec (4X HDR)",
                "expected at least 400 Gb/sec",
            ],
        ),
        "nccl-ib-hca-typo": ("rdma.nccl_env", ["NCCL_IB_HCA=mlx5_9 (/etc/nccl.conf)", "mlx5_0:1..mlx5_7:1", "sockets"]),
    }
    for name, (check_id, words) in cases.items():
        proc = cli("run", "--replay", RDMA / name, "--format", "json")
        assert proc.returncode == 2, proc.stderr
        (host,) = json.loads(proc.stdout)["hosts"].values()
        result = next(c for c in host["checks"] if c["id"] == check_id)
        assert result["status"] == "fail"
        for word in words:
            assert word in result["summary"], (name, word, result["summary"])
        assert result["remedy"]


def test_healthy_and_roce_pass() -> None:
    results = run_checks(HEALTHY, {"rdma.devices": {"expected": 8}, "rdma.ports": {"min_rate": 400}})
    assert results["rdma.ports"].summary == "8 ports of mlx5_0..mlx5_7 ACTIVE, LinkUp at 400 Gb/sec, InfiniBand"
    roce = RDMA / "roce"
    assert one(roce, "rdma.ports", {"link_layer": "Ethernet", "min_rate": 100}).status.value == "ok"
    wrong = one(roce, "rdma.ports", {"link_layer": "InfiniBand"})
    assert wrong.status.value == "fail"
    assert wrong.summary.startswith("mlx5_0 port 1 link layer is Ethernet, expected InfiniBand")


def test_devices_names_count_modes_and_libraries(tmp_path: Path) -> None:
    check = one(HEALTHY, "rdma.devices", {"expected": 8, "names": ["mlx5_[0-7]", "mlx5_8"]})
    assert check.status.value == "fail" and "HCA mlx5_8 is missing" in check.summary
    assert one(HEALTHY, "rdma.devices", {"expected": 4, "names": ["mlx5_[0-3]"]}).status.value == "ok"
    fixture = variant(tmp_path)
    out = gather_stdout().replace("/dev/infiniband/uverbs2 666 root root", "/dev/infiniband/uverbs2 660 root rdma")
    out = out.replace("/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so\n", "")
    set_command(fixture, ["sh", "-c", yaml.safe_load((GATHER / "command.yaml").read_text())["argv"][2]], out)
    check = one(fixture, "rdma.devices", {"expected": 8})
    assert check.status.value == "fail"
    assert (
        "not read-write for others, so jobs cannot open them: /dev/infiniband/uverbs2 0660 root:rdma" in check.summary
    )
    assert "no mlx5 verbs provider (libmlx5-rdmav*.so) on the node" in check.summary
    check = one(fixture, "rdma.devices", {"expected": 8, "job_group": "rdma", "providers": ["mlx4"]})
    assert check.status.value == "ok", check.summary


def test_ports_fall_back_to_ibstat(tmp_path: Path) -> None:
    fixture = variant(tmp_path, RDMA / "roce")
    script = yaml.safe_load((next((fixture / "commands").glob("sh_-c*")) / "command.yaml").read_text())["argv"][2]
    set_command(fixture, ["sh", "-c", script], "## sysfs\n## devices\n## libraries\n")
    set_command(fixture, ["ibstat"], (IB_TOOLS / "issue-l2fwd-nv-6-ibstat-cx6dx-roce-2ports.txt").read_text())
    check = one(fixture, "rdma.ports", {"link_layer": "Ethernet", "min_rate": 100})
    assert check.status.value == "ok", check.summary
    assert check.data["source"] == "ibstat"
    set_command(fixture, ["ibstat"], "", exit_code=127)
    set_command(
        fixture,
        ["ibv_devinfo"],
        (IB_TOOLS / "issue-deepep-60-ibv_devinfo-mixed-cx6dx-eth-down-cx7-EXCERPT.txt").read_text(),
    )
    check = one(fixture, "rdma.ports", {"link_layer": "Ethernet"})
    assert check.status.value == "fail" and "mlx5_12 port 1 is DOWN" in check.summary


def test_ports_init_means_no_subnet_manager(tmp_path: Path) -> None:
    fixture = variant(tmp_path)
    argv = yaml.safe_load((GATHER / "command.yaml").read_text())["argv"]
    set_command(
        fixture, argv, gather_stdout().replace("mlx5_6/ports/1/state:4: ACTIVE", "mlx5_6/ports/1/state:2: INIT")
    )
    check = one(fixture, "rdma.ports")
    assert (
        check.summary == "mlx5_6 port 1 is INIT (LinkUp), expected ACTIVE (LinkUp): no subnet manager has configured it"
    )


def test_memlock_verdicts(tmp_path: Path) -> None:
    limits = (HEALTHY / "files/proc/2214/limits").read_text()
    small = re.sub(r"(?m)^Max locked memory .*$", f"{'Max locked memory':<26}{65536:<21}{65536:<21}bytes", limits)
    assert small != limits
    fixture = variant(tmp_path, files={"/proc/2214/limits": small})
    check = one(fixture, "rdma.memlock")
    assert check.status.value == "fail"
    assert check.summary.startswith("slurmd's locked-memory limit is 64 KiB, expected unlimited")
    assert "LimitMEMLOCK=infinity" in check.remedy
    assert one(fixture, "rdma.memlock", {"minimum": "32KiB"}).status.value == "ok"
    conf = (HEALTHY / "files/etc/slurm/slurm.conf").read_text().replace("\nPropagateResourceLimitsExcept=MEMLOCK", "")
    propagated = variant(tmp_path / "p", files={"/etc/slurm/slurm.conf": conf})
    check = one(propagated, "rdma.memlock")
    assert check.status.value == "warn" and "all limits propagate" in check.summary
    no_conf = variant(tmp_path / "n", files={"/etc/slurm/slurm.conf": None})
    for path in ("/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf"):
        manifest = yaml.safe_load((no_conf / "fixture.yaml").read_text())
        manifest["absent"].append(path)
        (no_conf / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    assert one(no_conf, "rdma.memlock").status.value == "warn"
    no_slurmd = variant(tmp_path / "s")
    set_command(no_slurmd, ["pgrep", "-o", "-x", "slurmd"], "", exit_code=1)
    check = one(no_slurmd, "rdma.memlock")
    assert (check.status.value, check.summary) == (
        "error",
        "slurmd is not running, so the locked-memory limit jobs inherit cannot be read",
    )


def test_nccl_env_sources(tmp_path: Path) -> None:
    check = one(HEALTHY, "rdma.nccl_env", {"env": ["NCCL_IB_DISABLE=1"]})
    assert check.status.value == "fail"
    assert "NCCL_IB_DISABLE=1 (job environment) turns the IB/RoCE transport off" in check.summary
    assert one(HEALTHY, "rdma.nccl_env", {"env": ["NCCL_IB_DISABLE=1"], "allow_sockets": True}).status.value == "warn"
    # the job environment wins over /etc/nccl.conf, as NCCL's setenv(..., 0) does
    typo = RDMA / "nccl-ib-hca-typo"
    check = one(typo, "rdma.nccl_env", {"env": ["NCCL_IB_HCA==mlx5_0,mlx5_1"]})
    assert (check.status.value, check.summary) == (
        "ok",
        "1 NCCL setting checked; none turns RDMA off or names a missing HCA or interface",
    )
    assert check.data["bare metal"] == {"NCCL_IB_HCA": {"value": "=mlx5_0,mlx5_1", "source": "job environment"}}
    assert one(HEALTHY, "rdma.nccl_env").summary == "no NCCL_* setting found: NCCL picks the IB HCAs itself"
    spaced = variant(tmp_path, typo, files={"/etc/nccl.conf": "NCCL_IB_HCA = mlx5_9\n"})
    check = one(spaced, "rdma.nccl_env")
    assert check.status.value == "warn" and "/etc/nccl.conf:1: `NCCL_IB_HCA =` has blanks" in check.summary
    # the image's own environment is judged in its own context
    image = variant(tmp_path / "i")
    probe_dir = next((image / "commands").glob("apptainer_exec*"))
    out = (probe_dir / "stdout").read_text().replace("## environment\n", "## environment\nNCCL_SOCKET_IFNAME=eth0\n")
    (probe_dir / "stdout").write_text(out)
    set_command(image, ["ls", "-1", "/sys/class/net"], "eno1\nib0\nlo\n")
    image_command = ["apptainer", "exec", "--nv", "/shared/images/pytorch-24.05-py3.sif"]
    check = one(image, "rdma.nccl_env", {"image_command": image_command})
    assert check.status.value == "fail"
    assert check.summary.startswith("in the image: NCCL_SOCKET_IFNAME=eth0 (image environment) matches none")
    check = one(HEALTHY, "rdma.nccl_env", {"env": ["NOEQUALS"]})
    assert (check.status.value, check.summary) == ("error", "rdma.nccl_env: env entry 'NOEQUALS' is not NAME=VALUE")


def test_record_then_replay_captures_the_image_probe(tmp_path: Path) -> None:
    """The in-image probe goes through the host API: `record` captures it, replay gives the same verdict.

    `env` stands in for the container runtime (it runs `sh -c PROBE` on this machine), as
    apptainer is not installed here.
    """
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"checks": {"rdma.nccl_env": {"image_command": ["env", "NCCL_IB_DISABLE=1"]}}}))
    out = tmp_path / "rec"
    proc = cli("record", "--local", "--profile", profile, "--out", out, "--note", "probe through env")
    assert "Traceback" not in proc.stderr, proc.stderr
    recorded = [yaml.safe_load(p.read_text())["argv"] for p in out.glob("commands/*/command.yaml")]
    assert ["env", "NCCL_IB_DISABLE=1", "sh", "-c", PROBE_SCRIPT] in recorded
    replay = cli("run", "--replay", out, "--profile", profile, "--format", "json")
    (host,) = json.loads(replay.stdout)["hosts"].values()
    (check,) = host["checks"]
    assert check["status"] == "fail"
    assert "in the image: NCCL_IB_DISABLE=1 (image environment) turns the IB/RoCE transport off" in check["summary"]


def test_explain_has_the_remedy() -> None:
    from clustercheck import registry

    for check_id in ("rdma.devices", "rdma.ports", "rdma.memlock", "rdma.nccl_env"):
        spec = registry.lookup(check_id)
        assert spec is not None and all(part in spec.doc for part in ("Why:", "How:", "Fix:")), check_id
    proc = cli("explain", "rdma.nccl_env")
    assert proc.returncode == 0 and "NCCL_IB_HCA" in proc.stdout and "Fix:" in proc.stdout


def test_ports_names_select_hcas_and_ports(tmp_path: Path) -> None:
    broken = RDMA / "port-down-half-rate"
    assert (
        one(broken, "rdma.ports", {"names": ["mlx5_[0-2]", "mlx5_4", "mlx5_[67]"], "min_rate": 400}).status.value
        == "ok"
    )
    # a dual-port card with one port cabled (corpus: ConnectX-3, port 1 Down/Disabled, port 2 Active)
    fixture = variant(tmp_path, RDMA / "roce")
    script = yaml.safe_load((next((fixture / "commands").glob("sh_-c*")) / "command.yaml").read_text())["argv"][2]
    set_command(fixture, ["sh", "-c", script], "## sysfs\n## devices\n## libraries\n")
    mlx4 = (IB_TOOLS / "pr-rdma-core-847-ibstat-mlx4-dualport-with-ibwarn-debug-EXCERPT.txt").read_text()
    set_command(fixture, ["ibstat"], mlx4, exit_code=0)
    assert one(fixture, "rdma.ports", {"names": ["mlx4_0:2"], "link_layer": ""}).status.value == "ok"
    check = one(fixture, "rdma.ports", {"names": ["mlx4_*"], "link_layer": ""})
    assert check.summary == "mlx4_0 port 1 is DOWN (Disabled), expected ACTIVE (LinkUp)"


def test_bundled_h100_ib_profile() -> None:
    from clustercheck import profile

    prof = profile.load("h100-ib")
    ids = [c.id for c in prof.checks]
    assert {"rdma.devices", "rdma.ports", "rdma.memlock", "rdma.nccl_env"} <= set(ids)
    assert {"container.apptainer_rdma", "container.enroot_rdma"} <= set(ids)
    ports = next(c for c in prof.checks if c.id == "rdma.ports")
    assert ports.params["min_rate"] == 400


# -- drift facts and actions ------------------------------------------------------------------------


def test_rdma_stack_version_readers() -> None:
    from clustercheck.checks.rdma import parse_ofed_info, rdma_core_version

    # `ofed_info -s` as MLNX_OFED prints it (the trailing colon is ofed_info's own)
    assert parse_ofed_info("MLNX_OFED_LINUX-23.10-5.1.4.0:\n") == "MLNX_OFED_LINUX-23.10-5.1.4.0"
    assert parse_ofed_info("\n") is None
    # what `readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1` printed on Debian 12 (rdma-core 44.0)
    assert rdma_core_version("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0\n") == "44.0"
    assert rdma_core_version("/usr/lib64/libibverbs.so.1.1.17.2") == "17.2"  # rdma-core 17's 1.1.<version> naming
    assert rdma_core_version("/usr/lib/x86_64-linux-gnu/libibverbs.so.1") is None  # not resolved: unknown


def test_devices_gives_firmware_and_stack_facts(tmp_path: Path) -> None:
    """The healthy node with the two stack commands recorded: no ofed_info (exit 127: not installed),
    and the library its listing names resolving the way this Debian rdma-core install resolves it."""
    fixture = variant(tmp_path)
    set_command(fixture, ["ofed_info", "-s"], exit_code=127)
    lib = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
    set_command(fixture, ["readlink", "-f", lib], stdout=lib + ".14.44.0\n")
    c = one(fixture, "rdma.devices")
    assert c.status.value == "ok"
    assert c.data["facts"] == {"HCA firmware": "28.41.1000", "RDMA stack": "rdma-core 44.0"}
    assert f"no ofed_info; {lib} -> {lib}.14.44.0: rdma-core 44.0" in c.evidence
    set_command(fixture, ["ofed_info", "-s"], stdout="MLNX_OFED_LINUX-23.10-5.1.4.0:\n")
    assert one(fixture, "rdma.devices").data["facts"]["RDMA stack"] == "MLNX_OFED_LINUX-23.10-5.1.4.0"


def test_devices_stack_fact_on_this_machine() -> None:
    """The real commands here: no HCA (the check fails), the stack fact read all the same."""
    lib = next(
        (p for p in ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib64/libibverbs.so.1") if os.path.exists(p)),
        None,
    )
    if lib is None or shutil.which("ofed_info") or Path("/sys/class/infiniband").exists():
        pytest.skip("needs a machine with rdma-core's libibverbs, without MLNX_OFED and HCAs")
    from clustercheck.checks.rdma import rdma_core_version

    version = rdma_core_version(os.path.realpath(lib))
    profile = Path(tempfile.mkdtemp()) / "p.yaml"
    profile.write_text("checks:\n  rdma.devices: {}\n")
    proc = cli("run", "--local", "--profile", profile, "--format", "json")
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (c,) = host["checks"]
    assert (c["status"], c["action"]) == ("fail", "FIX_CONFIG")
    assert c["data"]["facts"] == ({"RDMA stack": f"rdma-core {version}"} if version else {})


def test_rdma_checks_name_their_actions(tmp_path: Path) -> None:
    down = one(RDMA / "port-down-half-rate", "rdma.ports", {"min_rate": 400})
    assert (down.status.value, down.action) == ("fail", "CHECK_CABLE")
    layer = one(RDMA / "roce", "rdma.ports", {"link_layer": "InfiniBand"})
    assert (layer.status.value, layer.action) == ("fail", "FIX_CONFIG")  # a setting (LINK_TYPE), not a cable

    from clustercheck.registry import lookup

    for check_id, action in (
        ("rdma.devices", "FIX_CONFIG"),
        ("rdma.memlock", "FIX_CONFIG"),
        ("rdma.nccl_env", "FIX_CONFIG"),
        ("rdma.ports", "CHECK_CABLE"),
    ):
        spec = lookup(check_id)
        assert spec is not None and spec.action == action and f"Action: {action}" in spec.doc, check_id
