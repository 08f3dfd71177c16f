"""DCGM diagnostics: exercise the node's GPUs with `dcgmi diag` and judge every test per GPU.

`dcgm.diag` runs `dcgmi diag -r LEVEL -j` on the node (through the host API, so locally, over
SSH and in record/replay alike) and reads what it printed with clustercheck.facts.dcgm (the
JSON of DCGM 3.x and 4.x, the text table as a fallback). This module only judges.

Every problem in the result's data carries a machine-readable `action`, and a failing or
warning result carries the action of the problems that decided it (the result's `action`, as
every check's; REPLACE_HW before RESET_GPU before FIX_CONFIG):

- `REPLACE_HW`: a hardware test (memory, pcie, diagnostic, stress, power, bandwidth, ...) failed
  on a GPU: rerun once after a GPU reset; a second failure is a hardware failure (an RMA case).
- `RESET_GPU`: DCGM could not use the GPU: it is busy or unavailable (a leftover process, an
  exclusive compute mode, a hung context) or memory could not be allocated on it.
- `FIX_CONFIG`: a deployment/software test failed (persistence mode, environment variables,
  libraries, page retirement settings, ...), a test was skipped or not run (ECC off, a missing
  hardware diagnostic, a plugin missing for this CUDA), DCGM's own test helper crashed
  ("internal error during the test"), its plugins do not load, or no host engine answers.
- none (null): the diagnostic did not finish within its budget, or its output cannot be read.

An `error` carries no result action (the runner gives actions to warn and fail only): its
data's `action` names what the problems that left the GPUs unproven ask for (null for a
timeout or unreadable output), for a sweep or an admin deciding what to try before a rerun.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from clustercheck import Host, Result, check, fail, ok, warn
from clustercheck.errors import HostError
from clustercheck.facts.dcgm import (
    BUDGET,
    NOMINAL,
    DiagParseError,
    DiagRun,
    TestResult,
    diag_argv,
    parse_diag,
    run_diag,
)

REPLACE_HW, RESET_GPU, FIX_CONFIG = "REPLACE_HW", "RESET_GPU", "FIX_CONFIG"
_ACTION_RANK = (REPLACE_HW, RESET_GPU, FIX_CONFIG)

#: dcgmi is in these packages (NVIDIA's CUDA repository).
PACKAGES = (
    "datacenter-gpu-manager-4-core with datacenter-gpu-manager-4-cudaNN for the driver's CUDA major "
    "(DCGM 4), or datacenter-gpu-manager (DCGM 3)"
)

# DCGM's messages that say it could not exercise the GPU, not that the GPU failed (kind, action).
_BUSY = re.compile(r"busy or unavailable|is/are busy", re.I)
_ALLOC = re.compile(r"out of memory|unable to allocate|failed to allocate|allocation fail", re.I)
_INTERNAL = re.compile(r"internal error during the test|child process .* exited|couldn't be parsed", re.I)

# Test names (3.x display names and 4.x canonical names) whose failure is configuration.
_CONFIG_TESTS = {
    "software",
    "denylist",
    "blacklist",
    "nvmllibrary",
    "cudamainlibrary",
    "cudatoolkitlibraries",
    "permissionsandosblocks",
    "permissionsandosrelatedblocks",
    "persistencemode",
    "environmentvariables",
    "environmentalvariables",
    "pageretirementrowremap",
    "graphicsprocesses",
    "inforom",
    "fabricmanager",
}

# 3.x display names -> the canonical names dcgmi -r takes, so `exclude` accepts either.
_ALIASES = {
    "gpumemory": "memory",
    "eudtest": "eud",
    "pcie": "pcie",
    "smstress": "sm_stress",
    "targetedstress": "targeted_stress",
    "targetedpower": "targeted_power",
    "memorybandwidth": "memory_bandwidth",
    "memtest": "memtest",
    "pulsetest": "pulse_test",
    "diagnostic": "diagnostic",
    "contextcreate": "context_create",
}


def _key(name: str) -> str:
    squashed = re.sub(r"[^a-z0-9]", "", name.lower())
    return re.sub(r"[^a-z0-9]", "", _ALIASES.get(squashed, squashed))


def validate(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    """Load-time rules: a level DCGM has, and no long level in a prolog profile."""
    level = params.get("level")
    if level not in BUDGET:
        return [f"level must be 1, 2, 3 or 4 (DCGM's run levels), got {level!r}"]
    prolog = next((p for p in profiles if "prolog" in p.lower()), None)
    if prolog is not None and level >= 3:
        return [
            f"level {level} runs for {NOMINAL[level]} and takes the GPUs the whole time: not in a prolog "
            f"profile (this one is or extends {prolog!r}); use level 1 or 2 here, and run level {level} in a "
            "profile for nodes out of service"
        ]
    return []


@check(
    needs=["command dcgmi (DCGM, with nv-hostengine running)"],
    timeout=max(BUDGET.values()),
    validate=validate,
    action=REPLACE_HW,
)
def diag(host: Host, *, level: int = 1, exclude: tuple[str, ...] = ()) -> Result:
    """DCGM's diagnostic (`dcgmi diag -r LEVEL`) passes every test on every GPU.

    Why: DCGM's active diagnostic is what NVIDIA and every fleet tool (Meta's GCM, the AWS GPU
    health suite) runs before a node takes jobs: it exercises the GPUs (memory, PCIe, compute,
    power, stress) instead of reading their state, so it finds a GPU that looks healthy but
    fails under load. It also proves DCGM itself works on the node.

    How: runs `dcgmi diag -r LEVEL -j` and reads every test's result per GPU (DCGM 3.x and 4.x
    JSON; the text table when dcgmi printed one). Level 1 takes seconds (deployment checks:
    libraries, permissions, persistence mode, ...), level 2 about 2 minutes (adds short PCIe,
    memory and compute tests), level 3 about 15 minutes and level 4 an hour or more (long
    hardware and stress tests), as DCGM's help and documentation give them. The command's budget
    is the check's `timeout` (default: 2 min at level 1, 10 min at level 2, 45 min at level 3,
    4 h at level 4, whichever ends first); past it dcgmi and its children are killed. Levels 3
    and 4 are refused in a prolog profile when the profile loads.
    A failed test fails, naming the GPU, the test and DCGM's message. A skipped or not-run test
    and DCGM's "could not run" outcomes (the GPU busy or unavailable, an allocation failure, an
    internal error of DCGM's test helper, plugins that do not load, no host engine) are errors:
    the GPU was not proven, so never a pass. So are output cut short, garbage and a JSON shape
    clustercheck does not know. `exclude` names tests not to judge (canonical names such as
    `pcie`, `memory`, `sm_stress`, or the 3.x names such as "GPU Memory"): dcgmi has no option
    to leave a test out of a level (its options are -r, -p, -c, -i, -g, -t, ...), so they still
    run and their results are listed as excluded. A level-2 pass does not prove NVLink (DCGM
    passes with every link down, NVIDIA/DCGM#198): judge link state separately.

    Fix: see each problem's `action` (documented in checks/dcgm.py): REPLACE_HW after a rerun
    that fails again, RESET_GPU (`nvidia-smi -r -i N` once no process uses it), FIX_CONFIG (as
    DCGM's message says; `systemctl enable --now nvidia-dcgm` for the host engine; the
    datacenter-gpu-manager-4-cudaNN package for the driver's CUDA for missing plugins).

    Action: REPLACE_HW (a hardware test failed on a GPU), RESET_GPU (DCGM could not use a GPU),
    FIX_CONFIG (a deployment test failed or warned); on an `error`, data's `action` says the same.
    """
    budget = BUDGET[level]
    result = run_diag(host, level, budget)
    command = result.command
    data: dict[str, Any] = {"level": level, "command": command, "exit_code": result.exit_code}
    if result.timed_out:
        _error(
            f"`{command}` did not finish within {result.duration_s:.0f} s (level {level} normally takes "
            f"{NOMINAL[level]}); it was stopped",
            "raise the check's timeout, or look for a hung nv-hostengine/nvvs process (`ps -ef | grep nvvs`)",
            {**data, "action": None},
        )
    if result.exit_code == 127 or (result.exit_code == 126 and not result.stdout.strip()):
        _error(
            f"dcgmi is not installed on {host.name} (`{command}`: {_line(result.stderr) or 'not found'})",
            f"install DCGM: {PACKAGES}; then `systemctl enable --now nvidia-dcgm`",
            {**data, "action": FIX_CONFIG},
        )
    try:
        run = parse_diag(result.stdout, result.stderr, result.exit_code)
    except DiagParseError as exc:
        _error(
            f"cannot judge `{command}` (exit {result.exit_code}): {exc}",
            "run the command on the node by hand; a truncated or unknown document is not a pass",
            {**data, "action": None},
        )
    return judge(run, level=level, exclude=exclude, data=data, exit_code=result.exit_code)


def _line(text: str) -> str:
    return " ".join(text.split())[:200]


class DiagError(HostError):
    """The check's `error`: DCGM could not prove the node. Carries the remedy and the data (with
    its `action`) into the result, as an error result is always raised, never returned."""

    def __init__(self, summary: str, remedy: str, data: Mapping[str, Any], evidence: Sequence[str] = ()) -> None:
        super().__init__("", summary)
        self.remedy, self.data, self.evidence = remedy, dict(data), tuple(evidence)


def _error(summary: str, remedy: str, data: Mapping[str, Any], evidence: Sequence[str] = ()) -> NoReturn:
    raise DiagError(summary, remedy, data, evidence)


_COULD_NOT_RUN_TEXT = {
    "no_hostengine": (
        "no DCGM host engine answers: nv-hostengine is not running or not reachable",
        "`systemctl enable --now nvidia-dcgm` (it runs nv-hostengine); `journalctl -u nvidia-dcgm` says why it stopped",
    ),
    "plugins": (
        "DCGM's diagnostic plugins do not load",
        "install the datacenter-gpu-manager-4-cudaNN package for the driver's CUDA major (`nvidia-smi` shows it), "
        "then restart nvidia-dcgm",
    ),
    "diag_error": (
        "DCGM's diagnostic returned an error instead of results",
        "read nv-hostengine's log (/var/log/nvidia-dcgm/nv-hostengine.log) and rerun",
    ),
}


def judge(
    run: DiagRun, *, level: int, exclude: Sequence[str], data: Mapping[str, Any], exit_code: int | None
) -> Result:
    """A read diagnostic run -> the check's verdict (pure: the check API's tests call it too);
    DiagError for an `error`."""
    data = {**data, "format": run.format, "dcgm_version": run.version or None, "driver": run.driver or None}
    if run.could_not_run:
        what, remedy = _COULD_NOT_RUN_TEXT[run.could_not_run]
        problem = {"kind": run.could_not_run, "test": None, "entity": None, "status": None, "message": run.message}
        problem["action"] = FIX_CONFIG
        _error(
            f"DCGM could not run the diagnostic: {what}: {run.message}",
            remedy,
            {**data, "results": [], "problems": [problem], "action": FIX_CONFIG},
        )
    excluded = {_key(name) for name in exclude}
    judged = [r for r in run.results if _key(r.test) not in excluded]
    left_out = sorted({r.test for r in run.results if _key(r.test) in excluded})
    evidence = [
        f"DCGM {run.version or '(version not shown)'}, driver {run.driver or '(not shown)'}, {run.format} output"
    ]
    if left_out:
        evidence.append("excluded by the profile (ran, not judged): " + ", ".join(left_out))
    problems: list[dict[str, Any]] = []
    tests: dict[str, list[TestResult]] = {}
    for r in judged:
        tests.setdefault(r.test, []).append(r)
    for name, results in tests.items():
        summary = [r for r in results if not r.entity]
        entities = [r for r in results if r.entity]
        test_words = [w for r in summary for w in r.warnings]
        evidence.append(
            f"{name}: "
            + (", ".join(f"{r.entity} {r.status}" for r in entities) or " / ".join(r.status for r in summary))
        )
        bad_entities = [r for r in entities if r.status != "Pass"]
        for r in bad_entities:
            problems.append(_problem(r, list(r.warnings) or _about(test_words, r.entity)))
        for r in summary:
            if r.status == "Pass":
                continue
            if any(e.status == r.status for e in bad_entities):
                continue  # the test's own status repeats its entities'
            problems.append(_problem(r, list(r.warnings)))
    if run.format == "text" and not run.complete:
        problems.append(
            {
                "kind": "truncated",
                "test": None,
                "entity": None,
                "status": None,
                "message": "the result table ends before its closing border: the output was cut",
                "action": None,
            }
        )
    data = {**data, "results": [r.to_json() for r in run.results], "excluded": left_out, "problems": problems}
    if not judged:
        _error(
            "no test result left to judge" + (f" (all excluded: {', '.join(left_out)})" if left_out else ""),
            "exclude fewer tests",
            {**data, "action": None},
            evidence,
        )
    fails = [p for p in problems if p["kind"] == "fail"]
    errors = [p for p in problems if p["kind"] not in ("fail", "warn")]
    warns = [p for p in problems if p["kind"] == "warn"]
    if fails:
        return fail(
            "; ".join(_said(p) for p in fails) + _also(errors),
            remedy=_remedy(fails),
            data=data,
            evidence=evidence,
            action=_action(fails) or "",
        )
    if errors:
        _error(
            "not proven: " + "; ".join(_said(p) for p in errors),
            _remedy(errors),
            {**data, "action": _action(errors)},
            evidence,
        )
    if exit_code not in (0, None):
        _error(
            f"dcgmi exited {exit_code} although every test it reported passed",
            "rerun `dcgmi diag` by hand and read nv-hostengine's log",
            {**data, "action": None},
            evidence,
        )
    gpus = sorted({r.entity for r in judged if r.entity})
    on = f" on {', '.join(gpus)}" if gpus else ""
    if warns:
        return warn(
            "; ".join(_said(p) for p in warns),
            remedy=_remedy(warns),
            data=data,
            evidence=evidence,
            action=_action(warns) or "",
        )
    return ok(
        f"level {level}: {len(tests)} tests passed{on} (DCGM {run.version or 'version not shown'})",
        data=data,
        evidence=evidence,
    )


def _about(words: list[str], entity: str) -> list[str]:
    """The test's own warnings about this GPU (3.x puts them under the test), else all of them."""
    number = entity.split()[-1]
    mine = [w for w in words if re.search(rf"\bGPU\s*{re.escape(number)}\b", w)]
    return mine or words


