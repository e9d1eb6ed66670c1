// collectives.cu: each collective as a plan for direct_kernel (rank sets and shard geometry) or for
// the LL, LL128 and ring kernels, and the launch. A plan is a pure function of the call and the
// team, so every rank plans alike.
#include <cuda_runtime.h>
#include "team.cuh"
#include "kernel_table.cuh"
#include "completion.cuh"
#include "resident_call.cuh"
#include "single_rank.cuh"
#include "status.cuh"

using mg::DirectArgs;

extern "C" int mg_supports(int dtype, int op) {
  return dtype >= 0 && dtype < MG_NDTYPES && op >= 0 && op < MG_NOPS && mg::reduce_kernel(dtype, op).fn != nullptr;
}

// Bytes of the user's element for a single-rank copy.
static size_t user_elem_bytes(int dtype) {
  mg::KernelChoice k = mg::copy_kernel(dtype);
  return (size_t)k.elem_size * k.mult;
}

// One rank: every collective is a copy of the input into the output, of these bytes, or nothing
// (0: Bcast, in place).
static size_t single_rank_bytes(const mg_call *c) {
  if (c->coll == MG_BCAST || c->recv == 0 || c->recv == c->send) return 0;
  return c->count * user_elem_bytes(c->dtype);
}

// The one-rank copy, launched. A copy too large for the resident kernel ends a waiting instance
// first, so that it has every SM.
static int single_rank(mg_team *t, const mg_call *c, uintptr_t stream) {
  const size_t bytes = single_rank_bytes(c);
  if (bytes > t->cfg.resident_copy_max_bytes) resident_stop(t);
  return mg::single_rank_copy(c->recv, c->send, bytes, stream);
}

// Launches one of the engine's kernels (its argument struct at `args`) with kThreads per channel.
static int launch_kernel(const void *fn, int nchannels, void *args, uintptr_t stream) {
  void *params[] = {args};
  return rc(cudaLaunchKernel(fn, dim3(nchannels), dim3(mg::kThreads), params, 0, (cudaStream_t)stream));
}

// A Reduce's output off the root: none. The LL and LL128 forms run it as the Allreduce and skip
// their output stores where recv is null, so a caller's recvbuf there (MPI: not significant) stays
// untouched whichever form runs.
static char *reduce_output(const mg_team *t, const mg_call *c) {
  return c->coll == MG_REDUCE && c->root != t->cfg.rank ? nullptr : (char *)c->recv;
}

// The fields every kernel's arguments share (DirectArgs, LineArgs, RingArgs): the mapped workspaces,
// the user's buffers, this rank's place in the team and what its waits watch (the peer timeout, the
// team's fault box, and the fault word of the request being enqueued, if any).
template <typename Args> static void fill_team_args(const mg_team *t, const mg_call *c, Args *a) {
  for (int r = 0; r < t->cfg.nranks; ++r) a->ws[r] = t->ws[r];
  a->send = (const char *)c->send;
  a->recv = (char *)c->recv;
  a->layout = t->layout;
  a->rank = t->cfg.rank;
  a->nranks = t->cfg.nranks;
  a->watch = mg::Watch{t->timeout_ns, t->fault_dev, t->status};
}

// Pipeline geometry shared by the direct and ring kernels: a shard of a->shard_len elements is split
// over the call's channels (a span each, a multiple of the vector width V) and each span into steps
// of the call's chunk_bytes, at most one slot, of elements taking slot_elem_bytes each in a slot.
// A chunk_bytes above the slot asks for one step per channel over consecutive slots, as many as it
// covers (mg_select asks for exactly the span's): granted where the span fits in them and in
// max_slots (the direct kernel: nslots / 2, see fused_step_base; the ring: 1), else one slot.
// mg_select has set both: 1 <= nchannels <= max_channels, chunk_bytes > 0. Returns the slots one
// step fills.
template <typename Args>
static int cut_into_steps(const mg_team *t, const mg_call *c, size_t V, size_t slot_elem_bytes, int max_slots,
                          Args *a) {
  a->span = mg::vector_share(a->shard_len, (size_t)c->nchannels, V);
  const size_t slot_elems = t->layout.slot_bytes / slot_elem_bytes / V * V;
  size_t step_elems = c->chunk_bytes / slot_elem_bytes / V * V;
  if (step_elems > slot_elems) {
    size_t slots = ceil_div(c->chunk_bytes, t->layout.slot_bytes);
    if (slots > (size_t)max_slots) slots = (size_t)max_slots;
    step_elems = a->span <= slots * slot_elems ? a->span : slot_elems;
  }
  a->chunk = a->span < step_elems ? a->span : step_elems;
  if (a->chunk == 0) a->chunk = V;
  a->nsteps = (int)ceil_div(a->span == 0 ? 1 : a->span, a->chunk);
  return (int)ceil_div(a->chunk * slot_elem_bytes, t->layout.slot_bytes);
}

