/* A non-blocking call's device buffers through host copies, for a process with no handler (a C program
 * under LD_PRELOAD) on an MPI that is not CUDA-aware: MPI_Isend, MPI_Irecv, MPI_Iallreduce ... and the
 * request-based one-sided calls (MPI_Rput ...) post the library's call on host copies of their device
 * buffers (staging.c's spans), and the copies live until the request completes. The calls that complete
 * requests (MPI_Wait & co., generated from REQUEST_CALLS) come here while any request holds copies: after
 * the library's call, each held request it completed (its handle replaced, MPI_REQUEST_NULL) has what MPI
 * wrote copied back to device memory before the call returns, and its copies freed; MPI_Request_get_status
 * and its MPI-4.1 forms copy back a request they find complete (it stays held until it is freed).
 *
 * MPI_Request_free of a held request: a send's request is kept here (the caller's handle becomes
 * MPI_REQUEST_NULL) and tested at later calls of this file, which free its copy once the library is done
 * with it; a receive's is refused, since nothing could tell when to copy its data back. Persistent
 * requests (MPI_Send_init ...) are refused: the library's MPI_Start would reuse copies made at the
 * request's creation. A held request must be completed through the MPI_* calls, which the interposer
 * sees, not PMPI_* directly.
 *
 * Costs nothing until the first such call: the request calls test one atomic counter. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "functions.h"

int mgi_request_width(void);                                /* requests.c */
uintptr_t mgi_request_at(const void *requests, int i);
void mgi_request_put(void *requests, int i, uintptr_t h);

typedef struct held_request {
  uintptr_t handle;                  /* the library's request, as a word */
  int detached;                      /* freed by the caller (a send): kept and tested here */
  int writes;                        /* MPI writes one of its copies (a receive, a result) */
  int copied;                        /* found complete by MPI_Request_get_status: copied back once */
  mgi_staged s[MGI_MAX_BUFFERS];
  struct held_request *next;
} held_request;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static held_request *held;
static atomic_int nheld;

typedef int (*test_fn)(void *, int *, intptr_t);
typedef int (*get_status_fn)(intptr_t, int *, intptr_t);
static _Atomic(void *) lower_test, lower_get_status;

int mgi_staged_requests(void) { return atomic_load_explicit(&nheld, memory_order_acquire) > 0; }

/* MPI_REQUEST_NULL of the library below: MPICH's a constant; Open MPI's the address of ompi_request_null,
 * the program's copy of it where a program linked against the library holds one (a copy relocation, which
 * the library's own code uses too), else the library's */
static uintptr_t request_null(void) {
  if (!mgi_is_open_mpi()) return (uintptr_t)(intptr_t)(int32_t)0x2c000000;
  void *global = dlsym(RTLD_DEFAULT, "ompi_request_null");
  return (uintptr_t)(global ? global : mgi_lower_named("ompi_request_null"));
}

/* The held request of handle h not among taken[0 .. ntaken) (a call that names one request twice gets it
 * once), or NULL. Lock held. */
static held_request *find(uintptr_t h, held_request *const *taken, int ntaken) {
  for (held_request *r = held; r; r = r->next) {
    if (r->handle != h || r->detached) continue;
    int dup = 0;
    for (int j = 0; j < ntaken && !dup; j++) dup = taken[j] == r;
    if (!dup) return r;
  }
  return NULL;
}

static void unlink_request(held_request *gone) { /* lock held */
  for (held_request **at = &held; *at; at = &(*at)->next)
    if (*at == gone) {
      *at = gone->next;
      atomic_fetch_sub_explicit(&nheld, 1, memory_order_release);
      return;
    }
}

/* What MPI wrote into request r's copies, copied back to device memory. */
static void copy_back(held_request *r, char *why, size_t why_bytes) {
  for (int b = 0; b < MGI_MAX_BUFFERS; b++) {
    const mgi_staged *s = &r->s[b];
    if (!s->host || !s->writes) continue;
    int cu = mgi_copy(s->device, s->host, s->bytes, s->device);
    if (cu && !why[0]) snprintf(why, why_bytes, "copying back to device buffer %d failed (CUDA error %d)", b, cu);
  }
}

/* A request the library completed: what MPI wrote copied back (unless done already), its copies freed. */
static void finish(held_request *r, char *why, size_t why_bytes) {
  if (!r->copied) copy_back(r, why, why_bytes);
  mgi_unstage(r->s, 0, why, why_bytes);
  free(r);
}

/* The request calls that leave complete requests as they are (MPI_Request_get_status and its MPI-4.1
 * forms); the others replace a request they complete with MPI_REQUEST_NULL. */
static int leaves_requests(int id) {
  return id == MGI_REQ_Request_get_status || id == MGI_REQ_Request_get_status_any ||
         id == MGI_REQ_Request_get_status_all || id == MGI_REQ_Request_get_status_some;
}

/* The detached requests the library is done with, freed (their copies: sends, nothing to copy back). */
static void reap_detached(void) {
  test_fn test = (test_fn)mgi_lower_cached(&lower_test, "PMPI_Test");
  if (!test) return;
  held_request *done = NULL;
  pthread_mutex_lock(&lock);
  for (held_request **at = &held; *at;) {
    held_request *r = *at;
    int flag = 0;
    if (r->detached && test(&r->handle, &flag, mgi_c_status_ignore()) == 0 && flag) {
      *at = r->next;
      atomic_fetch_sub_explicit(&nheld, 1, memory_order_release);
      r->next = done;
      done = r;
      continue;
    }
    at = &r->next;
  }
  pthread_mutex_unlock(&lock);
  char why[160] = "";
  while (done) {
    held_request *next = done->next;
    finish(done, why, sizeof why);
    done = next;
  }
}

