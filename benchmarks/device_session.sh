#!/usr/bin/env bash
# One device-tool session on the offline GPU host: build, GPU suite, benchmarks against NCCL.
#   bash .whl/build.sh && bash benchmarks/device_session.sh [PARTS] [bench args...]
# PARTS: comma-separated from suite, api, async, p2p, mixed, exchange, agree, examples, sanitize, probe, floor, bench,
# resident, linger, final, tables, tables2 (final = suite, api, async, p2p, mixed, examples, tables, tables2). TABLE_ARGS: more
# mpigpu-perf arguments for the blocking tables (--calls).
# The GPU checks (tests/gpu/test_*.py) run under pytest inside every rank: the ranks agree at the end
# of each test and fail together, and a rank whose peers never arrive ends the job (tests/gpu/gpucheck.py).
# The other programs run through `python -m mpi4py`, so an exception on one rank aborts the job instead
# of leaving the others spinning in a collective. Logs go under $OUT (or ./device-out); the last lines
# printed are a short summary: per part and rank count, the counted checks (the last 'passed, N failed'
# line: all modules of the part) and pytest's tests.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 MPIGPU_TIMEOUT_S=${MPIGPU_TIMEOUT_S:-30}
OUT=${OUT:-device-out}
mkdir -p "$OUT"
what=${1:-final}
shift || true
ngpu=$(nvidia-smi -L | wc -l)
counts=${COUNTS:-$(printf "%s\n" 2 "$ngpu" | sort -un)}  # rank counts of the suite and checks: 2 and all GPUs
# MPIGPU_SHARED_GPU=1 (testing, docs/tuning.md): the suite's ranks may outnumber the GPUs and share them
shared=${MPIGPU_SHARED_GPU:-0}
run="mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x MPIGPU_TIMEOUT_S -x PYTHONUNBUFFERED -x MPIGPU_ALGO -x MPIGPU_RESIDENT_US -x MPIGPU_RESIDENT_BLOCKS -x MPIGPU_RESIDENT_MAX_BYTES -x MPIGPU_SHARED_GPU"
perf="python3 -m mpi4py -m mpigpu.perf"
checks="python3 -m pytest -p no:cacheprovider -q"
# the modules split from the former check_collectives.py, in its order (SUITE_ARGS: more pytest
# arguments, e.g. --quick or -k resident)
suite_modules="tests/gpu/test_sweep.py tests/gpu/test_errors.py tests/gpu/test_back_to_back.py tests/gpu/test_resident.py
  tests/gpu/test_protocols.py tests/gpu/test_subcomms.py tests/gpu/test_staged.py tests/gpu/test_one_rank.py"
summary=()
# counts LOG: the counted checks of the last summary line of the GPU checks, and pytest's tally
counts() { echo "$(grep -E 'passed, [0-9]+ failed \(' "$1" | tail -1 | sed 's/ (.*//'); tests: $(grep -E '(passed|failed|error|skipped).* in [0-9.]+s' "$1" | tail -1)"; }
has() { [[ ",$what," == *",$1,"* ]] || { [[ " bench probe sanitize floor resident linger agree " != *" $1 "* ]] && [[ ",$what," == *",final,"* ]]; }; }
if has suite; then
  for n in $counts; do
    [ "$n" -le "$ngpu" ] || [ "$shared" = 1 ] || continue
    timeout ${SUITE_TIMEOUT:-200} $run -n "$n" $checks $suite_modules ${SUITE_ARGS:-} > "$OUT/suite-$n.log" 2>&1
    rc=$?
    summary+=("suite n=$n rc=$rc: $(counts "$OUT/suite-$n.log")")
    while read -r line; do summary+=("  $line"); done < <(grep -E '^[a-z ]+: [0-9]+ passed, [0-9]+ failed \(' "$OUT/suite-$n.log" | grep -v '^all GPU modules')
    grep -E '^FAIL' "$OUT/suite-$n.log" | head -8
  done
