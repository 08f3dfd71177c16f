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


# -- mistakes caught before the work (issue 15) --------------------------------------------------


def test_output_paths_that_cannot_be_written_are_refused_before_any_host_is_contacted(tmp_path: Path) -> None:
    # port 1 on loopback refuses: had a host been contacted, the report would say so after the run
    ssh = ("--ssh", "127.0.0.1", "--port", "1", "--ssh-config", "/dev/null")
    cases = {
        tmp_path / "missing-dir" / "out.json": "there is no folder",
        tmp_path: "is a folder",
        Path("/proc/clustercheck-report.json"): "cannot write in /proc",  # unwritable even for root
    }
    for output, why in cases.items():
        for args in (ssh, ("--local", "--profile", "prolog-cpu"), ("--replay", DEMO)):
            proc = cli("run", *args, "-f", "json", "-o", output)
            assert proc.returncode == 64, (args, output, proc.stderr)
            assert f"-o {output}: {why}" in proc.stderr, proc.stderr
            assert proc.stdout == "" and "refused" not in proc.stderr and "internal error" not in proc.stderr
            assert ".out.json." not in proc.stderr  # no temporary file's name
    assert not (tmp_path / "missing-dir").exists()
    # the same check on the bounded (--timeout) run, and the plain ones still write
    timed = cli("run", "--replay", DEMO, "--timeout", "30", "-o", tmp_path / "nope" / "r.json")
    assert timed.returncode == 64 and "there is no folder" in timed.stderr
    good = cli("run", "--replay", DEMO, "-f", "json", "-o", tmp_path / "r.json")
    assert good.returncode == 2 and json.loads((tmp_path / "r.json").read_text())["summary"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # the probe left nothing
    assert cli("run", "--replay", DEMO, "-o", "/dev/null").returncode == 2
    # `report` writes where it is told the same way: the user's path, exit 64, no temporary name
    results = tmp_path / "r.jsonl"
    results.write_text(cli("run", "--replay", DEMO, "-f", "jsonl").stdout)
    merged = cli("report", results, "-o", tmp_path / "nope" / "fleet.html")
    assert merged.returncode == 64 and f"-o {tmp_path / 'nope' / 'fleet.html'}: cannot write" in merged.stderr
    assert "internal error" not in merged.stderr and ".fleet.html." not in merged.stderr


def test_record_out_an_existing_file_and_bad_ssh_options_are_usage_errors(tmp_path: Path) -> None:
    existing = tmp_path / "fixture"
    existing.write_text("mine\n")
    proc = cli("record", "--local", "--profile", "prolog-cpu", "--out", existing)
    assert proc.returncode == 64 and f"--out {existing}: exists and is not a folder" in proc.stderr, proc.stderr
    assert existing.read_text() == "mine\n"
    for command in (("run",), ("record", "--profile", "base", "--out", tmp_path / "new")):
        config = cli(*command, "--ssh", "127.0.0.1", "--ssh-config", tmp_path / "no-config")
        assert config.returncode == 64 and f"--ssh-config {tmp_path / 'no-config'}: no such file" in config.stderr
        port = cli(*command, "--ssh", "127.0.0.1", "--port", "twenty-two")
        assert port.returncode == 64 and "'--port'" in port.stderr and "Traceback" not in port.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixture"]


CRASHING_SITE_MODULE = """\
# Stands for a bug in clustercheck's own code: the table renderer raises.
import clustercheck.formats


def _broken(*args, **kwargs):
    raise RuntimeError("renderer bug")


clustercheck.formats.render = _broken
"""


def test_debug_never_changes_the_exit_code_and_the_hint_puts_debug_first(tmp_path: Path) -> None:
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "boom.py").write_text(CRASHING_SITE_MODULE)
    for extra in ((), ("--timeout", "30")):
        plain = cli("run", "--replay", DEMO, "--checks", tmp_path / "crash", *extra)
        assert plain.returncode == 70, plain.stderr
        assert "internal error: RuntimeError: renderer bug" in plain.stderr
        assert "(run `clustercheck --debug run ...` for the traceback)" in plain.stderr
        debug = cli("--debug", "run", "--replay", DEMO, "--checks", tmp_path / "crash", *extra)
        assert debug.returncode == 70, debug.stderr
        assert "Traceback (most recent call last)" in debug.stderr and "RuntimeError: renderer bug" in debug.stderr
    local = cli("run", "--local", "--profile", "prolog-cpu", "--checks", tmp_path / "crash")  # the fast path
    assert local.returncode == 70 and "clustercheck --debug run ..." in local.stderr