// Shards of the ring Allreduce: `parts` shards of whole vectors, shard j from j * shard_len in the
// input and the output (the last ones short or empty, shard_extent); the direct forms' shards are
// direct_form's, of the same vector_share.
template <typename Args>
static void cut_into_shards(Args *a, size_t count, size_t parts, size_t V) {
  a->shard_len = mg::vector_share(count, parts, V);
  a->len_stride = a->in_stride = a->out_stride = a->shard_len;
}

// The form of a call of the direct kernel or the line protocols (direct_form.cuh).
static int direct_mode(const mg_call *c) {
  const bool two = c->algo == MG_ALGO_TWOSHOT || c->algo == MG_ALGO_LL128_TWOSHOT;
  switch (c->coll) {
    case MG_ALLREDUCE: return two ? mg::kDirectTwoShot : mg::kDirectAllreduce;
    case MG_REDUCE: return two ? mg::kDirectTwoShotReduce : mg::kDirectReduce;
    case MG_REDUCE_SCATTER_BLOCK: return mg::kDirectReduceScatter;
    case MG_ALLGATHER: return mg::kDirectAllgather;
    default: return two ? mg::kDirectBcastScatter : mg::kDirectBcast;  // launch() admits only these
  }
}

static void plan(mg_team *t, const mg_call *c, const mg::KernelChoice &k, DirectArgs *a) {
  const int n = t->cfg.nranks, mode = direct_mode(c);
  const size_t V = 16 / (size_t)k.elem_size;
  const size_t count = c->count * (size_t)k.mult;
  // shards of whole vectors: n for the two-shot forms, n - 1 (the non-roots) for the scatter Bcast
  const size_t shard = mg::vector_share(count, mode == mg::kDirectBcastScatter ? (size_t)(n - 1) : (size_t)n, V);
  fill_team_args(t, c, a);
  a->elem_size = k.elem_size;
  a->form = mg::direct_form(mode, c->root, n, count, shard);
  a->split_steps = t->cfg.split_steps;
  // In place, a rank's reduce stage writes where its contribute stage reads, except in the two-shot
  // reductions, whose owners write only their own shard (direct_kernel.cuh).
  a->inplace_hazard = c->send == c->recv && mode != mg::kDirectTwoShot && mode != mg::kDirectTwoShotReduce;
  a->slots_per_step = cut_into_steps(t, c, V, (size_t)k.elem_size, t->layout.nslots / 2, &a->form);
  a->nchannels = c->nchannels;
}

// The two-shot LL128 Allreduce runs phase 0's sending and receiving on separate warps (split_phase0,
// line_kernel.cuh) from shards of this size on 3+ ranks: below it the senders' extra pass costs more
// than the overlap gains, and on 2 ranks (one peer per phase) it never paid (docs/tuning.md).
static const size_t kLL128SplitMinShardBytes = 512 * 1024;

// The plan of a line protocol's call (line_kernel.cuh), LL or LL128, launched (launch_line) or run in
// the resident kernel (mg_collective_wait). The two-shot and Bcast forms are LL128's (mg_select).
static void plan_line(const mg_team *t, const mg_call *c, const mg::KernelChoice &k, mg::LineArgs *a) {
  const size_t es = (size_t)k.elem_size, count = c->count * (size_t)k.mult, n = (size_t)t->cfg.nranks;
  fill_team_args(t, c, a);
  a->recv = reduce_output(t, c);  // Reduce: the Allreduce with no output off the root
  a->root = c->root;
  a->split_phase0 = 0;
  a->total_bytes = count * es;
  a->block_bytes = count * es;
  a->mode = direct_mode(c);
  if (a->mode == mg::kDirectReduce || a->mode == mg::kDirectTwoShotReduce)  // as the Allreduce (line_kernel.cuh)
    a->mode = a->mode == mg::kDirectReduce ? mg::kDirectAllreduce : mg::kDirectTwoShot;
  if (a->mode == mg::kDirectBcastScatter) {
    a->block_bytes = mg::ll128_shard_bytes(count, es, n - 1);
  } else if (a->mode == mg::kDirectTwoShot) {
    a->block_bytes = mg::ll128_shard_bytes(count, es, n);
    a->split_phase0 = n >= 3 && a->block_bytes >= kLL128SplitMinShardBytes;
  }
  a->form = mg::line_form(*a);
}

