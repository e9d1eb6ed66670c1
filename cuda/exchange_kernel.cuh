// exchange_kernel.cuh: the all-to-all family over the team's exchange connections (the algorithm of
// Alltoall(v), Allgatherv, Gather(v) and Scatter(v): every one is "rank r sends bytes [off, off + len)
// of its input to rank p, which writes them at its own offset", with per-pair lengths that only the
// pair's two ends know).
//
// Protocol (protocol.cuh's, on connections of their own): a connection src -> dst is a FIFO of
// nslots slots in dst's workspace, or in src's where the call's slots lie at the sender (exchange_slot,
// Layout::xchg_off), with a data counter at dst and an ack counter at src. Its steps are numbered per connection and channel (TeamState::xsent at the sender,
// xrecvd at the receiver), and both ends count the same steps for a call because both derive them
// from the pair's byte count (exchange_geometry), which MPI requires to match.
//
// Each channel (block) splits its warps: four send, four receive, on named barriers of their own, so a
// rank always drains what its peers push while it pushes (a FIFO that fills waits for the receiver).
// Rounds pair them without a cycle: in round i every rank sends to rank me + k and receives from
// rank me - k (k: i, rotated by the channel, exchange_round_peer), the matching half of its peers'
// round i; the rank's own block is a local copy.
//
// Blocks of a derived datatype (a call's shapes, block_shape.cuh) are packed by the sending warps as
// they copy into the FIFO and unpacked by the receiving warps as they copy out (the shaped kernel):
// a strided block crosses the link once, as a contiguous one does.
#pragma once
#include "protocol.cuh"
#include "block_shape.cuh"
#include "ll_proto.cuh"

