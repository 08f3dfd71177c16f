"""RDMA bandwidth per HCA: perftest's `ib_write_bw` in loopback on one node, against the port's rate.

`rdma.bandwidth` starts, per HCA port, an `ib_write_bw` server and a client to localhost on the
same node (one `sh -c` script through the host API, so locally, over SSH and in record/replay
alike: the server in the background, the client after it, the server killed when the client
ends), from host memory and, for the HCAs the profile pairs with a GPU, from that GPU's memory
(`--use_cuda=N`). It reads the client's table with clustercheck.facts.perftest and judges it
with the same function the sweep uses for two-node pairs (`judge_bw`). This module only judges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clustercheck import Host, Result, check, fail, ok
from clustercheck.errors import HostError
from clustercheck.facts import script_text, shown_with
from clustercheck.facts.infiniband import is_hca_name, parse_rate, parse_state, rdma

if TYPE_CHECKING:  # the reader is imported when the check runs: every rdma module loads on the prolog path
    from clustercheck.facts.perftest import BwVerdict

#: One loopback run (facts/scripts/rdma_loopback.sh, which says how): `sh -c SCRIPT sh BINARY HCA
#: OPTIONS...`, the server in the background, the client to localhost, the server killed after it.
LOOPBACK_SCRIPT = script_text("rdma_loopback.sh").removesuffix("\n")
SYSFS = "/sys/class/infiniband"


class RdmaBandwidthError(HostError):
    """The check's `error`: carries the remedy and data into the result."""

    def __init__(self, summary: str, remedy: str, data: Mapping[str, Any]) -> None:
        super().__init__("", summary)
        self.remedy, self.data, self.evidence = remedy, dict(data), ()


def validate(params: Mapping[str, Any], profiles: tuple[str, ...]) -> list[str]:
    """Load-time rules: a fraction in (0, 1], HCA names, HCA:GPU pairs, no prolog profile."""
    problems = []
    fraction = params.get("min_fraction")
    if not isinstance(fraction, float) or not 0 < fraction <= 1:
        problems.append(f"min_fraction must be above 0 and at most 1 (0.9 = 90% of the port's rate), got {fraction!r}")
    for hca in params.get("devices", ()):
        if not is_hca_name(hca):
            problems.append(f"devices entry {hca!r} is not an HCA name as sysfs lists them (e.g. mlx5_0)")
    for pair in params.get("cuda", ()):
        hca, sep, gpu = pair.partition(":")
        if not sep or not hca or not gpu.isdigit():
            problems.append(f"cuda entry {pair!r} is not HCA:GPU (e.g. mlx5_0:0)")
    prolog = next((p for p in profiles if "prolog" in p.lower()), None)
    if prolog is not None:
        problems.append(
            f"ib_write_bw loads every HCA port for seconds each and needs them idle: not in a prolog profile "
            f"(this one is or extends {prolog!r}); run it from a profile for nodes out of service (deep)"
        )
    return problems


def loopback_argv(binary: str, device: str, options: list[str]) -> tuple[str, ...]:
    return ("sh", "-c", LOOPBACK_SCRIPT, "sh", binary, device, *options)


