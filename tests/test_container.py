"""container.* checks: runtime configuration parsers on real apptainer.conf / enroot.conf files, and
verdicts over the fixtures and edited copies of them (the in-image probe is a recorded command)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from clustercheck.checks.container import (
    Gap,
    apptainer_causes,
    enroot_causes,
    enroot_setting_on,
    parse_apptainer_conf,
    parse_enroot_conf,
    short,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, cli
from tests.test_rdma import HEALTHY, RDMA, one, run_checks, set_command, variant

CONF = CORPUS / "container_conf"
SIF = "/shared/images/pytorch-24.05-py3.sif"
DEVICES = Gap(("/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"), (), (), "")


def probe_folder(fixture: Path, runtime: str) -> Path:
    return next((fixture / "commands").glob(f"{runtime}_exec*" if runtime == "apptainer" else f"{runtime}_start*"))


def edit_probe(fixture: Path, runtime: str, old: str, new: str) -> None:
    path = probe_folder(fixture, runtime) / "stdout"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# -- configuration files -----------------------------------------------------------------------


def test_apptainer_conf_real_files() -> None:
    entries = parse_apptainer_conf((CONF / "apptainer-gediminasa-apptainerbuild-apptainer.conf.txt").read_text())
    assert ("mount dev", "yes", 65) in entries
    assert ("bind path", "/etc/hosts", 111) in entries
    assert ("allow setuid", "yes", next(n for k, _, n in entries if k == "allow setuid")) in entries
    old = parse_apptainer_conf((CONF / "singularity-unl-osg-worker-el6-singularity.conf.txt").read_text())
    assert any(k == "mount dev" for k, _, _ in old)


def test_apptainer_causes() -> None:
    minimal = "mount dev = minimal\nmount sys = no\n"
    causes = apptainer_causes("/etc/apptainer/apptainer.conf", minimal, ("apptainer", "exec", "--nv", SIF), DEVICES)
    assert causes == [
        "/etc/apptainer/apptainer.conf:1: `mount dev = minimal` gives containers only null, zero, random, urandom "
        "and shm, and no `bind path = /dev/infiniband` brings the HCAs back"
    ]
    bound = minimal + "bind path = /dev/infiniband\n"
    assert apptainer_causes("a.conf", bound, ("apptainer", "exec", SIF), DEVICES) == []
    contain = apptainer_causes("a.conf", "mount dev = yes\n", ("apptainer", "exec", "--contain", "--nv", SIF), DEVICES)
    assert contain[0].startswith("the job command uses --contain")
    hidden = apptainer_causes("a.conf", minimal, ("apptainer", "exec", SIF), Gap((), ("mlx5_0",), (), ""))
    assert hidden == ["a.conf:2: `mount sys = no` hides /sys/class/infiniband, which libibverbs reads"]
    assert apptainer_causes("a.conf", None, ("apptainer",), DEVICES) == [
        "a.conf is absent, so the runtime's cause could not be read"
    ]


def test_enroot_conf_real_files() -> None:
    aws = parse_enroot_conf((CONF / "enroot-aws-ami-role-enroot.conf.txt").read_text())
    assert ("ENROOT_RESTRICT_DEV", "no", 58) in aws
    assert ("ENROOT_RUNTIME_PATH", "/tmp/enroot/user-$(id -u)", 3) in aws
    assert parse_enroot_conf((CONF / "enroot-upstream-enroot.conf.in.txt").read_text()) == []  # all commented out
    nebius_conf = (CONF / "enroot-nebius-soperator-enroot.conf.txt").read_text()
    nebius = {k: v for k, v, _ in parse_enroot_conf(nebius_conf)}
    assert nebius["ENROOT_NATIVE_OVERLAYFS"] == "yes" and "ENROOT_RESTRICT_DEV" not in nebius
    assert parse_enroot_conf("ENROOT_RESTRICT_DEV=yes\n") == [("ENROOT_RESTRICT_DEV", "yes", 1)]


def test_enroot_false_values() -> None:
    # NVIDIA/enroot enroot.in config::fini unsets values matching ^(no?|N[oO]?|[fF](alse)?|FALSE)$
    for value in ("no", "n", "N", "NO", "No", "f", "false", "F", "False", "FALSE", ""):
        assert not enroot_setting_on(value), value
    for value in ("y", "yes", "1", "true", "0", "nope"):  # 0 is not in enroot's list: it counts as set
        assert enroot_setting_on(value), value


def test_the_mellanox_hook_acts_only_when_asked() -> None:
    """The corpus hook is what the enroot verdicts rely on: MELLANOX_VISIBLE_DEVICES void/none does nothing."""
    hook = (CONF / "enroot-hook-99-mellanox.sh.txt").read_text()
    assert '[ "${MELLANOX_VISIBLE_DEVICES:-void}" = "void" ] || [ "${MELLANOX_VISIBLE_DEVICES}" = "none" ]' in hook
    assert "/sys/bus/pci/drivers/mlx?_core/" in hook  # mlx4/mlx5 only


def test_enroot_causes() -> None:
    restrict = [("/etc/enroot/enroot.conf", "ENROOT_RESTRICT_DEV        y\n")]
    hooks = ["10-devices.sh", "98-nvidia.sh", "99-mellanox.sh"]
    causes = enroot_causes(restrict, hooks, "/etc/enroot/hooks.d", {}, DEVICES)
    assert causes[0].startswith("/etc/enroot/enroot.conf:1: `ENROOT_RESTRICT_DEV y` replaces /dev with a minimal tmpfs")
    assert "binds HCAs only when MELLANOX_VISIBLE_DEVICES is set" in causes[1] and "unset inside" in causes[1]
    assert enroot_causes(restrict, hooks, "h", {"MELLANOX_VISIBLE_DEVICES": "all"}, DEVICES)[1:] == []
    subset = enroot_causes([], hooks, "h", {"MELLANOX_VISIBLE_DEVICES": "0,1"}, Gap((), ("mlx5_2",), (), ""))
    assert subset == ["MELLANOX_VISIBLE_DEVICES=0,1 makes 99-mellanox.sh expose only those HCAs and hide the others"]
    # enroot.conf.d files are read after enroot.conf: the later file wins
    undone = [*restrict, ("/etc/enroot/enroot.conf.d/site.conf", "ENROOT_RESTRICT_DEV no\n")]
    assert enroot_causes(undone, hooks, "h", {}, DEVICES)[0].startswith("enroot binds the host /dev by default")
    ipc = enroot_causes([("e.conf", "ENROOT_UNSHARE_IPC yes\n")], None, "h", {}, DEVICES)
    assert ipc == [
        "e.conf:1: `ENROOT_UNSHARE_IPC yes` replaces /dev with a minimal tmpfs without /dev/infiniband",
        "h has no 99-mellanox.sh to bind the HCAs back",
    ]


def test_a_hooks_folder_that_cannot_be_listed_is_not_one_without_the_hook() -> None:
    restrict = [("/etc/enroot/enroot.conf", "ENROOT_RESTRICT_DEV y\n")]
    causes = enroot_causes(
        restrict, None, "/etc/enroot/hooks.d", {}, DEVICES, "ls: cannot open directory: Permission denied"
    )
    assert causes[1] == (
        "/etc/enroot/hooks.d could not be listed (ls: cannot open directory: Permission denied): whether "
        "99-mellanox.sh binds the HCAs back is unknown"
    )
    assert "has no 99-mellanox.sh" in enroot_causes(restrict, None, "/etc/enroot/hooks.d", {}, DEVICES)[1]


def test_short_device_lists() -> None:
    devices = ["/dev/infiniband/rdma_cm", *(f"/dev/infiniband/uverbs{i}" for i in (10, 2, 0, 1, 3))]
    assert short(devices) == "rdma_cm, uverbs0..uverbs10"
    assert short(["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"]) == "uverbs0, uverbs1"


@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_conf_parsers_take_garbage(text: str) -> None:
    parse_apptainer_conf(text)
    parse_enroot_conf(text)
    apptainer_causes("x.conf", text, ("apptainer", "exec", "-C", "img"), DEVICES)
    enroot_causes([("x.conf", text)], text.split(), "h", {}, DEVICES)


# -- the checks over the fixtures -------------------------------------------------------------


def test_fixtures_say_what_they_were_made_for() -> None:
    cases = {
        "apptainer-minimal-dev": (
            "container.apptainer_rdma",
            [
                "/dev/infiniband is missing inside",
                "rdma_cm, uverbs0..uverbs7",
                "/etc/apptainer/apptainer.conf:65: `mount dev = minimal`",
            ],
        ),
        "enroot-restrict-dev": (
            "container.enroot_rdma",
            [
                "/dev/infiniband is missing inside",
                "/etc/enroot/enroot.conf:58: `ENROOT_RESTRICT_DEV y`",
                "/etc/enroot/hooks.d has no 99-mellanox.sh",
            ],
        ),
        "image-no-verbs": ("container.apptainer_rdma", ["no libibverbs.so.1 in the image", "no mlx5 verbs provider"]),
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
    explain = cli("explain", "container.apptainer_rdma")
    assert "Fix:" in explain.stdout and "mount dev = yes" in explain.stdout


def test_healthy_inside_both_runtimes() -> None:
    results = run_checks(
        HEALTHY,
        {
            "container.apptainer_rdma": {"image": SIF},
            "container.enroot_rdma": {"image": "/shared/images/nvidia+pytorch+24.05-py3.sqsh"},
        },
    )
    for result in results.values():
        assert result.status.value == "ok", result.summary
        assert result.summary.startswith("inside the image: the host's rdma_cm, uverbs0..uverbs7, 8 HCAs")
        assert any(e.startswith("probe: `") for e in result.evidence)


def test_no_image_and_missing_runtime(tmp_path: Path) -> None:
    assert one(HEALTHY, "container.apptainer_rdma").status.value == "skip"
    fixture = variant(tmp_path)
    set_command(fixture, ["apptainer", "--version"], "", exit_code=127, stderr="apptainer: command not found")
    check = one(fixture, "container.apptainer_rdma", {"image": SIF})
    assert (check.status.value, check.summary) == (
        "skip",
        "apptainer is not installed on this node (exit 127): apptainer containers are not used here",
    )
    check = one(fixture, "container.apptainer_rdma", {"image": SIF, "required": True})
    assert check.status.value == "fail" and "the profile requires apptainer" in check.summary


def test_site_wrapper_with_contain(tmp_path: Path) -> None:
    fixture = variant(
        tmp_path,
        files={
            "/etc/apptainer/apptainer.conf": (
                CONF / "apptainer-gediminasa-apptainerbuild-apptainer.conf.txt"
            ).read_text()
        },
    )
    command = ["apptainer", "exec", "--contain", "--nv", SIF]
    probe = (probe_folder(HEALTHY, "apptainer") / "stdout").read_text()
    no_dev = "\n".join(line for line in probe.splitlines() if not line.startswith("/dev/infiniband/")) + "\n"
    script = yaml.safe_load((probe_folder(HEALTHY, "apptainer") / "command.yaml").read_text())["argv"][-1]
    set_command(fixture, [*command, "sh", "-c", script], no_dev)
    check = one(fixture, "container.apptainer_rdma", {"command": command})
    assert check.status.value == "fail"
    assert "Cause: the job command uses --contain" in check.summary
    assert "/etc/apptainer/apptainer.conf:65: mount dev = yes" in check.evidence


def test_probe_that_does_not_start_is_an_error(tmp_path: Path) -> None:
    fixture = variant(tmp_path)
    argv = yaml.safe_load((probe_folder(fixture, "apptainer") / "command.yaml").read_text())["argv"]
    set_command(
        fixture, argv, "", exit_code=255, stderr=f"FATAL:   could not open image {SIF}: failed to retrieve path\n"
    )
    check = one(fixture, "container.apptainer_rdma", {"image": SIF})
    assert check.status.value == "error"
    assert "the probe did not run inside the image" in check.summary and "could not open image" in check.summary


def test_enroot_hook_with_a_subset_hides_hcas(tmp_path: Path) -> None:
    fixture = variant(tmp_path)
    edit_probe(fixture, "enroot", "mlx5_2\nmlx5_3\nmlx5_4\nmlx5_5\nmlx5_6\nmlx5_7\n", "")
    edit_probe(fixture, "enroot", "## environment\n", "## environment\nMELLANOX_VISIBLE_DEVICES=0,1\n")
    for argv, out in (
        (["ls", "-1", "/etc/enroot/enroot.conf.d"], "README\n"),
        (["ls", "-1", "/etc/enroot/hooks.d"], "10-devices.sh\n98-nvidia.sh\n99-mellanox.sh\n"),
    ):
        set_command(fixture, argv, out)
    manifest = yaml.safe_load((fixture / "fixture.yaml").read_text())
    manifest["absent"].append("/etc/enroot/enroot.conf")
    (fixture / "fixture.yaml").write_text(yaml.safe_dump(manifest))
    check = one(fixture, "container.enroot_rdma", {"image": "/shared/images/nvidia+pytorch+24.05-py3.sqsh"})
    assert check.status.value == "fail"
    assert check.summary == (
        "inside the image: HCAs mlx5_2..mlx5_7 are not visible in /sys/class/infiniband "
        "inside. Cause: MELLANOX_VISIBLE_DEVICES=0,1 makes 99-mellanox.sh expose only those HCAs and hide the others"
    )


def test_memlock_inside_when_asked(tmp_path: Path) -> None:
    fixture = variant(tmp_path)
    edit_probe(fixture, "apptainer", "## memlock\nunlimited\n", "## memlock\n8192\n")
    assert one(fixture, "container.apptainer_rdma", {"image": SIF}).status.value == "ok"  # not judged by default
    check = one(fixture, "container.apptainer_rdma", {"image": SIF, "min_memlock": "1TiB"})
    assert check.status.value == "fail"
    assert check.summary == "inside the image: locked-memory limit inside is 8 MiB, expected 1 TiB"
