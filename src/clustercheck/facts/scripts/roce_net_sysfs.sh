# shellcheck shell=sh
# A RoCE port's network interface in sysfs (checks/roce.py, roce.qos): `sh -c SCRIPT sh
# /sys/class/net/NDEV` prints `path:value` for each ECN enable file (notification and reaction
# point, one per priority) and the MTU. The folder comes as $1, never inside the text; the globs
# are expanded here on purpose. A driver without MLNX_OFED's ECN sysfs has no ecn folder: grep
# then says so on stderr and the check reports ECN unreadable, so the exit status is always 0.
# Read only.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
grep -H . "$1"/ecn/roce_np/enable/* "$1"/ecn/roce_rp/enable/* "$1"/mtu; exit 0
