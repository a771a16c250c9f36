#!/usr/bin/env bash
# How the disk under DIR reads and writes a checkpoint-sized file with
# different request patterns: one direct request at a time (dd's usual
# figure), larger requests, several streams in parallel, and through the page
# cache. Prints one line per pattern (GB/s); the page cache is dropped before
# each read where this user may (root).
#   bench/checkpoint/io_patterns.sh DIR [MIB=6144]
set -euo pipefail
dir=$1 mib=${2:-6144}
mkdir -p "$dir"
f=$dir/io_probe
now() { date +%s.%N; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
rate() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { printf "%.2f GB/s (%.2f s)", b * 1048576 / 1e9 / (t1 - t0), t1 - t0 }'; }
parallel() {  # streams, block MiB, dd flags for one stream: reads or writes f in N slices
  local n=$1 bs=$2 mode=$3; shift 3
  local per=$((mib / n / bs)) pids=() i
  for ((i = 0; i < n; i++)); do
    if [ "$mode" = read ]; then
      dd if="$f" of=/dev/null bs=${bs}M count=$per skip=$((i * per)) "$@" 2>/dev/null &
    else
      dd if=/dev/zero of="$f" bs=${bs}M count=$per seek=$((i * per)) conv=notrunc "$@" 2>/dev/null &
    fi
    pids+=($!)
  done
  wait "${pids[@]}"
}
echo "disk: $(df -h "$dir" | tail -1)"
dev=$(df --output=source "$dir" | tail -1)
for q in /sys/block/*/queue; do
  echo "$q: read_ahead_kb=$(cat $q/read_ahead_kb) max_sectors_kb=$(cat $q/max_sectors_kb) nr_requests=$(cat $q/nr_requests) rotational=$(cat $q/rotational)" 2>/dev/null
done | grep -v '/loop' | head -8
echo "file system of $dir: $(findmnt -n -o FSTYPE,OPTIONS -T "$dir" 2>/dev/null) ($dev)"
t0=$(now); dd if=/dev/zero of="$f" bs=16M count=$((mib / 16)) oflag=direct conv=fsync 2>/dev/null; t1=$(now)
echo "write direct 16M x1:        $(rate $mib $t0 $t1)"
for spec in "1 1 iflag=direct" "1 16 iflag=direct" "1 64 iflag=direct" "4 16 iflag=direct" \
            "8 16 iflag=direct" "16 16 iflag=direct" "1 1 -" "1 64 -" "4 16 -"; do
  set -- $spec
  drop
  flags=(); [ "$3" != - ] && flags=("$3")
  t0=$(now); parallel "$1" "$2" read "${flags[@]}"; t1=$(now)
  printf 'read  %-8s %3sM x%-3s %s\n' "$([ "$3" = - ] && echo cached || echo direct)" "$2" "$1" "$(rate $mib $t0 $t1)"
done
for spec in "4 16 oflag=direct" "8 16 oflag=direct" "1 64 -" "4 16 -"; do
  set -- $spec
  flags=(); [ "$3" != - ] && flags=("$3")
  t0=$(now); parallel "$1" "$2" write "${flags[@]}"; sync; t1=$(now)
  printf 'write %-8s %3sM x%-3s %s (with sync)\n' "$([ "$3" = - ] && echo cached || echo direct)" "$2" "$1" "$(rate $mib $t0 $t1)"
done
rm -f "$f"
