/* The interposer's routing of calls, its errors, and what it exports.
 *
 * In a process with a handler (mpigpu in a Python process), every call from a caller other than
 * mpi4py's extension goes to it (mgi_takes_all): the call runs on mpigpu's paths, the engine within a
 * node. mpi4py's own calls, and the handler's, pass: host buffers straight to PMPI_<name>; a call with
 * device memory (mpigpu hands it to a CUDA-aware library below on purpose) comes here and goes to the
 * MPI library itself where it says it is CUDA-aware (its MPIX_Query_cuda_support()), else through host
 * copies around the library's call (staging.c, the blocking functions). Never to the handler: a peer of
 * this call whose buffers are host memory passed straight to the library, so this rank must make the
 * same library call (mpigpu's agreement would wait for a peer that is not in it). The same holds in a
 * process without a handler (a C program). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "engine_entry.h"
#include "functions.h"
#include "host_routes.h"

_Static_assert((int)MGI_COUNT <= (int)MGI_HOST_FUNCTIONS, "host_routes.h: a slot holds fewer functions than the table");

/* args: the call's parameters as words; mask: bit b set where the function's b-th buffer is device memory */
typedef int (*mgi_handler)(int id, const intptr_t *args, unsigned mask);

_Atomic(void *) mgi_handler_fn;
/* The engine's own entry (mpigpu's _device: the five engine collectives, read from the words in C; NULL:
 * none): same arguments and the buffers' ordinals (engine_entry.h). It runs their device-buffer calls and
 * posts their host-buffer calls for the peers (then made here on the library), without the handler's
 * Python; it answers MGI_ENTRY_HANDLER for anything else. */
static _Atomic(void *) mgi_engine_fn;
/* The routes of host-buffer calls the engine's entry keeps (host_routes.h; NULL: none), tried first for a
 * call whose buffers are all host memory. */
static _Atomic(void *) mgi_host_routes_at;
static atomic_uchar mgi_engine_takes[MGI_COUNT]; /* the functions the entry may take */
_Thread_local int mgi_in_handler;
_Thread_local int mgi_lower_made;
uintptr_t mgi_pass_lo, mgi_pass_hi;

int mgi_host_call(int id, intptr_t comm) {
  mgi_host_routes *r = (mgi_host_routes *)atomic_load_explicit(&mgi_host_routes_at, memory_order_acquire);
  return r ? mgi_host_route(r, id, comm) : MGI_ENTRY_HANDLER;
}

int mgi_handle(int id, intptr_t *args) { return mgi_handle_routed(id, args, MGI_ENTRY_UNTRIED); }

int mgi_handle_routed(int id, intptr_t *args, int host_rc) {
  mgi_handler h = (mgi_handler)atomic_load_explicit(&mgi_handler_fn, memory_order_acquire);
  if (!h) { /* unregistered meanwhile (Python's exit) */
    mgi_lower_made = 1;
    return host_rc == MGI_ENTRY_LOWER ? mgi_call_lower(id, args) : mgi_device_call(id, args);
  }
  unsigned mask = 0;
  int ordinals[MGI_MAX_BUFFERS] = {-1, -1, -1}; /* mgi_function's buffers */
  if (host_rc == MGI_ENTRY_UNTRIED && mgi_driver())
    for (int b = 0; b < mgi_functions[id].nbuffers; b++) {
      ordinals[b] = mgi_device_of((const void *)args[mgi_functions[id].buffers[b].param]);
      mask |= (unsigned)(ordinals[b] >= 0) << b;
    }
  mgi_engine engine = (mgi_engine)atomic_load_explicit(&mgi_engine_fn, memory_order_acquire);
  const int takes = engine && atomic_load_explicit(&mgi_engine_takes[id], memory_order_relaxed);
  const int comm = mgi_functions[id].comm;
  int rc = host_rc;
  if (rc == MGI_ENTRY_UNTRIED) rc = takes && !mask && comm >= 0 ? mgi_host_call(id, args[comm]) : MGI_ENTRY_HANDLER;
  mgi_in_handler = 1;
  if (rc == MGI_ENTRY_HANDLER && takes) rc = engine(id, args, mask, ordinals);
  if (rc == MGI_ENTRY_LOWER) {
    mgi_lower_made = 1;
    rc = mgi_call_lower(id, args); /* (mgi_in_handler set: nothing the library calls comes back here) */
  }
  else if (rc < 0)
    rc = h(id, args, mask);
  mgi_in_handler = 0;
  return rc;
}

int mgi_device_call(int id, intptr_t *args) {
  return mgi_lower_cuda_aware() ? mgi_call_lower(id, args) : mgi_stage(id, args);
}

