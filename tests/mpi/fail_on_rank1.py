"""Rank 1 raises while the others wait in a barrier: the job must end (MPI_Abort), not hang."""
from mpi4py import MPI

import mpigpu

if mpigpu.COMM_WORLD.Get_rank() == 1:
    raise RuntimeError('deliberate failure on rank 1')
MPI.COMM_WORLD.Barrier()
