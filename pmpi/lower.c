/* The MPI library below the interposer: its PMPI_* entry points, found at the first call.
 *
 * Preloaded into a program (LD_PRELOAD), the library is next in the global scope (dlsym RTLD_NEXT).
 * Loaded by `python -m mpigpu` before mpi4py, it is not: mpi4py's extension loads the MPI library into
 * its own scope. Then the loaded objects are searched for the one that defines PMPI_Send. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "functions.h"

static _Atomic(void *) mpi_lib; /* a handle on the MPI library, once found */
static pthread_mutex_t finding = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(void *) lower[MGI_COUNT];
static atomic_int cuda_aware = -1; /* the library's answer, once asked */

typedef struct {
  char **names;
  size_t n, cap;
} name_list;

static int collect(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  name_list *l = out;
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    char **grown = realloc(l->names, cap * sizeof(char *));
    if (!grown) return 1;
    l->names = grown;
    l->cap = cap;
  }
  l->names[l->n] = strdup(info->dlpi_name);
  if (l->names[l->n]) l->n++;
  return 0;
}

void mgi_each_loaded(int (*visit)(void *handle, void *ctx), void *ctx) {
  name_list l = {0};
  dl_iterate_phdr(collect, &l); /* names first: no dlopen while the loader's list is held */
  int done = 0;
  for (size_t i = 0; i < l.n; i++) {
    if (!done) {
      void *h = dlopen(l.names[i], RTLD_NOLOAD | RTLD_LAZY);
      if (h) {
        done = visit(h, ctx);
        dlclose(h);
      }
    }
    free(l.names[i]);
  }
  free(l.names);
}

static int find_pmpi_send(void *h, void *out) {
  *(void **)out = dlsym(h, "PMPI_Send");
  return *(void **)out != NULL;
}

static void *search_loaded(void) {
  void *sym = NULL;
  mgi_each_loaded(find_pmpi_send, &sym);
  return sym;
}

/* The MPI library, looked for until found (a lookup before it is loaded must not stick). */
static void *find_mpi(void) {
  void *lib = atomic_load_explicit(&mpi_lib, memory_order_acquire);
  if (lib) return lib;
  pthread_mutex_lock(&finding);
  lib = atomic_load_explicit(&mpi_lib, memory_order_relaxed);
  if (!lib) {
    void *sym = dlsym(RTLD_NEXT, "PMPI_Send");
    if (!sym) sym = search_loaded();
    Dl_info info;
    if (sym && dladdr(sym, &info) && info.dli_fname) lib = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    atomic_store_explicit(&mpi_lib, lib, memory_order_release);
  }
  pthread_mutex_unlock(&finding);
  return lib;
}

int mgi_is_open_mpi(void) {
  static atomic_int open_mpi = -1; /* (the library below does not change) */
  int v = atomic_load_explicit(&open_mpi, memory_order_relaxed);
  if (v < 0 && find_mpi()) {
    v = mgi_lower_named("ompi_mpi_comm_world") != NULL;
    atomic_store_explicit(&open_mpi, v, memory_order_relaxed);
  }
  return v > 0;
}

void *mgi_lower_named(const char *name) {
  void *lib = find_mpi();
  return lib ? dlsym(lib, name) : NULL;
}

/* lower[id] of a function the library lacks (a large-count form on Open MPI 4.1: every call of it from
 * mpi4py comes here, so the miss is remembered, not looked up again) */
static char absent_mark;
#define ABSENT ((void *)&absent_mark)

void *mgi_lower_cached(_Atomic(void *) *slot, const char *name) {
  void *fn = atomic_load_explicit(slot, memory_order_acquire);
  if (!fn) {
    void *lib = find_mpi();
    if (!lib) return NULL; /* no library yet: looked up again at the next call */
    fn = dlsym(lib, name);
    atomic_store_explicit(slot, fn ? fn : ABSENT, memory_order_release);
  }
  return fn == ABSENT ? NULL : fn;
}

void *mgi_lower(int id) { return mgi_lower_cached(&lower[id], mgi_functions[id].lower_name); }

/* From now on the library below is taken for one without MPI-4's large-count functions, as Open MPI 4.1
 * is: tests run their int forms (narrow.c) on a library that has both. */
MGI_EXPORT void mpigpu_pmpi_without_large_count(void) {
  for (int id = 0; id < MGI_COUNT; id++)
    if (mgi_narrowings[id].base >= 0) atomic_store_explicit(&lower[id], ABSENT, memory_order_release);
}

/* From now on the library below is taken to lack the function whose PMPI name is `lower_name`, as Open MPI
 * 4.1 lacks MPI-4's persistent collectives: tests reach the interposer's answer for a function the
 * library has neither form of. 1 where a function has that name. */
MGI_EXPORT int mpigpu_pmpi_without(const char *lower_name) {
  int found = 0;
  for (int id = 0; id < MGI_COUNT; id++)
    if (!strcmp(mgi_functions[id].lower_name, lower_name)) {
      atomic_store_explicit(&lower[id], ABSENT, memory_order_release);
      found = 1;
    }
  return found;
}

int mgi_lower_cuda_aware(void) {
  int known = atomic_load_explicit(&cuda_aware, memory_order_relaxed);
  if (known >= 0) return known;
  if (!find_mpi()) return 0; /* asked again once the library is there */
  int (*query)(void) = (int (*)(void))mgi_lower_named("MPIX_Query_cuda_support");
  known = query ? query() != 0 : 0;
  atomic_store_explicit(&cuda_aware, known, memory_order_relaxed);
  return known;
}
