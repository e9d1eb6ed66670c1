/* MPI-4's large-count functions (MPI_<name>_c) on a library that has none (Open MPI 4.1, MPICH 3).
 *
 * The interposer defines them, so its callers find them: mpi4py looks each one up at run time and calls
 * the first definition it finds (its own int fallback only where none is found), and C callers link them.
 * Where the library below lacks one, the call is made as the library's int form with its MPI_Count
 * counts and MPI_Aint displacements narrowed to int, as mpi4py's own fallback does; a value an int cannot
 * hold fails the call (mgi_fail: an MPI error naming it, through the communicator's error handler). */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "functions.h"

typedef int (*comm_int_fn)(intptr_t, int *);

/* The library's communicator queries, looked up once (every mpi4py call of a v-form comes here on Open
 * MPI 4.1; a lookup is a dlsym). */
enum { COMM_SIZE, COMM_REMOTE_SIZE, COMM_TEST_INTER, COMM_RANK, TOPO_TEST, CARTDIM_GET, GRAPH_NEIGHBORS_COUNT,
       DIST_GRAPH_NEIGHBORS_COUNT, NQUERIES };
static const char *const query_names[NQUERIES] = {"PMPI_Comm_size", "PMPI_Comm_remote_size", "PMPI_Comm_test_inter",
                                                  "PMPI_Comm_rank", "PMPI_Topo_test", "PMPI_Cartdim_get",
                                                  "PMPI_Graph_neighbors_count", "PMPI_Dist_graph_neighbors_count"};
static _Atomic(void *) queries[NQUERIES];

static comm_int_fn query(int which) { return (comm_int_fn)mgi_lower_cached(&queries[which], query_names[which]); }

/* How many entries the function's count arrays have: the caller's group, or on an intercommunicator the
 * peers' group where the counts are for the remote side. 0 where it cannot be read. */
int mgi_group_size(intptr_t comm, int local) {
  comm_int_fn size = query(COMM_SIZE), remote = query(COMM_REMOTE_SIZE), test_inter = query(COMM_TEST_INTER);
  int n = 0, inter = 0;
  if (!size || !test_inter || test_inter(comm, &inter)) return 0;
  if (inter && !local) return remote && !remote(comm, &n) ? n : 0;
  return size(comm, &n) ? 0 : n;
}

/* MPI_Topo_test's answers differ by library: MPICH's MPI_GRAPH is 1 and MPI_CART 2, Open MPI's the other way
 * round; MPI_DIST_GRAPH is 3 in both (mgi_is_open_mpi). */
enum { MPICH_GRAPH = 1, MPICH_CART = 2, TOPO_DIST_GRAPH = 3 };

/* A neighbourhood collective's array length: the topology's in-degree (which == 1) or out-degree (2):
 * twice its dimensions (Cartesian), the rank's neighbours (graph), its in- or out-edges (distributed
 * graph). -1 where it cannot be read (no topology, a query that failed): 0 is a rank without neighbours. */
int mgi_degree(intptr_t comm, int which) {
  comm_int_fn topo_test = query(TOPO_TEST);
  int kind = 0, n = 0, rank = 0, in = 0, out = 0, weighted = 0;
  if (!topo_test || topo_test(comm, &kind)) return -1;
  int open_mpi = mgi_is_open_mpi();
  if (kind == (open_mpi ? MPICH_GRAPH : MPICH_CART)) {
    comm_int_fn dims = query(CARTDIM_GET);
    return dims && !dims(comm, &n) ? 2 * n : -1;
  }
  if (kind == (open_mpi ? MPICH_CART : MPICH_GRAPH)) {
    comm_int_fn get_rank = query(COMM_RANK);
    int (*count)(intptr_t, int, int *) = (int (*)(intptr_t, int, int *))query(GRAPH_NEIGHBORS_COUNT);
    return get_rank && count && !get_rank(comm, &rank) && !count(comm, rank, &n) ? n : -1;
  }
  if (kind == TOPO_DIST_GRAPH) {
    int (*count)(intptr_t, int *, int *, int *) = (int (*)(intptr_t, int *, int *, int *))query(DIST_GRAPH_NEIGHBORS_COUNT);
    if (!count || count(comm, &in, &out, &weighted)) return -1;
    return which == 1 ? in : out;
  }
  return -1;
}

/* Whether this rank's root-only arrays are read: the root of an intracommunicator, or the root's side of
 * an intercommunicator (MPI_ROOT: -3 in MPICH, -4 in Open MPI; MPI_PROC_NULL -1 or -2). */
static int at_root(intptr_t comm, int root) {
  comm_int_fn test_inter = query(COMM_TEST_INTER), get_rank = query(COMM_RANK);
  int inter = 0, rank = -1;
  if (!test_inter || test_inter(comm, &inter)) return 1;
  if (inter) return root <= -3;
  return get_rank && !get_rank(comm, &rank) && rank == root;
}

static int fits(long long v) { return v >= INT_MIN && v <= INT_MAX; }