namespace mg {

struct ExchangeArgs {
  char *ws[MG_MAX_RANKS];
  const char *send;
  char *recv;
  Layout layout;
  int rank, nranks;
  size_t send_bytes[MG_MAX_RANKS], send_off[MG_MAX_RANKS];  // what goes to each rank, from send
  size_t recv_bytes[MG_MAX_RANKS], recv_off[MG_MAX_RANKS];  // what comes from each rank, into recv
  size_t channel_bytes;  // a pair's bytes per channel before it takes another (exchange_channels)
  size_t ll_bytes;       // pairs of at most this many bytes move in the LL format (exchange_ll)
  int drain;             // enum mg_exchange_drain: the receivers' order (exchange_any_order)
  bool pull;             // the call's FIFO slots at the sender, read across the link (exchange_slot)
  bool stagger;          // each channel starts its rounds at another peer (exchange_round_peer)
  Watch watch;
};

// The shapes of a call with derived datatypes (the shaped kernel's second argument): shape[send[p]]
// is the block to rank p (-1: plain bytes), shape[recv[p]] the one from it; unit[...] the width its
// copies step in (shape_unit; for a plain block, its address's alignment).
struct ExchangeShapes {
  BlockShape shape[2 * MG_MAX_RANKS];
  int8_t send[MG_MAX_RANKS], recv[MG_MAX_RANKS];
  uint8_t send_unit[MG_MAX_RANKS], recv_unit[MG_MAX_RANKS];
  bool own_in_place;  // the own block's two sides are the same bytes: nothing to copy
};

constexpr int kExchangeGroupThreads = kThreads / 2;
// Vectors of an LL pair a thread has in flight (loads issued before any is used). One at a time, each of
// a 16 KiB pair's 8 vectors per thread waited out a whole round trip to memory; two took 5% off the
// 64 KiB Alltoall (docs/benchmarks.md, "LL pairs in flight"); four took the resident kernel, which runs
// these loops, to spilling (docs/kernel-registers.md).
constexpr int kXLLBatch = 2;

// Whether a pair of `bytes` moves in the LL format (one step on channel 0, exchange_send_ll) rather
// than through the FIFO: at most ll_bytes (the team's, the same on every rank), so its two ends agree.
__host__ __device__ inline bool exchange_ll(size_t bytes, size_t ll_bytes) { return bytes > 0 && bytes <= ll_bytes; }

// The channels a pair of `bytes` uses: one per channel_bytes, at most kExchangeChannels (an LL pair:
// one). A pure function of the pair's bytes and the team's knobs, so its two ends agree.
__host__ __device__ inline int exchange_channels(size_t bytes, size_t channel_bytes, size_t ll_bytes) {
  if (bytes <= ll_bytes) return 1;
  const size_t c = (bytes + channel_bytes - 1) / channel_bytes;
  return c < 1 ? 1 : c > (size_t)kExchangeChannels ? kExchangeChannels : (int)c;
}

// Channel ch's part of a pair's bytes: [lo, lo + len), cut into steps of one slot.
struct ExchangeSpan {
  size_t lo, len;
  int steps;
};

__device__ __forceinline__ ExchangeSpan exchange_span(const ExchangeArgs &a, size_t bytes, int ch) {
  const int nch = exchange_channels(bytes, a.channel_bytes, a.ll_bytes);
  if (ch >= nch || bytes == 0) return ExchangeSpan{0, 0, 0};
  const size_t span = vector_share(bytes, (size_t)nch, 16);
  const size_t lo = (size_t)ch * span;
  const size_t len = shard_extent(bytes, span, span, (size_t)ch);
  return ExchangeSpan{lo, len, (int)((len + a.layout.slot_bytes - 1) / a.layout.slot_bytes)};
}

// Where step `step` of connection src -> dst on channel ch lies: in dst's workspace, so the sender
// writes across the link and the receiver copies out locally (push), or in src's, so the sender fills
// it locally and the receiver reads across the link (pull: the sender's per-step release then waits
// for local stores only). Both ends agree: the end is the team's, or the call's (mg_exchange_slots).
__device__ __forceinline__ char *exchange_slot(const ExchangeArgs &a, int ch, int src, int dst, uint64_t step) {
  return a.pull ? a.ws[src] + a.layout.xchg_off(ch, dst, step) : a.ws[dst] + a.layout.xchg_off(ch, src, step);
}

// The peer distance of channel ch's round i (1 .. n - 1): i where every channel keeps the same rounds,
// else rotated by the channel (mg_exchange_rounds), so a rank's channels send to all its peers at once
// rather than all to one peer: on 4x H100 a 64 MB Neighbor_alltoall on a 2 x 2 Cart took 177.8 us
// against 211.9 (docs/benchmarks.md, "staggered"). Every rank of a channel rotates alike, so round i of
// channel ch still pairs each rank's send to me + k with its peers' receive from me - k, and the rounds
// stay free of cycles. Channel 0 keeps the plain rounds, so the resident kernel, which runs channel 0
// only (kResidentExchangeChannels), meets a launched peer either way. Teams of 1-2 ranks: nothing to rotate.
__device__ __forceinline__ int exchange_round_peer(const ExchangeArgs &a, int i, int ch) {
  return a.stagger && a.nranks > 2 ? 1 + (i - 1 + ch) % (a.nranks - 1) : i;
}

// Loads one word of W: volatile where the source is a FIFO slot (rewritten every nslots steps, and L1
// is not coherent across GPUs), plain where it is the caller's buffer, which no one writes during the
// call (volatile loads there cost the sender's reads their caching).
template <typename W, bool Volatile>
__device__ __forceinline__ W load_word(const char *p) {
  if constexpr (!Volatile) {
    return *reinterpret_cast<const W *>(p);
  } else if constexpr (sizeof(W) == 16) {
    const uint4 v = ld_volatile_v4(p);
    W w;
    memcpy(&w, &v, 16);
    return w;
  } else {
    return *reinterpret_cast<const volatile W *>(p);
  }
}

// Copies n bytes in words of W (every thread of the group), U words in flight per thread.
template <typename W, bool Volatile>
__device__ __forceinline__ void copy_words(const Group &g, const char *s, char *d, size_t n) {
  const size_t nw = n / sizeof(W);
  size_t i = (size_t)g.tid;
  constexpr int U = 8;
  for (; i + (U - 1) * (size_t)g.nthreads < nw; i += U * (size_t)g.nthreads) {
    W w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = load_word<W, Volatile>(s + (i + u * (size_t)g.nthreads) * sizeof(W));
#pragma unroll
    for (int u = 0; u < U; ++u) *reinterpret_cast<W *>(d + (i + u * (size_t)g.nthreads) * sizeof(W)) = w[u];
  }
  for (; i < nw; i += (size_t)g.nthreads)
    *reinterpret_cast<W *>(d + i * sizeof(W)) = load_word<W, Volatile>(s + i * sizeof(W));
  for (size_t j = nw * sizeof(W) + (size_t)g.tid; j < n; j += (size_t)g.nthreads)
    d[j] = load_word<char, Volatile>(s + j);
}

// In the widest word both addresses are aligned to (a user's block may start at any element).
template <bool Volatile>
__device__ __forceinline__ void copy_bytes(const Group &g, const char *s, char *d, size_t n) {
  const uintptr_t bits = (uintptr_t)s | (uintptr_t)d;
  if ((bits & 15) == 0) copy_words<uint4, Volatile>(g, s, d, n);
  else if ((bits & 7) == 0) copy_words<uint64_t, Volatile>(g, s, d, n);
  else if ((bits & 3) == 0) copy_words<uint32_t, Volatile>(g, s, d, n);
  else if ((bits & 1) == 0) copy_words<uint16_t, Volatile>(g, s, d, n);
  else copy_words<uint8_t, Volatile>(g, s, d, n);
}

// One side of a shaped copy: packed byte j of the block (from the copy's first, `pos`) lies where the
// side's shape puts it from base (a thread's cursor follows its rows), else at base + j - pos (a FIFO
// slot, a plain block).
struct CopySide {
  const char *base;
  const BlockShape *shape;
  ShapeCursor cursor;
  int unit = 1;  // the width (1 .. 16 bytes) every access to a shaped side may take (shape_unit); LL pieces use it
  __device__ __forceinline__ const char *at(uint64_t j, uint64_t pos) {
    return shape != nullptr ? cursor.address(base, *shape, j) : base + (j - pos);
  }
  // Where a run from packed byte j starts (ShapeRuns: every byte of the run lies after it contiguously).
  __device__ __forceinline__ const char *run_at(uint64_t j, uint64_t pos) const {
    return shape != nullptr ? base + shape_offset(*shape, j) : base + (j - pos);
  }
};

// Copies packed bytes [pos, pos + n) of a block between two sides whose rows coincide (one side plain,
// or both shaped with rows of `row` bytes) in units of W, run by run (ShapeRuns, block_shape.cuh): the
// shape's arithmetic once per run rather than once per unit; a lane set's lanes take consecutive units
// of its run (coalesced), K each in flight. With the per-unit form (copy_shaped_units) a 4-byte unit of
// a 724-byte row cost a row search per unit: 4 ranks' 512 KB redistribute took 181 us in the kernel on
// 4x H200, the same row with 768-byte rows and 16-byte units 62 (docs/benchmarks.md, "Shaped copies by
// runs").
template <typename W, bool Volatile>
__device__ __forceinline__ void copy_shaped_runs(const Group &g, CopySide s, CopySide d, uint64_t pos, uint64_t n,
                                                 uint64_t row) {
  constexpr int U = sizeof(W) >= 8 ? 128 / (int)sizeof(W) : 16;  // a run: U units per lane at most
  constexpr int K = 8;                                             // units per lane in flight
  const int G = run_lanes(row / sizeof(W));
  const ShapeRuns runs(row, (uint64_t)G * U * sizeof(W), pos, n);
  const int sets = g.nthreads / G, lane = g.tid % G;
  for (uint64_t r = (uint64_t)(g.tid / G); r < runs.total; r += (uint64_t)sets) {
    uint64_t lo, hi;
    if (!runs.get(r, pos, n, &lo, &hi)) continue;
    const char *src = s.run_at(lo, pos);
    char *dst = const_cast<char *>(d.run_at(lo, pos));
    // K units per lane in flight, the last batch predicated (a unit at a time, a row shorter than a
    // full batch waited out a load per unit: 78 us for the 512 KB row above)
    const int units = (int)((hi - lo) / sizeof(W));
    for (int i = lane; i < units; i += K * G) {
      W w[K];
#pragma unroll
      for (int u = 0; u < K; ++u)
        if (i + u * G < units) w[u] = load_word<W, Volatile>(src + (size_t)(i + u * G) * sizeof(W));
#pragma unroll
      for (int u = 0; u < K; ++u)
        if (i + u * G < units) *reinterpret_cast<W *>(dst + (size_t)(i + u * G) * sizeof(W)) = w[u];
    }
  }
}

// Copies packed bytes [pos, pos + n) of a block from side s to side d in units of W (n and pos are
// multiples of W: a shape's rows are, and so are the FIFO's steps), 128 bytes in flight per thread as
// copy_words keeps (units narrower than 8 bytes keep 16 units: more costs registers for addresses).
template <typename W, bool Volatile>
__device__ __forceinline__ void copy_shaped_units(const Group &g, CopySide s, CopySide d, uint64_t pos, uint64_t n) {
  const uint64_t nw = n / sizeof(W);
  uint64_t i = (uint64_t)g.tid;
  constexpr int U = sizeof(W) >= 8 ? 128 / (int)sizeof(W) : 16;
  for (; i + (U - 1) * (uint64_t)g.nthreads < nw; i += U * (uint64_t)g.nthreads) {
    W w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t j = pos + (i + u * (uint64_t)g.nthreads) * sizeof(W);
      w[u] = load_word<W, Volatile>(s.at(j, pos));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t j = pos + (i + u * (uint64_t)g.nthreads) * sizeof(W);
      *reinterpret_cast<W *>(const_cast<char *>(d.at(j, pos))) = w[u];
    }
  }
  for (; i < nw; i += (uint64_t)g.nthreads) {
    const uint64_t j = pos + i * sizeof(W);
    *reinterpret_cast<W *>(const_cast<char *>(d.at(j, pos))) = load_word<W, Volatile>(s.at(j, pos));
  }
}

