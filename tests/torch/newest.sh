#!/usr/bin/env bash
# The rtd backend on the newest torch release, beside the GPU machine's 2.11
# (deploy/install_torch.sh puts each in a venv of its own): the extension
# built against it (python/build_ext.sh, into a copy of the build's rt_dist
# package), then under torchrun the collectives, DDP and FSDP2 training, a
# 2-D mesh, HostAdamW and the quick cases of PyTorch's own suite; and the
# Python implementation, which replaces private names of the tested torch
# only, refused with a clear error.
#   tests/torch/newest.sh PYTHON BUILD_PYTHON_DIR DTRUN OUT
# Fails when PYTHON has no torch (unless RTD_SKIP_TORCH_TESTS=1: skipped).
set -u
py=$1 built=$2 dtrun=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/need_torch.sh"
need_torch "$py"
version=$("$py" -c "import torch; print(torch.__version__)")
rm -rf "$out" && mkdir -p "$out/pkg"
cp -a "$built/rt_dist" "$out/pkg/" && rm -f "$out/pkg/rt_dist/torch/"_C*.so
command -v ccache >/dev/null && export CXX="ccache c++"
"$here/../../python/build_ext.sh" "$py" "$out/pkg" >"$out/build.log" 2>&1 ||
  { echo "FAILED: the extension does not build against torch $version"; tail -30 "$out/build.log"; exit 1; }
echo "ok: the extension builds against torch $version"
fail=0
run() {  # name, expect, [env...] --, run.sh arguments...: exits 0 (a name *_refused: not 0), saying expect
  local name=$1 expect=$2 rc ok; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$here/run.sh" "$py" "$dtrun" "$out/pkg" "$@" >"$out/$name.log" 2>&1
  rc=$?
  case "$name" in *_refused) ok=$((rc != 0)) ;; *) ok=$((rc == 0)) ;; esac
  if [ $ok = 1 ] && grep -qF -- "$expect" "$out/$name.log"; then echo "ok: $name on torch $version"; else
    echo "FAILED: $name on torch $version (exit $rc; '$expect' expected)"; tail -20 "$out/$name.log"; fail=1; fi
}
run collectives "checks passed on 2 ranks" -- torchrun 2 collectives.py cpu
run train "all agree after 20 steps on 2 ranks" -- torchrun 2 train.py cpu 20
run mesh "mesh: ok" -- torchrun 4 mesh.py
run groups "checks passed (rank 0)" -- torchrun 3 groups.py cpu
run host_adamw "host_adamw on rtd: ok" -- torchrun 2 host_adamw.py rtd
run python_impl_refused "ValueError: rt_dist: RTD_TORCH_IMPL=python needs torch 2.11" RTD_TORCH_IMPL=python -- \
  torchrun 2 collectives.py cpu
"$here/conformance/run.sh" "$py" "$out/pkg" "$out/conformance" 2 test_all_gather_object \
  test_all_reduce_product test_broadcast_int test_batch_isend_irecv_gloo \
  test_send_recv_any_source test_all_gather_coalesced_simple >"$out/conformance.log" 2>&1 &&
  echo "ok: PyTorch's own cases on torch $version ($(grep "^rtd:" "$out/conformance.log"))" ||
  { echo "FAILED: PyTorch's own cases on torch $version"; tail -20 "$out/conformance.log"; fail=1; }
exit $fail
