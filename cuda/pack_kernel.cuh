// pack_kernel.cuh: the kernels that pack derived datatypes into contiguous bytes and unpack them
// (layouts: mpigpu/_describe/datatypes.py; the C ABI: mg_layout in mpigpu_cuda.h; launches: pack.cu).
//
// A call moves `rows` repetitions of a block table (a regular layout: one block, a "row"), whose
// repetition j lies row_offset(j) bytes from the strided side's pointer and j * block bytes into
// the packed side. Work is cut into items that a group of G threads (a power of two, at most a
// warp) copies in units of W bytes:
// - regular, short rows (units per row <= 32): an item is a row, each lane copies at most one unit;
//   the grid gives each group one row while the device has room, and where rows outnumber the
//   groups a lane keeps kPackUnroll rows' loads in flight before it stores;
// - regular, long rows: an item is a piece of kPackPieceUnits units of a row (a row of any length
//   spreads over the whole grid), a warp's lanes striding through it kPackUnroll units at a time;
// - table: an item is one table entry of one repetition; the unit width is chosen per entry from
//   the alignment of both addresses and the length (entries longer than kPackTablePiece bytes were
//   split when the table was uploaded, so items stay small).
// The thread bodies are __host__ __device__ so that a host program can run every thread of a grid
// in turn (tests/pack_emulator.cpp) and check the index arithmetic without a GPU.
#pragma once
#include <stdint.h>
#include "mpigpu_cuda.h"
#include "divmod.cuh"

// #pragma unroll for the device pass only: these bodies are host code too, where it means nothing.
#ifdef __CUDA_ARCH__
#define MG_PACK_UNROLL _Pragma("unroll")
#else
#define MG_PACK_UNROLL
#endif

