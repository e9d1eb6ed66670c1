// ll128_proto.cuh: the 128-byte-line protocol (LL128), after NCCL's LL128, for medium symmetric
// collectives and Bcast. Its primitives serve the direct algorithm (direct_kernel.cuh) through
// line_kernel.cuh (LL128Proto).
//
// The data travels in 128-byte lines: 120 bytes of payload and an 8-byte flag holding the call's
// sequence number. A warp stores four whole lines at a time (eight threads per line, 16 bytes each,
// the flag in the eighth thread's upper half) with one coalesced store; NVLink delivers such a line
// whole, so a receiver that sees the flag of a line sees its payload. That is the property NCCL's
// LL128 relies on (it enables LL128 on NVLink GPUs from Volta on). A receiver's warp loads the same four
// lines, its flag threads compare the flag, and the warp reloads until every flag matches.
//
// Against the 8-byte LL protocol (ll_proto.cuh) this moves 128 bytes per 120 instead of 2 per 1,
// and against the Simple protocol it has no fence and no counter round trip per step: one NVLink
// store per 16 bytes and one local poll. It serves medium sizes where Simple's two flag
// round trips per step dominate and the LL protocol's doubled bytes cost too much. Its areas
// (Layout::ll128_off) hold two phases per call parity and source: it runs every form of
// line_kernel.cuh, the two-shot Allreduce and both Bcasts among them.
#pragma once
#include "dtypes.cuh"
#include "protocol.cuh"

namespace mg {

constexpr int kLineBytes = 128;
constexpr int kLineData = 120;  // payload bytes per line; the last 8 bytes are the flag

__host__ __device__ inline size_t ll128_lines(size_t bytes) { return (bytes + kLineData - 1) / kLineData; }

// Bytes of a two-shot shard of `count` elements of `es` bytes over n ranks: whole 16-byte multiples,
// so every shard starts as aligned as the buffer.
__host__ __device__ inline size_t ll128_shard_bytes(size_t count, size_t es, size_t n) {
  return vector_share(count, n, 16 / es) * es;
}

// `len` (16 or 8) bytes at p + off, of which those at or past nbytes read as zero. User buffers
// have any element alignment, so 16- and 8-byte loads are used only where the address allows.
__device__ __forceinline__ uint4 read_part(const char *p, size_t off, int len, size_t nbytes) {
  const char *q = p + off;
  if (off + len <= nbytes) {
    if (len == 16 && ((uintptr_t)q & 15) == 0) return *reinterpret_cast<const uint4 *>(q);
    if (((uintptr_t)q & 7) == 0) {
      uint2 lo = *reinterpret_cast<const uint2 *>(q);
      uint2 hi = len == 16 ? *reinterpret_cast<const uint2 *>(q + 8) : make_uint2(0, 0);
      return make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
  }
  uint4 v = make_uint4(0, 0, 0, 0);
  unsigned char *b = reinterpret_cast<unsigned char *>(&v);
  for (int i = 0; i < len && off + i < nbytes; ++i) b[i] = (unsigned char)q[i];
  return v;
}

__device__ __forceinline__ void write_part(char *p, size_t off, int len, size_t nbytes, uint4 v) {
  char *q = p + off;
  if (off + len <= nbytes) {
    if (len == 16 && ((uintptr_t)q & 15) == 0) {
      *reinterpret_cast<uint4 *>(q) = v;
      return;
    }
    if (((uintptr_t)q & 7) == 0) {
      *reinterpret_cast<uint2 *>(q) = make_uint2(v.x, v.y);
      if (len == 16) *reinterpret_cast<uint2 *>(q + 8) = make_uint2(v.z, v.w);
      return;
    }
  }
  const unsigned char *b = reinterpret_cast<const unsigned char *>(&v);
  for (int i = 0; i < len && off + i < nbytes; ++i) q[i] = (char)b[i];
}

// One thread's 16 bytes of a line: payload, or (flag threads) 8 bytes of payload and the flag.
__device__ __forceinline__ void line_store(char *dst, uint4 v, bool flag_part, uint64_t flag) {
  uint64_t lo = ((uint64_t)v.y << 32) | v.x;
  uint64_t hi = flag_part ? flag : ((uint64_t)v.w << 32) | v.z;
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

__device__ __forceinline__ void line_load(const char *src, uint64_t &lo, uint64_t &hi) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(src) : "memory");
}

__device__ __forceinline__ uint4 payload(uint64_t lo, uint64_t hi, bool flag_part) {
  if (flag_part) hi = 0;
  return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
}

// A line's parts from every source, as loaded.
struct Received { uint64_t lo[MG_MAX_RANKS], hi[MG_MAX_RANKS]; };

// Loads this thread's part of a line from every source k in `want`, at from + k * stride (peer k's
// area follows peer k - 1's, Layout::ll128_off: one base and one stride per call), reloading the
// warp's lines until every flag is this call's. All lanes of the warp call it together (the retry is a
// warp vote); `want` may differ per lane (lines past a block's end). Returns false when the wait
// stopped (spin_check, with a's workspaces, rank and watch), in every lane alike: lane 0 decides.
template <typename A>
__device__ __forceinline__ bool receive_lines(const A &a, const char *from, size_t area, uint32_t want,
                                              bool flag_part, uint64_t flag, Received &r) {
#pragma unroll
  for (int k = 0; k < MG_MAX_RANKS; ++k)
    if ((want >> k) & 1u) line_load(from + k * area, r.lo[k], r.hi[k]);
  uint64_t start = 0;
  for (unsigned spins = 0;; ++spins) {
    bool bad = false;
#pragma unroll
    for (int k = 0; k < MG_MAX_RANKS; ++k)
      if (((want >> k) & 1u) && flag_part && r.hi[k] != flag) bad = true;
    if (!__any_sync(0xffffffffu, bad)) return true;
    // Before the reload, while r holds nothing needed: the check then costs no registers.
    if ((spins & 1023u) == 0) {  // the same spins in every lane
      const uint32_t stop = (threadIdx.x & 31u) == 0 ? spin_check(spins, start, a) : 0u;
      if (__shfl_sync(0xffffffffu, stop, 0)) return false;
    }
#pragma unroll
    for (int k = 0; k < MG_MAX_RANKS; ++k)
      if ((want >> k) & 1u) line_load(from + k * area, r.lo[k], r.hi[k]);
  }
}

// The LL128 protocol's primitives for the line calls of the direct algorithm (line_kernel.cuh, which
// names what a line protocol provides). A unit is one line; a worker is a warp, which takes four lines a turn (eight
// threads a line): lines 4w, 4w + 4 workers, ... Thread `part` (lane % 8) holds bytes part * 16 ..
// of its line's payload, 8 of them in the flag thread (part 7), 16 in the others.
struct LL128Proto {
  static constexpr bool kTwoPhase = true;
  static constexpr int kWorkerThreads = 32;
  static constexpr int kUnitsPerWorker = 4;
  using Inbox = Received;  // a unit's parts from every source, as loaded
  uint64_t flag;  // the call's sequence number, never 0 (the value of a fresh workspace)
  int part;
  bool flag_part;
  int len;  // payload bytes of this thread's part