// Runs where the two sides' rows coincide (copy_shaped_runs) and are shorter than kCursorRowStrides of the
// group's strides: a thread's units then often enter a new row, whose search the runs pay once per run
// (the 16 MB redistribute's 4 KiB rows on 4x H200: 162.6 us in the twenty-fourth session, 76.1 by runs).
// Along longer rows a thread's cursor finds most units with an add (copy_shaped_units), and a row cut into
// runs is searched anew for each. Else unit by unit.
constexpr uint64_t kCursorRowStrides = 16;
template <bool Volatile>
__device__ __forceinline__ void copy_shaped(const Group &g, CopySide s, CopySide d, uint64_t pos, uint64_t n,
                                            int unit) {
  const uint64_t row = s.shape != nullptr ? (uint64_t)s.shape->block : d.shape != nullptr ? (uint64_t)d.shape->block : 0;
  if (n && row && row < kCursorRowStrides * (uint64_t)g.nthreads * (uint64_t)unit &&
      (s.shape == nullptr || d.shape == nullptr || s.shape->block == d.shape->block)) {
    switch (unit) {
      case 16: copy_shaped_runs<uint4, Volatile>(g, s, d, pos, n, row); break;
      case 8: copy_shaped_runs<uint64_t, Volatile>(g, s, d, pos, n, row); break;
      case 4: copy_shaped_runs<uint32_t, Volatile>(g, s, d, pos, n, row); break;
      case 2: copy_shaped_runs<uint16_t, Volatile>(g, s, d, pos, n, row); break;
      default: copy_shaped_runs<uint8_t, Volatile>(g, s, d, pos, n, row); break;
    }
    return;
  }
  switch (unit) {
    case 16: copy_shaped_units<uint4, Volatile>(g, s, d, pos, n); break;
    case 8: copy_shaped_units<uint64_t, Volatile>(g, s, d, pos, n); break;
    case 4: copy_shaped_units<uint32_t, Volatile>(g, s, d, pos, n); break;
    case 2: copy_shaped_units<uint16_t, Volatile>(g, s, d, pos, n); break;
    default: copy_shaped_units<uint8_t, Volatile>(g, s, d, pos, n); break;
  }
}

