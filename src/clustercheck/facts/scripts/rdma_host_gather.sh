# shellcheck shell=sh
# The RDMA gather on the node (facts/infiniband.py HOST_SCRIPT, the `rdma` fact): one read-only
# command, `## name` sections. sysfs: port state, physical state, rate and link layer, firmware,
# and which HCA each uverbs device is; devices: mode and owner of /dev/infiniband/*; libraries:
# @LIBRARY_SCAN@ is rdma_library_scan.sh. Globs that match nothing stay as they are and grep or
# stat says so on stderr, which is not judged: the sections are. Always exits 0.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
echo '## sysfs'
grep -H . /sys/class/infiniband/*/ports/*/state /sys/class/infiniband/*/ports/*/phys_state /sys/class/infiniband/*/ports/*/rate /sys/class/infiniband/*/ports/*/link_layer /sys/class/infiniband/*/fw_ver /sys/class/infiniband_verbs/uverbs*/ibdev
echo '## devices'
stat -c '%n %a %U %G' /dev/infiniband/*
echo '## libraries'
@LIBRARY_SCAN@
exit 0
