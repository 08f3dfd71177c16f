"""A real Slurm cluster on loopback for the tests: munged, slurmctld and one slurmd per node.

Debian's slurm-wlm and munge (.ci/run installs them), run as root from a temporary folder
(docs/loopback-testing.md): munged with its own key and socket, a generated
slurm.conf with a port and a spool folder per node, every node at NodeAddr=127.0.0.1. Its
`Prolog=` runs `clustercheck prolog --replay <the fixture linked for that node>` and its
`HealthCheckProgram=` runs `clustercheck health` the same way, so a test switches a node between
a healthy and a broken fixture by moving a symlink. Every daemon is started in the foreground
by this process and stopped by its PID.

Also here: `SyslogSink`, a datagram socket that stands in for /dev/log.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "srun", "sinfo")
CLUSTERCHECK = [sys.executable, "-m", "clustercheck"]


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]


def which(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found is None:
        raise FileNotFoundError(name)
    return found


def short_tmpdir(prefix: str) -> Path:
    """A folder with a short path: a unix socket's path must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)  # munged refuses a socket in a folder others cannot search
    return path


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class SyslogSink:
    """A unix datagram socket standing in for /dev/log: collects what clustercheck logs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.lines: list[str] = []

    def read(self) -> list[str]:
        """Every line received so far (RFC 3164: `<PRI>Mmm dd hh:mm:ss clustercheck[PID]: text`)."""
        while True:
            try:
                self.lines.append(self.sock.recv(65536).decode("utf-8", "replace"))
            except BlockingIOError:
                return list(self.lines)

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


_PROLOG = """#!/bin/sh
# Prolog= of the test cluster: clustercheck prolog on the fixture linked for this node.
exec {python} -m clustercheck prolog --replay {root}/prolog/$SLURMD_NODENAME \\
    --state-file '{root}/state/prolog-{{node}}.json' --syslog-socket {root}/syslog.sock --budget 8
"""

_HEALTH = """#!/bin/sh
# HealthCheckProgram= of the test cluster: slurmd gives it no PATH and no SLURM_CONF.
export SLURM_CONF={root}/slurm.conf
[ -e {root}/health/$SLURMD_NODENAME ] || exit 0
exec {python} -m clustercheck health --replay {root}/health/$SLURMD_NODENAME \\
    --state-file '{root}/state/prolog-{{node}}.json' --syslog-socket {root}/syslog.sock --budget 20 \\
    >>{root}/log/health-$SLURMD_NODENAME.out 2>&1
