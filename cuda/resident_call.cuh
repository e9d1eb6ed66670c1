// resident_call.cuh: the resident kernel's mailbox and the format of a call in it, shared by the host
// (collectives.cu fills a call from its LL or LL128 plan, resident.cu rings it) and the kernel
// (resident_kernel.cuh, which describes the protocol).
#pragma once
#include "line_kernel.cuh"

namespace mg {

constexpr int kCallWords = 8;  // one 64-byte line of host memory; TeamState::resident_call relays as many
static_assert(kCallWords <= (int)(sizeof(TeamState::resident_call) / sizeof(uint64_t)), "relay too small");

// kResidentCopy: a one-rank team's collective, a copy of `bytes` from send to recv (single_rank.cuh).
// kResidentExchange: a blocking call of the all-to-all family (exchange_kernel.cuh) on `bytes`
// channels, its per-peer byte ranges in ResidentBox::table.
enum ResidentKind : uint32_t {
  kResidentLL = 0, kResidentLL128 = 1, kResidentExit = 2, kResidentCopy = 3, kResidentExchange = 4
};

// An exchange's byte ranges, one 32-bit value per word (with the call's number, as the call's words):
// send_bytes, send_off, recv_bytes, recv_off, MG_MAX_RANKS each. One warp reads them in one pass.
constexpr int kTableWords = 4 * MG_MAX_RANKS;
static_assert(kTableWords <= 32, "one warp reads the table");

// 16-byte vectors each thread of a resident copy takes: 32 KiB a block, so a 4 KiB copy wakes one
// block and 2 MiB take 64.
constexpr int kCopyVectorsPerThread = 8;

// Pinned host memory mapped into the device; the host writes `call`, the kernel `done` and `exited`
// (on another 64-byte line, so the host's stores and the kernel's do not share one).
struct ResidentBox {
  uint64_t call[kCallWords];
  alignas(64) uint32_t done;  // number of the last call completed
  uint32_t exited;            // epoch of the last instance that returned
  alignas(64) uint64_t table[kTableWords];  // written by the host before the call's words (kResidentExchange)
};

// One call: its protocol (kind), its fields of LineArgs and its (dtype, op), which pick the body
// (dispatch.cuh), and how long the instance waits for the next call after it (resident.cu sets it from
// the gaps between the program's calls). Sizes fit 32 bits (collectives.cu, resident_form).
struct ResidentCall {
  uint32_t kind, mode, split, root, dtype, op;  // mode: an exchange's 1 where its slots lie at the sender
  uint64_t send, recv;
  uint32_t bytes;      // LL, LL128: block_bytes; exchange: its channels (blocks)
  uint32_t total;      // LL, LL128: total_bytes
  uint32_t linger_us;  // after this call: wait this long for the next one, then return
};

// Word i of a call's payload: kind | mode << 4 | split << 7 | root << 8 | dtype << 16 | op << 24,
// send, recv (two words each, low half first), bytes, total, linger_us.
__host__ __device__ inline uint32_t call_word(const ResidentCall &c, int i) {
  switch (i) {
    case 0: return c.kind | c.mode << 4 | c.split << 7 | c.root << 8 | c.dtype << 16 | c.op << 24;
    case 1: return (uint32_t)c.send;
    case 2: return (uint32_t)(c.send >> 32);
    case 3: return (uint32_t)c.recv;
    case 4: return (uint32_t)(c.recv >> 32);
    case 5: return c.bytes;
    case 6: return c.total;
    default: return c.linger_us;
  }
}

__host__ __device__ inline ResidentCall read_call(const uint32_t *w) {
  ResidentCall c;
  c.kind = w[0] & 0xfu;
  c.mode = (w[0] >> 4) & 0x7u;
  c.split = (w[0] >> 7) & 0x1u;
  c.root = (w[0] >> 8) & 0xffu;
  c.dtype = (w[0] >> 16) & 0xffu;
  c.op = w[0] >> 24;
  c.send = (uint64_t)w[2] << 32 | w[1];
  c.recv = (uint64_t)w[4] << 32 | w[3];
  c.bytes = w[5];
  c.total = w[6];
  c.linger_us = w[7];
  return c;
}

// Blocks of a resident instance's grid of `grid` that run call c: as many as give every thread one
// 16-byte vector of an LL piece, or every warp one group of four lines of an LL128 block (per warp
// share, where a two-shot call splits its stages: direct_run), at least one and at most the grid. The
// other blocks would have no work; left out, they neither wake for the call nor delay its end.
__host__ __device__ inline uint32_t resident_blocks_for(const ResidentCall &c, uint32_t grid) {
  size_t per_block, units;
  if (c.kind == kResidentLL) {
    units = LLProto::units(c.bytes);
    per_block = line_units_per_block<LLProto>(c.split != 0);
  } else if (c.kind == kResidentExchange) {
    units = c.bytes;
    per_block = 1;
  } else if (c.kind == kResidentCopy) {
    units = ((size_t)c.bytes + 15) / 16;
    per_block = (size_t)kThreads * kCopyVectorsPerThread;
  } else {
    units = LL128Proto::units(c.bytes);
    per_block = line_units_per_block<LL128Proto>(c.split != 0);
  }
  const size_t want = (units + per_block - 1) / per_block;
  return want < 1 ? 1u : want > grid ? grid : (uint32_t)want;
}

// A call of kind `kind` with no type, op or mode: from send to recv, `bytes` its one size field.
inline ResidentCall resident_transfer_of(ResidentKind kind, uintptr_t send, uintptr_t recv, uint32_t bytes) {
  ResidentCall c{};
  c.kind = kind;
  c.send = (uint64_t)send;
  c.recv = (uint64_t)recv;
  c.bytes = bytes;
  return c;
}

// A one-rank team's copy (collectives.cu, single_rank_wait); bytes fit 32 bits.
inline ResidentCall resident_copy_of(uintptr_t dst, uintptr_t src, size_t bytes) {
  return resident_transfer_of(kResidentCopy, src, dst, (uint32_t)bytes);
}

// A blocking exchange on `channels` channels (exchange.cu); its byte ranges go in the table.
inline ResidentCall resident_exchange_of(uintptr_t send, uintptr_t recv, int channels, bool pull) {
  ResidentCall c = resident_transfer_of(kResidentExchange, send, recv, (uint32_t)channels);
  c.mode = pull ? 1u : 0u;  // ExchangeArgs::pull: a launched peer's call has the same
  return c;
}

// The call of a line protocol's plan (collectives.cu, plan_line), LL or LL128 (kind).
inline ResidentCall resident_call_of(ResidentKind kind, const LineArgs &a, int dtype, int op) {
  ResidentCall c{};
  c.kind = kind;
  c.mode = (uint32_t)a.mode;
  c.split = (uint32_t)(a.split_phase0 != 0);
  c.root = (uint32_t)a.root;
  c.dtype = (uint32_t)dtype;
  c.op = (uint32_t)op;
  c.send = (uint64_t)(uintptr_t)a.send;
  c.recv = (uint64_t)(uintptr_t)a.recv;
  c.bytes = (uint32_t)a.block_bytes;
  c.total = (uint32_t)a.total_bytes;
  return c;
}

}  // namespace mg
