"""Copy probe (not a user tool): `python benchmarks/copy_probe.py` on one GPU, CuPy only.

A one-rank collective out of place is a device-to-device copy. This times candidate copies against the
driver's (cudaMemcpyAsync) at the sizes where a one-rank call is the copy's time: a grid-stride kernel
of 16-byte units (what cuda/single_rank.cu launches below 1 MiB), the same with evict-first hints, and
Hopper's bulk copy (cp.async.bulk through shared memory, one thread per block). Two figures per size,
interleaved round by round, best of the rounds: GPU time per copy of back-to-back copies (events), and
a launch + stream synchronize per copy (what a blocking call costs).
"""
import time

import cupy as cp

SIZES = [16 << 20, 32 << 20, 64 << 20, 256 << 20]
ROUNDS = 7

SRC = r'''
using u32 = unsigned int;
using u64 = unsigned long long;

extern "C" __global__ void grid16(const uint4 *__restrict__ s, uint4 *__restrict__ d, u64 n) {
  u64 step = (u64)gridDim.x * blockDim.x;
  for (u64 b = blockIdx.x * (u64)blockDim.x + threadIdx.x; b < n; b += 4 * step) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) if (b + k * step < n) v[k] = s[b + k * step];
#pragma unroll
    for (int k = 0; k < 4; ++k) if (b + k * step < n) d[b + k * step] = v[k];
  }
}

extern "C" __global__ void grid16cs(const uint4 *__restrict__ s, uint4 *__restrict__ d, u64 n) {
  u64 step = (u64)gridDim.x * blockDim.x;
  for (u64 b = blockIdx.x * (u64)blockDim.x + threadIdx.x; b < n; b += 8 * step) {
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) if (b + k * step < n) v[k] = __ldcs(s + b + k * step);
#pragma unroll
    for (int k = 0; k < 8; ++k) if (b + k * step < n) __stcs(d + b + k * step, v[k]);
  }
}

__device__ __forceinline__ u32 smem(const void *p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bulk_load(u32 dst, const char *src, u32 bytes, u32 bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void bar_wait(u32 bar, u32 phase) {
  u32 ok = 0;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(phase) : "memory");
  } while (!ok);
}

// Chunk c of CH bytes (the last one shorter) goes to block c % gridDim.x; S stages of shared memory.
template <int S> __device__ void bulk(const char *s, char *d, u64 bytes, u32 ch) {
  extern __shared__ __align__(128) char buf[];
  __shared__ __align__(8) u64 bars[S];
  if (threadIdx.x != 0) return;
  const u64 chunks = (bytes + ch - 1) / ch;
  const u64 mine = blockIdx.x < chunks ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  for (int i = 0; i < S; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bars[i])));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  auto size = [&](u64 k) { u64 off = (blockIdx.x + k * gridDim.x) * (u64)ch; return (u32)(bytes - off < ch ? bytes - off : ch); };
  auto off = [&](u64 k) { return (blockIdx.x + k * gridDim.x) * (u64)ch; };
  for (u64 k = 0; k < mine && k < S; ++k) bulk_load(smem(buf + k * ch), s + off(k), size(k), smem(&bars[k]));
  for (u64 k = 0; k < mine; ++k) {
    const int st = (int)(k % S);
    bar_wait(smem(&bars[st]), (u32)((k / S) & 1));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(d + off(k)), "r"(smem(buf + st * (u64)ch)), "r"(size(k)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (k >= 1 && k - 1 + S < mine) {  // refill the stage the previous store read, once it has read it
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      const u64 j = k - 1 + S;
      const int sj = (int)(j % S);
      bulk_load(smem(buf + sj * (u64)ch), s + off(j), size(j), smem(&bars[sj]));
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

extern "C" __global__ void bulk2(const char *s, char *d, u64 bytes, u32 ch) { bulk<2>(s, d, bytes, ch); }
extern "C" __global__ void bulk4(const char *s, char *d, u64 bytes, u32 ch) { bulk<4>(s, d, bytes, ch); }
extern "C" __global__ void bulk6(const char *s, char *d, u64 bytes, u32 ch) { bulk<6>(s, d, bytes, ch); }
'''

