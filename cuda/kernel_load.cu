// kernel_load.cu: loads every kernel the hierarchical path may launch while a stream waits for the host.
// With CUDA's lazy loading (the default since CUDA 12.2) a kernel's code is loaded at its first launch,
// and loading may synchronize the context: a first launch from the progress thread while a stream=
// call's stream waits for that thread (host_wait.cu) would wait for itself. Asking for a kernel's
// attributes loads it, so the hierarchical path does this once, before its first call.
#include <cuda_runtime.h>
#include "kernel_table.cuh"
#include "mpigpu_cuda.h"
#include "status.cuh"

extern "C" int mg_reduce_rows_load(void);  // reduce_rows.cu
extern "C" int mg_wait_host_load(void);    // host_wait.cu

namespace {

int load(const void *fn) {
  if (!fn) return 0;
  cudaFuncAttributes attr;
  return rc(cudaFuncGetAttributes(&attr, fn));
}

int load_choice(const mg::KernelChoice &k) {
  int e = 0;
  if (!e) e = load((const void *)k.fn);
  if (!e) e = load((const void *)k.ll);
  if (!e) e = load((const void *)k.ll128);
  if (!e) e = load((const void *)k.ring);
  return e;
}

}  // namespace

extern "C" int mg_load_kernels(void) {
  int e = 0;
  for (int dtype = 0; dtype < MG_NDTYPES && !e; ++dtype) {
    e = load_choice(mg::copy_kernel(dtype));
    for (int op = 0; op < MG_NOPS && !e; ++op) e = load_choice(mg::reduce_kernel(dtype, op));
  }
  if (!e) e = mg_reduce_rows_load();
  if (!e) e = mg_wait_host_load();
  return e;
}
