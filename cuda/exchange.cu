// exchange.cu: the host side of the all-to-all family's exchange (exchange_kernel.cuh): the launch of
// one call (and of the reduction that follows it, for Reduce_scatter, Scan and Exscan), enqueued in
// the team's order like any collective, its blocking wait, and its request.
#include <string.h>
#include <cuda_runtime.h>
#include "team.cuh"
#include "exchange_kernel.cuh"
#include "resident_call.cuh"
#include "status.cuh"
#include "completion.cuh"

namespace mg {

// The launched kernels (their body, exchange_body, is shared with the resident kernel).
// Every block plain bytes.
__global__ void __launch_bounds__(kThreads, 1) exchange_kernel(const __grid_constant__ ExchangeArgs a) {
  exchange_body<false, true>(a, nullptr, blockIdx.x);
}

// Some blocks of derived datatypes (its own kernel: the index arithmetic stays out of the plain one).
__global__ void __launch_bounds__(kThreads, 1) exchange_shaped_kernel(const __grid_constant__ ExchangeArgs a,
                                                                      const __grid_constant__ ExchangeShapes sh) {
  exchange_body<true, true>(a, &sh, blockIdx.x);
}

}  // namespace mg

static bool same(const mg_block_shape &a, const mg_block_shape &b) {
  if (a.start != b.start || a.block != b.block || a.size != b.size || a.extent != b.extent || a.ndims != b.ndims)
    return false;
  for (int d = 0; d < a.ndims; ++d)
    if (a.count[d] != b.count[d] || a.stride[d] != b.stride[d]) return false;
  return true;
}

// The shaped kernel's argument for call x (false: no block of x has a shape).
static int shapes_of(const mg_exchange_call *x, int n, int me, mg::ExchangeShapes *sh, bool *shaped) {
  *shaped = false;
  if (x->send_shape == nullptr && x->recv_shape == nullptr) return 0;
  memset(sh, 0, sizeof(*sh));
  for (int p = 0; p < MG_MAX_RANKS; ++p) {
    sh->send[p] = sh->recv[p] = -1;
    if (p >= n) continue;
    const mg_block_shape *in[2] = {x->send_shape ? &x->send_shape[p] : nullptr,
                                   x->recv_shape ? &x->recv_shape[p] : nullptr};
    const uintptr_t at[2] = {x->send + x->send_off[p], x->recv + x->recv_off[p]};
    const size_t bytes[2] = {x->send_bytes[p], x->recv_bytes[p]};
    for (int side = 0; side < 2; ++side) {
      const mg_block_shape *shape = in[side] != nullptr && in[side]->size > 0 && bytes[side] ? in[side] : nullptr;
      const int k = side * MG_MAX_RANKS + p;
      if (shape != nullptr) {
        const int e = mg::prepare_shape(*shape, bytes[side], &sh->shape[k]);
        if (e) return e;
        *shaped = true;
      }
      (side ? sh->recv : sh->send)[p] = shape != nullptr ? (int8_t)k : (int8_t)-1;
      (side ? sh->recv_unit : sh->send_unit)[p] = (uint8_t)mg::shape_unit(at[side], shape);
    }
  }
  const int s = sh->send[me], r = sh->recv[me];
  const bool same_shape = (s < 0 && r < 0) || (s >= 0 && r >= 0 && same(x->send_shape[me], x->recv_shape[me]));
  sh->own_in_place = same_shape && x->send + x->send_off[me] == x->recv + x->recv_off[me];
  return 0;
}

// A call checked and its shapes prepared once, before the enqueue (team_enqueue's ctx).
struct Prepared {
  const mg_exchange_call *x;
  mg::ExchangeShapes sh;
  bool shaped;
  bool pull;  // the FIFO slots at the sender (slots_at_sender)
};

// Whether call x's FIFO slots lie at the sender (mg_exchange_slots, MPIGPU_EXCHANGE_SLOTS). By call,
// the fan-out calls pull: on 4x H200 Scatterv and Neighbor_alltoall of 4-64 MB took 5-10% less time
// so, the others (Alltoallv, Allgatherv, Gatherv) up to 17% more (docs/benchmarks.md, "Fan in").
// Every rank of a call computes the same (the team's knob is compared at its setup).
static bool slots_at_sender(const mg_team *t, const mg_exchange_call *x) {
  if (t->cfg.exchange_slots != MG_SLOTS_BY_CALL) return t->cfg.exchange_slots == MG_SLOTS_AT_SENDER;
  switch (x->coll) {
    case MG_SCATTER:
    case MG_SCATTERV:
    case MG_NEIGHBOR_ALLGATHER:
    case MG_NEIGHBOR_ALLGATHERV:
    case MG_NEIGHBOR_ALLTOALL:
    case MG_NEIGHBOR_ALLTOALLV:
    case MG_NEIGHBOR_ALLTOALLW: return true;
    default: return false;
  }
}

