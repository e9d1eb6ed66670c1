// single_rank.cu: the collectives of a team of one rank, each a copy of its input into its output (or
// nothing, in place). A blocking copy whose stream is idle runs in the resident kernel
// (collectives.cu); launched, a copy below kMemcpyMinBytes is a kernel of ours on the producer's
// stream and a larger one cudaMemcpyAsync, whichever was faster there (docs/benchmarks.md, one rank).
#include <cuda_runtime.h>
#include <stdint.h>
#include "mpigpu_cuda.h"
#include "single_rank.cuh"
#include "status.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kUnits = 4;         // units in flight per thread
constexpr int kMaxBlocks = 1024;  // a grid-stride loop covers the rest
// From here the driver's device-to-device copy beat every variant of the kernel we tried (1 H100,
// launch + sync: 2 MB 12.0 us against 13.4 at best, 64 MB 58.1 against 58.9, 256 MB 192 against 195).
constexpr size_t kMemcpyMinBytes = 1 << 20;

// Copies n units of W bytes; both pointers are W-aligned.
template <typename W> __global__ void __launch_bounds__(kThreads) copy_kernel(const W *src, W *dst, size_t n) {
  mg::copy_units<W, kUnits>(src, dst, n, (size_t)blockIdx.x * kThreads + threadIdx.x, (size_t)gridDim.x * kThreads);
}

template <typename W> int launch_copy(uintptr_t dst, uintptr_t src, size_t bytes, cudaStream_t stream) {
  const size_t n = bytes / sizeof(W);
  size_t blocks = (n + kThreads * kUnits - 1) / (kThreads * kUnits);
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  copy_kernel<W><<<(unsigned)blocks, kThreads, 0, stream>>>((const W *)src, (W *)dst, n);
  return rc(cudaGetLastError());
}

}  // namespace

int mg::single_rank_copy(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
  if (bytes == 0 || dst == src) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (bytes >= kMemcpyMinBytes)
    return rc(cudaMemcpyAsync((void *)dst, (const void *)src, bytes, cudaMemcpyDeviceToDevice, s));
  switch (copy_unit_bytes(dst, src, bytes)) {
    case 16: return launch_copy<uint4>(dst, src, bytes, s);
    case 8: return launch_copy<uint64_t>(dst, src, bytes, s);
    case 4: return launch_copy<uint32_t>(dst, src, bytes, s);
    case 2: return launch_copy<uint16_t>(dst, src, bytes, s);
    default: return launch_copy<uint8_t>(dst, src, bytes, s);
  }
}
