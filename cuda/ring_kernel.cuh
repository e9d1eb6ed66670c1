// ring_kernel.cuh: the ring and chain forms of the collectives (an "algorithm" beside direct_kernel.cuh).
//
// Each rank stores only into next = me + 1 and reads only what prev = me - 1 stored into its own
// workspace, over the connections of protocol.cuh (FIFO slots, data and ack counters, one fenced
// step per chunk; both lanes, see ring_kernel). The forms need a link only between ring neighbours
// and move the same bytes per rank as the best direct forms; on a full NVLink mesh the direct kernel
// reaches its peers in fewer hops, so the cost model chooses only the chains of Reduce and of the
// 2-rank Bcast (select.cu), and MPIGPU_ALGO=ring asks for the rest. Forms, per piece (one step's chunk of every shard of a channel):
//   Allreduce: reduce-scatter around the ring (the partial of shard me - k - 1 moves one hop per
//     step, its owner adds its own part last), then all-gather (each reduced shard moves n - 1 hops):
//     2 (n - 1) steps, 2 (n - 1) / n bytes per rank.
//   Reduce_scatter_block: the reduce-scatter half; Allgather: the all-gather half.
//   Bcast: a pipelined chain root -> root + 1 -> ... -> root - 1, each rank writing and forwarding.
//   Reduce: a pipelined chain root + 1 -> ... -> root - 1 -> root, each rank adding its part.
// Every shard is reduced once, by one chain of ranks in a fixed order, and copied to the others, so
// results are bitwise identical on all ranks and from run to run. Partials of 16-bit floats travel as
// fp32 (PartOf), so the ring too rounds once, at the end of the chain.
//
// A step numbers its sends on me -> next and its receives on prev -> me from the channel's base, and
// every rank makes the same number of both per call (a chain's ends simply skip theirs), so the
// counters stay in step with the direct kernel's across calls (protocol.cuh).
#pragma once
#include <type_traits>
#include "dtypes.cuh"
#include "protocol.cuh"

namespace mg {

enum RingMode { kRingAllreduce = 0, kRingReduceScatter = 1, kRingAllgather = 2, kRingBcast = 3, kRingReduce = 4 };

// The type a partial result travels in: fp32 for the 16-bit floats, the element type otherwise.
template <typename T> struct PartOf { using type = T; };
template <> struct PartOf<__half> { using type = float; };
template <> struct PartOf<__nv_bfloat16> { using type = float; };

struct RingArgs {
  char *ws[MG_MAX_RANKS];
  const char *send;
  char *recv;
  Layout layout;
  int rank, nranks, nchannels, mode, root;
  size_t shard_len;              // max elements per shard (Allreduce: 1/n of the vector; RS, AG: a block)
  size_t len_total, len_stride;  // shard j holds clamp(len_total - j * len_stride, 0, shard_len) elements
  size_t in_stride, out_stride;  // shard j starts at j * in_stride in the input, j * out_stride in the output
  size_t span;                   // elements per channel of a shard (a multiple of the vector width)
  size_t chunk;                  // elements per step (a multiple of the vector width; fits a slot as a partial)
  int nsteps;                    // pieces per channel
  Watch watch;
};

// Loads / stores of one vector group (16 bytes of T, V elements) in another element type Q
// (16 or 32 bytes: a group of 16-bit floats as fp32 partials).
template <typename Q, int V> struct Group16 {
  static constexpr int kWords = (int)(V * sizeof(Q) / 16);
  uint4 w[kWords];
  __device__ __forceinline__ void load_volatile(const Q *p) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = ld_volatile_v4(reinterpret_cast<const char *>(p) + 16 * i);
  }
  __device__ __forceinline__ void load(const Q *p) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = reinterpret_cast<const uint4 *>(p)[i];
  }
  __device__ __forceinline__ void store(Q *p) const {
#pragma unroll
    for (int i = 0; i < kWords; ++i) reinterpret_cast<uint4 *>(p)[i] = w[i];
  }
  __device__ __forceinline__ Q get(int v) const { Q q; memcpy(&q, reinterpret_cast<const char *>(w) + v * sizeof(Q), sizeof(Q)); return q; }
  __device__ __forceinline__ void set(int v, Q q) { memcpy(reinterpret_cast<char *>(w) + v * sizeof(Q), &q, sizeof(Q)); }
};

