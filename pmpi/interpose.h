/* The interposer's internal interface: what the generated wrappers (wrappers.c) and the hand-written
 * parts (interpose.c: the device call's routing; lower.c: the MPI library below; memory.c: where a
 * pointer lives, through the CUDA driver; staging.c: device buffers through host copies; narrow.c: the
 * large-count forms on a library without them; requests.c: the persistent requests made for calls below
 * Python and the request calls that meet them) share.
 * No MPI header: handles travel as pointer-sized words (MPICH's ints and Open MPI's pointers alike), so
 * one build serves the MPI the process loads. */
#pragma once
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_entry.h"

#define MGI_EXPORT __attribute__((visibility("default")))

/* How a buffer's bytes lie, as the table says (functions.py's Span): one form, the indices of the
 * parameters holding its count (or counts), displacements (-1: none; the times_p form's factor there) and
 * datatype (or datatypes), and the group its counts are for (0: the communicator's size; 1, 2: a
 * topology's in- and out-degree). */
typedef struct {
  int8_t form, count, displs, type, group;
  int8_t wide;        /* MPI_Count counts (the _c forms) */
  int8_t aint_displs; /* MPI_Aint displacements (the _c forms, MPI_Neighbor_alltoallw's) */
} mgi_span;

#define MGI_MAX_BUFFERS 3 /* MPI_Compare_and_swap's */

typedef struct {
  int8_t param, dir, root_only, nforms; /* dir: 0 in, 1 out, 2 inout; forms[1]: where the call is in place */
  mgi_span forms[2];
} mgi_buffer;

typedef struct {
  const char *name, *lower_name, *signature;
  int8_t nparams, nbuffers, comm, root, request, status, win; /* parameter indices, -1: none */
  int8_t target; /* a one-sided call's target rank (MPI_Win_unlock's, MPI_Win_flush's rank), -1: none */
  int8_t persistent; /* makes a persistent request (MPI_Send_init ...): 1, 2 a partitioned one (MPI_Psend_init) */
  mgi_buffer buffers[MGI_MAX_BUFFERS];
} mgi_function;

enum { MGI_IN, MGI_OUT, MGI_INOUT };

extern const mgi_function mgi_functions[];

/* MPI_IN_PLACE is (void *)-1 in MPICH and (void *)1 in Open MPI; MPI_BOTTOM is NULL in both. None of
 * them, nor anything in the first page, is memory a buffer could start at. */
static inline int mgi_special(const void *p) {
  uintptr_t v = (uintptr_t)p;
  return v < 4096 || v == UINTPTR_MAX;
}

/* The library below's C constants that differ: Open MPI's or MPICH's (lower.c: told by Open MPI's world
 * communicator's symbol) */
int mgi_is_open_mpi(void);
static inline intptr_t mgi_c_in_place(void) { return mgi_is_open_mpi() ? 1 : -1; }          /* MPI_IN_PLACE */
static inline intptr_t mgi_c_status_ignore(void) { return mgi_is_open_mpi() ? 0 : 1; }     /* MPI_STATUS_IGNORE */
/* visit(handle, ctx) for each loaded object (a dlopen RTLD_NOLOAD handle) until it returns nonzero */
void mgi_each_loaded(int (*visit)(void *handle, void *ctx), void *ctx);
unsigned long long mgi_loaded_count(void); /* objects the loader has loaded so far (dlpi_adds) */

/* memory.c */
extern atomic_int mgi_driver_ready;   /* 1 once the CUDA driver is loaded and its functions found */
int mgi_find_driver(void);            /* looks for it again if the loader loaded anything since */
/* device or managed memory, as the driver says (driver ready): its device's ordinal (MGI_DEVICE_UNKNOWN
 * where the driver names none), -1 where host memory */
#define MGI_DEVICE_UNKNOWN 0x7fffffff
int mgi_query(const void *p);
int mgi_surely_host(const void *p);   /* the brk heap or this thread's stack: host memory, no question */
/* Whether this call could hold device memory at all: once per call, not per buffer (without a driver,
 * no memory is device memory). */
static inline int mgi_driver(void) {
  return atomic_load_explicit(&mgi_driver_ready, memory_order_acquire) || mgi_find_driver();
}
/* the device ordinal of device memory, -1 for host memory */
static inline int mgi_device_of(const void *p) { return mgi_special(p) || mgi_surely_host(p) ? -1 : mgi_query(p); }
static inline int mgi_device(const void *p) { return mgi_device_of(p) >= 0; }
static inline int mgi_maybe_device(const void *p) { return mgi_driver() && mgi_device(p); }
int mgi_copy(void *dst, const void *src, size_t n, const void *device_side); /* 0 or a CUDA error */

