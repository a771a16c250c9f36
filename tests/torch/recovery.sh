#!/usr/bin/env bash
# In-process recovery of a PyTorch DDP job (rt_dist.torch.recovery) on CPU:
# a worker SIGKILLs itself before, inside and after a collective, rank 0
# included; dtrun --recovery=in-process starts it again alone, the survivors
# keep their processes, the replacement gets the state from a survivor, and
# the final weights and optimizer state equal the unbroken run's, bit for bit.
# DEVICE cuda: on GPUs (the rtd backend over NCCL), 2 workers; with one GPU,
# two dtruns on this host (--nnodes=2, a worker each), both on GPU 0, told
# apart as NCCL hosts (NCCL_HOSTID) so that NCCL takes two ranks on one GPU.
# A case marked "meta" builds the replacement's model on the meta device
# (RECOVERY_META=1, recovery.receives_state()); one marked "spare" runs
# dtrun --spare-workers=1: the replacement is the spare made into the worker.
# TIME_LAYERS=L TIME_SIZE=H: also time a loss of a larger model (L layers of
# H^2): as it is, meta, and meta with a spare; TIME_ONLY=1: only those, their
# whole logs printed.
#   tests/torch/recovery.sh PYTHON DTRUN [DEVICE]
set -u
python=$1 dtrun=$2 device=${3:-cpu}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/need_torch.sh"
. "$here/one_gpu_dtruns.sh"
need_torch "$python"
out=$(mktemp -d)
# KEEP_LOGS=DIR: every run's log kept there.
trap '[ -n "${KEEP_LOGS:-}" ] && mkdir -p "$KEEP_LOGS" && cp -a "$out"/. "$KEEP_LOGS"/; rm -rf "$out"' EXIT
export TORCH_CPP_LOG_LEVEL=ERROR PYTHONWARNINGS=ignore
fail=0
steps=20
gpus=0
[ "$device" = cuda ] && gpus=$("$python" -c "import torch; print(torch.cuda.device_count())")
if [ "$device" = cuda ] && [ "$gpus" -lt 1 ]; then
  [ "${RTD_REQUIRE_GPU:-0}" = 1 ] && { echo "FAILED: no GPU (RTD_REQUIRE_GPU=1)"; exit 1; }
  echo "SKIPPED: no GPU visible to torch"; exit 77
fi
port=$((29900 + RANDOM % 200))
run() {  # log, nproc, dtrun flags (one word, may be empty), recovery.py arguments...
  local log=$1 n=$2 flags=$3; shift 3
  mkdir -p "$out/$log.d"
  if [ "$device" = cuda ] && [ "$gpus" -lt "$n" ]; then
    local rc=0
    # shellcheck disable=SC2086
    RECOVERY_DIR="$out/$log.d" one_gpu_dtruns "$dtrun" "$n" $port "$out/$log" $flags -- \
      "$python" "$here/recovery.py" "$@" $steps "$device" || rc=1
    cat "$out/$log".[0-9] >"$out/$log"
    port=$((port + 1))
    return $rc
  fi
  # shellcheck disable=SC2086
  RECOVERY_DIR="$out/$log.d" timeout 200 "$dtrun" --nproc-per-node="$n" --max-restarts=0 $flags \
    "$python" "$here/recovery.py" "$@" $steps "$device" >"$out/$log" 2>&1
}
digests() { grep -o "final digest [0-9a-f]*" "$out/$1" | awk '{print $3}' | sort -u; }
check() {  # what, substring, log
  if grep -qF -- "$2" "$out/$3"; then echo "ok: $1"; else echo "FAILED: $1 (no '$2')"; fail=1; fi
}

sizes="2 3" cases=("2 before 1" "2 after 0 meta" "3 inside 0 spare" "3 after 2" "3 before 1"
                  "2 before 1 meta spare")
[ "$device" = cuda ] && sizes=2 cases=("2 before 1" "2 inside 0 meta" "2 after 0 spare")
[ "${TIME_ONLY:-0}" = 1 ] && sizes="" cases=()
for n in $sizes; do
  flags=""; [ $n = 3 ] && flags=--recovery=in-process  # the plain path, and Job without a loss
  run plain$n $n "$flags" none 0 0 || { echo "FAILED: the unbroken run of $n"; cat "$out/plain$n"; exit 1; }
  [ "$(digests plain$n | wc -l)" = 1 ] || { echo "FAILED: the ranks of the unbroken run differ"; fail=1; }
done

