// resident_kernel.cuh: a kernel that stays running between blocking calls and takes each one from a
// mailbox in host memory, so a blocking collective in the LL or LL128 protocol costs no launch and no
// stream synchronization. Blocking calls of the all-to-all family with plain blocks run here too
// (exchange.cu decides): their byte ranges per peer come in the mailbox's table, and block ch of the
// call runs the exchange's channel ch (exchange_kernel.cuh), so a 1 KB Alltoall costs the mailbox's
// round trip instead of a launch and its wait.
//
// Why: a blocking call of a launched kernel costs its launch, the GPU starting it and the host
// waiting for its end: 8.3-9.7 us for an empty kernel on the 4x H200 host (benchmarks/launch_floor.cu),
// against 3.5-3.6 us for the same round trip through mapped host memory to a kernel already running.
// Small and medium messages are mostly that latency, so the blocking LL calls (Allreduce, Reduce,
// Reduce_scatter_block and Allgather with pieces up to 64 KiB) and LL128 calls (those and Bcast, up
// to MPIGPU_RESIDENT_MAX_BYTES), and a one-rank team's out-of-place copies up to that size, run here
// whenever the caller's stream has nothing queued
// (collectives.cu and resident.cu decide; a call with work queued before it launches as usual, in
// stream order; the check, cudaStreamQuery, costs 1.3 us).
//
// Protocol, host to kernel. The host writes a call into ResidentBox::call as kCallWords 64-bit words,
// each 32 bits of the call and the call's number (1, 2, ... per team), as the LL protocol pairs data
// and flag: a word is read whole, so a reader that sees every word's number sees the whole call, with
// no fence and one read of host memory. Only the first block's first warp polls host memory (eight
// blocks polling it took 21.8-35.3 us per round trip instead of 3.5, launch_floor.cu).
//
// Blocks. A call runs on the first resident_blocks_for(call) blocks of the instance's grid of
// MPIGPU_RESIDENT_BLOCKS: one 16-byte vector per thread (LL) or four lines per warp (LL128), so a
// 4 KiB Allreduce runs on block 0 alone, a 64 KiB one on 16 blocks (LL128 lines of 240 KiB or more
// take all 64). Block 0 relays a call
// that needs other blocks to them through TeamState::resident_call in device memory, in the same
// format with the number doubled and the instance's parity added, so a word left by the previous
// instance never matches. The other blocks take the newest call relayed (await_call), run it if it
// needs them, and otherwise go back to the relay. So a small call wakes no block but the first and
// waits for no other, and blocks that a call does not need never hold it up.
//
// Kernel to host. The call's blocks run its LL or LL128 form of the direct algorithm (line_kernel.cuh:
// any number of blocks runs the same protocol, so a peer whose call was launched, on another grid,
// meets this one) and the last of them out writes the call's number into ResidentBox::done after a
// system-scope fence. The host spins on it. The next call's words are written only after that, when
// block 0, their only reader, is done with the current ones.
//
// Lifetime. Each call tells the instance how long to wait for the next one (ResidentCall::linger_us:
// twice the recent gaps between the program's calls, at most MPIGPU_RESIDENT_US, resident.cu). With
// no call by then it returns (the first block relays an exit and writes its epoch into
// ResidentBox::exited), so a device-wide synchronization by the program, and a kernel that needs the
// instance's SMs, wait at most that long for it. The host launches a new instance at its next call
// that does not come alone; if it rang a call just as an instance gave up, it sees `exited`, waits
// for the instance to end and launches another, which starts at that call (ResidentArgs::start). An
// exit call, which takes a number of its own, ends an instance before the team launches a direct or
// ring kernel or a blocking call whose stream is busy (resident_stop) and at team release.
#pragma once
#include "dispatch.cuh"
#include "exchange_kernel.cuh"
#include "resident_call.cuh"
#include "single_rank.cuh"

