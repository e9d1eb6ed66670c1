/* Fortran's bindings of the buffer-taking functions: what the generated wrappers share (fortran.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fortran.h"

/* Fortran's MPI_IN_PLACE and MPI_BOTTOM are variables of the library's Fortran runtime (common blocks):
 * a call passes their addresses. Open MPI names them (one symbol per compiler's mangling); MPICH keeps
 * their addresses in pointers its C side reads (MPI_F_STATUS_IGNORE, a C name of the standard, too). 0: not
 * found (no Fortran runtime loaded, or another MPI). */
static const char *const in_place_names[] = {"mpi_fortran_in_place_", "mpi_fortran_in_place__",
                                             "mpi_fortran_in_place", "MPI_FORTRAN_IN_PLACE"};
static const char *const bottom_names[] = {"mpi_fortran_bottom_", "mpi_fortran_bottom__", "mpi_fortran_bottom",
                                           "MPI_FORTRAN_BOTTOM"};
static const char *const status_ignore_names[] = {"mpi_fortran_status_ignore_", "mpi_fortran_status_ignore__",
                                                  "mpi_fortran_status_ignore", "MPI_FORTRAN_STATUS_IGNORE"};

static uintptr_t find_sentinel(const char *const *names, int nnames, const char *mpich_pointer) {
  for (int i = 0; i < nnames; i++) {
    void *sym = dlsym(RTLD_DEFAULT, names[i]);
    if (sym) return (uintptr_t)sym;
  }
  void **held = (void **)dlsym(RTLD_DEFAULT, mpich_pointer);
  return held ? (uintptr_t)*held : 0;
}

/* Looked up at the first converted call (the program's Fortran runtime is loaded by then; MPICH sets its
 * pointers in MPI_Init) and kept; UINTPTR_MAX: not looked up yet. */
static _Atomic uintptr_t in_place_at = UINTPTR_MAX, bottom_at = UINTPTR_MAX, status_ignore_at = UINTPTR_MAX;

static uintptr_t sentinel(_Atomic uintptr_t *kept, const char *const *names, const char *mpich_pointer) {
  uintptr_t v = atomic_load_explicit(kept, memory_order_relaxed);
  if (v == UINTPTR_MAX) {
    v = find_sentinel(names, 4, mpich_pointer);
    atomic_store_explicit(kept, v, memory_order_relaxed);
  }
  return v;
}

/* MPI_IN_PLACE's C value: (void *)1 in Open MPI, (void *)-1 in MPICH (interpose.h) */
static intptr_t c_in_place(void) { return mgi_lower_named("ompi_mpi_comm_world") ? 1 : -1; }

/* A Fortran buffer argument as the C call takes it. */
static intptr_t c_buffer(const void *p) {
  const uintptr_t at = (uintptr_t)p;
  if (at && at == sentinel(&in_place_at, in_place_names, "MPIR_F_MPI_IN_PLACE")) return c_in_place();
  if (at && at == sentinel(&bottom_at, bottom_names, "MPIR_F_MPI_BOTTOM")) return 0; /* NULL in both */
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

void *mgi_fortran_next(_Atomic(void *) *slot, const char *symbol) {
  void *fn = atomic_load_explicit(slot, memory_order_acquire);
  if (!fn) {
    fn = dlsym(RTLD_NEXT, symbol);
    if (fn) atomic_store_explicit(slot, fn, memory_order_release);
  }
  return fn;
}

int mgi_fortran_call(int id, const unsigned char *kinds, void *const *f, const void *caller) {
  const mgi_function *fn = &mgi_functions[id];
  intptr_t a[MGI_MAX_PARAMS];
  c_status status;
  int *f_status = NULL; /* Fortran's status array, filled from C's after the call */
  for (int i = 0; i < fn->nparams; i++) {
    switch (kinds[i]) {
      case MGI_FK_STATUS:
        if ((uintptr_t)f[i] == sentinel(&status_ignore_at, status_ignore_names, "MPI_F_STATUS_IGNORE")) {
          a[i] = c_status_ignore();
        } else {
          f_status = (int *)f[i];
          a[i] = (intptr_t)&status;
        }
        break;
      case MGI_FK_BUFFER: a[i] = c_buffer(f[i]); break;
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
  return rc;
}
