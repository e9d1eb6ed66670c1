// ll128_kernel.cuh: the 128-byte-line protocol for medium symmetric collectives, after NCCL's LL128.
//
// The data travels in 128-byte lines: 120 bytes of payload and an 8-byte flag holding the call's
// sequence number. A warp stores four whole lines at a time (eight threads per line, 16 bytes each,
// the flag in the eighth thread's upper half) with one coalesced store; NVLink delivers such a line
// whole, so a receiver that sees the flag of a line sees its payload. That is the property NCCL's
// LL128 relies on (it enables LL128 on NVLink GPUs from Volta on). A receiver's warp loads the same four
// lines, its flag threads compare the flag, and the warp reloads until every flag matches.
//
// Against the 8-byte LL protocol (ll_kernel.cuh) this moves 128 bytes per 120 instead of 2 per 1,
// and against the direct kernel it has no fence and no counter round trip per step: one NVLink
// store per 16 bytes and one local poll. It serves medium sizes where the direct kernel's two flag
// round trips per step dominate and the LL protocol's doubled bytes cost too much.
//
// Forms. Symmetric (every rank sends to and receives from every other rank in each phase):
//   Allreduce one-shot: every rank sends its whole input to every peer and reduces all n in rank order.
//   Allreduce two-shot: shard k of every input goes to rank k (phase 0), which reduces it, writes it
//     and sends the result to every peer (phase 1), where every rank copies it in. With large shards
//     on 3+ ranks phase 0's sending and receiving run on separate warps (split_phase0).
//   Reduce_scatter_block: block j of every input goes to rank j, which reduces it.
//   Allgather: every rank sends its input to every peer and copies the n blocks out.
//   Reduce: either Allreduce form with no output off the root (recv == nullptr): the same lines move
//     (the reuse argument below) and the root waits one hop, not a fan-in of fenced steps.
// Rooted:
//   Bcast one-shot: the root sends every line to every other rank.
//   Bcast scatter: the root sends shard k of the message to the k-th other rank only (phase 0), which
//     writes it and forwards it to the other non-roots (phase 1): the root stores the message once,
//     not n - 1 times, at the cost of one more hop.
//
// Reuse of the line areas and the sequence number follow ll_kernel.cuh: call seq uses the areas of
// parity seq & 1; a peer writes them again at call seq + 2, which it starts only after receiving my
// lines of call seq + 1, which I send only after my call seq has finished. A Bcast breaks that
// chain; ll_reuse_guard (protocol.cuh) makes the call after one wait for the peers' acks instead.
//
// Each thread handles part (lane % 8) of line L of every block, in every phase, so in-place calls
// are safe: a thread reads a line of the input before it writes that line of the output.
#pragma once
#include <type_traits>
#include "dtypes.cuh"
#include "protocol.cuh"