namespace mg {

struct ResidentArgs {
  LineArgs team;      // the team's fields (workspaces, layout, rank, watch); a call brings the rest
  ResidentBox *box;   // device address of the mapped mailbox
  uint32_t start;     // number of the last call completed before this instance: it takes start + 1 first
  uint32_t epoch;     // instances launched on this team, this one included
  uint64_t linger_ns; // returns after this long without a first call (later: each call's linger_us)
  size_t channel_bytes;  // an exchange pair's bytes per channel (ExchangeArgs::channel_bytes)
  size_t ll_bytes;       // an exchange's largest pair in the LL format (ExchangeArgs::ll_bytes)
};

__device__ __forceinline__ uint64_t ld_relaxed_sys_u64(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t relay_flag(uint32_t call, uint32_t epoch) { return call * 2u + (epoch & 1u); }

// Warp 0 of block 0: call `call` from the mailbox into w (kCallWords words), or after linger_ns with
// no call an exit; then relayed to the other blocks if the call needs them (an exit needs them all).
__device__ __forceinline__ void fetch_call(const ResidentArgs &r, TeamState *state, uint32_t call, uint64_t linger_ns,
                                           uint32_t *w) {
  const int lane = threadIdx.x;
  const bool mine = lane < kCallWords;
  uint64_t v = 0;
  bool idle_out = false;
  const uint64_t since = global_timer_ns();
  for (;;) {
    if (mine) v = ld_relaxed_sys_u64(&r.box->call[lane]);
    if (__all_sync(0xffffffffu, !mine || (uint32_t)(v >> 32) == call)) break;
    // The clock at every poll (a poll of host memory takes ~1 us), so the instance returns within
    // about a microsecond of linger_ns: a program's device-wide synchronization waits that long.
    idle_out = __shfl_sync(0xffffffffu, global_timer_ns() - since > linger_ns, 0);
    if (idle_out) break;
  }
  uint32_t word = (uint32_t)v;
  if (idle_out) word = lane == 0 ? (uint32_t)kResidentExit : 0u;
  if (mine) w[lane] = word;
  __syncwarp();
  const ResidentCall c = read_call(w);
  if (mine && (c.kind == kResidentExit || resident_blocks_for(c, gridDim.x) > 1))
    *(volatile uint64_t *)&state->resident_call[lane] = (uint64_t)relay_flag(call, r.epoch) << 32 | word;
}

// Warp 0 of another block: the first call numbered `want` or later that the relay holds, into w;
// returns its number. Calls before it that block 0 did not relay, or relayed and replaced while
// this block was still busy, did not need this block (block 0 relays a call only after the host saw
// the one before it complete, which needed every block it ran on). A call is taken when all its
// words carry one flag of this instance's parity: the relay of an instance before, which has the
// other parity or lower numbers, never matches, nor does a relay caught halfway through a rewrite.
__device__ __forceinline__ uint32_t await_call(const ResidentArgs &r, TeamState *state, uint32_t want, uint32_t *w) {
  const int lane = threadIdx.x;
  const bool mine = lane < kCallWords;
  const uint32_t lo = relay_flag(want, r.epoch);
  uint64_t v = 0;
  uint32_t f = 0;
  for (;;) {
    if (mine) v = *(volatile uint64_t *)&state->resident_call[lane];
    f = __shfl_sync(0xffffffffu, (uint32_t)(v >> 32), 0);
    const uint32_t ahead = f - lo;  // twice the calls past `want`, if the parity is this instance's
    if (__all_sync(0xffffffffu, !mine || (uint32_t)(v >> 32) == f) && (ahead & 1u) == 0 && (int32_t)ahead >= 0)
      break;
  }
  if (mine) w[lane] = (uint32_t)v;
  return want + ((f - lo) >> 1);
}

// Warp 0 of a block that runs exchange call `call`: its byte ranges from the mailbox's table into
// `table`. The host wrote them before the call's words, each with the call's number, so a word of an
// earlier call is never taken.
__device__ __forceinline__ void fetch_table(const ResidentArgs &r, uint32_t call, uint32_t *table) {
  const int lane = threadIdx.x;
  const bool mine = lane < kTableWords;
  uint64_t v = 0;
  for (;;) {
    if (mine) v = ld_relaxed_sys_u64(&r.box->table[lane]);
    if (__all_sync(0xffffffffu, !mine || (uint32_t)(v >> 32) == call)) break;
  }
  if (mine) table[lane] = (uint32_t)v;
}

// The end of an exchange call on each of its nblocks blocks: the last one out tells the host, as
// ll_sequence_publish does for the LL family, with no sequence number to move (the exchange counts
// its steps per connection). Its first __syncthreads keeps the inbox from being rewritten while a
// thread reads it.
__device__ __forceinline__ void resident_arrive(TeamState *state, uint32_t nblocks, uint32_t *host_done,
                                                uint32_t call) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&state->ll_arrived, 1u) == nblocks - 1) {
      state->ll_arrived = 0;
      __threadfence_system();
      *(volatile uint32_t *)host_done = call;
    }
  }
}