// 16 packed bytes of a block from byte j (zeros at and past n), and their store: through the block's
// shape where it has one, in its units (each unit lies within one row, and n is a whole number of
// them: a byte at a time, a 64 KB redistribute's LL pairs took 68 us in the kernel on 4x H200 against
// 23 for plain bytes), else as the LL protocol moves a piece (load_piece16, store_piece16). The LL
// steps below read and write blocks with these.
template <typename W>
__device__ __forceinline__ uint4 load_units16(CopySide &s, uint64_t j, uint64_t n) {
  uint4 v = make_uint4(0, 0, 0, 0);
  W *w = reinterpret_cast<W *>(&v);
#pragma unroll
  for (int i = 0; i < 16 / (int)sizeof(W); ++i)
    if (j + i * sizeof(W) < n) w[i] = *reinterpret_cast<const W *>(s.at(j + i * sizeof(W), 0));
  return v;
}

template <typename W>
__device__ __forceinline__ void store_units16(CopySide &d, uint64_t j, uint64_t n, uint4 v) {
  const W *w = reinterpret_cast<const W *>(&v);
#pragma unroll
  for (int i = 0; i < 16 / (int)sizeof(W); ++i)
    if (j + i * sizeof(W) < n) *reinterpret_cast<W *>(const_cast<char *>(d.at(j + i * sizeof(W), 0))) = w[i];
}

__device__ __forceinline__ uint4 load_packed16(CopySide &s, uint64_t j, uint64_t n) {
  if (s.shape == nullptr) return load_piece16(s.base, j, n);
  switch (s.unit) {
    case 16: return load_units16<uint4>(s, j, n);
    case 8: return load_units16<uint64_t>(s, j, n);
    case 4: return load_units16<uint32_t>(s, j, n);
    case 2: return load_units16<uint16_t>(s, j, n);
    default: return load_units16<uint8_t>(s, j, n);
  }
}

