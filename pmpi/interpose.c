/* The interposer's routing of a call with a device buffer, its errors, and what it exports.
 *
 * A call whose buffers are all host memory went straight to PMPI_<name> in its wrapper. One with a device
 * buffer comes here and goes, in this order, to:
 * 1. the handler, where a process registered one (mpigpu in a Python process: the call runs on mpigpu's
 *    paths, the engine within a node); not from inside the handler itself, whose own MPI calls pass;
 * 2. the MPI library itself, where it says it is CUDA-aware (its MPIX_Query_cuda_support());
 * 3. host copies around the library's call (staging.c), for the blocking functions. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>

#include "functions.h"

/* args: the call's parameters as words; mask: bit b set where the function's b-th buffer is device memory */
typedef int (*mgi_handler)(int id, const intptr_t *args, unsigned mask);

static _Atomic(mgi_handler) handler;
static _Thread_local int in_handler;

int mgi_device_call(int id, intptr_t *args) {
  mgi_handler h = atomic_load_explicit(&handler, memory_order_acquire);
  if (h && !in_handler) {
    unsigned mask = 0;
    for (int b = 0; b < mgi_functions[id].nbuffers; b++)
      mask |= (unsigned)mgi_device((const void *)args[mgi_functions[id].buffers[b].param]) << b;
    in_handler = 1;
    int rc = h(id, args, mask);
    in_handler = 0;
    return rc;
  }
  if (mgi_lower_cuda_aware()) return mgi_call_lower(id, args);
  return mgi_stage(id, args);
}

typedef int (*add_class_fn)(int *);
typedef int (*add_code_fn)(int, int *);
typedef int (*add_string_fn)(int, const char *);
typedef int (*call_errhandler_fn)(intptr_t, int);
typedef int (*comm_rank_fn)(intptr_t, int *);

/* A new MPI error code whose string names the call, the rank and why (MPI_Error_string gives it back),
 * raised through the communicator's error handler as MPI's own errors are; returned as well. */
int mgi_fail(int id, intptr_t comm, const char *why) {
  add_class_fn add_class = (add_class_fn)mgi_lower_named("PMPI_Add_error_class");
  add_code_fn add_code = (add_code_fn)mgi_lower_named("PMPI_Add_error_code");
  add_string_fn add_string = (add_string_fn)mgi_lower_named("PMPI_Add_error_string");
  call_errhandler_fn call = (call_errhandler_fn)mgi_lower_named("PMPI_Comm_call_errhandler");
  comm_rank_fn comm_rank = (comm_rank_fn)mgi_lower_named("PMPI_Comm_rank");
  int rank = -1, cls = 0, code = 0;
  if (mgi_functions[id].comm >= 0 && comm_rank) comm_rank(comm, &rank);
  char msg[400];
  snprintf(msg, sizeof msg, "%s on rank %d: %s (mpigpu interposer)", mgi_functions[id].name, rank, why);
  if (!add_class || !add_code || !add_string || add_class(&cls) || add_code(cls, &code) ||
      add_string(code, msg))
    return 1; /* MPI_ERR_BUFFER in MPICH and Open MPI: the best a library that cannot add codes gets */
  if (mgi_functions[id].comm >= 0 && call) call(comm, code);
  return code;
}

int mgi_missing(int id) { return mgi_fail(id, 0, "the MPI library below has no such function"); }

/* ---- exported ---------------------------------------------------------------------------------- */

/* The process's handler of device calls (NULL: none). */
MGI_EXPORT void mpigpu_pmpi_set_handler(mgi_handler h) { atomic_store_explicit(&handler, h, memory_order_release); }

MGI_EXPORT int mpigpu_pmpi_count(void) { return MGI_COUNT; }
MGI_EXPORT const char *mpigpu_pmpi_name(int id) { return id >= 0 && id < MGI_COUNT ? mgi_functions[id].name : NULL; }
/* "name:kind ..." of function id, as the table (functions.py) writes it: the handler checks it reads
 * the library it was built with. */
MGI_EXPORT const char *mpigpu_pmpi_signature(int id) {
  return id >= 0 && id < MGI_COUNT ? mgi_functions[id].signature : NULL;
}
MGI_EXPORT int mpigpu_pmpi_is_device(const void *p) { return mgi_maybe_device(p); }
/* Whether p lies where device memory cannot (the brk heap, the calling thread's stack): no driver asked. */
MGI_EXPORT int mpigpu_pmpi_surely_host(const void *p) { return mgi_surely_host(p); }
MGI_EXPORT int mpigpu_pmpi_lower_cuda_support(void) { return mgi_lower_cuda_aware(); }
/* The call of function id with these words, as the wrapper makes it for host buffers (the handler's
 * way to the MPI library for a call it hands back). */
MGI_EXPORT int mpigpu_pmpi_call_lower(int id, const intptr_t *args) { return mgi_call_lower(id, args); }
/* The same call through host copies (staging.c). */
MGI_EXPORT int mpigpu_pmpi_call_staged(int id, intptr_t *args) { return mgi_stage(id, args); }

/* With the interposer in place the MPI is CUDA-aware for every function of the table. */
MGI_EXPORT int MPIX_Query_cuda_support(void) { return 1; }
