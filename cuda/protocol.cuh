// protocol.cuh: how data and signals move between ranks (NCCL's "protocol" layer).
//
// Every rank owns one workspace in its own device memory, mapped into every peer through CUDA IPC.
// A connection (lane, channel, src -> dst) is a FIFO of `nslots` slots in dst's workspace plus two
// 64-bit counters: data[lane][channel][src] in dst's workspace (written by src: "step g is in slot
// g % nslots") and ack[lane][channel][dst] in src's workspace (written by dst: "I am done with every
// step up to g"). Counters hold global step numbers that only grow, across calls too: each rank keeps
// the step reached per (lane, channel) in its own workspace (TeamState), read by the kernel at its
// start and advanced at its end, so every rank advances it identically and no counter is ever reset.
// The numbers live in device memory, not in kernel arguments, so a kernel captured into a CUDA graph
// and replayed continues the sequence instead of repeating it.
//
// Ordering: writers store data with ordinary stores, the block synchronizes (bar.sync orders every
// thread's stores before what the posting thread does next), then one thread publishes the counter
// with st.release.sys, which is cumulative: it carries the whole block's stores to system scope. Readers poll
// with ld.acquire.sys in one thread, synchronize the block, and read the slot with volatile loads
// (L1 is not coherent across GPUs, and a slot is rewritten every nslots steps).
#pragma once
#include <stdint.h>
#include "mpigpu_cuda.h"
#include "dtypes.cuh"
#include "fault.cuh"

namespace mg {

constexpr int kLanes = 2;          // lane 0: contributions to owners; lane 1: owners' results to gatherers
constexpr int kThreads = 256;      // threads per channel (block)
constexpr size_t kFlagBytes = 2 * kLanes * MG_MAX_CHANNELS * MG_MAX_RANKS * sizeof(uint64_t);
constexpr size_t kStateOffset = kFlagBytes;  // TeamState follows the counters
constexpr size_t kSlotsOffset = 131072;  // slots start here, 64 KiB aligned, after the counters
// The exchange transport (exchange_kernel.cuh: the all-to-all family) has connections of its own, on
// up to kExchangeChannels channels: counters data[ch][src] at dst and ack[ch][dst] at src, here, and
// FIFOs after the LL128 areas (Layout::xchg_off). Its own, because its steps per connection follow
// that connection's bytes, which only its two ends know: the lanes' bases (one per lane and channel,
// advanced alike by every rank) cannot count them.
// 128 channels, not 64: a pair of 16-64 MB moved 10-35% faster on 4x H100 (every SM a channel's copies;
// docs/benchmarks.md, "The exchange's channels"), for twice the FIFOs' memory.
constexpr int kExchangeChannels = 128;
constexpr size_t kXFlagsOffset = 65536;
constexpr size_t kXFlagBytes = 2 * kExchangeChannels * MG_MAX_RANKS * sizeof(uint64_t);
static_assert(kXFlagsOffset + kXFlagBytes <= kSlotsOffset, "exchange counters must fit before the slots");
// The exchange's small pairs (at most the team's exchange_ll_bytes, MPIGPU_EXCHANGE_LL_BYTES) move in
// the low-latency format instead (ll_proto.cuh: every 8 bytes 4 of data and a flag), in areas of their
// own after the FIFOs, of MG_EXCHANGE_LL_MAX_BYTES of data each: kXLLEntries per source, used in turn by
// the pair's LL steps, whose numbers are the flags. No fence, no counter: the receiver polls the data.
constexpr size_t kXLLBytes = MG_EXCHANGE_LL_MAX_BYTES;
constexpr int kXLLEntries = 4;

// Per-rank sequence state, in the rank's own workspace. Only its own kernels touch it, except
// ll_started, which each peer writes (the LL-family Bcast's acks, see ll_reuse_guard), xll_ack, which
// each peer writes (the exchange's LL areas), and broken, which peers and the host write (the fault
// model, see stop_word).
struct TeamState {
  uint64_t base[kLanes][MG_MAX_CHANNELS];  // where the next call's step numbers start (a call of wide
                                           // steps may start further on: fused_step_base)
  uint32_t ll_seq;                         // low-latency calls completed (the last call's flag value)
  uint32_t ll_arrived;                     // blocks of the running LL call that are done
  uint32_t ll_bcast_seq;                   // sequence number of the last LL-family Bcast (0: none)
  uint32_t broken;                         // nonzero: a call of the team faulted (fault.cuh's word); no
                                           // call runs after it
  uint32_t entered;                        // calls this rank's kernels began on an unbroken team
  uint32_t ll_started[MG_MAX_RANKS];       // written by peer k when it starts an LL-family Bcast: the
                                           // number of the last call k had finished by then
  uint64_t resident_call[8];               // the resident kernel's call, relayed by its first block to
                                           // the others (resident_kernel.cuh)
  uint64_t xsent[kExchangeChannels][MG_MAX_RANKS];  // exchange: steps sent to each peer per channel
  uint64_t xrecvd[kExchangeChannels][MG_MAX_RANKS]; // exchange: steps received from each peer per channel
  uint64_t xll_sent[MG_MAX_RANKS];   // exchange: LL steps sent to each peer (small pairs)
  uint64_t xll_recvd[MG_MAX_RANKS];  // exchange: LL steps received from each peer
  uint64_t xll_ack[MG_MAX_RANKS];    // written by peer k: LL steps of mine it has read (the areas' reuse)
};
static_assert(kStateOffset + sizeof(TeamState) <= kXFlagsOffset, "state must fit before the exchange counters");

__host__ __device__ inline TeamState *team_state(char *ws) { return reinterpret_cast<TeamState *>(ws + kStateOffset); }

// Layout of one workspace; identical in every rank, so offsets computed here apply to any peer's base.
struct Layout {
  size_t slot_bytes;
  int nslots, nranks, max_channels;
  size_t ll128_bytes;  // largest per-peer piece of LL128 (mg_team_config)

