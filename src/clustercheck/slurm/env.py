"""The job and the node as the prolog's environment gives them: the job's context (`current_job()`),
the PATH and standard descriptors slurmd may leave out, and the guard that keeps Slurm's client
commands out of a prolog (slurm.conf(5)).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TextIO

from clustercheck.errors import HostError
from clustercheck.host import CommandResult, Transport
from clustercheck.transports.base import Recording

#: What a prolog or HealthCheckProgram gets when slurmd sets no PATH (domain-facts §D.1).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


#: Slurm's client commands: a prolog must not call them (slurm.conf(5), Prolog).
SLURM_CLIENTS = frozenset(
    {
        *("sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab"),
        *("sdiag", "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger", "sview"),
    }
)


class JobContext(NamedTuple):
    """The Slurm job a prolog runs for (domain-facts §D.2); every field may be missing.

    `gpus` are the job's GPU indices as the *node* numbers them (SLURM_JOB_GPUS, else a numeric
    CUDA_VISIBLE_DEVICES): in the prolog, which runs outside the job's cgroup, a job given
    /dev/nvidia1 sees CUDA_VISIBLE_DEVICES=1, while inside the job it sees 0.
    """

    job_id: str | None = None
    node: str | None = None
    nodelist: str | None = None
    user: str | None = None
    partition: str | None = None
    context: str | None = None  # SLURM_SCRIPT_CONTEXT: prolog_slurmd, epilog_slurmd, ...
    gpus: tuple[int, ...] | None = None
    cuda_visible_devices: tuple[str, ...] | None = None
    problems: tuple[str, ...] = ()  # variables that were set but could not be read

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobContext:
        """Read the prolog environment; never raises (a garbled variable becomes a problem)."""
        problems: list[str] = []

        def get(name: str) -> str | None:
            value = env.get(name)
            return value.strip() if value is not None and value.strip() else None

        cuda = get("CUDA_VISIBLE_DEVICES")
        cuda_list = tuple(d.strip() for d in cuda.split(",") if d.strip()) if cuda else None
        gpus: tuple[int, ...] | None = None
        raw = get("SLURM_JOB_GPUS")
        if raw is not None:
            gpus = _indices(raw)
            if gpus is None:
                problems.append(f"SLURM_JOB_GPUS={raw!r} is not a comma-separated list of GPU indices")
        elif cuda_list is not None:
            gpus = _indices(cuda)  # UUIDs (GPU-..., MIG-...) or NoDevFiles: no indices, not a problem
        return cls(
            job_id=get("SLURM_JOB_ID") or get("SLURM_JOBID"),
            node=get("SLURMD_NODENAME"),
            nodelist=get("SLURM_JOB_NODELIST") or get("SLURM_NODELIST"),
            user=get("SLURM_JOB_USER"),
            partition=get("SLURM_JOB_PARTITION"),
            context=get("SLURM_SCRIPT_CONTEXT"),
            gpus=gpus,
            cuda_visible_devices=cuda_list,
            problems=tuple(problems),
        )

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._asdict().items()}


def _indices(text: str | None) -> tuple[int, ...] | None:
    parts = [p.strip() for p in (text or "").split(",")]
    if not parts or not all(re.fullmatch(r"\d{1,6}", p) for p in parts):
        return None
    return tuple(int(p) for p in parts)


_current_job: JobContext | None = None


def set_current_job(job: JobContext | None) -> None:
    global _current_job
    _current_job = job


def current_job() -> JobContext | None:
    """The Slurm job being checked: set by `clustercheck prolog`; elsewhere read from the
    environment when it names a job (a run under `srun`), else None. Checks use it for what is
    about the job rather than the node (its GPUs, its node list)."""
    if _current_job is not None:
        return _current_job
    if os.environ.get("SLURM_JOB_ID"):
        return JobContext.from_env(os.environ)
    return None


def slurm_command(argv: Sequence[str]) -> str | None:
    """The Slurm client command argv would run (directly or in a `sh -c` script), else None."""
    if not argv:
        return None
    name = os.path.basename(str(argv[0]))
    if name in SLURM_CLIENTS:
        return name
    if name in ("sh", "bash", "dash", "zsh") and "-c" in argv:
        script = " ".join(argv[argv.index("-c") + 1 :])
        for word in re.findall(r"[A-Za-z0-9_./-]+", script):
            base: str = os.path.basename(word)
            if base in SLURM_CLIENTS:
                return base
    return None


class NoSlurmCommands:
    """Wraps the prolog's transport: a Slurm client command is refused (an `error` result).

    slurm.conf(5): prolog scripts "should not call Slurm commands" - every node of a large job
    would hit slurmctld at once, while it waits for them.
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.host = inner.host
        self.kind = inner.kind

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        name = slurm_command(argv)
        if name is not None:
            raise HostError(
                self.host,
                f"`{shlex.join(argv)}` was not run: a prolog must not call Slurm commands such as {name} "
                "(slurm.conf(5), Prolog); move this check to `clustercheck health`",
            )
        return self.inner.run(argv, timeout=timeout)

    @property
    def fixture(self) -> Recording | None:
        return self.inner.fixture

    def read(self, path: str, *, timeout: float) -> str:
        return self.inner.read(path, timeout=timeout)

    def read_many(self, paths: Sequence[str], *, timeout: float) -> dict[str, str | None]:
        return self.inner.read_many(paths, timeout=timeout)

    def probe(self, name: str, *, timeout: float) -> Any:
        return self.inner.probe(name, timeout=timeout)

    def connect(self) -> None:
        self.inner.connect()

    def close(self) -> None:
        self.inner.close()


def ensure_path() -> None:
    """slurmd starts Prolog and HealthCheckProgram with no PATH (domain-facts §D.1): set a sane one
    before the local transport copies the environment."""
    if not os.environ.get("PATH"):
        os.environ["PATH"] = DEFAULT_PATH


def ensure_std_fds() -> None:
    """Give closed standard descriptors /dev/null, and sys.stdout/stderr a stream to write to.

    A Prolog= line ending in `>&-` starts clustercheck with fd 1 closed: the next file it opened
    (the state file, a pipe) would become fd 1, and Python leaves sys.stdout None.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _detach_fd(fd: int) -> None:
    """After a broken pipe on fd 1 or 2: point it at /dev/null, so nothing else fails writing to it
    (Python's own flush at exit included)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def say(text: str, stream: TextIO | None) -> str:
    """Write text (a line) to stream; '' when written, else why not. Never raises: a closed or
    broken stdout/stderr must not change a prolog's verdict."""
    if stream is None:
        return "no stream"
    try:
        stream.write(text + "\n")
        stream.flush()
        return ""
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fileno = stream.fileno()
            if fileno in (1, 2):
                _detach_fd(fileno)
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
