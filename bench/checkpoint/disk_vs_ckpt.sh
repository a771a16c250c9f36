#!/usr/bin/env bash
# The disk's own sequential bandwidth (dd: direct I/O, fsync'd write; direct
# read) beside ckpt_bench's save and load of the same number of bytes, in one
# run, on the same directory's file system.
#   bench/checkpoint/disk_vs_ckpt.sh CKPT_BENCH DIR [PARAMS=537e6] [RANKS=2] [ckpt_bench flags...]
set -euo pipefail
bench=$1 dir=$2 params=${3:-537e6} ranks=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
mkdir -p "$dir"
mib=$(awk -v p="$params" 'BEGIN { printf "%d", p * 12 / 1048576 }')
probe="$dir/dd_probe"
echo "disk: $(df -h "$dir" | tail -1)"
w=$( { dd if=/dev/zero of="$probe" bs=1M count="$mib" oflag=direct conv=fsync 2>&1; } | tail -1)
sync
r=$( { dd if="$probe" of=/dev/null bs=1M iflag=direct 2>&1; } | tail -1)
rm -f "$probe"
echo "dd write ($mib MiB, direct, fsync): $w"
echo "dd read  ($mib MiB, direct):        $r"
"$bench" --dir "$dir/ckpt" --params "$params" --ranks "$ranks" --rounds 2 "$@"
