// line_kernel.cuh: the line protocols (flags in the data: ll_proto.cuh, ll128_proto.cuh) as protocols
// of the direct algorithm (direct_kernel.cuh): a call's whole message fits the protocol's areas, so a
// form runs in one step on one "channel" whose crew is every worker of the call's blocks; every rank
// stores its pieces straight into its peers' areas (lane 0: phase 0, lane 1: phase 1) and each receiver
// polls them, a unit at a time.
//
// The forms (direct_form.cuh) the host gives them: one-shot Allreduce (and Reduce as it, with no output
// off the root: the same units move, by the reuse argument below), Reduce_scatter_block, Allgather; and
// with a protocol that has areas for two phases (Proto::kTwoPhase: LL128) the two-shot Allreduce (and
// Reduce as it), one-shot Bcast and scatter Bcast (the root stores the message once, not n - 1 times,
// at the cost of one more hop). With large shards on 3+ ranks the two-shot form splits its contributing
// and reducing across each block's warps (split_phase0; direct_run).
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
//     in rank order with this rank's own part, with its own wait. Every thread of a worker calls them
//     together. An Inbox holds what a protocol loads before it is used (LL128: every source's line; LL:
//     nothing); a loop declares one per turn for all its receives (two in one turn took LL128 33 more
//     registers).
//
// Reuse of the areas and the sequence number (protocol.cuh): call seq uses the areas of parity
// seq & 1; a peer writes them again at call seq + 2, which it starts only after receiving my units
// of call seq + 1, which I send only after my call seq has finished. A Bcast breaks that chain;
// ll_reuse_guard makes the call after one wait for the peers' acks instead.
//
// Each thread handles the same part of unit u of every block, in every phase, so in-place calls are
// safe: a thread reads a unit of the input before it writes that unit of the output.
#pragma once
#include "direct_kernel.cuh"
#include "dtypes.cuh"
#include "ll128_proto.cuh"
#include "ll_proto.cuh"
#include "protocol.cuh"

