"""mpigpu-perf: an nccl-tests-compatible benchmark of mpigpu with NCCL / staged / CUDA-aware MPI
baselines measured in the same run. Run `mpiexec -n N mpigpu-perf --help`."""