def _problem(r: TestResult, words: list[str]) -> dict[str, Any]:
    message = " / ".join(words) or "(DCGM gave no message)"
    kind, action = "fail", REPLACE_HW
    if r.status in ("Skip", "Not Run"):
        kind, action = ("skipped" if r.status == "Skip" else "not_run"), FIX_CONFIG
    elif r.status == "Warn":
        kind, action = "warn", (FIX_CONFIG if _key(r.test) in _CONFIG_TESTS else REPLACE_HW)
    elif _BUSY.search(message):
        kind, action = "busy", RESET_GPU
    elif _ALLOC.search(message):
        kind, action = "allocation", RESET_GPU
    elif _INTERNAL.search(message):
        kind, action = "internal_error", FIX_CONFIG
    elif _key(r.test) in _CONFIG_TESTS or r.category.lower() in ("deployment", "software"):
        action = FIX_CONFIG
    return {
        "kind": kind,
        "test": r.test,
        "entity": r.entity or None,
        "status": r.status,
        "message": message,
        "action": action,
    }


_KIND_WORDS = {
    "fail": "failed",
    "warn": "warned",
    "skipped": "was skipped",
    "not_run": "was not run",
    "busy": "could not run: the GPU is busy or unavailable",
    "allocation": "could not run: memory could not be allocated",
    "internal_error": "could not run: DCGM's test helper failed",
}


