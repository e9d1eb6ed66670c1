// exchange.cu: the host side of the all-to-all family's exchange (exchange_kernel.cuh): the launch of
// one call, enqueued in the team's order like any collective, its blocking wait, and its request.
#include <cuda_runtime.h>
#include "team.cuh"
#include "exchange_kernel.cuh"
#include "status.cuh"
#include "completion.cuh"

static int launch_exchange(mg_team *t, const void *ctx, uintptr_t stream) {
  const mg_exchange_call *x = (const mg_exchange_call *)ctx;
  const int n = t->cfg.nranks;
  mg::ExchangeArgs a;
  for (int r = 0; r < n; ++r) a.ws[r] = t->ws[r];
  a.send = (const char *)x->send;
  a.recv = (char *)x->recv;
  a.layout = t->layout;
  a.rank = t->cfg.rank;
  a.nranks = n;
  a.channel_bytes = t->cfg.exchange_channel_bytes;  // MPIGPU_EXCHANGE_CHANNEL_BYTES
  a.watch = mg::Watch{t->timeout_ns, t->fault_dev, t->status};
  int grid = 1;  // the most channels any of this rank's pairs uses (the others skip the extra ones)
  for (int r = 0; r < MG_MAX_RANKS; ++r) {
    const bool here = r < n;
    a.send_bytes[r] = here ? x->send_bytes[r] : 0;
    a.send_off[r] = here ? x->send_off[r] : 0;
    a.recv_bytes[r] = here ? x->recv_bytes[r] : 0;
    a.recv_off[r] = here ? x->recv_off[r] : 0;
    if (!here) continue;
    const int s = mg::exchange_channels(a.send_bytes[r], a.channel_bytes);
    const int v = mg::exchange_channels(a.recv_bytes[r], a.channel_bytes);
    grid = s > grid ? s : grid;
    grid = v > grid ? v : grid;
  }
  resident_stop(t);  // its blocks take whole SMs, as the direct kernel's do
  void *params[] = {&a};
  return rc(cudaLaunchKernel((const void *)mg::exchange_kernel, dim3(grid), dim3(mg::kThreads), params, 0,
                             (cudaStream_t)stream));
}

static int check(const mg_team *t) {
  if (team_broken(t)) return MG_ERR_BROKEN;
  for (int r = 0; r < t->cfg.nranks; ++r)
    if (!t->opened[r]) return MG_ERR_TEAM;
  return 0;
}

extern "C" int mg_exchange(mg_team *t, const mg_exchange_call *x, uintptr_t stream, int async) {
  int e = check(t);
  if (e) return e;
  // launched even with nothing to move here, so the call counts as entered (mg_team_missing_peers)
  return team_enqueue(t, launch_exchange, x, stream, async);
}

extern "C" int mg_exchange_wait(mg_team *t, const mg_exchange_call *x, uintptr_t stream) {
  int e = check(t);
  if (e) return e;
  e = team_enqueue(t, launch_exchange, x, stream, 0);
  return team_call_result(t, e ? e : stream_done_wait(t, stream));
}

extern "C" int mg_exchange_request(mg_team *t, const mg_exchange_call *x, uintptr_t stream, void *request, int watch,
                                   uint64_t *ticket) {
  *ticket = 0;
  int e = check(t);
  if (e) return e;
  int slot = -1;
  e = completion_reserve(&slot, &t->status);  // the kernel's fault word goes to the request's status too
  if (e) return e;
  e = team_enqueue(t, launch_exchange, x, stream, 1);
  t->status = nullptr;
  if (e) {
    completion_cancel(slot);
    return e;
  }
  return completion_begin(slot, stream, t->cfg.device, request, watch, ticket);
}
