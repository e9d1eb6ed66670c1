"""The buffer of buffered sends (MPI.Attach_buffer, Comm.Attach_buffer) given device memory.

MPI copies each buffered send's data into the attached buffer with the CPU, so device memory there
would be written by the host. mpigpu attaches host memory of the same size in its place and
Detach_buffer gives the program's own object back. A buffered send of a device array goes through a
host mirror into that space, so the program's sizing (data plus MPI.BSEND_OVERHEAD) still holds.
Host buffers and MPI.BUFFER_AUTOMATIC go to MPI unchanged.
"""
from mpi4py import MPI

from .._base import plain as _plain
from .._describe.call import read_whole
from .._ext._intake import is_device
from .._state.comm_state import local_state

_stand_ins = {}  # scope (None: the process; a communicator's handle) -> the program's device buffer


def _scope(scope):
    return None if scope is None else ('comm', MPI._handleof(scope))


def attach(plain_attach, name, buf, scope=None):
    """`plain_attach(buf)` (or `(scope, buf)`) with host memory in place of a device `buf`."""
    args = () if scope is None else (scope,)
    if buf is None or buf is MPI.BUFFER_AUTOMATIC or not is_device(buf):
        return plain_attach(*args, buf)
    dev = read_whole(name, 'buf', local_state().rank, buf, True, lambda device: None)
    plain_attach(*args, bytearray(dev.nbytes))
    _stand_ins[_scope(scope)] = buf
    return None


def detach(plain_detach, scope=None):
    """`plain_detach()`: the program's device buffer where host memory stood in for it."""
    got = plain_detach(*(() if scope is None else (scope,)))
    return _stand_ins.pop(_scope(scope), got)


def Attach_buffer(buf):
    """mpi4py's MPI.Attach_buffer; a device buffer is replaced by host memory of its size."""
    return attach(_plain.Attach_buffer, 'Attach_buffer', buf)


def Detach_buffer():
    """mpi4py's MPI.Detach_buffer; gives back the device buffer that Attach_buffer was given."""
    return detach(_plain.Detach_buffer)
