"""Shared test helpers: run the real CLI as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
DEMO = FIXTURES / "demo-cluster"
CORPUS = REPO / "tests" / "corpus"  # real artifacts with their sources: tests/corpus/MANIFEST.md


def cli(
    *args: str | Path, cwd: Path | None = None, timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m clustercheck ARGS` in a subprocess; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "clustercheck", *map(str, args)],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        input=stdin,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )


def run_local(tmp_path: Path, checks: dict[str, Any], bin_dir: Path | None, name: str = "deep-test") -> Any:
    """`clustercheck run --local --format json` of a profile of `checks` (stand-ins from `bin_dir`
    first on PATH); (exit code, the one check's JSON)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "checks": checks}))
    prefix = f"{bin_dir}:" if bin_dir else ""
    env = {**os.environ, "PATH": prefix + "/usr/bin:/bin", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "clustercheck", "run", "--local", "--profile", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (check,) = host["checks"]
    return proc.returncode, check


def all_fixtures() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.rglob("fixture.yaml"))


def posix_sh_problems(text: str, *, shellcheck: bool = False) -> list[str]:
    """What the POSIX shells here say of a script's syntax (`-n`: parsed, not run): sh, dash, bash
    --posix, busybox ash, those installed. With `shellcheck` (where installed), its findings too
    (`-s sh`; what a script does on purpose it says in `# shellcheck disable=` lines). [] is clean."""
    import shutil

    shells = [s for s in ("sh", "dash", "bash", "busybox") if shutil.which(s)]
    assert shells, "no POSIX shell to lint a script with"
    problems = []
    for shell in shells:
        argv = {"busybox": [shell, "ash", "-n"], "bash": [shell, "--posix", "-n"]}.get(shell, [shell, "-n"])
        proc = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            problems.append(f"{shell}: {proc.stderr.strip()}")
    if shellcheck and shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", "-s", "sh", "-"], input=text, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            problems.append(f"shellcheck: {proc.stdout.strip()}")
    return problems
