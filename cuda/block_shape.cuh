// block_shape.cuh: where each packed byte of a derived datatype's block lies (mg_block_shape in
// mpigpu_cuda.h), for the exchange's copies between a caller's strided memory and the FIFOs
// (exchange_kernel.cuh): the pack and unpack of every block happen in the copy that moves it, with no
// packed copy in between. __host__ __device__: tests/shape_emulator.cpp checks the arithmetic on CPUs.
#pragma once
#include <stdint.h>
#include "mpigpu_cuda.h"
#include "divmod.cuh"

namespace mg {

// A block shape with its divisions prepared for one call.
struct BlockShape {
  int64_t start, block, size, extent;
  DivMod by_size, by_block;
  DivMod by_count[MG_SHAPE_MAX_DIMS];
  int64_t stride[MG_SHAPE_MAX_DIMS];
  int ndims;
};

// The offset of the row holding packed byte j from the block's first instance (its displacement in the
// buffer), and in *col j's place in that row.
__host__ __device__ __forceinline__ int64_t shape_row(const BlockShape &s, uint64_t j, uint64_t *col) {
  const uint64_t k = s.by_size.div(j);
  const uint64_t within = j - k * (uint64_t)s.size;
  uint64_t row = s.by_block.div(within);
  *col = within - row * (uint64_t)s.block;
  int64_t off = (int64_t)k * s.extent + s.start;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int d = 0; d < MG_SHAPE_MAX_DIMS; ++d) {
    if (d < s.ndims) {
      const uint64_t q = s.by_count[d].div(row);
      off += (int64_t)(row - q * s.by_count[d].d) * s.stride[d];
      row = q;
    }
  }
  return off;
}

// The offset of packed byte j from the block's first instance.
__host__ __device__ __forceinline__ int64_t shape_offset(const BlockShape &s, uint64_t j) {
  uint64_t col;
  const int64_t row = shape_row(s, j, &col);
  return row + (int64_t)col;
}

// One thread's walk through a shaped side: packed bytes [lo, hi) are one row, from `at`. A thread
// steps by a fixed stride through the packed bytes, so along a row longer than the stride it finds
// the next byte's address with an add, and works out a row's place only when it enters it.
struct ShapeCursor {
  uint64_t lo = 1, hi = 0;
  const char *at = nullptr;

  __host__ __device__ __forceinline__ const char *address(const char *base, const BlockShape &s, uint64_t j) {
    if (j < lo || j >= hi) {
      uint64_t col;
      const int64_t row = shape_row(s, j, &col);
      lo = j - col;
      hi = lo + (uint64_t)s.block;
      at = base + row;
    }
    return at + (j - lo);
  }
};

// The lanes of a set that copies one run: the smallest power of two that covers a row's units, at
// most a warp (rows shorter than a warp's units leave fewer lanes idle).
__host__ __device__ inline int run_lanes(uint64_t row_units) {
  int g = 32;
  while (g > 1 && (uint64_t)(g / 2) >= row_units) g /= 2;
  return g;
}

// A copy's packed bytes [pos, pos + n) cut into runs: pieces of one row each, of at most `run` bytes,
// numbered row by row from the run that holds pos (row: the shape's row bytes; both sides' rows
// coincide). Lane sets take runs in turn, and each finds its run's addresses once (shape_offset), so the
// shape's divisions are paid per run, not per unit.
struct ShapeRuns {
  uint64_t row, run, per_row, first, total;
  __host__ __device__ ShapeRuns(uint64_t row_bytes, uint64_t run_bytes, uint64_t pos, uint64_t n)
      : row(row_bytes), run(run_bytes), per_row((row_bytes + run_bytes - 1) / run_bytes),
        first(pos / row_bytes * per_row + pos % row_bytes / run_bytes),
        total(n ? (pos + n - 1) / row_bytes * per_row + (pos + n - 1) % row_bytes / run_bytes - first + 1 : 0) {}
  // Run r's bytes [*lo, *hi) within [pos, pos + n); false where none of them are.
  __host__ __device__ bool get(uint64_t r, uint64_t pos, uint64_t n, uint64_t *lo, uint64_t *hi) const {
    const uint64_t a = first + r, k = a / per_row, row_lo = k * row, start = row_lo + (a - k * per_row) * run;
    const uint64_t end = start + run < row_lo + row ? start + run : row_lo + row;
    *lo = start > pos ? start : pos;
    *hi = end < pos + n ? end : pos + n;
    return *lo < *hi;
  }
};

// The widest unit (1 .. 16 bytes) that every address of a block's bytes steps in, from the block's
// first address `base` (buffer + displacement): every unit of W then lies within one of its rows.
inline int shape_unit(uintptr_t base, const mg_block_shape *s) {
  uint64_t bits = (uint64_t)base | 16;
  if (s != nullptr && s->size > 0) {
    bits |= (uint64_t)s->start | (uint64_t)s->block | (uint64_t)s->extent;
    for (int d = 0; d < s->ndims; ++d) bits |= (uint64_t)s->stride[d];
  }
  return (int)(bits & (0 - bits));
}

// Prepares s for a block of `bytes` packed bytes: MG_ERR_ARG where the shape is not a regular layout
// (block > 0, at most MG_SHAPE_MAX_DIMS positive counts whose product times block is size).
inline int prepare_shape(const mg_block_shape &in, uint64_t bytes, BlockShape *s) {
  if (in.block <= 0 || in.size <= 0 || in.ndims < 0 || in.ndims > MG_SHAPE_MAX_DIMS || bytes % (uint64_t)in.size)
    return MG_ERR_ARG;
  int64_t rows = 1;
  const bool fast = bytes < (uint64_t)kFastLimit;
  *s = BlockShape{};
  for (int d = 0; d < in.ndims; ++d) {
    if (in.count[d] <= 0) return MG_ERR_ARG;
    rows *= in.count[d];
    s->by_count[d] = make_divmod((uint64_t)in.count[d], fast);
    s->stride[d] = in.stride[d];
  }
  if (rows * in.block != in.size) return MG_ERR_ARG;
  s->start = in.start;
  s->block = in.block;
  s->size = in.size;
  s->extent = in.extent;
  s->by_size = make_divmod((uint64_t)in.size, fast);
  s->by_block = make_divmod((uint64_t)in.block, fast);
  s->ndims = in.ndims;
  return 0;
}

}  // namespace mg