__device__ __forceinline__ void store_packed16(CopySide &d, uint64_t j, uint64_t n, uint4 v) {
  if (d.shape == nullptr) {
    store_piece16(const_cast<char *>(d.base), j, n, v);
    return;
  }
  switch (d.unit) {
    case 16: store_units16<uint4>(d, j, n, v); break;
    case 8: store_units16<uint64_t>(d, j, n, v); break;
    case 4: store_units16<uint32_t>(d, j, n, v); break;
    case 2: store_units16<uint16_t>(d, j, n, v); break;
    default: store_units16<uint8_t>(d, j, n, v); break;
  }
}

// The shape of a call's block (nullptr: plain bytes, or a call without shapes).
__device__ __forceinline__ const BlockShape *shape_of(const ExchangeShapes *sh, bool sending, int peer) {
  if (sh == nullptr) return nullptr;
  const int k = sending ? sh->send[peer] : sh->recv[peer];
  return k < 0 ? nullptr : &sh->shape[k];
}

// An LL pair's step, sending (channel 0's sending warps): the block in the LL format into my area at
// dst for this step (its number + 1 the flag), after dst has read the step that used the area before
// (xll_ack). False when that wait stopped.
template <bool Shaped>
__device__ __forceinline__ bool exchange_send_ll(const Group &g, const ExchangeArgs &a, const ExchangeShapes *sh,
                                                 TeamState *state, int dst) {
  const size_t bytes = a.send_bytes[dst];
  const uint64_t s = state->xll_sent[dst];
  bool stop = false;
  if (g.tid == 0 && s + 1 > (uint64_t)kXLLEntries)
    stop = !wait_at_least(&state->xll_ack[dst], s + 1 - (uint64_t)kXLLEntries, a);
  if (g.sync_or(stop)) return false;
  char *area = a.ws[dst] + a.layout.xll_off(a.rank, (int)(s % (uint64_t)kXLLEntries));
  CopySide from{a.send + a.send_off[dst], Shaped ? shape_of(sh, true, dst) : nullptr, {},
                Shaped && sh != nullptr ? (int)sh->send_unit[dst] : 1};
  // Each thread loads its next vector before storing the current one: two loads in flight, where one at
  // a time each store waited out a whole load (kXLLBatch).
  const size_t nv = (bytes + 15) / 16, nt = (size_t)g.nthreads;
  size_t v = (size_t)g.tid;
  uint4 x = v < nv ? load_packed16(from, v * 16, bytes) : make_uint4(0, 0, 0, 0);
  for (; v < nv; v += nt) {
    const uint4 next = v + nt < nv ? load_packed16(from, (v + nt) * 16, bytes) : make_uint4(0, 0, 0, 0);
    ll_store(area + v * 32, x, (uint32_t)(s + 1));
    x = next;
  }
  if (g.tid == 0) state->xll_sent[dst] = s + 1;
  return true;
}

// An LL pair's step, receiving (channel 0's receiving warps): each vector as its flag arrives, then
// the area released to src (xll_ack). False when a wait stopped.
template <bool Shaped>
__device__ __forceinline__ bool exchange_receive_ll(const Group &g, const ExchangeArgs &a, const ExchangeShapes *sh,
                                                    TeamState *state, int src) {
  const size_t bytes = a.recv_bytes[src];
  const uint64_t s = state->xll_recvd[src];
  const char *area = a.ws[a.rank] + a.layout.xll_off(src, (int)(s % (uint64_t)kXLLEntries));
  CopySide to{a.recv + a.recv_off[src], Shaped ? shape_of(sh, false, src) : nullptr, {},
              Shaped && sh != nullptr ? (int)sh->recv_unit[src] : 1};
  bool dead = false;
  const size_t nv = (bytes + 15) / 16, nt = (size_t)g.nthreads;
  const uint32_t f = (uint32_t)(s + 1);
  for (size_t v0 = (size_t)g.tid; v0 < nv && !dead; v0 += kXLLBatch * nt) {
    uint4 x[kXLLBatch];
    bool all = true;
#pragma unroll
    for (int u = 0; u < kXLLBatch; ++u) {
      const bool here = v0 + u * nt >= nv || ll_peek(area + (v0 + u * nt) * 32, f, &x[u]);
      all = all && here;
    }
    if (all) {
#pragma unroll
      for (int u = 0; u < kXLLBatch; ++u)
        if (v0 + u * nt < nv) store_packed16(to, (v0 + u * nt) * 16, bytes, x[u]);
      continue;
    }
    // A unit not there at the first look: the batch again a unit at a time, each waited for (rolled:
    // unrolled, the waits took the resident kernel's registers to spilling).
#pragma unroll 1
    for (int u = 0; u < kXLLBatch && !dead; ++u) {
      const size_t v = v0 + u * nt;
      if (v >= nv) break;
      const uint4 y = ll_load(area + v * 32, f, a, dead);
      if (!dead) store_packed16(to, v * 16, bytes, y);
    }
  }
  if (g.sync_or(dead)) return false;
  if (g.tid == 0) {
    st_release_sys(&team_state(a.ws[src])->xll_ack[a.rank], s + 1);
    state->xll_recvd[src] = s + 1;
  }
  return true;
}

