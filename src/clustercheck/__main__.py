"""`python -m clustercheck`."""

from clustercheck.cli import main

main()
