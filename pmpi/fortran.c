/* Fortran's bindings of the buffer-taking functions: what the generated wrappers share (fortran.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fortran.h"

/* Fortran's MPI_IN_PLACE, MPI_BOTTOM and MPI_STATUS_IGNORE are variables of the library's Fortran runtime
 * (common blocks): a call passes their addresses. Open MPI names them (one symbol per compiler's mangling);
 * MPICH keeps their addresses in pointers its C side reads (MPI_F_STATUS_IGNORE, a C name of the standard,
 * too). */
static const char *const in_place_names[] = {"mpi_fortran_in_place_", "mpi_fortran_in_place__",
                                             "mpi_fortran_in_place", "MPI_FORTRAN_IN_PLACE"};
static const char *const bottom_names[] = {"mpi_fortran_bottom_", "mpi_fortran_bottom__", "mpi_fortran_bottom",
                                           "MPI_FORTRAN_BOTTOM"};
static const char *const status_ignore_names[] = {"mpi_fortran_status_ignore_", "mpi_fortran_status_ignore__",
                                                  "mpi_fortran_status_ignore", "MPI_FORTRAN_STATUS_IGNORE"};

/* A symbol of the library's Fortran runtime as the calling object sees it: in its own scope first (a
 * Fortran library loaded with RTLD_LOCAL, as Python loads extensions and f2py's modules, holds its own
 * copy of the runtime's common blocks, to which the MPI library's references bind, and finds
 * libmpi_mpifh among its dependencies), else in the global scope (a program's, the main program first). */
static void *fortran_symbol(const char *name, const void *caller) {
  Dl_info info;
  if (caller && dladdr(caller, &info) && info.dli_fname && info.dli_fname[0]) {
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD); /* (already loaded: a new reference only) */
    if (h) {
      void *sym = dlsym(h, name);
      dlclose(h);
      if (sym) return sym;
    }
  }
  return dlsym(RTLD_DEFAULT, name);
}

/* Where a sentinel is, once found (never a miss: a runtime loaded later is looked for again): Open MPI's
 * is the symbol's own address; MPICH's is read from its pointer at every call (MPICH sets it when its
 * Fortran runtime initializes, which may come after the first call converted here). */
typedef struct {
  _Atomic uintptr_t at;
  _Atomic(void **) held;
} sentinel_kept;
static sentinel_kept in_place_kept, bottom_kept, status_ignore_kept;

static uintptr_t sentinel(sentinel_kept *kept, const char *const *names, const char *mpich_pointer,
                          const void *caller) {
  uintptr_t at = atomic_load_explicit(&kept->at, memory_order_relaxed);
  if (at) return at;
  void **held = atomic_load_explicit(&kept->held, memory_order_relaxed);
  if (held) return (uintptr_t)*held;
  for (int i = 0; i < 4; i++) {
    void *sym = fortran_symbol(names[i], caller);
    if (sym) {
      atomic_store_explicit(&kept->at, (uintptr_t)sym, memory_order_relaxed);
      return (uintptr_t)sym;
    }
  }
  held = (void **)fortran_symbol(mpich_pointer, caller);
  if (!held) return 0;
  atomic_store_explicit(&kept->held, held, memory_order_relaxed);
  return (uintptr_t)*held;
}

/* MPI_IN_PLACE's C value: (void *)1 in Open MPI, (void *)-1 in MPICH (interpose.h) */
static intptr_t c_in_place(void) { return mgi_lower_named("ompi_mpi_comm_world") ? 1 : -1; }

/* A Fortran buffer argument as the C call takes it. */
static intptr_t c_buffer(const void *p, const void *caller) {
  const uintptr_t at = (uintptr_t)p;
  if (at && at == sentinel(&in_place_kept, in_place_names, "MPIR_F_MPI_IN_PLACE", caller)) return c_in_place();
  if (at && at == sentinel(&bottom_kept, bottom_names, "MPIR_F_MPI_BOTTOM", caller)) return 0; /* NULL: both */
  return (intptr_t)p;
}

/* MPI_STATUS_IGNORE's C value: NULL in Open MPI, (MPI_Status *)1 in MPICH */
static intptr_t c_status_ignore(void) { return mgi_lower_named("ompi_mpi_comm_world") ? 0 : 1; }

