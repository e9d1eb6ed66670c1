// ll_proto.cuh: the low-latency protocol (LL), after NCCL's LL: every 8 bytes a sender stores hold 4
// bytes of data and the 32-bit sequence number of the call, so a receiver polls the data itself. No
// fence, no counter, no ack: one NVLink store and one poll per word, the lowest latency a kernel can
// have. Its primitives serve the direct algorithm through line_kernel.cuh (LLProto) and the exchange's small
// pairs (exchange_kernel.cuh: ll_store, ll_load).
//
// Its areas (Layout::ll_off) hold one phase per call parity and source, so it runs the symmetric
// one-phase forms: Allreduce one-shot (and Reduce as it), Reduce_scatter_block, Allgather.
#pragma once
#include "dtypes.cuh"
#include "protocol.cuh"

namespace mg {

// 16 bytes of a piece that may be unaligned or end early (zero padding past the end).
__device__ __forceinline__ uint4 load_piece16(const char *p, size_t off, size_t nbytes) {
  if (off + 16 <= nbytes && (((uintptr_t)(p + off)) & 15) == 0) return *reinterpret_cast<const uint4 *>(p + off);
  uint4 v = make_uint4(0, 0, 0, 0);
  unsigned char *b = reinterpret_cast<unsigned char *>(&v);
  for (int i = 0; i < 16 && off + i < nbytes; ++i) b[i] = (unsigned char)p[off + i];
  return v;
}

__device__ __forceinline__ void store_piece16(char *p, size_t off, size_t nbytes, uint4 v) {
  if (off + 16 <= nbytes && (((uintptr_t)(p + off)) & 15) == 0) {
    *reinterpret_cast<uint4 *>(p + off) = v;
    return;
  }
  const unsigned char *b = reinterpret_cast<const unsigned char *>(&v);
  for (int i = 0; i < 16 && off + i < nbytes; ++i) p[off + i] = (char)b[i];
}

__device__ __forceinline__ void ll_store(char *dst, uint4 v, uint32_t f) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(dst), "r"(v.x), "r"(f), "r"(v.y), "r"(f)
               : "memory");
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(dst + 16), "r"(v.z), "r"(f), "r"(v.w), "r"(f)
               : "memory");
}

// One look at a unit, no wait: true when both 8-byte halves carry flag f, its data then in *out. Several
// looks issued before any is checked keep their loads in flight together (exchange_receive_ll).
__device__ __forceinline__ bool ll_peek(const char *src, uint32_t f, uint4 *out) {
  uint4 a, b;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "l"(src) : "memory");
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "l"(src + 16) : "memory");
  *out = make_uint4(a.x, a.z, b.x, b.z);
  return a.y == f && a.w == f && b.y == f && b.w == f;
}

// Each 8-byte half of a 16-byte load is atomic and carries its own flag, so a torn read is seen
// as "not yet" and retried. A wait that stops (spin_check, with la's workspaces, rank and watch) sets
// `dead` and returns zeros.
template <typename A>
__device__ __forceinline__ uint4 ll_load(const char *src, uint32_t f, const A &la, bool &dead) {
  uint4 a, b;
  uint64_t start = 0;
  for (unsigned spins = 0;; ++spins) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "l"(src) : "memory");
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "l"(src + 16) : "memory");
    if (a.y == f && a.w == f && b.y == f && b.w == f) break;
    if (spin_check(spins, start, la)) {
      dead = true;
      return make_uint4(0, 0, 0, 0);
    }
  }
  return make_uint4(a.x, a.z, b.x, b.z);
}

// The LL protocol's primitives for the line calls of the direct algorithm (line_kernel.cuh, which
// names what a line protocol provides). A unit is one 16-byte vector of a piece, 32 bytes in the areas; each thread
// is a worker and takes units gid, gid + workers, ...
struct LLProto {
  static constexpr bool kTwoPhase = false;   // one phase of areas: no two-shot, no Bcast
  static constexpr int kWorkerThreads = 1;   // a worker is a thread
  static constexpr int kUnitsPerWorker = 1;  // units a worker takes per turn
  struct Inbox {};                           // nothing held: each source's unit is loaded as it is used
  uint32_t flag;                             // the call's sequence number

  __device__ __forceinline__ explicit LLProto(uint32_t seq) : flag(seq) {}
  __host__ __device__ static size_t units(size_t bytes) { return (bytes + 15) / 16; }
  __device__ __forceinline__ size_t unit_in_turn() const { return 0; }
  __device__ __forceinline__ size_t data_off(size_t u) const { return u * 16; }
  __device__ __forceinline__ size_t area_off(size_t u) const { return u * 32; }
  __host__ __device__ static size_t area(const Layout &l, int parity, int /*phase*/, int src) { return l.ll_off(parity, src); }
  __host__ __device__ static size_t area_stride(const Layout &) { return 2 * (size_t)MG_LL_MAX_BYTES; }

  __device__ __forceinline__ uint4 read(const char *p, size_t off, size_t nbytes) const { return load_piece16(p, off, nbytes); }
  __device__ __forceinline__ void write(char *p, size_t off, size_t nbytes, uint4 v) const { store_piece16(p, off, nbytes, v); }
  __device__ __forceinline__ void store(char *dst, uint4 v) const { ll_store(dst, v, flag); }

  // The units of the sources in `want` at from + k * stride, into each(k, vector) in rank order,
  // each waited for as it comes. False where a wait stopped (nothing more is passed on).
  template <typename A, typename Each>
  __device__ __forceinline__ bool recv_each(const A &a, const char *from, size_t stride, uint32_t want, Inbox &,
                                            const Each &each) const {
    bool dead = false;
    for (int k = 0; k < a.nranks; ++k) {
      if (!((want >> k) & 1u)) continue;
      const uint4 v = ll_load(from + k * stride, flag, a, dead);
      if (dead) return false;
      each(k, v);
    }
    return true;
  }

  // `own` and the units of the sources in `want` combined in rank order (reduce: StaticReduce or
  // RuntimeReduce), each peer's loaded as the combine reaches it. `ok` false where a wait stopped
  // (then zeros stand in for the rest and the result is dropped).
  template <typename A, typename Reduce>
  __device__ __forceinline__ uint4 recv_reduce(const A &a, const char *from, size_t stride, uint32_t want,
                                               uint4 own, const Reduce &reduce, Inbox &, bool &ok) const {
    bool dead = false;
    const uint4 out = reduce(a.nranks, [&](int k) {
      return k == a.rank ? own
             : dead || !((want >> k) & 1u) ? make_uint4(0, 0, 0, 0)
                                           : ll_load(from + k * stride, flag, a, dead);
    });
    ok = !dead;
    return out;
  }
};

}  // namespace mg
