// team.cuh: the host-side state of one device team (shared by transport_ipc.cu and collectives.cu).
#pragma once
#include <cuda_runtime.h>
#include "mpigpu_cuda.h"
#include "protocol.cuh"

static inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

struct mg_team {
  mg_team_config cfg;
  mg::Layout layout;
  char *ws[MG_MAX_RANKS];      // workspaces as mapped here; ws[rank] is this rank's own allocation
  int opened[MG_MAX_RANKS];
  uint64_t timeout_ns;
  // Ordering across streams: calls of one team share its workspace, so a call must not start before
  // the previous one ended. A blocking call ends before the next begins; after a non-blocking one
  // (`inflight`), a call on another stream first waits for `done`, recorded after the last launch.
  cudaEvent_t done;
  uintptr_t last_stream;
  int inflight;
};

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
