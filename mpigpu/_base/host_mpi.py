"""What the host MPI library can do with device memory: whether it is CUDA-aware."""
import ctypes

from .. import _interpose
from .config import config

_queried = None


def cuda_aware():
    """True when device pointers may be given to MPI: MPIGPU_MPI_CUDA_AWARE=1, or (auto) the library's
    MPIX_Query_cuda_support() (Open MPI, MVAPICH; found in the process) returns 1."""
    global _queried
    if config.mpi_cuda_aware != 'auto':
        return config.mpi_cuda_aware == '1'
    if _queried is None:
        _queried = False
        below = _interpose.lower_cuda_aware()
        if below is not None:  # the interposer's own query says yes: ask the library below it
            _queried = below
            return _queried
        try:
            fn = ctypes.CDLL(None).MPIX_Query_cuda_support
            fn.restype = ctypes.c_int
            _queried = bool(fn())
        except Exception:  # not Open MPI or MVAPICH, or no such symbol: not CUDA-aware
            pass
    return _queried
