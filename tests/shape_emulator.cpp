// Host emulation of the exchange's block-shape arithmetic (cuda/block_shape.cuh) for CPU tests: the
// kernel's copies find each packed byte of a derived datatype's block with shape_offset, and step in
// units of shape_unit; tests/test_shape_emulation.py compares both with MPI's own type maps. It reads
// calls on stdin as little-endian int64 words:
//   start block size extent ndims count[4] stride[4] prepared_bytes base n
// (prepared_bytes: the block's packed bytes as the launch sees them, which picks fast or plain
// division; n: how many packed bytes to map), and answers each with: prepare_shape's code, the unit,
// n offsets from shape_offset, then n offsets as threads' cursors find them (kThreads threads, each
// stepping through its units as a copy's thread does), then n offsets as runs find them (the packed
// bytes cut into kStep-byte steps as the FIFO's slots cut them, each step into ShapeRuns of kRunUnits
// units per lane, a run's bytes after its first: a byte no run or two runs cover is -1), all int64.
#include <stdint.h>
#include <stdio.h>
#include <vector>
#define __host__
#define __device__
#define __forceinline__ inline __attribute__((always_inline))
#include "mpigpu_cuda.h"
#include "block_shape.cuh"

constexpr int kThreads = 3;
constexpr int64_t kStep = 48;  // a multiple of 16, as a FIFO slot's bytes are, and small: many steps end mid-row
constexpr int kRunUnits = 2;   // units per lane of a run (the kernel's 8-16): many runs per row

int main() {
  static_assert(MG_SHAPE_MAX_DIMS == 4, "the word layout on stdin assumes four dimensions");
  int64_t w[5 + 2 * MG_SHAPE_MAX_DIMS + 3];
  const size_t nw = sizeof(w) / sizeof(w[0]);
  while (fread(w, sizeof(int64_t), nw, stdin) == nw) {
    mg_block_shape in{};
    in.start = w[0];
    in.block = w[1];
    in.size = w[2];
    in.extent = w[3];
    in.ndims = (int)w[4];
    for (int d = 0; d < MG_SHAPE_MAX_DIMS; ++d) {
      in.count[d] = w[5 + d];
      in.stride[d] = w[5 + MG_SHAPE_MAX_DIMS + d];
    }
    const uint64_t prepared = (uint64_t)w[nw - 3];
    const uintptr_t base = (uintptr_t)w[nw - 2];
    const int64_t n = w[nw - 1];
    mg::BlockShape s{};
    const int64_t head[2] = {mg::prepare_shape(in, prepared, &s), mg::shape_unit(base, &in)};
    fwrite(head, sizeof(int64_t), 2, stdout);
    std::vector<int64_t> direct(n, 0), walked(n, 0), runs(n, -1);
    if (head[0] == 0) {
      for (int64_t j = 0; j < n; ++j) direct[j] = mg::shape_offset(s, (uint64_t)j);
      const int64_t unit = head[1];
      const char *origin = reinterpret_cast<const char *>((uintptr_t)1 << 40);  // offsets may be negative
      for (int t = 0; t < kThreads; ++t) {
        mg::ShapeCursor c;
        for (int64_t j = t * unit; j < n; j += kThreads * unit) {
          const char *at = c.address(origin, s, (uint64_t)j);
          for (int64_t b = 0; b < unit && j + b < n; ++b) walked[j + b] = (int64_t)(at - origin) + b;
        }
      }
      std::vector<int> covered(n, 0);
      const uint64_t row = (uint64_t)s.block;
      const uint64_t run = (uint64_t)mg::run_lanes(row / (uint64_t)unit) * kRunUnits * (uint64_t)unit;
      for (int64_t pos = 0; pos < n; pos += kStep) {
        const uint64_t len = (uint64_t)(n - pos < kStep ? n - pos : kStep);
        const mg::ShapeRuns cut(row, run, (uint64_t)pos, len);
        for (uint64_t r = 0; r < cut.total; ++r) {
          uint64_t lo, hi;
          if (!cut.get(r, (uint64_t)pos, len, &lo, &hi)) continue;
          const int64_t first = mg::shape_offset(s, lo);
          for (uint64_t j = lo; j < hi; ++j) {
            runs[j] = first + (int64_t)(j - lo);
            covered[j]++;
          }
        }
      }
      for (int64_t j = 0; j < n; ++j)
        if (covered[j] != 1) runs[j] = -1;
    }
    fwrite(direct.data(), sizeof(int64_t), n, stdout);
    fwrite(walked.data(), sizeof(int64_t), n, stdout);
    fwrite(runs.data(), sizeof(int64_t), n, stdout);
  }
  return 0;
}
