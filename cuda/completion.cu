// completion.cu: MPI generalized requests for GPU work, completed in C.
//
// A non-blocking or persistent GPU collective hands the user an MPI generalized request that must be
// completed (MPI_Grequest_complete) once the CUDA event recorded after its kernel has passed. Two
// parties may do it: the owner's Wait/Test on the calling thread, or a watcher thread for programs
// that only wait through MPI itself (MPI_Waitall over a mixed list sees nothing but the handle).
// Both run here without the Python interpreter, so neither waits for the other's lock or the GIL;
// a compare-and-swap on the slot's state word decides who completes.
//
// MPI is reached only through function pointers the Cython layer resolves in the MPI library that
// mpi4py loaded: no MPI header at build time, and any ABI (handles travel as intptr_t, which both
// int handles (MPICH) and pointer handles (Open MPI) fit; MPI_Status fields by measured offsets).
// None of this runs on a blocking collective's path.
//
// Faults: the event of a call whose kernel stopped (a peer never came, an abort: protocol.cuh) passes
// like any other, so each slot has a fault word in mapped pinned memory that such a kernel writes
// (mg_collective_request hands it to the kernel); the request then completes with the fault's code
// and MPI_ERR_OTHER. Per request, not per team: a request whose call ended before the fault succeeds.
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <atomic>

#include "completion.cuh"
#include "fault.cuh"
#include "mpigpu_cuda.h"

