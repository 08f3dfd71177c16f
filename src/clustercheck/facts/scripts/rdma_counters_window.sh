# shellcheck shell=sh
# The port counters over a window (checks/rdma/counters.py gather_script, sample_s > 0): what
# rdma_counters.sh reads, then after @SAMPLE_S@ seconds of sleep on the node the counters again
# (`## after`). @SAMPLE_S@ is the profile's sample_s as Python writes a number (`5`, `2.5`),
# checked to be one before it is filled in: nothing else ever lands in the script.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
echo '## ports'
grep -H . /sys/class/infiniband/*/ports/*/link_layer /sys/class/infiniband/*/ports/*/state
echo '## counters'
grep -H . /sys/class/infiniband/*/ports/*/counters/* /sys/class/infiniband/*/ports/*/hw_counters/*
sleep @SAMPLE_S@
echo '## after'
grep -H . /sys/class/infiniband/*/ports/*/counters/* /sys/class/infiniband/*/ports/*/hw_counters/*
exit 0
