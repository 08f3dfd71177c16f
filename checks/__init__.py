"""clustercheck's built-in checks: one module per subsystem, one function per check.

Installed as the package `clustercheck.checks` (pyproject.toml maps this folder there).
"""
