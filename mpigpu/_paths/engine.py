"""The engine path: the device team's fused kernels (cuda/) run Allreduce, Bcast, Reduce_scatter_block,
Reduce and Allgather between the GPUs of one node, over peer mappings of each rank's workspace."""
from mpi4py import MPI

from .. import _cuda
from .._codes import Algo, Coll
from .._config import config
from .._state import _CACHE as _CACHE_KEY, cached
from .._types import OP_CODE

_IN_PLACE = MPI.IN_PLACE
_NO_OP = (Coll.BCAST, Coll.ALLGATHER)


def runs(st, c):
    """True when the device team runs Call `c` (not staging: no team, or a type or op it lacks)."""
    return st.team is not None and c.dtype >= 0 and (c.coll in _NO_OP or (
        c.op_code >= 0 and _cuda.device.supports(c.dtype, c.op_code)))


def launch_args(c, stream):
    """The arguments of Team.run / Team.run_request for Call `c` on `stream`, up to the stream."""
    return (c.coll, _ALGO_OF.get(config.algo, Algo.AUTO), c.dtype, c.op_code, c.send_ptr, c.recv_ptr,
            c.count, c.root, config.nchannels, stream)


def try_fast(comm, coll, sendbuf, recvbuf, op, root=0, stream=-1):
    """The Cython fast path, once this communicator's device team is up: True when it ran the call,
    False when the general path must take it. stream >= 0: enqueued on that stream (stream=)."""
    st = cached(comm)
    if st is None or st.team is None or not hasattr(_cuda.device, 'fast_collective'):
        return False  # (the CPU tests' fake layer has no fast path: the general path agrees and runs)
    if coll in _NO_OP:
        code = 0
    elif isinstance(op, MPI.Op):
        code = OP_CODE.get(op.handle, -1)
        if code < 0:
            return False
    else:
        return False
    try:
        return _cuda.device.fast_collective(st.team, st.device, coll, sendbuf, recvbuf, code, root,
                                            sendbuf is _IN_PLACE, _ALGO_OF.get(config.algo, Algo.AUTO), config.nchannels,
                                            stream) == 1
    except _cuda.device.DeviceError as exc:
        raise st.failed(Coll(coll).mpi_name, exc) from None


# Engine algorithm of each MPIGPU_ALGO value (the paths, such as 'staged', never reach the engine).
_ALGO_OF = {a.knob: a for a in Algo}


def _failed(st, coll, exc):
    return st.failed(Coll(coll).mpi_name, exc)


def fast_entry(capsule_name):
    """The fast path's entry the communicators' methods call: the CUDA layer's own, as a C function in
    a capsule of that name (no Python call from the method to the kernel), where it has one; else
    try_fast (the CPU tests' fake layer)."""
    make = getattr(_cuda.device, 'fast_entry_capsule', None)
    if make is None:
        return try_fast
    _cuda.device.bind_fast_entry(_CACHE_KEY, {h: int(c) for h, c in OP_CODE.items()}, config,
                                 {k: int(a) for k, a in _ALGO_OF.items()}, _failed, MPI.Op, _IN_PLACE)
    return make(capsule_name)