def _said(p: Mapping[str, Any]) -> str:
    if p["test"] is None:
        return str(p["message"])
    where = f" on {p['entity']}" if p["entity"] else ""
    return f"{p['test']}{where} {_KIND_WORDS[p['kind']]}: {p['message']}"


def _also(errors: list[dict[str, Any]]) -> str:
    return f" (and {len(errors)} test result(s) not proven)" if errors else ""


def _action(problems: list[dict[str, Any]]) -> str | None:
    actions = {p["action"] for p in problems if p["action"]}
    return next((a for a in _ACTION_RANK if a in actions), None)


def _remedy(problems: list[dict[str, Any]]) -> str:
    action = _action(problems)
    if action == REPLACE_HW:
        return "reset the GPU (`nvidia-smi -r -i N`) and rerun the diagnostic once; a second failure means replace it"
    if action == RESET_GPU:
        return "stop what holds the GPU (`nvidia-smi` lists its processes), reset it (`nvidia-smi -r -i N`), rerun"
    if any(p["kind"] == "internal_error" for p in problems):
        return (
            "DCGM's own test helper failed: check DCGM's install for this CUDA (datacenter-gpu-manager-4-cudaNN), "
            "restart nvidia-dcgm and rerun"
        )
    return "do what DCGM's message says, then rerun the diagnostic"


__all__ = ["DiagError", "diag", "diag_argv", "judge", "validate"]
