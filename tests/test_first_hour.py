"""The first hour (issue 15): site checks first-class in `explain`, `profiles --schema` and
`checks`, and `profiles show` for what a profile really runs after `extends` — through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from tests.helpers import DEMO, REPO, cli

# The README's "Writing a check" example, as a site would drop it into its folder.
SITE_CHECK = '''\
from clustercheck import Host, Result, check, fail, ok


@check(needs=["file /proc/meminfo"], timeout=5)
def hugepages(host: Host, *, expected: int) -> Result:
    """The node has `expected` 2 MiB huge pages.

    Why it matters, how it decides, how to fix it: `clustercheck explain` shows this text.
    """
    for line in host.read("/proc/meminfo").splitlines():
        if line.startswith("HugePages_Total:"):
            got = int(line.split()[1])
            if got != expected:
                return fail(f"{got} huge pages, expected {expected}", remedy="Set vm.nr_hugepages.")
            return ok(f"{got} huge pages")
    return fail("no HugePages_Total in /proc/meminfo")
'''


def _site(tmp_path: Path) -> tuple[Path, Path]:
    checks = tmp_path / "site-checks"
    checks.mkdir()
    (checks / "site.py").write_text(SITE_CHECK)
    profile = tmp_path / "site.yaml"
    profile.write_text("extends: base\ncheck_dirs: [site-checks]\nchecks:\n  site.hugepages: {expected: 512}\n")
    return checks, profile


def test_explain_shows_a_site_checks_text(tmp_path: Path) -> None:
    checks, profile = _site(tmp_path)
    proc = cli("explain", "site.hugepages", "--checks", checks)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("site.hugepages: The node has `expected` 2 MiB huge pages.")
    assert "`clustercheck explain` shows this text" in proc.stdout and "expected: integer (required)" in proc.stdout
    assert "Reads on the node: file /proc/meminfo" in proc.stdout
    # the profile's check_dirs are loaded too, and it says how the profile sets the check
    by_profile = cli("explain", "site.hugepages", "--profile", profile)
    assert by_profile.returncode == 0, by_profile.stderr
    assert f"runs it ({profile}:4): expected = 512" in by_profile.stdout
    # without its folder, the error says how to name it
    missing = cli("explain", "site.hugepages")
    assert missing.returncode == 64 and "--checks DIR or --profile P" in missing.stderr
    nowhere = cli("explain", "site.hugepages", "--checks", tmp_path / "nope")
    assert nowhere.returncode == 64 and "does not exist" in nowhere.stderr and "Traceback" not in nowhere.stderr


def test_profile_schema_includes_site_checks(tmp_path: Path) -> None:
    checks, profile = _site(tmp_path)
    doc = yaml.safe_load(profile.read_text())
    plain = json.loads(cli("profiles", "--schema").stdout)
    assert "site.hugepages" not in plain["properties"]["checks"]["properties"]
    for args in (["--checks", str(checks)], ["--profile", str(profile)]):
        proc = cli("profiles", "--schema", *args)
        assert proc.returncode == 0, proc.stderr
        schema = json.loads(proc.stdout)
        checks_schema = schema["properties"]["checks"]
        assert checks_schema["additionalProperties"] is False  # an unknown id is what editors flag
        assert set(doc["checks"]) <= set(checks_schema["properties"])  # ... and the site's is known
        params = checks_schema["properties"]["site.hugepages"]["anyOf"][0]
        assert params["required"] == ["expected"] and params["properties"]["expected"]["type"] == "integer"
    wrong = cli("profiles", "--checks", checks)
    assert wrong.returncode == 64 and "go with --schema" in wrong.stderr


def test_profiles_show_resolves_extends_and_says_where_each_setting_came_from(tmp_path: Path) -> None:
    site = DEMO / "site-profile.yaml"
    proc = cli("profiles", "show", site)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    assert lines[0].startswith("# clustercheck profile demo-site, resolved:")
    assert "extends <bundled>/gpu-node.yaml extends <bundled>/base.yaml" in lines[0]

    def line(prefix: str) -> str:
        return next(x for x in lines if x.startswith(prefix))

    rel = site.relative_to(REPO)
    assert line("  node.memory:").endswith(f"# {rel}:9")  # the site overrides it
    assert line("    min_total: 20GiB").endswith(f"# {rel}:9")
    assert line("  node.kernel:").endswith("# <bundled>/base.yaml:9")  # inherited from base
    assert line("  node.services:").endswith("# <bundled>/gpu-node.yaml:12")
    assert line("    running: [slurmd, munged, nvidia-persistenced]").endswith("# <bundled>/gpu-node.yaml:13")
    assert line("    fail_taints:").endswith("# default")
    # the output is itself a profile, and runs as the original does
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(out)
    a = json.loads(cli("run", "--replay", DEMO, "-p", resolved, "-f", "json").stdout)
    b = json.loads(cli("run", "--replay", DEMO, "-f", "json").stdout)
    assert a["summary"] == b["summary"]
    assert [c["id"] for c in a["hosts"]["gpu002"]["checks"]] == [c["id"] for c in b["hosts"]["gpu002"]["checks"]]
    # a bundled profile by name, a site profile with site checks, and a missing one
    assert cli("profiles", "show", "prolog").stdout.startswith("# clustercheck profile prolog, resolved: <bundled>/")
    checks, profile = _site(tmp_path)
    shown = cli("profiles", "show", profile).stdout
    assert f"  - {checks.resolve()}" in shown and shown.split(f"  - {checks.resolve()}")[1].split()[:2] == [
        "#",
        f"{profile}:2",
    ]
    assert "    expected: 512" in shown
    missing = cli("profiles", "show", "nope")
    assert missing.returncode == 64 and "profile 'nope' not found" in missing.stderr


def _checks_table(columns: int) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "checks"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns)},
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_checks_never_cuts_check_ids_and_honours_columns_when_piped() -> None:
    ids = [c["id"] for c in json.loads(cli("checks", "-f", "json").stdout)]
    for columns in (60, 80, 100, 140):
        out = _checks_table(columns)
        assert max(len(line) for line in out.splitlines()) <= columns, columns
        assert "…" not in out, columns
        words = set(out.replace("│", " ").replace("┃", " ").split())
        assert set(ids) <= words, (columns, set(ids) - words)
