"""`clustercheck sweep` on the real loopback Slurm (tests/slurm_cluster.py), and its pure decisions.

The node side is the real `clustercheck run --local` inside each srun allocation, with a profile of
site checks (a --checks folder) that pass, fail, measure or sleep as each test arranges for the
node they run on (SLURMD_NODENAME): the stand-in is the hardware, never Slurm. Every drain and
resume is asserted on what `sinfo -R` and `scontrol show node` say. Each test owns its nodes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import FIXTURES
from tests.slurm_cluster import CLUSTERCHECK, SlurmCluster, missing_binaries, running
from tests.sshd import Fleet

from clustercheck import sweep as logic
from clustercheck.result import CheckResult, Status
from clustercheck.slurm import Decision, NodeState

SITE = '''"""Stand-in site checks of the sweep tests: each does what the test arranged for its node."""

from clustercheck import Host, Result, check, fail, ok


def _node(host: Host) -> str:
    """The Slurm node it runs on; over SSH, the address it was reached at."""
    return host.output("sh", "-c", 'echo "${SLURMD_NODENAME:-$(set -- $SSH_CONNECTION; echo $3)}"').strip()


@check(action="REPLACE_HW", timeout=120)
def hw(host: Host, *, flags: str) -> Result:
    """Fails where the test wrote `fail`; sleeps where it wrote `sleep N`."""
    node = _node(host)
    said = (host.read_optional(f"{flags}/{node}.hw") or "ok").split()
    if said[:1] == ["fail"]:
        return fail(f"the DIMM the test pulled from {node} is missing")
    if said[:1] == ["sleep"]:
        host.run("sleep", said[1], timeout=float(said[1]) + 5)
    gpus = host.run("printenv", "CUDA_VISIBLE_DEVICES").stdout.strip() or "none"
    return ok(f"{node} is whole, GPUs {gpus}")


@check(action="INVESTIGATE")
def bw(host: Host, *, flags: str, min_gb_s: float = 50.0) -> Result:
    """A performance measurement: each run takes the next figure the test wrote (default 100)."""
    node = _node(host)
    script = f'f={flags}/{node}.bw; [ -s "$f" ] || exit 0; head -n1 "$f"; sed -i 1d "$f"'
    figure = float(host.run("sh", "-c", script).stdout.strip() or 100)
    data = {"gb_s": figure, "performance": True}
    if figure < min_gb_s:
        return fail(f"{figure:g} GB/s, expected at least {min_gb_s:g} GB/s", data=data)
    return ok(f"{figure:g} GB/s", data=data)
'''

_missing = missing_binaries()
needs_slurm = pytest.mark.skipif(
    bool(_missing) or os.geteuid() != 0,
    reason=f"needs Debian's slurm-wlm and munge ({', '.join(_missing) or 'found'}) and root (slurmd starts jobs)",
)


class Site:
    """The stand-in site: its checks folder, profile, per-node arrangements and sweep records."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "checks").mkdir(parents=True)
        (root / "checks" / "site.py").write_text(SITE)
        (root / "flags").mkdir()
        self.profile = root / "sweep.yaml"
        flags = root / "flags"
        self.profile.write_text(f"checks:\n  site.hw:\n    flags: {flags}\n  site.bw:\n    flags: {flags}\n")

    def arrange(self, node: str, hw: str | None = None, bw: list[float] | None = None) -> None:
        if hw is not None:
            (self.root / "flags" / f"{node}.hw").write_text(hw)
        if bw is not None:
            (self.root / "flags" / f"{node}.bw").write_text("".join(f"{b:g}\n" for b in bw))

    def args(self, *extra: str | Path) -> list[str]:
        return [
            "sweep",
            *map(str, extra),
            "-p",
            str(self.profile),
            "--checks",
            str(self.root / "checks"),
            "--record-file",
            f"{self.root}/records/{{node}}.json",
            "--run-timeout",
            "90",
        ]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    if _missing or os.geteuid() != 0:
        pytest.skip("needs slurm-wlm, munge and root")
    nodes = ["w1", "w2", "w3", "w4", "w5", "w6", "w7"]
    with running(
        "cc-sweep-", nodes, FIXTURES / "prolog-cluster" / "healthy", cls=SlurmCluster, health_interval=0
    ) as cluster:
        yield cluster


