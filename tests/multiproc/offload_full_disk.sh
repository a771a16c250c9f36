#!/usr/bin/env bash
# Offload nvme onto a disk that is too small (a 64 KiB tmpfs): the states
# file itself says that no space is left, how much it needed and how much was
# free, and leaves nothing behind; two FSDP ranks whose files would each fit
# but not both are refused on every rank before they allocate, naming the
# directory, the sizes and the ranks on the host.
# Exits 77 (skipped) without root or where mounting a tmpfs is not permitted.
#   tests/multiproc/offload_full_disk.sh UNIT_TESTS DTRUN COLLECTIVES_MP_TEST
set -u
unit=$1 dtrun=$2 mp=$3
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root to mount a small tmpfs"; exit 77; }
dir=$(mktemp -d)
mount -t tmpfs -o size=64k tmpfs "$dir" 2>/dev/null ||
  { rmdir "$dir"; echo "SKIPPED: mounting a tmpfs is not permitted here"; exit 77; }
trap 'umount "$dir"; rmdir "$dir"' EXIT
fail=0
# A test that skips is no pass here: each must have run.
check() {
  local name=$1 log
  shift
  log=$("$@" 2>&1)
  if [ $? -eq 0 ] && ! grep -q "SKIPPED \]" <<<"$log" && grep -q "PASSED  \]" <<<"$log"; then
    echo "ok: $name"
  else
    echo "FAILED: $name"; echo "$log"; fail=1
  fi
}
check "the states file on a full disk" \
  env RTD_TEST_FULL_DIR="$dir" "$unit" --gtest_filter='StateFile.AFullDisk*'
check "two ranks' files on a disk for one" \
  "$dtrun" --nproc-per-node=2 --env RTD_LOG=warn --env RTD_TEST_FULL_DIR="$dir" "$mp" \
  --gtest_filter='FSDPTest.OffloadToAFullDisk*'
left=$(ls -A "$dir")
[ -z "$left" ] && echo "ok: nothing left in the directory" || { echo "FAILED: left $left"; fail=1; }
exit $fail
