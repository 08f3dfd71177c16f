# shellcheck shell=sh
# On the node, when starting an image failed: what the image path ($1) is (facts/image.py
# IMAGE_FILE_SCRIPT). Read-only; sh, od, wc. Prints folder, absent, unreadable, or `file`, the
# size, the first 4 bytes and the 8 bytes at offset 40 (a squashfs superblock's bytes_used).
# Lines starting with `#` are not sent; the text sent is part of the argv recorded in fixtures.
f=$1; if [ -d "$f" ]; then echo folder; elif [ ! -e "$f" ]; then echo absent; elif [ ! -r "$f" ]; then echo unreadable; else echo file; wc -c < "$f"; od -An -tx1 -N4 "$f"; od -An -tu8 -j40 -N8 "$f" 2>/dev/null; fi; true