typedef int (*add_class_fn)(int *);
typedef int (*add_code_fn)(int, int *);
typedef int (*add_string_fn)(int, const char *);
typedef int (*call_errhandler_fn)(intptr_t, int);
typedef int (*comm_rank_fn)(intptr_t, int *);

/* The MPI error code whose string names the call, the rank and why (MPI_Error_string gives it back),
 * raised through the communicator's error handler as MPI's own errors are; returned as well. One error
 * class, and one code per message, kept: an MPI library has a few thousand codes. */
#define MGI_MAX_CODES 64
static pthread_mutex_t codes_lock = PTHREAD_MUTEX_INITIALIZER;
static int error_class = -1, ncodes;
static struct {
  char msg[400];
  int code;
} codes[MGI_MAX_CODES];

static int code_for(const char *msg) {
  add_class_fn add_class = (add_class_fn)mgi_lower_named("PMPI_Add_error_class");
  add_code_fn add_code = (add_code_fn)mgi_lower_named("PMPI_Add_error_code");
  add_string_fn add_string = (add_string_fn)mgi_lower_named("PMPI_Add_error_string");
  int code = 1; /* MPI_ERR_BUFFER in MPICH and Open MPI: where no code can be added, or the table is full */
  pthread_mutex_lock(&codes_lock);
  for (int i = 0; i < ncodes; i++)
    if (!strcmp(codes[i].msg, msg)) {
      code = codes[i].code;
      goto done;
    }
  if (!add_class || !add_code || !add_string || ncodes == MGI_MAX_CODES) goto done;
  if (error_class < 0 && add_class(&error_class)) {
    error_class = -1;
    goto done;
  }
  int made;
  if (add_code(error_class, &made) || add_string(made, msg)) goto done;
  snprintf(codes[ncodes].msg, sizeof codes[ncodes].msg, "%s", msg);
  codes[ncodes++].code = code = made;
done:
  pthread_mutex_unlock(&codes_lock);
  return code;
}

/* The calling rank in a window's group (-1 where the library cannot say). */
static int window_rank(intptr_t win) {
  typedef int (*win_group_fn)(intptr_t, intptr_t *);
  typedef int (*group_rank_fn)(intptr_t, int *);
  typedef int (*group_free_fn)(intptr_t *);
  win_group_fn get_group = (win_group_fn)mgi_lower_named("PMPI_Win_get_group");
  group_rank_fn group_rank = (group_rank_fn)mgi_lower_named("PMPI_Group_rank");
  group_free_fn group_free = (group_free_fn)mgi_lower_named("PMPI_Group_free");
  intptr_t group = 0;
  int rank = -1;
  if (!get_group || !group_rank || !group_free || get_group(win, &group)) return -1;
  if (group_rank(group, &rank)) rank = -1;
  group_free(&group);
  return rank;
}

/* comm: the call's communicator, or a one-sided call's window (its handler then); 0: not known (no rank
 * asked, no handler called: a null handle would end the job in the library) */
int mgi_fail(int id, intptr_t comm, const char *why) {
  const mgi_function *fn = &mgi_functions[id];
  return mgi_fail_on(fn->name, fn->win >= 0, fn->comm >= 0 || fn->win >= 0 ? comm : 0, why);
}

int mgi_fail_on(const char *name, int win, intptr_t comm, const char *why) {
  const int has = comm != 0;
  call_errhandler_fn call =
      (call_errhandler_fn)mgi_lower_named(win ? "PMPI_Win_call_errhandler" : "PMPI_Comm_call_errhandler");
  comm_rank_fn comm_rank = (comm_rank_fn)mgi_lower_named("PMPI_Comm_rank");
  int rank = -1;
  if (has && win) rank = window_rank(comm);
  else if (has && comm_rank) comm_rank(comm, &rank);
  char msg[400];
  snprintf(msg, sizeof msg, "%s on rank %d: %s (mpigpu interposer)", name, rank, why);
  int code = code_for(msg);
  if (has && call) call(comm, code);
  return code;
}

int mgi_missing(int id) { return mgi_fail(id, 0, "the MPI library below has no such function"); }

/* An MPI error code naming a call that has no communicator (the request calls, requests.c). */
int mgi_fail_named(const char *name, const char *why) {
  char msg[400];
  snprintf(msg, sizeof msg, "%s: %s (mpigpu interposer)", name, why);
  return code_for(msg);
}

/* ---- exported ---------------------------------------------------------------------------------- */

/* The process's handler of device calls (NULL: none). */
MGI_EXPORT void mpigpu_pmpi_set_handler(mgi_handler h) {
  atomic_store_explicit(&mgi_handler_fn, (void *)h, memory_order_release);
}

