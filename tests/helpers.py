"""Shared test helpers: run the real CLI as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def all_fixtures() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.rglob("fixture.yaml"))
