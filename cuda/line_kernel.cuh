// line_kernel.cuh: the direct algorithm of the protocols with flags in the data (the "algorithm" layer
// over ll_proto.cuh and ll128_proto.cuh), written once: a call's whole message fits the protocol's
// areas, every rank stores its pieces straight into its peers' areas and each receiver polls them.
//
// Forms. Symmetric (every rank sends to and receives from every other rank in each phase):
//   Allreduce one-shot: every rank sends its whole input to every peer and reduces all n in rank order.
//   Allreduce two-shot: shard k of every input goes to rank k (phase 0), which reduces it, writes it
//     and sends the result to every peer (phase 1), where every rank copies it in. With large shards
//     on 3+ ranks phase 0's sending and receiving run on separate warps (split_phase0).
//   Reduce_scatter_block: block j of every input goes to rank j, which reduces it.
//   Allgather: every rank sends its input to every peer and copies the n blocks out.
//   Reduce: either Allreduce form with no output off the root (recv == nullptr): the same units move
//     (the reuse argument below) and the root waits one hop, not a fan-in of fenced steps.
// Rooted:
//   Bcast one-shot: the root sends every unit to every other rank.
//   Bcast scatter: the root sends shard k of the message to the k-th other rank only (phase 0), which
//     writes it and forwards it to the other non-roots (phase 1): the root stores the message once,
//     not n - 1 times, at the cost of one more hop.
// The forms with a second phase (two-shot, both Bcasts) need a protocol with areas for it
// (Proto::kTwoPhase: LL128); the host asks the LL protocol for the one-phase symmetric forms only.
//
// What a protocol (Proto) provides, with the thread's place in a unit fixed at construction from
// the call's sequence number:
//   units(bytes), data_off(u), area_off(u): a unit of a piece (LL: 16 bytes; LL128: a 120-byte line),
//     where this thread's part of unit u lies in a piece and in an area;
//   area(layout, parity, phase, src), area_stride(layout): where source src's area lies in a workspace;
//   kWorkerThreads, kUnitsPerWorker, unit_in_turn(): a worker (LL: a thread; LL128: a warp) takes
//     kUnitsPerWorker units a turn, this thread the turn's unit_in_turn()-th;
//   read(p, off, nbytes), write(p, off, nbytes, v): this thread's part of a user buffer (zeros past
//     nbytes when reading, nothing past it when writing);
//   store(dst, v): this thread's part of a unit into a peer's area, with the call's flag;
//   recv_each(a, from, stride, want, inbox, each), recv_reduce(a, from, stride, want, own, reduce, inbox,
//     ok): the units of the sources in `want` (at from + k * stride), waited for, handed on or combined
//     in rank order with this rank's own part; and, for the Bcasts (two-phase protocols only),
//     recv_one(a, from, stride, src, valid, inbox, v): one source's unit. Every thread of a worker calls
//     them together. An Inbox holds what a
//     protocol loads before it is used (LL128: every source's line; LL: nothing); a loop declares one
//     per turn for all its receives (two in one turn, one per branch, took LL128 33 more registers).
//
// Reuse of the areas and the sequence number (protocol.cuh): call seq uses the areas of parity
// seq & 1; a peer writes them again at call seq + 2, which it starts only after receiving my units
// of call seq + 1, which I send only after my call seq has finished. A Bcast breaks that chain;
// ll_reuse_guard makes the call after one wait for the peers' acks instead.
//
// Each thread handles the same part of unit u of every block, in every phase, so in-place calls are
// safe: a thread reads a unit of the input before it writes that unit of the output.
#pragma once
#include "dtypes.cuh"
#include "ll128_proto.cuh"
#include "ll_proto.cuh"
#include "protocol.cuh"

