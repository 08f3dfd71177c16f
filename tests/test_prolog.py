"""`clustercheck prolog` as slurmd runs it: verdicts, exit codes, environment, budget, logging.

Every test runs the real CLI in a subprocess, against the fixtures in fixtures/prolog-cluster/
(replayed) or this node (local), with a temporary state file and a socket standing in for
/dev/log. The real-Slurm side (slurmd running it as Prolog=) is in test_slurm_integration.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import FIXTURES, REPO
from tests.slurm_cluster import SyslogSink

from clustercheck import slurm
from clustercheck.result import CheckResult, Status

CLUSTER = FIXTURES / "prolog-cluster"
HEALTHY = CLUSTER / "healthy"
MEMORY_REASON = "clustercheck: node.memory: 15.7 GiB of memory, expected at least 20 GiB"


def prolog(
    *args: str | Path, sink: SyslogSink | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m clustercheck prolog ARGS`, with the Slurm prolog variables in `env` only."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_"))}
    if "--syslog-socket" not in args:  # never the machine's real /dev/log
        args = (*args, "--syslog-socket", str(sink.path) if sink else "")
    return subprocess.run(
        [sys.executable, "-m", "clustercheck", "prolog", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env={**base, **(env or {})},
    )


def state_of(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


# -- verdicts -----------------------------------------------------------------------------------


def test_healthy_node_passes_quietly(tmp_path: Path, sink: SyslogSink) -> None:
    env = {"SLURMD_NODENAME": "gpu101", "SLURM_JOB_ID": "4242", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
    proc = prolog("--replay", HEALTHY, "--state-file", tmp_path / "prolog-{node}.json", sink=sink, env=env)
    assert proc.returncode == 0, proc.stderr
    state = state_of(tmp_path / "prolog-gpu101.json")
    assert (state["verdict"], state["exit_code"], state["reason"]) == ("pass", 0, "")
    assert state["profile"] == "site-prolog"
    assert [c["status"] for c in state["checks"]] == ["ok"] * 4
    assert state["job"]["job_id"] == "4242" and state["job"]["context"] == "prolog_slurmd"
    (line,) = sink.read()
    assert line.startswith("<30>")  # daemon.info
    assert "clustercheck[" in line and "prolog node gpu101, job 4242: pass (4 ok)" in line


def test_failed_check_exits_non_zero_with_the_reason_in_syslog_and_state(tmp_path: Path, sink: SyslogSink) -> None:
    env = {"SLURMD_NODENAME": "n7", "SLURM_JOB_ID": "99"}
    proc = prolog("--replay", CLUSTER / "dimm-lost", "--state-file", tmp_path / "s.json", sink=sink, env=env)
    assert proc.returncode == 2
    assert f"FAIL, the node must not run the job: {MEMORY_REASON}" in proc.stdout
    state = state_of(tmp_path / "s.json")
    assert (state["verdict"], state["reason"], state["node"]) == ("fail", MEMORY_REASON, "n7")
    (line,) = sink.read()
    assert line.startswith("<27>") and "prolog node n7, job 99: FAIL" in line and MEMORY_REASON in line


@pytest.mark.parametrize(
    ("fixture", "noted"),
    [
        ("kernel-warning", "node.kernel warn: kernel 6.18.44-fc-v595 is tainted: W"),
        ("vm-no-modules", "node.modules error: cannot tell: /proc/modules is absent on the node"),
    ],
)
def test_warnings_and_checks_that_cannot_tell_let_the_job_run_but_are_logged(
    tmp_path: Path, sink: SyslogSink, fixture: str, noted: str
) -> None:
    proc = prolog("--replay", CLUSTER / fixture, "--state-file", tmp_path / "s.json", sink=sink)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert state_of(tmp_path / "s.json")["verdict"] == "pass"
    (line,) = sink.read()
    assert line.startswith("<28>") and noted in line  # daemon.warning


def test_every_failed_check_is_counted_in_the_reason() -> None:
    failed = [
        CheckResult("node.memory", Status.FAIL, "15.7 GiB of memory, expected at least 20 GiB"),
        CheckResult("node.kernel", Status.FAIL, "kernel is tainted: D"),
    ]
    assert slurm.drain_reason(failed) == f"{MEMORY_REASON} (+1 more failed)"


# -- the Slurm prolog environment ---------------------------------------------------------------


def test_job_environment_is_read_and_recorded(tmp_path: Path) -> None:
    env = {
        "SLURMD_NODENAME": "gpu101",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "gpu[101-104]",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_PARTITION": "h100",
        "SLURM_JOB_GPUS": "1,2",
        "CUDA_VISIBLE_DEVICES": "1,2",
    }
    proc = prolog("--replay", HEALTHY, "--state-file", tmp_path / "{node}.json", "--syslog-socket", "", env=env)
    assert proc.returncode == 0, proc.stderr
    job = state_of(tmp_path / "gpu101.json")["job"]
    assert job == {
        "job_id": "7",
        "node": "gpu101",
        "nodelist": "gpu[101-104]",
        "user": "alice",
        "partition": "h100",
        "context": None,
        "gpus": [1, 2],
        "cuda_visible_devices": ["1", "2"],
        "problems": [],
    }


def test_a_garbled_gpu_variable_is_logged_not_fatal(tmp_path: Path, sink: SyslogSink) -> None:
    env = {"SLURMD_NODENAME": "gpu101", "SLURM_JOB_GPUS": "gpu:0,oops"}
    proc = prolog("--replay", HEALTHY, "--state-file", tmp_path / "s.json", sink=sink, env=env)
    assert proc.returncode == 0
    job = state_of(tmp_path / "s.json")["job"]
    assert job["gpus"] is None
    assert job["problems"] == ["SLURM_JOB_GPUS='gpu:0,oops' is not a comma-separated list of GPU indices"]
    (line,) = sink.read()
    assert line.startswith("<28>") and "SLURM_JOB_GPUS='gpu:0,oops'" in line


def test_gpu_indices_come_from_slurm_job_gpus_then_cuda_visible_devices() -> None:
    ctx = slurm.JobContext.from_env
    assert ctx({"SLURM_JOB_GPUS": "0,3", "CUDA_VISIBLE_DEVICES": "1"}).gpus == (0, 3)
    assert ctx({"CUDA_VISIBLE_DEVICES": "2,5"}).gpus == (2, 5)
    uuids = ctx({"CUDA_VISIBLE_DEVICES": "GPU-6f2c,MIG-1a2b"})
    assert uuids.gpus is None and uuids.cuda_visible_devices == ("GPU-6f2c", "MIG-1a2b") and not uuids.problems
    assert ctx({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}).gpus is None
    assert ctx({}).gpus is None and ctx({}).job_id is None
    assert ctx({"SLURM_JOBID": "12"}).job_id == "12"


@given(
    st.dictionaries(
        st.sampled_from(["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURMD_NODENAME"]), st.text()
    )
)
@settings(max_examples=300, deadline=None)
def test_any_environment_reads_without_raising(env: dict[str, str]) -> None:
    job = slurm.JobContext.from_env(env)
    json.dumps(job.to_json())
    assert job.gpus is None or all(isinstance(g, int) and g >= 0 for g in job.gpus)


# -- never calls Slurm's commands ----------------------------------------------------------------

SITE_CHECK = '''
from clustercheck import Host, Result, check, ok


@check
def asks_slurm(host: Host) -> Result:
    """Asks slurmctld about this node (which a prolog must never do)."""
    host.output("scontrol", "show", "node")
    return ok("asked scontrol")


@check
def asks_in_a_script(host: Host) -> Result:
    """Asks squeue from a shell script."""
    host.output("sh", "-c", "squeue -h -w $(hostname) | wc -l")
    return ok("asked squeue")
'''


def test_prolog_refuses_to_run_slurm_commands(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text(SITE_CHECK)
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  site.asks_slurm:\n  site.asks_in_a_script:\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "called"
    for name in ("scontrol", "squeue"):  # stand-ins that leave a mark when run
        fake = bin_dir / name
        fake.write_text(f'#!/bin/sh\necho "{name} $*" >> {marker}\n')
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = f"{bin_dir}:{os.environ['PATH']}"
    args = ("--checks", tmp_path / "checks", "--profile", profile)

    proc = prolog(*args, "--state-file", tmp_path / "s.json", "--syslog-socket", "", env={"PATH": path})
    assert proc.returncode == 0, proc.stderr  # an error is not a reason to drain
    checks = state_of(tmp_path / "s.json")["checks"]
    assert [c["status"] for c in checks] == ["error", "error"]
    assert "`scontrol show node` was not run: a prolog must not call Slurm commands" in checks[0]["summary"]
    assert "such as squeue" in checks[1]["summary"]
    assert not marker.exists()
    # the same checks under `run` do reach the stand-ins: the prolog's refusal is what kept them out
    run = subprocess.run(
        [sys.executable, "-m", "clustercheck", "run", "--local", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert marker.read_text().splitlines() == ["scontrol show node", "squeue -h -w " + os.uname().nodename]


def test_no_path_in_the_environment_still_finds_commands(tmp_path: Path) -> None:
    # slurmd gives the prolog no PATH (domain-facts §D.1)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text(
        "from clustercheck import Host, Result, check, ok\n\n\n"
        "@check\ndef uname(host: Host) -> Result:\n"
        '    """Runs uname."""\n'
        '    return ok(host.output("uname", "-s").strip())\n'
    )
    (tmp_path / "p.yaml").write_text("checks:\n  site.uname:\n")
    base = {k: v for k, v in os.environ.items() if k != "PATH"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercheck",
            "prolog",
            "--checks",
            str(tmp_path / "checks"),
            "--profile",
            str(tmp_path / "p.yaml"),
            "--state-file",
            str(tmp_path / "s.json"),
            "--syslog-socket",
            "",
        ],
        capture_output=True,
        text=True,
        env=base,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert state_of(tmp_path / "s.json")["checks"][0] == {"id": "site.uname", "status": "ok", "summary": "Linux"}


# -- the hard budget -------------------------------------------------------------------------------


def test_a_hanging_check_is_cut_at_the_budget(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text(
        "from clustercheck import Host, Result, check, ok\n\n\n"
        "@check(timeout=60)\ndef hangs(host: Host) -> Result:\n"
        '    """Waits on a dead NFS server."""\n'
        '    host.run("sleep", "30", timeout=60)\n'
        '    return ok("done")\n'
    )
    (tmp_path / "p.yaml").write_text("checks:\n  node.cpu:\n  site.hangs:\n")
    start = time.monotonic()
    proc = prolog(
        "--checks", tmp_path / "checks", "--profile", tmp_path / "p.yaml", "--budget", "3",
        "--state-file", tmp_path / "s.json", "--syslog-socket", "",
    )  # fmt: skip
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert took < 8, f"took {took:.1f} s with a 3 s budget"
    assert "site.hangs: error: not finished" in proc.stdout
    assert subprocess.run(["pgrep", "-f", "^sleep 30$"], capture_output=True).returncode == 1  # killed


@pytest.mark.parametrize(("policy", "code"), [("pass", 0), ("fail", 70)])
def test_a_hang_outside_the_checks_ends_at_the_budget_by_policy(tmp_path: Path, policy: str, code: int) -> None:
    # a site check module on a hung mount: the import itself never returns
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "site.py").write_text("import time\n\ntime.sleep(30)\n")
    start = time.monotonic()
    proc = prolog(
        "--checks", tmp_path / "checks", "--budget", "1", "--on-internal-error", policy,
        "--state-file", tmp_path / "s.json", "--syslog-socket", "",
    )  # fmt: skip
    assert time.monotonic() - start < 5
    assert proc.returncode == code
    assert "the 1 s budget ran out before the checks could be judged" in proc.stderr
    state = state_of(tmp_path / "s.json")
    assert state["verdict"] == "internal-error" and state["exit_code"] == code
    assert state["reason"] == (
        "" if code == 0 else "clustercheck: internal error: the 1 s budget ran out before the checks could be judged"
    )


# -- clustercheck's own errors: --on-internal-error -------------------------------------------------

CRASH = (
    "import sys\n"
    "from clustercheck import runner\n"
    "from clustercheck.main import main\n"
    "def broken(*a, **k):\n"
    "    raise RuntimeError('a bug in clustercheck')\n"
    "runner.run_profile = broken\n"
    "main(sys.argv[1:])\n"
)


@pytest.mark.parametrize(("policy", "code"), [("pass", 0), ("fail", 70)])
def test_a_bug_in_clustercheck_passes_the_node_unless_told_otherwise(
    tmp_path: Path, sink: SyslogSink, policy: str, code: int
) -> None:
    args = ["prolog", "--replay", str(HEALTHY), "--state-file", str(tmp_path / "s.json")]
    args += ["--syslog-socket", str(sink.path), "--on-internal-error", policy]
    proc = subprocess.run([sys.executable, "-c", CRASH, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == code
    assert "INTERNAL ERROR, could not judge the node: RuntimeError: a bug in clustercheck" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert state_of(tmp_path / "s.json")["verdict"] == "internal-error"
    (line,) = sink.read()
    assert line.startswith("<27>") and ("passing the node" if code == 0 else "Slurm drains it") in line


@pytest.mark.parametrize(("policy", "code"), [("pass", 0), ("fail", 64)])
def test_a_broken_profile_is_an_internal_error_too(tmp_path: Path, policy: str, code: int) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  node.memroy: {}\n")
    proc = prolog("--profile", profile, "--on-internal-error", policy, "--state-file", tmp_path / "s.json")
    assert proc.returncode == code
    assert "unknown check 'node.memroy'" in proc.stderr and "did you mean node.memory" in proc.stderr


def test_replay_wants_one_node(tmp_path: Path) -> None:
    proc = prolog("--replay", CLUSTER, "--on-internal-error", "fail", "--state-file", tmp_path / "s.json")
    assert proc.returncode == 64
    assert "holds 5 fixtures; give the folder of one node" in proc.stderr


def test_an_unwritable_state_file_does_not_change_the_verdict(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    proc = prolog("--replay", CLUSTER / "dimm-lost", "--state-file", tmp_path / "file" / "s.json")
    assert proc.returncode == 2
    assert "could not be written" in proc.stdout


def test_bad_options_follow_the_internal_error_policy(tmp_path: Path) -> None:
    # a typo on the Prolog= line must not drain every node: it is clustercheck's fault, not the node's
    for args in (["--budget", "soon"], ["--on-internal-error", "maybe"], ["--no-such-option"], ["--budget"]):
        proc = prolog(*args, "--state-file", tmp_path / "s.json")
        assert proc.returncode == 0, args
        assert "INTERNAL ERROR, could not judge the node: bad command line" in proc.stderr, args
        assert "Traceback" not in proc.stderr
        assert state_of(tmp_path / "s.json")["verdict"] == "internal-error"
        if "--on-internal-error" not in args:  # a site that chose fail gets 64 (EX_USAGE): Slurm drains
            failing = prolog(*args, "--on-internal-error", "fail", "--state-file", tmp_path / "s.json")
            assert failing.returncode == 64, args


# -- the fast path ----------------------------------------------------------------------------------


def test_prolog_imports_neither_typer_nor_rich_nor_paramiko(tmp_path: Path) -> None:
    code = (
        "import atexit, sys\n"
        "from clustercheck.main import main\n"
        "heavy = ('typer', 'rich', 'paramiko', 'pydantic', 'psutil')\n"
        "atexit.register(lambda: print('LOADED', [m for m in heavy if m in sys.modules], file=sys.stderr))\n"
        f"main(['prolog', '--state-file', {str(tmp_path / 's.json')!r}, '--syslog-socket', ''])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "LOADED []" in proc.stderr, proc.stderr
    assert state_of(tmp_path / "s.json")["profile"] == "prolog"


def test_fast_path_and_typer_path_agree(tmp_path: Path) -> None:
    env = {"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "3"}
    fast = prolog("--replay", CLUSTER / "dimm-lost", "--state-file", tmp_path / "fast.json", "--budget=5", env=env)
    args = ["prolog", "--replay", str(CLUSTER / "dimm-lost"), "--state-file", str(tmp_path / "typer.json")]
    args += ["--budget", "5", "--syslog-socket", ""]
    code = "import sys\nfrom clustercheck.cli import guarded\nfrom clustercheck.app import app\n"
    code += f"sys.exit(guarded(lambda: app(args={args!r}, prog_name='clustercheck', standalone_mode=False)))\n"
    typer_path = subprocess.run(  # the Typer command itself (main() hands it only --help)
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=60
    )
    assert fast.returncode == typer_path.returncode == 2, typer_path.stderr
    a, b = state_of(tmp_path / "fast.json"), state_of(tmp_path / "typer.json")
    for key in ("verdict", "reason", "checks", "node", "job", "budget_s", "profile"):
        assert a[key] == b[key], key


def test_a_closed_stdout_never_fails_the_prolog(tmp_path: Path) -> None:
    """slurmd may run the Prolog with its output closed: that is no fault of the node's, so a
    healthy node still passes (exit 0, no drain), and a broken one still fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_"))}
    env.update(SLURMD_NODENAME="n1", SLURM_JOB_ID="4")
    codes = {}
    for name in ("healthy", "dimm-lost"):
        read_end, write_end = os.pipe()
        os.close(read_end)
        argv = ["prolog", "--replay", str(CLUSTER / name), "--state-file", str(tmp_path / f"{name}.json")]
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "clustercheck", *argv, "--syslog-socket", ""],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=env,
                timeout=60,
            )
        finally:
            os.close(write_end)
        codes[name] = proc.returncode
        assert "Traceback" not in proc.stderr
    assert codes == {"healthy": 0, "dimm-lost": 2}
    assert state_of(tmp_path / "healthy.json")["verdict"] == "pass"


