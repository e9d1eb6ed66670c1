/* A non-blocking call's device buffers through host copies, for a process with no handler (a C program
 * under LD_PRELOAD) on an MPI that is not CUDA-aware: MPI_Isend, MPI_Irecv, MPI_Iallreduce ... and the
 * request-based one-sided calls (MPI_Rput ...) post the library's call on host copies of their device
 * buffers (staging.c's spans), and the copies live until the request completes. The calls that complete
 * requests (MPI_Wait & co., generated from REQUEST_CALLS) come here while any request holds copies: after
 * the library's call, each held request it completed (its handle replaced, MPI_REQUEST_NULL) has what MPI
 * wrote copied back to device memory before the call returns, and its copies freed; MPI_Request_get_status
 * and its MPI-4.1 forms copy back a request they find complete (it stays held until it is freed). A
 * request-based one-sided call's result is copied back by the window's synchronization that completes it
 * too (MPI_Win_flush, MPI_Win_unlock ...: one_sided.c calls mgi_requests_synchronized).
 *
 * Persistent requests (MPI_Send_init, MPI_Allreduce_init ...) hold their copies from the init to
 * MPI_Request_free: MPI_Start and MPI_Startall copy the device buffers in before the library starts the
 * round, and the first request call that finds the round complete (the library's
 * MPI_Request_get_status: a persistent request's handle stays) copies back what MPI wrote.
 *
 * MPI_Request_free of a held request that is still active: a send's request is kept here (the caller's
 * handle becomes MPI_REQUEST_NULL) and tested at later calls of this file, which free its copy once the
 * library is done with it; a receive's is refused, since nothing could tell when to copy its data back.
 * Partitioned requests (MPI_Psend_init, MPI_Precv_init) hold their copies likewise, partition by
 * partition: MPI_Pready (_range, _list) copies the partitions it marks ready in before the library sends
 * them, MPI_Parrived copies a partition it finds arrived back to device memory, and the round's completion
 * copies back the whole receive. A held request must be completed through the MPI_* calls, which the
 * interposer sees, not PMPI_* directly.
 *
 * Threads: a request call marks the held requests it names as its own (busy) while it runs, so another
 * thread's call never takes them, even where the library hands the handle of a request it just completed
 * to a new one. Errors go through the error handler of the communicator or window the request was made on.
 *
 * Costs nothing until the first such call: the request calls test one atomic counter. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "functions.h"


typedef struct held_request {
  uintptr_t handle;    /* the library's request, as a word */
  intptr_t errh;       /* the communicator (or window, on_window) whose handler takes its errors */
  int on_window;       /* a request-based one-sided call's: errh its window */
  int target;          /* on_window: the target rank */
  int detached;        /* freed by the caller while active (a send): kept and tested here */
  int busy;            /* a request call is running on it (lock held to change it) */
  int writes;          /* MPI writes one of its copies (a receive, a result) */
  int copied;          /* this round found complete: copied back once (persistent: until the next MPI_Start) */
  int persistent;      /* a persistent request: held from its init to MPI_Request_free */
  int active;          /* persistent: started, its round not yet found complete */
  /* partitioned: partition i is elements i * part_count .. of the buffer, whose first byte lies at
   * part_device and part_host on each side; its bytes from i * part_count * extent + true_lb */
  int partitions;
  long long part_count;
  intptr_t extent, true_lb, true_extent;
  char *part_device, *part_host;
  unsigned char *arrived; /* a receive's partitions copied back by MPI_Parrived this round (lock held) */
  mgi_staged s[MGI_MAX_BUFFERS];
  void *owned[MGI_MAX_OWNED]; /* memory the library reads until the request is done (a Fortran w-form's
                               * datatypes converted to C handles): freed with it */
  struct held_request *next, *prev; /* the list of every held request */
  struct held_request *same_bucket; /* the next in its handle's bucket */
} held_request;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static held_request *held;
static atomic_int nheld, ndetached, nwindows; /* held; of them detached, and made on a window */
/* The held requests by handle, so a request call finds each of its requests in a bucket rather than by
 * walking every held request (a halo exchange's or an all-to-all's hundreds of requests per MPI_Waitall
 * took time quadratic in their number). A power of two of buckets, doubled when the held requests
 * outnumber them twice; where that memory is not there the table stays (longer buckets, the same answers),
 * and with no table at all the list is walked. */
