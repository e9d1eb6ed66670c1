// select.cu: the cost model that picks an algorithm, a channel count and a step size for a call.
//
// Allreduce, Reduce_scatter_block and Allgather use a protocol with the flags in the data while it
// fits: LL for pieces up to kLLMaxAutoBytes (kLLResidentMaxAutoBytes with a resident kernel),
// LL128 above; Reduce below 1 MiB runs as those Allreduce forms; Bcast uses LL128 (one-shot, then
// scatter); thresholds below, measured. Reduce on 3+ ranks from 1 MiB, and Bcast and Reduce on 2
// ranks from 64 MiB, take the chain (ring_kernel.cuh); the other ring forms take more hops than the
// direct forms on a full NVLink mesh for the same bytes per rank and measured as fast or slower there
// (docs/tuning.md), so they run only when asked for (MPIGPU_ALGO=ring). Otherwise the direct
// kernel's forms by this model: time(algo) = hops(algo) * kHopUs + bytes_out(algo) / kPushBytesPerUs,
// where bytes_out is what one rank must store to its peers: one-shot (n-1) * B per owner fan-out,
// two-shot 2 (n-1)/n * B. Constants are from the 4x H200 NVLink host (docs/tuning.md has the
// measurements behind them).
// MPIGPU_ALGO / MPIGPU_NCHANNELS override the choice; they arrive here through mg_call.
#include "team.cuh"
#include "kernel_table.cuh"

// The constants below are from the 4x H200 NVLink host; docs/tuning.md ("Cost-model constants") has
// the measurements behind each one.
static const double kHopUs = 3.0;                  // one flag round through NVLink + block sync
static const double kPushBytesPerUs = 340e3;       // sustained NVLink stores per GPU (~340 GB/s)
static const size_t kBytesPerChannel = 32 * 1024;  // below this per channel, more blocks add latency
static const int kDefaultChannels = 128;           // the most channels; 256 MB runs fastest at 128
// Widest step of one channel's whole span, in slots (the end of mg_select): a reduction whose channel
// would take 2-4 steps of one slot runs faster as one step over that many.
static const size_t kMaxFusedSlots = 4;
// 2 ranks: Allreduce two-shot from here, where one-shot (both reduce everything) falls behind.
static const double kTwoRankTwoShotBytes = 4 * 1024 * 1024;
// Reduce below this runs as the LL or LL128 Allreduce forms where they apply, with no output off the
// root (every rank still receives from every other, which those protocols' reuse needs); from it, on
// 3+ ranks, the pipelined chain (ring_kernel.cuh): the root's inbound links carry the message once,
// where two-shot brings (n-1)/n of it in twice and one-shot n-1 times.
static const double kReduceChainMinBytes = 1024 * 1024;
// Bcast and Reduce on 2 ranks take the chain (root -> other, other -> root) from here: the same
// bytes as the direct one-shot, but each channel keeps two steps in flight (ring_kernel).
static const double kTwoRankChainBytes = 64 * 1024 * 1024;
// Largest per-peer piece that AUTO sends with the low-latency protocol when calls are launched: below
// it one NVLink store per word beats a fenced step (LL moves 2 bytes per data byte, so it loses on
// bandwidth); against LL128 it is a tie up to 64 KiB.
static const size_t kLLMaxAutoBytes = 32 * 1024;
// With a resident kernel (MPIGPU_RESIDENT_US > 0, the same on every rank) LL runs to its largest
// piece: a blocking call then costs no launch (resident_kernel.cuh), which outweighs LL's extra bytes.
static const size_t kLLResidentMaxAutoBytes = MG_LL_MAX_BYTES;
// The 128-byte-line protocol (LL128) from where LL stops, while a piece fits the team's areas
// (ll128_bytes, MPIGPU_LL128_BYTES): Allreduce one-shot up to 256 KiB (on 2 ranks while the piece fits,
// where both forms store the same bytes and one-shot takes one hop), two-shot up to 8 MiB;
// Reduce_scatter_block and Allgather while a block is at most 2 MiB.
static const size_t kLL128OneShotMaxAutoBytes = 256 * 1024;
static const size_t kLL128TwoShotMaxAutoBytes = 8 * 1024 * 1024;
static const size_t kLL128BlockMaxAutoBytes = 2 * 1024 * 1024;
// Lines per channel. LL128 is latency-bound per warp (each pass waits for its lines), so more
// channels always helped: from 128 KiB up the best count was 96-128.
static const size_t kLL128LinesPerChannel = 4;
// Bcast in lines: one-shot (the root stores every line n - 1 times) up to 256 KiB, then the scatter
// form up to 16 MiB while a shard fits; on 2 ranks the two are the same and one-shot runs while it fits.
static const size_t kLL128BcastOneShotMaxAutoBytes = 256 * 1024;
static const size_t kLL128BcastScatterMaxAutoBytes = 16 * 1024 * 1024;
static size_t total_bytes(const mg_team *t, const mg_call *c) {
  const mg::KernelChoice k = mg::copy_kernel(c->dtype);
  const size_t es = (size_t)k.elem_size * k.mult;
  size_t n = (size_t)t->cfg.nranks;
  switch (c->coll) {
    case MG_REDUCE_SCATTER_BLOCK: case MG_ALLGATHER: return c->count * es * n;
    default: return c->count * es;
  }
}

