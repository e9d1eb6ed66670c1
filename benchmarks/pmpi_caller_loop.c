/* A C caller's loop of MPI_Allreduce calls with device pointers (benchmarks/pmpi_caller.py builds it and
 * loads it into the process the interposer serves): the loop's time measured in C, so no Python runs
 * between the calls, as in a C extension or a C code's time step. Handles travel as pointer-sized words
 * (MPICH's ints and Open MPI's pointers alike), as the interposer takes them. */
#include <stdint.h>
#include <time.h>

extern int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, intptr_t datatype, intptr_t op,
                         intptr_t comm);

/* Seconds for `iters` calls; -1 where a call failed. */
double mg_allreduce_loop(const void *sendbuf, void *recvbuf, int count, intptr_t datatype, intptr_t op,
                         intptr_t comm, int iters) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < iters; i++)
    if (MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm) != 0) return -1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}
