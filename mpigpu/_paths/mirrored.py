"""The mirrored path: any mpi4py buffer method with device buffers, run unchanged on whole pinned host
mirrors of the buffers.

The honest path for the buffer methods the device engine does not implement (point-to-point,
Gather(v)/Scatter(v)/Allgatherv/Alltoall(v), Reduce_scatter, Scan, Exscan). Each device buffer gets
a pinned host mirror with the same bytes and element type; inputs are copied in after the
producer's stream; the unchanged mpi4py method runs on the mirrors, so counts, displacements and
datatypes of buffer specifications mean exactly what they mean to mpi4py; outputs are copied back
before the call returns. Outputs are copied in too, so the parts MPI does not write stay unchanged.
No collective setup happens here (point-to-point calls involve two ranks only).
"""
import threading

import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._call import read_whole
from .._codes import Dtype
from .._ext._intake import is_device
from .._state import state_of
from .._types import numpy_dtype
from ..errors import Error
from .pinned import Stager

IN, OUT, INOUT = 1, 2, 3  # how a call uses a buffer argument
_REDUCING_16BIT = frozenset((Dtype.FLOAT16, Dtype.BFLOAT16))  # no reduction in the MPIs we target


def split_spec(value):
    """(buffer object, the rest of a buffer specification or None)."""
    if type(value) in (list, tuple):
        return value[0], list(value[1:])
    return value, None


def host_view(arr, nbytes, dtype):
    """The first nbytes of uint8 array `arr` as elements of `dtype` (raw bytes when unknown)."""
    return arr[:nbytes].view(numpy_dtype(dtype) if dtype >= 0 else np.uint8)


def run(comm, name, fn, items, reduces=False):
    """items: (value, role) per buffer argument, in the order `fn` takes them."""
    st = state_of(comm)
    _cuda.require(name, st.rank)
    with _cuda.errors_as(name, st.rank):
        return _run(st, name, fn, items, reduces)


def _run(st, name, fn, items, reduces):
    # Pinned mirrors are per thread: point-to-point calls of several threads may run at once.
    tag = threading.get_ident()
    hosts, backs, ordered = [], [], set()
    stager = st.owned(Stager)
    for i, (value, role) in enumerate(items):
        if value is None or value is MPI.IN_PLACE or not is_device(value):
            hosts.append(value)
            continue
        obj, rest = split_spec(value)
        label = ('sendbuf', 'recvbuf', 'buf')[min(i, 1)] if len(items) > 1 else 'buf'
        buf = read_whole(name, label, st.rank, obj, role != IN, _cuda.consumer_stream)
        if reduces and buf.dtype in _REDUCING_16BIT:
            raise Error(name, 'host MPI cannot reduce 16-bit floats; only Allreduce, Reduce and '
                        'Reduce_scatter_block reduce them (on the device)', arg=label, rank=st.rank,
                        error_class=MPI.ERR_TYPE)
        sg = stager.on(_cuda.device_of(name, label, st.rank, buf))
        stream = _cuda.stream_of(buf, sg.device)
        pinned, arr = sg.host(f'mirror{i}-{tag}', buf.nbytes)

        def copy_in():
            if stream not in ordered:
                sg.after(stream)
                ordered.add(stream)
            sg.to_host(pinned.ptr, buf.ptr, buf.nbytes)
        _cuda.with_device(sg.device, copy_in)
        host = host_view(arr, buf.nbytes, buf.dtype)
        hosts.append(host if rest is None else [host, *rest])
        if role != IN:
            backs.append((sg.device, buf, pinned))
    result = fn(*hosts)
    for dev, buf, pinned in backs:
        _cuda.with_device(dev, stager.on(dev).to_device, buf.ptr, pinned.ptr, buf.nbytes)
    return result
