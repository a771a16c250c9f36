#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, AddressSanitizer, UBSan) in
# BUILD_DIR (a build of its own: only they and what they test) and fuzzes
# each for SECONDS, starting from its corpus in tests/fuzz/corpus/<name>/.
# Prints, for each, the inputs tried, the coverage reached and the corpus
# size; a crash fails the run and names the input to keep as a regression.
# The targets are fuzzed side by side, as many at once as there are cores.
#   tests/fuzz/fuzz.sh BUILD_DIR [SECONDS=20] [NAME...]
#   NAME: rendezvous manifest shard_header flags store_service (default: all)
# New inputs that grow coverage go to BUILD_DIR/corpus/<name>/; copy the
# useful ones (`-merge=1`) into tests/fuzz/corpus/<name>/ to keep them.
# Exits 77 (skipped) where clang or its libFuzzer runtime is not installed.
set -u
build=${1:?usage: tests/fuzz/fuzz.sh BUILD_DIR [SECONDS] [NAME...]}
secs=${2:-20}
shift $(( $# < 2 ? $# : 2 ))
names=${*:-rendezvous manifest shard_header flags store_service}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
command -v clang++ >/dev/null || skip "clang is not installed (Debian: clang)"
probe=$(mktemp -d)
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$probe/p.cc"
clang++ -fsanitize=fuzzer "$probe/p.cc" -o "$probe/p" 2>/dev/null ||
  { rm -rf "$probe"; skip "clang cannot link libFuzzer here (its runtime is missing)"; }
rm -rf "$probe"

# ccache (where the build uses it) may serve a build of this tree from another
# clone: paths under the tree hashed relative to it, and not the build
# directory (the debug info's paths then may be another clone's).
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fsanitize=fuzzer-no-link"
flags="$flags -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="$flags" -DRTD_FUZZ=ON -DRTD_WITH_CUDA=OFF \
  >"$build.configure.log" 2>&1 ||
  { echo "FAILED: configuring the fuzz build"; tail -20 "$build.configure.log"; exit 1; }
targets=()
for n in $names; do targets+=("fuzz_$n"); done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build.build.log" 2>&1 ||
  { echo "FAILED: building the fuzz targets"; grep -E "error" "$build.build.log" | head -20; exit 1; }

fail=0
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
# One target: fuzzes it, writes its summary to $build/fuzz_NAME.summary and
# exits non-zero on a crash. The targets run side by side, one a core.
fuzz_one() {
  local n=$1 work=$build/corpus/$1 log=$build/fuzz_$1.log rc runs cov
  mkdir -p "$work" "$build/crashes/$n"
  cp -n "$here/corpus/$n"/* "$work"/ 2>/dev/null
  "$build/tests/fuzz/fuzz_$n" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/crashes/$n/" "$work" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -E '^#[0-9]+.*cov:' "$log" | tail -1 | grep -o 'cov: [0-9]* ft: [0-9]*')
  {
    echo "fuzz_$n: ${runs:-?} inputs in $secs s, $cov, corpus $(ls "$work" | wc -l) inputs"
    if [ $rc -ne 0 ]; then
      echo "FAILED: fuzz_$n found a crash (exit $rc); the input is in $build/crashes/$n/:"
      ls "$build/crashes/$n"
      grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" | head -20
      echo "fix it, and keep the input in tests/fuzz/corpus/$n/ as a regression"
    fi
  } >"$build/fuzz_$n.summary"
  return $rc
}
cores=$(nproc 2>/dev/null || echo 1)
fail=0 running=()
for n in $names; do
  fuzz_one "$n" &
  running+=($!)
  if [ ${#running[@]} -ge "$cores" ]; then
    wait "${running[0]}" || fail=1
    running=("${running[@]:1}")
  fi
done
for p in "${running[@]}"; do wait "$p" || fail=1; done
for n in $names; do cat "$build/fuzz_$n.summary"; done
exit $fail