static held_request **buckets;
static size_t nbuckets;
enum { kFirstBuckets = 64 };

typedef int (*test_fn)(void *, int *, intptr_t);
typedef int (*get_status_fn)(intptr_t, int *, intptr_t);
static _Atomic(void *) lower_test, lower_get_status;

int mgi_staged_requests(void) { return atomic_load_explicit(&nheld, memory_order_acquire) > 0; }
int mgi_staged_window_requests(void) { return atomic_load_explicit(&nwindows, memory_order_acquire) > 0; }

/* MPI_REQUEST_NULL of the library below: MPICH's a constant; Open MPI's the address of ompi_request_null,
 * the program's copy of it where a program linked against the library holds one (a copy relocation, which
 * the library's own code uses too), else the library's */
static uintptr_t request_null(void) {
  static _Atomic uintptr_t found;
  uintptr_t v = atomic_load_explicit(&found, memory_order_relaxed);
  if (v) return v;
  if (!mgi_is_open_mpi()) {
    v = (uintptr_t)(intptr_t)(int32_t)0x2c000000;
  } else {
    void *global = dlsym(RTLD_DEFAULT, "ompi_request_null");
    v = (uintptr_t)(global ? global : mgi_lower_named("ompi_request_null"));
  }
  atomic_store_explicit(&found, v, memory_order_relaxed);
  return v;
}

static void count(held_request *r, int by) { /* (lock held where r is in the list) */
  atomic_fetch_add_explicit(&nheld, by, memory_order_release);
  if (r->on_window) atomic_fetch_add_explicit(&nwindows, by, memory_order_release);
}

static size_t bucket_of(uintptr_t h, size_t n) { return (size_t)(((uint64_t)h * 0x9e3779b97f4a7c15ull) >> 32) & (n - 1); }

/* The table remade with n buckets from the list (lock held); kept as it was where n buckets cannot be had. */
static void rehash(size_t n) {
  held_request **fresh = calloc(n, sizeof *fresh);
  if (!fresh) return;
  for (held_request *r = held; r; r = r->next) {
    const size_t b = bucket_of(r->handle, n);
    r->same_bucket = fresh[b];
    fresh[b] = r;
  }
  free(buckets);
  buckets = fresh;
  nbuckets = n;
}

/* Request r held: into the list and its handle's bucket (lock held). */
static void link_request(held_request *r) {
  r->prev = NULL;
  r->next = held;
  if (held) held->prev = r;
  held = r;
  count(r, 1);
  if ((size_t)atomic_load_explicit(&nheld, memory_order_relaxed) > 2 * nbuckets) {
    const size_t before = nbuckets;
    rehash(nbuckets ? 2 * nbuckets : kFirstBuckets);
    if (nbuckets != before) return; /* (the new table holds r) */
  }
  if (nbuckets) {
    const size_t b = bucket_of(r->handle, nbuckets);
    r->same_bucket = buckets[b];
    buckets[b] = r;
  }
}

/* The first held request of handle h (not detached) that no call is running on, or, with `partitioned`, a
 * partitioned one busy or not; NULL if none. Lock held. */
static held_request *find(uintptr_t h, int partitioned) {
  for (held_request *r = nbuckets ? buckets[bucket_of(h, nbuckets)] : held; r; r = nbuckets ? r->same_bucket : r->next)
    if (r->handle == h && !r->detached && (partitioned ? r->partitions != 0 : !r->busy)) return r;
  return NULL;
}

/* A held request of handle h that no call is running on, taken for this one (busy), or NULL. Lock held. */
static held_request *take(uintptr_t h) {
  held_request *r = find(h, 0);
  if (r) r->busy = 1;
  return r;
}

/* The held partitioned request of handle h, busy or not (another thread may be in its MPI_Wait while this
 * one marks partitions ready, as partitioned programs do), or NULL. Lock held. Its partition geometry does
 * not change from its init to its MPI_Request_free (which MPI forbids while another call uses it). */
static held_request *partitioned(uintptr_t h) { return find(h, 1); }