namespace {

typedef int (*query_fn_t)(void *, void *);
typedef int (*free_fn_t)(void *);
typedef int (*cancel_fn_t)(void *, int);
typedef int (*grequest_start_t)(query_fn_t, free_fn_t, cancel_fn_t, void *, void *);
typedef int (*grequest_complete_t)(intptr_t);
typedef int (*status_set_elements_t)(void *, intptr_t, int);
typedef int (*status_set_cancelled_t)(void *, int);

constexpr int kMaxDevices = 16;
// Low two bits of a slot's word; FREE is 0. CLAIMED: the party that completes it is writing its code.
constexpr uint64_t kPending = 1, kComplete = 2, kClaimed = 3;

// One outstanding request. `word` = generation << 2 | state; the generation changes each time the
// slot is recycled, so a stale ticket (or the watcher's stale view) never completes a newer request.
struct Slot {
  std::atomic<uint64_t> word{0};
  cudaEvent_t event[kMaxDevices] = {};  // created on first use per device, kept: no per-call creation
  int device = 0;
  intptr_t request = 0;
  int error = 0;           // MPI error code reported by the query function (0: success)
  int code = 0;            // the completion's C ABI code: a CUDA error, a fault's MG_ERR_*, or 0
  bool completed = false;  // MPI_Grequest_complete has returned          (under g_mutex)
  bool freed = false;      // MPI has called the free function            (under g_mutex)
  int next_free = -1;
};

Slot g_slots[MG_COMPLETION_SLOTS];
mg_mpi_api g_api;
bool g_ready = false;
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
int g_free = -1;  // head of the free list
int g_pending[MG_COMPLETION_SLOTS];
uint64_t g_pending_gen[MG_COMPLETION_SLOTS];
// The watcher's own list: what it still polls (at most all slots) plus what was handed over since.
int g_local[2 * MG_COMPLETION_SLOTS];
uint64_t g_local_gen[2 * MG_COMPLETION_SLOTS];
int g_npending = 0;  // handed to the watcher, not yet taken by it
bool g_watcher_running = false, g_stop = false;
pthread_t g_watcher;
// One fault word per slot, mapped pinned memory (allocated at the first reservation); the device
// address is the host's under unified addressing, in every context (portable).
uint32_t *g_fault_words = nullptr;
uint32_t *g_fault_words_dev = nullptr;

uint64_t ticket_of(int idx, uint64_t gen) { return gen * MG_COMPLETION_SLOTS + (uint64_t)idx; }
int index_of(uint64_t ticket) { return (int)(ticket % MG_COMPLETION_SLOTS); }
uint64_t gen_of(uint64_t ticket) { return ticket / MG_COMPLETION_SLOTS; }

void release_locked(int idx) {  // both completed and freed: back to the free list, next generation
  Slot &s = g_slots[idx];
  uint64_t gen = s.word.load() >> 2;
  s.word.store((gen + 1) << 2);
  s.next_free = g_free;
  g_free = idx;
}

int query_cb(void *extra, void *status) {
  Slot &s = g_slots[(intptr_t)extra];
  // MPI's empty status: the source and tag of a collective mean nothing.
  memcpy((char *)status + g_api.status_source_offset, &g_api.any_source, sizeof(int));
  memcpy((char *)status + g_api.status_tag_offset, &g_api.any_tag, sizeof(int));
  ((status_set_elements_t)g_api.status_set_elements)(status, g_api.byte_type, 0);
  ((status_set_cancelled_t)g_api.status_set_cancelled)(status, 0);
  return s.error;
}

int free_cb(void *extra) {
  int idx = (int)(intptr_t)extra;
  pthread_mutex_lock(&g_mutex);
  g_slots[idx].freed = true;
  if (g_slots[idx].completed) release_locked(idx);
  pthread_mutex_unlock(&g_mutex);
  return 0;
}

int cancel_cb(void *, int) { return 0; }  // GPU work cannot be cancelled; MPI reports it not cancelled

// The code of a request that the other party completes or completed: its code once written; 0 when the
// slot has moved on (MPI freed the request: its own Wait reported the error).
int finished_code(int idx, uint64_t gen) {
  Slot &s = g_slots[idx];
  for (;;) {
    const uint64_t w = s.word.load();
    if (w == (gen << 2 | kComplete)) return s.code;
    if (w != (gen << 2 | kClaimed)) return 0;
  }
}

// Completes the request if this caller wins the slot (state PENDING of generation gen); returns its
// code (finished_code when the other party won). cuda_error: the event's outcome (0: the work
// finished; then the slot's fault word says whether it ended in a fault).
int claim_and_complete(int idx, uint64_t gen, int cuda_error) {
  Slot &s = g_slots[idx];
  uint64_t expect = gen << 2 | kPending;
  intptr_t request = s.request;  // read before the claim: once completed the slot may be recycled
  if (!s.word.compare_exchange_strong(expect, gen << 2 | kClaimed)) return finished_code(idx, gen);
  const int code = cuda_error ? cuda_error : mg::fault_code(*(volatile uint32_t *)&g_fault_words[idx]);
  s.code = code;
  s.error = code ? g_api.err_other : 0;
  s.word.store(gen << 2 | kComplete);
  ((grequest_complete_t)g_api.grequest_complete)(request);
  pthread_mutex_lock(&g_mutex);
  s.completed = true;
  if (s.freed) release_locked(idx);
  pthread_mutex_unlock(&g_mutex);
  return code;
}

// Gives slot idx back to the free list (reserved, never started).
void give_back(int idx) {
  pthread_mutex_lock(&g_mutex);
  g_slots[idx].next_free = g_free;
  g_free = idx;
  pthread_mutex_unlock(&g_mutex);
}

// Polls every watched request's event; completes those whose work is done. Never blocks on one
// event: a request that cannot finish until its owner makes progress elsewhere (a collective whose
// peers wait for this rank's other request) must not hold back the others.
void *watch_loop(void *) {
  int *local = g_local;
  uint64_t *local_gen = g_local_gen;
  int n = 0, current_device = -1, idle_rounds = 0;
  for (;;) {
    pthread_mutex_lock(&g_mutex);
    while (n == 0 && g_npending == 0 && !g_stop) pthread_cond_wait(&g_cond, &g_mutex);
    if (g_stop) {
      pthread_mutex_unlock(&g_mutex);
      return nullptr;
    }
    for (int i = 0; i < g_npending; ++i) {
      local[n] = g_pending[i];
      local_gen[n++] = g_pending_gen[i];
    }
    g_npending = 0;
    pthread_mutex_unlock(&g_mutex);

    int kept = 0;
    bool progress = false;
    for (int i = 0; i < n; ++i) {
      Slot &s = g_slots[local[i]];
      if (s.word.load() != (local_gen[i] << 2 | kPending)) continue;  // its owner completed it
      if (s.device != current_device) {
        cudaSetDevice(s.device);
        current_device = s.device;
      }
      cudaError_t e = cudaEventQuery(s.event[s.device]);
      if (e == cudaErrorNotReady) {
        local[kept] = local[i];
        local_gen[kept++] = local_gen[i];
        continue;
      }
      if (e != cudaSuccess) cudaGetLastError();
      claim_and_complete(local[i], local_gen[i], (int)e);
      progress = true;
    }
    n = kept;
    // Spin briefly after progress (a burst of requests completes together), then poll every 20 us.
    idle_rounds = progress ? 0 : idle_rounds + 1;
    if (n && idle_rounds > 64) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, nullptr);
    }
  }
}

}  // namespace

extern "C" {

int mg_completion_init(const mg_mpi_api *api) {
  pthread_mutex_lock(&g_mutex);
  if (!g_ready) {
    g_api = *api;
    for (int i = MG_COMPLETION_SLOTS - 1; i >= 0; --i) {
      g_slots[i].word.store((uint64_t)1 << 2);  // generation 1: no ticket is 0
      g_slots[i].next_free = g_free;
      g_free = i;
    }
    g_ready = true;
  }
  pthread_mutex_unlock(&g_mutex);
  return 0;
}

}  // extern "C"

