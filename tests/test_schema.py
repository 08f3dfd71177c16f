"""The profile JSON Schema shipped in the package is the one the registered checks give."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import cli

import clustercheck

SHIPPED = Path(clustercheck.__file__).parent / "profile.schema.json"


def test_shipped_schema_is_current() -> None:
    # regenerate with: clustercheck profiles --schema > src/clustercheck/profile.schema.json
    # (in a fresh process: other tests register site checks in this one)
    proc = cli("profiles", "--schema")
    assert json.loads(SHIPPED.read_text()) == json.loads(proc.stdout)


def test_schema_names_every_check_and_its_parameters() -> None:
    checks = json.loads(SHIPPED.read_text())["properties"]["checks"]["properties"]
    memory = checks["node.memory"]["anyOf"][0]
    assert memory["required"] == ["min_total"]
    assert set(memory["properties"]) == {"min_total", "min_available", "timeout"}
