"""mpigpu.query_cuda_support(): the answer Open MPI's MPIX_Query_cuda_support() gives, for the MPI a
program reaches through mpi4py.MPI in this process (docs/cuda-aware-codes.md)."""
from .. import _cuda
from . import dropin as _dropin
from .._base import host_mpi as _host_mpi


def query_cuda_support():
    """1 when device memory given to mpi4py.MPI's objects is handled in this process, else 0.

    1: mpigpu is under mpi4py (`python -m mpigpu`) and this build sees a GPU (device buffers take
    mpigpu's paths), or the MPI library itself is CUDA-aware (MPIGPU_MPI_CUDA_AWARE, or its own
    MPIX_Query_cuda_support()). mpigpu's own objects (mpigpu.COMM_WORLD, `from mpigpu import MPI`) take
    device buffers whenever mpigpu.gpu_available() holds, whatever this answers."""
    if _dropin.installed() and _cuda.available()[0]:
        return 1
    return 1 if _host_mpi.cuda_aware() else 0