@pytest.fixture
def site(tmp_path: Path) -> Site:
    tmp_path.chmod(0o755)
    return Site(tmp_path)


def sweep_json(slurm: SlurmCluster, site: Site, *nodes: str, extra: tuple[str, ...] = ()) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = site.root / f"sweep-{time.monotonic_ns()}.json"
    proc = slurm.clustercheck(*site.args(",".join(nodes), *extra, "--out-json", out), timeout=120)
    assert out.exists(), proc.stdout + proc.stderr + slurm.logs()
    return proc.returncode, json.loads(out.read_text())


@needs_slurm
def test_sweep_drains_the_failing_node_skips_a_busy_one_and_never_touches_an_admin_drain(
    slurm: SlurmCluster, site: Site
) -> None:
    site.arrange("w2", hw="fail")
    assert (
        slurm.run("scontrol", "update", "NodeName=w4", "State=DRAIN", "Reason=RMA 4711 do not resume").returncode == 0
    )
    busy = subprocess.Popen(
        ["srun", "-w", "w3", "-N1", "-J", "busy-w3", "sleep", "60"], env=slurm.env, stderr=subprocess.PIPE
    )
    try:
        slurm.wait_for(lambda: slurm.state("w3").startswith(("ALLOC", "MIX")), 20, "the job on w3")
        page = site.root / "sweep.html"
        code, doc = sweep_json(slurm, site, "w1", "w2", "w3", "w4", extra=("--out-html", str(page)))
        assert code == 2, doc["sweep"]
        html = page.read_text()  # the same merged report as a page: the drained node's action shown
        assert html.count('<tr class="host"') == 4 and '<code class="action">REPLACE_HW</code>' in html
        done = {n: o["done"] for n, o in doc["sweep"].items()}
        assert done == {"w1": "passed", "w2": "drained", "w3": "skipped", "w4": "skipped"}
        # the owned reason, with the failed check's action, as Slurm shows it
        reason = "clustercheck: site.hw: the DIMM the test pulled from w2 is missing action=REPLACE_HW"
        assert slurm.reason("w2") == reason and "DRAIN" in slurm.state("w2")
        assert "running a job" in doc["sweep"]["w3"]["why"] and busy.poll() is None  # the job runs on
        assert slurm.state("w3").startswith(("ALLOC", "MIX"))
        assert (
            slurm.reason("w4") == "RMA 4711 do not resume" and "not drained by this sweep" in doc["sweep"]["w4"]["why"]
        )
        assert "DRAIN" not in slurm.state("w1") and slurm.reason("w1") is None
        # one merged report: every node, its checks or why not, the fleet's groups with the action
        assert set(doc["hosts"]) == {"w1", "w2", "w3", "w4"}
        assert [c["id"] for c in doc["hosts"]["w1"]["checks"]] == ["site.hw", "site.bw"]
        # the run had the node's GPUs (gres/gpu: --exclusive alone gives none)
        gpus = "0,1,2" if slurm.gres else "none"
        assert doc["hosts"]["w1"]["checks"][0]["summary"] == f"w1 is whole, GPUs {gpus}"
        assert doc["hosts"]["w3"]["checks"][0]["id"] == logic.SWEEP_CHECK
        assert [(g["check"], g["hosts"], g["action"]) for g in doc["fleet"]["groups"]] == [
            ("site.hw", "w2", "REPLACE_HW")
        ]
        # the DIMM is back: the next sweep resumes its own drain, still leaves the admin's alone
        site.arrange("w2", hw="ok")
        code, doc = sweep_json(slurm, site, "w2", "w4")
        assert code == 0, doc["sweep"]
        assert doc["sweep"]["w2"]["done"] == "resumed" and doc["sweep"]["w4"]["done"] == "skipped"
        slurm.wait_for(lambda: "DRAIN" not in slurm.state("w2"), 10, "w2 to be resumed")
        assert slurm.reason("w2") is None and slurm.reason("w4") == "RMA 4711 do not resume"
        assert slurm.reservations() == []  # the retest's own reservation is gone
    finally:
        slurm.run("scancel", "-n", "busy-w3")
        busy.wait(30)
        slurm.run("scontrol", "update", "NodeName=w4", "State=RESUME")


