#!/usr/bin/env bash
# One device-tool session on the offline GPU host: build, GPU suite, benchmark against NCCL.
#   bash .whl/build.sh && bash benchmarks/device_session.sh [suite|bench|all] [bench args...]
# Logs go under $OUT (or ./device-out); the last lines printed are a short summary table.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 MPIGPU_TIMEOUT_S=${MPIGPU_TIMEOUT_S:-30} OMPI_MCA_btl_vader_single_copy_mechanism=none
OUT=${OUT:-device-out}
mkdir -p "$OUT"
what=${1:-all}
shift || true
ngpu=$(nvidia-smi -L | wc -l)
run="mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x MPIGPU_TIMEOUT_S -x PYTHONUNBUFFERED"
summary=()
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
if [ "$what" = suite ] || [ "$what" = all ]; then
  for n in 2 $ngpu; do
    [ "$n" -le "$ngpu" ] || continue
    timeout 420 $run -n "$n" python3 tests/gpu/check_collectives.py ${SUITE_ARGS:-} > "$OUT/suite-$n.log" 2>&1
    rc=$?
    summary+=("suite n=$n rc=$rc: $(grep -E 'passed, [0-9]+ failed' "$OUT/suite-$n.log" | tail -1)")
    grep -E '^FAIL' "$OUT/suite-$n.log" | head -8
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout 500 $run -n "$ngpu" python3 -m mpigpu.perf "${@:-allreduce}" --json "$OUT/perf-$ngpu.json" \
    > "$OUT/perf-$ngpu.txt" 2> "$OUT/perf-$ngpu.err"
  summary+=("bench n=$ngpu rc=$?")
  cat "$OUT/perf-$ngpu.txt"
  tail -5 "$OUT/perf-$ngpu.err"
fi
printf '%s\n' "${summary[@]}"