"""


class SlurmCluster:
    """munged + slurmctld + one slurmd per node, all on 127.0.0.1, in `root`."""

    def __init__(self, root: Path, nodes: list[str], *, health_interval: int = 3, gpus: int = 3) -> None:
        self.root = root
        self.nodes = nodes
        self.health_interval = health_interval
        self.gpus = gpus
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.env["PATH"] = self.env.get("PATH", "") + ":/usr/sbin:/sbin"
        self.gres = False
        self.syslog: SyslogSink | None = None

    # -- setup ---------------------------------------------------------------------------
    def _write_config(self) -> None:
        r = self.root
        for d in ("state", "log", "prolog", "health", "dev", *(f"spool-{n}" for n in self.nodes)):
            (r / d).mkdir(parents=True, exist_ok=True)
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        # Fake GPUs for gres/gpu: slurmd wants character devices; /dev/null's numbers will do.
        # Creating device nodes needs CAP_MKNOD, which some containers lack: then no GRES.
        try:
            for i in range(self.gpus):
                os.mknod(r / "dev" / f"nvidia{i}", 0o600 | 0o020000, os.makedev(1, 3))
            self.gres = self.gpus > 0
        except (OSError, AttributeError):
            self.gres = False
        python = sys.executable
        (r / "prolog.sh").write_text(_PROLOG.format(python=python, root=r))
        (r / "health.sh").write_text(_HEALTH.format(python=python, root=r))
        for script in ("prolog.sh", "health.sh"):
            (r / script).chmod(0o755)
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        self.ctld_port = ctld_port
        gres = f" Gres=gpu:{self.gpus}" if self.gres else ""
        lines = [
            "ClusterName=cctest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r}/munge.sock",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool-%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "CommunicationParameters=NoInAddrAny",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            "MailProg=/bin/true",
            "DefMemPerNode=10",
            # a job that could not start when it came (its node just resumed, not yet responding)
            # is tried again within a second, not at the next backfill pass (30 s) or main pass (60 s)
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            f"Prolog={r}/prolog.sh",
            f"HealthCheckProgram={r}/health.sh",
            f"HealthCheckInterval={self.health_interval}",
            *(["GresTypes=gpu"] if self.gres else []),
            *(
                f"NodeName={n} NodeAddr=127.0.0.1 Port={p} CPUs=2 RealMemory=1000{gres} State=UNKNOWN"
                for n, p in zip(self.nodes, node_ports, strict=True)
            ),
            f"PartitionName=main Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        if self.gres:
            (r / "gres.conf").write_text(f"Name=gpu File={r}/dev/nvidia[0-{self.gpus - 1}]\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "wb")  # noqa: SIM115  (closed with the process)
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, start_new_session=True
        )
        log.close()

    def start(self, healthy_fixture: Path) -> None:
        self._write_config()
        for n in self.nodes:
            self.link("prolog", n, healthy_fixture)
        self.syslog = SyslogSink(self.root / "syslog.sock")
        r = self.root
        self._spawn(
            "munged",
            [
                which("munged"),
                "-F",
                f"--key-file={r}/munge.key",
                f"--socket={r}/munge.sock",
                f"--pid-file={r}/munged.pid",
                f"--log-file={r}/log/munged.log",
                f"--seed-file={r}/munged.seed",
            ],
        )
        self.wait_for(lambda: (r / "munge.sock").exists(), 15, "munged to create its socket")
        self._spawn("slurmctld", [which("slurmctld"), "-D", "-f", str(self.conf)])
        self.wait_for(lambda: self.run("scontrol", "ping").stdout.count("UP") > 0, 30, "slurmctld to answer")
        for n in self.nodes:
            self._spawn(f"slurmd-{n}", [which("slurmd"), "-D", "-N", n, "-f", str(self.conf)])
        self.wait_for(
            lambda: all(self.state(n).startswith("IDLE") and "NOT_RESPONDING" not in self.state(n) for n in self.nodes),
            45,
            "every slurmd to register",
        )

    def stop(self) -> list[str]:
        """Stop every daemon by its PID (TERM, then KILL); return those that would not die."""
        stubborn = []
        for name in sorted(self.procs, key=lambda k: (k == "munged", k == "slurmctld")):  # slurmd first
            proc = self.procs[name]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    try:
                        proc.wait(5)
                    except subprocess.TimeoutExpired:
                        stubborn.append(f"{name} (pid {proc.pid})")
        # slurmctld's helper (slurmscriptd) and job steps (slurmstepd) are children of what we
        # started, in its session: nothing of it may outlive the tests
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.syslog is not None:
            self.syslog.close()
        return stubborn

    # -- using it ----------------------------------------------------------------------------
    def run(
        self, *argv: str, timeout: float = 30, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}, check=False
        )

    def resume(self, *nodes: str) -> None:
        """Undo a test's drains of `nodes`, and wait until every node is idle for the next test."""
        for node in nodes:
            self.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        self.wait_for(lambda: all(self.state(n) == "IDLE" for n in self.nodes), 30, "every node to be idle again")

    def clustercheck(
        self, *args: str | Path, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`clustercheck ARGS` with the cluster's environment (and `env`: srun passes it on to the jobs)."""
        return self.run(*CLUSTERCHECK, *map(str, args), timeout=timeout, env=env)

    def health(self, node: str, fixture: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.clustercheck(
            "health",
            "--node",
            node,
            "--replay",
            fixture,
            "--state-file",
            f"{self.root}/state/prolog-{{node}}.json",
            "--syslog-socket",
            str(self.root / "syslog.sock"),
            *extra,
        )

    def link(self, kind: str, node: str, fixture: Path | None) -> None:
        """Point node's prolog (or health) fixture at `fixture`; None removes it."""
        path = self.root / kind / node
        path.unlink(missing_ok=True)
        if fixture is not None:
            path.symlink_to(fixture.resolve())

    def show(self, node: str) -> str:
        return self.run("scontrol", "show", "node", node).stdout

    def state(self, node: str) -> str:
        m = re.search(r"(?:^|\s)State=(\S+)", self.show(node))
        return m.group(1) if m else "?"

    def reason(self, node: str) -> str | None:
        """The drain reason as `sinfo -R` shows it (full width)."""
        out = self.run("sinfo", "-R", "-h", "-o", "%E|%N", "-n", node).stdout
        for line in out.splitlines():
            text, _, nodes = line.rpartition("|")
            if nodes.strip() == node:
                return text
        return None

    def reservations(self) -> list[str]:
        """The names of the reservations slurmctld holds (`scontrol show reservation`)."""
        out = self.run("scontrol", "show", "reservation").stdout
        return re.findall(r"(?m)^ReservationName=(\S+)", out)

    def jobs(self, name: str | None = None) -> list[str]:
        """`JOBID STATE NODES` of the jobs slurmctld knows (of job name `name`)."""
        argv = ["squeue", "-h", "-o", "%i %T %N", *(["-n", name] if name else [])]
        return [line for line in self.run(*argv).stdout.splitlines() if line.strip()]

    def prolog_state(self, node: str) -> dict[str, Any]:
        import json

        return dict(json.loads((self.root / "state" / f"prolog-{node}.json").read_text()))

    def wait_for(self, predicate: Callable[[], bool], seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                if predicate():
                    return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)
        raise TimeoutError(f"waited {seconds} s for {what}:\n{self.logs()}")

    def logs(self, lines: int = 15) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"== {log.name}\n" + "\n".join(tail))
        return "\n".join(out)


Cluster = TypeVar("Cluster", bound="SlurmCluster")


@contextlib.contextmanager
def running(
    prefix: str, nodes: list[str], healthy_fixture: Path, *, cls: type[Cluster], **options: Any
) -> Iterator[Cluster]:
    """A started cluster of `cls` (SlurmCluster or a subclass) in a short temporary folder, for a
    test module's or session's fixture: every daemon stopped and the folder removed after, and a
    daemon that would not stop fails the tests."""
    root = short_tmpdir(prefix)
    cluster = cls(root, nodes, **options)
    try:
        cluster.start(healthy_fixture)
        yield cluster
    finally:
        stubborn = cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert not stubborn, f"daemons that would not stop: {stubborn}"
