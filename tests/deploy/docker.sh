#!/usr/bin/env bash
# deploy/docker/Dockerfile built and run: the CPU example on 2 workers, and
# dtrun doctor inside the container. Only where a Docker daemon runs and the
# debian:12 base image is already there; otherwise skipped (77), saying which.
#   tests/deploy/docker.sh SOURCE_DIR
set -u
src=$(cd "$1" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
command -v docker >/dev/null || skip "docker is not installed: the image was not built"
docker info >/dev/null 2>&1 || skip "no Docker daemon runs here: the image was not built"
docker image inspect debian:12 >/dev/null 2>&1 || skip "the debian:12 base image is not here: the image was not built"
tag=rt-dist-test:$$
trap 'docker rmi -f "$tag" >/dev/null 2>&1' EXIT
docker build -q -f "$src/deploy/docker/Dockerfile" -t "$tag" "$src" >/dev/null ||
  { echo "FAILED: docker build"; exit 1; }
out=$(docker run --rm --shm-size=1g "$tag" dtrun --nproc-per-node=2 /opt/train/mlp_cpu --steps 20 2>&1)
echo "$out" | grep -q "step 20 loss" || { echo "FAILED: the example in the image:"; echo "$out"; exit 1; }
echo "ok: the example trains on 2 workers in the image"
docker run --rm --shm-size=1g "$tag" dtrun doctor >/dev/null 2>&1
[ $? -le 1 ] || { echo "FAILED: dtrun doctor in the image"; exit 1; }
echo "ok: dtrun doctor runs in the image"
