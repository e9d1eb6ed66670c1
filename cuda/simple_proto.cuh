// simple_proto.cuh: the Simple protocol's primitives for the direct algorithm (direct_kernel.cuh, which
// names what a protocol provides): each stage of a step waits for its counters, moves its data through
// the step's FIFO slots with the whole crew (reduce_copy) and publishes its counters (simple_step,
// protocol.cuh). Lane 0 carries contributions to owners, lane 1 owners' results to gatherers.
//
// Counters of step g on a connection src -> dst: data at dst (src wrote step g), ack at src (dst is done
// with every step up to g). A step of f slots waits for the ack of its slots' previous turn, g + f - D.
#pragma once
#include "direct_form.cuh"
#include "protocol.cuh"

namespace mg {

struct DirectArgs {
  char *ws[MG_MAX_RANKS];  // every rank's workspace base as mapped in this process
  const char *send;        // this rank's input
  char *recv;              // this rank's output
  Layout layout;
  int rank, nranks, nchannels;
  DirectForm form;         // in elements of elem_size
  int elem_size;
  int slots_per_step;      // consecutive FIFO slots one step fills: 1, or up to nslots / 2 when nsteps == 1
  int split_steps;         // from this many steps per channel, the stages run on separate warps
  int inplace_hazard;      // output overlaps what the contribute stage still reads (direct_kernel.cuh)
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

// One channel's call in the Simple protocol over elements of T, reduced with Op.
template <typename T, typename Op> struct SimpleCall {
  using Crew = Group;
  static constexpr bool kOneStep = false;  // pipelined over steps
  const DirectArgs &a;
  TeamState *state;
  int ch, f, D;
  uint64_t b0, b1;  // the lanes' first step numbers of this call

  __device__ __forceinline__ SimpleCall(const DirectArgs &args, TeamState *st, int channel)
      : a(args), state(st), ch(channel), f(args.slots_per_step), D(args.layout.nslots),
        b0(fused_step_base(st->base[0][channel], args.slots_per_step, args.layout.nslots)),
        b1(fused_step_base(st->base[1][channel], args.slots_per_step, args.layout.nslots)) {}

  __device__ __forceinline__ int rank() const { return a.rank; }
  __device__ __forceinline__ int warps() const { return (int)blockDim.x / 32; }
  __device__ __forceinline__ Crew crew(int lo, int count, int barrier) const {
    return Group{(int)threadIdx.x - lo * 32, count * 32, barrier};
  }
  __device__ __forceinline__ uint64_t step(int lane, int t) const { return (lane ? b1 : b0) + (uint64_t)f * t; }
  // Thread tid of the crew keeps peer tid's counters: whether it is in `set`.
  __device__ __forceinline__ bool mine(const Crew &c, uint32_t set) const {
    return c.tid < a.nranks && c.tid != a.rank && ((set >> c.tid) & 1u);
  }
  // The ack of the step's slots' previous turn, from peer tid (a sender of lane `lane`'s step g).
  __device__ __forceinline__ bool wait_slots(const Crew &c, int lane, uint64_t g) const {
    return g + f <= (uint64_t)D ||
           wait_at_least((const uint64_t *)(a.ws[a.rank] + Layout::ack_off(lane, ch, c.tid)), g + f - D, a);
  }
  __device__ __forceinline__ bool wait_data(const Crew &c, int lane, uint64_t g) const {
    return wait_at_least((const uint64_t *)(a.ws[a.rank] + Layout::data_off(lane, ch, c.tid)), g + f, a);
  }
  __device__ __forceinline__ void post_data(const Crew &c, int lane, uint64_t g) const {
    st_release_sys((uint64_t *)(a.ws[c.tid] + Layout::data_off(lane, ch, a.rank)), g + f);
  }
  __device__ __forceinline__ void post_ack(const Crew &c, int lane, uint64_t g) const {
    st_release_sys((uint64_t *)(a.ws[c.tid] + Layout::ack_off(lane, ch, a.rank)), g + f);
  }

  template <typename PieceOf>
  __device__ __forceinline__ bool scatter(const Crew &c, int t, uint32_t to, bool /*same*/, const PieceOf &piece) const {
    const int me = a.rank, n = a.nranks;
    const uint64_t g = step(0, t);
    const bool peer = mine(c, to);
    return simple_step(
        c, [&] { return !peer || wait_slots(c, 0, g); },
        [&] {
          // Owners in the order me+1, me+2, ...: with every rank starting at the same owner, that owner's
          // inbound links would carry all the traffic while the others idle; rotated, each rank's pushes
          // go to a different peer at any moment.
          for (int i = 1; i < n; ++i) {
            const int j = (me + i) % n;
            if (!((to >> j) & 1u)) continue;
            const Piece p = piece(j);
            const char *s = a.send + p.in * sizeof(T);
            char *d = a.ws[j] + a.layout.slot_off(0, ch, me, g);
            reduce_copy<T, OpCopy, 1, 1, 8>(c, &s, 1, &d, 1, p.n);
          }
        },
        [&] {
          if (peer) post_data(c, 0, g);
        });
  }

  __device__ __forceinline__ bool reduce(const Crew &c, int t, uint32_t from, long long own, long long out, uint32_t to,
                                         size_t n) const {
    const int me = a.rank, nr = a.nranks;
    const uint64_t g0 = step(0, t), g1 = step(1, t);
    const bool src = mine(c, from), dst = mine(c, to);
    char *mine_ws = a.ws[me];
    return simple_step(
        c,
        [&] {
          if (src && !wait_data(c, 0, g0)) return false;
          return !dst || wait_slots(c, 1, g1);
        },
        [&] {
          const char *srcs[MG_MAX_RANKS];
          char *dsts[MG_MAX_RANKS];
          int ns = 0, nd = 0;
          for (int k = 0; k < nr; ++k) {
            if (k == me && own >= 0) srcs[ns++] = a.send + (size_t)own * sizeof(T);
            else if ((from >> k) & 1u) srcs[ns++] = mine_ws + a.layout.slot_off(0, ch, k, g0);
          }
          if (out >= 0) dsts[nd++] = a.recv + (size_t)out * sizeof(T);
          for (int k = 0; k < nr; ++k)
            if ((to >> k) & 1u) dsts[nd++] = a.ws[k] + a.layout.slot_off(1, ch, me, g1);
          // Skip a copy onto itself (in-place Allgather's own block).
          if (!(ns == 1 && nd == 1 && srcs[0] == dsts[0]))
            reduce_copy<T, Op, MG_MAX_RANKS, MG_MAX_RANKS, 2>(c, srcs, ns, dsts, nd, n);
        },
        [&] {
          if (dst) post_data(c, 1, g1);
          if (src) post_ack(c, 0, g0);
        });
  }

  template <typename PieceOf>
  __device__ __forceinline__ bool gather(const Crew &c, int t, uint32_t from, const PieceOf &piece) const {
    const int n = a.nranks;
    const uint64_t g = step(1, t);
    const bool peer = mine(c, from);
    const char *mine_ws = a.ws[a.rank];
    return simple_step(
        c, [&] { return !peer || wait_data(c, 1, g); },
        [&] {
          for (int j = 0; j < n; ++j) {
            if (!((from >> j) & 1u)) continue;
            const Piece p = piece(j);
            const char *s = mine_ws + a.layout.slot_off(1, ch, j, g);
            char *d = a.recv + p.out * sizeof(T);
            reduce_copy<T, OpCopy, 1, 1, 8>(c, &s, 1, &d, 1, p.n);
          }
        },
        [&] {
          if (peer) post_ack(c, 1, g);
        });
  }

  // The call's end, by every thread of the block after a barrier: the lanes it used released up to its
  // last step and their bases moved there (end_lane).
  __device__ __forceinline__ void end() const {
    const DirectForm &fm = a.form;
    if (!fm.self_source) end_lane(a.ws, state, 0, ch, a.rank, a.nranks, step(0, fm.nsteps));
    if (fm.gather) end_lane(a.ws, state, 1, ch, a.rank, a.nranks, step(1, fm.nsteps));
  }
};

}  // namespace mg
