#!/usr/bin/env bash
# The Debian package as a new user meets it: made with cpack from this build,
# installed with apt into a fresh Debian 12 root (debootstrap), and a trainer
# outside the project built against it (find_package(rt_dist)) and run on 2
# workers by the packaged dtrun; dtrun doctor and rtd-plan run there too. Exits 77 (skipped) where this machine cannot
# make the root (not root, no debootstrap, no package mirror).
#   tests/deploy/deb.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for debootstrap and chroot"
command -v debootstrap >/dev/null || skip "debootstrap is not installed"
work=$(mktemp -d)
root=$work/root
cleanup() {
  for m in proc sys dev; do umount -l "$root/$m" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" >"$work/cpack.log" 2>&1) ||
  { echo "FAILED: cpack"; cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/rt-dist_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { echo "FAILED: no package made"; cat "$work/cpack.log"; exit 1; }
echo "made $(basename "$deb") ($(du -h "$deb" | cut -f1))"
debootstrap --variant=minbase bookworm "$root" >"$work/debootstrap.log" 2>&1 ||
  { echo "FAILED: setup: debootstrap is installed but could not make a Debian 12 root" \
      "(no mirror?): $(tail -1 "$work/debootstrap.log")"; exit 1; }
for m in proc sys dev; do mount --bind "/$m" "$root/$m"; done
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
cp "$deb" "$root/tmp/"
mkdir -p "$root/src" && cp "$here/trainer/CMakeLists.txt" "$here/trainer/main.cc" "$root/src/"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_root sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
  --no-install-recommends /tmp/$(basename "$deb") g++ cmake make python3" >"$work/apt.log" 2>&1 ||
  { echo "FAILED: apt-get install of the package"; tail -20 "$work/apt.log"; exit 1; }
echo "ok: apt installed the package and its dependencies into a fresh Debian 12 root"
in_root sh -c "cd /src && cmake -B b -DCMAKE_BUILD_TYPE=Release && cmake --build b" \
  >"$work/build.log" 2>&1 || { echo "FAILED: the trainer does not build"; tail -20 "$work/build.log"; exit 1; }
echo "ok: a trainer outside the project builds with find_package(rt_dist)"
out=$(in_root dtrun --nproc-per-node=2 /src/b/train 2>&1)
if echo "$out" | grep -q "sum of ranks 1 over 2 ranks"; then
  echo "ok: the packaged dtrun runs it on 2 workers (no NCCL in that root)"
else
  echo "FAILED: the trainer under the packaged dtrun:"; echo "$out"; exit 1
fi
# The rt_dist Python package: dtrun puts it on the workers' path, and it finds
# the packaged librt_dist (torch itself is not needed for that much).
out=$(in_root dtrun --nproc-per-node=1 python3 -c \
  "import rt_dist._capi as c; print('c api', c.lib.rtd_c_api_version(), c.lib._name)" 2>&1)
# The C interface's version this tree's header declares: the package must carry the same.
api=$(sed -n 's/^#define RTD_C_API_VERSION \([0-9]*\)$/\1/p' "$here/../../runtime/include/rt_dist/c_api.h")
if [ -n "$api" ] && echo "$out" | grep -q "c api $api .*librt_dist.so.0"; then
  echo "ok: the packaged rt_dist Python package is on the workers' path and finds librt_dist"
else
  echo "FAILED: the rt_dist package under the packaged dtrun:"; echo "$out"; exit 1
fi
in_root dtrun doctor >"$work/doctor.log" 2>&1
grep -q "NCCL  *info   not found" "$work/doctor.log" && echo "ok: dtrun doctor says NCCL is not there" ||
  { echo "FAILED: dtrun doctor in the root:"; cat "$work/doctor.log"; exit 1; }
out=$(in_root rtd-plan --world 2 --strategy zero1 4096 2>&1)
echo "$out" | grep -q "total  *64.0 KiB per rank" && echo "ok: the packaged rtd-plan prints a plan" ||
  { echo "FAILED: rtd-plan in the root:"; echo "$out"; exit 1; }
echo "deb: all passed"
