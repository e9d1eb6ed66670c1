"""The `nccl-symm` baseline: NCCL's symmetric kernels (NCCL >= 2.27) on registered windows.

NCCL runs its symmetric kernels when a collective's buffers lie in windows every rank registered
together (`ncclMemAlloc`, then `ncclCommWindowRegister` with NCCL_WIN_COLL_SYMMETRIC): what a program
gets that allocates its communication buffers through NCCL. Each row allocates and registers its own
windows (the previous row's released first; every rank makes the rows in the same order, as the
registration is collective), copies the row's inputs in, times the collective on the windows, and
copies the result back for the check (`copy_result`).

NCCL is reached through ctypes on the library the process already has (CuPy's NCCL, or the system's
`libnccl.so.2`), with a communicator of its own; CuPy's binding lacks the window calls. Datatype and
op values are NCCL's own (read from CuPy's constants).
"""
import ctypes

import numpy as np

from . import vrows
from .baselines import NcclImpl, Unavailable

_WIN_COLL_SYMMETRIC = 0x01  # nccl.h: NCCL_WIN_COLL_SYMMETRIC
_UNIQUE_ID_BYTES = 128      # nccl.h: NCCL_UNIQUE_ID_BYTES


class _UniqueId(ctypes.Structure):
    _fields_ = [('internal', ctypes.c_char * _UNIQUE_ID_BYTES)]


_P, _SZ, _I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
_SIGNATURES = {  # name: argument types (every function returns ncclResult_t)
    'ncclGetVersion': [ctypes.POINTER(_I)],
    'ncclGetUniqueId': [ctypes.POINTER(_UniqueId)],
    'ncclCommInitRank': [ctypes.POINTER(_P), _I, _UniqueId, _I],
    'ncclCommDestroy': [_P],
    'ncclMemAlloc': [ctypes.POINTER(_P), _SZ],
    'ncclMemFree': [_P],
    'ncclCommWindowRegister': [_P, _P, _SZ, ctypes.POINTER(_P), _I],
    'ncclCommWindowDeregister': [_P, _P],
    'ncclAllReduce': [_P, _P, _SZ, _I, _I, _P, _P],
    'ncclBroadcast': [_P, _P, _SZ, _I, _I, _P, _P],
    'ncclReduceScatter': [_P, _P, _SZ, _I, _I, _P, _P],
    'ncclAllGather': [_P, _P, _SZ, _I, _P, _P],
}


def _library():
    """libnccl with the functions this baseline calls, or raises Unavailable."""
    try:
        lib = ctypes.CDLL('libnccl.so.2')
    except OSError as exc:
        raise Unavailable(f'libnccl.so.2 not found: {exc}') from None
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            raise Unavailable(f'this NCCL has no {name} (symmetric windows need NCCL 2.27 or later)')
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p
    return lib


class NcclSymmImpl(NcclImpl):
    """NCCL's symmetric kernels on registered windows (see the module's docstring)."""
    name = 'nccl-symm'
    _COLLS = ('allreduce', 'bcast', 'reduce_scatter_block', 'allgather')

    def __init__(self, comm):
        self.err, self.lib, self.handle, self.windows, self.version = None, None, None, [], 0
        try:
            from cupy.cuda import nccl
            self.nccl, self.lib = nccl, _library()
            v = ctypes.c_int()
            self._check('ncclGetVersion', ctypes.byref(v))
            self.version = v.value
        except (ImportError, Unavailable) as exc:
            self.err = str(exc) if isinstance(exc, Unavailable) else f'cupy.cuda.nccl unavailable: {exc}'
        # every rank takes the same collective steps, whatever it found
        errs = [e for e in comm.allgather(self.err) if e]
        if errs:
            self.err = errs[0]
            return
        uid = _UniqueId()
        if comm.Get_rank() == 0:
            self._check('ncclGetUniqueId', ctypes.byref(uid))
        uid = _UniqueId.from_buffer_copy(comm.bcast(bytes(uid), root=0))
        handle = _P()
        self._check('ncclCommInitRank', ctypes.byref(handle), comm.Get_size(), uid, comm.Get_rank())
        self.handle = handle

    def _check(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc:
            raise Unavailable(f'{name}: {self.lib.ncclGetErrorString(rc).decode()} (ncclResult {rc})')

    def _release(self):
        """Deregisters and frees the previous row's windows (collective: every rank is at the same row)."""
        for win, ptr in self.windows:
            self._check('ncclCommWindowDeregister', self.handle, win)
            self._check('ncclMemFree', ptr)
        self.windows = []

    def _window(self, nbytes):
        """A registered window of at least nbytes (collective); its address."""
        ptr, win = _P(), _P()
        self._check('ncclMemAlloc', ctypes.byref(ptr), max(nbytes, 1))
        self._check('ncclCommWindowRegister', self.handle, ptr, max(nbytes, 1), ctypes.byref(win),
                    _WIN_COLL_SYMMETRIC)
        self.windows.append((win, ptr))
        return ptr.value

    def make(self, b, op, stream=False):
        if self.err:
            raise Unavailable(self.err)
        if b.xp is np:
            raise Unavailable('host buffers')
        if b.coll in vrows.COLLS:
            raise Unavailable(f'{b.coll} is point-to-point in NCCL (no symmetric collective kernel): compare nccl')
        if b.coll not in self._COLLS:
            raise Unavailable(f'NCCL has no symmetric kernel for {b.coll}')
        name = b.send.dtype.name
        if name not in self._DT:
            raise Unavailable(f'NCCL has no {name}')
        nc, xp, lib, h = self.nccl, b.xp, self.lib, self.handle
        dt, nop = getattr(nc, self._DT[name]), getattr(nc, self._OP[op])
        self._release()
        # the windows hold what the row's buffers hold (in place: the receive buffer is the input)
        sw, rw = self._window(b.send.nbytes), self._window(b.recv.nbytes)
        xp.cuda.runtime.memcpy(sw, b.send.data.ptr, b.send.nbytes, xp.cuda.runtime.memcpyDeviceToDevice)
        xp.cuda.runtime.memcpy(rw, b.recv.data.ptr, b.recv.nbytes, xp.cuda.runtime.memcpyDeviceToDevice)
        s = xp.cuda.get_current_stream()
        sp = self.input_of(b, sw, rw)
        c, count, root = b.coll, b.count, b.root
        if c == 'allreduce':
            call = lambda: self._check('ncclAllReduce', sp, rw, count, dt, nop, h, s.ptr)  # noqa: E731
        elif c == 'bcast':  # mpi_call's Bcast runs on the send buffer (b.result reads it)
            call = lambda: self._check('ncclBroadcast', sw, sw, count, dt, root, h, s.ptr)  # noqa: E731
        elif c == 'reduce_scatter_block':
            call = lambda: self._check('ncclReduceScatter', sp, rw, count, dt, nop, h, s.ptr)  # noqa: E731
        else:
            call = lambda: self._check('ncclAllGather', sp, rw, count, dt, h, s.ptr)  # noqa: E731
        self._result = (c, sw, rw)
        return self.timed_form(call, s, stream)

    def copy_result(self, b):
        """Copies the last row's result from its window into b's buffer (for the check)."""
        c, sw, rw = self._result
        xp = b.xp
        dst, src, nbytes = (b.send, sw, b.send.nbytes) if c == 'bcast' else (b.recv, rw, b.recv.nbytes)
        xp.cuda.runtime.memcpy(dst.data.ptr, src, nbytes, xp.cuda.runtime.memcpyDeviceToDevice)
        xp.cuda.Device().synchronize()