@needs_slurm
def test_a_slow_measurement_is_measured_again_before_a_drain(slurm: SlurmCluster, site: Site) -> None:
    site.arrange("w5", bw=[10, 100])  # one slow run, then fine
    site.arrange("w6", bw=[10, 12])  # slow twice
    # inside a reservation it creates, the nodes named of the partition (srun --partition too)
    code, doc = sweep_json(slurm, site, "w5", "w6", extra=("--reservation", "cc-sweep-test", "--partition", "main"))
    assert code == 2, doc["sweep"]
    w5, w6 = doc["sweep"]["w5"], doc["sweep"]["w6"]
    assert (w5["done"], w5["passes"]) == ("passed", 2) and "DRAIN" not in slurm.state("w5")
    bw5 = next(c for c in doc["hosts"]["w5"]["checks"] if c["id"] == "site.bw")
    assert bw5["status"] == "ok" and bw5["data"]["first_pass"]["summary"].startswith("10 GB/s")
    assert (w6["done"], w6["passes"]) == ("drained", 2)
    assert slurm.reason("w6") == "clustercheck: site.bw: 12 GB/s, expected at least 50 GB/s action=INVESTIGATE"
    assert slurm.reservations() == []  # the reservation it created is deleted
    site.arrange("w6", bw=[100])
    code, doc = sweep_json(slurm, site, "w6")
    assert code == 0 and doc["sweep"]["w6"]["done"] == "resumed", doc["sweep"]


def sleeping(slurm: SlurmCluster) -> set[str]:
    """The nodes whose run, in a job slurmctld knows, is in its check's `sleep` (its environment
    names its job and node)."""
    jobs = {line.split()[0] for line in slurm.jobs()}
    nodes = set()
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or (proc / "cmdline").read_bytes().split(b"\0")[0] != b"sleep":
                continue
            env = dict(v.partition("=")[::2] for v in (proc / "environ").read_text(errors="replace").split("\0"))
        except OSError:
            continue
        if env.get("SLURM_JOB_ID") in jobs and "SLURMD_NODENAME" in env:
            nodes.add(env["SLURMD_NODENAME"])
    return nodes