// An exchange call, by each of its blocks: its arguments into x (shared memory, indexed by peer), then
// channel blockIdx.x, as the launched exchange_kernel's block of that number runs it. Called, not
// inlined: inlined, the resident kernel's spills grew from 896 / 1224 B (stores / loads) to 968 / 1368
// (docs/kernel-registers.md).
static __device__ __noinline__ void resident_exchange(const ResidentArgs &r, const ResidentCall &c,
                                                      const uint32_t *table, ExchangeArgs &x, uint32_t nblocks,
                                                      uint32_t call) {
  const int t = threadIdx.x;
  if (t < MG_MAX_RANKS) {
    x.ws[t] = r.team.ws[t];
    x.send_bytes[t] = table[t];
    x.send_off[t] = table[MG_MAX_RANKS + t];
    x.recv_bytes[t] = table[2 * MG_MAX_RANKS + t];
    x.recv_off[t] = table[3 * MG_MAX_RANKS + t];
  }
  if (t == 0) {
    x.send = (const char *)c.send;
    x.recv = (char *)c.recv;
    x.layout = r.team.layout;
    x.rank = r.team.rank;
    x.nranks = r.team.nranks;
    x.channel_bytes = r.channel_bytes;
    x.ll_bytes = r.ll_bytes;
    x.drain = MG_DRAIN_ROUNDS;  // exchange_body<false> drains in rounds (registers)
    x.pull = c.mode != 0u;      // resident_exchange_of
    x.stagger = false;          // one channel, channel 0: its rounds are the plain ones either way
    x.watch = r.team.watch;
  }
  __syncthreads();
  exchange_body<false>(x, nullptr, (int)blockIdx.x);
  resident_arrive(team_state(r.team.ws[r.team.rank]), nblocks, &r.box->done, call);
}

// Where a resident kernel's loop stands: the number of the last call taken, (block 0) how long to wait
// for the next, and the call taken with the blocks it runs on.
struct ResidentCursor {
  uint32_t call;
  uint64_t linger_ns;
  ResidentCall c;
  uint32_t nblocks;
};

// A block's copy of the call being taken (shared memory): its words and its number.
struct ResidentInbox {
  uint32_t words[kCallWords];
  uint32_t taken;
  uint32_t table[kTableWords];  // an exchange's byte ranges (fetch_table)
};

enum ResidentStep { kRunCall, kSkipCall, kExitKernel };

// One turn of every resident kernel's loop: block 0 takes the next call from the mailbox (fetch_call),
// the others from the relay (await_call), into the inbox and `cur`. kExitKernel: return (block 0
// has told the host); kSkipCall: this block is not among the call's blocks (go back for the next);
// kRunCall: run it, ending with ll_sequence_publish (whose first __syncthreads also keeps the inbox
// from being rewritten while a thread reads it).
__device__ __forceinline__ ResidentStep next_call(const ResidentArgs &r, TeamState *state, ResidentInbox &in,
                                                  ResidentCursor &cur) {
  uint32_t call = cur.call + 1;
  if (threadIdx.x < 32) {
    if (blockIdx.x == 0) fetch_call(r, state, call, cur.linger_ns, in.words);
    else call = await_call(r, state, call, in.words);
    if (threadIdx.x == 0) in.taken = call;
  }
  __syncthreads();
  cur.call = in.taken;
  const ResidentCall c = cur.c = read_call(in.words);
  cur.linger_ns = (uint64_t)c.linger_us * 1000u;
  if (c.kind == kResidentExit) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      __threadfence_system();
      *(volatile uint32_t *)&r.box->exited = r.epoch;
    }
    return kExitKernel;
  }
  cur.nblocks = resident_blocks_for(c, gridDim.x);
  if (blockIdx.x >= cur.nblocks) {  // not needed: back to the relay, once every thread has read the inbox
    __syncthreads();
    return kSkipCall;
  }
  if (c.kind == kResidentExchange) {
    if (threadIdx.x < 32) fetch_table(r, cur.call, in.table);
    __syncthreads();
  }
  return kRunCall;
}

