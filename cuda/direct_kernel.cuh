// direct_kernel.cuh: the one fused kernel behind every intra-node collective (the "algorithm" layer).
//
// A call is described by three rank sets and a shard geometry (see collectives.cu for each collective):
//   contrib: ranks whose input goes into each shard (all ranks for reductions, the root for Bcast,
//            each owner alone for Allgather: `self_source`);
//   owners:  ranks that each produce one shard of the result;
//   gather:  ranks that receive every owner's shard (phase 2), e.g. everyone for a two-shot Allreduce.
// Owner j's shard starts at in_off(j) in a contributor's input and at out_off(j) in the output; it has
// len(j) elements. A shard is split into `nchannels` contiguous spans, one per thread block (channel),
// and each span is moved in steps of at most `chunk` elements through the FIFO slots of protocol.cuh
// (a step fills one slot, or, in a call of one step per channel, up to nslots / 2 consecutive slots).
// Per step, a channel:
//   1. pushes its contribution to every other owner (lane 0);
//   2. as an owner, reduces the contributions in rank order, writes its own output and pushes the result
//      to every other gatherer (lane 1);
//   3. as a gatherer, copies every other owner's result from its slots into its output.
// Peers advance independently up to `nslots` steps ahead, so the stages of successive steps overlap
// across ranks (pipelining), and all traffic between GPUs is stores (NVLink writes outrun reads).
#pragma once
#include "dtypes.cuh"
#include "protocol.cuh"