// Bytes one rank sends to one peer in the low-latency protocol, 0 when it does not apply.
static size_t ll_piece_bytes(const mg_team *t, const mg_call *c) {
  if (c->coll == MG_BCAST) return 0;
  mg::KernelChoice k = mg::copy_kernel(c->dtype);
  return c->count * (size_t)k.elem_size * k.mult;
}

// Bytes one rank sends to one peer per phase in the 128-byte-line protocol (one-shot, or a shard of
// the two-shot Allreduce or the scatter Bcast), 0 when it does not apply (collective, 16-byte types,
// size).
static size_t ll128_piece_bytes(const mg_team *t, const mg_call *c, bool two) {
  const int n = t->cfg.nranks;
  const bool bcast = c->coll == MG_BCAST, allreduce = c->coll == MG_ALLREDUCE || c->coll == MG_REDUCE;
  if (two && !(allreduce || (bcast && n > 2))) return 0;
  mg::KernelChoice k = mg::kernels_for(c->coll, c->dtype, c->op);
  if (!k.ll128) return 0;
  size_t es = (size_t)k.elem_size, count = c->count * (size_t)k.mult;
  size_t bytes = two ? mg::ll128_shard_bytes(count, es, (size_t)(bcast ? n - 1 : n)) : count * es;
  return bytes <= t->layout.ll128_bytes ? bytes : 0;
}

static int ll128_channels(size_t piece) {
  int ch = (int)((mg::ll128_lines(piece) + kLL128LinesPerChannel - 1) / kLL128LinesPerChannel);
  return ch < 1 ? 1 : ch > kDefaultChannels ? kDefaultChannels : ch;
}