namespace mg {

constexpr int kPackThreads = 256;
constexpr int kPackUnroll = 4;                          // loads in flight per thread
// Resident blocks per SM the registers must allow: 4 caps a thread at 64 registers, which the
// regular kernels fit without spilling; the table kernel (five unit widths inlined) takes 78.
constexpr int kPackMinBlocks = 4;
constexpr int kPackTableMinBlocks = 3;
constexpr int kPackDims = MG_PACK_MAX_DIMS + 1;         // a layout's dimensions and the count's
constexpr int64_t kPackPieceUnits = 32 * kPackUnroll * 4;  // a long row's piece: 4 strides of a warp
constexpr int64_t kPackTablePiece = 8192;               // longest table entry, in bytes, after upload

struct PackArgs {
  char *strided;      // regular: buffer pointer + the block's start; table: the buffer pointer
  char *packed;       // the contiguous side
  int64_t items;      // work items of the grid (see the top of this file)
  int64_t block;      // packed bytes of one repetition (a row, or one pass over the table)
  int64_t units;      // regular: units of W bytes in a row
  DivMod pieces;      // regular, long rows: pieces per row
  DivMod entries;     // table: entries per repetition
  const int64_t *offsets;  // table: entry offsets from the buffer pointer
  const int64_t *prefix;   // table: entries + 1 packed offsets (prefix sums of the entry lengths)
  int ndims;          // dimensions of the repetitions, innermost first
  int group_shift;    // log2 of the threads per item
  DivMod count[kPackDims];
  int64_t stride[kPackDims];
};

template <int W> struct PackUnit;
template <> struct PackUnit<16> { using type = uint4; };
template <> struct PackUnit<8> { using type = uint2; };
template <> struct PackUnit<4> { using type = uint32_t; };
template <> struct PackUnit<2> { using type = uint16_t; };
template <> struct PackUnit<1> { using type = uint8_t; };

// Byte offset of repetition j on the strided side.
__host__ __device__ __forceinline__ int64_t row_offset(const PackArgs &a, uint64_t j) {
  int64_t off = 0;
  MG_PACK_UNROLL
  for (int k = 0; k < kPackDims; ++k) {
    if (k >= a.ndims) break;
    const uint64_t q = a.count[k].div(j);
    off += (int64_t)(j - q * a.count[k].d) * a.stride[k];
    j = q;
  }
  return off;
}

// Units [u, end) of one span, lanes of a group striding by G, kPackUnroll loads in flight.
template <int W, bool Unpack>
__host__ __device__ __forceinline__ void copy_span(char *strided, char *packed, int64_t u, int64_t end, int G) {
  using U = typename PackUnit<W>::type;
  const U *src = reinterpret_cast<const U *>(Unpack ? packed : strided) + u;
  U *dst = reinterpret_cast<U *>(Unpack ? strided : packed) + u;
  for (int64_t left = end - u; left > 0; left -= (int64_t)kPackUnroll * G) {
    U v[kPackUnroll];
    MG_PACK_UNROLL
    for (int r = 0; r < kPackUnroll; ++r)
      if (r * G < left) v[r] = src[r * G];
    MG_PACK_UNROLL
    for (int r = 0; r < kPackUnroll; ++r)
      if (r * G < left) dst[r * G] = v[r];
    src += kPackUnroll * G;
    dst += kPackUnroll * G;
  }
}

// Thread t of the grid's nthreads: its share of a regular layout.
template <int W, bool Unpack>
__host__ __device__ __forceinline__ void pack_regular_thread(const PackArgs &a, int64_t t, int64_t nthreads) {
  using U = typename PackUnit<W>::type;
  const int G = 1 << a.group_shift;
  const int lane = (int)(t & (G - 1));
  const int64_t g0 = t >> a.group_shift, ngroups = nthreads >> a.group_shift;
  if (a.units <= G) {
    if (lane >= a.units) return;
    for (int64_t base = g0; base < a.items; base += (int64_t)kPackUnroll * ngroups) {
      U v[kPackUnroll];
      char *dst[kPackUnroll];
      MG_PACK_UNROLL
      for (int r = 0; r < kPackUnroll; ++r) {
        const int64_t j = base + r * ngroups;
        dst[r] = nullptr;
        if (j < a.items) {
          char *s = a.strided + row_offset(a, (uint64_t)j) + lane * W;
          char *p = a.packed + j * a.block + lane * W;
          v[r] = *reinterpret_cast<const U *>(Unpack ? p : s);
          dst[r] = Unpack ? s : p;
        }
      }
      MG_PACK_UNROLL
      for (int r = 0; r < kPackUnroll; ++r)
        if (dst[r] != nullptr) *reinterpret_cast<U *>(dst[r]) = v[r];
    }
    return;
  }
  for (int64_t item = g0; item < a.items; item += ngroups) {
    const uint64_t j = a.pieces.div((uint64_t)item);
    const int64_t u0 = (item - (int64_t)(j * a.pieces.d)) * kPackPieceUnits;
    const int64_t u1 = u0 + kPackPieceUnits < a.units ? u0 + kPackPieceUnits : a.units;
    copy_span<W, Unpack>(a.strided + row_offset(a, j), a.packed + (int64_t)j * a.block, u0 + lane, u1, G);
  }
}

// Thread t of the grid's nthreads: its share of a block table.
template <bool Unpack>
__host__ __device__ __forceinline__ void pack_table_thread(const PackArgs &a, int64_t t, int64_t nthreads) {
  const int G = 1 << a.group_shift;
  const int lane = (int)(t & (G - 1));
  const int64_t g0 = t >> a.group_shift, ngroups = nthreads >> a.group_shift;
  for (int64_t e = g0; e < a.items; e += ngroups) {
    const uint64_t j = a.entries.div((uint64_t)e);
    const int64_t i = e - (int64_t)(j * a.entries.d);
    const int64_t p0 = a.prefix[i], len = a.prefix[i + 1] - p0;
    char *s = a.strided + row_offset(a, j) + a.offsets[i];
    char *p = a.packed + (int64_t)j * a.block + p0;
    const unsigned mis = (unsigned)(((uintptr_t)s | (uintptr_t)p | (uintptr_t)len) & 15u);
    switch (mis & (0u - mis)) {  // the lowest set bit: the widest unit both sides and the length allow
      case 0: copy_span<16, Unpack>(s, p, lane, len / 16, G); break;
      case 8: copy_span<8, Unpack>(s, p, lane, len / 8, G); break;
      case 4: copy_span<4, Unpack>(s, p, lane, len / 4, G); break;
      case 2: copy_span<2, Unpack>(s, p, lane, len / 2, G); break;
      default: copy_span<1, Unpack>(s, p, lane, len, G); break;
    }
  }
}

#ifdef __CUDACC__
template <int W, bool Unpack>
__global__ void __launch_bounds__(kPackThreads, kPackMinBlocks) pack_regular_kernel(const __grid_constant__ PackArgs a) {
  pack_regular_thread<W, Unpack>(a, (int64_t)blockIdx.x * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
}

template <bool Unpack>
__global__ void __launch_bounds__(kPackThreads, kPackTableMinBlocks) pack_table_kernel(const __grid_constant__ PackArgs a) {
  pack_table_thread<Unpack>(a, (int64_t)blockIdx.x * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
}
#endif

}  // namespace mg