/* lower.c: the MPI library below */
void *mgi_lower(int id);              /* PMPI_<name> of function id, or NULL */
/* the library's function `name`, kept in *slot once looked up (a miss too, once the library is found) */
void *mgi_lower_cached(_Atomic(void *) *slot, const char *name);
void *mgi_lower_named(const char *name);
int mgi_lower_cuda_aware(void);       /* the library's own MPIX_Query_cuda_support(), 0 where it has none */

/* interpose.c: where a call goes */
extern _Atomic(void *) mgi_handler_fn;   /* the process's handler (NULL: none) */
/* (Thread-locals in a shared object's default model: initial-exec takes static TLS surplus a Python process
 * may have spent, and TLS descriptors need glibc >= 2.40's register preservation; the model is a few ns of
 * a call, docs/benchmarks.md.) */
extern _Thread_local int mgi_in_handler; /* this thread runs the handler: its own MPI calls pass */
extern _Thread_local int mgi_lower_made; /* mgi_handle_routed made a call on the library itself (set, never
                                          * cleared there: a caller clears it before a call it asks about) */
extern uintptr_t mgi_pass_lo, mgi_pass_hi; /* the code whose calls pass untouched: mpi4py's extension */
/* With a handler, every call from any other caller goes to it, host buffers too: in a Python process the
 * ranks of a call agree on its path in mpigpu (a rank whose host call went straight to the library would
 * leave its device peers waiting), and mpigpu's point-to-point has its own protocol. mpi4py's calls come
 * from mpigpu's own paths, which routed them already. `caller`: the wrapper's return address. */
static inline int mgi_takes_all(const void *caller) {
  uintptr_t c = (uintptr_t)caller;
  return atomic_load_explicit(&mgi_handler_fn, memory_order_relaxed) && !mgi_in_handler &&
         !(c >= mgi_pass_lo && c < mgi_pass_hi);
}
int mgi_handle(int id, intptr_t *args);      /* to the handler */
/* The same, where the wrapper tried the host routes already: host_rc is what mgi_host_call answered
 * (MGI_ENTRY_UNTRIED: not tried, a device buffer) */
enum { MGI_ENTRY_UNTRIED = -4 };
int mgi_handle_routed(int id, intptr_t *args, int host_rc);
/* A Python process's host-buffer call of function `id` on communicator `comm` (every buffer host memory),
 * by the routes the engine's entry keeps (host_routes.h; none: MGI_ENTRY_HANDLER). A wrapper whose answer
 * is MGI_ENTRY_LOWER makes the call on the library itself, with mgi_in_handler set: a host call then costs
 * a look at its buffers, a slot's lookup and the board's stores (docs/benchmarks.md). */
int mgi_host_call(int id, intptr_t comm);
int mgi_device_call(int id, intptr_t *args); /* a call with a device buffer that the handler does not take:
                                               the library where CUDA-aware, else host copies */
int mgi_missing(int id);                     /* the MPI library has no PMPI_<name> */
int mgi_fail(int id, intptr_t comm, const char *why); /* an MPI error naming the call, through comm's handler */
/* the same for a call named `name` whose error goes to communicator comm's handler (win: window comm's) */
int mgi_fail_on(const char *name, int win, intptr_t comm, const char *why);
/* What mpi4py's call of a function the library has in neither form returns: mpi4py's own code for a function
 * the library lacks (PyMPI_ERR_UNAVAILABLE, which it raises as NotImplementedError), so it sees what it sees
 * without the interposer; no handler is called (no MPI code means it). Other callers get an MPI error. */
#define MGI_ERR_UNAVAILABLE ((int)0xAAAAAAAAu)
int mgi_fail_named(const char *name, const char *why); /* the same for a call without a communicator */
/* narrow.c: a neighbourhood collective's array length on communicator comm, its topology's in-degree
 * (which == 1) or out-degree (2); -1 where it cannot be read (no topology) */
int mgi_degree(intptr_t comm, int which);
/* narrow.c: how many entries a function's arrays have on communicator comm: its group, or on an
 * intercommunicator the remote group unless `local`; 0 where it cannot be read */
int mgi_group_size(intptr_t comm, int local);

/* staging.c: a blocking call's device buffers through host copies */
int mgi_stage(int id, intptr_t *args);
/* A device buffer's staging copy: the bytes its form reaches, on each side */
typedef struct {
  char *device, *host; /* the span's first byte on each side (host NULL: nothing staged) */
  size_t bytes;
  int writes; /* MPI writes it: copied back */
} mgi_staged;
/* Buffer b's device bytes (under `form`, in a group of n where this is `rank`) copied into new host memory
 * (*s) and a[param] pointed at the copy, so the call's offsets reach it; 0 (nothing to copy: s->host NULL),
 * or -1 with `why` filled (s->host, where set, for the caller to free) */
