// team.cuh: the host-side state of one device team (shared by transport_ipc.cu and collectives.cu).
#pragma once
#include <cuda_runtime.h>
#include "mpigpu_cuda.h"
#include "protocol.cuh"

static inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

namespace mg { struct ResidentBox; struct ResidentCall; }

// The host side of a team's resident kernel (resident.cu, resident_kernel.cuh).
struct mg_resident {
  cudaStream_t stream;     // the instances run here (created with the team; none when box is null)
  mg::ResidentBox *box;    // the mailbox, pinned host memory; null: the team has no resident kernel
  mg::ResidentBox *box_dev;  // the mailbox's device address
  uint32_t call;           // calls run so far; each completed before the next was rung
  uint32_t epoch;          // instances launched so far
  int running;             // an instance was launched and has not been seen returning
  uint64_t linger_ns;      // MPIGPU_RESIDENT_US: the longest an instance waits, and the longest gap kept
  uint64_t returned_ns;    // host clock when the last blocking call that could run resident returned
  uint64_t gap_ns;         // the longest recent gap between such calls (halved at each call)
  uint32_t linger_us;      // what the next call rung tells the instance to wait after it
  uint64_t calls, launches, alone;  // counters for tests and the debug log (mg_team_resident_stats)
};

struct mg_team {
  mg_team_config cfg;
  mg::Layout layout;
  char *ws[MG_MAX_RANKS];      // workspaces as mapped here; ws[rank] is this rank's own allocation
  int opened[MG_MAX_RANKS];
  uint64_t timeout_ns;
  int sm_count;                // the GPU's SMs (a launched grid beside a waiting resident instance)
  // The fault model (fault.cuh, fault.cu): the team's fault box in mapped pinned memory, a stream for
  // the host's own copies of fault state, whether mg_team_abort ran (atomic), and the fault word of
  // the request whose call is being enqueued (mg_collective_request; null otherwise).
  mg::FaultBox *fault;
  mg::FaultBox *fault_dev;
  cudaStream_t side;
  int aborting;
  uint32_t *status;
  // Ordering across streams: calls of one team share its workspace, so a call must not start before
  // the previous one ended. A blocking call ends before the next begins; after a non-blocking one
  // (`inflight`), a call on another stream first waits for `done`, recorded after the last launch.
  cudaEvent_t done;
  uintptr_t last_stream;
  int inflight;
  mg_resident res;
  // The blocking wait for a launched call (stream_done.cu): a word of mapped host memory that the
  // stream writes call numbers into (null: no driver entry for it, waits synchronize).
  uint32_t *done_word;
  uint32_t *done_word_dev;
  uint32_t done_seq;
};

// Whether a call of the team faulted or the team was aborted (one read of pinned host memory): no
// call runs on it after that.
static inline bool team_broken(const mg_team *t) {
  return (*(const volatile uint32_t *)&t->fault->fault | *(const volatile uint32_t *)&t->fault->abort) != 0;
}

// fault.cu
int fault_open(mg_team *t);   // with the team's device current
void fault_close(mg_team *t);  // after the team's kernels have ended

// stream_done.cu
int stream_done_open(mg_team *t);   // with the team's device current
void stream_done_close(mg_team *t);
// A blocking call's wait for its launch on `stream`: returns once the stream has run everything
// queued so far.
int stream_done_wait(mg_team *t, uintptr_t stream);

// resident.cu
int resident_open(mg_team *t);   // with the team's device current
int resident_close(mg_team *t);  // stops a running instance; with the team's device current
// Tells a running instance to return, without waiting: it is gone a poll later (~1 us), before a
// launch issued now has started its kernel. Called before a direct or ring kernel, whose blocks take
// a whole SM each (221 registers per thread): a resident block on an SM would keep one of their
// blocks from starting until another ends; and for a blocking call whose stream is busy, whose work
// before the call is better off with the instance's SMs.
int resident_stop(mg_team *t);
// 1 when a blocking call may run in the resident kernel now: the team has one, the call does not
// come alone (resident.cu) and nothing is queued before it (no call of this team in flight, the
// caller's stream idle). Also sets how long the instance waits after the call.
int resident_ready(mg_team *t, uintptr_t stream);
// A blocking call that could run resident (resident_form) returned: the next one's gap starts.
void resident_returned(mg_team *t);
// Runs call `c` (an LL or LL128 plan, resident_call_of; an exchange, resident_exchange_of, with its
// table of mg::kTableWords byte ranges) in the resident kernel; returns when done.
// gate (may be null): asked just before the call is rung; MG_ERR_DECLINED when it declines.
int resident_run(mg_team *t, const mg::ResidentCall &c, mg_gate_fn gate = nullptr, void *ctx = nullptr,
                 const uint32_t *table = nullptr);

// collectives.cu: a call's launch on `stream` (its arguments at ctx), enqueued by team_enqueue after the
// team's previous call (a non-blocking one on another stream is waited for through the team's event);
// async: this call may still run when the next is enqueued. team_call_result: a blocking call's
// result, the CUDA error or else the fault its kernel recorded.
typedef int (*team_launch_fn)(mg_team *t, const void *ctx, uintptr_t stream);
int team_enqueue(mg_team *t, team_launch_fn launch, const void *ctx, uintptr_t stream, int async);
int team_call_result(mg_team *t, int e);

// Runs `body` with cfg.device current, restoring the caller's device after (the user's framework
// owns the current device; we never leave it changed).
#define MG_WITH_DEVICE(dev, body)                                        \
  do {                                                                   \
    int mg_prev_ = -1;                                                   \
    cudaError_t mg_e_ = cudaGetDevice(&mg_prev_);                        \
    if (mg_e_ != cudaSuccess) return (int)mg_e_;                         \
    if (mg_prev_ != (dev)) {                                             \
      mg_e_ = cudaSetDevice(dev);                                        \
      if (mg_e_ != cudaSuccess) return (int)mg_e_;                       \
    }                                                                    \
    int mg_rc_ = (body);                                                 \
    if (mg_prev_ != (dev)) cudaSetDevice(mg_prev_);                      \
    return mg_rc_;                                                       \
  } while (0)
