# cython: language_level=3
"""A Cython extension that calls MPI's C functions itself, through mpi4py's C declarations
(mpi4py.libmpi), as Cython and C extensions do: the interposer sees its calls (tests/test_pmpi.py)."""
from mpi4py cimport MPI
from mpi4py.libmpi cimport MPI_Allreduce, MPI_Bcast, MPI_Comm, MPI_Datatype, MPI_Op


def allreduce(size_t sendbuf, size_t recvbuf, int count, MPI.Datatype dtype, MPI.Op op, MPI.Comm comm):
    """MPI_Allreduce on raw addresses; returns MPI's error code."""
    cdef int rc
    cdef MPI_Datatype t = dtype.ob_mpi
    cdef MPI_Op o = op.ob_mpi
    cdef MPI_Comm c = comm.ob_mpi
    with nogil:  # as extensions call MPI: the handler takes the GIL back
        rc = MPI_Allreduce(<void *>sendbuf, <void *>recvbuf, count, t, o, c)
    return rc


def bcast(size_t buf, int count, MPI.Datatype dtype, int root, MPI.Comm comm):
    cdef int rc
    cdef MPI_Datatype t = dtype.ob_mpi
    cdef MPI_Comm c = comm.ob_mpi
    with nogil:
        rc = MPI_Bcast(<void *>buf, count, t, root, c)
    return rc
