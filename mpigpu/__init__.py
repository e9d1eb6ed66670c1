"""mpigpu: CUDA-aware MPI for Python.

mpi4py's API and MPI's semantics; GPU arrays (CuPy, PyTorch, Numba, JAX: anything with
``__cuda_array_interface__`` or ``__dlpack__``) are moved GPU-to-GPU by mpigpu's own pipelined CUDA
kernels, host arrays go to the MPI library unchanged.

    import mpigpu
    comm = mpigpu.COMM_WORLD
    comm.Allreduce(x_gpu, y_gpu)          # MPI semantics, NCCL-class speed
"""
# The MPI interposer first, where it is wanted: MPI_* of the MPI library bind to it only if it is in the
# process before mpi4py loads that library (mpigpu/_interpose).
from ._base.config import config
from . import _interpose  # noqa: E402 (isort: skip)
_interpose.load_early(config.pmpi)

from ._face import dropin as _dropin, pickling as _pickle  # noqa: E402
from ._cuda import available as gpu_available
from ._state.requests import Startall
from ._state.comm_state import abort
from ._face.support import query_cuda_support
from ._face.comm import COMM_SELF, COMM_WORLD, Cartcomm, Distgraphcomm, Graphcomm, Intercomm, Intracomm, Topocomm
from .errors import Error

__version__ = '0.1.0'

# pickled predefined objects come back as the drop-in's objects of their names (mpigpu/_face/pickling.py)
_pickle.bind(_dropin.replacements)

# device calls that reach the interposer run on mpigpu's paths
from ._face import interposed as _handler  # noqa: E402
from ._face.interposed import report as interposer_status  # noqa: E402

if _interpose.library() is not None:
    _handler.install(_interpose.library())

__all__ = ['COMM_SELF', 'COMM_WORLD', 'Cartcomm', 'Distgraphcomm', 'Error', 'Graphcomm', 'Intercomm', 'Intracomm',
           'Startall', 'Topocomm', 'abort', 'config', 'gpu_available', 'interposer_status', 'query_cuda_support']