static void unlink_request(held_request *gone) { /* lock held */
  if (gone->prev) gone->prev->next = gone->next;
  else held = gone->next;
  if (gone->next) gone->next->prev = gone->prev;
  if (nbuckets)
    for (held_request **at = &buckets[bucket_of(gone->handle, nbuckets)]; *at; at = &(*at)->same_bucket)
      if (*at == gone) {
        *at = gone->same_bucket;
        break;
      }
  count(gone, -1);
  if (gone->detached) atomic_fetch_sub_explicit(&ndetached, 1, memory_order_release);
}

/* What MPI wrote into request r's copies, copied back to device memory. */
static void copy_back(held_request *r, char *why, size_t why_bytes) { mgi_copy_back(r->s, why, why_bytes); }

/* A persistent request's round about to start: its device buffers copied in (a receive's too, so that the
 * bytes MPI does not write come back as the device holds them now). */
static void copy_in(held_request *r, char *why, size_t why_bytes) {
  for (int b = 0; b < MGI_MAX_BUFFERS; b++) {
    const mgi_staged *s = &r->s[b];
    if (!s->host) continue;
    int cu = mgi_copy(s->host, s->device, s->bytes, s->device);
    if (cu && !why[0]) snprintf(why, why_bytes, "copying device buffer %d to the host failed (CUDA error %d)", b, cu);
  }
}

/* Whether the library says request r is complete (a persistent one that is inactive is). */
static int complete(const held_request *r) {
  get_status_fn status = (get_status_fn)mgi_lower_cached(&lower_get_status, "PMPI_Request_get_status");
  int flag = 0;
  return status && status((intptr_t)r->handle, &flag, mgi_c_status_ignore()) == 0 && flag;
}

/* A request the library is done with: what MPI wrote copied back (unless done already), its copies freed. */
static void copy_back_request(held_request *r, char *why, size_t why_bytes);

static void finish(held_request *r, char *why, size_t why_bytes) {
  if (!r->copied) copy_back_request(r, why, why_bytes);
  mgi_unstage(r->s, 0, why, why_bytes);
  for (int k = 0; k < MGI_MAX_OWNED; k++) free(r->owned[k]);
  free(r->arrived);
  free(r);
}

/* Memory the next request this thread makes must keep (mgi_own_with_request), until a request takes it. */
static _Thread_local void *to_own[MGI_MAX_OWNED];

void mgi_own_with_request(void *const owned[MGI_MAX_OWNED]) {
  for (int k = 0; k < MGI_MAX_OWNED; k++) to_own[k] = owned[k];
}

int mgi_owned_taken(void) {
  int left = 0;
  for (int k = 0; k < MGI_MAX_OWNED; k++) left |= to_own[k] != NULL;
  for (int k = 0; k < MGI_MAX_OWNED; k++) to_own[k] = NULL;
  return !left;
}

/* Request r takes the memory this thread set aside for it. */
static void adopt(held_request *r) {
  for (int k = 0; k < MGI_MAX_OWNED; k++) {
    r->owned[k] = to_own[k];
    to_own[k] = NULL;
  }
}

/* The error `why` of request call `name` on request r, through its communicator's (or window's) handler. */
static int fail(const char *name, const held_request *r, const char *why) {
  return mgi_fail_on(name, r->on_window, r->errh, why);
}

/* The detached requests the library is done with (or failed: nobody could see the error), freed. Taken out
 * of the list and tested outside the lock (the library's test may call an error handler that makes request
 * calls); those not done yet put back. */
static void reap_detached(void) {
  if (!atomic_load_explicit(&ndetached, memory_order_acquire)) return;
  test_fn test = (test_fn)mgi_lower_cached(&lower_test, "PMPI_Test");
  if (!test) return;
  held_request *mine = NULL;
  pthread_mutex_lock(&lock);
  for (held_request *r = held, *after; r; r = after) {
    after = r->next;
    if (!r->detached || r->busy) continue;
    unlink_request(r);
    r->next = mine; /* (a list of its own now) */
    mine = r;
  }
  pthread_mutex_unlock(&lock);
  char why[160] = "";
  while (mine) {
    held_request *r = mine;
    mine = r->next;
    int flag = 0, rc = test(&r->handle, &flag, mgi_c_status_ignore());
    if (rc == 0 && !flag) {
      pthread_mutex_lock(&lock);
      link_request(r);
      atomic_fetch_add_explicit(&ndetached, 1, memory_order_release);
      pthread_mutex_unlock(&lock);
      continue;
    }
    if (r->persistent || rc) /* (an inactive persistent request, or one whose error left it: freed) */
      mgi_call_lower_request(MGI_REQ_Request_free, (const intptr_t[]){(intptr_t)&r->handle});
    finish(r, why, sizeof why);
  }
}

