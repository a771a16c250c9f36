# Sourced by the recovery benchmarks: kill_to_step LOG KILL_STEP prints
# "seconds steps_redone": from the worker's "kills itself at step K at T ms"
# to rank 0's last "step S completed after the resume at U ms", and how many
# steps before K the run went back to (0 in process; a restart goes back to
# its checkpoint). "- -" where either line is missing.
kill_to_step() {
  local kill done first
  kill=$(grep -o "kills itself at step [0-9]* at [0-9]* ms" "$1" | awk '{print $7}')
  done=$(grep -o "step [0-9]* completed after the resume at [0-9]* ms" "$1" | tail -1)
  first=$(echo "$done" | awk '{print $2}')
  done=$(echo "$done" | awk '{print $8}')
  [ -z "$kill" ] || [ -z "$done" ] && { echo "- -"; return; }
  awk -v k="$kill" -v d="$done" -v f="$first" -v s="$2" 'BEGIN{printf "%.3f %d\n", (d-k)/1000, s-f}'
}