// The move of step t of channel ch's FIFO pair with `peer` (simple_step's): sending, the call's bytes
// (packed through the block's shape where it has one) into the step's slot; receiving, the slot copied
// out into the receive buffer (unpacked likewise). The one copy of the sending warps and of both drain
// orders.
template <bool Shaped, bool Sending>
__device__ __forceinline__ void exchange_fifo_copy(const Group &g, const ExchangeArgs &a, const ExchangeShapes *sh,
                                                   const ExchangeSpan &sp, uint64_t step, int t, int ch, int peer) {
  const int me = a.rank;
  const size_t lo = (size_t)t * a.layout.slot_bytes;
  const size_t len = sp.len - lo < a.layout.slot_bytes ? sp.len - lo : a.layout.slot_bytes;
  char *slot = Sending ? exchange_slot(a, ch, me, peer, step) : exchange_slot(a, ch, peer, me, step);
  char *user = Sending ? const_cast<char *>(a.send) + a.send_off[peer] : a.recv + a.recv_off[peer];
  const BlockShape *shape = Shaped ? shape_of(sh, Sending, peer) : nullptr;
  if (Shaped && shape != nullptr) {
    const CopySide block{user, shape, {}}, fifo{slot, nullptr, {}};
    if constexpr (Sending) copy_shaped<false>(g, block, fifo, sp.lo + lo, len, sh->send_unit[peer]);
    else copy_shaped<true>(g, fifo, block, sp.lo + lo, len, sh->recv_unit[peer]);
  } else if constexpr (Sending) {
    copy_bytes<false>(g, user + sp.lo + lo, slot, len);
  } else {
    copy_bytes<true>(g, slot, user + sp.lo + lo, len);
  }
}

// The post of that step (simple_step's), by the group's thread 0: the step published to the peer's
// data counter (sending) or its slot released to the peer's ack counter (receiving).
template <bool Sending>
__device__ __forceinline__ void exchange_fifo_post(const Group &g, const ExchangeArgs &a, uint64_t step, int ch,
                                                   int peer) {
  if (g.tid == 0)
    st_release_sys((uint64_t *)(a.ws[peer] + (Sending ? Layout::xdata_off(ch, a.rank) : Layout::xack_off(ch, a.rank))),
                   step + 1);
}