int mgi_stage_request(int id, intptr_t *a) {
  const mgi_function *fn = &mgi_functions[id];
  const intptr_t comm = fn->comm >= 0 ? a[fn->comm] : fn->win >= 0 ? a[fn->win] : 0;
  reap_detached();
  held_request *r = calloc(1, sizeof *r);
  if (!r) return mgi_fail(id, comm, "no host memory for a non-blocking call's staging");
  if (fn->persistent == 2) { /* partitioned: one buffer, count * partitions elements (functions.py) */
    const mgi_span *form = &fn->buffers[0].forms[0];
    r->partitions = (int)a[form->displs]; /* (times_p's factor) */
    r->part_count = (long long)a[form->count];
    r->arrived = calloc(r->partitions > 0 ? (size_t)r->partitions : 1, 1);
    if (!r->arrived || mgi_type_bounds(a[form->type], &r->extent, &r->true_lb, &r->true_extent)) {
      free(r->arrived);
      free(r);
      return mgi_fail(id, comm, "cannot read a partitioned call's datatype, or no host memory for its partitions");
    }
  }
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
    free(r->arrived);
    free(r);
    return why[0] ? mgi_fail(id, comm, why) : rc;
  }
  r->handle = mgi_request_at((const void *)a[fn->request], 0);
  r->errh = comm;
  r->on_window = fn->win >= 0;
  r->target = fn->win >= 0 && fn->target >= 0 ? (int)a[fn->target] : -1;
  r->persistent = fn->persistent;
  r->copied = r->persistent; /* (an inactive persistent request: nothing to copy back until it starts) */
  if (r->partitions) { /* the buffer's first byte on each side (a[] points at the host copy now) */
    r->part_host = (char *)a[fn->buffers[0].param];
    r->part_device = r->s[0].device + (r->part_host - r->s[0].host);
  }
  /* complete already (MPICH gives a send that completed at once a shared handle of its own, the same for
   * many requests): done now, not held, so every held handle is one request's. (The library's
   * MPI_Request_get_status neither frees the request nor touches the status its MPI_Wait gives.) */
  adopt(r);
  if (!r->persistent && complete(r)) {
    finish(r, why, sizeof why);
    return why[0] ? mgi_fail(id, comm, why) : rc;
  }
  pthread_mutex_lock(&lock);
  link_request(r);
  pthread_mutex_unlock(&lock);
  return rc;
}