// One block per SM: with both protocols' bodies this kernel takes every register an SM gives a
// block (255 a thread, some spilled to L1; docs/kernel-registers.md). The launched kernels run on
// the SMs the instance leaves free (LL128 blocks take one SM each: launch_line).
__global__ void __launch_bounds__(kThreads, 1) resident_kernel(const __grid_constant__ ResidentArgs r) {
  TeamState *state = team_state(r.team.ws[r.team.rank]);
  __shared__ ResidentInbox inbox;
  // The call's arguments, indexed by peer: kept out of local memory.
  __shared__ union { LineArgs line; ExchangeArgs x; } a;
  ResidentCursor cur{r.start, r.linger_ns};
  for (ResidentStep step; (step = next_call(r, state, inbox, cur)) != kExitKernel;) {
    if (step == kSkipCall) continue;
    const ResidentCall &c = cur.c;
    const uint32_t nblocks = cur.nblocks;
    if (c.kind == kResidentExchange) {
      resident_exchange(r, c, inbox.table, a.x, nblocks, cur.call);
      continue;
    }
    const bool ll = c.kind == kResidentLL;
    if (threadIdx.x == 0) {
      LineArgs &b = a.line;
      b = r.team;
      b.send = (const char *)c.send;
      b.recv = (char *)c.recv;
      b.mode = (int)c.mode;
      b.root = (int)c.root;
      b.block_bytes = c.bytes;
      b.total_bytes = c.total;
      b.split_phase0 = (int)c.split;
      b.form = line_form(b);
    }
    __syncthreads();
    const uint32_t seq = ll_sequence_begin(state);
    // A call that stops (protocol.cuh: faults) still ends here and writes `done`; the host then stops
    // the instance (resident.cu).
    bool dead = ll_reuse_guard(state, r.team, seq, call_enter(state, blockIdx.x == 0));
    const RuntimeReduce reduce{(int)c.dtype, (int)c.op};
    if (ll) {
      if (!dead) dead = !line_exchange<LLProto>(a.line, seq, reduce, blockIdx.x, nblocks);
    } else {
      dead = __any_sync(0xffffffffu, dead);  // LL128 warps stop as a whole
      if (!dead) dead = !line_exchange<LL128Proto>(a.line, seq, reduce, blockIdx.x, nblocks);
    }
    // Its first __syncthreads also keeps `words` and `a` from being rewritten while a thread reads them.
    ll_sequence_publish(state, r.team.watch, seq, nblocks, dead, !ll && direct_is_bcast((int)c.mode), &r.box->done,
                        cur.call);
  }
}

// A one-rank team's kernel (launched instead of resident_kernel): its calls are copies, with no peers
// and no protocol. A kernel of its own, so the copy keeps kCopyVectorsPerThread reads in flight per
// thread without taking registers from the protocols' bodies (in resident_kernel it raised their
// spill loads from 1208 to 1556 bytes, sm_90).
__global__ void __launch_bounds__(kThreads) resident_copy_kernel(const __grid_constant__ ResidentArgs r) {
  TeamState *state = team_state(r.team.ws[r.team.rank]);
  __shared__ ResidentInbox inbox;
  ResidentCursor cur{r.start, r.linger_ns};
  for (ResidentStep step; (step = next_call(r, state, inbox, cur)) != kExitKernel;) {
    if (step == kSkipCall) continue;
    copy_span<kCopyVectorsPerThread>((uintptr_t)cur.c.recv, (uintptr_t)cur.c.send, cur.c.bytes,
                                     (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)cur.nblocks * blockDim.x);
    __threadfence();
    ll_sequence_publish(state, r.team.watch, ll_sequence_begin(state), cur.nblocks, false, false, &r.box->done,
                        cur.call);
  }
}

}  // namespace mg
