#!/usr/bin/env bash
# Runs through `python -m mpi4py` so an exception on one rank aborts the job instead of leaving
# the others spinning in a collective.
# Large-message tuning table: FIFO chunk size x depth x channels (engine_probe --large per setting).
set -u
run="mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x MPIGPU_CHUNK_BYTES -x MPIGPU_NSLOTS -x MPIGPU_MAX_CHANNELS -x MPIGPU_TIMEOUT_S"
export NCCL_NVLS_ENABLE=0 MPIGPU_MAX_CHANNELS=128 MPIGPU_TIMEOUT_S=30
for cfg in "32768 4" "65536 4" "131072 3" "262144 2"; do
  set -- $cfg
  export MPIGPU_CHUNK_BYTES=$1 MPIGPU_NSLOTS=$2
  timeout 120 $run -n "${NRANKS:-4}" python3 -m mpi4py benchmarks/engine_probe.py --large 2>&1 | grep -v "^\[" 
done
