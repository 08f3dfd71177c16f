"""`python -m clustercheck`."""

from clustercheck.main import main

main()