// One step's data movement: acc = part[i] op own[i] (either source may be absent; the received
// partial comes first), written to out (T) and to next (POut, a slot). The whole group takes part.
// 16-byte groups when the user's pointers are aligned (slots always are), elements otherwise.
template <typename T, typename Op, typename PIn, typename POut>
__device__ __forceinline__ void ring_combine(const Group &grp, const PIn *part, const T *own, T *out, POut *next,
                                             size_t n) {
  using A = typename AccOf<T>::type;
  constexpr int V = 16 / sizeof(T), U = 4;
  const size_t tid = (size_t)grp.tid, stride = (size_t)grp.nthreads;
  const size_t ngroups = (((uintptr_t)own | (uintptr_t)out) & 15) == 0 ? n / V : 0;
  size_t g = tid;
  for (; g < ngroups; g += U * stride) {
    Group16<PIn, V> p[U];
    Group16<T, V> o[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t gu = g + u * stride;
      if (gu < ngroups) {
        if (part) p[u].load_volatile(part + gu * V);
        if (own) o[u].load(own + gu * V);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t gu = g + u * stride;
      if (gu >= ngroups) break;
      Group16<T, V> r;
      Group16<POut, V> q;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        A acc = part ? to_acc<A, PIn>(p[u].get(v)) : to_acc<A, T>(o[u].get(v));
        if (part && own) acc = Op::f(acc, to_acc<A, T>(o[u].get(v)));
        if (out) r.set(v, from_acc<T, A>(acc));
        if (next) q.set(v, from_acc<POut, A>(acc));
      }
      if (out) r.store(out + gu * V);
      if (next) q.store(next + gu * V);
    }
  }
  for (size_t i = ngroups * V + tid; i < n; i += stride) {
    A acc = part ? to_acc<A, PIn>(ld_volatile(part + i)) : to_acc<A, T>(ld_elem(own + i));
    if (part && own) acc = Op::f(acc, to_acc<A, T>(ld_elem(own + i)));
    if (out) st_elem(out + i, from_acc<T, A>(acc));
    if (next) next[i] = from_acc<POut, A>(acc);
  }
}

// Where a ring step runs: a group of warps, the lane of its connections, and its ring neighbours;
// `dead` once a wait of the group stopped (the group's later steps then do nothing).
struct RingLane {
  Group g;
  int lane, ch, prev, next;
  bool dead;
};

// One step of a channel's lane: receive prev's step gr (when `recv`), combine it with this rank's
// input (when `own`), write it to the output (when `out`) and store it as step gs into next's slot
// (when `send`). The group's thread 0 polls and posts the data counters, its thread 32 the acks, so
// the two remote stores of a step's end go out at once. A wait that stopped makes the group dead.
template <typename T, typename Op, typename PIn, typename POut>
__device__ __forceinline__ void ring_step(const RingArgs &a, RingLane &l, bool recv, uint64_t gr,
                                          const T *own, T *out, bool send, uint64_t gs, size_t n) {
  if (l.dead) return;
  const int tid = l.g.tid, me = a.rank, D = a.layout.nslots;
  char *mine = a.ws[me];
  l.dead = !simple_step(
      l.g,
      [&] {
        if (recv && tid == 0)
          return wait_at_least((const uint64_t *)(mine + Layout::data_off(l.lane, l.ch, l.prev)), gr + 1, a);
        return !(send && tid == 32 && gs + 1 > (uint64_t)D) ||
               wait_at_least((const uint64_t *)(mine + Layout::ack_off(l.lane, l.ch, l.next)), gs + 1 - D, a);
      },
      [&] {
        const PIn *part =
            recv ? reinterpret_cast<const PIn *>(mine + a.layout.slot_off(l.lane, l.ch, l.prev, gr)) : nullptr;
        POut *dst = send ? reinterpret_cast<POut *>(a.ws[l.next] + a.layout.slot_off(l.lane, l.ch, me, gs)) : nullptr;
        if (n) ring_combine<T, Op, PIn, POut>(l.g, part, own, out, dst, n);
      },
      [&] {
        if (send && tid == 0) st_release_sys((uint64_t *)(a.ws[l.next] + Layout::data_off(l.lane, l.ch, me)), gs + 1);
        if (recv && tid == 32) st_release_sys((uint64_t *)(a.ws[l.prev] + Layout::ack_off(l.lane, l.ch, me)), gr + 1);
      });
}

