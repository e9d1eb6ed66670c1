/* Fortran's bindings of the buffer-taking functions: what the generated wrappers share (fortran.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fortran.h"

/* Fortran's MPI_IN_PLACE, MPI_BOTTOM and MPI_STATUS_IGNORE are variables of the library's Fortran runtime
 * (common blocks): a call passes their addresses. Open MPI names them (one symbol per compiler's mangling);
 * MPICH keeps their addresses in pointers its C side reads (MPI_F_STATUS_IGNORE, a C name of the standard,
 * too). */
/* (the last name: MPICH's `use mpi_f08` objects, whose addresses its f08 entries pass) */
enum { NMANGLINGS = 5, MAX_COPIES = 16 }; /* the names of each sentinel; the copies kept of each */
static const char *const in_place_names[NMANGLINGS] = {"mpi_fortran_in_place_", "mpi_fortran_in_place__",
                                             "mpi_fortran_in_place", "MPI_FORTRAN_IN_PLACE", "MPIR_F08_MPI_IN_PLACE"};
static const char *const bottom_names[NMANGLINGS] = {"mpi_fortran_bottom_", "mpi_fortran_bottom__", "mpi_fortran_bottom",
                                           "MPI_FORTRAN_BOTTOM", "MPIR_F08_MPI_BOTTOM"};
static const char *const status_ignore_names[NMANGLINGS] = {"mpi_fortran_status_ignore_", "mpi_fortran_status_ignore__",
                                                  "mpi_fortran_status_ignore", "MPI_FORTRAN_STATUS_IGNORE",
                                                  "MPIR_F08_MPI_STATUS_IGNORE_OBJ"};
static const char *const statuses_ignore_names[NMANGLINGS] = {
    "mpi_fortran_statuses_ignore_", "mpi_fortran_statuses_ignore__", "mpi_fortran_statuses_ignore",
    "MPI_FORTRAN_STATUSES_IGNORE", "MPIR_F08_MPI_STATUSES_IGNORE_OBJ"};

/* Every definition of a sentinel among the loaded objects is taken for it. Which copy a call passes
 * depends on how the objects were loaded: a Fortran program's own copy (the runtime's references bind to
 * it), a Fortran library loaded with RTLD_LOCAL its own (as Python loads an extension or an f2py module),
 * Open MPI's mpi_f08 bindings the program's. A user's buffer is never one of these variables, so matching
 * any is safe (Open MPI's own test compares with each mangling's address alike). The table is rebuilt when
 * the loader has loaded an object since (dl_iterate_phdr's dlpi_adds), looked at where a buffer matched
 * none. MPICH keeps its sentinels' addresses in pointers (MPIR_F_MPI_IN_PLACE & co.), read at every call:
 * its Fortran runtime may set them after the first call converted here. */
enum { SENTINEL_IN_PLACE, SENTINEL_BOTTOM, SENTINEL_STATUS_IGNORE, SENTINEL_STATUSES_IGNORE, NSENTINELS };
static const char *const *const sentinel_names[NSENTINELS] = {in_place_names, bottom_names, status_ignore_names,
                                                              statuses_ignore_names};
static const char *const mpich_pointers[NSENTINELS] = {"MPIR_F_MPI_IN_PLACE", "MPIR_F_MPI_BOTTOM",
                                                       "MPI_F_STATUS_IGNORE", "MPI_F_STATUSES_IGNORE"};
static struct {
  uintptr_t copies[NSENTINELS][MAX_COPIES];
  void **held[NSENTINELS]; /* MPICH's pointer to the sentinel's address */
  int ncopies[NSENTINELS];
  unsigned long long adds; /* the loader's count it was built at (0: never) */
} sentinels;
static pthread_mutex_t sentinels_lock = PTHREAD_MUTEX_INITIALIZER;

static void keep_copy(int k, void *sym) {
  if (!sym) return;
  for (int i = 0; i < sentinels.ncopies[k]; i++)
    if (sentinels.copies[k][i] == (uintptr_t)sym) return;
  if (sentinels.ncopies[k] < MAX_COPIES) sentinels.copies[k][sentinels.ncopies[k]++] = (uintptr_t)sym;
}

static int keep_object_copies(void *h, void *ctx) {
  (void)ctx;
  for (int k = 0; k < NSENTINELS; k++) {
    for (int m = 0; m < NMANGLINGS; m++) keep_copy(k, dlsym(h, sentinel_names[k][m]));
    if (!sentinels.held[k]) sentinels.held[k] = (void **)dlsym(h, mpich_pointers[k]);
  }
  return 0; /* every object */
}

