// dispatch.cuh: which storage type and operator run each (mg_dtype, mg_op) pair of the contract,
// written once for both sides: the host picks kernel instantiations by it (kernel_table.cu) and the
// resident kernel picks the body of a call by it on the device (resident_kernel.cuh).
//
// visit_reduce(dtype, op, f) calls f(Tag<T>{}, Tag<Op>{}, mult) with the storage type T, the
// operator Op and the storage elements per user element (complex SUM runs as a float SUM over twice
// the count); visit_copy(dtype, f) does the same for the copying collectives (Bcast, Allgather).
// Both return false, calling nothing, for a pair the engine does not implement. Signed and unsigned
// integers share one storage type except for MAX/MIN (dtypes.cuh).
#pragma once
#include "mpigpu_cuda.h"
#include "dtypes.cuh"

namespace mg {

template <typename T> struct Tag { using type = T; };

// The visitors are instantiated with host lambdas (kernel_table.cu) and device lambdas (the resident
// kernel); each instantiation is only ever called on its own side.
#pragma nv_exec_check_disable
template <typename U, typename S, typename F>
__host__ __device__ __forceinline__ bool visit_integer(int op, F &&f) {
  switch (op) {
    case MG_SUM: f(Tag<U>{}, Tag<OpSum>{}, 1); return true;
    case MG_PROD: f(Tag<U>{}, Tag<OpProd>{}, 1); return true;
    case MG_MAX: f(Tag<S>{}, Tag<OpMax>{}, 1); return true;
    case MG_MIN: f(Tag<S>{}, Tag<OpMin>{}, 1); return true;
    case MG_LAND: f(Tag<U>{}, Tag<OpLand>{}, 1); return true;
    case MG_LOR: f(Tag<U>{}, Tag<OpLor>{}, 1); return true;
    case MG_LXOR: f(Tag<U>{}, Tag<OpLxor>{}, 1); return true;
    case MG_BAND: f(Tag<U>{}, Tag<OpBand>{}, 1); return true;
    case MG_BOR: f(Tag<U>{}, Tag<OpBor>{}, 1); return true;
    case MG_BXOR: f(Tag<U>{}, Tag<OpBxor>{}, 1); return true;
  }
  return false;
}

#pragma nv_exec_check_disable
template <typename Fl, typename F>
__host__ __device__ __forceinline__ bool visit_float(int op, F &&f) {
  switch (op) {
    case MG_SUM: f(Tag<Fl>{}, Tag<OpSum>{}, 1); return true;
    case MG_PROD: f(Tag<Fl>{}, Tag<OpProd>{}, 1); return true;
    case MG_MAX: f(Tag<Fl>{}, Tag<OpMax>{}, 1); return true;
    case MG_MIN: f(Tag<Fl>{}, Tag<OpMin>{}, 1); return true;
  }
  return false;
}

#pragma nv_exec_check_disable
template <typename F>
__host__ __device__ __forceinline__ bool visit_reduce(int dtype, int op, F &&f) {
  switch (dtype) {
    case MG_BOOL:  // MPI allows only the logical ops on C_BOOL
      return (op == MG_LAND || op == MG_LOR || op == MG_LXOR) && visit_integer<uint8_t, uint8_t>(op, f);
    case MG_INT8: return visit_integer<uint8_t, int8_t>(op, f);
    case MG_UINT8: return visit_integer<uint8_t, uint8_t>(op, f);
    case MG_INT16: return visit_integer<uint16_t, int16_t>(op, f);
    case MG_UINT16: return visit_integer<uint16_t, uint16_t>(op, f);
    case MG_INT32: return visit_integer<uint32_t, int32_t>(op, f);
    case MG_UINT32: return visit_integer<uint32_t, uint32_t>(op, f);
    case MG_INT64: return visit_integer<uint64_t, int64_t>(op, f);
    case MG_UINT64: return visit_integer<uint64_t, uint64_t>(op, f);
    case MG_FLOAT16: return visit_float<__half>(op, f);
    case MG_BFLOAT16: return visit_float<__nv_bfloat16>(op, f);
    case MG_FLOAT32: return visit_float<float>(op, f);
    case MG_FLOAT64: return visit_float<double>(op, f);
    case MG_COMPLEX64:
      if (op == MG_SUM) { f(Tag<float>{}, Tag<OpSum>{}, 2); return true; }
      if (op == MG_PROD) { f(Tag<float2>{}, Tag<OpCprod>{}, 1); return true; }
      return false;
    case MG_COMPLEX128:
      if (op == MG_SUM) { f(Tag<double>{}, Tag<OpSum>{}, 2); return true; }
      if (op == MG_PROD) { f(Tag<double2>{}, Tag<OpCprod>{}, 1); return true; }
      return false;
  }
  return false;
}

// Copies move bytes: one unsigned type per element width; complex elements move as their components
// (a complex element may be aligned only like one, AlignUnitOf).
#pragma nv_exec_check_disable
template <typename F>
__host__ __device__ __forceinline__ bool visit_copy(int dtype, F &&f) {
  switch (dtype) {
    case MG_BOOL: case MG_INT8: case MG_UINT8: f(Tag<uint8_t>{}, Tag<OpCopy>{}, 1); return true;
    case MG_INT16: case MG_UINT16: case MG_FLOAT16: case MG_BFLOAT16: f(Tag<uint16_t>{}, Tag<OpCopy>{}, 1); return true;
    case MG_INT32: case MG_UINT32: case MG_FLOAT32: f(Tag<uint32_t>{}, Tag<OpCopy>{}, 1); return true;
    case MG_INT64: case MG_UINT64: case MG_FLOAT64: f(Tag<uint64_t>{}, Tag<OpCopy>{}, 1); return true;
    case MG_COMPLEX64: f(Tag<uint32_t>{}, Tag<OpCopy>{}, 2); return true;
    case MG_COMPLEX128: f(Tag<uint64_t>{}, Tag<OpCopy>{}, 2); return true;
  }
  return false;
}

// StaticReduce (dtypes.cuh) with the pair chosen at run time, for the resident kernel: every rank's
// 16 bytes first (an LL get waits on NVLink; a switch case must not hold that wait), then one
// warp-uniform switch to that pair's reduce_ranks.
struct RuntimeReduce {
  int dtype, op;
  template <typename Get> __device__ __forceinline__ uint4 operator()(int n, const Get &get) const {
    uint4 x[MG_MAX_RANKS];
#pragma unroll
    for (int k = 0; k < MG_MAX_RANKS; ++k) {
      if (k >= n) break;
      x[k] = get(k);
    }
    uint4 out = x[0];
    visit_reduce(dtype, op, [&](auto t, auto o, int) {
      out = reduce_ranks<typename decltype(t)::type, typename decltype(o)::type>(n, [&](int k) { return x[k]; });
    });
    return out;
  }
};

}  // namespace mg