fi
if has api; then
  for n in $counts; do
    timeout 90 $run -n "$n" $checks tests/gpu/test_buffer_api.py > "$OUT/api-$n.log" 2>&1
    summary+=("buffer API n=$n rc=$?: $(counts "$OUT/api-$n.log")")
    grep -E '^FAIL|Error' "$OUT/api-$n.log" | head -5
  done
fi
if has async; then
  for n in $counts; do
    timeout 120 $run -n "$n" $checks tests/gpu/test_async.py > "$OUT/async-$n.log" 2>&1
    summary+=("async n=$n rc=$?: $(counts "$OUT/async-$n.log")")
    summary+=("  $(grep -E '^1 KB Allreduce' "$OUT/async-$n.log")")
    grep -E '^FAIL|Error' "$OUT/async-$n.log" | head -5
  done
fi
if has p2p; then
  for n in $counts; do
    timeout 150 $run -n "$n" $checks tests/gpu/test_p2p.py > "$OUT/p2p-$n.log" 2>&1
    summary+=("p2p n=$n rc=$?: $(counts "$OUT/p2p-$n.log")")
    grep -E '^Sendrecv ring' "$OUT/p2p-$n.log" | while read -r line; do echo "  $line"; done
    grep -E '^FAIL|Error' "$OUT/p2p-$n.log" | head -8
  done
fi
if has examples; then
  ex="$OUT/examples-$ngpu.log"
  : > "$ex"
  for prog in allreduce_hello.py data_parallel_training.py broadcast_parameters.py; do
    timeout 120 $run -n "$ngpu" python3 -m mpi4py examples/$prog >> "$ex" 2>&1
    summary+=("example $prog n=$ngpu rc=$?")
  done
  timeout 120 $run -n "$ngpu" python3 -m mpigpu examples/jacobi_halo.py >> "$ex" 2>&1
  summary+=("example jacobi_halo.py through python -m mpigpu n=$ngpu rc=$?")
  grep -v '^\[' "$ex" | tail -8
fi
if has mixed; then
  # one call, one contract: device memory on some ranks, host memory on others (tests/mpi/mixed_placement.py)
  for n in $counts; do
    timeout 300 $run -n "$n" -x MPIGPU_CHECK_ON_GPU=1 python3 -m mpi4py tests/mpi/mixed_placement.py ${MIXED_ARGS:-} \
      > "$OUT/mixed-$n.log" 2>&1
    summary+=("mixed placement n=$n rc=$?: $(grep -E 'checks identical' "$OUT/mixed-$n.log")")
    grep -E 'Error|assert' "$OUT/mixed-$n.log" | head -5
  done
  if [ "$ngpu" -ge 4 ] || [ "$shared" = 1 ]; then
    timeout 300 $run -n 4 -x MPIGPU_CHECK_ON_GPU=1 -x MPIGPU_SIMULATE_NODES=2 python3 -m mpi4py tests/mpi/mixed_placement.py \
      ${MIXED_ARGS:-} > "$OUT/mixed-nodes.log" 2>&1
    summary+=("mixed placement 2 x 2 simulated nodes rc=$?: $(grep -E 'checks identical' "$OUT/mixed-nodes.log")")
    grep -E 'Error|assert' "$OUT/mixed-nodes.log" | head -5
  fi
  # non-blocking calls never wait for their peers' posts (tests/mpi/deferred_agreement.py)
  for n in $counts; do
    timeout 180 $run -n "$n" -x MPIGPU_CHECK_ON_GPU=1 python3 -m mpi4py tests/mpi/deferred_agreement.py \
      > "$OUT/deferred-$n.log" 2>&1
    summary+=("undecided non-blocking calls n=$n rc=$?: $(grep -E 'checks passed' "$OUT/deferred-$n.log")")
    grep -E 'Error|assert' "$OUT/deferred-$n.log" | head -5
  done