/* Whether the library reads parameter q on this rank: not where the one buffer whose span reads it is
 * MPI_IN_PLACE ((void *)1 in Open MPI, (void *)-1 in MPICH), nor a root-only one off the root. */
static int read_here(const mgi_narrowed_param *q, const intptr_t *a, const mgi_function *f, intptr_t comm) {
  if (q->buffer >= 0 && (a[q->buffer] == 1 || a[q->buffer] == -1)) return 0;
  return !q->root_only || at_root(comm, (int)a[f->root]);
}

int mgi_no_lower(int id, const intptr_t *a, const void *caller) {
  const mgi_narrowing *w = &mgi_narrowings[id];
  const mgi_function *f = &mgi_functions[id];
  intptr_t comm = f->comm >= 0 ? a[f->comm] : f->win >= 0 ? a[f->win] : 0; /* (mgi_fail's handle) */
  const int mpi4py = mgi_from_mpi4py(caller);
  if (w->base < 0 || !mgi_lower(w->base))
    return mpi4py ? MGI_ERR_UNAVAILABLE
           : mgi_fail(id, comm, w->base < 0 ? "the MPI library below has no such function"
                                            : "the MPI library below has neither this function nor its int form");
  intptr_t b[MGI_MAX_PARAMS];
  memcpy(b, a, (size_t)f->nparams * sizeof *b);
  int *arrays[4] = {0}, lengths[4] = {0}, rc = 0;
  int position[4];           /* a position the call reads and writes (Pack_c's), as the int form's */
  long long *widened[4] = {0};  /* ... and the caller's MPI_Count it goes back to */
  const char *why = NULL;
  for (int k = 0; k < w->n && !why; k++) {
    const mgi_narrowed_param *q = &w->params[k];
    if (q->kind == MGI_NARROW_COUNTP) {
      long long *p = (long long *)a[q->param];
      if (p && !fits(*p)) why = "a position an int cannot hold, and the MPI library below has no large-count form";
      position[k] = p ? (int)*p : 0;
      widened[k] = p;
      b[q->param] = p ? (intptr_t)&position[k] : 0;
      continue;
    }
    const int read = read_here(q, a, f, comm);
    if (q->kind == MGI_NARROW_COUNT) {
      long long v = (long long)a[q->param];
      if (read && !fits(v))
        why = "a count an int cannot hold, and the MPI library below has no large-count form of the call";
      b[q->param] = (intptr_t)(int)v; /* (one the library does not read: whatever it was, cut to an int) */
      continue;
    }
    if (!a[q->param] || !read) {
      b[q->param] = 0; /* not read by the library on this rank */
      continue;
    }
    int n = q->group ? mgi_degree(comm, q->group) : mgi_group_size(comm, q->local);
    if (n == 0 && q->group) {
      b[q->param] = a[q->param]; /* no neighbours: nothing the library reads */
      continue;
    }
    if (n <= 0) {
      why = q->group ? "cannot read the communicator's topology" : "cannot read the communicator's size";
      break;
    }
    int *out = malloc((size_t)n * sizeof *out);
    if (!out) {
      why = "no host memory for the call's int counts";
      break;
    }
    arrays[k] = out;
    lengths[k] = n;
    for (int i = 0; i < n; i++) {
      long long v = q->kind == MGI_NARROW_COUNTS ? ((const long long *)a[q->param])[i]
                                                 : (long long)((const intptr_t *)a[q->param])[i];
      if (!fits(v)) {
        why = "a count or displacement an int cannot hold, and the MPI library below has no large-count form "
              "of the call";
        break;
      }
      out[i] = (int)v;
    }
    b[q->param] = (intptr_t)out;
  }
  /* A non-blocking or persistent call's library reads its arrays until the request completes (or is freed).
   * mpi4py's arrays live as long as its request: once every value fits, the ints go into them, an int where
   * each MPI_Count or MPI_Aint was, as mpi4py's own fallback narrows them. Another caller's arrays may be
   * reused or shared by its next call, which would then read ints as MPI_Counts: its call fails instead. */
  int in_place = 0;
  for (int k = 0; k < w->n && !why && f->request >= 0; k++)
    if (arrays[k]) {
      if (!mpi4py) {
        why = "the MPI library below has no large-count form of this call, and its int form would read narrowed "
              "count arrays after the call returns";
        break;
      }
      memcpy((void *)a[w->params[k].param], arrays[k], (size_t)lengths[k] * sizeof(int));
      b[w->params[k].param] = a[w->params[k].param];
      in_place = 1;
    }
  rc = why ? mgi_fail(id, comm, why) : mgi_call_lower(w->base, b);
  if (in_place && rc != 0) /* the call did not start: mpi4py's arrays as they were (every value fit an int) */
    for (int k = 0; k < w->n; k++)
      if (arrays[k])
        for (int i = 0; i < lengths[k]; i++) ((long long *)a[w->params[k].param])[i] = arrays[k][i];
  for (int k = 0; k < w->n; k++)
    if (widened[k] && !why && rc == 0) *widened[k] = position[k];
  for (int k = 0; k < 4; k++) free(arrays[k]);
  return rc;
}
