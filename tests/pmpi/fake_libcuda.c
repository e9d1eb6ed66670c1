/* A fake CUDA driver (libcuda.so.1) for CPU tests of the MPI interposer: "device memory" is host memory
 * that no one may touch directly. cuMemAlloc maps it PROT_NONE, so a device pointer that reaches the MPI
 * library (instead of being staged or handled) crashes the test program as it would on a real GPU; the
 * driver's copies open it for the copy only. Ranges registered by a test (fake_cuda_register: memory the
 * Python fake layer already plays as device memory) are reported as device memory and left readable.
 * Only what the interposer and the test programs call is here. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { SUCCESS = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3 };
enum { ATTR_CONTEXT = 1, ATTR_MEMORY_TYPE = 2, ATTR_IS_MANAGED = 8, ATTR_DEVICE_ORDINAL = 9 };

typedef struct {
  uintptr_t start, end;
  int sealed; /* mapped PROT_NONE between copies */
} range_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static range_t ranges[4096];
static int nranges, initialized;
static int the_context; /* the one context's address is its handle */

static range_t *find(uintptr_t p) {
  for (int i = 0; i < nranges; i++)
    if (ranges[i].start <= p && p < ranges[i].end) return &ranges[i];
  return NULL;
}

static int add(uintptr_t p, size_t n, int sealed) {
  pthread_mutex_lock(&lock);
  int ok = nranges < (int)(sizeof ranges / sizeof ranges[0]);
  if (ok) ranges[nranges++] = (range_t){p, p + n, sealed};
  pthread_mutex_unlock(&lock);
  return ok ? 0 : -1;
}

static void drop(uintptr_t p) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nranges; i++)
    if (ranges[i].start == p) {
      ranges[i] = ranges[--nranges];
      break;
    }
  pthread_mutex_unlock(&lock);
}

int fake_cuda_register(uintptr_t p, size_t n) { return n ? add(p, n, 0) : 0; }
void fake_cuda_unregister(uintptr_t p) { drop(p); }

CUresult cuInit(unsigned flags) {
  (void)flags;
  initialized = 1;
  return SUCCESS;
}
CUresult cuDeviceGet(int *dev, int ordinal) {
  *dev = ordinal;
  return SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  (void)dev;
  *ctx = &the_context;
  return SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  (void)dev;
  return SUCCESS;
}
CUresult cuCtxSetCurrent(void *ctx) { return ctx == &the_context ? SUCCESS : INVALID_VALUE; }
CUresult cuCtxPushCurrent_v2(void *ctx) { return ctx == &the_context ? SUCCESS : INVALID_VALUE; }
CUresult cuCtxPopCurrent_v2(void **ctx) {
  if (ctx) *ctx = &the_context;
  return SUCCESS;
}
CUresult cuCtxSynchronize(void) { return SUCCESS; }

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
  size_t len = n ? n : 1;
  void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || add((uintptr_t)p, len, 1)) return INVALID_VALUE;
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr d) {
  pthread_mutex_lock(&lock);
  range_t *r = find((uintptr_t)d);
  uintptr_t start = r ? r->start : 0, end = r ? r->end : 0;
  pthread_mutex_unlock(&lock);
  if (!r) return INVALID_VALUE;
  drop(start);
  munmap((void *)start, end - start);
  return SUCCESS;
}

static void open_range(uintptr_t p, int prot) {
  pthread_mutex_lock(&lock);
  range_t *r = find(p);
  if (r && r->sealed) mprotect((void *)r->start, r->end - r->start, prot);
  pthread_mutex_unlock(&lock);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  open_range((uintptr_t)dst, PROT_READ | PROT_WRITE);
  open_range((uintptr_t)src, PROT_READ | PROT_WRITE);
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  open_range((uintptr_t)dst, PROT_NONE);
  open_range((uintptr_t)src, PROT_NONE);
  return SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return cuMemcpy(dst, (uintptr_t)src, n); }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return cuMemcpy((uintptr_t)dst, src, n); }

CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
  if (!initialized) return NOT_INITIALIZED;
  pthread_mutex_lock(&lock);
  range_t *r = find((uintptr_t)p);
  pthread_mutex_unlock(&lock);
  if (!r) return INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    switch (attrs[i]) {
      case ATTR_CONTEXT: *(void **)data[i] = &the_context; break;
      case ATTR_MEMORY_TYPE: *(unsigned *)data[i] = 2; break; /* CU_MEMORYTYPE_DEVICE */
      case ATTR_IS_MANAGED: *(int *)data[i] = 0; break;
      case ATTR_DEVICE_ORDINAL: *(int *)data[i] = 0; break;
      default: return INVALID_VALUE;
    }
  }
  return SUCCESS;
}
