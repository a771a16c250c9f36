#!/usr/bin/env bash
# PyTorch's distributed test suite on gloo and on rtd, then each test's
# result side by side:
#   tests/torch/conformance/run.sh PYTHON PYTHONPATH OUT [WORLD_SIZE] [TESTS...]
# OUT/<backend>.log: unittest's verbose output; OUT/compare.txt: one line per
# test whose result differs between the two, and the counts. Exits 1 when a
# test that passes on the reference fails on rtd. TESTS: -k patterns.
set -u
py=$1 pypath=$2 out=$3 world=${4:-2}; shift 3; [ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../need_torch.sh"
need_torch "$py"
mkdir -p "$out"
filters=()
for t in "$@"; do filters+=(-k "$t"); done
for backend in gloo rtd; do
  target=""; [ "$backend" = rtd ] && target=rtd
  BACKEND=gloo RTD_SUITE_BACKEND=$target WORLD_SIZE=$world PYTHONPATH=$pypath \
    PYTHONWARNINGS=ignore TORCH_CPP_LOG_LEVEL=ERROR \
    timeout 3600 "$py" "$here/dist_suite.py" -v "${filters[@]}" >"$out/$backend.log" 2>&1
done
"$py" "$here/compare.py" "$out/gloo.log" "$out/rtd.log" | tee "$out/compare.txt"