# Whether the case's marks ($4...) hold a word.
marked() { case " $marks " in *" $1 "*) echo 1 ;; *) echo 0 ;; esac; }
# dtrun's flags, with a spare when $1 is 1.
recovery_flags() { echo "--recovery=in-process$([ "$1" = 1 ] && echo " --spare-workers=1")"; }

# n, where, the rank killed, marks
for c in "${cases[@]}"; do
  set -- $c; n=$1 where=$2 victim=$3; shift 3; marks="$*"
  meta=$(marked meta) spare=$(marked spare)
  log="kill-$n-$where-$victim${marks:+-${marks// /-}}"
  if RECOVERY_META=$meta run $log $n "$(recovery_flags $spare)" $where $victim 8; then
    echo "ok: $n workers, rank $victim killed $where a collective: the job finished"
  else
    echo "FAILED: $n workers, rank $victim killed $where: the job failed"; cat "$out/$log"; fail=1; continue
  fi
  check "$log: dtrun started rank $victim again alone" \
    "worker rank $victim was killed by signal 9 (Killed); starting it again alone, in generation 1" $log
  check "$log: the replacement resumed from a survivor's step" "rank $victim joined generation 1: resuming after step" $log
  [ "$meta" = 1 ] && check "$log: the replacement built its model on the meta device" \
    "rank $victim generation 1 started" $log && check "$log: (the meta device)" "model (meta)" $log
  if [ "$spare" = 1 ]; then
    made=$(grep -o "worker rank $victim is a spare made into it (pid [0-9]*)" "$out/$log" |
      grep -o "[0-9]*)" | tr -d ')')
    ran=$(grep -o "rank $victim pid [0-9]* generation 1" "$out/$log" | awk '{print $4}')
    if [ -n "$made" ] && [ "$made" = "$ran" ]; then
      echo "ok: $log: the replacement was the spare (pid $made)"
    else
      echo "FAILED: $log: the replacement (pid '$ran') was not the spare (pid '$made')"; fail=1
    fi
    # What every optimizer imports when it is made, the spare imported ahead.
    if grep "rank $victim generation 1 started" "$out/$log" | grep -q "torch._dynamo imported ahead"; then
      echo "ok: $log: the spare had imported torch._dynamo"
    else
      echo "FAILED: $log: the spare had not imported torch._dynamo"; fail=1
    fi
    # dtrun ends the spare it started behind the one it used with the job.
    pgrep -f "rt_dist.spare .*recovery.py" >/dev/null &&
      { echo "FAILED: $log: a spare outlived the job"; fail=1; }
  fi
  for r in $(seq 0 $((n - 1))); do
    [ "$r" = "$victim" ] && continue
    lines=$(grep -c "rank $r pid" "$out/$log")
    [ "$lines" = 1 ] && echo "ok: $log: rank $r kept its process" ||
      { echo "FAILED: $log: rank $r started $lines times"; fail=1; }
    check "$log: rank $r recovered" "rank $r recovered in generation 1" $log
  done
  got=$(digests $log) want=$(digests plain$n)
  if [ "$(echo "$got" | wc -l)" = 1 ] && [ "$got" = "$want" ]; then
    echo "ok: $log: every rank's weights and optimizer state equal the unbroken run's ($got)"
  else
    echo "FAILED: $log: digests $(echo $got) against $want"; cat "$out/$log"; fail=1
  fi
  grep -h "from the kill" "$out/$log" | sed "s/^/  $log: /"
done