// Whether the protocol runs the plan's form (LL: the one-phase symmetric forms; mg_select never asks it
// for more: a plan that did would mix two phases' units in one area, or a Bcast's receive would read
// an input it lacks).
static bool line_form_fits(bool ll, const mg::LineArgs &a) { return !ll || !mg::direct_needs_ll128(a.mode); }

static int launch_line(mg_team *t, const mg_call *c, const mg::KernelChoice &k, uintptr_t stream) {
  const bool ll = c->algo == MG_ALGO_LL;
  const mg::LineKernelFn fn = ll ? k.ll : k.ll128;
  if (!fn) return MG_ERR_UNSUPPORTED;
  mg::LineArgs a;
  plan_line(t, c, k, &a);
  if (!line_form_fits(ll, a)) return MG_ERR_UNSUPPORTED;
  // An LL128 block takes a whole SM (its registers: docs/kernel-registers.md): a grid wider than the
  // SMs a waiting resident instance leaves free would run its last blocks only once that returns.
  if (!ll && c->nchannels > t->sm_count - t->cfg.resident_blocks) resident_stop(t);
  return launch_kernel((const void *)fn, c->nchannels, &a, stream);
}

// Ring and chain forms (ring_kernel.cuh): shards as in the two-shot plan (Allreduce), blocks (RS,
// AG) or the whole message (Bcast, Reduce), cut into steps that fit a slot as partials (fp32 for
// 16-bit floats).
static int launch_ring(mg_team *t, const mg_call *c, const mg::KernelChoice &k, uintptr_t stream) {
  if (!k.ring) return MG_ERR_UNSUPPORTED;
  const size_t V = 16 / (size_t)k.elem_size, count = c->count * (size_t)k.mult, n = (size_t)t->cfg.nranks;
  mg::RingArgs a;
  fill_team_args(t, c, &a);
  a.root = c->root;
  a.shard_len = a.len_total = count;
  a.len_stride = a.in_stride = a.out_stride = 0;
  switch (c->coll) {
    case MG_ALLREDUCE:
      a.mode = mg::kRingAllreduce;
      cut_into_shards(&a, count, n, V);
      break;
    case MG_REDUCE_SCATTER_BLOCK: a.mode = mg::kRingReduceScatter; a.in_stride = count; break;
    case MG_ALLGATHER: a.mode = mg::kRingAllgather; a.out_stride = count; break;
    case MG_BCAST: a.mode = mg::kRingBcast; break;
    case MG_REDUCE: a.mode = mg::kRingReduce; break;
    default: return MG_ERR_ARG;
  }
  a.nchannels = c->nchannels;
  cut_into_steps(t, c, V, (size_t)(k.part_size > k.elem_size ? k.part_size : k.elem_size), 1, &a);
  return launch_kernel((const void *)k.ring, a.nchannels, &a, stream);
}

// Checks a call of a team of 2+ ranks and completes it by the cost model (algo, channels, step).
static int prepare(const mg_team *t, const mg_call *call, mg_call *c) {
  for (int r = 0; r < t->cfg.nranks; ++r)
    if (!t->opened[r]) return MG_ERR_TEAM;
  if (call->root < 0 || call->root >= t->cfg.nranks) return MG_ERR_ARG;  // every form indexes by it
  if (call->coll < 0 || call->coll > MG_LAST_ENGINE_COLL) return MG_ERR_ARG;  // the rest: exchange.cu
  *c = *call;
  return mg_select(t, c);
}

