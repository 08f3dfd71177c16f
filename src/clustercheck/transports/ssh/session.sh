# The node side of clustercheck's SSH transport (clustercheck/transports/ssh/session.py).
#
# sshd runs `exec /bin/sh -s` (the same line in every login shell) and this script comes on the
# channel's stdin. Full-line comments are stripped before it is sent; @NONCE@ and @END@ become
# the session's random tokens, @FIRST@ the first request line (so the first command needs no
# second round trip). Plain POSIX sh: dash, bash, busybox ash (`sh -n` in tests/test_ssh_transport.py).
#
# One session serves all of a host's commands, one after the other: one `sh` reads one request
# a line from the channel's stdin (fd 3 once the block runs; the `{ ... }` block itself is read
# whole before any of it runs) and answers it. cc_run runs a command, marked cc-NONCE-ID. in its
# environment, under its own time limit (`timeout -s KILL`, the backstop for a frozen
# connection), with stdin /dev/null; while it runs, a watcher waits for EOF on the channel's
# stdin (the client closed the channel: its deadline, close(), or the client died) and then
# kills every process marked cc-NONCE or in the session that started since, and the process
# group. After a command of a check, what it left behind (marked, or still in the session) is
# killed. cc_files reads files for read_many with one `head`. Each request ends with
# "\nEND-ID RC\n" on stdout and "\nEND-ID\n" on stderr, after everything it printed.
#
# Finding what a command left reads the environment of processes, about 20 us each: not of
# every process on the node, only of those that started since the command began (cc_new: the
# PIDs above the last one /proc/loadavg named before it, that exist now), or of every process
# when the PID counter wrapped in between or too many started.
# A process in the middle of execve() shows an empty environment and an empty command line (the
# kernel has not yet set up the new image's; one that cleared its environment keeps its argv),
# and one may fork while we look: a pass that killed something, or saw a live process (one with
# an exe) in execve(), is followed by another, 10 ms later, at most 100 in all.
{
echo "@NONCE@:$$"; LC_ALL=C; export LC_ALL; CLUSTERCHECK_RUN=cc-@NONCE@; export CLUSTERCHECK_RUN
# shellcheck disable=SC2034 # cc_nl is for the request lines: a newline in a word is "$cc_nl"
cc_nl='
'
if command -v timeout >/dev/null 2>&1; then cc_t=1; else cc_t=; fi
cc_me=$$
cc_end() { printf '\n@END@-%s %s\n' "$1" "$2"; printf '\n@END@-%s\n' "$1" >&2; }
cc_new() {
cc_n=; read -r cc_x cc_x cc_x cc_x cc_n cc_x </proc/loadavg; cc_p=$1; cc_list='' cc_env=''
case $cc_p.$cc_n in *[!0-9.]*|.*|*.) cc_n=0 cc_p=1;; esac
if [ "$cc_n" -lt "$cc_p" ] || [ $((cc_n - cc_p)) -gt 1024 ]; then
cc_env='/proc/[1-9]*/environ' cc_list='/proc/[1-9]*/environ /proc/[1-9]*/stat'; return 0; fi
while [ "$cc_p" -lt "$cc_n" ]; do cc_p=$((cc_p + 1))
if [ -e /proc/$cc_p ]; then cc_env="$cc_env /proc/$cc_p/environ" cc_list="$cc_list /proc/$cc_p/environ /proc/$cc_p/stat"; fi
done
}
cc_sweep() {
cc_k=0 cc_dead=" $cc_me "
while [ "$cc_k" -lt 100 ]; do cc_k=$((cc_k + 1)) cc_again=
cc_new "$1"
[ -n "$cc_list" ] || return 0
# shellcheck disable=SC2013,SC2086 # /proc/PID/FILE names hold no blank: $cc_list splits on purpose
for cc_p in $(grep -lsE -e "$2" -e "^[0-9]+ \\(.*\\) . [0-9]+ [0-9]+ $$ " $cc_list </dev/null)
do cc_p=${cc_p#/proc/}; cc_p=${cc_p%/*}; case $cc_dead in *" $cc_p "*) continue;; esac
kill -KILL "$cc_p"; cc_dead="$cc_dead$cc_p " cc_again=1; done 2>/dev/null
# shellcheck disable=SC2013,SC2086 # the same
for cc_p in $(grep -Ls . $cc_env </dev/null); do cc_p=${cc_p#/proc/}; cc_p=${cc_p%/*}
[ -e "/proc/$cc_p/exe" ] && ! grep -qs . "/proc/$cc_p/cmdline" && cc_again=1; done 2>/dev/null
[ -n "$cc_again" ] || return 0; sleep 0.01 2>/dev/null
done
}
cc_run() {
cc_i=$1 cc_l=$2 cc_s=$3; shift 3
cc_b=; read -r cc_x cc_x cc_x cc_x cc_b cc_x </proc/loadavg
# shellcheck disable=SC2034 # cc_x: what is read and dropped
{ read -r cc_x <&3; read -r cc_me cc_x </proc/self/stat
cc_sweep "$cc_b" cc-@NONCE@; kill -s KILL -- -$$; } </dev/null >/dev/null 2>&1 &
cc_w=$!
if ! command -v "$1" >/dev/null 2>&1; then echo "$1: command not found" >&2; cc_r=127
elif [ -n "$cc_t" ]; then CLUSTERCHECK_RUN=cc-@NONCE@-$cc_i. timeout -s KILL "$cc_l" "$@" </dev/null 3<&-; cc_r=$?
else CLUSTERCHECK_RUN=cc-@NONCE@-$cc_i. "$@" </dev/null 3<&-; cc_r=$?; fi
kill -KILL "$cc_w" 2>/dev/null; wait "$cc_w" 2>/dev/null
[ "$cc_s" = 1 ] && cc_sweep "$cc_b" "cc-@NONCE@-$cc_i."
cc_end "$cc_i" "$cc_r"
}
cc_files() {
cc_i=$1 cc_c=$2; shift 2; cc_list=
for cc_f; do if [ -f "$cc_f" ] && [ -r "$cc_f" ]; then cc_list=1
elif [ ! -e "$cc_f" ]; then printf '0 %s\n' "$cc_f"; fi; done
printf '\n'
if [ -n "$cc_list" ]; then for cc_f; do [ -f "$cc_f" ] && [ -r "$cc_f" ] && set -- "$@" "$cc_f"; shift; done
head -v -c "$cc_c" -- "$@" </dev/null 3<&-; fi
cc_end "$cc_i" $?
}
exec 3<&0 </dev/null
@FIRST@
while IFS= read -r cc_q <&3; do eval "$cc_q"; done
kill -s KILL -- -$$
}
