# shellcheck shell=sh
# The RDMA probe (facts/image.py PROBE_SCRIPT): what a job started from the image sees of RDMA.
# Run as `LAUNCH... sh -c SCRIPT` through the site's own launch command; prints `## name`
# sections. Lines starting with `#` are not sent; @LIBRARY_SCAN@ is facts/infiniband.py's
# LIBRARY_SCAN. The text sent is part of the argv recorded in fixtures: changing it means
# re-recording them (tests/test_scripts.py holds its hash).
echo '## devices'
for f in /dev/infiniband/*; do [ -e "$f" ] && echo "$f"; done
echo '## hcas'
for f in /sys/class/infiniband/*; do [ -e "$f" ] && echo "${f##*/}"; done
echo '## libraries'
@LIBRARY_SCAN@
echo '## memlock'
# not in POSIX, but in every sh a job image has (dash, bash, busybox ash): the locked-memory limit
# shellcheck disable=SC3045
ulimit -l
# sh builtins only: an image without grep or cat must not look like one without NCCL settings
echo '## environment'
if command -v env >/dev/null 2>&1; then env; else export -p; fi | while IFS= read -r l; do l=${l#export }; case "$l" in NCCL_*|MELLANOX_*) printf '%s\n' "$l";; esac; done
echo '## nccl.conf'
[ -r /etc/nccl.conf ] && while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done < /etc/nccl.conf
exit 0