@check(
    needs=["command ib_write_bw", "command sh", f"file {SYSFS}/<hca>/ports/<port>/rate"],
    timeout=600,
    validate=validate,
    action="CHECK_CABLE",
)
def bandwidth(
    host: Host,
    *,
    devices: tuple[str, ...] = (),
    port: int = 1,
    min_fraction: float = 0.9,
    expected_rate: float = 0.0,
    cuda: tuple[str, ...] = (),
    size: int = 8388608,
    iterations: int = 5000,
    gid_index: int = -1,
    binary: str = "ib_write_bw",
    run_timeout: float = 60.0,
    loopback: bool = True,
) -> Result:
    """Every HCA port reaches `min_fraction` of its rate in ib_write_bw (perftest): loopback, and between nodes.

    Why: a port that links but underperforms (a marginal cable or transceiver, a port trained at a
    lower width or speed, a NIC in a slow PCIe slot) passes every state check and slows every job;
    only moving data shows it. Azure's aznhc runs the same test per HCA.

    How: for each HCA (`devices`, else every HCA sysfs lists) it reads the port's rate from
    /sys/class/infiniband/HCA/ports/PORT/rate and its state; a port not ACTIVE fails without a run.
    Then it runs `ib_write_bw -d HCA --report_gbits -s SIZE -n ITERATIONS` as a server in the
    background and the same as a client to localhost (`-x GID` for RoCE when `gid_index` is set),
    kills the server after the client (a client that fails while the server still runs, as when
    the server is still starting, is tried again, 10 times at most), and reads the client's
    table: the average bandwidth at the largest size (8 MiB by default; below 64 KiB a run
    measures message rate and gives no verdict)
    must reach `min_fraction` (default 0.9) of the rate, or of `expected_rate` (Gb/s, per SKU) when
    set, which also fails a port whose sysfs rate is below it (trained down). Each HCA named in
    `cuda` as HCA:GPU (mlx5_0:0) is run again from that GPU's memory (`--use_cuda=GPU`). One run
    takes a few seconds; each has `run_timeout` (60 s), all together the check's `timeout` (600 s);
    past either, the server, the client and the script are killed. Refused in prolog profiles.
    perftest missing, a run that prints no table (a connection or device error), a cut table and
    an unknown rate are errors, never a pass. With `loopback: false` the node's own run only
    judges each port's state and rate (no ib_write_bw) and leaves the bandwidth to the pair form.

    Between two nodes (`clustercheck sweep --pairs`, on pairs of the nodes that passed their own
    run, chosen from Slurm's topology: a ring within each leaf switch, one pair across each leaf
    boundary): one `srun -w A,B -N2 --exclusive` per pair runs, for each HCA (`devices`, else those
    this check judged on A), the `ib_write_bw -d HCA -p OOB_PORT [-i PORT] --report_gbits -s SIZE -n N`
    server on A and the same client on B to A's NodeAddr, matched by HCA name and port number (rail
    to rail: mlx5_0 port 1 with mlx5_0 port 1), from host memory and, for the `cuda` pairs, from
    GPU memory at both ends. Run k listens on perftest's TCP port 18515+k. One run moves SIZE x
    ITERATIONS bytes (40 GiB by default: about 2 s at 200 Gb/s); each end of each run has
    `run_timeout` (60 s; a server whose client never connects is stopped there, and the pair's
    other runs are not started), the pair's whole srun the check's `timeout` (600 s). It runs with
    nccl.pairs, or alone with `--pairs-checks rdma.bandwidth`. Each end is judged
    against its own port's rate (or `expected_rate`) with the same threshold, naming the port and
    both nodes; the node slow in every pair it is in is measured once more and drained
    (CHECK_CABLE); the report's `rdma.pairs` names each pair's ports and lowest figure.

    Fix: a port below its rate from host memory: reseat or replace its cable or transceiver
    (CHECK_CABLE; `mlxlink -d HCA` shows the link's errors and width), check the NIC's PCIe link.
    Slow only from GPU memory: the GPU and the NIC are far apart (`nvidia-smi topo -m`: SYS) or
    GPUDirect RDMA is off (nvidia_peermem): pair each HCA with its nearest GPU.

    Action: CHECK_CABLE (slow from host memory, a port DOWN or trained below the expected rate);
    INVESTIGATE (a port INIT/ARMED: no subnet manager); FIX_CONFIG (slow only from GPU memory). A
    failure whose every part is a run below the threshold says `performance: true` in its data
    (the sweep measures it once more before a drain); a port down or trained down does not.
    """
    from clustercheck.facts.perftest import bw_argv

    data: dict[str, Any] = {"ports": {}, "action": None}
    ports = _ports(host, devices, port, data)
    gpus: dict[str, list[int]] = {}
    for pair in cuda:
        hca, _, index = pair.partition(":")
        gpus.setdefault(hca, []).append(int(index))
    fails: list[tuple[str, str]] = []  # (label, action)
    measured: list[str] = []  # the fails that are a run below the threshold (not a port down or trained down)
    errors: list[str] = []
    evidence: list[str] = []
    for hca, (state, rate) in ports.items():
        label = f"{hca} port {port}"
        entry: dict[str, Any] = {"state": state or None, "sysfs_rate_gbps": rate, "runs": []}
        data["ports"][hca] = entry
        if state and state != "ACTIVE":
            if state == "DOWN":
                fails.append((f"{label} is DOWN: no bandwidth can be measured", "CHECK_CABLE"))
            else:  # INIT, ARMED: the link is up, no subnet manager has made the port active
                fails.append(
                    (f"{label} is {state}, not ACTIVE (no subnet manager answers?): not measured", "INVESTIGATE")
                )
            continue
        target: float | None = expected_rate if expected_rate > 0 else rate
        if expected_rate > 0 and rate is not None and rate < expected_rate:
            fails.append((f"{label} links at {rate:g} Gb/s, below the expected {expected_rate:g} Gb/s", "CHECK_CABLE"))
            continue
        if not loopback:  # the sweep's pair form measures it
            if not state:
                errors.append(f"{label}: sysfs shows no state for it on {host.name}")
            continue
        for gpu in [None, *gpus.get(hca, [])]:
            argv = bw_argv(binary, hca, size=size, iterations=iterations, gid_index=gid_index, cuda=gpu, ib_port=port)
            options = list(argv[3:])
            where = label + ("" if gpu is None else f" from GPU {gpu}")
            verdict = _one(host, binary, hca, options, target, min_fraction, run_timeout)
            entry["runs"].append({"memory": "host" if gpu is None else f"gpu {gpu}", **verdict.to_json()})
            evidence.append(f"{where}: {verdict.status}: {verdict.message}")
            if verdict.status == "fail":
                fails.append((f"{where}: {verdict.message}", "CHECK_CABLE" if gpu is None else "FIX_CONFIG"))
                measured.append(fails[-1][0])
            elif verdict.status == "error":
                errors.append(f"{where}: {verdict.message}")
    if fails:
        action = next(a for a in ("CHECK_CABLE", "INVESTIGATE", "FIX_CONFIG") if any(a == b for _, b in fails))
        remedy = {
            "CHECK_CABLE": "reseat or replace the cable/transceiver of the port named (`mlxlink -d HCA` shows link "
            "errors and width) and check the NIC's PCIe link; rerun once before replacing",
            "INVESTIGATE": "check that a subnet manager runs for the port's fabric (`sminfo`, `ibstat`: SM lid) and "
            "that the switch port is enabled",
            "FIX_CONFIG": "pair the HCA with a GPU under the same PCIe switch (`nvidia-smi topo -m`) and check that "
            "GPUDirect RDMA works (nvidia_peermem or DMA-BUF)",
        }[action]
        also = f" (and {len(errors)} run(s) that could not be judged)" if errors else ""
        return fail(
            "; ".join(text for text, _ in fails) + also,
            remedy=remedy,
            # measured slow and nothing else: the sweep measures it once more before a drain
            data={**data, "action": action, "performance": len(measured) == len(fails)},
            evidence=evidence,
            action=action,
        )
    if errors:
        raise RdmaBandwidthError(
            "not proven: " + "; ".join(errors),
            "run the command on the node by hand (the server: `ib_write_bw -d HCA --report_gbits`, then the client "
            "with `localhost`); a run without a result table is not a pass",
            data,
        )
    if not loopback:
        rates = ", ".join(f"{h} {e['sysfs_rate_gbps']:g} Gb/s" if e["sysfs_rate_gbps"] else f"{h} rate ?"
                          for h, e in data["ports"].items())  # fmt: skip
        return ok(
            f"{len(ports)} port(s) ACTIVE ({rates}); no loopback (loopback: false): the bandwidth is measured "
            "between nodes (clustercheck sweep --pairs)",
            data={**data, "loopback": False},
        )
    lows = [r for e in data["ports"].values() for r in e["runs"]]
    worst = min(lows, key=lambda r: r["fraction"] or 0.0)
    return ok(
        f"{len(lows)} run(s) on {len(ports)} port(s), lowest {worst['gbps']:g} Gb/s = {worst['fraction']:.1%} "
        f"of the rate (at least {min_fraction:.0%})",
        data=data,
        evidence=evidence,
    )