@needs_slurm
@pytest.mark.parametrize("named", [True, False], ids=["reservation-it-creates", "reservation-per-retest"])
def test_sigterm_drains_again_what_it_resumed_and_leaves_no_reservation(
    slurm: SlurmCluster, site: Site, named: bool
) -> None:
    site.arrange("w7", hw="fail")
    code, _ = sweep_json(slurm, site, "w7")
    reason = slurm.reason("w7")
    assert code == 2 and reason is not None and reason.startswith("clustercheck: site.hw:")
    # fixed, but the retest hangs: the sweep resumes w7 inside its reservation, then is stopped
    site.arrange("w7", hw="sleep 60")
    site.arrange("w1", hw="sleep 60")
    reservation = ("--reservation", "cc-sweep-term") if named else ()
    proc = subprocess.Popen(
        [*CLUSTERCHECK, *site.args("w1,w7", *reservation)],
        env=slurm.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # both retests hanging in their check's sleep, not merely queued or being launched: a SIGTERM
        # while slurmd still launches a step leaves that srun waiting out the sweep's 15 s grace
        slurm.wait_for(
            lambda: sleeping(slurm) == {"w1", "w7"} and "DRAIN" not in slurm.state("w7"), 30, "both runs to start"
        )
        made = slurm.reservations()  # the one named, or w7's own for its retest
        assert made == ["cc-sweep-term"] if named else (len(made) == 1 and made[0].endswith("-w7")), made
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out + err
    assert "interrupted by SIGTERM" in err and "Traceback" not in err
    assert slurm.reason("w7") == reason and "DRAIN" in slurm.state("w7")  # drained again, with its reason
    assert "DRAIN" not in slurm.state("w1") and slurm.reason("w1") is None  # a fresh node: never drained
    assert slurm.reservations() == []
    slurm.wait_for(lambda: slurm.jobs() == [], 20, "the sweep's jobs to be gone")
    site.arrange("w7", hw="ok")
    site.arrange("w1", hw="ok")
    slurm.run("scontrol", "update", "NodeName=w7", "State=RESUME")  # for the next test's own records
    slurm.wait_for(lambda: all(slurm.state(n) == "IDLE" for n in ("w1", "w7")), 20, "w1 and w7 to be idle again")


@needs_slurm
def test_dry_run_of_a_partition_lists_what_it_would_test_and_changes_nothing(slurm: SlurmCluster, site: Site) -> None:
    proc = slurm.clustercheck(*site.args("--partition", "main", "--dry-run"), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for node in slurm.nodes:  # other tests may have left a node drained: each line follows its state
        state = slurm.state(node)
        said = f"{node}: would test: {node} is IDLE: idle" if state == "IDLE" else f"{node}: skipped: {node} is {state}"
        assert said in proc.stdout, proc.stdout
    assert slurm.jobs() == [] and slurm.reservations() == []


def test_bad_input_is_refused_before_any_node_is_touched(site: Site) -> None:
    from tests.helpers import cli

    missing = cli("sweep", "n[1-2]", "-p", site.root / "nope.yaml", "--record-file", site.root / "{node}.json")
    assert missing.returncode == 64 and "nope.yaml" in missing.stderr and "Traceback" not in missing.stderr
    both = cli("sweep", "n1", "--ssh", "127.0.0.2", "-p", site.profile)
    assert both.returncode == 64 and "--ssh HOSTLIST runs without Slurm" in both.stderr
    hostlist = cli("sweep", "n[1-", "-p", site.profile, "--checks", site.root / "checks")
    assert hostlist.returncode == 64 and "Traceback" not in hostlist.stderr, hostlist.stderr


def test_over_ssh_the_second_pass_holds_and_nothing_is_drained(fleet_sshd: Fleet, site: Site) -> None:
    from tests.helpers import cli

    (site.root / "flags").chmod(0o777)
    site.arrange("127.0.0.2", bw=[10, 100])
    site.arrange("127.0.0.3", hw="fail")
    out = site.root / "ssh.json"
    args = site.args()[1:]  # no Slurm: no record file is read or written
    proc = cli("sweep", "--ssh", "127.0.0.[2-3]", "--ssh-config", fleet_sshd.ssh_config, *args, "--out-json", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["sweep"]["127.0.0.2"]["passes"] == 2 and doc["hosts"]["127.0.0.2"]["status"] == "ok"
    assert doc["sweep"]["127.0.0.3"]["done"] == "left" and "nothing drained" in doc["sweep"]["127.0.0.3"]["why"]
    assert not (site.root / "records").exists()


# -- the pure decisions ---------------------------------------------------------------------------------


def _state(state: str, reason: str | None = None) -> NodeState:
    return NodeState("n1", state, reason, "root@2026-12-01T10:00:00" if reason else None)


def test_plan_tests_idle_nodes_only() -> None:
    assert logic.plan(_state("IDLE"), None).kind == "test"
    for busy in ("ALLOCATED", "MIXED", "IDLE+COMPLETING", "MIXED+DRAIN"):
        planned = logic.plan(_state(busy), None)
        assert planned.kind == "skip" and "job" in planned.why, busy
    for other in ("DOWN+NOT_RESPONDING", "IDLE+POWERED_DOWN", "IDLE+DRAIN", "IDLE+REBOOT_REQUESTED"):
        assert logic.plan(_state(other, "admin"), None).kind == "skip", other
    assert logic.plan(_state("IDLE+RESERVED"), None).kind == "skip"
    assert logic.plan(_state("IDLE+RESERVED"), None, reserved_ok=True).kind == "test"


def test_plan_retests_only_a_drain_its_record_proves() -> None:
    reason = "clustercheck: site.hw: broken action=REPLACE_HW"
    stamp = time.mktime(time.strptime("2026-12-01T10:00:00", "%Y-%m-%dT%H:%M:%S"))
    record = {"node": "n1", "drains": [{"reason": reason, "check": "site.hw", "timestamp": stamp}]}
    assert logic.plan(_state("IDLE+DRAIN", reason), record).kind == "retest"
    assert logic.plan(_state("IDLE+DRAIN", reason), None).kind == "skip"  # the words alone prove nothing
    assert logic.plan(_state("IDLE+DRAIN", reason + " HOLD"), record).kind == "skip"


def _result(check: str, status: Status, perf: bool = False, summary: str = "x") -> CheckResult:
    return CheckResult(check, status, summary, data={"performance": True} if perf else {})


def test_second_pass_only_when_every_failure_is_a_measurement() -> None:
    assert logic.needs_second_pass([_result("a", Status.FAIL, True), _result("b", Status.OK)])
    assert not logic.needs_second_pass([_result("a", Status.FAIL, True), _result("b", Status.FAIL)])
    assert not logic.needs_second_pass([_result("a", Status.OK, True)])


def test_merge_passes_lets_the_second_measurement_decide() -> None:
    first = [_result("bw", Status.FAIL, True, "10 GB/s"), _result("hw", Status.OK)]
    merged = logic.merge_passes(first, [_result("bw", Status.OK, True, "90 GB/s"), _result("hw", Status.OK)])
    assert merged[0].status is Status.OK and merged[0].data["first_pass"]["summary"] == "10 GB/s"
    again = logic.merge_passes(first, [_result("bw", Status.FAIL, True, "11 GB/s")])
    assert again[0].status is Status.FAIL and again[0].summary == "11 GB/s"
    # no second measurement: not enough to drain
    lost = logic.merge_passes(first, None)
    assert lost[0].status is Status.ERROR and "not enough to drain" in lost[0].summary


def test_retest_decision() -> None:
    before = _state("IDLE+DRAIN", "clustercheck: site.hw: broken")
    entry = {"check": "site.hw", "checks": ["site.hw"]}
    assert logic.retest_decision(Decision("resume", "passes"), before, entry).action == "none"
    again = logic.retest_decision(Decision("none", "could not tell"), before, entry)
    assert (again.action, again.reason, again.check) == ("drain", before.reason, "site.hw")
    new = logic.retest_decision(Decision("drain", "still", "clustercheck: site.hw: other"), before, entry)
    assert new.reason == "clustercheck: site.hw: other"


def test_node_gpus_reads_every_gres_form() -> None:
    for gres, want in (("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:4,nvme:1", 4), ("(null)", 0)):
        assert logic.node_gpus(f"NodeName=n1 Arch=x86_64\n   Gres={gres}\n") == want, gres
    assert logic.node_gpus("NodeName=n1\n   Gres=gpu:a100:2(S:0),gpu:v100:2(S:1)\n") == 4


def test_srun_is_exclusive_and_never_waits_for_a_busy_node() -> None:
    argv = logic.srun_argv("n1", ["cc", "run"], job_name="j", seconds=600, reservation="r", partition="gpu", gpus=8)
    assert "--gres=gpu:8" in argv
    assert argv[:3] == ["srun", "-w", "n1"] and "--exclusive" in argv and "--reservation=r" in argv
    assert any(a.startswith("--immediate=") for a in argv) and "--time=11" in argv and argv[-2:] == ["cc", "run"]