// The sending warps of channel ch: round i pushes to me + k (k: exchange_round_peer), then the rank's
// own block is copied (last: the copy overlaps the peers' pushes this rank's receiving warps drain,
// where first it delayed every push by the time of a local copy). False when a wait stopped (the call
// is poisoned: nothing more is stored or published).
template <bool Shaped>
__device__ __forceinline__ bool exchange_send(const Group &g, const ExchangeArgs &a, const ExchangeShapes *sh,
                                              TeamState *state, int ch) {
  const int me = a.rank, n = a.nranks, D = a.layout.nslots;
  const char *mine = a.ws[me];
  for (int i = 1; i < n; ++i) {
    const int dst = (me + exchange_round_peer(a, i, ch)) % n;
    if (exchange_ll(a.send_bytes[dst], a.ll_bytes)) {
      if (ch == 0 && !exchange_send_ll<Shaped>(g, a, sh, state, dst)) return false;
      continue;
    }
    const ExchangeSpan sp = exchange_span(a, a.send_bytes[dst], ch);
    const uint64_t base = state->xsent[ch][dst];
    for (int t = 0; t < sp.steps; ++t) {
      const uint64_t step = base + (uint64_t)t;
      if (!simple_step(
              g,
              [&] {  // the slot's previous turn released
                return g.tid != 0 || step + 1 <= (uint64_t)D ||
                       wait_at_least((const uint64_t *)(mine + Layout::xack_off(ch, dst)), step + 1 - D, a);
              },
              [&] { exchange_fifo_copy<Shaped, true>(g, a, sh, sp, step, t, ch, dst); },
              [&] { exchange_fifo_post<true>(g, a, step, ch, dst); }))
        return false;
    }
    if (g.tid == 0) state->xsent[ch][dst] = base + (uint64_t)sp.steps;
  }
  const ExchangeSpan own = exchange_span(a, a.send_bytes[me], ch);
  const char *s = a.send + a.send_off[me];
  char *d = a.recv + a.recv_off[me];
  const BlockShape *ss = Shaped ? shape_of(sh, true, me) : nullptr, *ds = Shaped ? shape_of(sh, false, me) : nullptr;
  if (Shaped && (ss != nullptr || ds != nullptr)) {  // a plain side's base is where the copy starts
    const int su = sh->send_unit[me], ru = sh->recv_unit[me];
    if (own.len && !sh->own_in_place)
      copy_shaped<false>(g, CopySide{ss ? s : s + own.lo, ss, {}}, CopySide{ds ? d : d + own.lo, ds, {}}, own.lo,
                         own.len, su < ru ? su : ru);
    return true;
  }
  if (own.len && s != d) copy_bytes<false>(g, s + own.lo, d + own.lo, own.len);
  return true;
}

// The receiving warps of channel ch: round i drains what rank me - k pushes (k: exchange_round_peer).
template <bool Shaped>
__device__ __forceinline__ bool exchange_receive(const Group &g, const ExchangeArgs &a, const ExchangeShapes *sh,
                                                 TeamState *state, int ch) {
  const int me = a.rank, n = a.nranks;
  const char *mine = a.ws[me];
  for (int i = 1; i < n; ++i) {
    const int src = (me - exchange_round_peer(a, i, ch) + n) % n;
    if (exchange_ll(a.recv_bytes[src], a.ll_bytes)) {
      if (ch == 0 && !exchange_receive_ll<Shaped>(g, a, sh, state, src)) return false;
      continue;
    }
    const ExchangeSpan sp = exchange_span(a, a.recv_bytes[src], ch);
    const uint64_t base = state->xrecvd[ch][src];
    for (int t = 0; t < sp.steps; ++t) {
      const uint64_t step = base + (uint64_t)t;
      if (!simple_step(
              g, [&] { return g.tid != 0 || wait_at_least((const uint64_t *)(mine + Layout::xdata_off(ch, src)), step + 1, a); },
              [&] { exchange_fifo_copy<Shaped, false>(g, a, sh, sp, step, t, ch, src); },
              [&] { exchange_fifo_post<false>(g, a, step, ch, src); }))
        return false;
    }
    if (g.tid == 0) state->xrecvd[ch][src] = base + (uint64_t)sp.steps;
  }
  return true;
}