fi
if has exchange; then
  # the all-to-all family GPU to GPU (tests/mpi/exchange_collectives.py), then a larger check of every
  # size class against mpi4py's result (tests/gpu/exchange_sizes.py)
  for n in $counts; do
    timeout 240 $run -n "$n" -x MPIGPU_CHECK_ON_GPU=1 python3 -m mpi4py tests/mpi/exchange_collectives.py \
      > "$OUT/exchange-$n.log" 2>&1
    summary+=("exchange collectives n=$n rc=$?: $(grep -E 'checks identical' "$OUT/exchange-$n.log")")
    grep -E 'Error|assert' "$OUT/exchange-$n.log" | head -5
    timeout 240 $run -n "$n" python3 -m mpi4py tests/gpu/exchange_sizes.py > "$OUT/exchange-sizes-$n.log" 2>&1
    summary+=("exchange sizes n=$n rc=$?: $(grep -E 'checks passed' "$OUT/exchange-sizes-$n.log")")
    grep -E 'Error|assert' "$OUT/exchange-sizes-$n.log" | head -5
  done
fi
if has agree; then
  # what the agreement costs: the fast path and host calls with it on and off, alternating rounds
  for n in $(printf "%s\n" 1 $counts | sort -un); do
    timeout 120 $run -n "$n" python3 -m mpi4py benchmarks/agreement_probe.py > "$OUT/agree-$n.log" 2>&1
    summary+=("agreement probe n=$n rc=$?")
    grep -v '^#' "$OUT/agree-$n.log" | sed 's/^/  /' | head -8
  done