def test_prolog_has_help() -> None:
    proc = prolog("--help")
    assert proc.returncode == 0
    assert "--on-internal-error" in proc.stdout and "--budget" in proc.stdout


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--budget", "0.01"], "--budget '0.01' is not a number of seconds from 0.1 on"),
        (["--budget", "5", "--budget", "6"], "--budget given twice"),
        (["--on-internal-error", "sometimes"], "--on-internal-error 'sometimes' is not pass or fail"),
        (["--replay"], "--replay needs a value"),
        (["-v"], "unknown option '-v'"),
        (["extra"], "unexpected argument 'extra'"),
    ],
)
def test_the_prolog_parser_names_every_mistake(args: list[str], problem: str) -> None:
    assert slurm.parse_prolog_args(args)[1] == problem


def test_the_prolog_parser_keeps_the_policy_it_could_read_beside_a_mistake() -> None:
    opts, problem = slurm.parse_prolog_args(["--on-internal-error", "fail", "--bogus", "--state-file=x"])
    assert (opts.on_internal_error, opts.state_file, problem) == ("fail", "x", "unknown option '--bogus'")


def test_the_prolog_parser_reads_every_option() -> None:
    opts, problem = slurm.parse_prolog_args(
        [
            "-p",
            "site",
            "--budget=4",
            "--replay",
            "f",
            "--checks",
            "a",
            "--checks=b",
            "--state-file",
            "s",
            "--on-internal-error",
            "fail",
            "--syslog-socket",
            "",
            "--dry-run",
            "--trust-fixture-code",
        ]
    )
    assert problem is None
    assert opts == slurm.PrologOptions(
        profile="site",
        budget=4.0,
        replay=Path("f"),
        checks_dirs=(Path("a"), Path("b")),
        state_file="s",
        on_internal_error="fail",
        syslog_socket="",
        dry_run=True,
        trust_fixture_code=True,
    )