// Launches call `c`, prepared (prepare), of a team of 2+ ranks.
static int launch_prepared(mg_team *t, const mg_call *c, uintptr_t stream) {
  const mg::KernelChoice k = mg::kernels_for(c->coll, c->dtype, c->op);
  if (c->algo == MG_ALGO_LL || c->algo == MG_ALGO_LL128 || c->algo == MG_ALGO_LL128_TWOSHOT)
    return launch_line(t, c, k, stream);
  resident_stop(t);  // host memory stores only, so also safe while the stream is captured
  if (c->algo == MG_ALGO_RING) return launch_ring(t, c, k, stream);
  if (!k.fn) return MG_ERR_UNSUPPORTED;
  DirectArgs a;
  plan(t, c, k, &a);
  return launch_kernel((const void *)k.fn, a.nchannels, &a, stream);
}

static int launch(mg_team *t, const mg_call *call, uintptr_t stream) {
  if (t->cfg.nranks == 1) return single_rank(t, call, stream);
  mg_call c;
  int e = prepare(t, call, &c);
  return e ? e : launch_prepared(t, &c, stream);
}

static bool capturing(uintptr_t stream) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &cs) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return cs != cudaStreamCaptureStatusNone;
}

// Orders what is enqueued next on `stream` after the team's previous call: a non-blocking one on another
// stream may still run (`inflight`), so the stream waits for its `done` event.
static int after_previous(const mg_team *t, uintptr_t stream) {
  if (!t->inflight || stream == t->last_stream) return 0;
  return rc(cudaStreamWaitEvent((cudaStream_t)stream, t->done, 0));
}

// Enqueues launch(t, ctx, stream) on `stream` after the team's previous call (team.cuh).
int team_enqueue(mg_team *t, team_launch_fn launch, const void *ctx, uintptr_t stream, int async) {
  // A call captured into a graph runs when the graph is launched, ordered by the user's stream: no
  // event crosses the capture boundary (CUDA forbids it), and nothing is in flight now.
  const bool cap = async && capturing(stream);
  int e = cap ? 0 : after_previous(t, stream);
  if (e) return e;
  e = launch(t, ctx, stream);
  if (e) return e;
  t->last_stream = stream;
  t->inflight = 0;
  if (async && !cap) {
    e = rc(cudaEventRecord(t->done, (cudaStream_t)stream));
    if (e) return e;
    t->inflight = 1;
  }
  return 0;
}

// A collective's launch for team_enqueue: the call, and the call already prepared (or null).
struct CollectiveLaunch {
  const mg_call *call, *prepared;
};

static int launch_collective(mg_team *t, const void *ctx, uintptr_t stream) {
  const CollectiveLaunch *l = (const CollectiveLaunch *)ctx;
  return l->prepared ? launch_prepared(t, l->prepared, stream) : launch(t, l->call, stream);
}

static int enqueue(mg_team *t, const mg_call *call, const mg_call *prepared, uintptr_t stream, int async) {
  const CollectiveLaunch l{call, prepared};
  return team_enqueue(t, launch_collective, &l, stream, async);
}

extern "C" int mg_collective(mg_team *t, const mg_call *call, uintptr_t stream, int async) {
  if (team_broken(t)) return MG_ERR_BROKEN;
  if (call->count == 0) return 0;
  return enqueue(t, call, nullptr, stream, async);
}

// The kernel writes the request's fault word (completion.cu) if its call stops; the request then
// completes with the fault's code. A call of no elements runs nothing: the request completes after
// the work queued on the stream before it.
extern "C" int mg_collective_request(mg_team *t, const mg_call *call, uintptr_t stream, void *request, int watch,
                                     uint64_t *ticket) {
  *ticket = 0;
  if (team_broken(t)) return MG_ERR_BROKEN;
  int slot = -1;
  int e = completion_reserve(&slot, &t->status);
  if (e) return e;
  if (call->count) e = enqueue(t, call, nullptr, stream, 1);
  t->status = nullptr;
  if (e) {
    completion_cancel(slot);
    return e;
  }
  return completion_begin(slot, stream, t->cfg.device, request, watch, ticket);
}