int mgi_stage_request(int id, intptr_t *a) {
  const mgi_function *fn = &mgi_functions[id];
  const intptr_t comm = fn->comm >= 0 ? a[fn->comm] : fn->win >= 0 ? a[fn->win] : 0;
  if (fn->persistent)
    return mgi_fail(id, comm,
                    "a persistent call with device buffers needs mpigpu's handler (python -m mpigpu) or a "
                    "CUDA-aware MPI below; this process has neither");
  reap_detached();
  held_request *r = calloc(1, sizeof *r);
  if (!r) return mgi_fail(id, comm, "no host memory for a non-blocking call's staging");
  char why[160] = "";
  int rc = mgi_stage_call(id, a, r->s, why, sizeof why);
  if (!rc) rc = mgi_call_lower(id, a);
  int staged = 0;
  for (int b = 0; b < MGI_MAX_BUFFERS; b++) {
    staged |= r->s[b].host != NULL;
    r->writes |= r->s[b].host && r->s[b].writes;
  }
  if (why[0] || rc || !staged) { /* nothing started, or nothing to hold */
    mgi_unstage(r->s, 0, why, sizeof why);
    free(r);
    return why[0] ? mgi_fail(id, comm, why) : rc;
  }
  r->handle = mgi_request_at((const void *)a[fn->request], 0);
  /* complete already (MPICH gives a send that completed at once a shared handle of its own, the same for
   * many requests): done now, not held, so every held handle is one request's */
  get_status_fn status = (get_status_fn)mgi_lower_cached(&lower_get_status, "PMPI_Request_get_status");
  int flag = 0;
  if (status && status((intptr_t)r->handle, &flag, mgi_c_status_ignore()) == 0 && flag) {
    finish(r, why, sizeof why);
    return why[0] ? mgi_fail(id, comm, why) : rc;
  }
  pthread_mutex_lock(&lock);
  r->next = held;
  held = r;
  atomic_fetch_add_explicit(&nheld, 1, memory_order_release);
  pthread_mutex_unlock(&lock);
  return rc;
}

/* Where request call c keeps its requests: how many (n) and where (one by value: *value holds it, the
 * library's width in its low bytes, as mgi_request_at reads it). */
static void *requests_of(const mgi_request_call *c, const intptr_t *a, int *n, uintptr_t *value) {
  if (c->count == -2) {
    *n = 1;
    *value = (uintptr_t)a[c->requests];
    return value;
  }
  *n = c->count == -1 ? (a[c->requests] ? 1 : 0) : (int)a[c->count];
  return (void *)a[c->requests];
}

/* MPI_Request_free of held request r (a pointer call: *requests its handle). */
static int free_held(int id, void *requests, held_request *r) {
  if (r->writes)
    return mgi_fail_named(mgi_request_calls[id].name,
                          "freeing an active request that receives into device memory through host copies: "
                          "its data could not reach device memory; complete it (MPI_Wait) instead");
  pthread_mutex_lock(&lock);
  r->detached = 1;
  pthread_mutex_unlock(&lock);
  mgi_request_put(requests, 0, request_null());
  return 0;
}

int mgi_request_call_staged(int id, intptr_t *a) {
  const mgi_request_call *c = &mgi_request_calls[id];
  reap_detached();
  int n = 0;
  uintptr_t value = 0;
  void *requests = requests_of(c, a, &n, &value);
  /* the call's held requests: their places and handles before the call */
  enum { kOnStack = 64 };
  int places_here[kOnStack];
  held_request *ours_here[kOnStack];
  int *places = places_here;
  held_request **ours = ours_here;
  if (n > kOnStack) {
    places = malloc((size_t)n * sizeof *places);
    ours = malloc((size_t)n * sizeof *ours);
    if (!places || !ours) {
      free(places);
      free(ours);
      return mgi_fail_named(c->name, "no host memory to look at the call's requests");
    }
  }
  int k = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n && requests; i++) {
    held_request *r = find(mgi_request_at(requests, i), ours, k);
    if (r) places[k] = i, ours[k++] = r;
  }
  pthread_mutex_unlock(&lock);
  int rc;
  char why[160] = "";
  if (k && id == MGI_REQ_Request_free) {
    rc = free_held(id, requests, ours[0]);
  } else {
    rc = mgi_call_lower_request(id, a);
    for (int j = 0; j < k; j++) {
      held_request *r = ours[j];
      if (leaves_requests(id)) { /* the library says whether each is complete */
        get_status_fn status = (get_status_fn)mgi_lower_cached(&lower_get_status, "PMPI_Request_get_status");
        int flag = 0;
        if (!r->copied && status && status((intptr_t)r->handle, &flag, mgi_c_status_ignore()) == 0 && flag) {
          copy_back(r, why, sizeof why);
          r->copied = 1;
        }
        continue;
      }
      if (mgi_request_at(requests, places[j]) == r->handle) continue; /* not completed by this call */
      pthread_mutex_lock(&lock);
      unlink_request(r);
      pthread_mutex_unlock(&lock);
      finish(r, why, sizeof why);
    }
  }
  if (places != places_here) free(places), free(ours);
  if (why[0]) return mgi_fail_named(c->name, why);
  return rc;
}
