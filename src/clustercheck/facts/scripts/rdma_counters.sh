# shellcheck shell=sh
# The port counters, read once (checks/rdma/counters.py gather_script, sample_s 0: judged against
# the previous run's reading). Read only; `## name` sections: ports (link layer and state), then
# every file of counters/ (IB PMA) and hw_counters/ (the driver's) of every port. With a window
# (sample_s > 0) rdma_counters_window.sh runs instead. Always exits 0: the sections are judged.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
echo '## ports'
grep -H . /sys/class/infiniband/*/ports/*/link_layer /sys/class/infiniband/*/ports/*/state
echo '## counters'
grep -H . /sys/class/infiniband/*/ports/*/counters/* /sys/class/infiniband/*/ports/*/hw_counters/*
exit 0
