// completion.cu's fault path on the host: the CUDA runtime functions it calls and MPI's generalized
// requests are stand-ins defined here, so the request bookkeeping runs without a GPU or MPI.
// A request whose kernel left a fault word completes with the fault's code (mg_completion_wait/test,
// by the owner or by the watcher thread), MPI sees MPI_ERR_OTHER from the query function, a request
// without one succeeds, a CUDA error wins over a fault word, and slots recycle with their word cleared.
// Built and run by tests/test_completion_faults.py; prints "ok" and exits 0 when every check held.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "completion.cuh"
#include "fault.cuh"
#include "mpigpu_cuda.h"

// ---- the CUDA runtime, as completion.cu uses it: events whose state the test sets ----
static std::atomic<int> g_event_result{cudaSuccess};  // what every event query and synchronize returns
static uintptr_t g_next_event = 1;

extern "C" {
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) {
  *e = (cudaEvent_t)g_next_event++;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return (cudaError_t)g_event_result.load(); }
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  int r = g_event_result.load();
  return (cudaError_t)(r == cudaErrorNotReady ? cudaSuccess : r);
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int) {
  *p = malloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int) {
  *dev = host;  // unified addressing: the device sees the host's address
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}
}

// ---- MPI's generalized requests: one handle per start, the callbacks kept per handle ----
typedef int (*query_fn)(void *, void *);
typedef int (*free_fn)(void *);
struct FakeRequest {
  query_fn query;
  free_fn free;
  void *extra;
  std::atomic<bool> completed{false};
};
static FakeRequest g_requests[4096];
static int g_nrequests = 0;
static const int kErrOther = 15;

static int grequest_start(query_fn q, free_fn f, void *, void *extra, void *out) {
  int h = ++g_nrequests;  // handle 0 stays free
  g_requests[h].query = q;
  g_requests[h].free = f;
  g_requests[h].extra = extra;
  g_requests[h].completed = false;
  int32_t handle = h;
  memcpy(out, &handle, sizeof handle);
  return 0;
}
static int grequest_complete(intptr_t h) {
  g_requests[h].completed = true;
  return 0;
}
static int status_set_elements(void *, intptr_t, int) { return 0; }
static int status_set_cancelled(void *, int) { return 0; }

// MPI_Wait on a completed generalized request: the query function's error, then the free function.
static int mpi_wait(int h) {
  char status[64] = {0};
  int err = g_requests[h].query(g_requests[h].extra, status);
  g_requests[h].free(g_requests[h].extra);
  return err;
}

static int failures = 0;
#define CHECK(cond)                                             \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "line %d: check failed: %s\n", __LINE__, #cond); \
      ++failures;                                               \
    }                                                           \
  } while (0)

// Starts a request whose kernel (the test) writes `word` into its fault word; returns its ticket
// and MPI handle.
static uint64_t start(uint32_t word, int watch, int *handle) {
  int slot = -1;
  uint32_t *fault_word = nullptr;
  CHECK(completion_reserve(&slot, &fault_word) == 0);
  CHECK(*fault_word == 0u);  // cleared for this request, whatever its slot held before
  *fault_word = word;        // what a kernel whose call stopped writes (record_fault)
  uint64_t ticket = 0;
  int32_t h = 0;
  CHECK(completion_begin(slot, 0, 0, &h, watch, &ticket) == 0);
  *handle = h;
  return ticket;
}

int main() {
  mg_mpi_api api = {};
  api.grequest_start = (void *)grequest_start;
  api.grequest_complete = (void *)grequest_complete;
  api.status_set_elements = (void *)status_set_elements;
  api.status_set_cancelled = (void *)status_set_cancelled;
  api.status_source_offset = 0;
  api.status_tag_offset = 4;
  api.err_other = kErrOther;
  api.request_bytes = 4;
  CHECK(mg_completion_init(&api) == 0);
  const uint32_t timeout = mg::fault_word(mg::kCauseTimeout, 2), aborted = mg::fault_word(mg::kCauseAbort, 0);

  // A faulted call's request, completed by its owner's wait: the fault's code, MPI_ERR_OTHER for MPI.
  int h = 0;
  uint64_t t = start(timeout, 0, &h);
  CHECK(mg_completion_wait(t) == MG_ERR_TIMEOUT);
  CHECK(g_requests[h].completed);
  CHECK(mg_completion_wait(t) == MG_ERR_TIMEOUT);  // again, before MPI frees it: the same code
  CHECK(mpi_wait(h) == kErrOther);
  CHECK(mg_completion_wait(t) == 0);  // MPI freed it: its own Wait reported the error

  // A call that ended well: success everywhere.
  t = start(0, 0, &h);
  CHECK(mg_completion_wait(t) == 0);
  CHECK(mpi_wait(h) == 0);

  // Test: not done while the event is pending, then done with the fault's code.
  g_event_result = cudaErrorNotReady;
  t = start(aborted, 0, &h);
  int done = -1;
  CHECK(mg_completion_test(t, &done) == 0 && done == 0);
  CHECK(!g_requests[h].completed);
  g_event_result = cudaSuccess;
  CHECK(mg_completion_test(t, &done) == MG_ERR_ABORTED && done == 1);
  CHECK(mg_completion_test(t, &done) == MG_ERR_ABORTED && done == 1);
  CHECK(mpi_wait(h) == kErrOther);

  // A CUDA error of the work wins over a fault word.
  g_event_result = cudaErrorLaunchFailure;
  t = start(timeout, 0, &h);
  CHECK(mg_completion_wait(t) == (int)cudaErrorLaunchFailure);
  CHECK(mpi_wait(h) == kErrOther);
  g_event_result = cudaSuccess;

  // The watcher completes it (the program waits through MPI only); the owner's wait after that
  // still returns the fault's code.
  t = start(timeout, 1, &h);
  while (!g_requests[h].completed) {
  }
  CHECK(mg_completion_wait(t) == MG_ERR_TIMEOUT);
  CHECK(mpi_wait(h) == kErrOther);

  // Slots recycle (each reservation clears its word: start checks it) and a cancelled one returns.
  for (int i = 0; i < 3 * MG_COMPLETION_SLOTS; ++i) {
    int slot = -1;
    uint32_t *word = nullptr;
    CHECK(completion_reserve(&slot, &word) == 0);
    *word = timeout;
    completion_cancel(slot);
  }
  for (int i = 0; i < 8; ++i) {
    t = start(0, 0, &h);
    CHECK(mg_completion_wait(t) == 0);
    CHECK(mpi_wait(h) == 0);
  }
  mg_completion_shutdown();
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