// The resident kernel's form of prepared call `c`: its LL calls, and its LL128 calls of at most
// resident_max_bytes (sizes that fit the call's 32-bit fields). False: the call is launched. Which
// ranks run a call resident and which launch it need not agree: both run the same protocol.
static bool resident_form(const mg_team *t, const mg_call *c, mg::ResidentCall *out) {
  const mg::KernelChoice k = mg::kernels_for(c->coll, c->dtype, c->op);
  if (c->algo == MG_ALGO_LL && k.ll) {
    mg::LineArgs a;
    plan_line(t, c, k, &a);
    if (!line_form_fits(true, a)) return false;  // launched: launch_line refuses it
    *out = mg::resident_call_of(mg::kResidentLL, a, c->dtype, c->op);
    return true;
  }
  if ((c->algo == MG_ALGO_LL128 || c->algo == MG_ALGO_LL128_TWOSHOT) && k.ll128) {
    mg::LineArgs a;
    plan_line(t, c, k, &a);
    const bool blocks = a.mode == mg::kDirectReduceScatter || a.mode == mg::kDirectAllgather;
    const size_t bytes = a.total_bytes * (blocks ? (size_t)t->cfg.nranks : 1);
    if (bytes > t->cfg.resident_max_bytes || bytes > 0x7fffffffu) return false;
    *out = mg::resident_call_of(mg::kResidentLL128, a, c->dtype, c->op);
    return true;
  }
  return false;
}

// A blocking call's result: the CUDA error, else the fault its kernel recorded (fault.cuh). After a
// fault the resident instance is told to return: no call runs on a broken team.
int team_call_result(mg_team *t, int e) {
  if (e) return e;
  const uint32_t word = *(volatile uint32_t *)&t->fault->fault;
  if (!word) return 0;
  resident_stop(t);
  return mg::fault_code(word);
}

// A one-rank team's blocking call as a resident copy: an out-of-place copy of at most
// resident_copy_max_bytes. False: launched (single_rank), or nothing to copy.
static bool single_rank_form(const mg_team *t, const mg_call *c, mg::ResidentCall *out) {
  const size_t bytes = single_rank_bytes(c);
  if (bytes == 0 || bytes > t->cfg.resident_copy_max_bytes || bytes > 0x7fffffffu) return false;
  *out = mg::resident_copy_of(c->recv, c->send, bytes);
  return true;
}

// A blocking call with a resident form `r`: rung to the resident kernel when the stream is idle,
// else launched in stream order and waited for.
static int wait_resident(mg_team *t, const mg_call *call, const mg_call *prepared, const mg::ResidentCall &r,
                         uintptr_t stream, mg_gate_fn gate, void *ctx) {
  int e;
  if (resident_ready(t, stream)) e = resident_run(t, r, gate, ctx);
  else if (gate && gate(ctx)) e = MG_ERR_DECLINED;
  else if (!(e = enqueue(t, call, prepared, stream, 0))) e = stream_done_wait(t, stream);
  resident_returned(t);
  return e == MG_ERR_DECLINED ? e : team_call_result(t, e);
}

extern "C" int mg_collective_nothing(mg_team *t, uintptr_t stream, int *idle) {
  *idle = 0;
  if (team_broken(t)) return MG_ERR_BROKEN;
  if (t->cfg.nranks != 1) return MG_ERR_ARG;
  int e = after_previous(t, stream);
  if (e) return e;
  t->last_stream = stream;
  t->inflight = 0;
  return mg_stream_idle(stream, idle);
}

extern "C" int mg_collective_wait_queued(mg_team *t, uintptr_t stream) { return stream_done_wait(t, stream); }

extern "C" int mg_collective_wait_gated(mg_team *t, const mg_call *call, uintptr_t stream, mg_gate_fn gate,
                                        void *ctx) {
  if (team_broken(t)) return MG_ERR_BROKEN;
  if (call->count == 0) return gate && gate(ctx) ? MG_ERR_DECLINED : 0;
  mg_call c;
  const mg_call *prepared = nullptr;
  mg::ResidentCall r;
  if (t->cfg.nranks == 1) {
    if (t->res.box && single_rank_form(t, call, &r)) return wait_resident(t, call, nullptr, r, stream, gate, ctx);
  } else {
    int e = prepare(t, call, &c);
    if (e) return e;
    prepared = &c;
    if (t->res.box && resident_form(t, &c, &r)) return wait_resident(t, call, prepared, r, stream, gate, ctx);
  }
  if (gate && gate(ctx)) return MG_ERR_DECLINED;
  int e = enqueue(t, call, prepared, stream, 0);
  return team_call_result(t, e ? e : stream_done_wait(t, stream));
}

extern "C" int mg_collective_wait(mg_team *t, const mg_call *call, uintptr_t stream) {
  return mg_collective_wait_gated(t, call, stream, nullptr, nullptr);
}
