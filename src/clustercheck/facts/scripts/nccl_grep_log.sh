# shellcheck shell=sh
# One job log's NCCL lines (checks/nccl.py _GREP_SCRIPT, nccl.log): `sh -c SCRIPT sh FILE PATTERN`
# prints `@@ name` sections of `grep -n -a` lines: rare (PATTERN, analyzers/nccl_log's
# GREP_PATTERN: network selection, device lists, WARN lines, versions; 20000 at most), nogdr
# (network channels without /GDRDMA), shm and channels (2000 each), then counts (`grep -c` per
# channel kind, tab-separated). Each line is cut at 4096 bytes (checks/nccl.py MAX_LINE; `cut`
# keeps one byte more so awk can tell) and a cut line ends in TAB @@cut: a multi-GB log or a
# 200 MB line never crosses the network whole. The file and the pattern are arguments, never
# part of the code. LC_ALL=C: bytes, not characters, whatever the log holds. Read only.
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures:
# changing it means re-recording them (tests/test_scripts.py holds its hash).
f=$1; export LC_ALL=C
echo '@@ rare'; grep -n -a -E -e "$2" -- "$f" | head -n 20000 | cut -b 1-4097 | awk -v n=4096 'length($0) > n { print substr($0, 1, n) "\t@@cut"; next } 1'
echo '@@ nogdr'; grep -n -a -F -e 'via NET/' -- "$f" | grep -v -F -e '/GDRDMA' | head -n 2000 | cut -b 1-4097 | awk -v n=4096 'length($0) > n { print substr($0, 1, n) "\t@@cut"; next } 1'
echo '@@ shm'; grep -n -a -F -e ' via SHM' -- "$f" | head -n 2000 | cut -b 1-4097 | awk -v n=4096 'length($0) > n { print substr($0, 1, n) "\t@@cut"; next } 1'
echo '@@ channels'; grep -n -a -E -e ' via (NET|P2P|SHM)/' -- "$f" | head -n 2000 | cut -b 1-4097 | awk -v n=4096 'length($0) > n { print substr($0, 1, n) "\t@@cut"; next } 1'
echo '@@ counts'
for p in 'via NET/' '/GDRDMA' 'via P2P/' 'via SHM'; do printf '%s\t' "$p"; grep -c -a -F -e "$p" -- "$f"; done
exit 0
