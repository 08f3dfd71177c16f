"""Facts: one module per data source a check reads on a node.

Each module holds how to gather the source through the Host API (the commands it runs, the files
it reads, with real paths) and a pure parser of what comes back. Checks (checks/*.py) judge
facts; they import facts modules, never each other (tests/test_architecture.py).
"""
