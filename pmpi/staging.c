/* A blocking call's device buffers through host copies, for a process with no handler (a C or Fortran
 * program under LD_PRELOAD) on an MPI that is not CUDA-aware: each device buffer's bytes are copied to
 * host memory, the MPI library's call runs on the copies, and what it wrote is copied back. Correct, not
 * fast: the device paths are mpigpu's, in a Python process (interpose.c's handler).
 *
 * The bytes of a buffer are those its count and datatype (or counts and displacements) reach, as the
 * table says (functions.py); a whole span is copied in, holes included, so what MPI does not write
 * comes back unchanged. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "functions.h"

typedef int (*comm_int_fn)(intptr_t, int *);
typedef int (*type_bounds_fn)(intptr_t, intptr_t *, intptr_t *);

typedef struct {
  intptr_t lo, hi; /* bytes [lo, hi) from the buffer's address */
  int any;
} byte_range;

typedef struct {
  intptr_t extent, true_lb, true_extent;
} type_shape;

static int shape_of(intptr_t type, type_shape *s) { return mgi_type_bounds(type, &s->extent, &s->true_lb, &s->true_extent); }

int mgi_type_bounds(intptr_t type, intptr_t *extent_out, intptr_t *true_lb, intptr_t *true_extent_out) {
  type_bounds_fn extent = (type_bounds_fn)mgi_lower_named("PMPI_Type_get_extent");
  type_bounds_fn true_extent = (type_bounds_fn)mgi_lower_named("PMPI_Type_get_true_extent");
  intptr_t lb;
  if (!extent || !true_extent) return -1;
  if (extent(type, &lb, extent_out) || true_extent(type, true_lb, true_extent_out)) return -1;
  return 0;
}

/* count elements of a type whose first one starts offset bytes in */
void mgi_elements_bytes(intptr_t offset, long long count, intptr_t extent, intptr_t true_lb, intptr_t true_extent,
                        intptr_t *lo, intptr_t *hi) {
  const intptr_t last = (intptr_t)(count - 1) * extent;
  *lo = offset + true_lb + (last < 0 ? last : 0);
  *hi = offset + true_lb + (last > 0 ? last : 0) + true_extent;
}

static void cover(byte_range *r, intptr_t offset, long long count, const type_shape *s) {
  if (count <= 0 || s->true_extent <= 0) return;
  intptr_t lo, hi;
  mgi_elements_bytes(offset, count, s->extent, s->true_lb, s->true_extent, &lo, &hi);
  if (!r->any || lo < r->lo) r->lo = lo;
  if (!r->any || hi > r->hi) r->hi = hi;
  r->any = 1;
}

/* Entry i of a form's count array: ints, or MPI_Counts (the _c forms). */
static long long count_at(const mgi_span *f, const intptr_t *a, int i) {
  return f->wide ? ((const long long *)a[f->count])[i] : ((const int *)a[f->count])[i];
}

/* Entry i of a form's displacements: ints, or MPI_Aints. */
static intptr_t displ_at(const mgi_span *f, const intptr_t *a, int i) {
  return f->aint_displs ? ((const intptr_t *)a[f->displs])[i] : ((const int *)a[f->displs])[i];
}

/* Entry i of an array of datatypes: MPICH's handles are ints, Open MPI's pointers. */
static intptr_t type_at(const intptr_t *a, int param, int i) {
  return mgi_is_open_mpi() ? ((const intptr_t *)a[param])[i] : (intptr_t)((const int *)a[param])[i];
}

/* The bytes one buffer's form reaches, over n peers (the group its counts are for: the communicator's, or
 * a topology's in- or out-degree); -1 where it cannot say (a datatype MPI refuses). */
static int span_of(const mgi_span *f, const intptr_t *a, int n, int rank, byte_range *r) {
  type_shape s;
  /* a count as C passed it: an int, or MPI-4's MPI_Count */
  long long count = f->form == MGI_FORM_ONE ? 1 : f->wide ? (long long)a[f->count] : (long long)(int)a[f->count];
  if (f->form == MGI_FORM_BYTES) { /* packed bytes: the count is their number */
    long long bytes = count;
    if (bytes > 0) *r = (byte_range){0, bytes, 1};
    return 0;
  }
  if (f->form == MGI_FORM_W) { /* a datatype per peer, displacements in bytes */
    for (int i = 0; i < n; i++) {
      const long long c = count_at(f, a, i);
      if (c <= 0) continue;
      if (shape_of(type_at(a, f->type, i), &s)) return -1;
      cover(r, displ_at(f, a, i), c, &s);
    }
    return 0;
  }
  if (shape_of(a[f->type], &s)) return -1;
  long long total = 0;
  switch (f->form) {
    case MGI_FORM_SIMPLE:
    case MGI_FORM_ONE: cover(r, 0, count, &s); return 0;
    case MGI_FORM_TIMES_N: cover(r, 0, count * n, &s); return 0;
    case MGI_FORM_TIMES_P: cover(r, 0, count * (int)a[f->displs], &s); return 0; /* displs: the factor */
    case MGI_FORM_OWN: cover(r, 0, count_at(f, a, rank), &s); return 0;
    case MGI_FORM_SUM:
      for (int i = 0; i < n; i++) total += count_at(f, a, i);
      cover(r, 0, total, &s);
      return 0;
    case MGI_FORM_V:
      for (int i = 0; i < n; i++) cover(r, displ_at(f, a, i) * s.extent, count_at(f, a, i), &s);
      return 0;
    default: return -1;
  }
}

