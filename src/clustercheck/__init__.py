"""clustercheck: is this Slurm GPU node really ready for training jobs?

This module is the check author's API::

    from clustercheck import Host, Result, Size, check, fact, ok, warn, fail, skip

Everything here is cheap to import: the prolog path starts from it.
"""

from clustercheck.host import CommandResult, Host, fact
from clustercheck.registry import Size, check
from clustercheck.result import Result, Status, fail, ok, skip, warn

__version__ = "0.1.0"

__all__ = [
    "CommandResult",
    "Host",
    "Result",
    "Size",
    "Status",
    "__version__",
    "check",
    "fact",
    "fail",
    "ok",
    "skip",
    "warn",
]