// Steps per piece on each connection, the same on every rank.
__host__ __device__ inline int ring_steps_per_piece(int mode, int n) {
  return mode == kRingAllreduce ? 2 * (n - 1) : mode == kRingBcast || mode == kRingReduce ? 1 : n - 1;
}

// The ring's primitives on one lane, named as NCCL names its own: each is one ring_step with its
// receive and send fixed or given, numbering the lane's sends (gs) and receives (gr) as it goes, so the
// forms below are written over them and never over counters or slots. A flag that varies by rank
// (a chain's ends, the all-gather's last hop) stays a run-time argument: one inlined step where two
// fixed ones cost registers.
template <typename T, typename Op>
struct RingPrims {
  using P = typename PartOf<T>::type;  // what a partial travels as
  const RingArgs &a;
  RingLane &l;
  uint64_t gs, gr;  // the lane's next send and receive step
  // own -> next as a partial; with recv, prev's partial op own (a reduce-scatter's or chain's hop)
  __device__ __forceinline__ void reduce_send(bool recv, const T *own, size_t n) {
    ring_step<T, Op, P, P>(a, l, recv, gr, own, nullptr, true, gs++, n);
    gr += recv;
  }
  // prev's partial op own -> out, and on to next (as T) where fwd (a reduced shard's last hop)
  __device__ __forceinline__ void recv_reduce_copy_send(const T *own, T *out, bool fwd, size_t n) {
    ring_step<T, Op, P, T>(a, l, true, gr++, own, out, fwd, gs, n);
    gs += fwd;
  }
  // own -> next, and -> out unless out is null (an all-gather's own block)
  __device__ __forceinline__ void copy_send(const T *own, T *out, size_t n) {
    ring_step<T, OpCopy, T, T>(a, l, false, gr, own, out, true, gs++, n);
  }
  // with recv, prev's block -> out; else own -> out; on to next where fwd (a gather's or chain's hop)
  __device__ __forceinline__ void copy(bool recv, const T *own, T *out, bool fwd, size_t n) {
    ring_step<T, OpCopy, T, T>(a, l, recv, gr, own, out, fwd, gs, n);
    gr += recv;
    gs += fwd;
  }
};