/* The engine's entry, tried before the handler for the calls of the functions it takes that have a device
 * buffer (NULL: none). */
MGI_EXPORT void mpigpu_pmpi_set_engine(mgi_engine e) {
  atomic_store_explicit(&mgi_engine_fn, (void *)e, memory_order_release);
}

/* The routes of host-buffer calls (host_routes.h: an mgi_host_routes the engine's entry keeps; NULL: none),
 * tried before the engine's entry. */
MGI_EXPORT void mpigpu_pmpi_set_host_routes(void *routes) {
  const mgi_host_routes *r = (const mgi_host_routes *)routes;
  if (r && (r->size != sizeof(mgi_host_routes) || r->version != MGI_HOST_ROUTES_VERSION)) routes = NULL; /* (another layout) */
  atomic_store_explicit(&mgi_host_routes_at, routes, memory_order_release);
}

/* Function id is one the engine's entry takes. */
MGI_EXPORT void mpigpu_pmpi_engine_takes(int id) {
  if (id >= 0 && id < MGI_COUNT) atomic_store_explicit(&mgi_engine_takes[id], 1, memory_order_relaxed);
}

typedef struct {
  uintptr_t addr, lo, hi;
} object_span;

/* The addresses a loaded object's segments span: [*lo, *hi). */
static void load_span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi) {
  *lo = UINTPTR_MAX;
  *hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < *lo) *lo = a;
    if (a + ph->p_memsz > *hi) *hi = a + ph->p_memsz;
  }
}

static int span_of_object(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  object_span *o = out;
  uintptr_t lo, hi;
  load_span(info, &lo, &hi);
  if (o->addr >= lo && o->addr < hi) {
    o->lo = lo;
    o->hi = hi;
    return 1;
  }
  return 0;
}

/* Whether a call returning to `caller` passes untouched (tests, and mgi_from_mpi4py). */
MGI_EXPORT int mpigpu_pmpi_caller_passes(const void *caller) {
  return (uintptr_t)caller >= mgi_pass_lo && (uintptr_t)caller < mgi_pass_hi;
}

/* mpi4py's extension module as a span of addresses, where mpigpu has not named it (mgi_pass_lo/hi): a
 * process that preloads the interposer without mpigpu. Looked for by its file's name until found. */
static int span_of_mpi4py(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "/mpi4py/MPI.")) return 0;
  object_span *o = out;
  load_span(info, &o->lo, &o->hi);
  return 1;
}

int mgi_from_mpi4py(const void *caller) {
  static _Atomic uintptr_t lo, hi;
  uintptr_t c = (uintptr_t)caller;
  if (!caller) return 0;
  if (mgi_pass_hi) return mpigpu_pmpi_caller_passes(caller);
  if (!atomic_load_explicit(&hi, memory_order_acquire)) {
    object_span o = {0, 0, 0};
    dl_iterate_phdr(span_of_mpi4py, &o);
    if (!o.hi) return 0;
    atomic_store_explicit(&lo, o.lo, memory_order_relaxed);
    atomic_store_explicit(&hi, o.hi, memory_order_release);
  }
  return c >= atomic_load_explicit(&lo, memory_order_relaxed) && c < atomic_load_explicit(&hi, memory_order_relaxed);
}

/* The loaded object holding address `inside` (mpi4py's extension) makes calls that pass untouched: they
 * come from mpigpu's own paths. 0, or -1 where no loaded object holds it. */
MGI_EXPORT int mpigpu_pmpi_pass_caller(const void *inside) {
  object_span o = {(uintptr_t)inside, 0, 0};
  dl_iterate_phdr(span_of_object, &o);
  if (!o.hi) return -1;
  mgi_pass_lo = o.lo;
  mgi_pass_hi = o.hi;
  return 0;
}

MGI_EXPORT int mpigpu_pmpi_count(void) { return MGI_COUNT; }
/* "name:kind ..." of function id, as the table (functions.py) writes it: the handler checks it reads
 * the library it was built with. */
MGI_EXPORT const char *mpigpu_pmpi_signature(int id) {
  return id >= 0 && id < MGI_COUNT ? mgi_functions[id].signature : NULL;
}
/* Whether p lies where device memory cannot (the brk heap, the calling thread's stack): no driver asked. */
MGI_EXPORT int mpigpu_pmpi_surely_host(const void *p) { return mgi_surely_host(p); }
MGI_EXPORT int mpigpu_pmpi_lower_cuda_support(void) { return mgi_lower_cuda_aware(); }

/* With the interposer in place the MPI is CUDA-aware for every function of the table. */
MGI_EXPORT int MPIX_Query_cuda_support(void) { return 1; }
