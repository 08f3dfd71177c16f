# shellcheck shell=sh
# Where libibverbs.so.1 and the verbs providers are (facts/infiniband.py LIBRARY_SCAN): a part of
# rdma_host_gather.sh and rdma_image_probe.sh (their @LIBRARY_SCAN@), so one line. The folders:
# RHEL (lib64), Debian/Ubuntu (multiarch), LD_LIBRARY_PATH, and those /etc/ld.so.conf.d/*.conf
# adds (a site build under a prefix), read with sh builtins only: an image may lack cat and grep.
# Providers sit in <libdir>/libibverbs/lib<name>-rdmav<ABI>.so (rdma-core). What a node's files
# say (a conf line, LD_LIBRARY_PATH) is only ever a word of the `for` list, never run: split on
# spaces and glob-expanded on purpose, tested with -e and printed.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
for d in /usr/lib64 /lib64 /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib/powerpc64le-linux-gnu $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' ') $(for c in /etc/ld.so.conf.d/*.conf; do [ -r "$c" ] && while read -r l _; do case "$l" in /*) echo "$l";; esac; done < "$c"; done); do for f in "$d"/libibverbs.so.1 "$d"/libibverbs/lib*-rdmav*.so; do [ -e "$f" ] && echo "$f"; done; done
