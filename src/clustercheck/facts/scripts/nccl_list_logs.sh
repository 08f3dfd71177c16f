# shellcheck shell=sh
# The newest job logs (checks/nccl.py _LIST_SCRIPT, nccl.log): `sh -c SCRIPT sh N GLOB...` prints
# the N newest paths matching the profile's globs, one a line, after a line `@@denied DIR` for
# each folder of a glob this user cannot list (it hides its logs as an empty one would: the glob
# stays unexpanded and `ls` says "No such file"). The globs are the profile's, expanded here on
# purpose (SC2068, unquoted). `ls -t` because it sorts by time and find cannot (POSIX): a name
# with a newline comes out as two lines (SC2012), so checks/nccl.py takes only a line that
# matches a glob, part for part, and a path the node prints is only ever data, never run.
# Read only.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
# shellcheck disable=SC2012,SC2068
n=$1; shift; for p in "$@"; do case $p in */*) d=${p%/*};; *) d=.;; esac; if [ -d "$d" ] && ! { [ -r "$d" ] && [ -x "$d" ]; }; then echo "@@denied ${d:-/}"; fi; done; ls -1td -- $@ 2>/dev/null | head -n "$n"
