/* Where a pointer lives, asked of the CUDA driver, and copies between host and device memory.
 *
 * The same rule as the Python intake (cuda/runtime.cu, mg_pointer_kind): device or managed memory by
 * cuPointerGetAttributes. The driver is never loaded here: a process that has not loaded libcuda.so.1
 * has no device memory, so until it appears each question costs one look at the loader's count of
 * loaded objects (dl_iterate_phdr's dlpi_adds) and a dlopen(RTLD_NOLOAD) only when that count moved. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose.h"

/* The driver's ABI, as cuda.h declares it (no CUDA header needed to build the interposer). */
typedef int cu_result;
typedef unsigned long long cu_ptr;
typedef void *cu_context;
enum { CU_ATTR_CONTEXT = 1, CU_ATTR_MEMORY_TYPE = 2, CU_ATTR_IS_MANAGED = 8, CU_ATTR_DEVICE_ORDINAL = 9,
       CU_MEMORYTYPE_DEVICE = 2 };

typedef cu_result (*get_attributes_fn)(unsigned, int *, void **, cu_ptr);
typedef cu_result (*memcpy_fn)(cu_ptr, cu_ptr, size_t);
typedef cu_result (*ctx_push_fn)(cu_context);
typedef cu_result (*ctx_pop_fn)(cu_context *);
typedef cu_result (*ctx_sync_fn)(void);
typedef cu_result (*primary_retain_fn)(cu_context *, int);
typedef cu_result (*primary_release_fn)(int);

static struct {
  get_attributes_fn get_attributes;
  memcpy_fn memcpy;
  ctx_push_fn push;
  ctx_pop_fn pop;
  ctx_sync_fn sync;
  primary_retain_fn primary_retain;
  primary_release_fn primary_release;
} cu;
atomic_int mgi_driver_ready;                /* 1 once cu is filled */
static atomic_ullong objects_seen = ~0ull;  /* the loader's count when the driver was last looked for */

static int count_loaded(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  *(unsigned long long *)out = info->dlpi_adds;
  return 1; /* the first object carries the process-wide count */
}

unsigned long long mgi_loaded_count(void) {
  unsigned long long adds = 0;
  dl_iterate_phdr(count_loaded, &adds);
  return adds;
}

