"""Slurm integration: the prolog and health-check modes, and the drain reasons they own.

`clustercheck prolog` runs in slurmd's Prolog on every job start (domain-facts §D.1):

- a hard time budget (`--budget`, default 10 s): checks not done by then are `error`; the
  checks run in a forked child (`run_bounded`), killed with everything it started at the
  budget whatever it is stuck in (code holding the interpreter lock included), and the
  `--on-internal-error` verdict is written;
- it reads the prolog environment (§D.2): `SLURMD_NODENAME`, `SLURM_JOB_ID`, the job's GPUs
  (`SLURM_JOB_GPUS`, `CUDA_VISIBLE_DEVICES` - host-relative indices in the prolog) - and
  gives it to checks as `current_job()`;
- it never runs Slurm's client commands (`scontrol`, `squeue`, ...; slurm.conf(5): prologs
  "should not call Slurm commands"): a check that tries gets an `error`, the command is not run;
- it exits non-zero only when a check *failed*: the node must not run the job, and Slurm then
  drains it ("Prolog error") and requeues the job. warn, skip and error ("could not tell")
  let the job run and are logged. When clustercheck itself cannot judge the node (a mistake on
  its command line, a bug, a broken profile, the budget), `--on-internal-error` decides: `pass`
  (the default: a bug in clustercheck must not drain the whole cluster) or `fail`; a closed or
  broken stdout or an unwritable state file is said loudly and changes no verdict;
- the verdict goes to syslog and to a JSON state file, where admins and `clustercheck health`
  read why.

`clustercheck health` runs as slurm.conf's HealthCheckProgram, whose exit code Slurm ignores
(§D.3): it acts itself, with `scontrol update` (§D.4), following LBNL NHC's owned-reason rule
and Nebius soperator's "only resume what you drained":

- a failed check drains the node with `Reason="clustercheck: <check>: <summary>"`, and the
  reason is kept in a health record file;
- a node drained (or downed) with any other reason is never touched: the prefix alone proves
  nothing, only a reason health recorded setting on that node, at the time scontrol shows;
- a node drained with a recorded reason is resumed once every check passes (ok, warn or skip;
  an `error` keeps the drain: it could not tell; so does a skip because the hardware vanished);
- Slurm's bare `Prolog error` drain is refined into the prolog's own reason when the prolog's
  state file shows clustercheck failed this node for the job the drain followed (a job id, a
  verdict time just before the drain's); from then on it is clustercheck's drain;
- a node with a reboot pending is left alone (resuming it would cancel the reboot, as NHC's
  node-mark-online notes).

The package: env (the job and node environment, the no-Slurm-commands guard), state (state file,
markers, syslog), scontrol (the node as slurmctld sees it), drain (reasons, the pure drain/resume
decisions, apply_decision), node_checks (running the profile on one node), prolog_mode and
health_mode (the two modes). Every name other modules use is re-exported here (`slurm.X`).
Every module imports only the standard library at the top: the prolog is on every job's path.
"""

from __future__ import annotations

from clustercheck.slurm.drain import (
    CLOCK_SLACK,
    PROLOG_ERROR,
    PROLOG_EVIDENCE_WINDOW,
    REASON_LIMIT,
    REASON_PREFIX,
    RECORD_KEEP,
    Decision,
    add_to_record,
    apply_decision,
    decide,
    drain_reason,
    owns,
    reason_time,
    recorded_drain,
    sanitize_reason,
)
from clustercheck.slurm.env import (
    DEFAULT_PATH,
    SLURM_CLIENTS,
    JobContext,
    NoSlurmCommands,
    current_job,
    ensure_path,
    ensure_std_fds,
    say,
    set_current_job,
    slurm_command,
)
from clustercheck.slurm.health_mode import DEFAULT_RECORD_FILE, HEALTH_BUDGET, HealthOptions, health, record_template
from clustercheck.slurm.prolog_mode import (
    EXIT_INTERNAL,
    PROLOG_BUDGET,
    PROLOG_FLAGS,
    PROLOG_OPTIONS,
    PrologOptions,
    internal_error_policy,
    parse_prolog_args,
    prolog,
)
from clustercheck.slurm.scontrol import NodeState, _scontrol, parse_scontrol_show_node
from clustercheck.slurm.state import (
    DEFAULT_STATE_FILE,
    DEFAULT_SYSLOG,
    LOG_ERR,
    LOG_INFO,
    LOG_NOTICE,
    LOG_WARNING,
    marker_folder,
    read_marker,
    read_state,
    set_state_folder,
    state_path,
    syslog,
    write_markers,
    write_state,
)

__all__ = [
    "CLOCK_SLACK",
    "DEFAULT_PATH",
    "DEFAULT_RECORD_FILE",
    "DEFAULT_STATE_FILE",
    "DEFAULT_SYSLOG",
    "EXIT_INTERNAL",
    "HEALTH_BUDGET",
    "LOG_ERR",
    "LOG_INFO",
    "LOG_NOTICE",
    "LOG_WARNING",
    "PROLOG_BUDGET",
    "PROLOG_ERROR",
    "PROLOG_EVIDENCE_WINDOW",
    "PROLOG_FLAGS",
    "PROLOG_OPTIONS",
    "REASON_LIMIT",
    "REASON_PREFIX",
    "RECORD_KEEP",
    "SLURM_CLIENTS",
    "Decision",
    "HealthOptions",
    "JobContext",
    "NoSlurmCommands",
    "NodeState",
    "PrologOptions",
    "_scontrol",
    "add_to_record",
    "apply_decision",
    "current_job",
    "decide",
    "drain_reason",
    "ensure_path",
    "ensure_std_fds",
    "health",
    "internal_error_policy",
    "marker_folder",
    "owns",
    "parse_prolog_args",
    "parse_scontrol_show_node",
    "prolog",
    "read_marker",
    "read_state",
    "reason_time",
    "record_template",
    "recorded_drain",
    "sanitize_reason",
    "say",
    "set_current_job",
    "set_state_folder",
    "slurm_command",
    "state_path",
    "syslog",
    "write_markers",
    "write_state",
]
