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

static const double kHopUs = 3.0;                  // one flag round through NVLink + block sync
static const double kPushBytesPerUs = 340e3;       // sustained NVLink stores per GPU (~340 GB/s)
static const size_t kBytesPerChannel = 32 * 1024;  // below this per channel, more blocks add latency
static const int kDefaultChannels = 128;  // 256 MB: 317 GB/s at 128 channels, 268 at 64 (32 KiB chunks)
// Widest step of one channel's whole span, in slots (the end of mg_select). 4x H200, us per call,
// 32 KiB slots x 8 (default) against larger slots (MPIGPU_CHUNK_BYTES 64 / 96 / 128 / 256 KiB, so
// the span is one step), one session: Allreduce 24 MiB (2 steps) 174 vs 148-157, 32 MiB (2) 222
// (204-216 in two more runs) vs 197-208, 48 MiB (3) 302 vs 264-327 (median 276); Reduce_scatter_block
// 24 MiB 101 vs 82-94, 32 MiB 134 (127-133) vs 102-112, 48 MiB 179 vs 153-159. At 64 MiB (4 steps,
// stages split) one step of 128 KiB is not better: Allreduce 351 vs 378-387, Reduce_scatter_block
// 202 vs 187-200. Allgather (no reduce stage) gained nothing: 24 / 32 / 48 MiB 88 / 103 / 144 vs
// 84-90 / 103-111 / 146-154. 2x H200, 16 MiB (2 steps): Allreduce 87 vs 74, Reduce_scatter_block 57 vs 52.
// Four slots (the most a default FIFO of 8 allows) against four steps of one slot, the same 32 KiB
// slots (engine_probe.py --wide: 128 channels, six interleaved rounds, median blocking us): 4x H200
// Allreduce two-shot 56 MiB 305.0 -> 303.4, 64 MiB 342.6 -> 336.1; Reduce_scatter_block 56 MiB
// 177.1 -> 167.3, 64 MiB 195.6 -> 185.5; 2 ranks Allreduce 28 MiB 122.3 -> 113.3, 32 MiB 133.0 ->
// 124.5; Reduce_scatter_block 28 MiB 85.8 -> 76.4, 32 MiB 94.2 -> 84.2.
static const size_t kMaxFusedSlots = 4;
static const double kTwoRankTwoShotBytes = 4 * 1024 * 1024;  // 2 ranks: Allreduce two-shot from here (below)
// Reduce below this runs as the LL or LL128 Allreduce forms where they apply, with no output off the
// root (every rank still receives from every other, which those protocols' reuse needs); from it, on
// 3+ ranks, the pipelined chain (ring_kernel.cuh): the root's inbound links carry the message once,
// where two-shot brings (n-1)/n of it in twice and one-shot n-1 times. 4x H200, engine probe, busbw
// GB/s, chain with one ring per channel (128 channels) vs the direct form the model picked: 1 MiB
// 53.8 / 38.4, 4 MiB 126.5 / 97.4, 16 MiB 205.7 / 167.1, 64 MiB 233.2 / 218.2, 256 MiB 252.4 /
// 232.5; with two rings per channel (ring_kernel), run as the model runs it (bytes / 32 KiB
// channels, at most 128): 50.4 / 140.2 / 219.1 / 266.1 / 305.7. Against the Allreduce's LL128
// two-shot, 4x H200, blocking (us, chain / LL128 two-shot): 1 MiB 21.5 / 21.3 (one call), 2 MiB
// 24.8 / 31.1 and 4 MiB 31.4 / 44.2 (two calls); the direct Reduce, one fenced fan-in to the root,
// took 25-32 us at 1 KiB - 1 MiB against 17-22 us for the Allreduce forms.
static const double kReduceChainMinBytes = 1024 * 1024;
// Bcast and Reduce on 2 ranks take the chain (root -> other, other -> root) from here: the same
// bytes as the direct one-shot, but each channel keeps two steps in flight (ring_kernel). 2x H200,
// us per call, chain / direct / NCCL: Bcast 16 MiB 65.2 / 65.5 / 70.2, 64 MiB 208.3 / 218.8 / 210.8,
// 256 MiB 760.3 / 833.6 / 756.7; Reduce 16 MiB 66.8 / 66.7, 64 MiB 210.7 / 221.1 / 208.7,
// 256 MiB 765.1 / 833.4 / 759.3.
static const double kTwoRankChainBytes = 64 * 1024 * 1024;
// Largest per-peer piece that AUTO sends with the low-latency protocol: below it one NVLink store per
// word beats a fenced step (the protocol moves 2 bytes per data byte, so it loses on bandwidth).
// Against LL128 at 1-64 KiB (4x H200, blocking us, forced forms interleaved in one call, two runs
// each): Allreduce, Reduce_scatter_block and Allgather within 1 us of each other either way (the
// spread between runs); Allreduce 64 KiB (a 64 KiB piece, past this limit) 18.4-19.7 / 17.3-18.2.
static const size_t kLLMaxAutoBytes = 32 * 1024;
// With a resident kernel (MPIGPU_RESIDENT_US > 0, the same on every rank) LL runs to its largest
// piece: a blocking call then costs no launch (resident_kernel.cuh), which outweighs LL's extra
// bytes up to 64 KiB (4x H200, blocking, Allreduce with a 64 KiB piece, same session: LL128 launched
// 17.5 us, LL resident 13.5; 2 ranks 16.1 and 10.2); a call launched instead (work queued before it,
// stream=) loses ~1 us there (kLLMaxAutoBytes).
static const size_t kLLResidentMaxAutoBytes = MG_LL_MAX_BYTES;
// The 128-byte-line protocol (LL128) from where LL stops, while a piece fits the team's areas
// (ll128_bytes, MPIGPU_LL128_BYTES): Allreduce one-shot up to 256 KiB (2 MiB on 2 ranks, where
// one-shot and two-shot store the same bytes and one-shot takes one hop: 2 ranks of the 4x H200
// host, blocking us, one-shot / two-shot, three calls: 512 KiB 18.8 / 20.3, 21.4 / 19.8, 16.1 / 17.3;
// 1 MiB 21.7 / 23.1, 21.8 / 22.9, 18.1 / 20.8; 2 MiB 26.1 / 27.9, 26.1 / 27.2, 23.6 / 26.6), two-shot
// up to 8 MiB;
// Reduce_scatter_block and Allgather while a block is at most 2 MiB. 4x H200 (engine probe, best
// channel count, busbw GB/s): Allreduce 128 KiB one-shot 13.2 vs two-shot 10.8 vs direct 9.3;
// 256 KiB 23.4 / 22.7 / 17.0; 1 MiB 60.9 / 74.7 / 50.6; two-shot vs direct (peers in rotated order)
// 8 MiB 202.3 / 194.0, 16 MiB 226.1 / 245.7; Reduce_scatter_block 8 MiB 163.3 / 154.1, 16 MiB
// 196.4 / 210.7; Allgather 8 MiB 165.3 / 157.5, 16 MiB 198.5 / 209.5 (16 MiB areas, `--ll128`).
static const size_t kLL128OneShotMaxAutoBytes = 256 * 1024;
static const size_t kLL128TwoShotMaxAutoBytes = 8 * 1024 * 1024;
static const size_t kLL128BlockMaxAutoBytes = 2 * 1024 * 1024;
// Lines per channel. LL128 is latency-bound per warp (each pass waits for its lines), so more
// channels always helped in the probe: from 128 KiB up the best count was 96-128.
static const size_t kLL128LinesPerChannel = 4;
// Bcast in lines: one-shot (the root stores every line n - 1 times) up to 256 KiB, then the
// scatter form up to 16 MiB while a shard fits; on 2 ranks the two are the same and one-shot runs
// while it fits. 4x H200, busbw at the best channel count, one-shot / scatter / direct: 128 KiB
// 10.2 / 9.0 / 8.9, 256 KiB 19.4 / 18.0 / 16.7, 512 KiB 34.0 / 36.3 / 28.4, 1 MiB 51.6 / 66.3 / 46.6,
// 4 MiB - / 166.9 / 105.0; with 16 MiB areas, scatter / direct: 8 MiB 215.8 / 195.6, 16 MiB
// 240.5 / 226.3, 32 MiB 249.3 / 261.5.
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
        // all of B on both ranks where two-shot reduces half on each: 2x H200, 128 channels,
        // two-shot vs one-shot 121 / 213 / 285 / 311 GB/s vs 121 / 202 / 225 / 246 at 4 / 16 / 64 /
        // 256 MiB. Bcast and Reduce keep one-shot (one hop).
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
  // cut_into_shards cuts them in elements), blocks the user's count.
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
  // 4-16 MiB) measured slower at every size and channel count, e.g. 16 MiB Allreduce at 128
  // channels: 188 / 187 / 207 GB/s with 8 / 16 / 32 KiB steps (engine probe --chunks).
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
