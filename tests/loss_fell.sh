# Shared by the trainers' loss tests (tests/gpu/loss_falls.sh,
# tests/multiproc/mlp_cpu_loss.sh): reads the "step N loss L" lines of a log.
# loss_fell NAME LOG LOW HIGH RATIO: "ok" when the first logged loss lies in
# (LOW, HIGH) and the last is at most RATIO times it, else "FAIL" and status 1.
loss_fell() {
  local name=$1 log=$2 low=$3 high=$4 ratio=$5 losses first last
  losses=$(grep -o "step [0-9]* loss [0-9.e+-]*" "$log" | awk '{print $4}')
  first=$(echo "$losses" | head -1) last=$(echo "$losses" | tail -1)
  echo "info: $name: loss $(echo $losses)"
  if awk -v f="$first" -v l="$last" -v lo="$low" -v hi="$high" -v r="$ratio" \
      'BEGIN { exit !(f > lo && f < hi && l <= r * f) }'; then
    echo "ok: $name: the loss fell from $first to $last"
    return 0
  fi
  echo "FAIL: $name: the loss went from $first to $last (want a start in ($low, $high) and at" \
    "most $ratio of it at the end)"
  return 1
}
