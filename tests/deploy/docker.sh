#!/usr/bin/env bash
# deploy/docker/Dockerfile built and run: the CPU example on 2 workers, a job
# of 2 containers as 2 nodes (host network, as docs/operations.md runs them),
# and dtrun doctor inside the container. Only where a Docker daemon runs and the
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
docker build --network host -q -f "$src/deploy/docker/Dockerfile" -t "$tag" "$src" >/dev/null ||
  { echo "FAILED: docker build"; exit 1; }
out=$(docker run --rm --network host --shm-size=1g "$tag" dtrun --nproc-per-node=2 /opt/train/mlp_cpu --steps 20 2>&1)
echo "$out" | grep -q "step 20 loss" || { echo "FAILED: the example in the image:"; echo "$out"; exit 1; }
echo "ok: the example trains on 2 workers in the image"
port=$((20000 + $$ % 20000))
for n in 0 1; do
  docker run --rm --network host --shm-size=1g "$tag" dtrun --nnodes=2 --node-rank=$n \
    --nproc-per-node=2 --rdzv=127.0.0.1:$port /opt/train/mlp_cpu --steps 10 >"/tmp/rtd_docker_$$_$n.log" 2>&1 &
done
wait
for n in 0 1; do
  grep -q "all workers finished successfully" "/tmp/rtd_docker_$$_$n.log" ||
    { echo "FAILED: node $n of the 2-container job:"; tail -5 "/tmp/rtd_docker_$$_$n.log"; exit 1; }
done
rm -f /tmp/rtd_docker_$$_*.log
echo "ok: 2 containers train as 2 nodes of 2 workers"
docker run --rm --network host --shm-size=1g "$tag" dtrun doctor >/dev/null 2>&1
[ $? -le 1 ] || { echo "FAILED: dtrun doctor in the image"; exit 1; }
echo "ok: dtrun doctor runs in the image"