// The most channels any of this rank's pairs uses (a block each; the others skip the extra ones).
static int exchange_grid(const mg_team *t, const mg_exchange_call *x) {
  int grid = 1;
  for (int r = 0; r < t->cfg.nranks; ++r) {
    const int s = mg::exchange_channels(x->send_bytes[r], t->cfg.exchange_channel_bytes, t->cfg.exchange_ll_bytes);
    const int v = mg::exchange_channels(x->recv_bytes[r], t->cfg.exchange_channel_bytes, t->cfg.exchange_ll_bytes);
    grid = s > grid ? s : grid;
    grid = v > grid ? v : grid;
  }
  return grid;
}

static int launch_exchange(mg_team *t, const void *ctx, uintptr_t stream) {
  const Prepared *p = (const Prepared *)ctx;
  const mg_exchange_call *x = p->x;
  const int n = t->cfg.nranks;
  mg::ExchangeArgs a;
  for (int r = 0; r < n; ++r) a.ws[r] = t->ws[r];
  a.send = (const char *)x->send;
  a.recv = (char *)x->recv;
  a.layout = t->layout;
  a.rank = t->cfg.rank;
  a.nranks = n;
  a.channel_bytes = t->cfg.exchange_channel_bytes;  // MPIGPU_EXCHANGE_CHANNEL_BYTES
  a.ll_bytes = t->cfg.exchange_ll_bytes;             // MPIGPU_EXCHANGE_LL_BYTES
  a.drain = t->cfg.exchange_drain;                   // MPIGPU_EXCHANGE_DRAIN
  a.pull = p->pull;
  a.stagger = t->cfg.exchange_rounds == MG_ROUNDS_STAGGERED;  // MPIGPU_EXCHANGE_ROUNDS
  a.watch = mg::Watch{t->timeout_ns, t->fault_dev, t->status};
  for (int r = 0; r < MG_MAX_RANKS; ++r) {
    const bool here = r < n;
    a.send_bytes[r] = here ? x->send_bytes[r] : 0;
    a.send_off[r] = here ? x->send_off[r] : 0;
    a.recv_bytes[r] = here ? x->recv_bytes[r] : 0;
    a.recv_off[r] = here ? x->recv_off[r] : 0;
  }
  const int grid = exchange_grid(t, x);
  resident_stop(t);  // its blocks take whole SMs, as the direct kernel's do
  void *params[] = {&a, const_cast<mg::ExchangeShapes *>(&p->sh)};
  const void *kernel = p->shaped ? (const void *)mg::exchange_shaped_kernel : (const void *)mg::exchange_kernel;
  const int launched = rc(cudaLaunchKernel(kernel, dim3(grid), dim3(mg::kThreads), params, 0, (cudaStream_t)stream));
  const mg_rows_reduction *r = x->then;
  if (launched || r == nullptr || r->nrows < 1 || r->count == 0) return launched;
  return mg_reduce_rows(r->dtype, r->op, r->dst, r->src, r->row_bytes, r->nrows, r->count, stream);
}

// Whether call x may be enqueued on t, and its shapes (*p): checked before the enqueue, so a bad shape
// raises on this rank instead of leaving the peers waiting for a kernel that never starts.
static int prepare(const mg_team *t, const mg_exchange_call *x, Prepared *p) {
  p->x = x;
  p->pull = slots_at_sender(t, x);
  if (team_broken(t)) return MG_ERR_BROKEN;
  for (int r = 0; r < t->cfg.nranks; ++r)
    if (!t->opened[r]) return MG_ERR_TEAM;
  // the reduction is launched after the exchange kernel: whatever would make it fail must fail here
  const mg_rows_reduction *r = x->then;
  if (r != nullptr && r->nrows > 0 && r->count) {
    if (r->dtype < 0 || r->dtype >= MG_NDTYPES || !mg_supports(r->dtype, r->op) || !r->dst || !r->src)
      return MG_ERR_ARG;
    const size_t item = (size_t)mg_dtype_table()[r->dtype].size;
    if (r->row_bytes % item || r->row_bytes < r->count * item) return MG_ERR_ARG;
  }
  return shapes_of(x, t->cfg.nranks, t->cfg.rank, &p->sh, &p->shaped);
}

