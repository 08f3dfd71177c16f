"""Processes: names from `ps` (comm and argv[0]'s base name) and the full listing monitoring reads."""

from __future__ import annotations

from clustercheck import Host, fact


def parse_ps(text: str) -> list[tuple[str, str]]:
    """`ps -e -ww -o comm= -o args=` -> [(comm, args)]."""
    procs = []
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            procs.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return procs


def process_names(comm: str, args: str) -> set[str]:
    """Names a process answers to: its comm, and the base name of its argv[0].

    Daemons retitle themselves (`sshd: /usr/sbin/sshd -D [listener]`), so the first word
    of args is taken without a trailing colon.
    """
    first = args.split(None, 1)[0] if args.strip() else ""
    return {comm, first.rsplit("/", 1)[-1].rstrip(":")} - {""}


# The names node.services matches, and nothing else: each process's comm and the base name of
# its argv[0] (a `ps` full listing would record every user's command line, arguments and
# secrets included, into fixtures people send each other). ps's own exit status is kept.
PROCESS_NAMES = (
    "sh",
    "-c",
    "out=$(ps -e -ww -o comm= -o args=) || exit $?; "
    'printf \'%s\\n\' "$out" | awk \'{ a = $2; sub(".*/", "", a); print $1, a }\'',
)


def parse_process_names(text: str) -> set[str]:
    """PROCESS_NAMES' output (`comm argv0-base-name` a line) -> every name a process answers to."""
    names: set[str] = set()
    for line in text.splitlines():
        names.update(w.rstrip(":") for w in line.split()[:2])
    return names - {""}


PS = ("ps", "-e", "-ww", "-o", "comm=", "-o", "args=")


@fact
def processes(host: Host) -> list[tuple[str, str]]:
    """(comm, args) of every process: the listing node.services reads too (one recording)."""
    return parse_ps(host.output(*PS))
