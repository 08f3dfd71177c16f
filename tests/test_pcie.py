"""pcie.acs: the lspci reader on the real corpus (tests/corpus/pcie/, MANIFEST section "GPU fabric, NVLink,
affinity (H1)"), the kernel command line's IOMMU words, garbage never a crash, and the check through the
CLI on the replayed fixtures (fixtures/pcie-acs-*) and on edits of them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, FIXTURES, cli

from clustercheck.facts.pci import parse_acsctl, parse_cmdline, parse_lspci, redirecting

HGX = CORPUS / "pcie" / "gpud-lspci-vvv-hgx-8xH100-pex890xx-cx7.txt"
AZURE = CORPUS / "pcie" / "gpud-lspci-nn-azure-8xA100-vm-nvswitch-domains.txt"
LSPCI = ("commands", "lspci_-vvv", "stdout")


def run_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("run", *args, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (check,) = host["checks"]
    return proc.returncode, check


def copy(tmp_path: Path, name: str = "pcie-acs-healthy") -> Path:
    fixture = tmp_path / name
    shutil.copytree(FIXTURES / name, fixture)
    return fixture


def set_acsctl(text: str, bdf: str, word: str) -> str:
    """The lspci text with the ACSCtl line of function `bdf` replaced by `word`."""
    start = text.index(f"\n{bdf} ") + 1
    at = text.index("ACSCtl:", start)
    end = text.index("\n", at)
    return text[:at] + "ACSCtl:\t" + word + text[end:]


# -- the reader -----------------------------------------------------------------------------------


def test_hgx_h100_tree() -> None:
    tree = parse_lspci(HGX.read_text())
    assert len(tree.functions) == 517 and tree.stray == 0
    gpus = [f for f in tree.functions if f.is_gpu]
    assert [g.bdf for g in gpus][:2] == ["0000:19:00.0", "0000:3b:00.0"] and len(gpus) == 8
    assert sum(f.is_hca for f in tree.functions) == 12  # 8 ConnectX-7 and 2 dual-port ConnectX-6 Dx
    chain = tree.above(gpus[0])
    assert [(b.bdf, b.port) for b in chain] == [
        ("0000:17:01.0", "Downstream Port"),
        ("0000:16:00.0", "Upstream Port"),
        ("0000:15:01.0", "Root Port"),
    ]
    assert chain[0].acs is not None and not chain[0].redirecting
    assert (gpus[0].numa_node, gpus[4].numa_node) == (0, 1)
    # the PMC-Sierra ports above the NVSwitches have ACS on, with no GPU or HCA below them
    assert [f.bdf for f in tree.functions if f.redirecting] == [f"0000:82:0{i}.0" for i in range(4)]
    nvswitches = [f for f in tree.functions if "22a3" in f.description]
    assert len(nvswitches) == 4 and not any(f.is_gpu for f in nvswitches)


def test_domains_and_class_codes() -> None:
    tree = parse_lspci(AZURE.read_text())
    assert tree.functions[0].bdf == "0001:00:00.0" and tree.functions[0].is_gpu
    assert sum(f.is_gpu for f in tree.functions) == 8
    assert sum(f.kind == "Bridge" for f in tree.functions) == 6  # NVSwitches, not GPUs
    assert sum(f.is_hca for f in tree.functions) == 9


def test_acsctl_words_nccl_304() -> None:
    # `lspci ... -vvv | grep -i acsctl` as posted: the broken state (ACS on) and the working one
    broken, working = (
        (CORPUS / "pcie" / "issue-nccl-304-acsctl-broken-then-working-SNIPPET.txt").read_text().splitlines()
    )
    assert redirecting(parse_acsctl(broken)) == ["ReqRedir", "CmpltRedir"]
    assert parse_acsctl(working) == dict.fromkeys(
        ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"), False
    )
    # grep output names no device: it cannot say which bridge is above which GPU, so the check reads all of -vvv
    assert parse_lspci(broken + "\n" + working).functions == []
    assert parse_acsctl("Capabilities: <access denied>") is None


def test_kernel_command_line_iommu_words() -> None:
    # the line NVIDIA's NIM guide tells users to set (GRUB_CMDLINE_LINUX="crashkernel=auto quiet iommu=pt")
    words = parse_cmdline("BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=x ro crashkernel=auto quiet iommu=pt\n")
    assert words.passthrough is True and words.words == ("iommu=pt",)
    words = parse_cmdline("ro intel_iommu=on iommu=pt iommu=nopt")
    assert words.intel == "on" and words.passthrough is False  # the last word wins, as in the kernel
    words = parse_cmdline("ro amd_iommu=on iommu.passthrough=1")
    assert words.amd == "on" and words.passthrough is True
    assert parse_cmdline("ro quiet splash").passthrough is None
    assert parse_cmdline("iommu=off").off


@settings(max_examples=150, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("0123456789abcdef:. \tBus: primary=,secondary=subordinate=ACSCtl+-\n")),
        max_size=500,
    )
)
def test_reader_takes_any_text(text: str) -> None:
    tree = parse_lspci(text)
    assert len(tree.functions) <= text.count("\n") + 1
    for function in tree.functions:
        assert len(tree.above(function)) <= 256
    parse_cmdline(text)


def test_a_bridge_loop_in_hostile_input_ends() -> None:
    text = "00:01.0 PCI bridge: x\n\tBus: primary=01, secondary=01, subordinate=01\n01:00.0 3D controller: NVIDIA x\n"
    tree = parse_lspci(text)
    assert [b.bdf for b in tree.above(tree.functions[1])] == ["0000:00:01.0"]


# -- the check through the CLI ----------------------------------------------------------------------


def test_acs_off_above_every_gpu_and_hca() -> None:
    code, check = run_json("--replay", FIXTURES / "pcie-acs-healthy")
    assert code == 0 and check["status"] == "ok"
    assert "34 bridges above 20 GPUs/HCAs" in check["summary"]
    assert any("GPU 0000:19:00.0: 0000:17:01.0 (Downstream Port, ACS all off)" in e for e in check["evidence"])


def test_acs_redirect_on_a_switch_port_fails_naming_it() -> None:
    code, check = run_json("--replay", FIXTURES / "pcie-acs-redirect")
    assert code == 2 and check["status"] == "fail" and check["action"] == "FIX_CONFIG"
    assert "0000:17:01.0 (Downstream Port" in check["summary"] and "above GPU 0000:19:00.0" in check["summary"]
    assert "ReqRedir+ CmpltRedir+" in check["summary"]
    assert "setpci -s BDF ECAP_ACS+0x6.w=0000" in check["remedy"] and "iommu=pt" in check["remedy"]


def test_root_ports_warn_fail_or_ignore(tmp_path: Path) -> None:
    fixture = copy(tmp_path)
    stdout = fixture.joinpath(*LSPCI)
    word = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    stdout.write_text(set_acsctl(stdout.read_text(), "15:01.0", word))
    code, check = run_json("--replay", fixture)
    assert code == 1 and check["status"] == "warn" and "0000:15:01.0 (Root Port" in check["summary"]
    for mode, want in (("fail", "fail"), ("ignore", "ok")):
        profile = tmp_path / f"{mode}.yaml"
        profile.write_text(yaml.safe_dump({"name": mode, "checks": {"pcie.acs": {"root_ports": mode}}}))
        code, check = run_json("--replay", fixture, "-p", profile)
        assert check["status"] == want, (mode, check["summary"])


def test_srcvalid_alone_is_not_a_redirect(tmp_path: Path) -> None:
    fixture = copy(tmp_path)
    stdout = fixture.joinpath(*LSPCI)
    word = "SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
    stdout.write_text(set_acsctl(stdout.read_text(), "17:01.0", word))
    code, check = run_json("--replay", fixture)
    assert code == 0 and check["status"] == "ok"


def test_lspci_without_root_cannot_tell(tmp_path: Path) -> None:
    fixture = copy(tmp_path)
    stdout = fixture.joinpath(*LSPCI)
    # what lspci prints for a user who may not read the configuration space past the header
    lines = []
    for line in stdout.read_text().splitlines():
        if re.match(r"^\t\S", line) and not line.startswith("\tCapabilities:"):
            lines.append(line)
        elif line.startswith("\tCapabilities:"):
            if not lines[-1].startswith("\tCapabilities: <access denied>"):
                lines.append("\tCapabilities: <access denied>")
        elif not line.startswith("\t\t"):
            lines.append(line)
    stdout.write_text("\n".join(lines) + "\n")
    code, check = run_json("--replay", fixture)
    assert code == 3 and check["status"] == "error" and "run clustercheck as root" in check["summary"]


def test_a_translating_iommu_warns_and_passthrough_is_fine(tmp_path: Path) -> None:
    fixture = copy(tmp_path)
    listing = fixture / "commands" / "ls_-1_sys_class_iommu" / "stdout"
    listing.write_text("dmar0\ndmar1\ndmar2\ndmar3\n")
    tree = parse_lspci(HGX.read_text())
    targets = [f.bdf for f in tree.functions if f.is_gpu or f.is_hca]
    (fixture / "files" / "proc").mkdir(parents=True)
    (fixture / "files" / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on quiet\n")
    for bdf in targets:  # the group types of Documentation/ABI/testing/sysfs-kernel-iommu_groups
        path = fixture / "files" / "sys" / "bus" / "pci" / "devices" / bdf / "iommu_group" / "type"
        path.parent.mkdir(parents=True)
        path.write_text("DMA-FQ\n")
    code, check = run_json("--replay", fixture)
    assert code == 1 and check["status"] == "warn"
    assert "the IOMMU translates DMA for 0000:19:00.0" in check["summary"] and "not passthrough" in check["summary"]
    for bdf in targets:
        (fixture / "files" / "sys" / "bus" / "pci" / "devices" / bdf / "iommu_group" / "type").write_text("identity\n")
    (fixture / "files" / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt quiet\n")
    code, check = run_json("--replay", fixture)
    assert code == 0 and check["status"] == "ok"


def test_no_gpu_or_hca_skips_and_no_lspci_is_an_error(tmp_path: Path) -> None:
    fixture = copy(tmp_path)
    stdout = fixture.joinpath(*LSPCI)
    text = stdout.read_text()
    stdout.write_text(text[: text.index("\n15:01.0 ") + 1])  # cut before the first GPU's root port: chipset only
    code, check = run_json("--replay", fixture)
    assert code == 0 and check["status"] == "skip" and "no GPU or RDMA HCA" in check["summary"]
    record = fixture / "commands" / "lspci_-vvv" / "command.yaml"
    meta = yaml.safe_load(record.read_text())
    record.write_text(yaml.safe_dump({**meta, "exit_code": 127}))
    stdout.write_text("")
    code, check = run_json("--replay", fixture)
    assert code == 3 and check["status"] == "error" and "pciutils is not installed" in check["summary"]


def test_hostile_long_lines_read_in_linear_time() -> None:
    run = " " * 200_000  # a backtracking header pattern took minutes on this
    tree = parse_lspci(f"00:00.0 {run}x\n00:01.0 PCI bridge{run}: y\n\tACSCtl:{run}ReqRedir+\n")
    assert tree.stray == 1 and tree.functions[0].redirecting == ["ReqRedir"]
