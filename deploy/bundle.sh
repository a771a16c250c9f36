#!/usr/bin/env bash
# Makes a relocatable bundle of dtrun, librt_dist, the examples and benchmarks:
#   deploy/bundle.sh BUILD_DIR OUT_DIR [--with-tests]
# OUT_DIR/bin holds the programs, OUT_DIR/lib librt_dist and every shared
# library they need that a GPU machine cannot be assumed to have (gRPC,
# Protobuf, abseil, spdlog, fmt, Gloo, ...), with RUNPATH $ORIGIN/../lib.
# Left out: glibc, libstdc++/libgcc, and the CUDA driver, runtime and NCCL,
# which the GPU machine provides. --with-tests adds the test programs.
set -euo pipefail
build=${1:?usage: deploy/bundle.sh BUILD_DIR OUT_DIR [--with-tests]}
out=${2:?usage: deploy/bundle.sh BUILD_DIR OUT_DIR [--with-tests]}
with_tests=${3:-}
command -v patchelf >/dev/null || { echo "bundle: patchelf is missing (deploy/install_deps.sh installs it)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cmake --install "$build" --prefix "$out/stage" >/dev/null
cp -a "$out/stage/bin/." "$out/bin/"
cp -a "$out/stage/lib/"librt_dist.so* "$out/lib/"
# The rt_dist Python package (the rtd backend of torch.distributed): dtrun
# finds it at ../lib/rt_dist/python, and it finds librt_dist three folders up.
[ -d "$out/stage/lib/rt_dist/python" ] && mkdir -p "$out/lib/rt_dist" &&
  cp -a "$out/stage/lib/rt_dist/python" "$out/lib/rt_dist/"
mkdir -p "$out/include" && cp -a "$out/stage/include/." "$out/include/"
rm -rf "$out/stage"
if [ "$with_tests" = --with-tests ]; then
  for t in unit_tests collectives_mp_test gpu_collectives_test gpu_ce_shared_test e2e_tests; do
    [ -x "$build/tests/$t" ] && cp "$build/tests/$t" "$out/bin/"
  done
  # PyTorch's distributed suite needs expecttest (pure Python), which the
  # GPU machine's torch lacks: the build's torch venv lends its copy.
  tp=${RTD_TORCH_PYTHON:-/opt/rt_dist/torch-venv/bin/python}
  et=$("$tp" -c "import expecttest, os; print(os.path.dirname(expecttest.__file__))" 2>/dev/null) &&
    mkdir -p "$out/lib/rt_dist/test_python" && cp -r "$et" "$out/lib/rt_dist/test_python/" &&
    rm -rf "$out/lib/rt_dist/test_python/expecttest/__pycache__"
fi

system_lib='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libnccl|libnvidia|libcublas)'
collect() {  # every non-system library an ELF file needs, by path
  ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do
      [[ $name =~ $system_lib || $path == "$(realpath "$out")"/* || $name == librt_dist.so* ]] || echo "$path"
    done
}
for f in "$out"/bin/* "$out"/lib/librt_dist.so.*.*; do
  collect "$f"
done | sort -u | while read -r path; do
  cp -L "$path" "$out/lib/$(basename "$path")"
done

# Debug info stays in the build tree; the bundle carries stripped copies.
undefined() { nm -D --undefined-only "$1" | awk '{print $NF}' | sort; }
for f in "$out"/bin/*; do
  file "$f" | grep -q ELF || continue
  strip --strip-unneeded "$f"
  before=$(undefined "$f")
  # The machine's CUDA libraries (cuBLASLt) are looked for in the usual toolkit place too.
  patchelf --set-rpath '$ORIGIN/../lib:/usr/local/cuda/lib64' "$f"
  # patchelf overwrites the old RUNPATH string with X's; a symbol name the
  # linker stored as its tail would be lost with it.
  if [ "$before" != "$(undefined "$f")" ]; then
    echo "bundle: patchelf changed the symbols $f needs (a symbol shared the old RUNPATH's tail)" >&2
    exit 1
  fi
done
for f in "$out"/lib/*.so*; do
  [ -L "$f" ] && continue
  strip --strip-unneeded "$f"
  patchelf --set-rpath '$ORIGIN' "$f"
done
echo "bundle: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