namespace mg {

struct LineArgs {
  char *ws[MG_MAX_RANKS];
  const char *send;
  char *recv;  // null: no output (a Reduce off the root)
  Layout layout;
  int rank, nranks, mode, root;  // mode: a DirectMode the line protocols run (direct_form.cuh)
  size_t block_bytes;  // bytes of block j (RS, AG), of the whole message (one-shot), of a shard (two-shot, scatter)
  size_t total_bytes;  // two-shot, scatter: the whole message; shard k holds min(block, total - k * block) bytes
  Watch watch;
  int split_phase0;  // two-shot: contributing and reducing on separate warps (launch_line)
  // The call's form in bytes (line_form of the fields above), worked out once by the host's plan or the
  // resident kernel's first thread: in a launched kernel's parameters it costs no registers and no
  // barrier (worked out in the kernel, the instructions before a call's first store took its latency
  // 0.5-1 us longer: docs/kernel-registers.md).
  DirectForm form;
};

// The form of a line call, in bytes.
__host__ __device__ inline DirectForm line_form(const LineArgs &a) {
  const bool shards = a.mode == kDirectTwoShot || a.mode == kDirectBcastScatter;
  return direct_form(a.mode, a.root, a.nranks, shards ? a.total_bytes : a.block_bytes, a.block_bytes);
}

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

// One call in a line protocol, for the direct algorithm (direct_kernel.cuh names what a protocol
// provides): by every thread of blocks 0 .. nblocks - 1 (`block` is this one), so any number of blocks
// runs the same protocol, and a rank whose call ran in a launched kernel (its whole grid) meets one whose
// call ran in the resident kernel (some of its blocks, resident_kernel.cuh). `combine` combines the ranks'
// parts of a unit (StaticReduce or RuntimeReduce, dtypes.cuh). The units of a piece are visited in loops
// over Units, not by a function taking a loop's body.
template <typename Proto, typename Reduce> struct LineCall {
  using Crew = Workers;
  static constexpr bool kOneStep = true;  // a call is one step
  const LineArgs &a;
  const Proto p;
  const Reduce &combine;  // (the call's reduction)
  int parity;
  uint32_t block, nblocks;

  __device__ __forceinline__ LineCall(const LineArgs &args, uint32_t seq, const Reduce &r, uint32_t blk, uint32_t nblk)
      : a(args), p(seq), combine(r), parity((int)(seq & 1u)), block(blk), nblocks(nblk) {}

  __device__ __forceinline__ int rank() const { return a.rank; }
  __device__ __forceinline__ int warps() const { return (int)blockDim.x / 32; }
  __device__ __forceinline__ Crew crew(int lo, int count, int /*barrier: none, the waits are per unit*/) const {
    constexpr int kPerWarp = 32 / Proto::kWorkerThreads;
    return workers_of<Proto>(block, nblocks, (size_t)lo * kPerWarp, (size_t)count * kPerWarp);
  }
  // Where lane `lane`'s units from src lie in this rank's workspace (src 0: the first source's area).
  __device__ __forceinline__ const char *inbox_of(int lane) const {
    return a.ws[a.rank] + Proto::area(a.layout, parity, lane, 0);
  }

  template <typename PieceOf>
  __device__ __forceinline__ bool scatter(const Crew &wk, int, uint32_t to, bool same, const PieceOf &piece) const {
    const int n = a.nranks;
    const size_t at = Proto::area(a.layout, parity, 0, a.rank);
    // The units of the largest piece: with the same piece for every owner, the first one's (no loop
    // over the ranks before the first store).
    const Piece whole = to ? piece(__ffs(to) - 1) : Piece{0, 0, 0};
    size_t nunits = Proto::units(whole.n);
    if (!same)
      for (int j = 0; j < n; ++j)
        if ((to >> j) & 1u) {
          const size_t u = Proto::units(piece(j).n);
          nunits = u > nunits ? u : nunits;
        }
    for (Units<Proto> it(p, wk); it.more(nunits); it.next()) {
      const size_t u = it.unit();
      if (same) {  // one read, every owner's store
        if (u >= nunits) continue;
        const uint4 v = p.read(a.send + whole.in, p.data_off(u), whole.n);
        for (int j = 0; j < n; ++j)
          if ((to >> j) & 1u) p.store(a.ws[j] + at + p.area_off(u), v);
        continue;
      }
      for (int j = 0; j < n; ++j) {
        if (!((to >> j) & 1u)) continue;
        const Piece q = piece(j);
        if (u < Proto::units(q.n)) p.store(a.ws[j] + at + p.area_off(u), p.read(a.send + q.in, p.data_off(u), q.n));
      }
    }
    return true;
  }

  // The line forms' reductions: with my own part, `from` is every other rank or none (LL128's
  // recv_reduce combines every rank); without it (the Bcasts, LL128 only), one source, copied.
  __device__ __forceinline__ bool reduce(const Crew &wk, int, uint32_t from, long long own, long long out, uint32_t to,
                                         size_t nbytes) const {
    const int n = a.nranks;
    const size_t nunits = Proto::units(nbytes), stride = Proto::area_stride(a.layout);
    const char *from_at = inbox_of(0);
    const size_t at1 = Proto::area(a.layout, parity, 1, a.rank);
    const char *src = own >= 0 ? a.send + own : nullptr;
    char *dst = out >= 0 && a.recv ? a.recv + out : nullptr;
    for (Units<Proto> it(p, wk); it.more(nunits); it.next()) {
      const size_t u = it.unit();
      const bool valid = u < nunits;
      typename Proto::Inbox box;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (!Proto::kTwoPhase || src) {
        // My own part is read before the wait, so its load overlaps the peers' units arriving.
        const uint4 mine = p.read(src, p.data_off(u), valid ? nbytes : 0);
        bool ok = true;
        v = from ? p.recv_reduce(a, from_at + p.area_off(u), stride, valid ? from : 0u, mine, combine, box, ok) : mine;
        if (!ok) return false;
      } else if (!p.recv_each(a, from_at + p.area_off(u), stride, valid ? from : 0u, box,
                              [&](int, uint4 x) { v = x; })) {  // one source and nothing of mine (Bcast)
        return false;
      }
      if (!valid) continue;
      if (dst && (from || dst != src)) p.write(dst, p.data_off(u), nbytes, v);  // (not my own unit onto itself)
      for (int j = 0; j < n; ++j)
        if ((to >> j) & 1u) p.store(a.ws[j] + at1 + p.area_off(u), v);
    }
    return true;
  }

  // A Reduce's non-roots receive too, writing nothing (no output): with a message this short that some
  // shards are empty, phase 1 may be all a rank hears from its peers, and the areas' reuse needs every
  // rank to hear from them.
  template <typename PieceOf>
  __device__ __forceinline__ bool gather(const Crew &wk, int, uint32_t from, const PieceOf &piece) const {
    const int n = a.nranks;
    const size_t stride = Proto::area_stride(a.layout);
    const char *from_at = inbox_of(1);
    // The largest and smallest piece: where they are equal (every form but the two-shot and scatter
    // ones' short last shards), a unit comes from every source in `from` with no loop over the ranks.
    size_t nunits = 0, least = ~(size_t)0;
    for (int k = 0; k < n; ++k)
      if ((from >> k) & 1u) {
        const size_t u = Proto::units(piece(k).n);
        nunits = u > nunits ? u : nunits;
        least = u < least ? u : least;
      }
    for (Units<Proto> it(p, wk); it.more(nunits); it.next()) {
      const size_t u = it.unit();
      uint32_t want = u < least ? from : 0u;
      if (u >= least)
        for (int k = 0; k < n; ++k)
          if (((from >> k) & 1u) && u < Proto::units(piece(k).n)) want |= 1u << k;
      typename Proto::Inbox box;
      if (!p.recv_each(a, from_at + p.area_off(u), stride, want, box, [&](int k, uint4 v) {
            if (!a.recv) return;
            // k laundered: the piece is worked out here, per unit; hoisted out of the loop for every
            // rank the call could have, it held 29 registers (docs/kernel-registers.md)
            asm volatile("" : "+r"(k));
            const Piece q = piece(k);
            p.write(a.recv + q.out, p.data_off(u), q.n, v);
          }))
        return false;
    }
    return true;
  }
};

// One call's units, by every thread of blocks 0 .. nblocks - 1 (LineCall). The caller has begun
// sequence number seq and passed ll_reuse_guard; it publishes seq after. Returns false, for the whole
// worker, when a wait stopped: it then stores nothing more.
template <typename Proto, typename Reduce>
__device__ __forceinline__ bool line_exchange(const LineArgs &a, uint32_t seq, const Reduce &reduce, uint32_t block,
                                              uint32_t nblocks) {
  if (direct_is_bcast(a.mode)) ll_announce_start(a.ws, a.rank, a.nranks, seq);
  const LineCall<Proto, Reduce> call(a, seq, reduce, block, nblocks);
  return direct_run(call, a.form, 0, Proto::kTwoPhase && a.split_phase0 != 0);  // (LL: two-shot never)
}

// The launched kernel of a protocol: every block of the grid runs the call.
template <typename Proto, typename T, typename Op>
__global__ void __launch_bounds__(kThreads, 1) line_kernel(const __grid_constant__ LineArgs a) {
  TeamState *state = team_state(a.ws[a.rank]);
  const uint32_t seq = ll_sequence_begin(state);
  bool dead = ll_reuse_guard(state, a, seq, call_enter(state, blockIdx.x == 0));
  if (Proto::kWorkerThreads > 1) dead = __any_sync(0xffffffffu, dead);  // a worker stops as a whole
  if (!dead) dead = !line_exchange<Proto>(a, seq, StaticReduce<T, Op>{}, blockIdx.x, gridDim.x);
  ll_sequence_publish(state, a.watch, seq, gridDim.x, dead, direct_is_bcast(a.mode));
}

}  // namespace mg
