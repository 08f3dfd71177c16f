"""Promise: `clustercheck record` writes files only inside --out, at paths it chose itself.

A node chooses what its files say (a slurm.conf `Include ../../../x`), and whoever can write
beside --out can plant links in it; neither may steer where the recorder writes. Each test
records this real machine through the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from tests.helpers import cli


def _files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def test_an_include_that_climbs_out_is_refused_and_nothing_is_written_outside(tmp_path: Path) -> None:
    conf = tmp_path / "conf"  # the node's config folder, an absolute path of some depth
    conf.mkdir()
    depth = len(conf.parts) - 1
    # on the node the climb stops at / (this machine's real /etc/hostname); written under
    # out/files/<conf>/ the same `..`s would climb out of out/files and out into tmp_path
    climb = "../" * (depth + 2) + "etc/hostname"
    (conf / "slurm.conf").write_text(f"ClusterName=c\nInclude {climb}\nNodeName=n1 CPUs=1\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(f"checks:\n  slurm.topology: {{config_dirs: [{conf}]}}\n")
    before = _files_under(tmp_path)
    out = tmp_path / "out"
    proc = cli("record", "--profile", profile, "--local", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "etc").exists()
    assert {p for p in _files_under(tmp_path) - before if out not in p.parents} == set()
    written = [p.relative_to(out) for p in _files_under(out)]
    assert all(".." not in p.parts for p in written)
    manifest = yaml.safe_load((out / "fixture.yaml").read_text())
    assert manifest["expect"]["slurm.topology"] == "error"
    replay = cli("run", "--replay", out, "--format", "json", "--profile", profile)
    assert "climbs with `..`" in replay.stdout


def test_links_planted_in_out_are_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "fixture.tmp").symlink_to(victim)  # the manifest used to be written through fixture.tmp
    (out / "fixture.yaml").symlink_to(victim)
    (out / "files").symlink_to(victim_dir)
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.kernel:\n  node.memory: {min_total: 1MiB}\n")

    refused = cli("record", "--profile", profile, "--local", "--out", out)
    assert refused.returncode == 64
    assert f"--out {out}: the folder is not empty" in refused.stderr and "--force" in refused.stderr

    forced = cli("record", "--profile", profile, "--local", "--out", out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert victim.read_text() == "precious\n"
    assert list(victim_dir.iterdir()) == []
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert (out / "fixture.yaml").is_file() and (out / "files/proc/meminfo").is_file()
    assert not (out / "fixture.tmp").exists()


def test_out_that_is_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.kernel:\n")
    for extra in ([], ["--force"]):
        proc = cli("record", "--profile", profile, "--local", "--out", link, *extra)
        assert proc.returncode == 64
        assert f"--out {link}: a symbolic link" in proc.stderr
    assert list(target.iterdir()) == []
    assert os.readlink(link) == str(target)


@pytest.mark.parametrize("out", [".", "..", "/", "sub/.."])
def test_out_that_names_no_folder_of_its_own_is_refused(tmp_path: Path, out: str) -> None:
    (tmp_path / "sub").mkdir()
    before = sorted(tmp_path.rglob("*"))
    proc = cli("record", "--profile", "base", "--local", "--out", out, "--force", cwd=tmp_path)
    assert proc.returncode == 64
    assert f"--out {out}: name the fixture's own folder" in proc.stderr
    assert sorted(tmp_path.rglob("*")) == before