namespace mg {

enum LL128Mode {
  kLL128Allreduce = 0, kLL128ReduceScatter = 1, kLL128Allgather = 2, kLL128AllreduceTwoShot = 3,
  kLL128Bcast = 4, kLL128BcastScatter = 5
};

constexpr int kLineBytes = 128;
constexpr int kLineData = 120;  // payload bytes per line; the last 8 bytes are the flag

struct LL128Args {
  char *ws[MG_MAX_RANKS];
  const char *send;
  char *recv;
  Layout layout;
  int rank, nranks, mode, root;
  size_t block_bytes;  // bytes of block j (RS, AG), of the whole message (one-shot), of a shard (two-shot, scatter)
  size_t total_bytes;  // two-shot, scatter: the whole message; shard k holds min(block, total - k * block) bytes
  Watch watch;
  int split_phase0;  // two-shot: phase 0's sending and receiving on separate warps (launch_ll128)
};

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

// Loads this thread's part of line `line` from every peer k (in `want`) of area (parity, phase, k)
// in my workspace, reloading the warp's lines until every flag is this call's. All lanes of the warp
// call it together (the retry is a warp vote); `want` may differ per lane (lines past a block's end).
// Returns false when the wait stopped (spin_check), in every lane alike: lane 0 decides.
struct Received { uint64_t lo[MG_MAX_RANKS], hi[MG_MAX_RANKS]; };

__device__ __forceinline__ bool receive_lines(const LL128Args &a, int parity, int phase, size_t line,
                                              uint32_t want, bool flag_part, uint64_t flag, int part,
                                              Received &r) {
  // Peer k's area follows peer k - 1's (Layout::ll128_off): one base and one stride per call.
  const char *from = a.ws[a.rank] + a.layout.ll128_off(parity, phase, 0) + line * kLineBytes + (size_t)part * 16;
  const size_t area = a.layout.ll128_area_bytes();
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

// Bcast, one-shot or scatter (see the forms above). Non-root k is the idx-th non-root (idx = k
// without the root) and owns shard idx: bytes [idx * B, min((idx + 1) * B, total)). False: a wait
// stopped (nothing is forwarded after it).
__device__ __forceinline__ bool ll128_bcast(const LL128Args &a, int parity, uint64_t flag, size_t warp, size_t nwarps) {
  const int me = a.rank, n = a.nranks, root = a.root, lane = threadIdx.x & 31, part = lane & 7;
  const bool flag_part = part == 7;
  const int len = flag_part ? 8 : 16;
  const bool scatter = a.mode == kLL128BcastScatter;
  const size_t B = a.block_bytes, total = a.total_bytes;
  auto idx = [&](int k) { return (size_t)(k - (k > root)); };
  auto shard_len = [&](int k) -> size_t {  // bytes non-root k receives from the root
    return scatter ? shard_extent(total, B, B, idx(k)) : total;
  };
  const size_t nlines = ll128_lines(B);
  if (me == root) {  // phase 0: lines to every other rank
    for (size_t l0 = warp * 4; l0 < nlines; l0 += nwarps * 4) {
      const size_t line = l0 + (lane >> 3), off = line * kLineData + (size_t)part * 16;
      const size_t at = a.layout.ll128_off(parity, 0, root) + line * kLineBytes + (size_t)part * 16;
      if (!scatter) {
        if (line >= nlines) continue;
        const uint4 v = read_part(a.send, off, len, total);
        for (int j = 0; j < n; ++j)
          if (j != root) line_store(a.ws[j] + at, v, flag_part, flag);
        continue;
      }
      for (int j = 0; j < n; ++j) {
        if (j == root) continue;
        const size_t bj = shard_len(j);
        if (line < ll128_lines(bj)) line_store(a.ws[j] + at, read_part(a.send + idx(j) * B, off, len, bj), flag_part, flag);
      }
    }
    return true;
  }
  // Phase 0, receiving my shard (the whole message, one-shot); forwarding it when scattering.
  const size_t mine = shard_len(me);
  char *out = a.recv + (scatter ? idx(me) * B : 0);
  for (size_t l0 = warp * 4; l0 < nlines; l0 += nwarps * 4) {
    const size_t line = l0 + (lane >> 3), off = line * kLineData + (size_t)part * 16;
    const bool valid = line < ll128_lines(mine);
    Received r;
    if (!receive_lines(a, parity, 0, line, valid ? 1u << root : 0u, flag_part, flag, part, r)) return false;
    if (!valid) continue;
    uint64_t lo = 0, hi = 0;  // r.lo[root] without a dynamic index (which would put r in local memory)
#pragma unroll
    for (int k = 0; k < MG_MAX_RANKS; ++k)
      if (k == root) lo = r.lo[k], hi = r.hi[k];
    const uint4 v = payload(lo, hi, flag_part);
    write_part(out, off, len, mine, v);
    if (scatter) {
      const size_t at = a.layout.ll128_off(parity, 1, me) + line * kLineBytes + (size_t)part * 16;
      for (int j = 0; j < n; ++j)
        if (j != me && j != root) line_store(a.ws[j] + at, v, flag_part, flag);
    }
  }
  if (!scatter) return true;
  // Phase 1, receiving the other non-roots' shards.
  for (size_t l0 = warp * 4; l0 < nlines; l0 += nwarps * 4) {
    const size_t line = l0 + (lane >> 3), off = line * kLineData + (size_t)part * 16;
    uint32_t want = 0;
    for (int k = 0; k < n; ++k)
      if (k != me && k != root && line < ll128_lines(shard_len(k))) want |= 1u << k;
    Received r;
    if (!receive_lines(a, parity, 1, line, want, flag_part, flag, part, r)) return false;
#pragma unroll
    for (int k = 0; k < MG_MAX_RANKS; ++k)
      if ((want >> k) & 1u) write_part(a.recv + idx(k) * B, off, len, shard_len(k), payload(r.lo[k], r.hi[k], flag_part));
  }
  return true;
}

__host__ __device__ inline bool ll128_is_bcast(int mode) { return mode == kLL128Bcast || mode == kLL128BcastScatter; }

// One call's lines, by every thread of blocks 0 .. nblocks - 1 (`block` is this one): warp w of
// them takes lines 4w, 4w + 4 nwarps, ... of each phase, so any number of blocks runs the same
// protocol, and a rank whose call ran in the launched kernel below (its whole grid) meets one whose
// call ran in the resident kernel (some of its blocks, resident_kernel.cuh). The caller has begun
// sequence number seq and passed ll_reuse_guard; it publishes seq after. `reduce` combines the
// ranks' parts of a line (StaticReduce, dtypes.cuh). Returns false, for the whole warp, when a wait
// stopped: the warp then stores nothing more.
template <typename Reduce>
__device__ __forceinline__ bool ll128_exchange(const LL128Args &a, uint32_t seq, const Reduce &reduce,
                                               uint32_t block, uint32_t nblocks) {
  const int me = a.rank, n = a.nranks, lane = threadIdx.x & 31, part = lane & 7;
  const bool flag_part = part == 7;
  const int len = flag_part ? 8 : 16;  // payload bytes of this thread's part
  const size_t warp = ((size_t)block * blockDim.x + threadIdx.x) >> 5;
  const size_t nwarps = ((size_t)nblocks * blockDim.x) >> 5;
  const uint32_t all = (1u << n) - 1u, peers = all & ~(1u << me);
  const uint64_t flag = (uint64_t)seq | (1ull << 32);  // never 0, the value of a fresh workspace
  const int parity = (int)(seq & 1u);
  if (ll128_is_bcast(a.mode)) {
    if constexpr (Reduce::kCopies) {
      ll_announce_start(a.ws, me, n, seq);
      return ll128_bcast(a, parity, flag, warp, nwarps);
    }
    return true;
  }

  const bool two = a.mode == kLL128AllreduceTwoShot;
  const bool scatter = two || a.mode == kLL128ReduceScatter;  // block j of the input goes to rank j
  const size_t B = a.block_bytes;
  // Bytes of block k: every block is B except a two-shot message's last shards.
  auto block_len = [&](int k) -> size_t { return two ? shard_extent(a.total_bytes, B, B, (size_t)k) : B; };
  const size_t nlines = ll128_lines(B);  // lines of the largest block
  const size_t mine_len = block_len(me);

  // Who runs phase 0's two loops: every warp sends, then receives; or, in a two-shot call with
  // split_phase0, half of each block's warps send my input's lines while the other half receive the
  // peers' lines, reduce them and send the results (phase 1). Phase 1's stores then start when the
  // first lines arrive, not after every phase-0 line is sent: the links carry both phases at once
  // and phase 0's tail latency is hidden. In place this is safe: senders read only the other ranks'
  // shards of the input, and line L of shard k of my output is written (phase 1) only after rank k
  // reduced it, so after my sender read line L of my input's shard k.
  bool sends = true, receives = true;
  size_t send_warp = warp, send_warps = nwarps, recv_warp = warp, recv_warps = nwarps;
  if (two && a.split_phase0) {
    const size_t W = blockDim.x >> 5, w = threadIdx.x >> 5, half = W / 2;
    sends = w < half;
    receives = !sends;
    send_warp = block * half + w;
    send_warps = nblocks * half;
    recv_warp = block * (W - half) + (w - half);
    recv_warps = nblocks * (W - half);
  }

  // Phase 0: send my input's lines to every peer (block j to rank j when scattering).
  for (size_t l0 = send_warp * 4; sends && l0 < nlines; l0 += send_warps * 4) {
    const size_t line = l0 + (lane >> 3), off = line * kLineData + (size_t)part * 16;
    const size_t at = a.layout.ll128_off(parity, 0, me) + line * kLineBytes + (size_t)part * 16;
    if (!scatter) {  // the same lines to every peer
      if (line >= nlines) continue;
      const uint4 v = read_part(a.send, off, len, B);
      for (int j = 0; j < n; ++j)
        if (j != me) line_store(a.ws[j] + at, v, flag_part, flag);
      if (a.mode == kLL128Allgather && a.send != a.recv + (size_t)me * B) write_part(a.recv + (size_t)me * B, off, len, B, v);
      continue;
    }
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      const size_t bj = block_len(j);
      if (line >= ll128_lines(bj)) continue;
      line_store(a.ws[j] + at, read_part(a.send + (size_t)j * B, off, len, bj), flag_part, flag);
    }
  }

  // Phase 0, receiving: reduce my block (or copy every peer's block, Allgather).
  for (size_t l0 = recv_warp * 4; receives && l0 < nlines; l0 += recv_warps * 4) {
    const size_t line = l0 + (lane >> 3), off = line * kLineData + (size_t)part * 16;
    Received r;
    if (a.mode == kLL128Allgather) {
      if (!receive_lines(a, parity, 0, line, line < nlines ? peers : 0u, flag_part, flag, part, r)) return false;
      if (line >= nlines) continue;
#pragma unroll
      for (int k = 0; k < MG_MAX_RANKS; ++k)
        if ((peers >> k) & 1u) write_part(a.recv + (size_t)k * B, off, len, B, payload(r.lo[k], r.hi[k], flag_part));
      continue;
    }
    const bool valid = line < ll128_lines(mine_len);
    // My own part is read before the wait, so its load overlaps the peers' lines arriving.
    const uint4 own = read_part(a.send + (scatter ? (size_t)me * B : 0), off, len, valid ? mine_len : 0);
    if (!receive_lines(a, parity, 0, line, valid ? peers : 0u, flag_part, flag, part, r)) return false;
    if (!valid) continue;
    const uint4 v = reduce(n, [&](int k) { return k == me ? own : payload(r.lo[k], r.hi[k], flag_part); });
    if (a.recv) write_part(a.recv + (two ? (size_t)me * B : 0), off, len, mine_len, v);
    if (two) {  // my reduced shard to every peer (phase 1)
      const size_t at = a.layout.ll128_off(parity, 1, me) + line * kLineBytes + (size_t)part * 16;
      for (int j = 0; j < n; ++j)
        if (j != me) line_store(a.ws[j] + at, v, flag_part, flag);
    }
  }

  // Phase 1 (two-shot), receiving: every other shard into my output. A Reduce's non-roots receive
  // too, writing nothing: with a message this short that some shards are empty, phase 1 may be all
  // a rank hears from its peers, and the areas' reuse needs every rank to hear from them.
  if (two) {
    for (size_t l0 = warp * 4; l0 < nlines; l0 += nwarps * 4) {
      const size_t line = l0 + (lane >> 3), off = line * kLineData + (size_t)part * 16;
      uint32_t want = 0;
      for (int k = 0; k < n; ++k)
        if (k != me && line < ll128_lines(block_len(k))) want |= 1u << k;
      Received r;
      if (!receive_lines(a, parity, 1, line, want, flag_part, flag, part, r)) return false;
#pragma unroll
      for (int k = 0; k < MG_MAX_RANKS; ++k)
        if (((want >> k) & 1u) && a.recv)
          write_part(a.recv + (size_t)k * B, off, len, block_len(k), payload(r.lo[k], r.hi[k], flag_part));
    }
  }
  return true;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads, 1) ll128_kernel(const __grid_constant__ LL128Args a) {
  TeamState *state = team_state(a.ws[a.rank]);
  const uint32_t seq = ll_sequence_begin(state);
  // A warp stops as a whole (receive_lines votes across it).
  bool dead = __any_sync(0xffffffffu, ll_reuse_guard(state, a, seq, call_enter(state, blockIdx.x == 0)));
  if (!dead) dead = !ll128_exchange(a, seq, StaticReduce<T, Op>{}, blockIdx.x, gridDim.x);
  ll_sequence_publish(state, a.watch, seq, gridDim.x, dead, ll128_is_bcast(a.mode));
}

}  // namespace mg
