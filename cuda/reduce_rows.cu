// reduce_rows.cu: an elementwise reduction of rows that sit one after another in memory, in row order:
// the hierarchical path reduces what arrives from the network (each node's partial, node 0's first)
// on the GPU. The rows may be in pinned host memory (a kernel reads and writes it over PCIe, with no
// copy before or after) or device memory. 16-bit floats accumulate in fp32 and round once, as the
// engine's kernels and the host reduction of the staged path do.
#include <cuda_runtime.h>
#include "dispatch.cuh"
#include "dtypes.cuh"
#include "mpigpu_cuda.h"
#include "status.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

template <typename T, typename Op>
__global__ void reduce_rows_kernel(T *dst, const T *src, size_t stride, int nrows, size_t count) {
  using A = typename mg::AccOf<T>::type;
  const size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
    A acc = mg::to_acc<A, T>(mg::ld_elem(src + i));
    for (int k = 1; k < nrows; ++k) acc = Op::f(acc, mg::to_acc<A, T>(mg::ld_elem(src + k * stride + i)));
    mg::st_elem(dst + i, mg::from_acc<T, A>(acc));
  }
}

}  // namespace

extern "C" int mg_reduce_rows(int dtype, int op, uintptr_t dst, uintptr_t src, size_t row_bytes, int nrows,
                              size_t count, uintptr_t stream) {
  if (nrows < 1 || !dst || !src) return MG_ERR_ARG;
  if (!count) return 0;
  int err = 0;
  const bool known = mg::visit_reduce(dtype, op, [&](auto t, auto o, int mult) {
    using T = typename decltype(t)::type;
    using Op = typename decltype(o)::type;
    if (row_bytes % sizeof(T)) {
      err = MG_ERR_ARG;
      return;
    }
    const size_t n = count * (size_t)mult;
    const int blocks = (int)((n + kThreads - 1) / kThreads < (size_t)kMaxBlocks ? (n + kThreads - 1) / kThreads
                                                                                 : kMaxBlocks);
    reduce_rows_kernel<T, Op><<<blocks, kThreads, 0, (cudaStream_t)stream>>>(
        (T *)dst, (const T *)src, row_bytes / sizeof(T), nrows, n);
    err = rc(cudaGetLastError());
  });
  return known ? err : MG_ERR_UNSUPPORTED;
}

extern "C" int mg_reduce_rows_load(void) {
  int err = 0;
  for (int dtype = 0; dtype < MG_NDTYPES; ++dtype)
    for (int op = 0; op < MG_NOPS && !err; ++op)
      mg::visit_reduce(dtype, op, [&](auto t, auto o, int) {
        using T = typename decltype(t)::type;
        using Op = typename decltype(o)::type;
        cudaFuncAttributes attr;
        if (!err) err = rc(cudaFuncGetAttributes(&attr, (const void *)reduce_rows_kernel<T, Op>));
      });
  return err;
}
