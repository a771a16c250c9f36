#!/usr/bin/env bash
# Runs PROGRAM on N ranks under Open MPI's mpirun, as a user would start a
# trainer without dtrun; exits 77 (skipped) where mpirun is missing.
#   tests/multiproc/mpirun.sh N PROGRAM [ARGS...]
set -u
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
n=$1
shift
# --allow-run-as-root: CI containers run as root; --oversubscribe: more ranks than cores.
exec mpirun --allow-run-as-root --oversubscribe -np "$n" \
  -x RTD_TIMEOUT_S=30 -x RTD_LOG=warn "$@"