// Pieces of one lane, in order: t = first, first + 2, ... (the other lane takes the others), from the
// lane's next send and receive step gs, gr.
template <typename T, typename Op>
__device__ __forceinline__ void ring_lane_pieces(const RingArgs &a, RingLane &l, int first, uint64_t gs,
                                                 uint64_t gr) {
  const int me = a.rank, n = a.nranks, ch = l.ch;
  const T *in = reinterpret_cast<const T *>(a.send);
  T *out = reinterpret_cast<T *>(a.recv);
  const int pos = (me - a.root + n) % n;  // place in a chain (Bcast from the root, Reduce to it)
  RingPrims<T, Op> prims{a, l, gs, gr};
  for (int t = first; t < a.nsteps && !l.dead; t += 2) {
    if constexpr (!std::is_same<Op, OpCopy>::value) {
      if (a.mode == kRingAllreduce || a.mode == kRingReduceScatter) {
        const bool ar = a.mode == kRingAllreduce;
        // Reduce-scatter: step k sends the partial of shard me - k - 1; step n - 1 receives the
        // partial of my own shard, adds my part and writes it (Allreduce: and sends it on, the first
        // step of the all-gather, so it travels as T).
        const Piece first_piece = piece_at(a, (me + n - 1) % n, ch, t);
        prims.reduce_send(false, in + first_piece.in, first_piece.n);
        for (int k = 1; k < n - 1; ++k) {
          const Piece p = piece_at(a, (me - k - 1 + 2 * n) % n, ch, t);
          prims.reduce_send(true, in + p.in, p.n);
        }
        const Piece p = piece_at(a, me, ch, t);
        prims.recv_reduce_copy_send(in + p.in, out + p.out, ar, p.n);
        if (ar) {
          // All-gather: shard me - k arrives (reduced by its owner) and goes on while k < n - 1.
          for (int k = 1; k < n; ++k) {
            const Piece q = piece_at(a, (me - k + n) % n, ch, t);
            prims.copy(true, nullptr, out + q.out, k < n - 1, q.n);
          }
        }
      } else {  // kRingReduce: root + 1 starts the chain, the root ends it
        const Piece p = piece_at(a, 0, ch, t);
        if (pos == 0) prims.recv_reduce_copy_send(in + p.in, out + p.out, false, p.n);
        else prims.reduce_send(pos > 1, in + p.in, p.n);
      }
    } else {
      if (a.mode == kRingAllgather) {
        // My block goes out first (and into my output unless it is there already, in place), then
        // block me - k arrives and goes on while k < n - 1.
        const Piece p = piece_at(a, me, ch, t);
        prims.copy_send(in + p.in, out + p.out == in + p.in ? nullptr : out + p.out, p.n);
        for (int k = 1; k < n; ++k) {
          const Piece q = piece_at(a, (me - k + n) % n, ch, t);
          prims.copy(true, nullptr, out + q.out, k < n - 1, q.n);
        }
      } else {  // kRingBcast: the root starts the chain, root - 1 ends it
        const Piece p = piece_at(a, 0, ch, t);
        const bool recv = pos > 0;
        prims.copy(recv, recv ? nullptr : in + p.in, recv ? out + p.out : nullptr, pos < n - 1, p.n);
      }
    }
  }
}

// Pieces of lane `lane` among a channel's nsteps (even t on lane 0, odd t on lane 1).
__host__ __device__ inline int ring_lane_pieces_count(int nsteps, int lane) { return (nsteps + 1 - lane) / 2; }

// A channel is two independent rings: warps 0-3 move the even pieces over lane 0, warps 4-7 the odd
// ones over lane 1, each with its own counters and named barrier. A ring step waits for the previous
// rank's step, so one ring per channel leaves the link idle during every flag round trip; two keep
// a second step in flight (the probe's busbw grew with the channel count up to the last, 128).
template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads, 1) ring_kernel(const __grid_constant__ RingArgs a) {
  const int ch = blockIdx.x, me = a.rank, n = a.nranks, tid = threadIdx.x;
  const int lane = tid / (kThreads / kLanes);
  TeamState *state = team_state(a.ws[me]);
  const uint64_t base[kLanes] = {state->base[0][ch], state->base[1][ch]};
  RingLane l{Group{tid % (kThreads / kLanes), kThreads / kLanes, 1 + lane}, lane, ch, (me + n - 1) % n,
             (me + 1) % n, __syncthreads_or(call_enter(state, ch == 0)) != 0};
  ring_lane_pieces<T, Op>(a, l, lane, base[lane], base[lane]);

  // Release the lanes used and move their bases past this call (end_lane); a faulted call releases
  // nothing (no peer may take its slots as free) and tells the host.
  if (__syncthreads_or(l.dead)) {
    if (tid == 0) record_fault(state, a.watch);
    return;
  }
#pragma unroll
  for (int k = 0; k < kLanes; ++k) {
    const int pieces = ring_lane_pieces_count(a.nsteps, k);
    if (pieces > 0) end_lane(a.ws, state, k, ch, me, n, base[k] + (uint64_t)pieces * ring_steps_per_piece(a.mode, n));
  }
}

}  // namespace mg