int mgi_hold_owned(int id, const intptr_t *a) {
  const mgi_function *fn = &mgi_functions[id];
  held_request *r = calloc(1, sizeof *r);
  if (!r) return 1; /* (the caller keeps the memory: a leak, not a read of freed memory) */
  reap_detached();
  r->handle = mgi_request_at((const void *)a[fn->request], 0);
  r->errh = fn->comm >= 0 ? a[fn->comm] : 0;
  r->persistent = fn->persistent;
  r->copied = r->persistent; /* (as mgi_stage_request's: an active one is then detached if freed) */
  adopt(r);
  char why[160] = "";
  if (!r->persistent && complete(r)) {
    finish(r, why, sizeof why);
    return 0;
  }
  pthread_mutex_lock(&lock);
  link_request(r);
  pthread_mutex_unlock(&lock);
  return 0;
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

/* The request calls that leave complete requests as they are (MPI_Request_get_status and its MPI-4.1
 * forms); the others replace a request they complete with MPI_REQUEST_NULL (a persistent one's stays). */
static int leaves_requests(int id) {
  return id == MGI_REQ_Request_get_status || id == MGI_REQ_Request_get_status_any ||
         id == MGI_REQ_Request_get_status_all || id == MGI_REQ_Request_get_status_some;
}

/* Partition i of partitioned request r copied to the host (a send's, marked ready) or back to device memory
 * (a receive's, arrived); out of range: nothing (the library's call reports it). */
static void copy_partition(const held_request *r, long long i, int to_device, char *why, size_t why_bytes) {
  if (i < 0 || i >= r->partitions || r->part_count <= 0 || r->true_extent <= 0) return;
  intptr_t lo, hi; /* elements i * part_count .. */
  mgi_elements_bytes((intptr_t)(i * r->part_count) * r->extent, r->part_count, r->extent, r->true_lb, r->true_extent,
                     &lo, &hi);
  const size_t bytes = (size_t)(hi - lo);
  char *dev = r->part_device + lo, *host = r->part_host + lo;
  const int cu = to_device ? mgi_copy(dev, host, bytes, dev) : mgi_copy(host, dev, bytes, dev);
  if (cu && !why[0])
    snprintf(why, why_bytes, "copying partition %lld %s failed (CUDA error %d)", i,
             to_device ? "back to device memory" : "to the host", cu);
}

/* The partitions an MPI_Pready call marks ready: its one, its range, or its list. */
static void ready_partitions(int id, const intptr_t *a, const held_request *r, char *why, size_t why_bytes) {
  if (id == MGI_REQ_Pready) copy_partition(r, (int)a[0], 0, why, why_bytes);
  if (id == MGI_REQ_Pready_range)
    for (long long i = (int)a[0]; i <= (int)a[1] && i - (int)a[0] < r->partitions; i++) copy_partition(r, i, 0, why, why_bytes);
  if (id == MGI_REQ_Pready_list)
    for (int j = 0; j < (int)a[0]; j++) copy_partition(r, ((const int *)a[1])[j], 0, why, why_bytes);
}

/* Request r given back by the call that took it. */
static void release(held_request *r) {
  pthread_mutex_lock(&lock);
  r->busy = 0;
  pthread_mutex_unlock(&lock);
}

/* Request r done with here: out of the list, its copies copied back and freed. */
static void drop(held_request *r, char *why, size_t why_bytes) {
  pthread_mutex_lock(&lock);
  unlink_request(r);
  pthread_mutex_unlock(&lock);
  finish(r, why, why_bytes);
}

/* MPI_Request_free of held request r, taken (a pointer call: *requests its handle). A request that is
 * complete (a persistent one whose round is over or never started) goes to the library and its copies
 * with it; an active one is detached where it only sends, refused where MPI writes into it. */
static int free_held(int id, intptr_t *a, void *requests, held_request *r, char *why, size_t why_bytes) {
  if ((r->persistent && !r->active) || (!r->persistent && r->copied) || complete(r)) {
    int rc = mgi_call_lower_request(id, a);
    if (rc) {
      release(r);
      return rc;
    }
    drop(r, why, why_bytes);
    return 0;
  }
  /* what the error needs, read while this call still owns r: once it is given back (busy cleared, or
   * detached), another thread's call may complete and free it */
  const held_request mine = *r;
  pthread_mutex_lock(&lock);
  r->busy = 0;
  if (!mine.writes) {
    r->detached = 1;
    atomic_fetch_add_explicit(&ndetached, 1, memory_order_release);
  }
  pthread_mutex_unlock(&lock);
  if (mine.writes)
    return fail(mgi_request_calls[id].name, &mine,
                "freeing an active request that receives into device memory through host copies: its data "
                "could not reach device memory; complete it (MPI_Wait) instead");
  mgi_request_put(requests, 0, request_null());
  return 0;
}

/* What MPI wrote into request r's copies, copied back to device memory: a partitioned receive's partitions
 * but those MPI_Parrived copied back this round (the program may have changed them since). */
static void copy_back_request(held_request *r, char *why, size_t why_bytes) {
  if (!r->partitions || !r->writes) {
    copy_back(r, why, why_bytes);
    return;
  }
  for (int i = 0; i < r->partitions; i++) {
    pthread_mutex_lock(&lock);
    const int done = r->arrived[i];
    pthread_mutex_unlock(&lock);
    if (!done) copy_partition(r, i, 1, why, why_bytes);
  }
}

/* MPI_Pready (_range, _list) and MPI_Parrived on a held partitioned request: 1 with *rc the call's code,
 * 0 where the request is not one (the call goes on as any request call). Another thread may hold the
 * request meanwhile (its MPI_Wait): the partitions are copied all the same, as MPI lets threads mark them
 * ready and test them while the request is in use. */
static int partitioned_call(int id, const intptr_t *a, const void *requests, int *rc) {
  pthread_mutex_lock(&lock);
  held_request *r = requests ? partitioned(mgi_request_at(requests, 0)) : NULL;
  const held_request blame = r ? *r : (held_request){0};
  const int round = r && r->active && !r->copied; /* started, not yet found complete */
  pthread_mutex_unlock(&lock);
  if (!r) return 0;
  char why[160] = "";
  if (id == MGI_REQ_Parrived) {
    *rc = mgi_call_lower_request(id, a);
    const long long i = (int)a[1];
    if (!*rc && round && *(const int *)a[2] && r->writes && i >= 0 && i < r->partitions) {
      copy_partition(r, i, 1, why, sizeof why);
      pthread_mutex_lock(&lock);
      r->arrived[i] = 1;
      pthread_mutex_unlock(&lock);
    }
  } else {
    if (!r->writes) ready_partitions(id, a, r, why, sizeof why); /* (a receive's: the library refuses it) */
    *rc = why[0] ? 0 : mgi_call_lower_request(id, a);
  }
  if (why[0]) *rc = fail(mgi_request_calls[id].name, &blame, why);
  return 1;
}

int mgi_request_call_staged(int id, intptr_t *a) {
  const mgi_request_call *c = &mgi_request_calls[id];
  reap_detached();
  int n = 0;
  uintptr_t value = 0;
  void *requests = requests_of(c, a, &n, &value);
  if (id == MGI_REQ_Pready || id == MGI_REQ_Pready_range || id == MGI_REQ_Pready_list || id == MGI_REQ_Parrived) {
    int rc = 0;
    if (partitioned_call(id, a, requests, &rc)) return rc;
  }
  /* the call's held requests, taken: their places and handles before the call */
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
    held_request *r = take(mgi_request_at(requests, i));
    if (r) places[k] = i, ours[k++] = r;
  }
  pthread_mutex_unlock(&lock);
  int rc = 0;
  char why[160] = "";
  held_request blame = {0}; /* where a failed copy's error goes: the request's communicator or window */
  if (k && id == MGI_REQ_Request_free) {
    blame = *ours[0];
    rc = free_held(id, a, requests, ours[0], why, sizeof why);
    k = 0;
  } else if (k && (id == MGI_REQ_Start || id == MGI_REQ_Startall)) { /* (only persistent requests start) */
    for (int j = 0; j < k && !why[0]; j++) {
      if (ours[j]->partitions && !ours[j]->writes) continue; /* (a partitioned send copies at MPI_Pready) */
      copy_in(ours[j], why, sizeof why);
      if (why[0]) blame = *ours[j];
    }
    if (!why[0]) rc = mgi_call_lower_request(id, a);
    for (int j = 0; j < k; j++) {
      if (!why[0] && !rc) {
        pthread_mutex_lock(&lock);
        ours[j]->copied = 0, ours[j]->active = 1;
        if (ours[j]->arrived) memset(ours[j]->arrived, 0, (size_t)ours[j]->partitions);
        pthread_mutex_unlock(&lock);
      }
      release(ours[j]);
    }
    k = 0;
  } else {
    rc = mgi_call_lower_request(id, a);
  }
  for (int j = 0; j < k; j++) {
    held_request *r = ours[j];
    char copy_why[160] = "";
    const held_request mine = *r;
    if (leaves_requests(id) || r->persistent) { /* handles left as they were: the library says */
      if (!r->copied && (!r->persistent || r->active) && complete(r)) {
        copy_back_request(r, copy_why, sizeof copy_why);
        r->copied = 1, r->active = 0;
      }
      release(r);
    } else if (mgi_request_at(requests, places[j]) != r->handle) { /* completed by this call */
      drop(r, copy_why, sizeof copy_why);
    } else {
      release(r);
    }
    if (copy_why[0] && !why[0]) snprintf(why, sizeof why, "%s", copy_why), blame = mine;
  }
  if (places != places_here) free(places), free(ours);
  if (why[0]) return fail(c->name, &blame, why);
  return rc;
}

void mgi_requests_synchronized(intptr_t win, int target, char *why, size_t why_bytes) {
  pthread_mutex_lock(&lock);
  for (held_request *r = held; r; r = r->next)
    if (r->on_window && r->errh == win && (target < 0 || r->target == target) && !r->copied && !r->busy &&
        !r->detached) {
      copy_back(r, why, why_bytes);
      r->copied = 1;
    }
  pthread_mutex_unlock(&lock);
}
