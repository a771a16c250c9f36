#!/usr/bin/env bash
# bench/plots/make_figures.py still draws the docs/ figures from the recorded
# JSON (bench/plots/data: the two runs they show) (into a scratch directory). Skipped (77) without the distribution's
# matplotlib.
set -u
root=$1
/usr/bin/python3 -c "import matplotlib" 2>/dev/null || { echo "SKIPPED: /usr/bin/python3 has no matplotlib (python3-matplotlib)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$root/bench/plots/make_figures.py" "$out" "$root/bench/plots/data" || exit 1
for f in allreduce_busbw.png step_time_memory.png; do
  [ -s "$out/$f" ] && head -c 8 "$out/$f" | grep -q PNG || { echo "FAILED: $f not drawn"; exit 1; }
done
echo "figures: ok"