int mgi_stage_in(const mgi_buffer *buf, const mgi_span *form, intptr_t *a, int n, int rank, int b,
                 mgi_staged *s, char *why, size_t why_bytes) {
  char *p = (char *)a[buf->param];
  byte_range r = {0};
  if (span_of(form, a, n, rank, &r)) {
    snprintf(why, why_bytes, "cannot stage device buffer %d: the MPI library below cannot tell its datatype's extent", b);
    return -1;
  }
  if (!r.any) return 0;
  s->device = p + r.lo;
  s->bytes = (size_t)(r.hi - r.lo);
  s->writes = buf->dir != MGI_IN;
  s->host = malloc(s->bytes);
  if (!s->host) {
    snprintf(why, why_bytes, "no host memory for a %zu-byte staging copy", s->bytes);
    return -1;
  }
  int cu = mgi_copy(s->host, s->device, s->bytes, s->device); /* an output too: MPI leaves holes as they are */
  if (cu) {
    snprintf(why, why_bytes, "copying device buffer %d to the host failed (CUDA error %d)", b, cu);
    return -1;
  }
  a[buf->param] = (intptr_t)(s->host - r.lo);
  return 0;
}

int mgi_stage_call(int id, intptr_t *a, mgi_staged staged[MGI_MAX_BUFFERS], char *why, size_t why_bytes) {
  const mgi_function *fn = &mgi_functions[id];
  int n = 1, rank = 0, inter = 0;
  if (fn->comm >= 0) {
    intptr_t comm = a[fn->comm];
    comm_int_fn size = (comm_int_fn)mgi_lower_named("PMPI_Comm_size");
    comm_int_fn get_rank = (comm_int_fn)mgi_lower_named("PMPI_Comm_rank");
    comm_int_fn test_inter = (comm_int_fn)mgi_lower_named("PMPI_Comm_test_inter");
    if (!size || !get_rank || !test_inter || size(comm, &n) || get_rank(comm, &rank) || test_inter(comm, &inter)) {
      snprintf(why, why_bytes, "cannot read the communicator's size and rank");
      return -1;
    }
    if (inter) {
      snprintf(why, why_bytes, "device buffers on an intercommunicator need mpigpu's handler (python -m mpigpu)");
      return -1;
    }
  }
  int root = fn->root >= 0 ? (int)a[fn->root] : -1;
  uintptr_t first = (uintptr_t)a[fn->buffers[0].param];
  int in_place = fn->nbuffers > 1 && (first == 1 || first == UINTPTR_MAX);
  for (int b = 0; b < fn->nbuffers; b++) {
    const mgi_buffer *buf = &fn->buffers[b];
    if (!mgi_maybe_device((const void *)a[buf->param]) || (buf->root_only && rank != root)) continue;
    const mgi_span *form = &buf->forms[in_place && buf->nforms > 1 ? 1 : 0];
    /* a neighbourhood collective's counts are for the topology's in- or out-neighbours */
    const int peers = form->group && fn->comm >= 0 ? mgi_degree(a[fn->comm], form->group) : n;
    if (peers < 0) {
      snprintf(why, why_bytes, "cannot stage device buffer %d: its communicator's topology cannot be read", b);
      return -1;
    }
    if (mgi_stage_in(buf, form, a, peers, rank, b, &staged[b], why, why_bytes)) return -1;
  }
  return 0;
}

void mgi_copy_back(const mgi_staged staged[MGI_MAX_BUFFERS], char *why, size_t why_bytes) {
  for (int b = 0; b < MGI_MAX_BUFFERS; b++) {
    const mgi_staged *s = &staged[b];
    if (!s->host || !s->writes) continue;
    int cu = mgi_copy(s->device, s->host, s->bytes, s->device);
    if (cu && !why[0]) snprintf(why, why_bytes, "copying back to device buffer %d failed (CUDA error %d)", b, cu);
  }
}

void mgi_unstage(mgi_staged staged[MGI_MAX_BUFFERS], int copy_back, char *why, size_t why_bytes) {
  if (copy_back) mgi_copy_back(staged, why, why_bytes);
  for (int b = 0; b < MGI_MAX_BUFFERS; b++) {
    free(staged[b].host);
    staged[b].host = NULL;
  }
}

int mgi_stage(int id, intptr_t *a) {
  const mgi_function *fn = &mgi_functions[id];
  intptr_t comm = fn->comm >= 0 ? a[fn->comm] : 0;
  if (fn->request >= 0) return mgi_stage_request(id, a); /* its copies outlive the call (staged_requests.c) */
  if (fn->win >= 0) return mgi_stage_one_sided(id, a);    /* its copies outlive the call (one_sided.c) */
  mgi_staged staged[MGI_MAX_BUFFERS] = {{0}};
  char why[160] = "";
  int rc = mgi_stage_call(id, a, staged, why, sizeof why);
  if (!rc) rc = mgi_call_lower(id, a);
  mgi_unstage(staged, !why[0], why, sizeof why);
  if (why[0]) return mgi_fail(id, comm, why);
  return rc;
}
