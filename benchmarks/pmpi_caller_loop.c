/* A C caller's loop of MPI_Allreduce calls with device pointers (benchmarks/pmpi_caller.py builds it and
 * loads it into the process the interposer serves): the loop's time measured in C, so no Python runs
 * between the calls, as in a C extension or a C code's time step; and the same loop on PMPI_Allreduce, the
library's own entry, for host buffers' baseline. Handles travel as pointer-sized words
 * (MPICH's ints and Open MPI's pointers alike), as the interposer takes them. */
#include <stdint.h>
#include <time.h>

extern int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, intptr_t datatype, intptr_t op,
                         intptr_t comm);
extern int PMPI_Allreduce(const void *sendbuf, void *recvbuf, int count, intptr_t datatype, intptr_t op,
                          intptr_t comm);
typedef int (*allreduce_fn)(const void *, void *, int, intptr_t, intptr_t, intptr_t);

static double seconds(allreduce_fn fn, const void *sendbuf, void *recvbuf, int count, intptr_t datatype,
                      intptr_t op, intptr_t comm, int iters) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < iters; i++)
    if (fn(sendbuf, recvbuf, count, datatype, op, comm) != 0) return -1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Seconds for `iters` calls; -1 where a call failed. */
double mg_allreduce_loop(const void *sendbuf, void *recvbuf, int count, intptr_t datatype, intptr_t op,
                         intptr_t comm, int iters) {
  return seconds(MPI_Allreduce, sendbuf, recvbuf, count, datatype, op, comm, iters);
}

/* The same loop on the MPI library itself (its profiling name, which the interposer leaves alone): the
 * host-buffer baseline. */
double mg_pmpi_allreduce_loop(const void *sendbuf, void *recvbuf, int count, intptr_t datatype, intptr_t op,
                              intptr_t comm, int iters) {
  return seconds(PMPI_Allreduce, sendbuf, recvbuf, count, datatype, op, comm, iters);
}