fi
if has sanitize; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # SANITIZE_RUNS: tool:ranks pairs (4 ranks reach the forms 2 cannot: LL128 Bcast scatter)
  for spec in ${SANITIZE_RUNS:-memcheck:2 racecheck:2}; do
    tool=${spec%%:*} sn=${spec##*:}
    MPIGPU_TIMEOUT_S=300 timeout 240 $run -n "$sn" -x MPIGPU_TIMEOUT_S "$cs" --tool $tool --error-exitcode 3 \
      --log-file "$OUT/sanitize-$tool-$sn-%p.log" python3 -m mpi4py tests/gpu/sanitize_kernels.py > "$OUT/sanitize-$tool-$sn.out" 2>&1
    summary+=("compute-sanitizer $tool n=$sn rc=$?: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT"/sanitize-$tool-$sn-*.log | sort | uniq -c | tr -s ' ' | tr '\n' ';') $(grep -c 'sanitize run ok' "$OUT/sanitize-$tool-$sn.out") ranks ok")
  done
fi
if has probe; then
  for chunk in ${PROBE_CHUNKS:-131072}; do
    MPIGPU_CHUNK_BYTES=$chunk MPIGPU_MAX_CHANNELS=128 timeout 150 $run -n "$ngpu" -x MPIGPU_CHUNK_BYTES \
      -x MPIGPU_MAX_CHANNELS python3 -m mpi4py benchmarks/engine_probe.py ${PROBE_ARGS:---mid} > "$OUT/probe-$chunk.txt" 2>&1
    summary+=("probe chunk=$chunk rc=$?")
    grep -v '^\[' "$OUT/probe-$chunk.txt" | cut -c1-120
  done
fi
if has floor; then
  # the blocking-call floor: an empty kernel's launch + synchronize, from C (benchmarks/launch_floor.cu)
  nvcc -std=c++17 -O2 -arch=sm_90 benchmarks/launch_floor.cu -o "$OUT/launch_floor" > "$OUT/floor.txt" 2>&1 &&
    timeout 120 "$OUT/launch_floor" >> "$OUT/floor.txt" 2>&1
  summary+=("launch floor rc=$?")
  rm -f "$OUT/launch_floor"
  tail -5 "$OUT/floor.txt"
fi
if has resident; then
  # blocking LL128 calls resident or launched: RESIDENT_CONFIGS of blocks:max_bytes (max 0: LL only),
  # each a call of its own with NCCL beside it
  for spec in ${RESIDENT_CONFIGS:-32:0 32:8388608 64:8388608 16:8388608}; do
    MPIGPU_RESIDENT_BLOCKS=${spec%%:*} MPIGPU_RESIDENT_MAX_BYTES=${spec##*:} timeout 120 $run -n "$ngpu" \
      $perf ${RESIDENT_COLLS:-allreduce,bcast,reduce_scatter_block,allgather} -b ${RESIDENT_FROM:-64K} \
      -e ${RESIDENT_TO:-16M} -f 4 --compare nccl -n 30 -w 5 --inplace 0 > "$OUT/resident-$spec.txt" 2>&1
    summary+=("resident blocks:max_bytes=$spec rc=$?")
    echo "== blocks:max_bytes $spec"
    grep -v '^#  \|^#$\|^\[' "$OUT/resident-$spec.txt" | cut -c1-110
  done
fi
if has linger; then
  # what the resident kernel's wait costs a program that computes after its calls (LINGER_LIMITS: us)
  timeout 150 $run -n "$ngpu" python3 -m mpi4py benchmarks/linger_probe.py ${LINGER_LIMITS:-100,25,0} > "$OUT/linger-$ngpu.txt" 2>&1
  summary+=("linger probe n=$ngpu rc=$?")
  grep -v '^\[' "$OUT/linger-$ngpu.txt"
fi
if has bench; then
  timeout 500 $run -n "$ngpu" $perf "${@:-allreduce}" --json "$OUT/perf-$ngpu.json" > "$OUT/perf-$ngpu.txt" 2> "$OUT/perf-$ngpu.err"
  summary+=("bench n=$ngpu rc=$?")
  cat "$OUT/perf-$ngpu.txt"
fi
if has tables; then
  # 4 GPUs: the four collectives against NCCL and the staged baseline, 1 KB .. 256 MB, then 1 GB
  timeout 170 $run -n "$ngpu" $perf allreduce,bcast,reduce_scatter_block,allgather -b 1K -e 256M -f 4 \
    --compare nccl,staged -n 20 -w 5 --budget 0.3 --inplace 0 ${TABLE_ARGS:-} --json "$OUT/perf-$ngpu.json" \
    --plot "$OUT/perf-$ngpu.png" > "$OUT/perf-$ngpu.txt" 2> "$OUT/perf-$ngpu.err"
  summary+=("bench n=$ngpu rc=$?")
  timeout 60 $run -n "$ngpu" $perf allreduce,bcast,reduce_scatter_block,allgather -b 1G -e 1G \
    --compare nccl -n 10 -w 2 --inplace 0 > "$OUT/perf-$ngpu-1G.txt" 2>&1
  summary+=("bench 1G n=$ngpu rc=$?")
  # stream-ordered timing (stream= calls back to back, as nccl-tests times NCCL)
  timeout 100 $run -n "$ngpu" $perf allreduce,bcast,reduce_scatter_block,allgather -b 1K -e 256M -f 4 \
    --compare nccl -n 20 -w 5 --inplace 0 --timing stream > "$OUT/perf-$ngpu-stream.txt" 2>&1
  summary+=("bench stream n=$ngpu rc=$?")
  grep -v '^#  \|^#$\|^\[' "$OUT/perf-$ngpu.txt" | cut -c1-150
  grep -E '^ +1073741824' "$OUT/perf-$ngpu-1G.txt" | cut -c1-150
  grep -v '^#  \|^#$\|^\[' "$OUT/perf-$ngpu-stream.txt" | cut -c1-130
fi
if has tables2; then
  # 2 GPUs of the same host
  timeout 120 $run -n 2 $perf allreduce,bcast,reduce_scatter_block,allgather -b 1K -e 256M -f 4 --compare nccl \
    -n 20 -w 5 --budget 0.3 --inplace 0 ${TABLE_ARGS:-} --json "$OUT/perf-2.json" --plot "$OUT/perf-2.png" > "$OUT/perf-2.txt" 2> "$OUT/perf-2.err"
  summary+=("bench n=2 rc=$?")
  grep -v '^#  \|^#$\|^\[' "$OUT/perf-2.txt" | cut -c1-130
fi
printf '%s\n' "${summary[@]}"
