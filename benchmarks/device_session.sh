#!/usr/bin/env bash
# One device-tool session on the offline GPU host: build, GPU suite, benchmarks against NCCL.
#   bash .whl/build.sh && bash benchmarks/device_session.sh [suite|api|bench|final] [bench args...]
# Every rank runs through `python -m mpi4py`, so an exception on one rank aborts the job instead of
# leaving the others spinning in a collective. Logs go under $OUT (or ./device-out); the last lines
# printed are a short summary.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 MPIGPU_TIMEOUT_S=${MPIGPU_TIMEOUT_S:-30}
OUT=${OUT:-device-out}
mkdir -p "$OUT"
what=${1:-final}
shift || true
ngpu=$(nvidia-smi -L | wc -l)
run="mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x MPIGPU_TIMEOUT_S -x PYTHONUNBUFFERED -x MPIGPU_ALGO"
perf="python3 -m mpi4py -m mpigpu.perf"
summary=()
if [ "$what" = suite ] || [ "$what" = final ]; then
  for n in 2 $ngpu; do
    [ "$n" -le "$ngpu" ] || continue
    timeout ${SUITE_TIMEOUT:-200} $run -n "$n" python3 -m mpi4py tests/gpu/check_collectives.py ${SUITE_ARGS:-} > "$OUT/suite-$n.log" 2>&1
    rc=$?
    summary+=("suite n=$n rc=$rc: $(grep -E 'passed, [0-9]+ failed' "$OUT/suite-$n.log" | tail -1)")
    grep -E '^FAIL' "$OUT/suite-$n.log" | head -8
  done
fi
if [ "$what" = api ] || [ "$what" = final ]; then
  for n in 2 $ngpu; do
    timeout 90 $run -n "$n" python3 -m mpi4py tests/gpu/check_buffer_api.py > "$OUT/api-$n.log" 2>&1
    summary+=("buffer API n=$n rc=$?: $(grep -E 'passed, [0-9]+ failed' "$OUT/api-$n.log" | tail -1)")
    grep -E '^FAIL|Error' "$OUT/api-$n.log" | head -5
  done
fi
if [ "$what" = bench ]; then
  timeout 500 $run -n "$ngpu" $perf "${@:-allreduce}" --json "$OUT/perf-$ngpu.json" > "$OUT/perf-$ngpu.txt" 2> "$OUT/perf-$ngpu.err"
  summary+=("bench n=$ngpu rc=$?")
  cat "$OUT/perf-$ngpu.txt"
fi
if [ "$what" = final ]; then
  # 4 GPUs: the four collectives against NCCL and the staged baseline, 1 KB .. 1 GB
  timeout 150 $run -n "$ngpu" $perf allreduce,bcast,reduce_scatter_block,allgather -b 1K -e 256M -f 4 \
    --compare nccl,staged -n 20 -w 5 --budget 0.4 --inplace 0 --json "$OUT/perf-$ngpu.json" \
    --plot "$OUT/perf-$ngpu.png" > "$OUT/perf-$ngpu.txt" 2> "$OUT/perf-$ngpu.err"
  summary+=("bench n=$ngpu rc=$?")
  timeout 60 $run -n "$ngpu" $perf allreduce,bcast,reduce_scatter_block,allgather -b 1G -e 1G \
    --compare nccl -n 10 -w 2 --inplace 0 > "$OUT/perf-$ngpu-1G.txt" 2>&1
  summary+=("bench 1G n=$ngpu rc=$?")
  # 2 GPUs of the same host
  timeout 90 $run -n 2 $perf allreduce,bcast -b 1K -e 256M -f 4 --compare nccl -n 20 -w 5 --budget 0.4 \
    --inplace 0 --json "$OUT/perf-2.json" > "$OUT/perf-2.txt" 2> "$OUT/perf-2.err"
  summary+=("bench n=2 rc=$?")
  # issue 2's yardstick: the staged path against host MPI on NumPy buffers, 256 MB, one session
  MPIGPU_ALGO=staged timeout 60 $run -n "$ngpu" $perf allreduce -b 256M -e 256M -n 3 -w 1 --inplace 0 \
    --mem device > "$OUT/staged-256M.txt" 2>&1
  timeout 60 $run -n "$ngpu" $perf allreduce -b 256M -e 256M -n 3 -w 1 --inplace 0 --mem host \
    > "$OUT/host-256M.txt" 2>&1
  summary+=("staged 256M: $(grep -E '^ +268435456' "$OUT/staged-256M.txt" | awk '{print $6 " us"}')")
  summary+=("host MPI numpy 256M: $(grep -E '^ +268435456' "$OUT/host-256M.txt" | awk '{print $6 " us"}')")
  grep -v '^#  \|^#$' "$OUT/perf-$ngpu.txt" | cut -c1-150
  grep -E '^ +1073741824' "$OUT/perf-$ngpu-1G.txt" | cut -c1-150
  grep -v '^#  \|^#$' "$OUT/perf-2.txt" | cut -c1-130
fi
printf '%s\n' "${summary[@]}"
