// Host emulation of the datatype pack kernels (cuda/pack_kernel.cuh) for CPU tests: plans each call
// as cuda/pack.cu does (cuda/pack_plan.h) and runs every thread of its grid in turn (the kernels'
// threads never wait for each other, so running them one after another gives what the GPU gives).
// tests/test_pack_emulation.py builds it with the host's C++ compiler (no CUDA needed) and feeds it calls on stdin, as
// little-endian int64 words:
//   direction count size extent ndims dim_count[7] dim_stride[7] nblocks buf_bytes base_offset
//   buf_misalign packed_misalign grid_cap, then nblocks offsets and nblocks lengths, then buf_bytes
//   bytes of the buffer, then count * size packed bytes;
// and it answers each with: the unit width the plan chose (0: table, -1: plain copy), the number of
// bytes that follow, then the packed bytes (pack) or the whole buffer (unpack).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
// What pack_kernel.cuh takes from the CUDA headers, for a plain host compiler (no CUDA needed).
#define __host__
#define __device__
#define __forceinline__ inline __attribute__((always_inline))
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
#include "mpigpu_cuda.h"
#include "pack_kernel.cuh"
#include "pack_plan.h"

namespace {

bool read_words(int64_t *w, size_t n) { return fread(w, sizeof(int64_t), n, stdin) == n; }

void write_words(const int64_t *w, size_t n) { fwrite(w, sizeof(int64_t), n, stdout); }

template <bool Unpack> void run_threads(const mg::PackPlan &p, int64_t nthreads) {
  for (int64_t t = 0; t < nthreads; ++t) {
    switch (p.width) {
      case 0: mg::pack_table_thread<Unpack>(p.args, t, nthreads); break;
      case 16: mg::pack_regular_thread<16, Unpack>(p.args, t, nthreads); break;
      case 8: mg::pack_regular_thread<8, Unpack>(p.args, t, nthreads); break;
      case 4: mg::pack_regular_thread<4, Unpack>(p.args, t, nthreads); break;
      case 2: mg::pack_regular_thread<2, Unpack>(p.args, t, nthreads); break;
      default: mg::pack_regular_thread<1, Unpack>(p.args, t, nthreads); break;
    }
  }
}

// 256-byte aligned storage with data placed `misalign` bytes past an aligned address.
struct Placed {
  std::vector<unsigned char> raw;
  unsigned char *at;
  Placed(int64_t bytes, int64_t misalign) : raw((size_t)bytes + 512) {
    uintptr_t p = ((uintptr_t)raw.data() + 255) & ~(uintptr_t)255;
    at = (unsigned char *)(p + (uintptr_t)misalign);
  }
};

int one_call() {
  int64_t h[5 + 2 * MG_PACK_MAX_DIMS + 6];
  if (!read_words(h, sizeof h / sizeof h[0])) return 0;
  const int64_t *d = h + 5 + 2 * MG_PACK_MAX_DIMS;
  const int64_t direction = h[0], count = h[1], nblocks = d[0], buf_bytes = d[1], base = d[2];
  mg_layout L{};
  L.size = h[2];
  L.extent = h[3];
  L.ndims = (int)h[4];
  for (int k = 0; k < MG_PACK_MAX_DIMS; ++k) {
    L.dim_count[k] = h[5 + k];
    L.dim_stride[k] = h[5 + MG_PACK_MAX_DIMS + k];
  }
  std::vector<int64_t> offs((size_t)nblocks), lens((size_t)nblocks);
  if (nblocks && (!read_words(offs.data(), (size_t)nblocks) || !read_words(lens.data(), (size_t)nblocks))) return -1;
  Placed buf(buf_bytes, d[3]), packed(count * L.size, d[4]);
  if (fread(buf.at, 1, (size_t)buf_bytes, stdin) != (size_t)buf_bytes) return -1;
  if (fread(packed.at, 1, (size_t)(count * L.size), stdin) != (size_t)(count * L.size)) return -1;
  int64_t *table = nullptr;
  L.nblocks = 1;
  if (nblocks > 1) {
    if (mg::split_table(&L, offs.data(), lens.data(), nblocks, &table) != 0) return -1;
    L.offsets = table;
    L.packed = table + L.nblocks;
  } else if (nblocks == 1) {
    L.start = offs[0];
    L.block = lens[0];
  }
  mg::PackPlan p{};
  int64_t width = -2;
  if (count > 0 && L.size > 0) {
    if (mg::plan_pack(&L, (size_t)count, (uintptr_t)(buf.at + base), (uintptr_t)packed.at, &p) != 0) return -1;
    width = p.width;
    if (p.width < 0) {
      if (direction == MG_PACK) memmove(packed.at, p.args.strided, (size_t)p.args.block);
      else memmove(p.args.strided, packed.at, (size_t)p.args.block);
    } else if (p.args.items > 0) {
      const int64_t grid = p.blocks < d[5] ? (p.blocks > 0 ? p.blocks : 1) : d[5];
      if (direction == MG_PACK) run_threads<false>(p, grid * mg::kPackThreads);
      else run_threads<true>(p, grid * mg::kPackThreads);
    }
  }
  free(table);
  const int64_t out[2] = {width, direction == MG_PACK ? count * L.size : buf_bytes};
  write_words(out, 2);
  fwrite(direction == MG_PACK ? packed.at : buf.at, 1, (size_t)out[1], stdout);
  fflush(stdout);
  return 1;
}

}  // namespace

int main() {
  int r;
  while ((r = one_call()) > 0) {
  }
  return r < 0 ? 1 : 0;
}