extern "C" int mg_exchange(mg_team *t, const mg_exchange_call *x, uintptr_t stream, int async) {
  Prepared p;
  int e = prepare(t, x, &p);
  if (e) return e;
  // launched even with nothing to move here, so the call counts as entered (mg_team_missing_peers)
  return team_enqueue(t, launch_exchange, &p, stream, async);
}

// Channels of an exchange that runs resident. Calls of 8 channels took 5-8 us longer resident than
// launched on 4x H200 (docs/benchmarks.md, "Small exchanges"): each block past the first reads the
// byte ranges from host memory, several at once over PCIe; one channel took 1-3.5 us less.
static const int kResidentExchangeChannels = 1;
// The resident kernel runs its exchanges unstaggered (resident_kernel.cuh): the same rounds as a launched
// peer's only on channel 0 (exchange_round_peer).
static_assert(kResidentExchangeChannels == 1, "a resident exchange of more channels needs the team's round order");

// Whether prepared call p runs in the resident kernel when its stream is idle, with its call (*c) and
// byte ranges (table): a team of 2+ ranks (a one-rank team's instance only copies:
// resident_copy_kernel), plain blocks, no reduction after it, every pair of at most resident_max_bytes,
// and at most kResidentExchangeChannels channels. Which ranks run a call resident and which launch it
// need not agree: both run the same protocol.
static bool exchange_resident_form(const mg_team *t, const Prepared *p, mg::ResidentCall *c, uint32_t *table) {
  const mg_exchange_call *x = p->x;
  const mg_rows_reduction *r = x->then;
  if (!t->res.box || t->cfg.nranks < 2 || p->shaped || (r != nullptr && r->nrows > 0 && r->count)) return false;
  const size_t most = t->cfg.resident_max_bytes < 0xffffffffu ? t->cfg.resident_max_bytes : 0xffffffffu;
  const int n = t->cfg.nranks;
  for (int k = 0; k < MG_MAX_RANKS; ++k) {
    const size_t v[4] = {k < n ? x->send_bytes[k] : 0, k < n ? x->send_off[k] : 0, k < n ? x->recv_bytes[k] : 0,
                         k < n ? x->recv_off[k] : 0};
    for (int i = 0; i < 4; ++i) {
      if (v[i] > 0xffffffffu || (i % 2 == 0 && v[i] > most)) return false;
      table[i * MG_MAX_RANKS + k] = (uint32_t)v[i];
    }
  }
  const int grid = exchange_grid(t, x);
  if (grid > kResidentExchangeChannels || grid > t->cfg.resident_blocks) return false;
  *c = mg::resident_exchange_of(x->send, x->recv, grid, p->pull);
  return true;
}

extern "C" int mg_exchange_wait(mg_team *t, const mg_exchange_call *x, uintptr_t stream) {
  Prepared p;
  int e = prepare(t, x, &p);
  if (e) return e;
  mg::ResidentCall c;
  uint32_t table[mg::kTableWords];
  if (exchange_resident_form(t, &p, &c, table)) {  // as wait_resident (collectives.cu)
    if (resident_ready(t, stream)) e = resident_run(t, c, nullptr, nullptr, table);
    else if (!(e = team_enqueue(t, launch_exchange, &p, stream, 0))) e = stream_done_wait(t, stream);
    resident_returned(t);
    return team_call_result(t, e);
  }
  e = team_enqueue(t, launch_exchange, &p, stream, 0);
  return team_call_result(t, e ? e : stream_done_wait(t, stream));
}

extern "C" int mg_exchange_request(mg_team *t, const mg_exchange_call *x, uintptr_t stream, void *request, int watch,
                                   uint64_t *ticket) {
  *ticket = 0;
  Prepared p;
  int e = prepare(t, x, &p);
  if (e) return e;
  int slot = -1;
  e = completion_reserve(&slot, &t->status);  // the kernel's fault word goes to the request's status too
  if (e) return e;
  e = team_enqueue(t, launch_exchange, &p, stream, 1);
  t->status = nullptr;
  if (e) {
    completion_cancel(slot);
    return e;
  }
  return completion_begin(slot, stream, t->cfg.device, request, watch, ticket);
}
