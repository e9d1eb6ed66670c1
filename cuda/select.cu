// select.cu: the cost model that picks an algorithm and a channel count for a call.
//
// Symmetric collectives (Allreduce, Reduce_scatter_block, Allgather) use a protocol with the flags
// in the data while it fits: LL for pieces up to kLLMaxAutoBytes, LL128 above (thresholds below,
// measured). Beyond those, and for Bcast and Reduce, the direct kernel's forms by this model:
// time(algo) = hops(algo) * kHopUs + bytes_out(algo) / kPushBytesPerUs, where bytes_out is what one
// rank must store to its peers: one-shot (n-1) * B per owner fan-out, two-shot 2 (n-1)/n * B.
// Constants are from the 4x H200 NVLink host (docs/tuning.md has the measurements behind them).
// MPIGPU_ALGO / MPIGPU_NCHANNELS override the choice; they arrive here through mg_call.
#include "team.cuh"
#include "kernel_table.cuh"

static const double kHopUs = 3.0;                  // one flag round through NVLink + block sync
static const double kPushBytesPerUs = 340e3;       // sustained NVLink stores per GPU (~340 GB/s)
static const size_t kBytesPerChannel = 32 * 1024;  // below this per channel, more blocks add latency
static const int kDefaultChannels = 128;  // 256 MB: 317 GB/s at 128 channels, 268 at 64 (32 KiB chunks)
// Largest per-peer piece that AUTO sends with the low-latency protocol: below it one NVLink store per
// word beats a fenced step (the protocol moves 2 bytes per data byte, so it loses on bandwidth).
static const size_t kLLMaxAutoBytes = 32 * 1024;
// The 128-byte-line protocol (LL128) from where LL stops: Allreduce one-shot up to 256 KiB, two-shot
// up to 8 MiB (while a shard fits MG_LL128_MAX_BYTES); Reduce_scatter_block and Allgather while a
// block fits. 4x H200 (engine probe, best channel count, busbw GB/s): Allreduce 128 KiB one-shot
// 13.2 vs two-shot 10.8 vs direct 9.3; 256 KiB 23.4 / 22.7 / 17.0; 1 MiB 60.9 / 74.7 / 50.6;
// 8 MiB - / 194.7 / 169.8; Reduce_scatter_block 8 MiB 158.9 vs 126.6 direct; Allgather 159.9 vs 151.9.
static const size_t kLL128OneShotMaxAutoBytes = 256 * 1024;
static const size_t kLL128TwoShotMaxAutoBytes = 8 * 1024 * 1024;
// Lines per channel. LL128 is latency-bound per warp (each pass waits for its lines), so more
// channels always helped in the probe: from 128 KiB up the best count was 96-128.
static const size_t kLL128LinesPerChannel = 4;

static size_t total_bytes(const mg_team *t, const mg_call *c) {
  size_t es = mg::copy_kernel(c->dtype).elem_size * (size_t)mg::copy_kernel(c->dtype).mult;
  size_t n = (size_t)t->cfg.nranks;
  switch (c->coll) {
    case MG_REDUCE_SCATTER_BLOCK: case MG_ALLGATHER: return c->count * es * n;
    default: return c->count * es;
  }
}

// Bytes one rank sends to one peer in the low-latency protocol, 0 when it does not apply.
static size_t ll_piece_bytes(const mg_team *t, const mg_call *c) {
  if (c->coll != MG_ALLREDUCE && c->coll != MG_REDUCE_SCATTER_BLOCK && c->coll != MG_ALLGATHER) return 0;
  mg::KernelChoice k = mg::copy_kernel(c->dtype);
  return c->count * (size_t)k.elem_size * k.mult;
}

// Bytes one rank sends to one peer per phase in the 128-byte-line protocol (one-shot, or the
// two-shot Allreduce's shard), 0 when it does not apply (collective, 16-byte types, size).
static size_t ll128_piece_bytes(const mg_team *t, const mg_call *c, bool two) {
  if (c->coll != MG_ALLREDUCE && c->coll != MG_REDUCE_SCATTER_BLOCK && c->coll != MG_ALLGATHER) return 0;
  if (two && c->coll != MG_ALLREDUCE) return 0;
  mg::KernelChoice k = mg::kernels_for(c->coll, c->dtype, c->op);
  if (!k.ll128) return 0;
  size_t es = (size_t)k.elem_size, count = c->count * (size_t)k.mult;
  size_t bytes = two ? mg::ll128_shard_bytes(count, es, (size_t)t->cfg.nranks) : count * es;
  return bytes <= MG_LL128_MAX_BYTES ? bytes : 0;
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
  if (c->algo == MG_ALGO_AUTO && ll > 0 && ll <= kLLMaxAutoBytes) c->algo = MG_ALGO_LL;
  const size_t one = ll128_piece_bytes(t, c, false), two = ll128_piece_bytes(t, c, true);
  if (c->algo == MG_ALGO_LL128 && one == 0) c->algo = MG_ALGO_AUTO;
  if (c->algo == MG_ALGO_LL128_TWOSHOT && two == 0) c->algo = MG_ALGO_AUTO;
  if (c->algo == MG_ALGO_AUTO) {
    if (c->coll == MG_ALLREDUCE) {
      if (one && B <= kLL128OneShotMaxAutoBytes) c->algo = MG_ALGO_LL128;
      else if (two && B <= kLL128TwoShotMaxAutoBytes) c->algo = MG_ALGO_LL128_TWOSHOT;
    } else if (one) {
      c->algo = MG_ALGO_LL128;
    }
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
  if (c->algo == MG_ALGO_AUTO) {
    switch (c->coll) {
      case MG_ALLREDUCE: case MG_REDUCE: case MG_BCAST: {
        // Bcast's one-shot root pushes (n-1)B; its scatter-forward form moves B per rank in 2 hops.
        double one = kHopUs + (n - 1) * B / kPushBytesPerUs;
        double two_bytes = c->coll == MG_BCAST ? B : 2.0 * (n - 1) / n * B;
        double two = 2 * kHopUs + two_bytes / kPushBytesPerUs;
        c->algo = (n <= 2 || one <= two) ? MG_ALGO_ONESHOT : MG_ALGO_TWOSHOT;
        break;
      }
      default: c->algo = MG_ALGO_ONESHOT;  // Reduce_scatter_block and Allgather have one form
    }
  }
  if (c->nchannels <= 0) {
    size_t per_owner = (size_t)B;
    if (c->algo == MG_ALGO_TWOSHOT || c->coll == MG_REDUCE_SCATTER_BLOCK || c->coll == MG_ALLGATHER)
      per_owner /= (size_t)n;
    int ch = (int)((per_owner + kBytesPerChannel - 1) / kBytesPerChannel);
    if (ch < 1) ch = 1;
    if (ch > kDefaultChannels) ch = kDefaultChannels;
    c->nchannels = ch;
  }
  if (c->nchannels > t->cfg.max_channels) c->nchannels = t->cfg.max_channels;
  return 0;
}