/* Under sentinels_lock: the definitions the global scope gives, then every object's own. */
static void find_sentinels(unsigned long long adds) {
  for (int k = 0; k < NSENTINELS; k++) {
    for (int m = 0; m < NMANGLINGS; m++) keep_copy(k, dlsym(RTLD_DEFAULT, sentinel_names[k][m]));
    if (!sentinels.held[k]) sentinels.held[k] = (void **)dlsym(RTLD_DEFAULT, mpich_pointers[k]);
  }
  mgi_each_loaded(keep_object_copies, NULL);
  sentinels.adds = adds;
}

static int matches(int k, uintptr_t p) {
  for (int i = 0; i < sentinels.ncopies[k]; i++)
    if (sentinels.copies[k][i] == p) return 1;
  return sentinels.held[k] && (uintptr_t)*sentinels.held[k] == p;
}

/* Which of Fortran's sentinels (SENTINEL_*) p is among `first` .. `last`, or -1: one look at the table,
 * and at the loader's count where p matched none (the table is rebuilt if objects were loaded since). */
static int sentinel_of(const void *p, int first, int last) {
  if (!p) return -1;
  pthread_mutex_lock(&sentinels_lock);
  int hit = -1;
  for (int pass = 0; pass < 2 && hit < 0; pass++) {
    for (int k = first; k <= last && hit < 0; k++)
      if (matches(k, (uintptr_t)p)) hit = k;
    if (hit >= 0 || pass) break;
    const unsigned long long adds = mgi_loaded_count();
    if (adds == sentinels.adds) break;
    find_sentinels(adds);
  }
  pthread_mutex_unlock(&sentinels_lock);
  return hit;
}

/* The library's Fortran binding `name` as the calling object sees it (mgi_fortran_next, where the global
 * scope holds none but the interposer's): in the caller's own scope first (a Fortran library loaded with
 * RTLD_LOCAL finds libmpi_mpifh among its own dependencies there), else in the global scope. */
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

/* A Fortran buffer argument as the C call takes it. */
static intptr_t c_buffer(const void *p) {
  switch (sentinel_of(p, SENTINEL_IN_PLACE, SENTINEL_BOTTOM)) {
    case SENTINEL_IN_PLACE: return mgi_c_in_place();
    case SENTINEL_BOTTOM: return 0; /* MPI_BOTTOM is NULL in both */
    default: return (intptr_t)p;
  }
}

/* A C MPI_Status: 24 bytes in Open MPI, 20 in MPICH; room for either */
typedef struct {
  int words[16];
} c_status;
typedef int (*status_c2f_fn)(const void *, int *);
static _Atomic(void *) status_c2f;
/* A request's handles. Open MPI converts them with PMPI_Request_c2f and _f2c (its C handle a pointer);
 * MPICH has no such functions (its MPI_Request_c2f and _f2c are macros): its handles are ints that C and
 * Fortran share, so the int is the other side's handle as it is (the word's low half). */
typedef int (*request_c2f_fn)(intptr_t);
typedef intptr_t (*request_f2c_fn)(int);
static _Atomic(void *) request_c2f, request_f2c;

static int request_to_fortran(intptr_t c) {
  request_c2f_fn fn = (request_c2f_fn)mgi_lower_cached(&request_c2f, "PMPI_Request_c2f");
  return fn ? fn(c) : (int)c;
}

static intptr_t request_from_fortran(int f) {
  request_f2c_fn fn = (request_f2c_fn)mgi_lower_cached(&request_f2c, "PMPI_Request_f2c");
  return fn ? fn(f) : (intptr_t)f;
}

/* Whether requests can be converted: Open MPI's only through its functions (its handles are pointers) */
static int requests_convert(void) {
  return !mgi_is_open_mpi() || (mgi_lower_cached(&request_c2f, "PMPI_Request_c2f") &&
                                mgi_lower_cached(&request_f2c, "PMPI_Request_f2c"));
}

typedef intptr_t (*f2c_fn)(int); /* MPICH's int handles come back in the word's low half, all C reads */
static _Atomic(void *) comm_f2c, type_f2c, op_f2c, info_f2c;

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

/* A w-form's array of Fortran datatypes (parameter `param` of function fn, whose communicator is C's
 * comm) as C handles in new memory (MPICH's ints, Open MPI's pointers), as many as the group its buffer's
 * counts are for; NULL where that cannot be read or no memory is there. */
static void *c_types(const mgi_function *fn, int param, intptr_t comm, const int *f_types) {
  int group = 0;
  for (int b = 0; b < fn->nbuffers; b++)
    if (fn->buffers[b].forms[0].type == param) group = fn->buffers[b].forms[0].group;
  const int n = group ? mgi_degree(comm, group) : mgi_group_size(comm, 0);
  if (n < 0 || (n == 0 && !group)) return NULL;
  void *c = calloc(n ? (size_t)n : 1, sizeof(intptr_t));
  if (!c) return NULL;
  for (int i = 0; i < n; i++) {
    const intptr_t h = c_handle(&type_f2c, "PMPI_Type_f2c", &f_types[i]);
    if (mgi_is_open_mpi()) ((intptr_t *)c)[i] = h;
    else ((int *)c)[i] = (int)h;
  }
  return c;
}

