#!/usr/bin/env bash
# rtd-ckpt on a checkpoint the CPU trainer saved on 3 ranks: list, verify,
# consolidate into safetensors (checked by a reader in Python's standard
# library, not ours), and a corrupted file named by verify.
#   tests/checkpoint/consolidate.sh DTRUN MLP_CPU RTD_CKPT
set -u
dtrun=$1 mlp=$2 tool=$3
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "SKIPPED: python3 is not installed"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
"$dtrun" --nproc-per-node=3 --env RTD_LOG=warn "$mlp" --steps 20 --batch 4 --log-every 20 \
  --ckpt-dir "$out/c" --ckpt-every 10 >"$out/train" 2>&1 || { cat "$out/train"; exit 1; }
"$tool" list "$out/c" >"$out/list" 2>&1
grep -q "step_00000020 *3 *2 .*(latest)" "$out/list" && echo "ok: list shows the latest" \
  || { echo "FAILED: list"; cat "$out/list"; fail=1; }
"$tool" verify "$out/c" >"$out/verify" 2>&1 && grep -q "every checksum matches" "$out/verify" \
  && echo "ok: verify" || { echo "FAILED: verify"; cat "$out/verify"; fail=1; }
"$tool" consolidate "$out/c" "$out/model.safetensors" >"$out/cons" 2>&1 \
  || { echo "FAILED: consolidate"; cat "$out/cons"; fail=1; }
python3 "$here/read_safetensors.py" "$out/model.safetensors" "$out/c/step_00000020" || fail=1
printf 'x' | dd of="$out/c/step_00000020/rank_00002.bin" bs=1 seek=3 conv=notrunc 2>/dev/null
"$tool" verify "$out/c" >"$out/bad" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "rank_00002.bin.*CRC-32C" "$out/bad" \
  && echo "ok: verify names the corrupted file" \
  || { echo "FAILED: verify of a corrupted file exited $rc"; cat "$out/bad"; fail=1; }
"$tool" verify "$out/c/step_00000010" >/dev/null && echo "ok: the step before still verifies" \
  || { echo "FAILED: step 10"; fail=1; }
# A consolidation that fails (the corrupted piece) leaves the earlier output
# whole and no partial file beside it: it writes beside and renames.
before=$(cksum <"$out/model.safetensors")
if "$tool" consolidate "$out/c" "$out/model.safetensors" >"$out/cons2" 2>&1; then
  echo "FAILED: consolidate of a corrupted checkpoint succeeded"; fail=1
elif [ "$(cksum <"$out/model.safetensors")" = "$before" ] && [ ! -e "$out/model.safetensors.tmp" ]; then
  echo "ok: a failed consolidate leaves the earlier output as it was"
else
  echo "FAILED: a failed consolidate changed or left files"; ls -l "$out"; fail=1
fi
# A manifest that does not parse: list shows it, says why in one line, and exits 1.
echo garbage >"$out/c/step_00000010/manifest.json"
"$tool" list "$out/c" >"$out/list2" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "step_00000020 *3 *2 .*(latest)" "$out/list2" \
  && grep -q "^step_00000010 .*UNREADABLE: manifest .*step_00000010/manifest.json is malformed: .*garbage" "$out/list2" \
  && [ "$(wc -l <"$out/list2")" -eq 3 ] \
  && echo "ok: list names an unreadable manifest and lists the rest" \
  || { echo "FAILED: list with an unreadable manifest exited $rc"; cat "$out/list2"; fail=1; }
exit $fail
