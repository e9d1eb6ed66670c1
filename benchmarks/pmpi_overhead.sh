#!/usr/bin/env bash
# The MPI interposer's cost on a host-buffer call (benchmarks/pmpi_overhead.c), plain and preloaded,
# alternated three times in one run on one rank. Needs mpicc and the CUDA driver (libcuda); prints a table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/pmpi_overhead.$$
mkdir -p "$out"
libcuda=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
mpicc -O2 -o "$out/pmpi_overhead" "$here/pmpi_overhead.c" "$libcuda"
pmpi=$(python3 -m mpigpu --pmpi-path)
echo "| buffers | run | plain ns/call | interposed ns/call | added ns |"
echo "|---|---|---|---|---|"
for where in stack heap mmap; do
  for i in 1 2 3; do
    plain=$(mpirun --allow-run-as-root -n 1 "$out/pmpi_overhead" ${ITERS:-1000000} $where)
    with=$(mpirun --allow-run-as-root -n 1 -x LD_PRELOAD="$pmpi" "$out/pmpi_overhead" ${ITERS:-1000000} $where)
    echo "| $where | $i | $plain | $with | $(python3 -c "print(round($with - $plain, 1))") |"
  done
done
