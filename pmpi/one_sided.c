/* A one-sided call's device buffers through host copies, for a process with no handler (a C or Fortran
 * program under LD_PRELOAD) on an MPI that is not CUDA-aware. MPI may read an origin and write a result
 * until the synchronization that completes the operation, so each copy is held, per window and target,
 * until that call (MPI_Win_fence, MPI_Win_unlock, MPI_Win_flush ...: the generated wrappers send those here
 * while anything is held), which copies the results back and frees it. The request-based forms (MPI_Rput
 * ...) hold theirs until their request completes instead (staged_requests.c). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "functions.h"

typedef struct held {
  intptr_t win;
  int target;     /* the operation's target rank */
  mgi_staged s;   /* the copy; s.writes (a Get's origin, a result): copied back at completion */
  struct held *next;
} held;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static held *holding;
static atomic_int nheld;

int mgi_rma_held(void) {
  return atomic_load_explicit(&nheld, memory_order_relaxed) > 0 || mgi_staged_window_requests();
}

/* The held copies of window `win` towards `target` (-1: every target) copied back and freed; the first
 * CUDA error, or 0. */
static int complete(intptr_t win, int target) {
  int cu = 0;
  pthread_mutex_lock(&lock);
  for (held **at = &holding; *at;) {
    held *h = *at;
    if (h->win != win || (target >= 0 && h->target != target)) {
      at = &h->next;
      continue;
    }
    if (h->s.writes) {
      int e = mgi_copy(h->s.device, h->s.host, h->s.bytes, h->s.device);
      if (e && !cu) cu = e;
    }
    *at = h->next;
    free(h->s.host);
    free(h);
    atomic_fetch_sub_explicit(&nheld, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&lock);
  return cu;
}

int mgi_stage_one_sided(int id, intptr_t *a) {
  const mgi_function *fn = &mgi_functions[id];
  const intptr_t win = a[fn->win];
  const int target = fn->target >= 0 ? (int)a[fn->target] : -1;
  if (fn->nbuffers == 0) { /* a synchronization: the library's, then what it completed */
    int rc = mgi_call_lower(id, a), cu = rc ? 0 : complete(win, target);
    char why[160] = "";
    if (cu) snprintf(why, sizeof why, "copying a one-sided result back to device memory failed (CUDA error %d)", cu);
    if (!rc) mgi_requests_synchronized(win, target, why, sizeof why); /* the request-based calls' results */
    return why[0] ? mgi_fail(id, win, why) : rc;
  }
  int device = 0;
  for (int b = 0; b < fn->nbuffers; b++) device |= mgi_maybe_device((const void *)a[fn->buffers[b].param]);
  if (!device) return mgi_call_lower(id, a); /* host buffers (a handler unregistered meanwhile) */
  held *made[MGI_MAX_BUFFERS] = {0};
  char why[160] = "";
  int rc = 0;
  for (int b = 0; b < fn->nbuffers && !rc; b++) {
    const mgi_buffer *buf = &fn->buffers[b];
    if (!mgi_maybe_device((const void *)a[buf->param])) continue;
    if (!(made[b] = calloc(1, sizeof(held)))) {
      snprintf(why, sizeof why, "no host memory for a one-sided call's copy");
      rc = -1;
      break;
    }
    made[b]->win = win;
    made[b]->target = target;
    rc = mgi_stage_in(buf, &buf->forms[0], a, 1, 0, b, &made[b]->s, why, sizeof why);
  }
  if (!rc) rc = mgi_call_lower(id, a);
  for (int b = 0; b < fn->nbuffers; b++) /* nothing started, or nothing to hold: freed now */
    if (made[b] && (rc || !made[b]->s.host)) free(made[b]->s.host), free(made[b]), made[b] = NULL;
  if (why[0]) return mgi_fail(id, win, why);
  if (rc) return rc;
  pthread_mutex_lock(&lock);
  for (int b = 0; b < fn->nbuffers; b++)
    if (made[b]) {
      made[b]->next = holding;
      holding = made[b];
      atomic_fetch_add_explicit(&nheld, 1, memory_order_relaxed);
    }
  pthread_mutex_unlock(&lock);
  return rc;
}
