#!/usr/bin/env bash
# What each small-call mechanism of the NCCL layer saves, against the spread
# between processes: librt_dist built without one of them at a time
# (cmake -DRTD_AB_WITHOUT=<mechanism>, see the top CMakeLists.txt; or any
# other build of it, an earlier one say), each variant's library beside the
# bundle's own, all run in turns, ROUNDS times:
#   bench/hot_path_ab.sh BUNDLE VARIANTS_DIR OUT
# VARIANTS_DIR/<name>/ holds one variant's librt_dist.so.0 (its name: the
# mechanism it lacks); "base" is the bundle's own library. Per variant and
# round: collective_bench --mode paired on one GPU (our all-reduce and raw
# NCCL's in one process, alternating blocks: ours - raw, per call and in
# host time to issue it). nccl_layer_cost is not run: with its stand-ins'
# eviction walk it varied more than the variants differ (docs/performance.md,
# hot-path-ab-one-gpu). Env: ROUNDS (default 3), NPROC (default 1),
# MAX_BYTES (default 1M). Prints a summary (medians over rounds, and the
# range of each row's rounds) and writes OUT/summary.json.
set -u
bundle=$1 variants_dir=$2 out=$3
mkdir -p "$out"
variants="base $(cd "$variants_dir" && ls -d -- */ 2>/dev/null | tr -d / | tr '\n' ' ')"
export NCCL_NVLS_ENABLE=0
nvidia-smi -L 2>/dev/null
lscpu | grep -E "^Model name|^CPU\(s\)"
echo "variants: $variants"
for round in $(seq "${ROUNDS:-3}"); do
  for v in $variants; do
    lib=$bundle/lib
    [ "$v" = base ] || lib=$variants_dir/$v:$bundle/lib
    LD_LIBRARY_PATH=$lib "$bundle/bin/dtrun" --nproc-per-node="${NPROC:-1}" --env RTD_LOG=warn \
      --env LD_LIBRARY_PATH="$lib" "$bundle/bin/collective_bench" --mode paired --ops all_reduce \
      --min-bytes 4 --max-bytes "${MAX_BYTES:-1M}" --factor 4 --warmup 50 --iters 500 --blocks 9 \
      --json "$out/$v.$round.json" >"$out/$v.$round.bench.log" 2>&1 ||
      { echo "$v round $round: collective_bench failed"; tail -5 "$out/$v.$round.bench.log"; }
    echo "== $v round $round done"
  done
done
python3 - "$out" $variants <<'EOF'
import glob, json, os, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
summary = {}
for v in variants:
    rows = {}  # bytes -> list over rounds of (time ours-raw, host ours-raw)
    for path in sorted(glob.glob(f"{out}/{v}.*.json")):
        by = {}
        for r in json.load(open(path))["rows"]:
            by.setdefault(r["bytes"], {})[r["op"].split("/")[-1]] = r
        for b, pair in by.items():
            if "ours" in pair and "raw" in pair:
                rows.setdefault(b, []).append((pair["ours"]["time_us"] - pair["raw"]["time_us"],
                                               pair["ours"]["host_us"] - pair["raw"]["host_us"]))
    summary[v] = dict(
        ours_minus_raw_us={b: dict(median=statistics.median(x[0] for x in vs),
                                   rounds=[round(x[0], 3) for x in vs]) for b, vs in sorted(rows.items())},
        host_ours_minus_raw_us={b: dict(median=statistics.median(x[1] for x in vs),
                                        rounds=[round(x[1], 3) for x in vs]) for b, vs in sorted(rows.items())})
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
for v, s in summary.items():
    t = " ".join(f"{b}B:{d['median']:+.2f}[{min(d['rounds']):+.2f},{max(d['rounds']):+.2f}]"
                 for b, d in s["ours_minus_raw_us"].items())
    h = " ".join(f"{b}B:{d['median']:+.2f}" for b, d in s["host_ours_minus_raw_us"].items())
    print(f"{v:10} ours-raw us/call {t}\n{'':10} host ours-raw us {h}")
EOF
