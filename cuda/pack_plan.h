// pack_plan.h: how one pack or unpack call runs (kernel, unit width, work items, dividers) and how a
// block table is laid out for the device. Host code only, shared by pack.cu and the host emulation
// of the kernels (tests/pack_emulator.cpp), which compiles it without nvcc.
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include "mpigpu_cuda.h"
#include "pack_kernel.cuh"

namespace mg {

inline int pow2_at_least(int64_t n, int cap) {
  int g = 1;
  while (g < n && g < cap) g <<= 1;
  return g;
}

inline int log2_of(int g) {
  int s = 0;
  while ((1 << s) < g) ++s;
  return s;
}

// One call: the kernel's arguments, the unit width of a regular layout (0: the table kernel; -1:
// one contiguous block, a plain copy of args.block bytes from args.strided) and the thread blocks
// that give every group of threads one item (the launch caps them at what fills the device).
struct PackPlan {
  PackArgs args;
  int width;
  int64_t blocks;
};

inline int plan_pack(const mg_layout *L, size_t count, uintptr_t buf, uintptr_t packed, PackPlan *plan) {
  if (L->ndims < 0 || L->ndims > MG_PACK_MAX_DIMS || L->nblocks < 1 || L->block < 0) return MG_ERR_ARG;
  PackArgs &a = plan->args;
  a = PackArgs{};
  int64_t cnt[kPackDims], str[kPackDims];
  int nd = 0;
  int64_t block = L->block;
  const bool table = L->nblocks > 1;
  for (int k = 0; k < L->ndims; ++k) {
    if (L->dim_count[k] < 0) return MG_ERR_ARG;
    if (L->dim_count[k] == 1) continue;
    cnt[nd] = L->dim_count[k];
    str[nd++] = L->dim_stride[k];
  }
  // count instances at the extent: one more dimension, merged where it continues the last one
  if (count > 1) {
    if (nd > 0 && cnt[nd - 1] * str[nd - 1] == L->extent) {
      cnt[nd - 1] *= (int64_t)count;
    } else if (nd == 0 && !table && block == L->extent) {
      block *= (int64_t)count;
    } else {
      cnt[nd] = (int64_t)count;
      str[nd++] = L->extent;
    }
  }
  int64_t rows = 1;
  for (int k = 0; k < nd; ++k) rows *= cnt[k];
  a.packed = (char *)packed;
  a.block = block;
  a.ndims = nd;
  a.strided = (char *)(table ? buf : buf + (uintptr_t)L->start);
  if (!table && nd == 0) {
    plan->width = -1;
    plan->blocks = 0;
    return 0;
  }
  int64_t items, per_block;
  if (table) {
    items = rows * L->nblocks;
    a.entries = make_divmod((uint64_t)L->nblocks, items < kFastLimit);
    a.offsets = L->offsets;
    a.prefix = L->packed;
    a.group_shift = log2_of(L->group);
    plan->width = 0;
    per_block = kPackThreads >> a.group_shift;
  } else {
    // the widest unit that every row start on both sides and the row length are multiples of
    uint64_t align = (uint64_t)(uintptr_t)a.strided | (uint64_t)packed | (uint64_t)block | 16;
    for (int k = 0; k < nd; ++k) align |= (uint64_t)str[k];
    const int64_t w = (int64_t)(align & (0 - align));
    a.units = block / w;
    a.group_shift = log2_of(pow2_at_least(a.units, 32));
    const int G = 1 << a.group_shift;
    items = rows;
    if (a.units > G) {
      const int64_t pieces = (a.units + kPackPieceUnits - 1) / kPackPieceUnits;
      items = rows * pieces;
      a.pieces = make_divmod((uint64_t)pieces, items < kFastLimit);
    }
    // one item per group, spread over as many multiprocessors as there is work for
    per_block = kPackThreads / G;
    plan->width = (int)w;
  }
  a.items = items;
  for (int k = 0; k < nd; ++k) {
    a.count[k] = make_divmod((uint64_t)cnt[k], items < kFastLimit);
    a.stride[k] = str[k];
  }
  plan->blocks = (items + per_block - 1) / per_block;
  return 0;
}

// The device form of a table of n entries: entries longer than kPackTablePiece cut into pieces, so
// one item of the table kernel stays short; into one malloc'ed array (*host, to free): m offsets,
// then m + 1 prefix sums of the lengths. Fills L's nblocks (m), block (total bytes) and group.
inline int split_table(mg_layout *L, const int64_t *offsets, const int64_t *lengths, int64_t n, int64_t **host) {
  int64_t m = 0, total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (lengths[i] <= 0) return MG_ERR_ARG;
    m += (lengths[i] + kPackTablePiece - 1) / kPackTablePiece;
    total += lengths[i];
  }
  int64_t *h = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * m + 1));
  if (h == nullptr) return MG_ERR_NOMEM;
  int64_t *prefix = h + m, e = 0, pos = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t done = 0; done < lengths[i]; done += kPackTablePiece) {
      h[e] = offsets[i] + done;
      prefix[e++] = pos;
      pos += lengths[i] - done < kPackTablePiece ? lengths[i] - done : kPackTablePiece;
    }
  prefix[m] = pos;
  *host = h;
  L->nblocks = m;
  L->block = total;
  // threads per entry: the mean entry in 16-byte units (one thread for element-sized entries, a
  // warp from 512 bytes)
  L->group = pow2_at_least((total / m + 15) / 16, 32);
  return 0;
}

}  // namespace mg
