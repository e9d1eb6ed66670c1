// resident_kernel.cuh: a kernel that stays running between blocking calls and takes each one from a
// mailbox in host memory, so a small blocking collective costs no launch and no stream
// synchronization.
//
// Why: a blocking call of a launched kernel costs its launch, the GPU starting it and the host
// waiting for its end: 8.3-9.7 us for an empty kernel on the 4x H200 host (benchmarks/launch_floor.cu),
// against 3.5-3.6 us for the same round trip through mapped host memory to a kernel already running.
// Small messages are all latency, so the blocking LL calls (Allreduce, Reduce, Reduce_scatter_block
// and Allgather with pieces up to 64 KiB) run here whenever the caller's stream has nothing queued
// (resident.cu decides; a call with work queued before it launches as usual, in stream order; the
// check, cudaStreamQuery, costs 1.3 us).
//
// Protocol, host to kernel. The host writes a call into ResidentBox::call as kCallWords 64-bit words,
// each 32 bits of the call and the call's number (1, 2, ... per team), as the LL protocol pairs data
// and flag: a word is read whole, so a reader that sees every word's number sees the whole call, with
// no fence and one read of host memory. Only the first block's first warp polls host memory (eight
// blocks polling it took 21.8-35.3 us per round trip instead of 3.5, launch_floor.cu); it relays
// the words to the other blocks through TeamState::resident_call in device memory, in the same
// format with the number doubled and the instance's parity added, so a word left by the previous
// instance never matches.
//
// Kernel to host. Every block runs the call's LL exchange (ll_kernel.cuh: any grid runs the same
// protocol, so a peer whose call was launched meets this one) and the last block out writes the
// call's number into ResidentBox::done after a system-scope fence. The host spins on it. The next
// call's words are written only after that, when no block still reads the current ones.
//
// Lifetime. After linger_ns without a call the instance returns (the first block relays an exit and
// writes its epoch into ResidentBox::exited), so a device-wide synchronization by the program waits
// at most that long for it. The host launches a new instance at its next call; if it rang a call just
// as an instance gave up, it sees `exited`, waits for the instance to end and launches another, which
// starts at that call (ResidentArgs::start). An exit call, which takes a number of its own, ends an
// instance before the team launches a direct or ring kernel (resident_stop) and at team release.
#pragma once
#include "dispatch.cuh"
#include "ll_kernel.cuh"

