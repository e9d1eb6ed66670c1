// direct_form.cuh: the forms of the direct algorithm (direct_kernel.cuh), one table for every protocol:
// which ranks send, own and gather in a form, and where each owner's piece lies.
//
// A form is three rank sets and a shard geometry:
//   contrib: ranks whose input goes into each shard (all ranks for reductions, the root for Bcast;
//            Allgather: each owner alone, self_source);
//   owners:  ranks that each produce one shard of the result;
//   gather:  ranks that receive every owner's shard (phase 2), e.g. everyone for a two-shot Allreduce.
// Owner j's shard is shard owner_index(j): shard k holds shard_extent(len_total, len_stride, shard_len, k)
// units, from k * in_stride in a contributor's input and k * out_stride in the output. Units are the
// plan's: elements of the storage type (Simple) or bytes (LL, LL128).
#pragma once
#include <stdint.h>
#include "protocol.cuh"

namespace mg {

// The forms. LL runs the first three, LL128 the first six (both: Reduce as the Allreduce with no output
// off the root, since the areas' reuse needs every rank to hear from every other: line_kernel.cuh);
// Simple runs all. Values fit the resident call's three bits (resident_call.cuh), a line call's 0-5.
enum DirectMode {
  kDirectAllreduce = 0,      // one-shot: every input to every rank, each reduces the whole message
  kDirectReduceScatter = 1,  // block j of every input to rank j, which reduces it
  kDirectAllgather = 2,      // every input to every rank, block j of every output
  kDirectTwoShot = 3,        // shard k of every input to rank k, reduced there and sent to every rank
  kDirectBcast = 4,          // the root's message to every other rank
  kDirectBcastScatter = 5,   // the root's shard k to the k-th other rank, which forwards it to the others
  kDirectReduce = 6,         // one-shot to the root only
  kDirectTwoShotReduce = 7,  // two-shot, the shards gathered at the root only
};

__host__ __device__ inline bool direct_is_bcast(int mode) { return mode == kDirectBcast || mode == kDirectBcastScatter; }
// The forms only LL128 of the line protocols runs: two phases of areas (two-shot, scatter Bcast), or a
// receive with nothing of the receiver's own to combine (one-shot Bcast: LLProto has no such receive).
__host__ __device__ inline bool direct_needs_ll128(int mode) {
  return mode == kDirectTwoShot || mode == kDirectTwoShotReduce || direct_is_bcast(mode);
}

struct DirectForm {
  uint32_t contrib, owners, gather;
  int self_source;  // owners reduce their own input only (Allgather): no contribution travels
  size_t len_total, len_stride, shard_len, in_stride, out_stride;
  size_t span, chunk;  // units per channel of a shard, and per step of a span
  int nsteps;          // steps per channel
};

__device__ __forceinline__ int owner_index(uint32_t owners, int j) { return __popc(owners & ((1u << j) - 1u)); }

// Form `mode` of n ranks: `total` units in the message (Reduce_scatter_block and Allgather: in one block),
// shards of `shard` units (the two-shot and scatter forms). One channel of one step (the LL protocols'
// plan); Simple cuts the shards into channels and steps (collectives.cu, cut_into_steps).
__host__ __device__ inline DirectForm direct_form(int mode, int root, int n, size_t total, size_t shard) {
  const uint32_t all = n == 32 ? 0xffffffffu : (1u << n) - 1u, r = 1u << root;
  DirectForm f{};
  f.contrib = f.owners = all;
  f.len_total = f.shard_len = total;
  switch (mode) {
    case kDirectReduce: f.owners = r; break;
    case kDirectTwoShot:
    case kDirectTwoShotReduce:
      f.gather = mode == kDirectTwoShot ? all : r;
      f.shard_len = f.len_stride = f.in_stride = f.out_stride = shard;
      break;
    case kDirectReduceScatter: f.in_stride = total; break;
    case kDirectAllgather:
      f.self_source = 1;
      f.out_stride = total;
      f.gather = all;
      break;
    case kDirectBcast:
    case kDirectBcastScatter:
      f.contrib = r;
      f.owners = all & ~r;
      if (mode == kDirectBcastScatter) {
        f.shard_len = f.len_stride = f.in_stride = f.out_stride = shard;
        f.gather = f.owners;
      }
      break;
    default: break;  // kDirectAllreduce
  }
  f.span = f.chunk = f.shard_len;
  f.nsteps = 1;
  return f;
}

// Where step t of channel ch of owner j's piece lies (protocol.cuh's piece_at, by owner).
__device__ __forceinline__ Piece piece_of(const DirectForm &f, int j, int ch, int t) {
  return piece_at(f, (size_t)owner_index(f.owners, j), ch, t);
}

// Owner j's whole shard: its piece where a call is one step on one channel.
__device__ __forceinline__ Piece shard_of(const DirectForm &f, int j) {
  const size_t k = (size_t)owner_index(f.owners, j);
  return Piece{k * f.in_stride, k * f.out_stride, shard_extent(f.len_total, f.len_stride, f.shard_len, k)};
}

}  // namespace mg