namespace mg {

enum LineMode {
  kLineAllreduce = 0, kLineReduceScatter = 1, kLineAllgather = 2, kLineAllreduceTwoShot = 3,
  kLineBcast = 4, kLineBcastScatter = 5
};

struct LineArgs {
  char *ws[MG_MAX_RANKS];
  const char *send;
  char *recv;
  Layout layout;
  int rank, nranks, mode, root;
  size_t block_bytes;  // bytes of block j (RS, AG), of the whole message (one-shot), of a shard (two-shot, scatter)
  size_t total_bytes;  // two-shot, scatter: the whole message; shard k holds min(block, total - k * block) bytes
  Watch watch;
  int split_phase0;  // two-shot: phase 0's sending and receiving on separate warps (launch_line)
};

__host__ __device__ inline bool line_is_bcast(int mode) { return mode == kLineBcast || mode == kLineBcastScatter; }

// Units a block of kThreads takes a turn, all its workers, or each half where phase 0 is split:
// the resident kernel wakes as many blocks as a call's units need (resident_blocks_for).
template <typename Proto> __host__ __device__ constexpr size_t line_units_per_block(bool split) {
  return (size_t)Proto::kUnitsPerWorker * (kThreads / Proto::kWorkerThreads) / (split ? 2 : 1);
}

// A set of workers: this one's number and how many there are.
struct Workers { size_t id, count; };

// The workers of blocks 0 .. nblocks - 1 (`block` is this one), or a share of each block's: workers
// lo .. lo + per - 1 of every block, where this thread's worker is among them.
template <typename Proto>
__device__ __forceinline__ Workers workers_of(uint32_t block, uint32_t nblocks, size_t lo, size_t per) {
  const size_t w = threadIdx.x / Proto::kWorkerThreads;
  return Workers{(size_t)block * per + (w - lo), (size_t)nblocks * per};
}

// The units of a piece a worker takes, a turn at a time: `for (Units u(p, wk); u.more(n); u.next())`
// visits unit u.unit() of each turn. With several units a turn, every thread of the worker runs every
// turn, its unit past the end included (the receives are warp votes). A loop, not a function taking
// the body as a lambda: with the body in a lambda the LL128 body in the resident kernel took 33 more
// registers and spilled (docs/kernel-registers.md).
template <typename Proto> struct Units {
  size_t u0, step, sub;
  __device__ __forceinline__ Units(const Proto &p, Workers wk)
      : u0(wk.id * Proto::kUnitsPerWorker), step(wk.count * Proto::kUnitsPerWorker), sub(p.unit_in_turn()) {}
  __device__ __forceinline__ bool more(size_t nunits) const { return u0 < nunits; }
  __device__ __forceinline__ void next() { u0 += step; }
  __device__ __forceinline__ size_t unit() const { return u0 + sub; }
};

// Bcast, one-shot or scatter (see the forms above). Non-root k is the idx-th non-root (idx = k
// without the root) and owns shard idx: bytes [idx * B, min((idx + 1) * B, total)). False: a wait
// stopped (nothing is forwarded after it).
template <typename Proto>
__device__ __forceinline__ bool line_bcast(const Proto &p, const LineArgs &a, int parity, Workers wk) {
  const int me = a.rank, n = a.nranks, root = a.root;
  const bool scatter = a.mode == kLineBcastScatter;
  const size_t B = a.block_bytes, total = a.total_bytes, stride = Proto::area_stride(a.layout);
  auto idx = [&](int k) { return (size_t)(k - (k > root)); };
  auto shard_len = [&](int k) -> size_t {  // bytes non-root k receives from the root
    return scatter ? shard_extent(total, B, B, idx(k)) : total;
  };
  const size_t nunits = Proto::units(B);
  if (me == root) {  // phase 0: units to every other rank
    const size_t at = Proto::area(a.layout, parity, 0, root);
    for (Units<Proto> it(p, wk); it.more(nunits); it.next()) {
      const size_t u = it.unit();
      if (!scatter) {
        if (u >= nunits) continue;
        const uint4 v = p.read(a.send, p.data_off(u), total);
        for (int j = 0; j < n; ++j)
          if (j != root) p.store(a.ws[j] + at + p.area_off(u), v);
        continue;
      }
      for (int j = 0; j < n; ++j)
        if (j != root && u < Proto::units(shard_len(j)))
          p.store(a.ws[j] + at + p.area_off(u), p.read(a.send + idx(j) * B, p.data_off(u), shard_len(j)));
    }
    return true;
  }
  // Phase 0, receiving my shard (the whole message, one-shot); forwarding it when scattering.
  const char *mine = a.ws[me];
  const size_t my_len = shard_len(me);
  char *out = a.recv + (scatter ? idx(me) * B : 0);
  for (Units<Proto> it(p, wk); it.more(nunits); it.next()) {
    const size_t u = it.unit();
    const bool valid = u < Proto::units(my_len);
    typename Proto::Inbox box;
    uint4 v;
    if (!p.recv_one(a, mine + Proto::area(a.layout, parity, 0, 0) + p.area_off(u), stride, root, valid, box, v))
      return false;
    if (!valid) continue;
    p.write(out, p.data_off(u), my_len, v);
    if (!scatter) continue;
    const size_t at = Proto::area(a.layout, parity, 1, me) + p.area_off(u);
    for (int j = 0; j < n; ++j)
      if (j != me && j != root) p.store(a.ws[j] + at, v);
  }
  if (!scatter) return true;
  // Phase 1, receiving the other non-roots' shards.
  for (Units<Proto> it(p, wk); it.more(nunits); it.next()) {
    const size_t u = it.unit();
    uint32_t want = 0;
    for (int k = 0; k < n; ++k)
      if (k != me && k != root && u < Proto::units(shard_len(k))) want |= 1u << k;
    typename Proto::Inbox box;
    if (!p.recv_each(a, mine + Proto::area(a.layout, parity, 1, 0) + p.area_off(u), stride, want, box,
                     [&](int k, uint4 v) { p.write(a.recv + idx(k) * B, p.data_off(u), shard_len(k), v); }))
      return false;
  }
  return true;
}

// One call's units, by every thread of blocks 0 .. nblocks - 1 (`block` is this one): any number of
// blocks runs the same protocol, so a rank whose call ran in a launched kernel (its whole grid) meets
// one whose call ran in the resident kernel (some of its blocks, resident_kernel.cuh). The caller has
// begun sequence number seq and passed ll_reuse_guard; it publishes seq after. `reduce` combines the
// ranks' parts of a unit (StaticReduce or RuntimeReduce, dtypes.cuh). Returns false, for the whole
// worker, when a wait stopped: it then stores nothing more.
template <typename Proto, typename Reduce>
__device__ __forceinline__ bool line_exchange(const LineArgs &a, uint32_t seq, const Reduce &reduce, uint32_t block,
                                              uint32_t nblocks) {
  const Proto p(seq);
  const int me = a.rank, n = a.nranks;
  const uint32_t peers = ((1u << n) - 1u) & ~(1u << me);
  const int parity = (int)(seq & 1u);
  const size_t W = blockDim.x / Proto::kWorkerThreads;
  const Workers all = workers_of<Proto>(block, nblocks, 0, W);
  if constexpr (Proto::kTwoPhase) {
    if (line_is_bcast(a.mode)) {
      if constexpr (Reduce::kCopies) {
        ll_announce_start(a.ws, me, n, seq);
        return line_bcast(p, a, parity, all);
      }
      return true;
    }
  }

  const bool two = Proto::kTwoPhase && a.mode == kLineAllreduceTwoShot;
  const bool scatter = two || a.mode == kLineReduceScatter;  // block j of the input goes to rank j
  const size_t B = a.block_bytes, stride = Proto::area_stride(a.layout);
  // Bytes of block k: every block is B except a two-shot message's last shards.
  auto block_len = [&](int k) -> size_t { return two ? shard_extent(a.total_bytes, B, B, (size_t)k) : B; };
  const size_t nunits = Proto::units(B);  // units of the largest block
  const size_t mine_len = block_len(me);
  const char *mine = a.ws[me];

  // Who runs phase 0's two loops: every worker sends, then receives; or, in a two-shot call with
  // split_phase0, half of each block's workers send my input's units while the other half receive
  // the peers' units, reduce them and send the results (phase 1). Phase 1's stores then start when
  // the first units arrive, not after every phase-0 unit is sent: the links carry both phases at
  // once and phase 0's tail latency is hidden. In place this is safe: senders read only the other
  // ranks' shards of the input, and unit u of shard k of my output is written (phase 1) only after
  // rank k reduced it, so after my sender read unit u of my input's shard k.
  bool sends = true, receives = true;
  Workers send_wk = all, recv_wk = all;
  if (two && a.split_phase0) {
    const size_t w = threadIdx.x / Proto::kWorkerThreads, half = W / 2;
    sends = w < half;
    receives = !sends;
    send_wk = workers_of<Proto>(block, nblocks, 0, half);
    recv_wk = workers_of<Proto>(block, nblocks, half, W - half);
  }

  // Phase 0: send my input's units to every peer (block j to rank j when scattering).
  const size_t at0 = Proto::area(a.layout, parity, 0, me);
  for (Units<Proto> it(p, send_wk); sends && it.more(nunits); it.next()) {
    const size_t u = it.unit();
    if (!scatter) {  // the same units to every peer
      if (u >= nunits) continue;
      const uint4 v = p.read(a.send, p.data_off(u), B);
      for (int j = 0; j < n; ++j)
        if (j != me) p.store(a.ws[j] + at0 + p.area_off(u), v);
      if (a.mode == kLineAllgather && a.send != a.recv + (size_t)me * B) p.write(a.recv + (size_t)me * B, p.data_off(u), B, v);
      continue;
    }
    for (int j = 0; j < n; ++j) {
      if (j == me || u >= Proto::units(block_len(j))) continue;
      p.store(a.ws[j] + at0 + p.area_off(u), p.read(a.send + (size_t)j * B, p.data_off(u), block_len(j)));
    }
  }

  // Phase 0, receiving: reduce my block (or copy every peer's block, Allgather).
  const char *from0 = mine + Proto::area(a.layout, parity, 0, 0);
  for (Units<Proto> it(p, recv_wk); receives && it.more(nunits); it.next()) {
    const size_t u = it.unit();
    typename Proto::Inbox box;
    if (a.mode == kLineAllgather) {
      if (!p.recv_each(a, from0 + p.area_off(u), stride, u < nunits ? peers : 0u, box,
                       [&](int k, uint4 v) { p.write(a.recv + (size_t)k * B, p.data_off(u), B, v); }))
        return false;
      continue;
    }
    const bool valid = u < Proto::units(mine_len);
    // My own part is read before the wait, so its load overlaps the peers' units arriving.
    const uint4 own = p.read(a.send + (scatter ? (size_t)me * B : 0), p.data_off(u), valid ? mine_len : 0);
    bool ok;
    const uint4 v = p.recv_reduce(a, from0 + p.area_off(u), stride, valid ? peers : 0u, own, reduce, box, ok);
    if (!ok) return false;
    if (!valid) continue;
    if (a.recv) p.write(a.recv + (two ? (size_t)me * B : 0), p.data_off(u), mine_len, v);
    if (two) {  // my reduced shard to every peer (phase 1)
      const size_t at = Proto::area(a.layout, parity, 1, me) + p.area_off(u);
      for (int j = 0; j < n; ++j)
        if (j != me) p.store(a.ws[j] + at, v);
    }
  }

  // Phase 1 (two-shot), receiving: every other shard into my output. A Reduce's non-roots receive
  // too, writing nothing: with a message this short that some shards are empty, phase 1 may be all
  // a rank hears from its peers, and the areas' reuse needs every rank to hear from them.
  if (!two) return true;
  const char *from1 = mine + Proto::area(a.layout, parity, 1, 0);
  for (Units<Proto> it(p, all); it.more(nunits); it.next()) {
    const size_t u = it.unit();
    uint32_t want = 0;
    for (int k = 0; k < n; ++k)
      if (k != me && u < Proto::units(block_len(k))) want |= 1u << k;
    typename Proto::Inbox box;
    if (!p.recv_each(a, from1 + p.area_off(u), stride, want, box, [&](int k, uint4 v) {
          if (a.recv) p.write(a.recv + (size_t)k * B, p.data_off(u), block_len(k), v);
        }))
      return false;
  }
  return true;
}

// The launched kernel of a protocol: every block of the grid runs the call.
template <typename Proto, typename T, typename Op>
__global__ void __launch_bounds__(kThreads, 1) line_kernel(const __grid_constant__ LineArgs a) {
  TeamState *state = team_state(a.ws[a.rank]);
  const uint32_t seq = ll_sequence_begin(state);
  bool dead = ll_reuse_guard(state, a, seq, call_enter(state, blockIdx.x == 0));
  if (Proto::kWorkerThreads > 1) dead = __any_sync(0xffffffffu, dead);  // a worker stops as a whole
  if (!dead) dead = !line_exchange<Proto>(a, seq, StaticReduce<T, Op>{}, blockIdx.x, gridDim.x);
  ll_sequence_publish(state, a.watch, seq, gridDim.x, dead, line_is_bcast(a.mode));
}

}  // namespace mg
