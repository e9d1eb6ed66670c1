// resident_kernel.cuh: a kernel that stays running between blocking calls and takes each one from a
// mailbox in host memory, so a blocking collective in the LL or LL128 protocol costs no launch and no
// stream synchronization.
//
// Why: a blocking call of a launched kernel costs its launch, the GPU starting it and the host
// waiting for its end: 8.3-9.7 us for an empty kernel on the 4x H200 host (benchmarks/launch_floor.cu),
// against 3.5-3.6 us for the same round trip through mapped host memory to a kernel already running.
// Small and medium messages are mostly that latency, so the blocking LL calls (Allreduce, Reduce,
// Reduce_scatter_block and Allgather with pieces up to 64 KiB) and LL128 calls (those and Bcast, up
// to MPIGPU_RESIDENT_MAX_BYTES) run here whenever the caller's stream has nothing queued
// (collectives.cu and resident.cu decide; a call with work queued before it launches as usual, in
// stream order; the check, cudaStreamQuery, costs 1.3 us).
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
// Kernel to host. Every block runs the call's LL or LL128 exchange (ll_kernel.cuh, ll128_kernel.cuh:
// any grid runs the same protocol, so a peer whose call was launched, on another grid, meets this
// one; the instance's grid is MPIGPU_RESIDENT_BLOCKS blocks) and the last block out writes the
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
#include "resident_call.cuh"

namespace mg {

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
// poll the relay.
__device__ __forceinline__ void fetch_call(const ResidentArgs &r, TeamState *state, uint32_t call, uint32_t *w) {
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
    return;
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
}

// One block per SM: with both protocols' bodies this kernel takes every register an SM gives a
// block (255 a thread, some spilled to L1; the launched LL and LL128 kernels take 48-124, so two of
// their blocks fit on each SM the instance leaves free).
__global__ void __launch_bounds__(kThreads, 1) resident_kernel(const __grid_constant__ ResidentArgs r) {
  TeamState *state = team_state(r.team.ws[r.team.rank]);
  __shared__ uint32_t words[kCallWords];
  // The call's arguments, indexed by peer: kept out of local memory.
  __shared__ union { LLArgs ll; LL128Args ll128; } a;
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
    const bool ll = c.kind == kResidentLL;
    if (threadIdx.x == 0) {
      if (ll) {
        a.ll = r.team;
        a.ll.send = (const char *)c.send;
        a.ll.recv = (char *)c.recv;
        a.ll.mode = (int)c.mode;
        a.ll.piece_bytes = c.bytes;
      } else {
        LL128Args &b = a.ll128;
        for (int k = 0; k < MG_MAX_RANKS; ++k) b.ws[k] = r.team.ws[k];
        b.send = (const char *)c.send;
        b.recv = (char *)c.recv;
        b.layout = r.team.layout;
        b.rank = r.team.rank;
        b.nranks = r.team.nranks;
        b.mode = (int)c.mode;
        b.root = (int)c.root;
        b.block_bytes = c.bytes;
        b.total_bytes = c.total;
        b.timeout_ns = r.team.timeout_ns;
        b.split_phase0 = (int)c.split;
      }
    }
    __syncthreads();
    const uint32_t seq = ll_sequence_begin(state);
    ll_reuse_guard(state, r.team.rank, r.team.nranks, seq, r.team.timeout_ns);
    const RuntimeReduce reduce{(int)c.dtype, (int)c.op};  // unused by the copies
    if (ll) ll_exchange(a.ll, seq, gid, gstride, reduce);
    else ll128_exchange(a.ll128, seq, reduce);
    // Its first __syncthreads also keeps `words` and `a` from being rewritten while a thread reads them.
    ll_sequence_publish(state, seq, !ll && ll128_is_bcast((int)c.mode), &r.box->done, call);
  }
}

}  // namespace mg