# -- reasons and the state file path ------------------------------------------------------------------


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_sanitized_reasons_are_one_short_line_of_printable_ascii(text: str) -> None:
    reason = slurm.sanitize_reason(text)
    assert len(reason) <= slurm.REASON_LIMIT
    assert all(" " <= ch <= "~" for ch in reason)
    assert reason == reason.strip() and "  " not in reason


def test_sanitize_reason_examples() -> None:
    assert slurm.sanitize_reason("a\nb\t c\x00d") == "a b c d"
    assert slurm.sanitize_reason("≥ 8 GPUs … µs") == ">= 8 GPUs ... us"
    assert slurm.sanitize_reason("x" * 300) == "x" * 197 + "..."
    long = [CheckResult("gpu.count", Status.FAIL, "word " * 100)]
    reason = slurm.drain_reason(long)
    assert reason.startswith("clustercheck: gpu.count: word word") and reason.endswith("...")
    assert len(reason) <= slurm.REASON_LIMIT


def test_state_path_names_the_node() -> None:
    assert slurm.state_path("/run/cc/prolog-{node}.json", "gpu001") == Path("/run/cc/prolog-gpu001.json")
    assert slurm.state_path("/run/cc/prolog.json", "gpu001") == Path("/run/cc/prolog.json")
    assert slurm.state_path("/x/{node}", "a/b") == Path("/x/a_b")


