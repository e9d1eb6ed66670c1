"""The large-count forms' int forms (pmpi/narrow.c) as a C program meets them: the interposer preloaded, no
mpigpu in the process (no handler: every call goes straight to the library below, here MPICH taken for a
library without `_c` functions), calls made through ctypes with what a C caller may pass: counts MPI does not
read on a rank (a root's own under MPI_IN_PLACE, a receive count off the root, send arrays under MPI_IN_PLACE)
hold garbage an int cannot hold and must not fail the call; an array entry that is read and does not fit
fails it with the interposer's error. Run as
    LD_PRELOAD=$(python -m mpigpu --pmpi-path) mpiexec -n N python tests/mpi/pmpi_narrowed_c.py"""

import numpy as np
from mpi4py import MPI

import pmpi_calls
from pmpi_calls import IN_PLACE, L, c, call, counted, h, p

c.mpigpu_pmpi_without_large_count()  # (the preloaded interposer's: no mpigpu module here)
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
GARBAGE = 2**40 + 5



# Gather: the root's own block in place (its send count not read), the receive count off the root not read
r = np.zeros(2 * n, np.int64)
own = np.full(2, 7 * rank, np.int64)
if rank == 0:
    r[:2] = own
call('Gather_c', IN_PLACE if rank == 0 else p(own), L(GARBAGE if rank == 0 else 2), h(MPI.INT64_T),
     p(r), L(2 if rank == 0 else GARBAGE), h(MPI.INT64_T), 0, h(comm))
counted()
if rank == 0:
    assert (r == np.repeat(np.arange(n, dtype=np.int64) * 7, 2)).all(), r
# Alltoallv in place: its send arrays are not read (garbage counts behind a valid pointer)
cnt, dsp = np.full(n, 1, np.int64), np.arange(n, dtype=np.int64)
bad = np.full(n, GARBAGE, np.int64)
r = np.arange(n, dtype=np.float64) + 100 * rank
call('Alltoallv_c', IN_PLACE, p(bad), p(bad), h(MPI.DOUBLE), p(r), p(cnt), p(dsp), h(MPI.DOUBLE), h(comm))
counted()
assert (r == np.arange(n, dtype=np.float64) * 100 + rank).all(), r
# Gatherv: the receive arrays off the root are not read
rcnt = np.full(n, 3, np.int64) if rank == 0 else bad
rdsp = np.arange(n, dtype=np.int64) * 3 if rank == 0 else bad
r = np.zeros(3 * n, np.int32)
mine = np.full(3, rank, np.int32)
call('Gatherv_c', p(mine), L(3), h(MPI.INT), p(r), p(rcnt), p(rdsp), h(MPI.INT), 0, h(comm))
counted()
if rank == 0:
    assert (r == np.repeat(np.arange(n, dtype=np.int32), 3)).all(), r
# non-blocking and persistent v-forms: the library reads their arrays until the request completes. mpi4py's
# own calls (found by its module's file: no mpigpu here) have them narrowed into mpi4py's arrays, which it
# keeps with the request; a C caller's call fails instead (its arrays may be reused by its next call)
import ctypes  # noqa: E402
RQ = MPI._sizeof(MPI.Request)
req = (ctypes.c_byte * RQ)()
cnt, dsp = np.full(n, 2, np.int64), np.arange(n, dtype=np.int64) * 2
s, r = np.repeat(np.arange(n, dtype=np.float64) + 10 * rank, 2), np.zeros(2 * n)
rc = c.MPI_Ialltoallv_c(p(s), p(cnt), p(dsp), h(MPI.DOUBLE), p(r), p(cnt), p(dsp), h(MPI.DOUBLE), h(MPI.COMM_WORLD),
                        req)
assert rc != MPI.SUCCESS and 'after the call returns' in MPI.Get_error_string(rc), MPI.Get_error_string(rc)
assert (cnt == 2).all() and (dsp == np.arange(n) * 2).all(), (cnt, dsp)  # untouched
counted()
comm.Ialltoallv([s, (list(cnt), list(dsp)), MPI.DOUBLE], [r, (list(cnt), list(dsp)), MPI.DOUBLE]).Wait()
counted()
assert (r == np.repeat(np.arange(n, dtype=np.float64) * 10 + rank, 2)).all(), r
r = np.zeros(n, np.int32)
mine = np.full(1, rank + 5, np.int32)  # (read at every Start)
try:
    preq = comm.Allgatherv_init(mine, [r, [1] * n, list(range(n)), MPI.INT])
except NotImplementedError:  # Open MPI 4.1 has no persistent collectives
    preq = None
for k in range(2 if preq is not None else 0):  # the narrowed arrays outlive the call: every Start reads them
    r[:] = 0
    preq.Start()
    preq.Wait()
    counted()
    assert (r == np.arange(n, dtype=np.int32) + 5).all(), (k, r)
if preq is not None:
    preq.Free()
# an entry that is read and does not fit an int: the interposer's error, the arrays freed
one, huge, at = np.zeros(1), np.full(1, 2**33, np.int64), np.zeros(1, np.int64)  # (alive through the call)
rc = c.MPI_Allgatherv_c(p(one), L(0), h(MPI.DOUBLE), p(one), p(huge), p(at), h(MPI.DOUBLE), h(MPI.COMM_SELF))
# (MPI_COMM_SELF's handler is MPI_ERRORS_ARE_FATAL by default in C: mpi4py sets MPI_ERRORS_RETURN on it)
assert rc != MPI.SUCCESS and 'large-count form' in MPI.Get_error_string(rc), MPI.Get_error_string(rc)
counted()
total = comm.allreduce(pmpi_calls.checks)
if rank == 0:
    print(f'pmpi narrowed large-count forms from C on {n} ranks: {total} checks')