int mgi_find_driver(void) {
  const unsigned long long adds = mgi_loaded_count();
  if (adds == atomic_load_explicit(&objects_seen, memory_order_relaxed)) return 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
  if (!h) {
    atomic_store_explicit(&objects_seen, adds, memory_order_relaxed);
    return 0;
  }
  cu.get_attributes = (get_attributes_fn)dlsym(h, "cuPointerGetAttributes");
  cu.memcpy = (memcpy_fn)dlsym(h, "cuMemcpy");
  cu.push = (ctx_push_fn)dlsym(h, "cuCtxPushCurrent_v2");
  cu.pop = (ctx_pop_fn)dlsym(h, "cuCtxPopCurrent_v2");
  cu.sync = (ctx_sync_fn)dlsym(h, "cuCtxSynchronize");
  cu.primary_retain = (primary_retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
  cu.primary_release = (primary_release_fn)dlsym(h, "cuDevicePrimaryCtxRelease_v2");
  if (!cu.get_attributes || !cu.memcpy || !cu.push || !cu.pop || !cu.sync) {
    atomic_store_explicit(&objects_seen, adds, memory_order_relaxed);
    return 0; /* a driver without these answers as if absent */
  }
  atomic_store_explicit(&mgi_driver_ready, 1, memory_order_release);
  return 1;
}

/* ---- memory that cannot be device memory, known without the driver -------------------------------
 * The driver's question costs 100-200 ns (H100 host, docs/benchmarks.md); these answers cost a few. Each
 * holds for as long as the memory is in use, so the answer cannot go stale: the kernel places no other
 * mapping inside the brk heap [start_brk, brk) or over a live thread's mapped stack. */
static uintptr_t heap_start; /* start_brk, from /proc/self/stat; 0 until read, 1 where unreadable */
/* glibc's current break, which its brk() keeps (sbrk(0) reads it too, but makes a system call in a
 * dynamically linked program of glibc 2.36); weak: without it (another C library), no heap answer. */
extern void *__curbrk __attribute__((weak));
static pthread_once_t heap_once = PTHREAD_ONCE_INIT;
static _Thread_local uintptr_t stack_lo, stack_hi; /* this thread's stack, [lo, hi); hi 0: not read */

static void read_heap_start(void) {
  heap_start = 1;
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return;
  char buf[2048];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces: fields count from after it */
  unsigned long long v = 0;
  for (int field = 2; p && *p; p++) {
    if (*p != ' ') continue;
    field++;
    if (field == 47) { /* start_brk (proc(5)) */
      if (sscanf(p + 1, "%llu", &v) == 1 && v > 1) heap_start = (uintptr_t)v;
      break;
    }
  }
}

/* The main thread's stack as mapped now ([stack] of /proc/self/maps: it only grows, so what is mapped
 * stays stack); pthread_getattr_np would report the whole stack rlimit for it, which with an unlimited
 * limit spans every other mapping. Other threads' stacks are their exact allocations. */
static void read_main_stack(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  unsigned long long lo, hi;
  while (f && fgets(line, sizeof line, f)) {
    if (strstr(line, "[stack]") && sscanf(line, "%llx-%llx", &lo, &hi) == 2) {
      stack_lo = (uintptr_t)lo;
      stack_hi = (uintptr_t)hi;
      break;
    }
  }
  if (f) fclose(f);
}

static void read_stack(void) {
  pthread_attr_t a;
  void *lo = NULL;
  size_t size = 0;
  stack_hi = 1; /* read once, even where it fails */
  if (getpid() == (pid_t)syscall(SYS_gettid)) {
    read_main_stack();
    return;
  }
  if (pthread_getattr_np(pthread_self(), &a)) return;
  if (!pthread_attr_getstack(&a, &lo, &size) && lo && size) {
    stack_lo = (uintptr_t)lo;
    stack_hi = (uintptr_t)lo + size;
  }
  pthread_attr_destroy(&a);
}

int mgi_surely_host(const void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  if (!stack_hi) read_stack();
  if (p >= stack_lo && p < stack_hi) return 1;
  if (!&__curbrk) return 0;
  pthread_once(&heap_once, read_heap_start);
  return heap_start > 1 && p >= heap_start && p < (uintptr_t)__curbrk;
}

int mgi_query(const void *p) {
  unsigned type = 0;
  int managed = 0, ordinal = -1;
  /* the ordinal in the same question: the engine's entry checks its buffers' device with it */
  int attrs[3] = {CU_ATTR_MEMORY_TYPE, CU_ATTR_IS_MANAGED, CU_ATTR_DEVICE_ORDINAL};
  void *data[3] = {&type, &managed, &ordinal};
  /* Plain host memory, or a driver not initialized (so no device memory yet): not device. */
  if (cu.get_attributes(3, attrs, data, (cu_ptr)(uintptr_t)p) != 0) return -1;
  if (!managed && type != CU_MEMORYTYPE_DEVICE) return -1;
  return ordinal >= 0 ? ordinal : MGI_DEVICE_UNKNOWN; /* device memory all the same, on no GPU the entry has */
}

/* A copy in the context of the device memory it touches (the caller's thread may have none current),
 * finished before it returns: the driver returns from a device-to-host copy once it is done, and a
 * host-to-device copy is followed by a synchronize so the caller's kernels on any stream see it. */
int mgi_copy(void *dst, const void *src, size_t n, const void *device_side) {
  if (n == 0) return 0;
  if (!atomic_load_explicit(&mgi_driver_ready, memory_order_acquire)) return -1;
  cu_context ctx = NULL, popped;
  int ordinal = -1, primary = 0;
  int attrs[2] = {CU_ATTR_CONTEXT, CU_ATTR_DEVICE_ORDINAL};
  void *data[2] = {&ctx, &ordinal};
  cu_result rc = cu.get_attributes(2, attrs, data, (cu_ptr)(uintptr_t)device_side);
  if (rc != 0) return rc;
  /* memory of the virtual memory API or a memory pool has no context: its device's primary one */
  if (!ctx && ordinal >= 0 && cu.primary_retain && cu.primary_release) {
    if ((rc = cu.primary_retain(&ctx, ordinal)) != 0) return rc;
    primary = 1;
  }
  if ((rc = cu.push(ctx)) == 0) {
    rc = cu.memcpy((cu_ptr)(uintptr_t)dst, (cu_ptr)(uintptr_t)src, n);
    if (rc == 0 && dst == device_side) rc = cu.sync();
    cu.pop(&popped);
  }
  if (primary) cu.primary_release(ordinal);
  return rc;
}