/* A C MPI_Status: 24 bytes in Open MPI, 20 in MPICH; room for either */
typedef struct {
  int words[16];
} c_status;
typedef int (*status_c2f_fn)(const void *, int *);
static _Atomic(void *) status_c2f;
/* A request's C handle (a pointer in Open MPI, an int in MPICH: the word's low half) to Fortran's */
typedef int (*request_c2f_fn)(intptr_t);
static _Atomic(void *) request_c2f;

typedef intptr_t (*f2c_fn)(int); /* MPICH's int handles come back in the word's low half, all C reads */
static _Atomic(void *) comm_f2c, type_f2c, op_f2c;

static intptr_t c_handle(_Atomic(void *) *slot, const char *name, const int *f) {
  f2c_fn fn = (f2c_fn)mgi_lower_cached(slot, name);
  return fn ? fn(*f) : (intptr_t)*f;
}

int mgi_fortran_library_makes(int id, void *const *f, const void *caller) {
  if (mgi_takes_all(caller)) return 0;
  if (!mgi_driver()) return 1;
  const mgi_function *fn = &mgi_functions[id];
  for (int b = 0; b < fn->nbuffers; b++)
    if (mgi_device(f[fn->buffers[b].param])) return 0;
  return 1;
}

void *mgi_fortran_next(_Atomic(void *) *slot, const char *symbol, const void *caller) {
  void *fn = atomic_load_explicit(slot, memory_order_acquire);
  if (fn) return fn;
  fn = dlsym(RTLD_NEXT, symbol); /* preloaded: the library's binding is next in the global scope */
  if (!fn) {                     /* loaded by Python: the caller's own scope holds it (fortran_symbol) */
    Dl_info mine, found;
    fn = fortran_symbol(symbol, caller);
    if (fn && dladdr(fn, &found) && dladdr((void *)mgi_fortran_next, &mine) && found.dli_fbase == mine.dli_fbase)
      fn = NULL; /* (this library's own wrapper, seen through the global scope) */
  }
  if (fn) atomic_store_explicit(slot, fn, memory_order_release);
  return fn;
}

int mgi_fortran_call(int id, const unsigned char *kinds, void *const *f, const void *caller) {
  const mgi_function *fn = &mgi_functions[id];
  intptr_t a[MGI_MAX_PARAMS];
  c_status status;
  int *f_status = NULL; /* Fortran's status array, filled from C's after the call */
  intptr_t request = 0; /* the C request a non-blocking call makes */
  int *f_request = NULL; /* Fortran's, set from it after the call */
  for (int i = 0; i < fn->nparams; i++) {
    switch (kinds[i]) {
      case MGI_FK_REQUEST:
        f_request = (int *)f[i];
        a[i] = (intptr_t)&request;
        break;
      case MGI_FK_STATUS:
        if ((uintptr_t)f[i] == sentinel(&status_ignore_kept, status_ignore_names, "MPI_F_STATUS_IGNORE", caller)) {
          a[i] = c_status_ignore();
        } else {
          f_status = (int *)f[i];
          a[i] = (intptr_t)&status;
        }
        break;
      case MGI_FK_BUFFER: a[i] = c_buffer(f[i], caller); break;
      case MGI_FK_INT: a[i] = (intptr_t)*(const int *)f[i]; break;
      case MGI_FK_INTS: a[i] = (intptr_t)f[i]; break; /* Fortran's INTEGER arrays are C's int arrays */
      case MGI_FK_TYPE: a[i] = c_handle(&type_f2c, "PMPI_Type_f2c", (const int *)f[i]); break;
      case MGI_FK_OP: a[i] = c_handle(&op_f2c, "PMPI_Op_f2c", (const int *)f[i]); break;
      default: a[i] = c_handle(&comm_f2c, "PMPI_Comm_f2c", (const int *)f[i]); break;
    }
  }
  int rc;
  if (mgi_takes_all(caller)) {
    rc = mgi_handle(id, a);
  } else {
    int device = 0;
    if (mgi_driver())
      for (int b = 0; b < fn->nbuffers; b++) device |= mgi_device((const void *)a[fn->buffers[b].param]);
    rc = device ? mgi_device_call(id, a) : mgi_call_lower(id, a);
  }
  status_c2f_fn c2f = f_status ? (status_c2f_fn)mgi_lower_cached(&status_c2f, "PMPI_Status_c2f") : NULL;
  if (c2f && rc == 0) c2f(&status, f_status);
  request_c2f_fn r2f = f_request ? (request_c2f_fn)mgi_lower_cached(&request_c2f, "PMPI_Request_c2f") : NULL;
  if (r2f && rc == 0) *f_request = r2f(request);
  return rc;
}
