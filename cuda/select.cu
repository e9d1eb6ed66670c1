// select.cu: the cost model that picks an algorithm and a channel count for a call.
//
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

extern "C" int mg_select(const mg_team *t, mg_call *c) {
  const int n = t->cfg.nranks;
  const double B = (double)total_bytes(t, c);
  const size_t ll = ll_piece_bytes(t, c);
  if (c->algo == MG_ALGO_LL && (ll == 0 || ll > MG_LL_MAX_BYTES)) c->algo = MG_ALGO_AUTO;
  if (c->algo == MG_ALGO_AUTO && ll > 0 && ll <= kLLMaxAutoBytes) c->algo = MG_ALGO_LL;
  if (c->algo == MG_ALGO_LL) {
    c->nchannels = (int)((ll + 16 * mg::kThreads - 1) / (16 * mg::kThreads));
    if (c->nchannels < 1) c->nchannels = 1;
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