  __host__ __device__ static size_t data_off(int lane, int ch, int src) {
    return ((size_t)(lane * MG_MAX_CHANNELS + ch) * MG_MAX_RANKS + src) * sizeof(uint64_t);
  }
  __host__ __device__ static size_t ack_off(int lane, int ch, int dst) {
    return kFlagBytes / 2 + data_off(lane, ch, dst);
  }
  __host__ __device__ size_t slot_off(int lane, int ch, int src, uint64_t step) const {
    size_t s = (size_t)(step % (uint64_t)nslots);
    return kSlotsOffset + ((((size_t)lane * max_channels + ch) * nranks + src) * nslots + s) * slot_bytes;
  }
  __host__ __device__ size_t slots_end() const {
    return kSlotsOffset + (size_t)kLanes * max_channels * nranks * nslots * slot_bytes;
  }
  // Low-latency region (ll_proto.cuh): per call parity and source, 2 bytes per data byte.
  __host__ __device__ size_t ll_off(int parity, int src) const {
    return slots_end() + ((size_t)parity * nranks + src) * 2 * MG_LL_MAX_BYTES;
  }
  // 128-byte-line region (ll128_proto.cuh): per call parity, phase and source, one area of whole
  // lines for a piece of up to ll128_bytes; 4 KiB aligned, so every line is 128-byte aligned.
  __host__ __device__ size_t ll128_area_bytes() const {
    return ((ll128_bytes + 119) / 120 * 128 + 4095) / 4096 * 4096;
  }
  __host__ __device__ size_t ll128_off(int parity, int phase, int src) const {
    size_t base = (ll_off(2, 0) + 4095) / 4096 * 4096;
    return base + (((size_t)parity * 2 + phase) * nranks + src) * ll128_area_bytes();
  }
  // The exchange transport's counters and FIFOs (exchange_kernel.cuh): slot s of (channel, source).
  __host__ __device__ static size_t xdata_off(int ch, int src) {
    return kXFlagsOffset + ((size_t)ch * MG_MAX_RANKS + src) * sizeof(uint64_t);
  }
  __host__ __device__ static size_t xack_off(int ch, int dst) { return kXFlagBytes / 2 + xdata_off(ch, dst); }
  __host__ __device__ size_t xchg_off(int ch, int src, uint64_t step) const {
    const size_t s = (size_t)(step % (uint64_t)nslots);
    return ll128_off(2, 0, 0) + (((size_t)ch * nranks + src) * nslots + s) * slot_bytes;
  }
  // The exchange's LL areas: entry e of source src, 2 bytes per data byte.
  __host__ __device__ size_t xll_off(int src, int e) const {
    return xchg_off(kExchangeChannels, 0, 0) + ((size_t)src * kXLLEntries + e) * 2 * kXLLBytes;
  }
  __host__ __device__ size_t total_bytes() const { return xll_off(nranks, 0); }
};

// Geometry shared by the kernels. A message is cut into shards of at most `cap` units (elements or
// bytes), shard k starting k * stride units in: shard k holds clamp(total - k * stride, 0, cap)
// units (stride 0: every shard is the whole message, capped). The last shards of a message that
// does not divide evenly are short or empty, so every form reads this one rule.
__host__ __device__ inline size_t shard_extent(size_t total, size_t stride, size_t cap, size_t k) {
  const size_t lo = k * stride;
  const size_t len = total > lo ? total - lo : 0;
  return len < cap ? len : cap;
}

// One of `parts` equal shares of `len` units, in whole vectors of V units: the two-shot, ring and
// scatter shards (plan, cut_into_shards, ll128_shard_bytes) and the channels' spans (cut_into_steps) are
// cut by it in elements, and mg_select counts the same shares in bytes (len in bytes, V = 16). The
// two agree for any element size e dividing 16 (V = 16 / e): ceil(ceil(x / p) / V) = ceil(x / (p V)),
// so a share of x elements is ceil(x / (p V)) * 16 bytes, as is the byte share of x * e bytes.
__host__ __device__ inline size_t vector_share(size_t len, size_t parts, size_t V) {
  const size_t per = (len + parts - 1) / parts;
  return (per + V - 1) / V * V;
}

struct Piece { size_t in, out, n; };  // a step's elements: where they start in the input and output, how many

// Where step t of channel ch of shard idx lies, in elements, for the direct and ring kernels (their
// arguments share these fields): shard idx holds shard_extent(len_total, len_stride, shard_len, idx)
// elements, from idx * in_stride in the input and idx * out_stride in the output; each channel takes
// a span of it, each step at most `chunk` of the span.
template <typename Args>
__host__ __device__ __forceinline__ Piece piece_at(const Args &a, size_t idx, int ch, int t) {
  const size_t len = shard_extent(a.len_total, a.len_stride, a.shard_len, idx);
  const size_t lo = (size_t)ch * a.span + (size_t)t * a.chunk;
  size_t hi = (size_t)ch * a.span + a.span;
  if (hi > len) hi = len;
  if (lo + a.chunk < hi) hi = lo + a.chunk;
  return Piece{idx * a.in_stride + lo, idx * a.out_stride + lo, hi > lo ? hi - lo : 0};
}

// Acquire loads and release stores at system scope, of the 64-bit step counters and of TeamState's
// 32-bit per-peer words (ll_started, broken).
template <typename U> __device__ __forceinline__ U ld_acquire_sys(const U *p) {
  static_assert(sizeof(U) == 8 || sizeof(U) == 4, "64- or 32-bit counters");
  U v;
  if constexpr (sizeof(U) == 8) asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <typename U> __device__ __forceinline__ void st_release_sys(U *p, U v) {
  static_assert(sizeof(U) == 8 || sizeof(U) == 4, "64- or 32-bit counters");
  if constexpr (sizeof(U) == 8) asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Faults. A wait for a peer stops, instead of spinning forever, when its deadline passes
// (MPIGPU_TIMEOUT_S), when the host asks to abort (FaultBox::abort: mg_team_abort) or when the team is
// broken (TeamState::broken: a wait of this rank or of a peer stopped first). No trap: a trap is a
// sticky error that fails every later CUDA call of the process, other teams' and the user's included.
// A wait that stopped poisons its call: the threads that share a barrier with it learn so at that
// barrier (a vote, Group::sync_or) and skip the rest of the call, and every other wait of the call
// sees the broken word at its next check. A poisoned thread stores nothing more into peers' memory
// and publishes no counter, flag or ack, so whatever a peer receives is data of the call, and a peer
// that arrives late finds its team broken (call_enter) and stops too. Each block still reaches its
// barriers and ends: the call ends on every rank, with the fault recorded for the host (record_fault).

// Why a wait begun at `start` must stop (fault.cuh's word), or 0. A cause of its own (deadline,
// abort) marks the team broken here and in every peer's TeamState, so their waits stop too; the
// first cause stays. Not inlined: it runs once per 1024 polls, and inlined it cost more registers
// (docs/kernel-registers.md).
static __device__ __noinline__ uint32_t stop_word(uint64_t start, char *const *ws, int me, int n, const Watch &w) {
  TeamState *st = team_state(ws[me]);
  const uint32_t broken = *(volatile uint32_t *)&st->broken;
  if (broken) return broken;
  uint32_t word;
  if (*(volatile uint32_t *)&w.box->abort) word = fault_word(kCauseAbort, me);
  else if (global_timer_ns() - start > w.timeout_ns) word = fault_word(kCauseTimeout, me);
  else return 0;
  const uint32_t first = atomicCAS(&st->broken, 0u, word);
  if (first) return first;
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    uint32_t *p = &team_state(ws[k])->broken;
    if (ld_acquire_sys(p) == 0u) st_release_sys(p, word);
  }
  return word;
}

// Called after each failed poll of a wait (spins counts them from 0): reads the clock on the first
// and asks stop_word on every 1024th, as the deadline check always did, so a wait whose first poll
// succeeds costs nothing more. A (the kernel's arguments) gives the workspaces, the rank and `watch`.
template <typename A>
__device__ __forceinline__ uint32_t spin_check(unsigned spins, uint64_t &start, const A &a) {
  if ((spins & 1023u) != 0) return 0;
  if (spins == 0) {
    start = global_timer_ns();
    return 0;
  }
  return stop_word(start, a.ws, a.rank, a.nranks, a.watch);
}

// A call's start, by every thread: true when the team is broken already (the call then stops at
// once). Otherwise block 0 counts the call as entered: after a fault the host compares the ranks'
// counts to name the peers that never began the call (mg_team_missing_peers).
__device__ __forceinline__ bool call_enter(TeamState *state, bool counts) {
  const uint32_t broken = *(volatile uint32_t *)&state->broken;
  if (counts && threadIdx.x == 0 && broken == 0u) *(volatile uint32_t *)&state->entered = state->entered + 1u;
  return broken != 0u;
}

// One thread of each block whose call stopped: the fault word into the host's records, the team's
// (the first stays) and the request's, made visible before the kernel or the resident call ends.
static __device__ __noinline__ void record_fault(const TeamState *state, const Watch &w) {
  const uint32_t word = *(const volatile uint32_t *)&state->broken;
  volatile uint32_t *team = &w.box->fault;
  if (*team == 0u) *team = word;
  if (w.status) *(volatile uint32_t *)w.status = word;
  __threadfence_system();
}

// Sequence numbers of the protocols with flags in the data (LL, LL128), shared by both: every block
// of the call reads the last call's number at its start; the last of its `nblocks` blocks out
// publishes this call's, when every one has read the old one (all blocks of a call are resident at
// once). A launched call's blocks are its grid; the resident kernel runs a call on the first
// `nblocks` blocks of its grid (resident_call.cuh) and also has the last block tell the host: `call`
// into `host_done` (mapped host memory), after a system-scope fence, so the host that reads it may use
// the call's output.
__device__ __forceinline__ uint32_t ll_sequence_begin(TeamState *state) {
  return *(volatile uint32_t *)&state->ll_seq + 1u;
}

// `dead`: this thread's part of the call stopped (or never began, on a broken team); its block
// records the fault before it counts as arrived. The number is published and `done` written either
// way: no call runs on a broken team, and the resident kernel's host waits for `done`.
__device__ __forceinline__ void ll_sequence_publish(TeamState *state, const Watch &w, uint32_t seq, uint32_t nblocks,
                                                    bool dead, bool bcast = false, uint32_t *host_done = nullptr,
                                                    uint32_t call = 0) {
  const bool poisoned = __syncthreads_or(dead);
  if (threadIdx.x == 0) {
    if (poisoned) record_fault(state, w);
    __threadfence();
    if (atomicAdd(&state->ll_arrived, 1u) == nblocks - 1) {
      state->ll_arrived = 0;
      if (bcast) *(volatile uint32_t *)&state->ll_bcast_seq = seq;
      *(volatile uint32_t *)&state->ll_seq = seq;
      if (host_done) {
        __threadfence_system();
        *(volatile uint32_t *)host_done = call;
      }
    }
  }
}

// Reuse of the LL and LL128 areas. Call seq writes the areas of parity seq & 1 in its peers'
// workspaces, which they last read in call seq - 2. In a symmetric call every rank receives from
// every other, so a rank that finished call seq - 1 has received each peer's lines of seq - 1, sent
// after that peer finished seq - 2: the areas are free with no ack. A Bcast breaks that chain (its
// root receives nothing; a one-shot Bcast's other ranks receive from the root only), so:
// - every rank starting an LL-family Bcast (call b) tells every peer it finished call b - 1, with
//   one store into the peer's ll_started (ll_announce_start);
// - the call after such a Bcast (seq = b + 1, any LL-family form) first waits, in every block, until
//   each peer's ll_started says it finished seq - 2 (ll_reuse_guard). The wait is on this rank's own
//   memory and is normally over before it starts; a Bcast after a symmetric call needs none.
__device__ __forceinline__ void ll_announce_start(char *const *ws, int me, int n, uint32_t seq) {
  if (blockIdx.x == 0 && threadIdx.x < n && (int)threadIdx.x != me) {
    st_release_sys(&team_state(ws[threadIdx.x])->ll_started[me], seq - 1u);
  }
}

// Returns `dead` (the thread's, see ll_sequence_publish); where the guard waits, for the whole block:
// a wait that stopped poisons every thread of the block, whose stores could overwrite areas a peer
// still reads.
template <typename A>
__device__ __forceinline__ bool ll_reuse_guard(TeamState *state, const A &a, uint32_t seq, bool dead) {
  if (*(volatile uint32_t *)&state->ll_bcast_seq != seq - 1u || seq == 1u) return dead;  // uniform per block
  if (!dead && (int)threadIdx.x < a.nranks && (int)threadIdx.x != a.rank) {
    const uint32_t want = seq - 2u;
    const uint32_t *p = &state->ll_started[threadIdx.x];
    uint64_t start = 0;
    for (unsigned spins = 0; (int32_t)(ld_acquire_sys(p) - want) < 0; ++spins)
      if (spin_check(spins, start, a)) {
        dead = true;
        break;
      }
  }
  return __syncthreads_or(dead);
}

// Spin until *p >= want: true, or false when the wait stopped (spin_check).
template <typename A>
__device__ __forceinline__ bool wait_at_least(const uint64_t *p, uint64_t want, const A &a) {
  uint64_t start = 0;
  for (unsigned spins = 0; ld_acquire_sys(p) < want; ++spins)
    if (spin_check(spins, start, a)) return false;
  return true;
}

// The end of a call on lane `lane` of channel ch, with every thread of the block, after a block
// barrier: every incoming connection of the lane is released up to step `end` (a peer whose later
// call has another pattern, another root or algorithm, then finds all my slots free) and the lane's
// base moves there, where the next call on it starts.
__device__ __forceinline__ void end_lane(char *const *ws, TeamState *state, int lane, int ch, int me, int n,
                                         uint64_t end) {
  const int tid = threadIdx.x;
  if (tid < n && tid != me) st_release_sys((uint64_t *)(ws[tid] + Layout::ack_off(lane, ch, me)), end);
  if (tid == 0) state->base[lane][ch] = end;
}

// Volatile 16-byte and scalar loads: see the ordering note above.
__device__ __forceinline__ uint4 ld_volatile_v4(const void *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

// As ld_elem, through volatile words (AlignWordOf): a complex element is read as its components.
template <typename T> __device__ __forceinline__ T ld_volatile(const T *p) {
  using W = AlignWordOf<T>;
  W w[sizeof(T) / sizeof(W)];
#pragma unroll
  for (int i = 0; i < (int)(sizeof(T) / sizeof(W)); ++i) w[i] = reinterpret_cast<const volatile W *>(p)[i];
  T out;
  memcpy(&out, w, sizeof(T));
  return out;
}

// A set of warps of one block that runs a piece of work together: its threads are numbered tid in
// [0, nthreads) and synchronize on named barrier `barrier` (0: the whole block, __syncthreads).
struct Group {
  int tid, nthreads, barrier;
  __device__ __forceinline__ void sync() const {
    if (barrier == 0) __syncthreads();
    else asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(nthreads) : "memory");
  }
  // sync() that also tells whether v holds in any thread of the group: the vote by which a wait that
  // stopped poisons the group's call (see the fault notes above).
  __device__ __forceinline__ bool sync_or(bool v) const {
    if (barrier == 0) return __syncthreads_or(v);
    uint32_t any;
    asm volatile(
        "{\n\t.reg .pred p, q;\n\tsetp.ne.u32 p, %1, 0;\n\tbar.red.or.pred q, %2, %3, p;\n\t"
        "selp.u32 %0, 1, 0, q;\n\t}"
        : "=r"(any) : "r"((uint32_t)v), "r"(barrier), "r"(nthreads) : "memory");
    return any != 0;
  }
};

// One step of the Simple protocol (FIFO slots, a counter per connection and direction) on a group:
// wait() by every thread (the threads that own a counter poll it; false where a wait stopped), the
// vote, move() by the whole group (its slots' data), the barrier that orders every thread's stores
// before post(), by which the counters' threads publish them (st_release_sys). The ordering rules
// above hold for every algorithm that steps through here. False in every thread where a wait stopped:
// nothing is moved or published.
template <typename Wait, typename Move, typename Post>
__device__ __forceinline__ bool simple_step(const Group &g, const Wait &wait, const Move &move, const Post &post) {
  if (g.sync_or(!wait())) return false;
  move();
  g.sync();
  post();
  return true;
}

// One 16-byte vector of each of the first nsrc sources combined element by element, in source order
// (combine16, dtypes.cuh: the LL protocols' combine too); w[0] as it is where MaxSrc is 1.
template <typename T, typename Op, int MaxSrc>
__device__ __forceinline__ uint4 reduce_vec(const uint4 (&w)[MaxSrc], int nsrc) {
  return combine16<T, Op, MaxSrc>(nsrc, [&](int k) { return w[k]; });
}

// dst[d][i] = src[0][i] op src[1][i] op ... for every destination d, in source order, so every rank
// that reduces the same sources gets bitwise the same values. 16-byte vectors where every pointer is
// 16-byte aligned, scalars otherwise and for the tail. All threads of the group take part.
// Each thread issues the loads of all sources for U vectors before combining any of them: the
// latency of local HBM is then paid once per U vectors, not once per source.
template <typename T, typename Op, int MaxSrc, int MaxDst, int U>
__device__ __forceinline__ void reduce_copy(const Group &g, const char *const *src_in, int nsrc,
                                            char *const *dst_in, int ndst, size_t n) {
  using A = typename AccOf<T>::type;
  constexpr int V = 16 / sizeof(T);
  const char *src[MaxSrc];
  char *dst[MaxDst];
  uintptr_t orbits = 0;
#pragma unroll
  for (int k = 0; k < MaxSrc; ++k) {
    src[k] = k < nsrc ? src_in[k] : src_in[0];
    orbits |= (uintptr_t)src[k];
  }
#pragma unroll
  for (int d = 0; d < MaxDst; ++d) {
    dst[d] = d < ndst ? dst_in[d] : dst_in[0];
    orbits |= (uintptr_t)dst[d];
  }
  const size_t nvec = (orbits & 15) == 0 ? n / V : 0;
  const size_t tid = (size_t)g.tid, stride = (size_t)g.nthreads;

  // K vectors from index i, stride apart: every source's loads first, then each vector's combine and
  // stores. The unrolled loop takes U at a time, the remainder one at a time.
  auto vectors = [&](size_t i, auto unroll) {
    constexpr int K = decltype(unroll)::value;
    uint4 w[MaxSrc][K];
#pragma unroll
    for (int k = 0; k < MaxSrc; ++k)
      if (k < nsrc)
#pragma unroll
        for (int u = 0; u < K; ++u) w[k][u] = ld_volatile_v4(src[k] + (i + u * stride) * 16);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      uint4 col[MaxSrc];
#pragma unroll
      for (int k = 0; k < MaxSrc; ++k) col[k] = w[k][u];
      const uint4 out = reduce_vec<T, Op, MaxSrc>(col, nsrc);
#pragma unroll
      for (int d = 0; d < MaxDst; ++d)
        if (d < ndst) *reinterpret_cast<uint4 *>(dst[d] + (i + u * stride) * 16) = out;
    }
  };
  size_t i = tid;
  for (; i + (U - 1) * stride < nvec; i += U * stride) vectors(i, std::integral_constant<int, U>{});
  for (; i < nvec; i += stride) vectors(i, std::integral_constant<int, 1>{});
  for (size_t j = nvec * V + tid; j < n; j += stride) {
    A acc = to_acc<A, T>(ld_volatile(reinterpret_cast<const T *>(src[0]) + j));
#pragma unroll
    for (int k = 1; k < MaxSrc; ++k)
      if (k < nsrc) acc = Op::f(acc, to_acc<A, T>(ld_volatile(reinterpret_cast<const T *>(src[k]) + j)));
    T out = from_acc<T, A>(acc);
#pragma unroll
    for (int d = 0; d < MaxDst; ++d)
      if (d < ndst) st_elem(reinterpret_cast<T *>(dst[d]) + j, out);
  }
}

}  // namespace mg
