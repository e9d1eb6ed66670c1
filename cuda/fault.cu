// fault.cu: the host side of the fault model (fault.cuh; the kernels' side is in protocol.cuh): a
// team's fault box, the abort, the team's recorded fault and the peers that never began the call that
// failed. Nothing here runs on a collective's path except team_broken (team.cuh), one host read.
#include <cuda_runtime.h>
#include <string.h>
#include "team.cuh"
#include "status.cuh"

int fault_open(mg_team *t) {
  void *box = nullptr, *dev = nullptr;
  int e = rc(cudaHostAlloc(&box, sizeof(mg::FaultBox), cudaHostAllocMapped | cudaHostAllocPortable));
  if (e) return e;
  memset(box, 0, sizeof(mg::FaultBox));
  e = rc(cudaHostGetDevicePointer(&dev, box, 0));
  // Non-blocking: the host's copies must not wait for the team's kernels (an abort is for a kernel
  // that still runs) nor for the legacy default stream's work.
  if (!e) e = rc(cudaStreamCreateWithFlags(&t->side, cudaStreamNonBlocking));
  if (e) {
    cudaFreeHost(box);
    return e;
  }
  t->fault = (mg::FaultBox *)box;
  t->fault_dev = (mg::FaultBox *)dev;
  return 0;
}

void fault_close(mg_team *t) {
  if (!t->fault) return;
  cudaStreamSynchronize(t->side);
  cudaStreamDestroy(t->side);
  cudaFreeHost(t->fault);
  t->fault = t->fault_dev = nullptr;
}

// Copies `bytes` between host and a workspace (this rank's or a peer's, through its mapping) on the
// side stream, with the team's device current; waits for the copy unless `async`.
static int side_copy(mg_team *t, void *dst, const void *src, size_t bytes, bool async) {
  MG_WITH_DEVICE(t->cfg.device, [&]() -> int {
    int e = rc(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, t->side));
    return e || async ? e : rc(cudaStreamSynchronize(t->side));
  }());
}

extern "C" {

// Thread-safe, returns at once (the copies are queued). The abort word reaches the waits of the
// kernels running now; the broken word, copied into every workspace, reaches this rank's kernels that
// have not started yet and the peers' kernels, which may be waiting for this rank.
int mg_team_abort(mg_team *t) {
  if (!t || !t->fault || __atomic_exchange_n(&t->aborting, 1, __ATOMIC_ACQ_REL)) return 0;
  mg::FaultBox *b = t->fault;
  b->abort_word = mg::fault_word(mg::kCauseAbort, t->cfg.rank);
  __atomic_store_n(&b->abort, 1u, __ATOMIC_RELEASE);
  int first = 0;
  for (int k = 0; k < t->cfg.nranks; ++k) {
    if (!t->opened[k]) continue;
    int e = side_copy(t, &mg::team_state(t->ws[k])->broken, &b->abort_word, sizeof(uint32_t), true);
    if (e && !first) first = e;
  }
  return first;
}

// The host box first (written by this rank's kernels and its abort); when it is clear, this rank's
// TeamState, which a peer marks broken even while this rank runs no call (a copy and a wait: not for
// a collective's path). What it finds there is kept in the box, so the team refuses later calls.
int mg_team_fault(mg_team *t, int *code, int *origin) {
  *code = 0;
  *origin = -1;
  mg::FaultBox *b = t->fault;
  uint32_t word = *(volatile uint32_t *)&b->fault;
  if (!word && *(volatile uint32_t *)&b->abort) word = mg::fault_word(mg::kCauseAbort, t->cfg.rank);
  if (!word && t->cfg.nranks > 1) {
    int e = side_copy(t, &b->read[0], &mg::team_state(t->ws[t->cfg.rank])->broken, sizeof(uint32_t), false);
    if (e) return e;
    word = *(volatile uint32_t *)&b->read[0];
    if (word) *(volatile uint32_t *)&b->fault = word;
  }
  if (word) {
    *code = mg::fault_code(word);
    *origin = mg::fault_origin(word);
  }
  return 0;
}

// Every rank's count of calls begun on an unbroken team (TeamState::entered, through the mappings):
// a peer whose count is below this rank's never began the call this rank began last, the one that
// faulted (calls after a fault are not counted, so the answer does not change later).
int mg_team_missing_peers(mg_team *t, uint32_t *mask) {
  *mask = 0;
  const int me = t->cfg.rank, n = t->cfg.nranks;
  uint32_t *read = t->fault->read;
  for (int k = 0; k < n; ++k) {
    if (!t->opened[k]) return MG_ERR_TEAM;
    int e = side_copy(t, &read[k], &mg::team_state(t->ws[k])->entered, sizeof(uint32_t), k != n - 1);
    if (e) return e;
  }
  for (int k = 0; k < n; ++k)
    if (k != me && (int32_t)(read[k] - read[me]) < 0) *mask |= 1u << k;
  return 0;
}

}  // extern "C"
