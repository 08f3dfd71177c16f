# shellcheck shell=sh
# A && B || C on purpose: stop trying when the 10th try failed or the server is gone.
# shellcheck disable=SC2015
# The ib_write_bw loopback of rdma.bandwidth (checks/rdma/bandwidth.py LOOPBACK_SCRIPT), run as
# `sh -c SCRIPT sh BINARY HCA OPTIONS...`: the server in the background (its output to stderr,
# kept as the run's stderr), then the client to localhost (stdout). A client that fails while the
# server still runs is tried again, 10 times at most, a second apart (the server may still be
# starting: CUDA's init with --use_cuda takes seconds; what a failed try printed stays in the
# output). The server is killed when the client ends, whatever happened; a hang is the budget's:
# the transport kills the whole process tree. Lines starting with `#` are not sent, and the one
# line sent is part of the argv recorded in fixtures (fixtures/deep-rdma-bw-*): changing it means
# re-recording them (tests/test_scripts.py holds its hash).
b=$1; d=$2; shift 2; "$b" -d "$d" "$@" >&2 & s=$!; n=0; while :; do sleep 1; "$b" -d "$d" "$@" localhost; rc=$?; n=$((n+1)); [ "$rc" -eq 0 ] && break; [ "$n" -lt 10 ] && kill -0 "$s" 2>/dev/null || break; done; kill "$s" 2>/dev/null; wait "$s" 2>/dev/null; exit "$rc"
