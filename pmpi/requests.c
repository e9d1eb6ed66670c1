/* Persistent requests made below Python (MPI_Send_init, MPI_Allreduce_init, ... with device buffers, in a
 * process with a handler): mpigpu's own persistent request does the work, and the caller holds a request
 * of the library's that stands for it (a proxy: an inactive persistent receive from MPI_PROC_NULL, so
 * the library never trips over its handle). The calls that start, complete and free requests (MPI_Start,
 * MPI_Wait & co., generated from REQUEST_CALLS) look for proxies among their requests and hand a call
 * that holds one to the handler, which runs it on mpigpu's requests and the library's together; with no
 * proxy made in the process a call costs one atomic load more than the library's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "functions.h"

typedef int (*mgi_request_handler)(int id, const intptr_t *args);

static _Atomic(void *) request_handler;
static int request_bytes;                /* sizeof(MPI_Request) as the handler said (0: not said, width()) */
static pthread_mutex_t proxies_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_size_t nproxies;           /* proxies alive: 0 keeps every request call on the library */
static uintptr_t *slots;                 /* open addressing: 0 free, TOMBSTONE removed, else a proxy */
static size_t nslots, used;              /* used: proxies and tombstones */
static _Atomic(void *) lower[MGI_REQ_COUNT];
#define TOMBSTONE UINTPTR_MAX

/* sizeof(MPI_Request) of the library: 4 (MPICH's int), 8 (Open MPI's pointer) */
int mgi_request_width(void) { return request_bytes ? request_bytes : mgi_is_open_mpi() ? 8 : 4; }

/* a request handle as a word, the library's width (MPICH's int handles sign-extended, as mpi4py writes them) */
static uintptr_t handle_word(intptr_t raw) {
  return mgi_request_width() == 4 ? (uintptr_t)(intptr_t)(int32_t)raw : (uintptr_t)raw;
}

uintptr_t mgi_request_at(const void *requests, int i) {
  return mgi_request_width() == 4 ? handle_word(((const int32_t *)requests)[i]) : ((const uintptr_t *)requests)[i];
}

void mgi_request_put(void *requests, int i, uintptr_t h) {
  if (mgi_request_width() == 4) ((int32_t *)requests)[i] = (int32_t)h;
  else ((uintptr_t *)requests)[i] = h;
}

static size_t slot_of(uintptr_t h) { return (size_t)((h * 0x9E3779B97F4A7C15ull) >> 17) & (nslots - 1); }

static int member(uintptr_t h) { /* proxies_lock held */
  if (!nslots || !h || h == TOMBSTONE) return 0;
  for (size_t i = slot_of(h), k = 0; k < nslots; i = (i + 1) & (nslots - 1), k++) {
    if (slots[i] == h) return 1;
    if (!slots[i]) return 0;
  }
  return 0;
}

static int grow(void) { /* proxies_lock held: rehash, tombstones dropped, sized for the live proxies */
  size_t live = atomic_load_explicit(&nproxies, memory_order_relaxed), n = 64;
  while (n < 4 * (live + 1)) n *= 2; /* (a program that makes and frees proxies in turn stays small) */
  uintptr_t *fresh = calloc(n, sizeof *fresh), *old = slots;
  if (!fresh) return -1;
  size_t oldn = nslots;
  slots = fresh, nslots = n, used = 0;
  for (size_t i = 0; i < oldn; i++)
    if (old[i] && old[i] != TOMBSTONE) {
      size_t j = slot_of(old[i]);
      while (slots[j]) j = (j + 1) & (nslots - 1);
      slots[j] = old[i], used++;
    }
  free(old);
  return 0;
}

/* A proxy made (0), or -1 where no memory was left for it. */
MGI_EXPORT int mpigpu_pmpi_proxy_add(intptr_t raw) {
  uintptr_t h = handle_word(raw);
  int rc = 0;
  pthread_mutex_lock(&proxies_lock);
  if (!member(h)) {
    if ((used + 1) * 2 > nslots && grow()) rc = -1;
    if (!rc) {
      size_t i = slot_of(h);
      while (slots[i] && slots[i] != TOMBSTONE) i = (i + 1) & (nslots - 1);
      if (!slots[i]) used++;
      slots[i] = h;
      atomic_fetch_add_explicit(&nproxies, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&proxies_lock);
  return rc;
}

MGI_EXPORT void mpigpu_pmpi_proxy_remove(intptr_t raw) {
  uintptr_t h = handle_word(raw);
  pthread_mutex_lock(&proxies_lock);
  if (nslots && h && h != TOMBSTONE)
    for (size_t i = slot_of(h), k = 0; k < nslots && slots[i]; i = (i + 1) & (nslots - 1), k++)
      if (slots[i] == h) {
        slots[i] = TOMBSTONE;
        atomic_fetch_sub_explicit(&nproxies, 1, memory_order_release);
        break;
      }
  pthread_mutex_unlock(&proxies_lock);
}

MGI_EXPORT size_t mpigpu_pmpi_proxy_count(void) { return atomic_load(&nproxies); }

int mgi_any_proxies(void) { return atomic_load_explicit(&nproxies, memory_order_acquire) != 0; }

/* "MPI_<name>" of request call id, in the order the handler reads them (functions.py's REQUEST_CALLS). */
MGI_EXPORT const char *mpigpu_pmpi_request_call(int id) {
  return id >= 0 && id < MGI_REQ_COUNT ? mgi_request_calls[id].name : NULL;
}

/* The handler of request calls that hold a proxy (NULL: none), and the library's request size. */
MGI_EXPORT void mpigpu_pmpi_set_request_handler(mgi_request_handler h, int bytes) {
  if (bytes == 4 || bytes == 8) request_bytes = bytes;
  atomic_store_explicit(&request_handler, (void *)h, memory_order_release);
}

/* Whether a request call holds a proxy, from any caller (mpi4py's too: a proxy handed to Python code is
 * still mpigpu's request) but the handler itself. */
int mgi_holds_proxy(int id, const intptr_t *a) {
  if (!atomic_load_explicit(&nproxies, memory_order_acquire)) return 0;
  if (!atomic_load_explicit(&request_handler, memory_order_acquire) || mgi_in_handler)
    return 0; /* the handler's own calls are the library's */
  const mgi_request_call *c = &mgi_request_calls[id];
  int found = 0;
  pthread_mutex_lock(&proxies_lock);
  if (c->count == -2)
    found = member(handle_word(a[c->requests]));
  else if (c->count == -1)
    found = a[c->requests] && member(mgi_request_at((const void *)a[c->requests], 0));
  else if (a[c->requests])
    for (int i = 0, n = (int)a[c->count]; i < n && !found; i++) found = member(mgi_request_at((const void *)a[c->requests], i));
  pthread_mutex_unlock(&proxies_lock);
  return found;
}

int mgi_request_call_handle(int id, intptr_t *a) {
  mgi_request_handler h = (mgi_request_handler)atomic_load_explicit(&request_handler, memory_order_acquire);
  if (!h) return mgi_missing_request(id);
  mgi_in_handler = 1;
  int rc = h(id, a);
  mgi_in_handler = 0;
  return rc;
}

void *mgi_lower_request(int id) { return mgi_lower_cached(&lower[id], mgi_request_calls[id].lower_name); }

int mgi_missing_request(int id) {
  return mgi_fail_named(mgi_request_calls[id].name, "the MPI library below has no such function");
}
