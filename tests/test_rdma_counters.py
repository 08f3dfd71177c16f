"""rdma.counters: the counter and link-line parsers on the real corpus (property-tested against
garbage), and the verdicts through the CLI over fixtures/rdma-counters-* (the real gather run over
the real H100 sysfs tree of the corpus, fixtures/rdma-counters-derive.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from clustercheck.checks.rdma.counters import RULES, parse_thresholds
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli

from clustercheck.facts.infiniband import (
    count_flaps,
    counter_delta,
    is_saturated,
    parse_counters,
    parse_link_events,
    parse_port_attrs,
)

TREE = CORPUS / "ib_sysfs" / "gpud-sys-class-infiniband-h100.0"
KERNEL = CORPUS / "kernel_log"
BOOT_LOG = (KERNEL / "gpud-dmesg-decode-iso-boot-mlx5-nvswitch-h100.log.txt").read_text()
SIX_FLAPS = (KERNEL / "azurehpc-syslog-ib6-lost-gained-carrier-6flaps.txt").read_text()
NO_FLAP = (KERNEL / "azurehpc-syslog-no-flap.txt").read_text()
PREVIOUS = FIXTURES / "rdma-counters-previous.profile.yaml"


def grep_lines(tree: Path = TREE) -> list[str]:
    """What `grep -H . /sys/class/infiniband/*/ports/*/counters/* ...` prints over the tree: PATH:VALUE."""
    lines = []
    for path in sorted(tree.rglob("*")):
        if path.is_file() and path.parent.name in ("counters", "hw_counters"):
            rel = path.relative_to(tree)
            for value in path.read_text().splitlines():
                if value:
                    lines.append(f"/sys/class/infiniband/{rel}:{value}")
    return lines


# -- parsers on the real tree and logs ------------------------------------------------------------


def test_counters_of_the_real_h100_tree() -> None:
    ports = parse_counters(grep_lines())
    assert [f"{h}:{p}" for h, p in ports] == [
        "mlx5_0:1", "mlx5_1:1", "mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_7:1", "mlx5_8:1", "mlx5_9:1", "mlx5_bond_0:1"
    ]  # fmt: skip
    mlx5_1 = ports[("mlx5_1", 1)]
    assert mlx5_1.counters["link_downed"] == 255
    assert mlx5_1.counters["port_rcv_errors"] == 14 and mlx5_1.counters["port_rcv_switch_relay_errors"] == 2
    assert mlx5_1.hw_counters["rx_write_requests"] == 3809045607
    assert mlx5_1.value("out_of_sequence") == 0  # a hw counter, found through value()
    # the corpus row's conclusion: link_downed 255 is the 8-bit counter saturated, 15 the 4-bit one
    assert is_saturated("link_downed", 255) and is_saturated("excessive_buffer_overrun_errors", 15)
    assert not is_saturated("port_rcv_errors", 14) and not is_saturated("symbol_error", 255)
    assert not is_saturated("out_of_sequence", 2**32 - 1, hw=True)  # hw counters wrap, they do not stop


def test_port_attributes_and_link_layers() -> None:
    lines = [
        f"/sys/class/infiniband/{d.name}/ports/1/{attr}:{(d / 'ports/1' / attr).read_text().strip()}"
        for attr in ("link_layer", "state")
        for d in sorted(TREE.iterdir())
    ]
    attrs = parse_port_attrs(lines)
    assert attrs[("mlx5_0", 1)] == {"link_layer": "InfiniBand", "state": "4: ACTIVE"}
    assert attrs[("mlx5_bond_0", 1)]["link_layer"] == "Ethernet"


def test_a_counter_that_went_backwards_is_no_burst() -> None:
    assert counter_delta("port_rcv_errors", 14, 0).increase is None  # cleared with perfquery -R
    assert counter_delta("out_of_sequence", 2**32 - 10, 5, hw=True).backwards  # a 32-bit counter that wrapped
    d = counter_delta("symbol_error", 0, 40)
    assert (d.increase, d.saturated) == (40, False)
    assert counter_delta("link_downed", 250, 255).saturated


def test_link_flaps_of_the_real_logs() -> None:
    (ib6,) = count_flaps(parse_link_events(SIX_FLAPS))
    assert (ib6.interface, ib6.downs, ib6.up_now, ib6.lines) == ("ib6", 6, True, (3, 4, 5, 6, 7, 8))
    assert parse_link_events(NO_FLAP) == []
    events = parse_link_events(BOOT_LOG)
    # the boot log's four mlx5 netdev lines, not its eight "ataN: SATA link down" lines
    assert [(e.interface, e.pci, e.up) for e in events] == [
        ("enp157s0f1np1", "0000:9d:00.1", False),
        ("enp157s0f0np0", "0000:9d:00.0", False),
        ("enp27s0f1np1", "0000:1b:00.1", False),
        ("bootnet", "0000:1b:00.0", True),
    ]
    # a port's first state at bring-up is no flap (three ports without link, the boot NIC up)
    assert all(f.downs == 0 for f in count_flaps(events))
    # the boot NIC's own line copied twice more, as down then up again: one flap of bootnet
    up = next(line for line in BOOT_LOG.splitlines() if "bootnet: Link up" in line)
    flapped = BOOT_LOG + "\n" + up.replace("Link up", "Link down") + "\n" + up + "\n"
    bootnet = next(f for f in count_flaps(parse_link_events(flapped)) if f.interface == "bootnet")
    assert (bootnet.downs, bootnet.up_now) == (1, True)
    # judged up to the previous run: the carrier lines already counted are left out
    assert count_flaps(parse_link_events(SIX_FLAPS), skip={"ib6": 4})[0].downs == 2
    assert count_flaps(parse_link_events(SIX_FLAPS), skip={"ib0": 4})[0].downs == 6


def test_thresholds() -> None:
    rules = parse_thresholds(("symbol_error=100", "out_of_buffer=5"))
    assert rules["symbol_error"].limit == 100 and rules["symbol_error"].status == "fail"
    assert rules["out_of_buffer"].status == "warn"  # a counter of the driver's the defaults do not judge
    assert set(RULES) <= set(rules)
    for bad in ("symbol_error", "symbol_error=-1", "x=1=2", "link_downed=3"):
        with pytest.raises(ValueError):
            parse_thresholds((bad,))


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("/sys/class/infiniband/mlx5_0ports1countershw_:0123456789 \n\t[].-"), max_size=600)
)
def test_parsers_take_garbage(text: str) -> None:
    lines = text.splitlines()
    for port in parse_counters(lines).values():
        assert all(v >= 0 for v in (*port.counters.values(), *port.hw_counters.values()))
    parse_port_attrs(lines)
    events = parse_link_events(text)
    assert all(1 <= e.line <= len(lines) for e in events)
    assert all(f.downs == len(f.lines) for f in count_flaps(events))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(SIX_FLAPS.splitlines() + BOOT_LOG.splitlines()[2295:2305] + ["", "\x00", "Link "]), max_size=40
    )
)
def test_flaps_never_exceed_the_down_lines(lines: list[str]) -> None:
    events = parse_link_events("\n".join(lines))
    downs = sum(1 for e in events if not e.up)
    assert sum(f.downs for f in count_flaps(events)) <= downs


# -- verdicts through the CLI ----------------------------------------------------------------------


def replay(fixture: Path, *args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("run", "--replay", fixture, "--format", "json", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    (host,) = report["hosts"].values()
    (check,) = [c for c in host["checks"] if c["id"] == "rdma.counters"]
    return proc.returncode, check


def test_the_real_tree_warns_of_its_saturated_counters() -> None:
    code, c = replay(FIXTURES / "rdma-counters-window-real")
    assert (code, c["status"], c["action"]) == (1, "warn", "INVESTIGATE")
    assert "link_downed 255 on mlx5_1 port 1" in c["summary"]
    assert "excessive_buffer_overrun_errors 15 on mlx5_0 port 1..mlx5_bond_0 port 1 (9 ports)" in c["summary"]


def test_a_healthy_window_is_ok() -> None:
    code, c = replay(FIXTURES / "rdma-counters-window-healthy")
    assert (code, c["status"]) == (0, "ok")
    assert c["summary"] == "9 ports: no error counter above its threshold over a 5 s window, no link flap"
    assert c["data"]["window"] == "over a 5 s window"


def test_an_error_burst_and_flaps_fail_naming_the_ports() -> None:
    code, c = replay(FIXTURES / "rdma-counters-window-burst")
    assert (code, c["status"], c["action"]) == (2, "fail", "CHECK_CABLE")
    summary = c["summary"]
    assert "mlx5_4 port 1 symbol_error +212 over a 5 s window (limit 10)" in summary
    assert "mlx5_5 port 1 went down 2 times over a 5 s window (link_downed 0 -> 2)" in summary
    assert "ib6 lost its link 6 times (/var/log/syslog lines 3, 4, 5, 6, 7, 8, up again)" in summary
    assert "mlx5_6 port 1 out_of_sequence +5120" in summary
    assert "link_error_recovery" not in summary  # +3 is under its limit of 10
    assert c["data"]["ports"][2] == {
        "hca": "mlx5_4",
        "port": 1,
        "increases": {"link_error_recovery": 3, "symbol_error": 212},
    }


def test_counters_hidden_in_a_container_are_an_error() -> None:
    code, c = replay(FIXTURES / "rdma-counters-container")
    assert (code, c["status"]) == (3, "error")
    assert c["summary"].startswith(
        "cannot tell: no error counter readable under /sys/class/infiniband/*/ports/*/counters/"
    )


def test_run_keeps_no_reading_so_it_skips_saying_why() -> None:
    code, c = replay(FIXTURES / "rdma-counters-before")
    assert (code, c["status"]) == (0, "skip")
    assert "`clustercheck run` keeps no reading between runs (set sample_s to judge a window)" in c["summary"]
    assert "marker" not in c["data"]


def prolog(fixture: Path, state: Path) -> dict[str, Any]:
    args: list[str | Path] = [
        "prolog",
        "--replay",
        fixture,
        "--profile",
        PREVIOUS,
        "--state-file",
        state / "s.json",
        "--syslog-socket",
        "",
    ]
    proc = cli(*args)
    assert proc.returncode in (0, 2), proc.stderr
    result: dict[str, Any] = json.loads((state / "s.json").read_text())["checks"][0]
    return result


def test_since_the_previous_prolog_judges_the_increase_and_rebases_a_cleared_counter(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = prolog(FIXTURES / "rdma-counters-before", state)
    assert first["status"] == "skip" and "no earlier reading on this boot" in first["summary"]
    marker = json.loads((state / "rdma.counters.marker.json").read_text())
    assert marker["name"] == "rdma.counters" and marker["boot_id"] == "3f0c9a51-7d2e-4b8a-9c61-2e5d8f04b7a3"
    assert marker["counters"]["mlx5_8:1"]["port_rcv_errors"] == 14
    later = prolog(FIXTURES / "rdma-counters-after", state)
    assert later["status"] == "fail"
    assert later["summary"] == (
        "mlx5_0 port 1 symbol_error +40 since the previous run (limit 10): symbol errors (bit errors on the wire: "
        "cable, transceiver, port); 1 counter went backwards (cleared, or a 32-bit counter wrapped): taken as the "
        "new base"
    )
    again = prolog(FIXTURES / "rdma-counters-after", state)  # nothing moved since
    assert again == {
        "id": "rdma.counters",
        "status": "ok",
        "summary": "9 ports: no error counter above its threshold since the previous run, no link flap",
    }
    # a new boot: the earlier reading is of another boot, so nothing is compared
    other = tmp_path / "other-boot"
    shutil.copytree(FIXTURES / "rdma-counters-after", other)
    (other / "files/proc/sys/kernel/random/boot_id").write_text("00000000-7d2e-4b8a-9c61-2e5d8f04b7a3\n")
    rebooted = prolog(other, state)
    assert rebooted["status"] == "skip" and "no earlier reading on this boot" in rebooted["summary"]


def test_bad_thresholds_are_refused_when_the_profile_loads(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  rdma.counters: {thresholds: [symbol_error=lots], max_flaps: -1}\n")
    proc = cli("run", "--replay", FIXTURES / "rdma-counters-window-healthy", "--profile", profile)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert "symbol_error=lots" in proc.stderr and "max_flaps" in proc.stderr
    assert f"{profile}:2" in proc.stderr


@pytest.mark.parametrize("value", [".nan", ".inf", "true", "'5; reboot'"])
def test_a_window_that_is_no_number_is_refused_when_the_profile_loads(tmp_path: Path, value: str) -> None:
    """sample_s is filled into the gather script (`sleep N`): only a number from 0 to 300 gets there
    (NaN passed the range test before, `true` read as 1)."""
    profile = tmp_path / "p.yaml"
    profile.write_text(f"checks:\n  rdma.counters: {{sample_s: {value}}}\n")
    proc = cli("run", "--replay", FIXTURES / "rdma-counters-window-healthy", "--profile", profile)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert "sample_s" in proc.stderr and f"{profile}:2" in proc.stderr


def test_a_window_longer_than_the_budget_cannot_tell(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  rdma.counters: {sample_s: 5, timeout: 3}\n")
    code, c = replay(FIXTURES / "rdma-counters-window-healthy", "--profile", profile)
    assert (code, c["status"]) == (3, "error")
    assert "does not fit the check's budget" in c["summary"]


def test_a_profile_with_other_thresholds_judges_by_them(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "checks:\n  rdma.counters: {sample_s: 5, timeout: 20, max_flaps: 6, log_files: [/var/log/syslog], "
        "thresholds: [symbol_error=500, out_of_sequence=10000]}\n"
    )
    fixture = tmp_path / "burst"
    shutil.copytree(FIXTURES / "rdma-counters-window-burst", fixture)
    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    assert manifest["expect"] == {"rdma.counters": "fail"}
    code, c = replay(fixture, "--profile", profile)
    # 212 symbol errors and 5120 out-of-sequence are within these limits, 6 carrier losses and mlx5_5's two
    # link downs within max_flaps
    assert (code, c["status"]) == (0, "ok"), c["summary"]


@pytest.mark.skipif(Path("/sys/class/infiniband").exists(), reason="this machine has RDMA devices")
def test_a_node_without_hcas_skips_on_this_machine(tmp_path: Path) -> None:
    """This machine (no /sys/class/infiniband, no ib_core): nothing to judge, said so, and the gather is not
    started (the bundled prolog runs the check on every node)."""
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  rdma.counters: {sample_s: 0.2}\n")
    proc = cli("run", "--local", "--profile", profile, "--format", "json")
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (c,) = host["checks"]
    assert (proc.returncode, c["status"]) == (0, "skip")
    assert (
        c["summary"] == "no RDMA stack on this node (no ib_core module, no /sys/class/infiniband): no counters to judge"
    )
    assert not any("sh -c" in line for line in c["evidence"])


def test_a_port_with_only_hw_counters_is_judged_by_them(tmp_path: Path) -> None:
    """The burst recording with mlx5_6's counters/ lines taken out of both readings, as a RoCE driver without
    the IB PMA counters shows it: its hw_counters still carry the out_of_sequence burst."""
    fixture = tmp_path / "hw-only"
    shutil.copytree(FIXTURES / "rdma-counters-window-burst", fixture)
    (gather,) = (fixture / "commands").glob("sh_-c_echo_ports*")
    lines = (gather / "stdout").read_text().splitlines(keepends=True)
    kept = [line for line in lines if "/mlx5_6/ports/1/counters/" not in line]
    assert len(kept) < len(lines)
    (gather / "stdout").write_text("".join(kept))
    code, c = replay(fixture, "--profile", FIXTURES / "rdma-counters-window.profile.yaml")
    assert (code, c["status"]) == (2, "fail") and "mlx5_6 port 1 out_of_sequence +5120" in c["summary"]
    assert "no counters readable" not in json.dumps(c)


def test_carrier_losses_in_a_log_file_are_judged_once(tmp_path: Path) -> None:
    """rdma-counters-before with azurehpc's real 6-flap syslog as /var/log/syslog, replayed by three prologs."""
    node = tmp_path / "node"
    shutil.copytree(FIXTURES / "rdma-counters-before", node)
    (node / "files/var/log").mkdir(parents=True)
    (node / "files/var/log/syslog").write_text(SIX_FLAPS)
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  rdma.counters: {log_files: [/var/log/syslog]}\n")
    state = tmp_path / "state"

    def once() -> dict[str, Any]:
        args: list[str | Path] = ["prolog", "--replay", node, "--profile", profile, "--state-file", state / "s.json"]
        proc = cli(*args, "--syslog-socket", "")
        assert proc.returncode in (0, 2), proc.stderr
        result: dict[str, Any] = json.loads((state / "s.json").read_text())["checks"][0]
        return result

    first = once()
    assert first["status"] == "fail" and "ib6 lost its link 6 times" in first["summary"]
    assert json.loads((state / "rdma.counters.marker.json").read_text())["logs"]["/var/log/syslog"]["downs"] == {
        "ib6": 6
    }
    assert once()["status"] == "ok"  # the same six losses, judged the first time
    # one more loss, a copy of the file's own line: only that one counts
    lost = next(line for line in SIX_FLAPS.splitlines() if "lost carrier" in line)
    (node / "files/var/log/syslog").write_text(SIX_FLAPS + "\n" + lost + "\n")
    third = once()
    assert third["status"] == "fail" and "ib6 lost its link 1 time (" in third["summary"]