dev = cp.cuda.Device()
SMS = dev.attributes['MultiProcessorCount']
cc = dev.compute_capability
OPTIONS = ('-std=c++17', f'--gpu-architecture=sm_{cc}')
mod = cp.RawModule(code=SRC, options=OPTIONS)


def grid_variant(name, blocks_per_sm, threads):
    k = mod.get_function(name)
    per = 4 if name == 'grid16' else 8

    def launch(x, y, nbytes, stream):
        n = nbytes // 16
        blocks = min(SMS * blocks_per_sm, max(1, -(-n // (threads * per))))
        k((blocks,), (threads,), (x, y, cp.uint64(n)), stream=stream)
    return launch


def bulk_variant(stages, ch, blocks_per_sm):
    k = cp.RawKernel(SRC, f'bulk{stages}', options=OPTIONS)
    k.max_dynamic_shared_size_bytes = stages * ch

    def launch(x, y, nbytes, stream):
        chunks = -(-nbytes // ch)
        k((min(SMS * blocks_per_sm, chunks),), (32,), (x, y, cp.uint64(nbytes), cp.uint32(ch)), stream=stream,
          shared_mem=stages * ch)
    return launch


def memcpy(x, y, nbytes, stream):
    cp.cuda.runtime.memcpyAsync(y.data.ptr, x.data.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)


VARIANTS = {
    'memcpy': memcpy,
    'grid16 8x256': grid_variant('grid16', 8, 256),
    'grid16 4x512': grid_variant('grid16', 4, 512),
    'grid16cs 8x256': grid_variant('grid16cs', 8, 256),
    'grid16cs 3x256': grid_variant('grid16cs', 3, 256),
    'bulk 4x32K x1': bulk_variant(4, 32 << 10, 1),
    'bulk 4x16K x2': bulk_variant(4, 16 << 10, 2),
    'bulk 6x16K x2': bulk_variant(6, 16 << 10, 2),
    'bulk 2x48K x2': bulk_variant(2, 48 << 10, 2),
    'bulk 4x8K x4': bulk_variant(4, 8 << 10, 4),
}


def gpu_us(fn, reps, stream):
    a, b = cp.cuda.Event(), cp.cuda.Event()
    fn()
    a.record(stream)
    for _ in range(reps):
        fn()
    b.record(stream)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e3 / reps


def wall_us(fn, reps, stream):
    fn()
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
        stream.synchronize()
    return (time.perf_counter() - t0) / reps * 1e6


def main():
    stream = cp.cuda.Stream(non_blocking=True)
    print(f'{dev.pci_bus_id} {cp.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()} SMs {SMS}')
    rows = []
    for nbytes in SIZES:
        with stream:
            x = cp.random.randint(0, 1 << 30, nbytes // 4, dtype=cp.int32)
            y = cp.empty_like(x)
        stream.synchronize()
        reps = max(20, int(0.03 / (nbytes / 3.0e12)))
        res = {k: ([], []) for k in VARIANTS}
        for _ in range(ROUNDS):
            for name, launch in VARIANTS.items():
                fn = lambda: launch(x, y, nbytes, stream)
                y.fill(0)
                try:
                    res[name][0].append(gpu_us(fn, reps, stream))
                    res[name][1].append(wall_us(fn, reps, stream))
                except cp.cuda.driver.CUDADriverError as exc:
                    print(f'{name} at {nbytes}: {exc}')
                    res[name][0].append(float('nan'))
                    res[name][1].append(float('nan'))
                    continue
                stream.synchronize()
                if not bool(cp.array_equal(x, y)):
                    raise SystemExit(f'{name} copied wrong bytes at {nbytes}')
        rows.append((nbytes, {k: (min(g), min(w)) for k, (g, w) in res.items()}))
    print('size | variant | GPU us | GB/s (read+write) | launch+sync us | memcpy/variant (GPU) | (launch+sync)')
    for nbytes, best in rows:
        mg, mw = best['memcpy']
        for name, (g, w) in best.items():
            print(f'{nbytes >> 20} MB | {name} | {g:.1f} | {2 * nbytes / g / 1e3:.0f} | {w:.1f} | {mg / g:.3f}x | {mw / w:.3f}x')


main()