int completion_reserve(int *slot, uint32_t **fault_word) {
  *slot = -1;
  if (!g_ready) return MG_ERR_ARG;
  pthread_mutex_lock(&g_mutex);
  int e = 0;
  if (!g_fault_words) {  // the caller's device is current: the allocation's context
    void *p = nullptr, *dev = nullptr;
    cudaError_t c = cudaHostAlloc(&p, MG_COMPLETION_SLOTS * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
    if (c == cudaSuccess) {
      c = cudaHostGetDevicePointer(&dev, p, 0);
      if (c != cudaSuccess) cudaFreeHost(p);
    }
    if (c != cudaSuccess) {
      cudaGetLastError();
      e = (int)c;
    } else {
      memset(p, 0, MG_COMPLETION_SLOTS * sizeof(uint32_t));
      g_fault_words = (uint32_t *)p;
      g_fault_words_dev = (uint32_t *)dev;
    }
  }
  int idx = e ? -1 : g_free;
  if (idx >= 0) g_free = g_slots[idx].next_free;
  pthread_mutex_unlock(&g_mutex);
  if (e) return e;
  if (idx < 0) return MG_ERR_BUSY;
  *(volatile uint32_t *)&g_fault_words[idx] = 0;
  *slot = idx;
  *fault_word = g_fault_words_dev + idx;
  return 0;
}

void completion_cancel(int slot) { give_back(slot); }

int completion_begin(int idx, uintptr_t stream, int device, void *request, int watch, uint64_t *ticket) {
  *ticket = 0;
  Slot &s = g_slots[idx];
  auto fail = [&](int err) {
    give_back(idx);
    return err;
  };
  if (device < 0 || device >= kMaxDevices) return fail(MG_ERR_ARG);
  if (!s.event[device]) {  // the caller has `device` current
    cudaError_t e = cudaEventCreateWithFlags(&s.event[device], cudaEventDisableTiming);
    if (e != cudaSuccess) {
      cudaGetLastError();
      s.event[device] = nullptr;
      return fail((int)e);
    }
  }
  cudaError_t e = cudaEventRecord(s.event[device], (cudaStream_t)stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail((int)e);
  }
  uint64_t gen = s.word.load() >> 2;
  s.device = device;
  s.error = 0;
  s.code = 0;
  s.completed = s.freed = false;
  union {
    intptr_t p;
    int32_t i;
    char raw[16];
  } handle;
  memset(&handle, 0, sizeof handle);
  s.word.store(gen << 2 | kPending);
  int err = ((grequest_start_t)g_api.grequest_start)(query_cb, free_cb, cancel_cb, (void *)(intptr_t)idx,
                                                      &handle);
  if (err) {
    s.word.store(gen << 2);
    return fail(MG_ERR_MPI);
  }
  s.request = g_api.request_bytes == 4 ? (intptr_t)handle.i : handle.p;
  memcpy(request, &handle, (size_t)g_api.request_bytes);
  *ticket = ticket_of(idx, gen);
  if (watch) {
    pthread_mutex_lock(&g_mutex);
    if (g_npending == MG_COMPLETION_SLOTS) {  // the watcher fell behind: drop what is already complete
      int kept = 0;
      for (int i = 0; i < g_npending; ++i)
        if (g_slots[g_pending[i]].word.load() == (g_pending_gen[i] << 2 | kPending)) {
          g_pending[kept] = g_pending[i];
          g_pending_gen[kept++] = g_pending_gen[i];
        }
      g_npending = kept;  // < MG_COMPLETION_SLOTS: this slot is pending and not yet listed
    }
    g_pending[g_npending] = idx;
    g_pending_gen[g_npending++] = gen;
    int rc = 0;
    if (!g_watcher_running) {
      g_stop = false;
      rc = pthread_create(&g_watcher, nullptr, watch_loop, nullptr);
      g_watcher_running = rc == 0;
    }
    pthread_cond_signal(&g_cond);
    pthread_mutex_unlock(&g_mutex);
    (void)rc;  // without a watcher the request stays valid: the owner's Wait or Test completes it
  }
  return 0;
}

extern "C" {

int mg_completion_wait(uint64_t ticket) {
  int idx = index_of(ticket);
  uint64_t gen = gen_of(ticket);
  Slot &s = g_slots[idx];
  if (s.word.load() != (gen << 2 | kPending)) return finished_code(idx, gen);  // completed already
  cudaError_t e = cudaEventSynchronize(s.event[s.device]);
  if (e != cudaSuccess) cudaGetLastError();
  return claim_and_complete(idx, gen, (int)e);
}

int mg_completion_test(uint64_t ticket, int *done) {
  int idx = index_of(ticket);
  uint64_t gen = gen_of(ticket);
  Slot &s = g_slots[idx];
  *done = 1;
  if (s.word.load() != (gen << 2 | kPending)) return finished_code(idx, gen);
  cudaError_t e = cudaEventQuery(s.event[s.device]);
  if (e == cudaErrorNotReady) {
    *done = 0;
    return 0;
  }
  if (e != cudaSuccess) cudaGetLastError();
  return claim_and_complete(idx, gen, (int)e);
}

void mg_completion_shutdown(void) {
  pthread_mutex_lock(&g_mutex);
  bool running = g_watcher_running;
  g_stop = true;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_mutex);
  if (running) pthread_join(g_watcher, nullptr);
  pthread_mutex_lock(&g_mutex);
  g_watcher_running = false;
  pthread_mutex_unlock(&g_mutex);
}

}  // extern "C"