namespace mg {

constexpr int kResidentBlocks = 16;  // 16 x kThreads threads: one pass over a 64 KiB piece (LL's largest)
constexpr int kCallWords = 6;

enum ResidentKind : uint32_t { kResidentRun = 0, kResidentExit = 1 };

// Pinned host memory mapped into the device; the host writes `call`, the kernel `done` and `exited`
// (on another 64-byte line, so the host's stores and the kernel's do not share one).
struct ResidentBox {
  uint64_t call[8];
  alignas(64) uint32_t done;  // number of the last call completed
  uint32_t exited;            // epoch of the last instance that returned
};

// One call: an LL call's own fields and its (dtype, op), which pick the body (dispatch.cuh).
struct ResidentCall {
  uint32_t kind, mode, dtype, op;
  uint64_t send, recv;
  uint32_t piece_bytes;  // at most MG_LL_MAX_BYTES
};

// Word i of a call's payload: kind | mode << 8 | dtype << 16 | op << 24, send, recv (two words
// each, low half first), piece bytes.
__host__ __device__ inline uint32_t call_word(const ResidentCall &c, int i) {
  switch (i) {
    case 0: return c.kind | c.mode << 8 | c.dtype << 16 | c.op << 24;
    case 1: return (uint32_t)c.send;
    case 2: return (uint32_t)(c.send >> 32);
    case 3: return (uint32_t)c.recv;
    case 4: return (uint32_t)(c.recv >> 32);
    default: return c.piece_bytes;
  }
}

__device__ inline ResidentCall read_call(const uint32_t *w) {
  ResidentCall c;
  c.kind = w[0] & 0xffu;
  c.mode = (w[0] >> 8) & 0xffu;
  c.dtype = (w[0] >> 16) & 0xffu;
  c.op = w[0] >> 24;
  c.send = (uint64_t)w[2] << 32 | w[1];
  c.recv = (uint64_t)w[4] << 32 | w[3];
  c.piece_bytes = w[5];
  return c;
}

struct ResidentArgs {
  LLArgs team;        // the team's fields (workspaces, layout, rank, timeout); a call brings the rest
  ResidentBox *box;   // device address of the mapped mailbox
  uint32_t start;     // number of the last call completed before this instance: it takes start + 1 first
  uint32_t epoch;     // instances launched on this team, this one included
  uint64_t linger_ns; // returns after this long without a call
};

__device__ __forceinline__ uint64_t ld_relaxed_sys_u64(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t relay_flag(uint32_t call, uint32_t epoch) { return call * 2u + (epoch & 1u); }

// Warp 0 of every block: this block's copy of call `call` into w (kCallWords words). The first block
// polls the mailbox and relays, or after linger_ns with no call makes the call an exit; the others
// poll the relay. Returns true when this is the first block and it chose to exit.
__device__ __forceinline__ bool fetch_call(const ResidentArgs &r, TeamState *state, uint32_t call, uint32_t *w) {
  const int lane = threadIdx.x;
  const bool mine = lane < kCallWords;
  uint64_t v = 0;
  if (blockIdx.x != 0) {
    const uint32_t want = relay_flag(call, r.epoch);
    for (;;) {
      if (mine) v = *(volatile uint64_t *)&state->resident_call[lane];
      if (__all_sync(0xffffffffu, !mine || (uint32_t)(v >> 32) == want)) break;
    }
    if (mine) w[lane] = (uint32_t)v;
    return false;
  }
  bool idle_out = false;
  uint64_t since = 0;
  for (unsigned spins = 0;; ++spins) {
    if (mine) v = ld_relaxed_sys_u64(&r.box->call[lane]);
    if (__all_sync(0xffffffffu, !mine || (uint32_t)(v >> 32) == call)) break;
    if ((spins & 63u) == 0) {  // the clock, now and then: a poll of host memory takes ~1 us anyway
      const uint64_t now = global_timer_ns();
      if (spins == 0) since = now;
      idle_out = __shfl_sync(0xffffffffu, now - since > r.linger_ns, 0);
      if (idle_out) break;
    }
  }
  uint32_t word = (uint32_t)v;
  if (idle_out) word = lane == 0 ? (uint32_t)kResidentExit : 0u;
  if (mine) {
    *(volatile uint64_t *)&state->resident_call[lane] = (uint64_t)relay_flag(call, r.epoch) << 32 | word;
    w[lane] = word;
  }
  return idle_out;
}

__global__ void __launch_bounds__(kThreads, 1) resident_kernel(const __grid_constant__ ResidentArgs r) {
  TeamState *state = team_state(r.team.ws[r.team.rank]);
  __shared__ uint32_t words[kCallWords];
  __shared__ LLArgs a;  // the call's arguments, indexed by peer: kept out of local memory
  const size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, gstride = (size_t)gridDim.x * blockDim.x;
  for (uint32_t call = r.start + 1;; ++call) {
    if (threadIdx.x < 32) fetch_call(r, state, call, words);
    __syncthreads();
    const ResidentCall c = read_call(words);
    if (c.kind == kResidentExit) {
      if (blockIdx.x == 0 && threadIdx.x == 0) {
        __threadfence_system();
        *(volatile uint32_t *)&r.box->exited = r.epoch;
      }
      return;
    }
    if (threadIdx.x == 0) {
      a = r.team;
      a.send = (const char *)c.send;
      a.recv = (char *)c.recv;
      a.mode = (int)c.mode;
      a.piece_bytes = c.piece_bytes;
    }
    __syncthreads();
    const uint32_t seq = ll_sequence_begin(state);
    ll_reuse_guard(state, a.rank, a.nranks, seq, a.timeout_ns);
    auto exchange = [&](auto t, auto o, int) {
      ll_exchange<typename decltype(t)::type, typename decltype(o)::type>(a, seq, gid, gstride);
    };
    if (c.mode == kLLAllgather) visit_copy((int)c.dtype, exchange);
    else visit_reduce((int)c.dtype, (int)c.op, exchange);
    // Its first __syncthreads also keeps `words` and `a` from being rewritten while a thread reads them.
    ll_sequence_publish(state, seq, false, &r.box->done, call);
  }
}

}  // namespace mg