// The receiving warps of channel ch in a launched kernel: each FIFO pair's steps drained as they
// arrive, from whichever peer has one, turn by turn. In rounds, a root taking k peers at once copied
// the first peer's share while the others' lay in its FIFOs, and copied those only after their last
// bytes had arrived (benchmarks/fan_in_probe.py: 3 peers into one GPU, 216 GB/s against NCCL's 303).
// No sender waits on a particular drain order, so the rounds' freedom from cycles stays. The LL pairs
// follow in rounds: a receiver that has drained every FIFO holds no peer up, and an LL send never waits
// on this call.
template <bool Shaped>
__device__ __forceinline__ bool exchange_receive_any(const Group &g, const ExchangeArgs &a, const ExchangeShapes *sh,
                                                     TeamState *state, int ch) {
  const int me = a.rank, n = a.nranks;
  const char *mine = a.ws[me];
  __shared__ int picked;  // the peer whose next step thread 0 found arrived (-1: the wait stopped)
  int got[MG_MAX_RANKS] = {};  // steps drained per peer, the same in every thread
  int left = 0;
  for (int i = 1; i < n; ++i) {
    const int src = (me - i + n) % n;
    if (!exchange_ll(a.recv_bytes[src], a.ll_bytes)) left += exchange_span(a, a.recv_bytes[src], ch).steps;
  }
  for (int turn = exchange_round_peer(a, 1, ch); left > 0; --left) {
    int src = -1;  // every thread's, from `picked` after the vote
    uint64_t step = 0;
    const bool ok = simple_step(
        g,
        [&] {  // thread 0 polls the peers' data counters, from the turn's peer on, until one has a step
          if (g.tid != 0) return true;
          int found = -1;
          uint64_t start = 0;
          for (unsigned spins = 0; found < 0; ++spins) {
            for (int k = 0; k < n - 1 && found < 0; ++k) {
              const int i = 1 + (turn - 1 + k) % (n - 1), p = (me - i + n) % n;
              if (exchange_ll(a.recv_bytes[p], a.ll_bytes) || got[p] >= exchange_span(a, a.recv_bytes[p], ch).steps)
                continue;
              if (ld_acquire_sys((const uint64_t *)(mine + Layout::xdata_off(ch, p))) >=
                  state->xrecvd[ch][p] + (uint64_t)got[p] + 1) {
                found = p;
                turn = i % (n - 1) + 1;  // the next peer first next time: every FIFO keeps moving
              }
            }
            if (found < 0 && spin_check(spins, start, a)) break;
          }
          picked = found;
          return found >= 0;
        },
        [&] {  // simple_step's barrier after it keeps thread 0 from rewriting `picked` before all read it
          src = picked;
          step = state->xrecvd[ch][src] + (uint64_t)got[src];
          exchange_fifo_copy<Shaped, false>(g, a, sh, exchange_span(a, a.recv_bytes[src], ch), step, got[src], ch, src);
        },
        [&] { exchange_fifo_post<false>(g, a, step, ch, src); });
    if (!ok) return false;
    got[src] += 1;
  }
  if (g.tid == 0)
    for (int p = 0; p < n; ++p) state->xrecvd[ch][p] += (uint64_t)got[p];
  for (int i = 1; i < n; ++i) {
    const int src = (me - i + n) % n;
    if (ch == 0 && exchange_ll(a.recv_bytes[src], a.ll_bytes) && !exchange_receive_ll<Shaped>(g, a, sh, state, src))
      return false;
  }
  return true;
}

// Whether channel ch's receiving warps drain in arrival order (a.drain, mg_exchange_drain). Under
// MG_DRAIN_AUTO where this rank sends to no peer and a peer's share on the channel takes two steps
// or more: on 4x H200 that took a 60 MB Gatherv 9% less time and a 15 MB one (a step a share) 6% more
// (docs/benchmarks.md, "Fan in"). The same in every thread of the block.
__device__ __forceinline__ bool exchange_any_order(const ExchangeArgs &a, int ch) {
  if (a.drain != MG_DRAIN_AUTO) return a.drain == MG_DRAIN_ARRIVAL;
  int most = 0;
  for (int p = 0; p < a.nranks; ++p) {
    if (p == a.rank) continue;
    if (a.send_bytes[p]) return false;
    if (exchange_ll(a.recv_bytes[p], a.ll_bytes)) continue;
    const int steps = exchange_span(a, a.recv_bytes[p], ch).steps;
    most = steps > most ? steps : most;
  }
  return most >= 2;
}

// Channel ch of a call, by every thread of one block: of a launched kernel's grid, or of the resident
// kernel's (resident_kernel.cuh, plain blocks only), whose block ch runs channel ch; both run the same
// protocol, so a rank whose call was launched meets one whose call ran resident. A wait that stopped
// records the fault.
// AnyOrder: the receiving warps may drain in arrival order (exchange_receive_any, where
// exchange_any_order says so: the launched kernels), else in rounds (the resident kernel, whose
// registers have no room for it).
template <bool Shaped, bool AnyOrder = false>
__device__ __forceinline__ void exchange_body(const ExchangeArgs &a, const ExchangeShapes *sh, int ch) {
  const int tid = threadIdx.x;
  TeamState *state = team_state(a.ws[a.rank]);
  bool dead = __syncthreads_or(call_enter(state, ch == 0));
  if (!dead) {
    if (tid < kExchangeGroupThreads)
      dead = !exchange_send<Shaped>(Group{tid, kExchangeGroupThreads, 1}, a, sh, state, ch);
    else if (AnyOrder && exchange_any_order(a, ch))
      dead = !exchange_receive_any<Shaped>(Group{tid - kExchangeGroupThreads, kExchangeGroupThreads, 2}, a, sh, state, ch);
    else
      dead = !exchange_receive<Shaped>(Group{tid - kExchangeGroupThreads, kExchangeGroupThreads, 2}, a, sh, state, ch);
  }
  if (__syncthreads_or(dead) && tid == 0) record_fault(state, a.watch);
}

}  // namespace mg
