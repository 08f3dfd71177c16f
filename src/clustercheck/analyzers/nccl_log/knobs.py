"""The sizes that steer the NCCL log scan, read by scan.py, state.py and grep.py at each call.

Set them on this module (`clustercheck.analyzers.nccl_log.knobs.BLOCK = 4096`, as the tests do):
they live apart from the package so that its modules read them without importing the package.
"""

from __future__ import annotations

#: Bytes read at a time. Small blocks stay in the CPU cache, which matters more than syscalls.
BLOCK = 1 << 18
#: The longest line kept; longer ones (1 MB of garbage without a newline) are counted and skipped.
MAX_LINE = 4 << 20
#: Channel lines (` via ` on a line) attributed to their host one by one at the start of every input;
#: later ones are counted, and attributed only when they matter per host (no GPUDirect RDMA, shared
#: memory).
EXACT_CHANNELS = 50_000
#: Files at least this large are scanned in stretches on several processes (`jobs`).
PARALLEL_MIN = 64 << 20
#: Files at least this large have their byte-level pass past the exact start done by GNU grep
#: (analyzers/nccl_log/grep.py) where it is on PATH; the same evidence as the Python scan.
GREP_MIN = 32 << 20
#: False: always the pure-Python scan (`CLUSTERCHECK_NCCL_GREP=0` in the environment says the same).
GREP = True