int mgi_fortran_call(int id, const unsigned char *kinds, void *const *f, const void *caller) {
  const mgi_function *fn = &mgi_functions[id];
  intptr_t a[MGI_MAX_PARAMS];
  void *types[MGI_MAX_OWNED] = {NULL, NULL}; /* the w-form's datatype arrays converted: freed after the call,
                                              * or with its request */
  int ntypes = 0;
  for (int i = 0; i < fn->nparams; i++)
    if (kinds[i] == MGI_FK_REQUEST && !requests_convert())
      return mgi_fail_named(fn->name, "the MPI library below has no PMPI_Request_c2f for the request it makes");
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
        if (sentinel_of(f[i], SENTINEL_STATUS_IGNORE, SENTINEL_STATUS_IGNORE) >= 0) {
          a[i] = mgi_c_status_ignore();
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
      case MGI_FK_INFO: a[i] = c_handle(&info_f2c, "PMPI_Info_f2c", (const int *)f[i]); break;
      case MGI_FK_TYPES: a[i] = 0; break; /* (below: they need the communicator) */
      default: a[i] = c_handle(&comm_f2c, "PMPI_Comm_f2c", (const int *)f[i]); break;
    }
  }
  for (int i = 0; i < fn->nparams; i++) {
    if (kinds[i] != MGI_FK_TYPES) continue;
    /* MPI ignores the array of a buffer given as MPI_IN_PLACE (it may be a one-element dummy): not read */
    int ignored = 0;
    for (int b = 0; b < fn->nbuffers; b++)
      if (fn->buffers[b].forms[0].type == i) ignored = a[fn->buffers[b].param] == mgi_c_in_place();
    if (ignored) {
      a[i] = (intptr_t)f[i];
      continue;
    }
    void *c = ntypes < MGI_MAX_OWNED && fn->comm >= 0 ? c_types(fn, i, a[fn->comm], (const int *)f[i]) : NULL;
    if (!c) {
      for (int k = 0; k < ntypes; k++) free(types[k]);
      return mgi_fail(id, fn->comm >= 0 ? a[fn->comm] : 0,
                      "cannot convert the Fortran datatypes' array (its communicator's group, or host memory)");
    }
    a[i] = (intptr_t)(types[ntypes++] = c);
  }
  /* (a buffer's place is the same before and after the conversion: Fortran's sentinels are host memory) */
  /* A non-blocking or persistent w-form's library reads its datatype arrays until the request is done: the
   * request holds them (staged_requests.c), from staging's request or one held for them alone; where
   * mpigpu's handler made the call in Python, mpi4py read them during it */
  const int handled = mgi_takes_all(caller);
  const int outlive = ntypes > 0 && fn->request >= 0;
  if (outlive) mgi_own_with_request(types);
  mgi_lower_made = 0;
  const int rc = handled                                       ? mgi_handle(id, a)
                 : mgi_fortran_library_makes(id, f, caller) ? mgi_call_lower(id, a)
                                                            : mgi_device_call(id, a);
  int kept = outlive && mgi_owned_taken();
  if (outlive && !kept && rc == 0 && (!handled || mgi_lower_made)) {
    mgi_own_with_request(types);
    mgi_hold_owned(id, a); /* (where no request can be held, no memory: the arrays stay, a leak, never freed
                            * while the library may read them) */
    mgi_owned_taken();
    kept = 1;
  }
  status_c2f_fn c2f = f_status ? (status_c2f_fn)mgi_lower_cached(&status_c2f, "PMPI_Status_c2f") : NULL;
  if (c2f && rc == 0) c2f(&status, f_status);
  if (f_request && rc == 0) *f_request = request_to_fortran(request);
  if (!kept)
    for (int k = 0; k < ntypes; k++) free(types[k]);
  return rc;
}

/* ---- Fortran's MPI_WAIT & co. while requests hold host copies (staged_requests.c) ------------------------ */

/* A C MPI_Status and Fortran's: 24 bytes and 6 INTEGERs in Open MPI, 20 and 5 in MPICH. */
static size_t c_status_bytes(void) { return mgi_is_open_mpi() ? 24 : 20; }
static size_t f_status_ints(void) { return mgi_is_open_mpi() ? 6 : 5; }
#define MGI_UNDEFINED (-32766) /* MPI_UNDEFINED in Open MPI and MPICH */