extern "C" int mg_select(const mg_team *t, mg_call *c) {
  const int n = t->cfg.nranks;
  const double B = (double)total_bytes(t, c);
  const size_t ll = ll_piece_bytes(t, c);
  if (c->algo == MG_ALGO_LL && (ll == 0 || ll > MG_LL_MAX_BYTES)) c->algo = MG_ALGO_AUTO;
  if (c->algo == MG_ALGO_AUTO && ll > 0 && ll <= (t->res.box ? kLLResidentMaxAutoBytes : kLLMaxAutoBytes))
    c->algo = MG_ALGO_LL;
  const size_t one = ll128_piece_bytes(t, c, false), two = ll128_piece_bytes(t, c, true);
  if (c->algo == MG_ALGO_LL128 && one == 0) c->algo = MG_ALGO_AUTO;
  if (c->algo == MG_ALGO_LL128_TWOSHOT && two == 0) c->algo = MG_ALGO_AUTO;
  if (c->algo == MG_ALGO_AUTO) {
    if (c->coll == MG_ALLREDUCE || (c->coll == MG_REDUCE && B < kReduceChainMinBytes)) {
      if (one && B <= (n <= 2 ? kLL128BlockMaxAutoBytes : kLL128OneShotMaxAutoBytes)) c->algo = MG_ALGO_LL128;
      else if (two && B <= kLL128TwoShotMaxAutoBytes) c->algo = MG_ALGO_LL128_TWOSHOT;
    } else if (c->coll == MG_BCAST) {
      if (one && B <= (n <= 2 ? kLL128BlockMaxAutoBytes : kLL128BcastOneShotMaxAutoBytes)) c->algo = MG_ALGO_LL128;
      else if (two && B <= kLL128BcastScatterMaxAutoBytes) c->algo = MG_ALGO_LL128_TWOSHOT;
    } else if (c->coll == MG_REDUCE_SCATTER_BLOCK || c->coll == MG_ALLGATHER) {
      if (one && one <= kLL128BlockMaxAutoBytes) c->algo = MG_ALGO_LL128;
    }  // a larger Reduce: the chain or the direct forms, below
  }
  if (c->algo == MG_ALGO_LL) {
    c->nchannels = (int)((ll + 16 * mg::kThreads - 1) / (16 * mg::kThreads));
    if (c->nchannels < 1) c->nchannels = 1;
    return 0;
  }
  if (c->algo == MG_ALGO_LL128 || c->algo == MG_ALGO_LL128_TWOSHOT) {
    if (c->nchannels <= 0) c->nchannels = ll128_channels(c->algo == MG_ALGO_LL128_TWOSHOT ? two : one);
    if (c->nchannels > t->cfg.max_channels) c->nchannels = t->cfg.max_channels;
    return 0;
  }
  if (c->algo == MG_ALGO_AUTO && ((c->coll == MG_REDUCE && n >= 3 && B >= kReduceChainMinBytes) ||
                                   ((c->coll == MG_BCAST || c->coll == MG_REDUCE) && n == 2 &&
                                    B >= kTwoRankChainBytes)))
    c->algo = MG_ALGO_RING;
  if (c->algo == MG_ALGO_AUTO) {
    switch (c->coll) {
      case MG_ALLREDUCE: case MG_REDUCE: case MG_BCAST: {
        // Bcast's one-shot root pushes (n-1)B; its scatter-forward form moves B per rank in 2 hops.
        double one = kHopUs + (n - 1) * B / kPushBytesPerUs;
        double two_bytes = c->coll == MG_BCAST ? B : 2.0 * (n - 1) / n * B;
        double two = 2 * kHopUs + two_bytes / kPushBytesPerUs;
        // On 2 ranks both forms store B per rank, so the model ties; but one-shot Allreduce reduces
        // all of B on both ranks where two-shot reduces half on each (kTwoRankTwoShotBytes). Bcast
        // and Reduce keep one-shot (one hop).
        if (n == 2)
          c->algo = c->coll == MG_ALLREDUCE && B >= kTwoRankTwoShotBytes ? MG_ALGO_TWOSHOT : MG_ALGO_ONESHOT;
        else
          c->algo = one <= two ? MG_ALGO_ONESHOT : MG_ALGO_TWOSHOT;
        break;
      }
      default: c->algo = MG_ALGO_ONESHOT;  // Reduce_scatter_block and Allgather have one form
    }
  }
  // Bytes of one owner's shard (the ring's shards and blocks alike; its chains carry the whole
  // message): what the channel count divides. Shards are whole 16-byte vectors (vector_share, as
  // the plans cut them in elements), blocks the user's count.
  size_t per_owner = (size_t)B;
  if (c->algo == MG_ALGO_TWOSHOT || (c->algo == MG_ALGO_RING && c->coll == MG_ALLREDUCE))
    per_owner = mg::vector_share(per_owner, (size_t)(c->coll == MG_BCAST ? n - 1 : n), 16);
  else if (c->coll == MG_REDUCE_SCATTER_BLOCK || c->coll == MG_ALLGATHER)
    per_owner /= (size_t)n;
  if (c->nchannels <= 0) {
    int ch = (int)((per_owner + kBytesPerChannel - 1) / kBytesPerChannel);
    if (ch < 1) ch = 1;
    if (ch > kDefaultChannels) ch = kDefaultChannels;
    c->nchannels = ch;
  }
  if (c->nchannels > t->cfg.max_channels) c->nchannels = t->cfg.max_channels;
  // Steps of a whole slot: smaller steps (to give a channel enough steps to split its stages at
  // 4-16 MiB) measured slower at every size and channel count (docs/tuning.md, MPIGPU_CHUNK_BYTES).
  // A reduction whose channels would take 2 .. kMaxFusedSlots steps runs one step over that many
  // consecutive slots instead (cut_into_steps): below MPIGPU_SPLIT_STEPS its stages cannot overlap,
  // and each extra step costs flag rounds that a wider step does not. A channel's span is the
  // vector_share that cut_into_steps cuts, so both count the same slots.
  const size_t slot = t->layout.slot_bytes;
  if (c->chunk_bytes == 0) {
    c->chunk_bytes = slot;
    const size_t per_channel = mg::vector_share(per_owner, (size_t)c->nchannels, 16);
    const size_t slots = ceil_div(per_channel, slot);
    if ((c->coll == MG_ALLREDUCE || c->coll == MG_REDUCE_SCATTER_BLOCK) &&
        (c->algo == MG_ALGO_ONESHOT || c->algo == MG_ALGO_TWOSHOT) && slots > 1 && slots <= kMaxFusedSlots &&
        slots <= (size_t)t->layout.nslots / 2)
      c->chunk_bytes = slots * slot;
  }
  return 0;
}
