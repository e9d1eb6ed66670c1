// status.cuh: a CUDA runtime call's result as the C ABI's error code.
#pragma once
#include <cuda_runtime.h>

// The code of `e`, clearing a non-sticky error so that the calls after it are unaffected (a sticky
// one, a kernel fault, stays and is reported again by every later call).
static inline int rc(cudaError_t e) {
  if (e != cudaSuccess) cudaGetLastError();
  return (int)e;
}
