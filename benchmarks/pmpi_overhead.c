/* What the MPI interposer adds to a call with host buffers: MPI_Allreduce of one double on MPI_COMM_SELF
 * (host memory, two buffers to classify), timed in a loop, in a process where the CUDA driver is loaded
 * and initialized (a device allocation exists), as in a GPU program. The buffers lie on the stack, on the
 * malloc heap (small blocks: the brk heap) or in a mapping of their own (mmap): the
 * interposer knows the first two are host memory without asking the driver.
 * usage: pmpi_overhead iterations stack|heap|mmap Run it twice in one job, plain and
 * under LD_PRELOAD=$(python -m mpigpu --pmpi-path) (benchmarks/pmpi_overhead.sh), and compare.
 * Built with -DNO_CUDA: a process without the driver (a CPU program). Prints: ns per call, the best of
 * 7 rounds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int iters = argc > 1 ? atoi(argv[1]) : 1000000, dev;
  void *ctx;
  CUdeviceptr d;
#ifndef NO_CUDA
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuMemAlloc_v2(&d, 1 << 20)) {
    fprintf(stderr, "pmpi_overhead: no CUDA device\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
#else
  (void)dev, (void)ctx, (void)d;
#endif
  const char *where = argc > 2 ? argv[2] : "stack";
  double on_stack[2] = {1.0, 0.0}, *x = on_stack;
  if (!strcmp(where, "heap")) x = malloc(2 * sizeof(double));
  else if (!strcmp(where, "mmap")) /* its own mapping (a large malloc may come from the heap: Open MPI) */
    x = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  x[0] = 1.0;
  double best = 1e30;
  for (int round = 0; round < 7; round++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) MPI_Allreduce(&x[0], &x[1], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
    double ns = (now() - t0) * 1e9 / iters;
    if (ns < best) best = ns;
  }
  printf("%.1f\n", best);
  MPI_Finalize();
  return 0;
}