int mgi_fortran_request_call(int id, const unsigned char *roles, void *const *f) {
  const mgi_request_call *c = &mgi_request_calls[id];
  status_c2f_fn s2f = (status_c2f_fn)mgi_lower_cached(&status_c2f, "PMPI_Status_c2f");
  if (!s2f) return mgi_fail_named(c->name, "the MPI library below has no PMPI_Status_c2f");
  if (!requests_convert()) return mgi_fail_named(c->name, "the MPI library below has no PMPI_Request_f2c");
  int n = 1;
  for (int i = 0; i < c->nparams; i++)
    if (roles[i] == MGI_FR_COUNT) n = *(const int *)f[i];
  const size_t cn = n > 0 ? (size_t)n : 1, cs = c_status_bytes();
  void *requests = calloc(cn, sizeof(intptr_t)), *before = calloc(cn, sizeof(intptr_t));
  char *statuses = calloc(cn, cs);
  int *indices = calloc(cn, sizeof(int));
  if (!requests || !before || !statuses || !indices) {
    free(requests), free(before), free(statuses), free(indices);
    return mgi_fail_named(c->name, "no host memory to convert the call's requests");
  }
  int flag = 0, index = MGI_UNDEFINED, outcount = MGI_UNDEFINED, ignored = 0;
  intptr_t a[MGI_MAX_PARAMS];
  for (int i = 0; i < c->nparams; i++) {
    switch (roles[i]) {
      case MGI_FR_COUNT: a[i] = n; break;
      case MGI_FR_REQUESTS:
        for (int k = 0; k < n; k++) mgi_request_put(requests, k, (uintptr_t)request_from_fortran(((const int *)f[i])[k]));
        memcpy(before, requests, cn * sizeof(intptr_t));
        a[i] = (intptr_t)requests;
        break;
      case MGI_FR_REQVAL: a[i] = request_from_fortran(*(const int *)f[i]); break;
      case MGI_FR_FLAG: a[i] = (intptr_t)&flag; break;
      case MGI_FR_INDEX: a[i] = (intptr_t)&index; break;
      case MGI_FR_OUTCOUNT: a[i] = (intptr_t)&outcount; break;
      case MGI_FR_INDICES: a[i] = (intptr_t)indices; break;
      default: /* MPI_STATUS(ES)_IGNORE is C's (void *)0 in Open MPI, (void *)1 in MPICH, for one or many */
        ignored = sentinel_of(f[i], SENTINEL_STATUS_IGNORE, SENTINEL_STATUSES_IGNORE) >= 0;
        a[i] = ignored ? mgi_c_status_ignore() : (intptr_t)statuses;
        break;
    }
  }
  /* as the C call's wrapper routes it: a proxy's call to the handler, held copies through staged_requests.c */
  const int rc = mgi_holds_proxy(id, a)     ? mgi_request_call_handle(id, a)
                 : mgi_staged_requests() ? mgi_request_call_staged(id, a)
                                         : mgi_call_lower_request(id, a);
  /* the statuses the call wrote, as the library's own binding converts them: none where it says not yet
   * (a flag left false), the first outcount of Waitsome's and Testsome's, else the one or every one */
  int nstatuses = -1;
  for (int i = 0; i < c->nparams; i++) {
    if (roles[i] == MGI_FR_FLAG && !flag) nstatuses = 0;
    if (roles[i] == MGI_FR_OUTCOUNT && nstatuses) nstatuses = outcount > 0 && outcount != MGI_UNDEFINED ? outcount : 0;
  }
  for (int i = 0; i < c->nparams; i++) {
    switch (roles[i]) {
      case MGI_FR_REQUESTS: /* only those the call changed (completed, freed): the others stay as given */
        for (int k = 0; k < n; k++)
          if (mgi_request_at(requests, k) != mgi_request_at(before, k))
            ((int *)f[i])[k] = request_to_fortran((intptr_t)mgi_request_at(requests, k));
        break;
      case MGI_FR_FLAG: *(int *)f[i] = flag; break;
      case MGI_FR_INDEX: *(int *)f[i] = index >= 0 ? index + 1 : index; break; /* Fortran counts from 1 */
      case MGI_FR_OUTCOUNT: *(int *)f[i] = outcount; break;
      case MGI_FR_INDICES:
        for (int k = 0; k < outcount && outcount != MGI_UNDEFINED; k++) ((int *)f[i])[k] = indices[k] + 1;
        break;
      case MGI_FR_STATUS:
      case MGI_FR_STATUSES:
        for (int k = 0; !ignored && k < (nstatuses >= 0 ? nstatuses : roles[i] == MGI_FR_STATUS ? 1 : n); k++)
          s2f(statuses + (size_t)k * cs, (int *)f[i] + (size_t)k * f_status_ints());
        break;
      default: break;
    }
  }
  free(requests), free(before), free(statuses), free(indices);
  return rc;
}
