"""Pure, host-free analyzers (NCCL logs, nccl-tests tables, Slurm topology, version rules).

They read text and return verdicts; the checks in checks/ and the subcommands in
commands/ are thin layers over them.
"""