  __device__ __forceinline__ explicit LL128Proto(uint32_t seq)
      : flag((uint64_t)seq | (1ull << 32)), part((int)(threadIdx.x & 7u)), flag_part(part == 7),
        len(part == 7 ? 8 : 16) {}
  __host__ __device__ static size_t units(size_t bytes) { return ll128_lines(bytes); }
  __device__ __forceinline__ size_t unit_in_turn() const { return (threadIdx.x & 31u) >> 3; }
  __device__ __forceinline__ size_t data_off(size_t line) const { return line * kLineData + (size_t)part * 16; }
  __device__ __forceinline__ size_t area_off(size_t line) const { return line * kLineBytes + (size_t)part * 16; }
  __host__ __device__ static size_t area(const Layout &l, int parity, int phase, int src) {
    return l.ll128_off(parity, phase, src);
  }
  __host__ __device__ static size_t area_stride(const Layout &l) { return l.ll128_area_bytes(); }

  __device__ __forceinline__ uint4 read(const char *p, size_t off, size_t nbytes) const {
    return read_part(p, off, len, nbytes);
  }
  __device__ __forceinline__ void write(char *p, size_t off, size_t nbytes, uint4 v) const {
    write_part(p, off, len, nbytes, v);
  }
  __device__ __forceinline__ void store(char *dst, uint4 v) const { line_store(dst, v, flag_part, flag); }

  // Every source's line in `want` at from + k * stride, waited for together (a warp vote), then
  // passed to each(k, part) in rank order. Every lane of the warp calls it. False where the wait stopped.
  template <typename A, typename Each>
  __device__ __forceinline__ bool recv_each(const A &a, const char *from, size_t stride, uint32_t want, Inbox &r,
                                            const Each &each) const {
    if (!receive_lines(a, from, stride, want, flag_part, flag, r)) return false;
#pragma unroll
    for (int k = 0; k < MG_MAX_RANKS; ++k)
      if ((want >> k) & 1u) each(k, payload(r.lo[k], r.hi[k], flag_part));
    return true;
  }

  // `own` and the lines of the sources in `want` combined in rank order, once all have arrived.
  // Every lane of the warp calls it; `ok` false where the wait stopped (the result is then dropped).
  template <typename A, typename Reduce>
  __device__ __forceinline__ uint4 recv_reduce(const A &a, const char *from, size_t stride, uint32_t want,
                                               uint4 own, const Reduce &reduce, Inbox &r, bool &ok) const {
    ok = receive_lines(a, from, stride, want, flag_part, flag, r);
    if (!ok || want == 0) return own;  // stopped, or a lane past the block's end: nothing to combine
    return reduce(a.nranks, [&](int k) { return k == a.rank ? own : payload(r.lo[k], r.hi[k], flag_part); });
  }
};

}  // namespace mg
