// dtypes.cuh: element storage types, accumulation types and the reduction operators.
//
// Each (mg_dtype, mg_op) pair maps to <Storage, Acc, Op>: values are loaded as Storage, combined as
// Acc and stored back as Storage. 16-bit floats accumulate in fp32 and round once at the end, so the
// result of an n-way reduction does not depend on how the n inputs were paired. Integer SUM/PROD and
// all bitwise/logical ops run on the unsigned type of the same width: two's-complement wraparound is
// identical for signed and unsigned, and this avoids signed-overflow UB; only MAX/MIN need signedness.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>
#include "mpigpu_cuda.h"

namespace mg {

// Accumulation type for a storage type. uint8/uint16 widen to uint32 so PROD has no int promotion UB.
template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };
template <> struct AccOf<uint8_t> { using type = uint32_t; };
template <> struct AccOf<uint16_t> { using type = uint32_t; };
template <> struct AccOf<int8_t> { using type = int32_t; };
template <> struct AccOf<int16_t> { using type = int32_t; };

template <typename A, typename T> __device__ __forceinline__ A to_acc(T v) { return static_cast<A>(v); }
template <> __device__ __forceinline__ float to_acc<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float2 to_acc<float2, float2>(float2 v) { return v; }
template <> __device__ __forceinline__ double2 to_acc<double2, double2>(double2 v) { return v; }

template <typename T, typename A> __device__ __forceinline__ T from_acc(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_acc<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float2 from_acc<float2, float2>(float2 v) { return v; }
template <> __device__ __forceinline__ double2 from_acc<double2, double2>(double2 v) { return v; }

struct OpSum  { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return a + b; } };
struct OpProd { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return a * b; } };
struct OpMax  { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return a < b ? b : a; } };
struct OpMin  { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return b < a ? b : a; } };
struct OpLand { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return (A)((a != 0) & (b != 0)); } };
struct OpLor  { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return (A)((a != 0) | (b != 0)); } };
struct OpLxor { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return (A)((a != 0) ^ (b != 0)); } };
struct OpBand { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return a & b; } };
struct OpBor  { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return a | b; } };
struct OpBxor { template <typename A> __device__ __forceinline__ static A f(A a, A b) { return a ^ b; } };
// Complex product; complex SUM runs as a float SUM over twice the count.
struct OpCprod {
  __device__ __forceinline__ static float2 f(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
  }
  __device__ __forceinline__ static double2 f(double2 a, double2 b) {
    return make_double2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
  }
};
// Plain copy (Bcast, Allgather): one source, never combined.
struct OpCopy { template <typename A> __device__ __forceinline__ static A f(A a, A) { return a; } };

// 16 bytes of each of the first n sources (get(k), 1 <= n <= MaxSrc, fetched in source order)
// combined element by element in source order, accumulating in AccOf<T> (float for 16-bit floats);
// source 0's vector as it is where MaxSrc is 1. The one combine of every protocol: the Simple steps'
// (reduce_vec, protocol.cuh) and the LL and LL128 ones' (reduce_ranks). Source 0 is taken outside the
// loop: an accumulator seeded inside it kept both forms live, and the resident kernel spilled more than
// twice as much (docs/kernel-registers.md).
template <typename T, typename Op, int MaxSrc, typename Get>
__device__ __forceinline__ uint4 combine16(int n, const Get &get) {
  const uint4 first = get(0);
  if constexpr (MaxSrc == 1) {
    return first;
  } else {
    using A = typename AccOf<T>::type;
    constexpr int V = 16 / sizeof(T);
    A acc[V];
    const T *e = reinterpret_cast<const T *>(&first);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = to_acc<A, T>(e[i]);
#pragma unroll
    for (int k = 1; k < MaxSrc; ++k) {
      if (k < n) {
        const uint4 x = get(k);
        const T *f = reinterpret_cast<const T *>(&x);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = Op::f(acc[i], to_acc<A, T>(f[i]));
      }
    }
    uint4 out;
    T *o = reinterpret_cast<T *>(&out);
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = from_acc<T, A>(acc[i]);
    return out;
  }
}

// 16 bytes of every rank's data (get(k): rank k's, k < n) combined in rank order: the LL and LL128
// protocols' reduction, whichever kernel runs it.
template <typename T, typename Op, typename Get>
__device__ __forceinline__ uint4 reduce_ranks(int n, const Get &get) {
  return combine16<T, Op, MG_MAX_RANKS>(n, get);
}

// The reduction of a call as a value the LL and LL128 bodies take: reduce_ranks<T, Op> fixed at
// compile time in the launched kernels (one instantiation per pair). Nothing else in those bodies
// depends on the type, so the resident kernel runs one body for every pair with the pair picked at
// run time (RuntimeReduce, dispatch.cuh).
template <typename T, typename Op> struct StaticReduce {
  template <typename Get> __device__ __forceinline__ uint4 operator()(int n, const Get &get) const {
    return reduce_ranks<T, Op>(n, get);
  }
};

// The unit a storage type is guaranteed to be aligned to: its own size, except complex elements,
// which C and NumPy align like one component (float _Complex: 4 bytes, double _Complex: 8), so a
// complex128 array viewed out of a float64 one may start 8 bytes off a 16-byte boundary. Scalar
// accesses of user memory go through ld_elem/st_elem, which move a complex element as its components
// (a float2/double2 access would fault on such an address).
template <typename T> struct AlignUnitOf { using type = T; };
template <> struct AlignUnitOf<float2> { using type = uint32_t; };
template <> struct AlignUnitOf<double2> { using type = uint64_t; };

// The unsigned word of that unit: an access that cannot move T itself (a complex element, a volatile
// load of a 16-bit float) moves the element as these words.
template <int Bytes> struct UintOfSize;
template <> struct UintOfSize<1> { using type = uint8_t; };
template <> struct UintOfSize<2> { using type = uint16_t; };
template <> struct UintOfSize<4> { using type = uint32_t; };
template <> struct UintOfSize<8> { using type = uint64_t; };
template <typename T> using AlignWordOf = typename UintOfSize<sizeof(typename AlignUnitOf<T>::type)>::type;

template <typename T> __device__ __forceinline__ T ld_elem(const T *p) {
  using W = AlignWordOf<T>;
  if constexpr (sizeof(W) == sizeof(T)) {
    return *p;
  } else {
    W w[sizeof(T) / sizeof(W)];
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / sizeof(W)); ++i) w[i] = reinterpret_cast<const W *>(p)[i];
    T out;
    memcpy(&out, w, sizeof(T));
    return out;
  }
}

template <typename T> __device__ __forceinline__ void st_elem(T *p, T v) {
  using W = AlignWordOf<T>;
  if constexpr (sizeof(W) == sizeof(T)) {
    *p = v;
  } else {
    W w[sizeof(T) / sizeof(W)];
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / sizeof(W)); ++i) reinterpret_cast<W *>(p)[i] = w[i];
  }
}

}  // namespace mg
