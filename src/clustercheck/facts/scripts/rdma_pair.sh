# shellcheck shell=sh
# $runs is a list of words on purpose (HCA:MEMORY ...).
# shellcheck disable=SC2086
# The pair form of rdma.bandwidth (clustercheck sweep --pairs; clustercheck.sweep.rdma_pair_argv),
# run by `srun -w A,B -N2 --ntasks-per-node=1 --label` on both nodes as
# `sh -c SCRIPT sh SERVER_NODE SERVER_ADDR BINARY PORT SECONDS OOB_PORT RUNS OPTIONS...`:
# on SERVER_NODE (SLURMD_NODENAME) the ib_write_bw server, on the other node the client to
# SERVER_ADDR. RUNS is `HCA:host` or `HCA:GPU` words, measured one after the other, the same HCA
# name and port number at both ends; run number k (from 0) uses perftest's out-of-band TCP port
# OOB_PORT+k (-p), so a client never meets the server of another run. Each run prints the port's
# sysfs state and rate, then the tool's output (stdout and stderr), between `@@cc` lines. Each end
# of a run is bounded by SECONDS (coreutils timeout, which kills the tool's process group): a
# server whose client never comes stops there, and a client retries a refused connection (its
# server may still be starting; perftest says "Couldn't connect") a second apart until then.
# After a run that timed out (timeout's 124, or 137 after its KILL; a tool that crashed is
# not that) neither end starts another (the other end gave up too): the rest
# are reported as not run. No globbing (`set -f`): RUNS is split on blanks only. Lines starting
# with `#` are not sent.
set -f
server=$1; addr=$2; b=$3; port=$4; t=$5; oob=$6; runs=$7; shift 7
me=${SLURMD_NODENAME:-}
if [ "$me" = "$server" ]; then role=server; else role=client; fi
echo "@@cc node=$me role=$role"
if ! command -v "$b" >/dev/null 2>&1; then echo "@@cc missing $b"; exit 127; fi
k=0; stop=
for run in $runs; do
  d=${run%%:*}; m=${run#*:}; p=$((oob + k)); k=$((k + 1))
  if [ -n "$stop" ]; then echo "@@cc skip $run"; continue; fi
  state=$(cat "/sys/class/infiniband/$d/ports/$port/state" 2>/dev/null)
  rate=$(cat "/sys/class/infiniband/$d/ports/$port/rate" 2>/dev/null)
  echo "@@cc run $run state=$state rate=$rate"
  cuda=; [ "$m" = host ] || cuda="--use_cuda=$m"
  if [ "$role" = server ]; then
    timeout -k 2 "$t" "$b" -d "$d" -p "$p" "$@" ${cuda:+"$cuda"} 2>&1; rc=$?
  else
    end=$(($(date +%s) + t))
    while :; do
      left=$((end - $(date +%s)))
      if [ "$left" -le 0 ]; then echo "@@cc noserver"; rc=124; break; fi
      out=$(timeout -k 2 "$left" "$b" -d "$d" -p "$p" "$@" ${cuda:+"$cuda"} "$addr" 2>&1); rc=$?
      printf '%s\n' "$out"
      case $rc:$out in 0:*) break ;; *"Couldn't connect"*) sleep 1 ;; *) break ;; esac
    done
  fi
  case $rc in 124|137) stop=1 ;; esac
  echo "@@cc end $run rc=$rc"
done
exit 0