# A spare that cannot start (a module it cannot import) is named; the loss
# is recovered as without it, by a worker started anew.
if [ "${TIME_ONLY:-0}" != 1 ] && [ "$device" = cpu ]; then
  RTD_SPARE_IMPORTS=no_such_module_for_a_spare run spare-broken 2 \
    "--recovery=in-process --spare-workers=1" before 1 8 ||
    { echo "FAILED: a broken spare failed the job"; cat "$out/spare-broken"; fail=1; }
  check "a spare that cannot start is named" "a spare worker (pid" spare-broken
  check "  (and why)" "No module named 'no_such_module_for_a_spare'" spare-broken
  grep -q "is a spare made into it" "$out/spare-broken" &&
    { echo "FAILED: a spare that had ended was made a worker"; fail=1; }
  [ "$(digests spare-broken)" = "$(digests plain2)" ] &&
    echo "ok: without its spare the job recovered to the unbroken run's weights" ||
    { echo "FAILED: spare-broken: digests $(digests spare-broken)"; fail=1; }
  # A spare still importing when the worker is killed (an import that takes
  # 30 s, then fails) is not made the replacement: dtrun waits 10 s for it to
  # say it is ready, then starts the worker anew. Before, it was made the
  # replacement, died as that worker, and the spare started behind it took
  # the next turn, until the restarts ran out.
  printf 'import time\ntime.sleep(30)\nraise ImportError("a late failure (the test\x27s)")\n' \
    >"$out/rtd_test_slow_spare_import.py"
  PYTHONPATH="$out${PYTHONPATH:+:$PYTHONPATH}" RTD_SPARE_IMPORTS=rtd_test_slow_spare_import \
    run spare-slow 2 "--recovery=in-process --spare-workers=1" before 1 8 ||
    { echo "FAILED: a spare still importing failed the job"; cat "$out/spare-slow"; fail=1; }
  grep -q "is a spare made into it" "$out/spare-slow" &&
    { echo "FAILED: a spare still importing was made a worker"; fail=1; }
  [ "$(digests spare-slow)" = "$(digests plain2)" ] &&
    echo "ok: a spare still importing was left alone; a worker started anew recovered the weights" ||
    { echo "FAILED: spare-slow: digests $(digests spare-slow)"; fail=1; }
fi

if [ -n "${TIME_LAYERS:-}" ]; then
  # TIME_VARIANTS: "META,SPARE,INIT_SYNC ..." (DDP's own broadcast of the weights: 1).
  for variant in ${TIME_VARIANTS:-0,0,1 1,0,1 1,1,1}; do
    set -- ${variant//,/ }; name="time-meta$1-spare$2-sync$3"
    RECOVERY_INIT_SYNC=$3 RECOVERY_META=$1 RECOVERY_LAYERS=$TIME_LAYERS RECOVERY_SIZE=${TIME_SIZE:-4096} steps=12 \
      run $name 2 "$(recovery_flags $2)" before 1 6 ||
      { echo "FAILED: the timed loss ($name)"; tail -30 "$out/$name"; fail=1; }
    grep -h "parameters\|from the kill\|recovered in generation\|joined generation\| started: \|spare made\|caught at" \
      "$out/$name" | sed "s/^/  $name: /"
    [ "${TIME_ONLY:-0}" = 1 ] && cat "$out/$name"
  done
fi
[ "$device" = cuda ] && exit $fail  # the cases below are of arithmetic and flags, not devices

# DDP's own arithmetic (an all-reduce of each bucket) on 3 workers: the DDP
# built anew after the loss lays out its first buckets otherwise, so a ring
# sums some elements in another order; the weights then equal the unbroken
# run's to float rounding (the largest difference is printed).
export REDUCE=sum
run plain-sum 3 --recovery=in-process none 0 0 && run kill-sum 3 --recovery=in-process before 1 8 ||
  { echo "FAILED: the runs with DDP's all-reduce"; cat "$out/kill-sum"; fail=1; }
"$python" - "$out/plain-sum.d/weights.pt" "$out/kill-sum.d/weights.pt" <<'PY' || fail=1
import sys
import torch
a, b = (torch.load(p) for p in sys.argv[1:3])
diff = max((a[k] - b[k]).abs().max().item() for k in a)
scale = max(a[k].abs().max().item() for k in a)
ok = diff <= 1e-6 * max(scale, 1.0)
print(("ok" if ok else "FAILED") + f": DDP's all-reduce, 3 workers, rank 1 killed: the weights "
      f"differ from the unbroken run's by at most {diff:.3g} (largest weight {scale:.3g})")
sys.exit(0 if ok else 1)
PY
unset REDUCE

# check() raises once the store says the generation ended (the watch aborted the group).
RECOVERY_DIR=$out timeout 60 "$dtrun" --nproc-per-node=2 --max-restarts=0 --recovery=in-process \
  "$python" "$here/recovery_check.py" >"$out/check" 2>&1
check "a Job of state that is neither module nor optimizer is refused" "refused: rt_dist.torch.recovery: state holds modules and optimizers, not int" check
check "a Job on another backend is refused" "refused: rt_dist.torch.recovery: backend 'gloo'" check
for r in 0 1; do
  check "rank $r: check() raised after the generation ended" "rank $r: check raised: rt_dist.torch.recovery: the group of generation 0 was aborted" check
done

# Without --recovery=in-process the loss is the job's: it fails, and says so.
if run norec 2 "" before 1 8; then
  echo "FAILED: a loss without --recovery=in-process finished"; fail=1
else
  echo "ok: without --recovery=in-process the loss fails the job"
fi
exit $fail
