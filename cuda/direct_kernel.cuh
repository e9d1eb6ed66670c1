// direct_kernel.cuh: the direct algorithm (the "algorithm" layer), written once over a protocol's
// primitives: Simple (simple_proto.cuh: FIFO slots and counters, pipelined in steps), LL and LL128
// (line_kernel.cuh: flags in the data, one step), as NCCL writes an algorithm once over its protocols.
//
// A call is a form (direct_form.cuh: rank sets and shard geometry). Per step t of channel ch (a block,
// or for the line protocols every block of the call at once), a rank:
//   1. contributes: pushes its input's piece for every other owner into that owner's lane-0 area;
//   2. as an owner, reduces the contributions in rank order, writes its own output and pushes the result
//      into every other gatherer's lane-1 area;
//   3. as a gatherer, copies every other owner's result from its lane-1 areas into its output.
// What a protocol P provides (each false, in every thread of the crew, where a wait stopped: nothing
// more is stored or published then):
//   P::Crew: the threads that run a stage together (Simple: a Group of a block's warps; LL and LL128:
//     workers across the call's blocks), crew(lo, count, barrier) a share of warps lo .. lo + count - 1;
//   rank(), warps(): this rank, the warps of a block;
//   scatter(crew, t, to, same, piece): the input's piece(j) (piece(j).n units from piece(j).in) to each
//     owner j in `to`, in the order me + 1, me + 2, ... (same: every j's piece is the same units);
//   reduce(crew, t, from, own, out, to, n): the input's n units from `own` (-1: none) and each rank in
//     `from`'s, combined in rank order, into the output at `out` (-1, or a call with no output: nowhere)
//     and to each gatherer in `to`;
//   gather(crew, t, from, piece): each rank k in `from`'s result into the output at piece(k).out.
// Peers advance independently, so the stages of successive steps overlap across ranks (pipelining),
// and all traffic between GPUs is stores (NVLink writes outrun reads).
#pragma once
#include "direct_form.cuh"
#include "simple_proto.cuh"