def test_slurm_commands_are_recognized_in_argv_and_scripts() -> None:
    assert slurm.slurm_command(["/usr/bin/scontrol", "ping"]) == "scontrol"
    assert slurm.slurm_command(["sh", "-c", "x=$(/usr/bin/sinfo -h); echo $x"]) == "sinfo"
    assert slurm.slurm_command(["cat", "/etc/slurm/slurm.conf"]) is None
    assert slurm.slurm_command(["sh", "-c", "grep -c scontrolx /proc/x"]) is None
    assert slurm.slurm_command([]) is None


def test_bundled_gpu_prolog_judges_counters_only_where_an_rdma_stack_is(tmp_path: Path) -> None:
    """The bundled prolog runs rdma.counters (since the previous run) on every node: the recorded GPU node
    without HCAs (no /proc/modules, no /sys/class/infiniband) skips it from those two reads, with no
    gather recorded or run, and its verdict is the one it had before the check was added."""
    env = {"SLURMD_NODENAME": "gpu001", "SLURM_JOB_ID": "77"}
    node = FIXTURES / "prolog-gpu" / "driver-gone"
    assert not [p for p in (node / "commands").iterdir() if p.name.startswith("sh_")]  # no gather recorded
    proc = prolog("--replay", node, "--state-file", tmp_path / "s.json", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # gpu.count fails: the driver is gone
    checks = {c["id"]: c for c in state_of(tmp_path / "s.json")["checks"]}
    counters = checks["rdma.counters"]
    assert counters["status"] == "skip"
    assert counters["summary"].startswith("no RDMA stack on this node (no ib_core module, no /sys/class/infiniband)")
    assert [c["id"] for c in checks.values() if c["status"] == "fail"] == ["gpu.count"]
