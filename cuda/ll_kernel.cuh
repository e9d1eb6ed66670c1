// ll_kernel.cuh: the low-latency protocol for small symmetric collectives (Allreduce one-shot,
// Reduce_scatter_block, Allgather), after NCCL's LL: every 8 bytes a sender stores hold 4 bytes of
// data and the 32-bit sequence number of the call, so a receiver polls the data itself. No fence, no
// counter, no ack: one NVLink store and one poll per word, the lowest latency a kernel can have.
//
// The sequence number is kept in the rank's TeamState (device memory, so graph replays continue it):
// every block reads it at its start, and the last block to finish stores the new one.
//
// Reuse without acks: call seq writes region seq & 1, and a rank starts call seq + 2 only after its
// call seq + 1 received every peer's data of seq + 1, which those peers sent after finishing call
// seq (calls are stream-ordered). That argument needs every rank to receive from every other rank,
// hence symmetric collectives only; after an LL128 Bcast, which breaks it, ll_reuse_guard
// (protocol.cuh) waits for the peers' acks first. A Reduce runs as the Allreduce with no output off
// the root (recv == nullptr): every rank still sends to and receives from every other, so the
// argument holds, and at these sizes the extra lines cost nothing next to one more hop.
#pragma once
#include "dtypes.cuh"
#include "protocol.cuh"

namespace mg {

enum LLMode { kLLAllreduce = 0, kLLReduceScatter = 1, kLLAllgather = 2 };

struct LLArgs {
  char *ws[MG_MAX_RANKS];
  const char *send;
  char *recv;
  Layout layout;
  int rank, nranks, mode;
  size_t piece_bytes;  // bytes one rank sends to one peer
  Watch watch;
};

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

// One call's exchange, by thread `gid` of `gstride` threads: every thread takes 16-byte vectors
// gid, gid + gstride, ... of the piece, so any grid runs the same protocol, and a rank whose call ran
// in the launched kernel below meets one whose call ran in the resident kernel (resident_kernel.cuh).
// `reduce` combines the ranks' vectors (StaticReduce, dtypes.cuh). Returns false when a wait stopped:
// the thread then stores nothing more (a vector it could not complete, or later ones).
template <typename Reduce>
__device__ __forceinline__ bool ll_exchange(const LLArgs &a, uint32_t seq, size_t gid, size_t gstride,
                                            const Reduce &reduce) {
  const int me = a.rank, n = a.nranks;
  const size_t nb = a.piece_bytes, nvec = (nb + 15) / 16;
  char *mine = a.ws[me];
  const int parity = (int)(seq & 1u);
  bool dead = false;

  for (size_t v = gid; v < nvec; v += gstride) {
    const size_t off = v * 16;
    // Send: my piece for every other rank (the same piece, except Reduce_scatter's block j).
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      const char *src = a.send + (a.mode == kLLReduceScatter ? (size_t)j * nb : 0);
      ll_store(a.ws[j] + a.layout.ll_off(parity, me) + v * 32, load_piece16(src, off, nb), seq);
    }
    if (a.mode == kLLAllgather) {
      for (int k = 0; k < n; ++k) {
        uint4 x = k == me ? load_piece16(a.send, off, nb) : ll_load(mine + a.layout.ll_off(parity, k) + v * 32, seq, a, dead);
        if (dead) return false;
        if (!(k == me && a.send == a.recv + (size_t)me * nb)) store_piece16(a.recv + (size_t)k * nb, off, nb, x);
      }
      continue;
    }
    // The reduction in rank order, of my vector and each peer's as it arrives (after a stopped wait,
    // no more waiting: zeros, and the result is dropped).
    const uint4 out = reduce(n, [&](int k) {
      return k == me ? load_piece16(a.send + (a.mode == kLLReduceScatter ? (size_t)me * nb : 0), off, nb)
             : dead  ? make_uint4(0, 0, 0, 0)
                     : ll_load(mine + a.layout.ll_off(parity, k) + v * 32, seq, a, dead);
    });
    if (dead) return false;
    if (a.recv) store_piece16(a.recv, off, nb, out);  // null: a Reduce off its root
  }
  return true;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads, 1) ll_kernel(const __grid_constant__ LLArgs a) {
  TeamState *state = team_state(a.ws[a.rank]);
  const uint32_t seq = ll_sequence_begin(state);
  bool dead = ll_reuse_guard(state, a, seq, call_enter(state, blockIdx.x == 0));
  if (!dead)
    dead = !ll_exchange(a, seq, (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x,
                        StaticReduce<T, Op>{});
  ll_sequence_publish(state, a.watch, seq, gridDim.x, dead);
}

}  // namespace mg
