# shellcheck shell=sh
# The stack probe (facts/image.py IMAGE_SCRIPT): CUDA and NCCL inside the image. Run inside the
# image (apptainer exec --cleanenv, enroot start) or with CLUSTERCHECK_ROOT=rootfs over an
# unpacked one. POSIX sh; prints `### name` sections. It needs no tool of the image's but sh
# (files are read with `read`), except grep for the NCCL banner, whose absence it reports
# (`### missing`). Lines starting with `#` are not sent; @LIB_DIRS@ and @PIP_DIRS@ are
# facts/image.py's _LIB_DIRS and _PIP_DIRS. The text sent is part of the argv recorded in
# fixtures: changing it means re-recording them (tests/test_scripts.py holds its hash).
R=${CLUSTERCHECK_ROOT:-}
show() { for f in "$@"; do [ -r "$f" ] || continue; while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done < "$f"; done; }
echo '### version.json'
show "$R/usr/local/cuda/version.json"
echo '### env'
if [ -n "$R" ]; then show "$R/etc/environment" "$R"/.singularity.d/env/*.sh; elif command -v env >/dev/null 2>&1; then env; else export -p; fi
echo '### libraries'
nccl=''
env_dirs=$(IFS=:; for d in ${LD_LIBRARY_PATH:-}; do echo "$d"; done)
conf_dirs=$(for c in "$R"/etc/ld.so.conf.d/*.conf; do [ -r "$c" ] || continue; while read -r l _; do case "$l" in /*) echo "$l";; esac; done < "$c"; done)
# globs in the directory list (python3*) expand under $R, in the inner loop only; the lists are
# split on spaces on purpose, and $d holds such globs (unquoted)
set -f
# shellcheck disable=SC2086,SC2231
for d in $env_dirs @LIB_DIRS@ $conf_dirs; do
  set +f
  for f in "$R"$d/libcudart.so.* "$R"$d/libcuda.so.* "$R"$d/libnccl.so* "$R"$d/libnccl-net*.so; do
    [ -e "$f" ] || continue
    echo "${f#"$R"}"
    case "$f" in */libnccl.so.2) [ -z "$nccl" ] && nccl="$f";; esac
  done
  set -f
done
echo '### pip'
# shellcheck disable=SC2043,SC2231  # one word until @PIP_DIRS@ is filled; $d holds globs
for d in @PIP_DIRS@; do
  set +f
  for f in "$R"$d/nvidia_*.dist-info; do [ -e "$f" ] && echo "${f#"$R"}"; done
  set -f
done
set +f
echo '### nccl-version'
if [ -n "$nccl" ] && ! command -v grep >/dev/null 2>&1; then echo '### missing'; echo grep; elif [ -n "$nccl" ]; then grep -a -o -m 1 'NCCL version [0-9][0-9.]*[+a-z0-9.]*' "$nccl" | { read -r v && echo "$v"; }; fi
true