namespace mg {

struct DirectArgs {
  char *ws[MG_MAX_RANKS];      // every rank's workspace base as mapped in this process
  const char *send;            // this rank's input
  char *recv;                  // this rank's output
  Layout layout;
  int rank, nranks, nchannels;
  uint32_t contrib, owners, gather;
  int self_source;             // owners reduce their own input only (Allgather): no lane-0 traffic
  int elem_size;
  size_t shard_len;            // max elements per shard
  size_t len_total, len_stride;  // len(j) = clamp(len_total - idx(j) * len_stride, 0, shard_len)
  size_t in_stride, out_stride;  // piece j starts at idx(j) * in_stride in the input, idx(j) * out_stride in the output
  size_t span;                 // elements per channel of a shard (multiple of the vector width)
  size_t chunk;                // elements per step (multiple of the vector width)
  int nsteps;
  int slots_per_step;          // consecutive FIFO slots one step fills: 1, or up to nslots / 2 when nsteps == 1
  int split_steps;             // from this many steps per channel, the stages run on separate warps
  int inplace_hazard;          // output overlaps what the contribute stage still reads (see below)
  Watch watch;
};

// The first step number of a call whose steps fill f slots each, from the lane's base b: b itself
// unless the f slots from b would wrap past the FIFO's end (only f > 1), then the next multiple of D.
// A step g waits for the ack of g + f - D (the slots' previous turn). After a jump that is at most b,
// which the previous call's end_lane acked, only while f <= D / 2 (b % D > D - f >= f); a larger f
// would wait for numbers that were skipped, not sent, so plan() never asks for more.
__device__ __forceinline__ uint64_t fused_step_base(uint64_t b, int f, int D) {
  return b % (uint64_t)D + (uint64_t)f <= (uint64_t)D ? b : (b / (uint64_t)D + 1) * (uint64_t)D;
}

__device__ __forceinline__ int owner_index(uint32_t owners, int j) { return __popc(owners & ((1u << j) - 1u)); }

// Where owner j's piece for (channel, step) lies, in elements.
__device__ __forceinline__ Piece piece_of(const DirectArgs &a, int j, int ch, int t) {
  return piece_at(a, (size_t)owner_index(a.owners, j), ch, t);
}

// The three stages of one step, as device functions so the kernel can skew them (see below). Each
// returns false, in every thread of the group, when a wait of the group stopped (the vote after the
// waits): the stage then stores and publishes nothing.
template <typename T>
__device__ __forceinline__ bool stage_contribute(const Group &g, const DirectArgs &a, int ch, int t, uint64_t g0) {
  const int me = a.rank, n = a.nranks, tid = g.tid, D = a.layout.nslots, f = a.slots_per_step;
  const char *mine = a.ws[me];
  const bool peer = tid < n && tid != me && ((a.owners >> tid) & 1u);  // thread tid: owner tid's counters
  return simple_step(
      g,
      [&] {
        return !(peer && g0 + f > (uint64_t)D) ||
               wait_at_least((const uint64_t *)(mine + Layout::ack_off(0, ch, tid)), g0 + f - D, a);
      },
      [&] {
        // Owners in the order me+1, me+2, ...: with every rank starting at the same owner, that owner's
        // inbound links would carry all the traffic while the others idle; rotated, each rank's pushes
        // go to a different peer at any moment.
        for (int i = 1; i < n; ++i) {
          const int j = (me + i) % n;
          if (!((a.owners >> j) & 1u)) continue;
          Piece p = piece_of(a, j, ch, t);
          const char *s = a.send + p.in * sizeof(T);
          char *d = a.ws[j] + a.layout.slot_off(0, ch, me, g0);
          reduce_copy<T, OpCopy, 1, 1, 8>(g, &s, 1, &d, 1, p.n);
        }
      },
      [&] {
        if (peer) st_release_sys((uint64_t *)(a.ws[tid] + Layout::data_off(0, ch, me)), g0 + f);
      });
}

template <typename T, typename Op>
__device__ __forceinline__ bool stage_reduce(const Group &g, const DirectArgs &a, int ch, int t, uint64_t g0,
                                             uint64_t g1) {
  const int me = a.rank, n = a.nranks, tid = g.tid, D = a.layout.nslots, f = a.slots_per_step;
  char *mine = a.ws[me];
  const bool i_gather = (a.gather >> me) & 1u;
  // thread tid: peer tid's counters, as a contributor (lane 0's data) and as a gatherer (lane 1's acks)
  const bool from = tid < n && tid != me && !a.self_source && ((a.contrib >> tid) & 1u);
  const bool to = tid < n && tid != me && ((a.gather >> tid) & 1u);
  return simple_step(
      g,
      [&] {
        if (from && !wait_at_least((const uint64_t *)(mine + Layout::data_off(0, ch, tid)), g0 + f, a)) return false;
        return !(to && g1 + f > (uint64_t)D) ||
               wait_at_least((const uint64_t *)(mine + Layout::ack_off(1, ch, tid)), g1 + f - D, a);
      },
      [&] {
        Piece p = piece_of(a, me, ch, t);
        const char *srcs[MG_MAX_RANKS];
        char *dsts[MG_MAX_RANKS];
        int ns = 0, nd = 0;
        if (a.self_source) {
          srcs[ns++] = a.send + p.in * sizeof(T);
        } else {
          for (int k = 0; k < n; ++k) {
            if (!((a.contrib >> k) & 1u)) continue;
            srcs[ns++] = k == me ? a.send + p.in * sizeof(T) : mine + a.layout.slot_off(0, ch, k, g0);
          }
        }
        if (i_gather || a.gather == 0) dsts[nd++] = a.recv + p.out * sizeof(T);
        for (int k = 0; k < n; ++k)
          if (k != me && ((a.gather >> k) & 1u)) dsts[nd++] = a.ws[k] + a.layout.slot_off(1, ch, me, g1);
        // Skip a copy onto itself (in-place Allgather's own block).
        if (!(ns == 1 && nd == 1 && srcs[0] == dsts[0]))
          reduce_copy<T, Op, MG_MAX_RANKS, MG_MAX_RANKS, 2>(g, srcs, ns, dsts, nd, p.n);
      },
      [&] {
        if (to) st_release_sys((uint64_t *)(a.ws[tid] + Layout::data_off(1, ch, me)), g1 + f);
        if (from) st_release_sys((uint64_t *)(a.ws[tid] + Layout::ack_off(0, ch, me)), g0 + f);
      });
}

template <typename T>
__device__ __forceinline__ bool stage_receive(const Group &g, const DirectArgs &a, int ch, int t, uint64_t g1) {
  const int me = a.rank, n = a.nranks, tid = g.tid, f = a.slots_per_step;
  const char *mine = a.ws[me];
  const bool peer = tid < n && tid != me && ((a.owners >> tid) & 1u);  // thread tid: owner tid's counters
  return simple_step(
      g, [&] { return !peer || wait_at_least((const uint64_t *)(mine + Layout::data_off(1, ch, tid)), g1 + f, a); },
      [&] {
        for (int j = 0; j < n; ++j) {
          if (j == me || !((a.owners >> j) & 1u)) continue;
          Piece p = piece_of(a, j, ch, t);
          const char *s = mine + a.layout.slot_off(1, ch, j, g1);
          char *d = a.recv + p.out * sizeof(T);
          reduce_copy<T, OpCopy, 1, 1, 8>(g, &s, 1, &d, 1, p.n);
        }
      },
      [&] {
        if (peer) st_release_sys((uint64_t *)(a.ws[tid] + Layout::ack_off(1, ch, me)), g1 + f);
      });
}

// Two ways to run a channel's steps:
// - skewed (few steps): all warps run every stage in turn; iteration s contributes step s, reduces
//   step s-1 and receives step s-2, so each wait is for data a peer produced one iteration earlier.
//   Needs nslots >= 2 (checked at team creation); with nsteps == 1 it is the plain order.
// - split (from a.split_steps steps): the block's warps are divided among the stages this rank runs,
//   each group looping over all steps on its own named barrier. The stages of one rank depend on
//   each other only through peers' counters, so they overlap: NVLink stores of one stage run while
//   another reduces or copies out, instead of the link idling during the local stages.
//   One hazard: in place, a rank's reduce stage could overwrite input its own contribute stage has
//   not pushed yet (one-shot Allreduce and Reduce, in-place Reduce_scatter_block write where they
//   read); those calls (a.inplace_hazard) stay skewed. Two-shot forms write their own shard, which
//   contribute never reads, and receive other shards only after their owners got this rank's part.
// A stage whose wait stopped ends its group's loop (the other groups stop at their next wait's check,
// protocol.cuh); a block with a stopped group records the fault and releases nothing.
template <typename T_, typename Op>
__global__ void __launch_bounds__(kThreads, 1) direct_kernel(const __grid_constant__ DirectArgs a) {
  const int ch = blockIdx.x, me = a.rank, n = a.nranks, tid = threadIdx.x;
  const bool i_contrib = !a.self_source && ((a.contrib >> me) & 1u);
  const bool i_own = (a.owners >> me) & 1u;
  const bool i_gather = (a.gather >> me) & 1u;
  const int T = a.nsteps;
  // This call's first step numbers (protocol.cuh): only this block reads and writes its channel's.
  // A step of f slots takes f consecutive step numbers, and its slots must not wrap around the
  // FIFO, so such a call (one step: plan) starts at the next multiple of nslots where they would.
  // Every rank moves its bases identically, and skipped numbers are free: waits are for >=.
  TeamState *state = team_state(a.ws[me]);
  const int f = a.slots_per_step, D = a.layout.nslots;
  const uint64_t b0 = fused_step_base(state->base[0][ch], f, D), b1 = fused_step_base(state->base[1][ch], f, D);
  const int nroles = (int)i_contrib + (int)i_own + (int)i_gather;
  const bool split = a.split_steps > 0 && T >= a.split_steps && nroles > 1 &&
                     !(a.inplace_hazard && i_contrib && i_own);
  bool dead = __syncthreads_or(call_enter(state, ch == 0));

  if (!dead && !split) {
    const Group all{tid, (int)blockDim.x, 0};
    for (int s = 0; s < T + 2 && !dead; ++s) {
      if (i_contrib && s < T) dead = !stage_contribute<T_>(all, a, ch, s, b0 + (uint64_t)f * s);
      if (!dead && i_own && s >= 1 && s - 1 < T)
        dead = !stage_reduce<T_, Op>(all, a, ch, s - 1, b0 + (uint64_t)f * (s - 1), b1 + (uint64_t)f * (s - 1));
      if (!dead && i_gather && s >= 2 && s - 2 < T)
        dead = !stage_receive<T_>(all, a, ch, s - 2, b1 + (uint64_t)f * (s - 2));
    }
  } else if (!dead) {
    // Warps per stage: an equal share, the remainder first to reduce (it loads every source and
    // stores to every gatherer), then to contribute.
    const int W = (int)blockDim.x / 32, w = tid / 32;
    const int share = W / nroles, extra = W % nroles;
    const int n_reduce = i_own ? share + (extra > 0) : 0;
    const int n_contrib = i_contrib ? share + (extra > (i_own ? 1 : 0)) : 0;
    const int n_receive = i_gather ? W - n_reduce - n_contrib : 0;
    if (w < n_reduce) {
      const Group g{tid, n_reduce * 32, 1};
      for (int t = 0; t < T && !dead; ++t)
        dead = !stage_reduce<T_, Op>(g, a, ch, t, b0 + (uint64_t)f * t, b1 + (uint64_t)f * t);
    } else if (w < n_reduce + n_contrib) {
      const Group g{tid - n_reduce * 32, n_contrib * 32, 2};
      for (int t = 0; t < T && !dead; ++t) dead = !stage_contribute<T_>(g, a, ch, t, b0 + (uint64_t)f * t);
    } else if (w < n_reduce + n_contrib + n_receive) {
      const Group g{tid - (n_reduce + n_contrib) * 32, n_receive * 32, 3};
      for (int t = 0; t < T && !dead; ++t) dead = !stage_receive<T_>(g, a, ch, t, b1 + (uint64_t)f * t);
    }
  }

  // Release the lanes this call used and move their bases past it (end_lane); a faulted call
  // releases nothing (no peer may take its slots as free) and tells the host.
  if (__syncthreads_or(dead)) {
    if (tid == 0) record_fault(state, a.watch);
    return;
  }
  if (!a.self_source) end_lane(a.ws, state, 0, ch, me, n, b0 + (uint64_t)f * T);
  if (a.gather) end_lane(a.ws, state, 1, ch, me, n, b1 + (uint64_t)f * T);
}

}  // namespace mg
