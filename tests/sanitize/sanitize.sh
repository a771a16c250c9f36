#!/usr/bin/env bash
# The unit and multi-process tests under a sanitizer, in a build of their own
# (BUILD_DIR: -O1, only the test programs it runs):
#   tests/sanitize/sanitize.sh BUILD_DIR address|thread
# address: AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer
#   (any report fails the test), over every unit test and the collectives,
#   DDP, ZeRO and FSDP tests on 2 and 3 ranks;
# thread: ThreadSanitizer over what runs on several threads at once, built
#   with only the parts it tests (concurrency_tests): the stores, the store
#   service's waiting Gets (StoreWaiters, apart from gRPC), the CPU Work and
#   its queue, the flight recorder, the hand-off ring
#   and the Gloo collectives with their ranks as threads (Gloo itself comes
#   uninstrumented from Debian: its locks are seen, its own accesses not).
#   Not the store service through gRPC: gRPC, abseil and protobuf come
#   uninstrumented too, and memory they hand between their threads through
#   their own locks reads as races (5,335 reports in one run of
#   StoreServiceThreads.*, every one in gRPC's inline code or libraries, in
#   none of our functions); that needs builds of those libraries of their
#   own. That test runs under AddressSanitizer instead.
# The sanitizers' options are this script's (below); a report names the
# test, and the log is BUILD_DIR/<test>.log; a failing run's log is also
# kept as BUILD_DIR/<test>.failed-<time>.log, which no rerun overwrites.
set -u
build=${1:?usage: tests/sanitize/sanitize.sh BUILD_DIR address|thread}
kind=${2:?usage: tests/sanitize/sanitize.sh BUILD_DIR address|thread}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
case "$kind" in
  address) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
  thread) flags="-fsanitize=thread" ;;
  *) echo "usage: tests/sanitize/sanitize.sh BUILD_DIR address|thread" >&2; exit 2 ;;
esac
# As tests/fuzz/fuzz.sh: a build of this tree from another clone may serve this one.
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
# With the CUDA toolkit, the NCCL backend's unit tests (over fake NCCL and
# CUDA layers: no GPU needed) run under AddressSanitizer too; the device
# code itself is not instrumented.
cuda=OFF
[ "$kind" = address ] && cuda=AUTO
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DRTD_WITH_CUDA=$cuda \
  -DCMAKE_CXX_FLAGS="-O1 -g1 -fno-omit-frame-pointer $flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
  >"$build.configure.log" 2>&1 ||
  { echo "FAILED: configuring the $kind-sanitized build"; tail -20 "$build.configure.log"; exit 1; }
if [ "$kind" = address ]; then
  targets=(unit_tests collectives_mp_test dtrun)
else
  targets=(concurrency_tests)
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build.build.log" 2>&1 ||
  { echo "FAILED: building under the $kind sanitizer"; grep -E "error" "$build.build.log" | head -20; exit 1; }
echo "built under the $kind sanitizer in $build"

# Every report fails its process: exit code 66, the report in the test's log.
# The full unwinder at each allocation, so that a leak's stack names the
# library that made it (lsan.supp matches Open MPI's by name).
export ASAN_OPTIONS=abort_on_error=0:exitcode=66:detect_leaks=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS=exitcode=66:suppressions=$here/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=66
export TSAN_OPTIONS=exitcode=66:halt_on_error=0:second_deadlock_stack=1:suppressions=$here/tsan.supp
bin=$build/tests
dtrun=$build/launcher/dtrun
fail=0
run() {  # name, timeout, command...
  local name=$1 secs=$2
  shift 2
  local log=$build/$name.log
  if timeout "$secs" "$@" >"$log" 2>&1; then
    echo "ok: $name"
  else
    local rc=$?
    fail=1
    echo "FAILED: $name (exit $rc)"
    grep -E "ERROR: (Address|Leak|Thread)Sanitizer|runtime error:|WARNING: ThreadSanitizer|SUMMARY|\[  FAILED  \]" \
      "$log" | sort | uniq -c | head -20
    # A rerun writes $log again: the failing run's log is kept beside it.
    local kept=$build/$name.failed-$(date +%Y%m%d-%H%M%S).log
    cp "$log" "$kept"
    echo "  (the whole log: $kept)"
  fi
}
if [ "$kind" = address ]; then
  run unit 1200 "$bin/unit_tests"
  for n in 2 3; do
    run "collectives.np$n" 900 "$dtrun" --nproc-per-node=$n --env RTD_TIMEOUT_S=60 --env RTD_LOG=warn \
      "$bin/collectives_mp_test" --gtest_filter=-Large/*
  done
else
  run concurrency 600 "$bin/concurrency_tests"
fi
exit $fail
