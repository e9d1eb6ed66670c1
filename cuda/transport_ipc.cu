// transport_ipc.cu: the intra-node transport. Each rank allocates one workspace (FIFO slots and
// step counters), exports it with cudaIpcGetMemHandle, and maps every peer's once at team setup;
// collectives then only compute addresses inside these mappings (no IPC open per call).
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include "team.cuh"
#include "status.cuh"

static int team_alloc(mg_team *t) {
  size_t bytes = t->layout.total_bytes();
  void *p = nullptr;
  int e = rc(cudaMalloc(&p, bytes));
  if (e) return e;
  // Everything starts at zero: the counters, and the low-latency region, whose flags live in the
  // data (a block reused from an earlier team could otherwise hold flags that match this team's
  // first sequence numbers). Synchronous: peers map it right after.
  e = rc(cudaMemset(p, 0, bytes));
  if (!e) e = rc(cudaDeviceSynchronize());
  if (e) {
    cudaFree(p);
    return e;
  }
  e = rc(cudaEventCreateWithFlags(&t->done, cudaEventDisableTiming));
  if (e) {
    cudaFree(p);
    return e;
  }
  e = fault_open(t);
  if (!e) {
    e = resident_open(t);
    if (e) fault_close(t);
  }
  if (!e) {
    e = stream_done_open(t);
    if (e) {
      resident_close(t);
      fault_close(t);
    }
  }
  if (e) {
    cudaEventDestroy(t->done);
    cudaFree(p);
    return e;
  }
  t->ws[t->cfg.rank] = (char *)p;
  t->opened[t->cfg.rank] = 1;
  return 0;
}

extern "C" {

int mg_team_create(const mg_team_config *cfg, mg_team **out) {
  *out = nullptr;
  if (cfg->nranks < 1 || cfg->nranks > MG_MAX_RANKS || cfg->rank < 0 || cfg->rank >= cfg->nranks ||
      cfg->nslots < 2 || cfg->max_channels < 1 || cfg->max_channels > MG_MAX_CHANNELS ||
      cfg->slot_bytes < 4096 || cfg->slot_bytes % 16 != 0 || cfg->ll128_bytes > MG_LL128_LIMIT_BYTES ||
      !(cfg->resident_us >= 0) || cfg->resident_blocks < 1 || cfg->resident_blocks > MG_MAX_CHANNELS ||
      cfg->exchange_channel_bytes < 1 || cfg->exchange_ll_bytes > MG_EXCHANGE_LL_MAX_BYTES ||
      cfg->exchange_drain < MG_DRAIN_ROUNDS || cfg->exchange_drain > MG_DRAIN_AUTO ||
      cfg->exchange_slots < MG_SLOTS_AT_RECEIVER || cfg->exchange_slots > MG_SLOTS_BY_CALL ||
      cfg->exchange_rounds < MG_ROUNDS_ALIGNED || cfg->exchange_rounds > MG_ROUNDS_STAGGERED)
    return MG_ERR_ARG;
  mg_team *t = (mg_team *)calloc(1, sizeof(mg_team));
  if (!t) return MG_ERR_NOMEM;
  t->cfg = *cfg;
  t->layout.slot_bytes = cfg->slot_bytes;
  t->layout.nslots = cfg->nslots;
  t->layout.nranks = cfg->nranks;
  t->layout.max_channels = cfg->max_channels;
  t->layout.ll128_bytes = cfg->ll128_bytes;
  t->timeout_ns = (uint64_t)(cfg->timeout_s * 1e9);
  int e = rc(cudaDeviceGetAttribute(&t->sm_count, cudaDevAttrMultiProcessorCount, cfg->device));
  if (e) {
    free(t);
    return e;
  }
  auto body = [&]() -> int { return team_alloc(t); };
  {
    int prev = -1;
    e = rc(cudaGetDevice(&prev));
    if (!e && prev != cfg->device) e = rc(cudaSetDevice(cfg->device));
    if (!e) e = body();
    if (prev >= 0 && prev != cfg->device) cudaSetDevice(prev);
  }
  if (e) {
    free(t);
    return e;
  }
  *out = t;
  return 0;
}

size_t mg_team_workspace_bytes(const mg_team *t) { return t->layout.total_bytes(); }

int mg_team_export(mg_team *t, void *handle) {
  cudaIpcMemHandle_t h;
  int e = rc(cudaIpcGetMemHandle(&h, t->ws[t->cfg.rank]));
  if (!e) memcpy(handle, &h, sizeof(h) < MG_IPC_HANDLE_BYTES ? sizeof(h) : MG_IPC_HANDLE_BYTES);
  return e;
}

int mg_team_open_peer(mg_team *t, int peer, const void *handle) {
  if (peer < 0 || peer >= t->cfg.nranks) return MG_ERR_ARG;
  if (peer == t->cfg.rank || t->opened[peer]) return 0;
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof(h));
  MG_WITH_DEVICE(t->cfg.device, [&]() -> int {
    void *p = nullptr;
    int e = rc(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    if (e) return e;
    t->ws[peer] = (char *)p;
    t->opened[peer] = 1;
    return 0;
  }());
}

int mg_team_destroy(mg_team *t) {
  if (!t) return 0;
  int first = 0;
  int prev = -1;
  if (cudaGetDevice(&prev) == cudaSuccess && prev != t->cfg.device) cudaSetDevice(t->cfg.device);
  // A kernel of a broken team that still waits (a call enqueued after the fault) stops at its next
  // check instead of at its deadline: cudaFree below waits for it.
  if (t->fault && team_broken(t)) *(volatile uint32_t *)&t->fault->abort = 1u;
  first = resident_close(t);  // before cudaFree, which would wait for a running instance
  for (int r = 0; r < t->cfg.nranks; ++r) {
    if (!t->opened[r]) continue;
    int e = r == t->cfg.rank ? rc(cudaFree(t->ws[r])) : rc(cudaIpcCloseMemHandle(t->ws[r]));
    if (e && !first) first = e;
  }
  fault_close(t);  // after cudaFree, which waited for every kernel that may write the box
  stream_done_close(t);
  if (t->done) cudaEventDestroy(t->done);
  if (prev >= 0 && prev != t->cfg.device) cudaSetDevice(prev);
  free(t);
  return first;
}

}  // extern "C"