int mgi_stage_in(const mgi_buffer *buf, const mgi_span *form, intptr_t *a, int n, int rank, int b,
                 mgi_staged *s, char *why, size_t why_bytes);
/* A call's device buffers (every one its rank passes and reads or writes, as mgi_stage_in) copied into host
 * memory, staged[b] for buffer b and a[] pointed at the copies: 0, or -1 with `why` filled (what was staged
 * is the caller's to free: mgi_unstage) */
int mgi_stage_call(int id, intptr_t *a, mgi_staged staged[MGI_MAX_BUFFERS], char *why, size_t why_bytes);
/* What MPI wrote copied back to device memory (a failed copy fills `why`) */
void mgi_copy_back(const mgi_staged staged[MGI_MAX_BUFFERS], char *why, size_t why_bytes);
/* A datatype's extent and true bounds, from the library below: 0, or -1 where it cannot tell */
int mgi_type_bounds(intptr_t type, intptr_t *extent, intptr_t *true_lb, intptr_t *true_extent);
/* The bytes [*lo, *hi) that count elements of a type (extent, true bounds) reach from `offset` bytes on:
 * the first's true_lb to the last's true end, a negative extent putting the last below the first */
void mgi_elements_bytes(intptr_t offset, long long count, intptr_t extent, intptr_t true_lb, intptr_t true_extent,
                        intptr_t *lo, intptr_t *hi);

/* requests.c: an array of the library's requests (MPICH's ints, Open MPI's pointers), entry by entry */
int mgi_request_width(void);
uintptr_t mgi_request_at(const void *requests, int i);
void mgi_request_put(void *requests, int i, uintptr_t h);
/* The same where copy_back, and every copy freed */
void mgi_unstage(mgi_staged staged[MGI_MAX_BUFFERS], int copy_back, char *why, size_t why_bytes);
/* staged_requests.c: a non-blocking call's device buffers through host copies held until its request
 * completes (MPI_Wait & co., which come there while any is held) */
int mgi_stage_request(int id, intptr_t *args);
/* Memory a non-blocking or persistent call's library reads until its request is done (a Fortran w-form's
 * converted datatypes): set aside before the call (mgi_own_with_request), taken by the request that
 * mgi_stage_request holds; whether it was taken, the thread's slot cleared after (mgi_owned_taken); a
 * request made past staging (a CUDA-aware library, the library's own path) held for it alone
 * (mgi_hold_owned: 0 once it owns the memory). */
#define MGI_MAX_OWNED 2
void mgi_own_with_request(void *const owned[MGI_MAX_OWNED]);
int mgi_owned_taken(void);
int mgi_hold_owned(int id, const intptr_t *args);
int mgi_staged_window_requests(void); /* any held request made on a window */
/* window win's synchronization completed its operations towards target (-1: all): the held request-based
 * ones' results copied back (a failed copy fills `why`) */
void mgi_requests_synchronized(intptr_t win, int target, char *why, size_t why_bytes);
/* one_sided.c: a one-sided call's device buffers through host copies held to the completing
 * synchronization; whether any copy is held (the synchronizations' wrappers then come here) */
int mgi_stage_one_sided(int id, intptr_t *args);
int mgi_rma_held(void);

/* wrappers.c (generated) */
int mgi_call_lower(int id, const intptr_t *args);

/* narrow.c: a large-count form (MPI_<name>_c) on a library without it, as its int form */
/* an MPI_Count, MPI_Count[], MPI_Aint[], an MPI_Count the call reads and writes (Pack_c's position) */
enum { MGI_NARROW_COUNT, MGI_NARROW_COUNTS, MGI_NARROW_AINTS, MGI_NARROW_COUNTP };
typedef struct {
  int8_t param, kind, root_only, local; /* local: an array as long as the caller's group, else the peers' */
  int8_t buffer; /* the one buffer parameter whose span reads it (-1: several): not read where it is IN_PLACE */
  int8_t group;  /* an array's length: 0 the group (local), 1 the topology's in-degree, 2 its out-degree */
} mgi_narrowed_param;
typedef struct {
  int16_t base; /* the int form's id; -1: not a large-count form */
  int8_t n;
  mgi_narrowed_param params[4];
} mgi_narrowing;
extern const mgi_narrowing mgi_narrowings[]; /* (generated) */
/* a function the library below lacks: its int form where it is a large-count one, else an MPI error */
int mgi_no_lower(int id, const intptr_t *args, const void *caller); /* caller: the wrapper's return address
                                                                      (NULL: not known, not mpi4py) */
/* Whether `caller` is code of mpi4py's extension module: mpi4py keeps a non-blocking or persistent call's
 * count arrays with its request, and raises NotImplementedError on its own code for a missing function. */
int mgi_from_mpi4py(const void *caller);
