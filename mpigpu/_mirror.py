"""Host mirrors: any mpi4py buffer method with device buffers, through pinned host memory.

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

from . import _engine
from ._buffers import read_whole
from ._ext._intake import is_device
from ._staged import _NP
from .errors import Error

IN, OUT, INOUT = 1, 2, 3
_REDUCING_16BIT = frozenset((9, 10))  # float16, bfloat16: no reduction in the MPIs we target


def _split(value):
    if type(value) in (list, tuple):
        return value[0], list(value[1:])
    return value, None


def device_of(st, name, label, buf):
    """The device holding DeviceBuffer `buf` (checked to be device memory), else the current one."""
    _device = _engine._device
    dev = buf.device
    if buf.nbytes:
        memtype, d = _device.pointer_info(buf.ptr)
        if memtype not in (_device.MEM_DEVICE, _device.MEM_MANAGED):
            raise Error(name, 'buffer claims to be on a CUDA device but its pointer is not device memory',
                        arg=label, rank=st.rank, error_class=MPI.ERR_BUFFER)
        dev = d
    return dev if dev is not None and dev >= 0 else _device.get_device()


def run(comm, name, fn, items, reduces=False):
    """items: (value, role) per buffer argument, in the order `fn` takes them."""
    st = comm.__dict__.get('_mg_state') or _engine._attach(comm)
    if _engine._device is None:
        raise Error(name, _engine.gpu_available()[1], arg='buffer', rank=st.rank, error_class=MPI.ERR_BUFFER)
    try:
        return _run(st, name, fn, items, reduces)
    except _engine._device.DeviceError as exc:
        raise Error(name, str(exc), rank=st.rank, error_class=MPI.ERR_OTHER) from None


def _run(st, name, fn, items, reduces):
    # Pinned mirrors are per thread: point-to-point calls of several threads may run at once.
    tag = threading.get_ident()
    hosts, backs, ordered = [], [], set()
    for i, (value, role) in enumerate(items):
        if value is None or value is MPI.IN_PLACE or not is_device(value):
            hosts.append(value)
            continue
        obj, rest = _split(value)
        label = ('sendbuf', 'recvbuf', 'buf')[min(i, 1)] if len(items) > 1 else 'buf'
        buf = read_whole(name, label, st.rank, obj, role != IN, _engine.consumer_stream)
        if reduces and buf.dtype in _REDUCING_16BIT:
            raise Error(name, 'host MPI cannot reduce 16-bit floats; only Allreduce, Reduce and '
                        'Reduce_scatter_block reduce them (on the device)', arg=label, rank=st.rank,
                        error_class=MPI.ERR_TYPE)
        stager = st.stager_for(device_of(st, name, label, buf))
        stream = _engine.consumer_stream(stager.device) if buf.stream_synced else max(buf.stream, 0)
        pinned, arr = stager.host(f'mirror{i}-{tag}', buf.nbytes)

        def copy_in():
            if stream not in ordered:
                stager.after(stream)
                ordered.add(stream)
            stager.to_host(pinned.ptr, buf.ptr, buf.nbytes)
        _engine._with_device(stager.device, copy_in)
        host = arr[:buf.nbytes].view(_NP.get(buf.dtype, np.uint8) if buf.dtype != 0 else np.bool_)
        hosts.append(host if rest is None else [host, *rest])
        if role != IN:
            backs.append((stager, buf, pinned))
    result = fn(*hosts)
    for stager, buf, pinned in backs:
        _engine._with_device(stager.device, stager.to_device, buf.ptr, pinned.ptr, buf.nbytes)
    return result
