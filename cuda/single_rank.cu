// single_rank.cu: the collectives of a team of one rank, each a copy of its input into its output (or
// nothing, in place), done by a kernel on the producer's stream: the copy engine's cudaMemcpyAsync
// costs ~10 us more per small call than a launch (docs/benchmarks.md, one-rank rows).
#include <cuda_runtime.h>
#include <stdint.h>
#include "mpigpu_cuda.h"
#include "single_rank.cuh"
#include "status.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // a grid-stride loop covers the rest

// Copies n units of W bytes; both pointers are W-aligned.
template <typename W> __global__ void __launch_bounds__(kThreads) copy_units(const W *src, W *dst, size_t n) {
  for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (size_t)gridDim.x * kThreads)
    dst[i] = src[i];
}

template <typename W> int launch_copy(uintptr_t dst, uintptr_t src, size_t bytes, cudaStream_t stream) {
  const size_t n = bytes / sizeof(W);
  size_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  copy_units<W><<<(unsigned)blocks, kThreads, 0, stream>>>((const W *)src, (W *)dst, n);
  return rc(cudaGetLastError());
}

}  // namespace

int mg::single_rank_copy(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
  if (bytes == 0 || dst == src) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  const uintptr_t align = dst | src | (uintptr_t)bytes;  // the widest unit all three are multiples of
  if (align % 16 == 0) return launch_copy<uint4>(dst, src, bytes, s);
  if (align % 8 == 0) return launch_copy<uint64_t>(dst, src, bytes, s);
  if (align % 4 == 0) return launch_copy<uint32_t>(dst, src, bytes, s);
  if (align % 2 == 0) return launch_copy<uint16_t>(dst, src, bytes, s);
  return launch_copy<uint8_t>(dst, src, bytes, s);
}
