// pack.cu: host side of derived-datatype packing: a layout's block table uploaded once, and the
// launch of one pack or unpack (pack_kernel.cuh, planned by pack_plan.h) on the caller's stream,
// with no allocation and no synchronization.
#include <cuda_runtime.h>
#include <stdlib.h>
#include "mpigpu_cuda.h"
#include "pack_kernel.cuh"
#include "pack_plan.h"
#include "status.cuh"

namespace mg {
namespace {

constexpr int kPackMaxDevices = 64;

// Blocks of kPackThreads that fill the device once, per_sm to a multiprocessor (the kernels loop
// over the rest of the work). The multiprocessor count is read once per device.
int grid_limit(int per_sm) {
  static int sms[kPackMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) {
    cudaGetLastError();
    return 128 * per_sm;
  }
  if (dev < kPackMaxDevices && sms[dev] > 0) return sms[dev] * per_sm;
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 128;
  }
  if (dev < kPackMaxDevices) sms[dev] = n;
  return n * per_sm;
}

template <bool Unpack> int launch(const PackPlan &p, int grid, cudaStream_t s) {
  const PackArgs &a = p.args;
  switch (p.width) {
    case 0: pack_table_kernel<Unpack><<<grid, kPackThreads, 0, s>>>(a); break;
    case 16: pack_regular_kernel<16, Unpack><<<grid, kPackThreads, 0, s>>>(a); break;
    case 8: pack_regular_kernel<8, Unpack><<<grid, kPackThreads, 0, s>>>(a); break;
    case 4: pack_regular_kernel<4, Unpack><<<grid, kPackThreads, 0, s>>>(a); break;
    case 2: pack_regular_kernel<2, Unpack><<<grid, kPackThreads, 0, s>>>(a); break;
    default: pack_regular_kernel<1, Unpack><<<grid, kPackThreads, 0, s>>>(a); break;
  }
  return rc(cudaGetLastError());
}

}  // namespace
}  // namespace mg

extern "C" {

int mg_layout_upload(mg_layout *L, const int64_t *offsets, const int64_t *lengths, int64_t n) {
  if (L == nullptr || n < 2 || offsets == nullptr || lengths == nullptr) return MG_ERR_ARG;
  mg_layout t = *L;
  int64_t *host = nullptr;
  int err = mg::split_table(&t, offsets, lengths, n, &host);
  if (err != 0) return err;
  const size_t bytes = sizeof(int64_t) * (size_t)(2 * t.nblocks + 1);
  void *dev = nullptr;
  err = rc(cudaMalloc(&dev, bytes));
  if (err == 0) err = rc(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  free(host);
  if (err != 0) {
    if (dev != nullptr) cudaFree(dev);
    return err;
  }
  t.offsets = (const int64_t *)dev;
  t.packed = (const int64_t *)dev + t.nblocks;
  *L = t;
  return 0;
}

int mg_layout_release(mg_layout *L) {
  if (L == nullptr) return 0;
  int err = 0;
  if (L->nblocks > 1 && L->offsets != nullptr) err = rc(cudaFree((void *)L->offsets));
  L->offsets = L->packed = nullptr;
  L->nblocks = 0;
  return err;
}

int mg_pack(const mg_layout *L, size_t count, uintptr_t buf, uintptr_t packed, int direction, uintptr_t stream) {
  using namespace mg;
  if (L == nullptr || (direction != MG_PACK && direction != MG_UNPACK)) return MG_ERR_ARG;
  if (count == 0 || L->size == 0) return 0;
  if (L->nblocks > 1 && L->offsets == nullptr) return MG_ERR_ARG;  // a table never uploaded
  PackPlan p;
  int err = plan_pack(L, count, buf, packed, &p);
  if (err != 0) return err;
  cudaStream_t s = (cudaStream_t)stream;
  if (p.width < 0) {
    const uintptr_t from = direction == MG_PACK ? (uintptr_t)p.args.strided : packed;
    const uintptr_t to = direction == MG_PACK ? packed : (uintptr_t)p.args.strided;
    return rc(cudaMemcpyAsync((void *)to, (const void *)from, (size_t)p.args.block, cudaMemcpyDefault, s));
  }
  if (p.args.items == 0) return 0;
  const int64_t limit = grid_limit(p.width == 0 ? kPackTableMinBlocks : kPackMinBlocks);
  const int grid = (int)(p.blocks < limit ? (p.blocks > 0 ? p.blocks : 1) : limit);
  return direction == MG_PACK ? launch<false>(p, grid, s) : launch<true>(p, grid, s);
}

}  // extern "C"
