// single_rank.cuh: the copy that every collective of a one-rank team is, launched (single_rank.cu) or
// run by a resident kernel already on the GPU (resident_kernel.cuh).
#pragma once
#include <stddef.h>
#include <stdint.h>

namespace mg {
// Enqueues a copy of `bytes` from `src` to `dst` (device memory, not overlapping unless equal) on
// `stream`; nothing when the pointers are equal or bytes is 0. Returns 0 or a CUDA error code.
int single_rank_copy(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream);

#ifdef __CUDACC__
// Thread `tid` of `nthreads`' share of copying n units of W bytes (both pointers W-aligned): U units
// at a time, all loaded before any is stored, so each thread keeps U reads in flight (a loop of
// one load and one store per unit waits out a memory round trip per unit).
template <typename W, int U>
__device__ __forceinline__ void copy_units(const W *__restrict__ src, W *__restrict__ dst, size_t n, size_t tid,
                                           size_t nthreads) {
  for (size_t base = tid; base < n; base += nthreads * U) {
    W v[U];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (base + k * nthreads < n) v[k] = src[base + k * nthreads];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (base + k * nthreads < n) dst[base + k * nthreads] = v[k];
  }
}

// The widest unit that `dst`, `src` and `bytes` are all multiples of (16, 8, 4, 2 or 1 bytes).
__host__ __device__ inline int copy_unit_bytes(uintptr_t dst, uintptr_t src, size_t bytes) {
  const uintptr_t align = dst | src | (uintptr_t)bytes;
  return align % 16 == 0 ? 16 : align % 8 == 0 ? 8 : align % 4 == 0 ? 4 : align % 2 == 0 ? 2 : 1;
}

// Thread `tid` of `nthreads`' share of copying `bytes` from src to dst in the widest unit they allow,
// U units in flight per thread.
template <int U> __device__ inline void copy_span(uintptr_t dst, uintptr_t src, size_t bytes, size_t tid, size_t nthreads) {
  switch (copy_unit_bytes(dst, src, bytes)) {
    case 16: copy_units<uint4, U>((const uint4 *)src, (uint4 *)dst, bytes / 16, tid, nthreads); break;
    case 8: copy_units<uint64_t, U>((const uint64_t *)src, (uint64_t *)dst, bytes / 8, tid, nthreads); break;
    case 4: copy_units<uint32_t, U>((const uint32_t *)src, (uint32_t *)dst, bytes / 4, tid, nthreads); break;
    case 2: copy_units<uint16_t, U>((const uint16_t *)src, (uint16_t *)dst, bytes / 2, tid, nthreads); break;
    default: copy_units<uint8_t, U>((const uint8_t *)src, (uint8_t *)dst, bytes, tid, nthreads); break;
  }
}
#endif
}