namespace mg {

// Owner j's piece of step t of channel ch: its whole shard in a protocol whose calls are one step.
template <typename P> __device__ __forceinline__ Piece piece_in(const DirectForm &f, int j, int ch, int t) {
  if constexpr (P::kOneStep) return shard_of(f, j);
  else return piece_of(f, j, ch, t);
}

template <typename P>
__device__ __forceinline__ bool stage_contribute(const P &p, const typename P::Crew &c, const DirectForm &f, int ch,
                                                 int t) {
  const int me = p.rank();
  return p.scatter(c, t, f.owners & ~(1u << me), f.in_stride == 0, [&](int j) { return piece_in<P>(f, j, ch, t); });
}

template <typename P>
__device__ __forceinline__ bool stage_reduce(const P &p, const typename P::Crew &c, const DirectForm &f, int ch,
                                             int t) {
  const int me = p.rank();
  const uint32_t bit = 1u << me;
  const Piece mine = piece_in<P>(f, me, ch, t);
  const bool own = f.self_source || (f.contrib & bit);
  const bool out = (f.gather & bit) || f.gather == 0;
  return p.reduce(c, t, f.self_source ? 0u : f.contrib & ~bit, own ? (long long)mine.in : -1,
                  out ? (long long)mine.out : -1, f.gather & ~bit, mine.n);
}

template <typename P>
__device__ __forceinline__ bool stage_receive(const P &p, const typename P::Crew &c, const DirectForm &f, int ch,
                                              int t) {
  const int me = p.rank();
  return p.gather(c, t, f.owners & ~(1u << me), [&](int j) { return piece_in<P>(f, j, ch, t); });
}

// Two ways to run a channel's steps:
// - skewed: all of the crew runs every stage in turn; iteration s contributes step s, reduces step s-1
//   and receives step s-2, so each wait is for data a peer produced one iteration earlier (Simple
//   needs nslots >= 2, checked at team creation). With one step it is the plain order.
// - split: the crew's warps are divided among the stages this rank runs, each share looping over all
//   steps on its own (Simple: its named barrier). The stages of one rank depend on each other only
//   through peers' counters or flags, so they overlap: NVLink stores of one stage run while another
//   reduces or copies out. A protocol whose calls are one step (P::kOneStep: the line protocols'
//   two-shot) runs the receive stage after, on the whole crew: contributing and reducing overlap, and
//   the results arrive last.
//   The caller splits only where it is safe: in place, a rank's reduce stage could overwrite input
//   its own contribute stage has not pushed yet (one-shot Allreduce and Reduce, in-place
//   Reduce_scatter_block write where they read); two-shot forms write their own shard, which
//   contribute never reads, and receive other shards only after their owners got this rank's part.
// Returns false where a stage's wait stopped (the other shares stop at their next wait's check).
template <typename P>
__device__ __forceinline__ bool direct_run(const P &p, const DirectForm &f, int ch, bool split) {
  const int me = p.rank(), T = f.nsteps;
  const uint32_t bit = 1u << me;
  const bool i_contrib = !f.self_source && (f.contrib & bit);
  const bool i_own = f.owners & bit, i_gather = f.gather & bit;
  const typename P::Crew all = p.crew(0, p.warps(), 0);
  // Warps per stage where split: an equal share, the remainder first to reduce (it loads every source
  // and stores to every gatherer), then to contribute. Worked out only where split: a one-step call's
  // latency is its instructions before the first store.
  const int w = (int)(threadIdx.x / 32);
  int n_reduce = 0, n_contrib = 0, n_receive = 0;
  if (split) {
    const bool receive_along = i_gather && !P::kOneStep;
    const int nroles = (int)i_contrib + (int)i_own + (int)receive_along, W = p.warps();
    const int share = nroles ? W / nroles : W, extra = nroles ? W % nroles : 0;
    n_reduce = i_own ? share + (extra > 0) : 0;
    n_contrib = i_contrib ? share + (extra > (i_own ? 1 : 0)) : 0;
    n_receive = receive_along ? W - n_reduce - n_contrib : 0;
  }
  bool dead = false;
  if constexpr (P::kOneStep) {
    // One instance of each stage, its crew the whole or a share: a stage inlined twice (plain and
    // split) took LL128 25 more registers.
    const bool run_reduce = i_own && (!split || w < n_reduce);
    const bool run_contrib = i_contrib && (!split || (w >= n_reduce && w < n_reduce + n_contrib));
    const typename P::Crew c_reduce = split ? p.crew(0, n_reduce, 1) : all;
    const typename P::Crew c_contrib = split ? p.crew(n_reduce, n_contrib, 2) : all;
    if (run_contrib) dead = !stage_contribute(p, c_contrib, f, ch, 0);
    if (!dead && run_reduce) dead = !stage_reduce(p, c_reduce, f, ch, 0);
    if (!dead && i_gather) dead = !stage_receive(p, all, f, ch, 0);
  } else if (!split) {  // pipelined over steps: skewed
    for (int s = 0; s < T + 2 && !dead; ++s) {
      if (i_contrib && s < T) dead = !stage_contribute(p, all, f, ch, s);
      if (!dead && i_own && s >= 1 && s - 1 < T) dead = !stage_reduce(p, all, f, ch, s - 1);
      if (!dead && i_gather && s >= 2 && s - 2 < T) dead = !stage_receive(p, all, f, ch, s - 2);
    }
  } else {  // pipelined over steps: split
    if (w < n_reduce) {
      const typename P::Crew c = p.crew(0, n_reduce, 1);
      for (int t = 0; t < T && !dead; ++t) dead = !stage_reduce(p, c, f, ch, t);
    } else if (w < n_reduce + n_contrib) {
      const typename P::Crew c = p.crew(n_reduce, n_contrib, 2);
      for (int t = 0; t < T && !dead; ++t) dead = !stage_contribute(p, c, f, ch, t);
    } else if (w < n_reduce + n_contrib + n_receive) {
      const typename P::Crew c = p.crew(n_reduce + n_contrib, n_receive, 3);
      for (int t = 0; t < T && !dead; ++t) dead = !stage_receive(p, c, f, ch, t);
    }
  }
  return !dead;
}

// The Simple protocol's kernel: block ch runs channel ch of the call (collectives.cu plans it).
// This call's first step numbers (protocol.cuh): only this block reads and writes its channel's. A
// step of f slots takes f consecutive step numbers, and its slots must not wrap around the FIFO, so
// such a call (one step: plan) starts at the next multiple of nslots where they would. Every rank
// moves its bases identically, and skipped numbers are free: waits are for >=.
template <typename T_, typename Op>
__global__ void __launch_bounds__(kThreads, 1) direct_kernel(const __grid_constant__ DirectArgs a) {
  const int ch = blockIdx.x, me = a.rank, tid = threadIdx.x;
  const DirectForm &f = a.form;
  const uint32_t bit = 1u << me;
  TeamState *state = team_state(a.ws[me]);
  const SimpleCall<T_, Op> p(a, state, ch);
  const int nroles = (int)(!f.self_source && (f.contrib & bit)) + (int)((f.owners & bit) != 0) +
                     (int)((f.gather & bit) != 0);
  const bool split = a.split_steps > 0 && f.nsteps >= a.split_steps && nroles > 1 &&
                     !(a.inplace_hazard && !f.self_source && (f.contrib & bit) && (f.owners & bit));
  bool dead = __syncthreads_or(call_enter(state, ch == 0));
  if (!dead) dead = !direct_run(p, f, ch, split);

  // Release the lanes this call used and move their bases past it (end_lane); a faulted call
  // releases nothing (no peer may take its slots as free) and tells the host.
  if (__syncthreads_or(dead)) {
    if (tid == 0) record_fault(state, a.watch);
    return;
  }
  p.end();
}

}  // namespace mg
