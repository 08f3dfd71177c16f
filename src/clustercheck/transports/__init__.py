"""How bytes reach a node: the protocol (`base`), this node (`local`), recorded fixtures
(`fixture`), hosts over SSH (`ssh`).

`make_transports` is the one place they are built from the command line's choice: --local
(the default), --replay DIR... or --ssh HOSTLIST. `run`, `record`, `sweep --ssh` and the
prolog and health modes (slurm.node_checks) all come here. Each kind is imported only when
chosen, so the prolog's path (local or replay) never imports paramiko; kept in the package's
own module, which every transport's import loads anyway, it adds no module to the prolog's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clustercheck.errors import UsageError

if TYPE_CHECKING:
    from clustercheck.transports.base import Transport


def make_transports(
    local: bool = False,
    ssh: str | None = None,
    replay: Sequence[Path] | None = None,
    *,
    node: str | None = None,
    one_node: bool = False,
    ssh_config: Path | None = None,
    user: str | None = None,
    identity: list[str] | None = None,
    port: int | None = None,
    accept_new_host_keys: bool = False,
) -> list[Transport]:
    """The transports for --local (the default), --ssh HOSTLIST or --replay DIR...

    `node` names this node's local transport (the Slurm node name; default: the host name).
    `one_node` (the prolog and health, which judge the node they run on): --replay must hold
    exactly one fixture.
    """
    chosen = sum([bool(local), ssh is not None, bool(replay)])
    if chosen > 1:
        raise UsageError("choose one of --local, --ssh HOSTLIST and --replay FIXTURE_DIR")
    if replay:
        from clustercheck.transports.fixture import ReplayTransport, find_fixtures

        fixtures = find_fixtures(replay)
        if one_node and len(fixtures) != 1:
            shown = " ".join(str(r) for r in replay)
            raise UsageError(f"--replay {shown}: holds {len(fixtures)} fixtures; give the folder of one node")
        return [ReplayTransport(f) for f in fixtures]
    if ssh is not None:
        from clustercheck.hostlist import expand
        from clustercheck.transports.ssh import SSHTransport

        if ssh_config is not None and not ssh_config.exists():  # `-F /dev/null` is a common idiom
            raise UsageError(f"--ssh-config {ssh_config}: no such file")
        return [
            SSHTransport(
                h,
                ssh_config=str(ssh_config) if ssh_config else None,
                user=user,
                identity=identity,
                port=port,
                accept_new_host_keys=accept_new_host_keys,
            )
            for h in expand(ssh)
        ]
    from clustercheck.transports.local import LocalTransport

    return [LocalTransport(node)]
