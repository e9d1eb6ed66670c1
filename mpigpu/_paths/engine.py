"""The engine path: the device team's fused kernels (cuda/) run Allreduce, Bcast, Reduce_scatter_block,
Reduce and Allgather between the GPUs of one node, over peer mappings of each rank's workspace."""
from mpi4py import MPI

from .. import _cuda
from .._base.codes import Algo, Coll
from .._base.config import config
from .._state.comm_state import _CACHE as _CACHE_KEY
from .._base.types import OP_CODE

_IN_PLACE = MPI.IN_PLACE
NO_OP = (Coll.BCAST, Coll.ALLGATHER)  # the engine's collectives that take no reduction op


def runs(st, c):
    """True when the device team runs Call `c` (not staging: no team, or a type or op it lacks)."""
    return st.team is not None and c.dtype >= 0 and (c.coll in NO_OP or (
        c.op_code >= 0 and _cuda.supports(c.dtype, c.op_code)))


def launch_args(c, stream):
    """The arguments of Team.run / Team.run_request for Call `c` on `stream`, up to the stream."""
    return (c.coll, _ALGO_OF.get(config.algo, Algo.AUTO), c.dtype, c.op_code, c.send_ptr, c.recv_ptr,
            c.count, c.root, config.nchannels, stream)


def _general_only(comm, coll, sendbuf, recvbuf, op, root=0, stream=-1):
    """The fast path where the CUDA layer has none (the CPU tests' fake layer, a build without CUDA):
    it takes no call, the general path takes them all."""
    return False


# Engine algorithm of each MPIGPU_ALGO value (the paths, such as 'staged', never reach the engine).
_ALGO_OF = {a.knob: a for a in Algo}


def _failed(st, coll, exc):
    return st.failed(Coll(coll).mpi_name, exc)


def fast_entry(capsule_name):
    """The fast path's entry the communicators' methods call: the CUDA layer's own, as a C function in
    a capsule of that name (no Python call from the method to the kernel; its rule is written once, in
    mpigpu/_ext/_fast.pxi), where it has one; else _general_only."""
    make = getattr(_cuda.device, 'fast_entry_capsule', None)
    if make is None:
        return _general_only
    _cuda.device.bind_fast_entry(_CACHE_KEY, {h: int(c) for h, c in OP_CODE.items()}, config,
                                 {k: int(a) for k, a in _ALGO_OF.items()}, _failed, MPI.Op, _IN_PLACE)
    return make(capsule_name)
