#!/usr/bin/env bash
# The trace of a GPU job shows the copy engines' individual copies: with
# RTD_TRACE_DIR, 2 ranks of the GPU trainer (DDP, whose buckets the copy
# engines reduce; ZeRO-3, whose gathers and reductions they carry) give a
# merged trace.json with a span per copy ("copy with rank P") and per addition,
# each inside the host's span of its collective (from the call to its
# completion, with 0.2 ms for the clocks' anchor). Exits 77 (skipped) with
# fewer than 2 GPUs.
#   tests/gpu/trace_copies.sh DTRUN MLP_GPU
set -u
dtrun=$1 mlp=$2
. "$(dirname "$0")/lib.sh"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
[ "${gpus:-0}" -ge 1 ] || no_gpu "nvidia-smi finds no GPU"
# One GPU is not a broken GPU: the test needs two, and says so.
[ "${gpus:-0}" -ge 2 ] || { echo "skipped: needs 2 GPUs (found ${gpus:-0})"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for shard in ddp zero3; do
  rm -rf "$work/trace"
  RTD_TRACE_DIR="$work/trace" "$dtrun" --nproc-per-node=2 --env RTD_LOG=warn "$mlp" \
    --hidden 1024 --layers 4 --batch 2048 --steps 6 --shard "$shard" >"$work/log" 2>&1 ||
    { echo "FAIL: $shard: mlp_gpu exited $?:"; tail -5 "$work/log"; fail=1; continue; }
  python3 - "$work/trace/trace.json" "$shard" <<'PY' || fail=1
import json, sys
path, shard = sys.argv[1], sys.argv[2]
events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
slack = 200  # us: the anchor's placement of GPU times on the host clock
bad = 0
for rank in (0, 1):
    mine = [e for e in events if e["pid"] == rank]
    copies = [e for e in mine if e["name"].startswith("copy with rank ")]
    adds = [e for e in mine if e["name"] == "addition"]
    calls = [e for e in mine if e["cat"] == "collective" and e["name"].startswith("persistent_")]
    peers = {e["name"] for e in copies}
    if peers != {"copy with rank %d" % (1 - rank)} or not calls:
        print("FAIL: %s rank %d: copies %s, %d copy-engine collectives" % (shard, rank, sorted(peers), len(calls)))
        bad = 1
        continue
    if not adds:
        print("FAIL: %s rank %d: no addition spans" % (shard, rank))
        bad = 1
    outside = [e for e in copies + adds
               if not any(c["ts"] - slack <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + slack
                          for c in calls)]
    if outside:
        e = outside[0]
        print("FAIL: %s rank %d: %d of %d GPU spans outside every collective, e.g. %s at %d+%d"
              % (shard, rank, len(outside), len(copies) + len(adds), e["name"], e["ts"], e["dur"]))
        bad = 1
    else:
        busy = sum(e["dur"] for e in copies)
        print("ok: %s rank %d: %d copies (%d us), %d additions, each inside one of %d collectives"
              % (shard, rank, len(copies), busy, len(adds), len(calls)))
sys.exit(bad)
PY
done
exit $fail