def _ports(
    host: Host, devices: tuple[str, ...], port: int, data: dict[str, Any]
) -> dict[str, tuple[str, float | None]]:
    """HCA -> (state, sysfs rate in Gb/s) of the port judged."""
    found: dict[str, tuple[str, float | None]] = {}
    if not devices:
        node = rdma(host)
        for hca in node.hcas:
            for p in node.ports[hca]:
                if p.port == port:
                    found[hca] = (p.state, p.rate_gbps)
        if not found:
            raise RdmaBandwidthError(
                f"no HCA with a port {port} on {host.name} (sysfs lists {', '.join(node.hcas) or 'none'})",
                "name the HCAs in the check's `devices`, or load the RDMA drivers",
                {**data, "action": "FIX_CONFIG"},
            )
        return found
    for hca in devices:
        base = f"{SYSFS}/{hca}/ports/{port}"
        rate_text = host.read_optional(f"{base}/rate")
        state_text = host.read_optional(f"{base}/state")
        found[hca] = (
            parse_state(state_text) if state_text else "",
            parse_rate(rate_text.strip()) if rate_text else None,
        )
    return found


def _one(
    host: Host, binary: str, hca: str, options: list[str], rate: float | None, min_fraction: float, budget: float
) -> BwVerdict:
    from clustercheck.facts.perftest import PACKAGE, BwVerdict, PerftestParseError, judge_bw, parse_bw

    argv = loopback_argv(binary, hca, options)
    named = shown_with(argv, LOOPBACK_SCRIPT, "'<ib_write_bw server, then client to localhost>'")
    result = host.run(*argv, timeout=budget, shown_as=named)
    shown = f"`{binary} -d {hca} {' '.join(options)}` (server and client to localhost)"
    if result.timed_out:
        return BwVerdict("error", f"{shown} did not finish within {result.duration_s:.0f} s; both were stopped")
    if result.exit_code == 127 and not result.stdout.strip():
        raise RdmaBandwidthError(
            f"{binary} is not installed on {host.name} ({shown}: not found)",
            f"install the {PACKAGE} package (it holds ib_write_bw), or set the check's `binary` to its path",
            {"action": "FIX_CONFIG"},
        )
    try:
        run = parse_bw(result.stdout)
    except PerftestParseError as exc:
        server = " ".join(result.stderr.split())[-200:]
        return BwVerdict(
            "error", f"{shown} exited {result.exit_code}: {exc}" + (f"; the server said: {server}" if server else "")
        )
    if rate is None:
        return BwVerdict("error", f"the rate of {hca} is unknown (sysfs shows none): set the check's expected_rate")
    verdict = judge_bw(run, rate, min_fraction=min_fraction)
    if verdict.status == "ok" and result.exit_code != 0:
        return BwVerdict("error", f"{shown} exited {result.exit_code} although its table passed", verdict.gbps, rate)
    return verdict


__all__ = ["LOOPBACK_SCRIPT", "RdmaBandwidthError", "bandwidth", "loopback_argv", "validate"]
