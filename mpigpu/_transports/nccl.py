"""NCCL as a transport between nodes: the library loaded with ctypes (no build-time dependency; the
package registry's `nvidia-nccl-cu13`, PyTorch's or CuPy's copy, or MPIGPU_NCCL_LIB), communicators
made from an MPI communicator, and the three verbs the network phases need (grouped send and
receive of bytes, broadcast of bytes), each enqueued on a CUDA stream.

NCCL moves bytes only: every reduction across nodes stays mpigpu's own (hier/net_device.py), in node
order, so results keep the bits of the host-MPI transport for every type and op, NCCL's or not.

The CPU tests' fake CUDA layer offers its own library (`nccl_library()` over host MPI): `library()`
asks the CUDA layer first, so the fake replaces NCCL in one place, as it replaces CUDA.
"""
import contextlib
import ctypes
import importlib.util
import os
import threading
import time

from mpi4py import MPI

from .. import _cuda
from .._base.config import config

# NCCL's ABI constants (nccl.h): ncclSuccess, ncclUint8.
_SUCCESS, _UINT8 = 0, 1
_UNIQUE_ID_BYTES = 128


class NcclError(RuntimeError):
    """A NCCL call failed (the message names the call and NCCL's reason)."""


class _UniqueId(ctypes.Structure):
    # bytes, not chars: a c_char array reads back only up to its first zero byte
    _fields_ = [('internal', ctypes.c_ubyte * _UNIQUE_ID_BYTES)]


_FAILED_TAG = 0x6E63  # a rank whose NCCL setup failed tells the others of its rail, so none waits for it
_POLL_S = 1e-4


def _candidates():
    """Where libnccl may be: the knob, the nvidia-nccl wheel's folder, then the loader's search (which
    also finds a copy PyTorch or CuPy loaded already)."""
    if config.nccl_lib:
        yield config.nccl_lib
    spec = importlib.util.find_spec('nvidia.nccl') if importlib.util.find_spec('nvidia') else None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        yield os.path.join(folder, 'lib', 'libnccl.so.2')
    yield 'libnccl.so.2'
    yield 'libnccl.so'


class Library:
    """The loaded NCCL library."""

    def __init__(self, lib, path):
        self.lib, self.path = lib, path
        ptr, size, i, comm, stream = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p
        sig = {
            'ncclGetVersion': [ctypes.POINTER(i)],
            'ncclGetUniqueId': [ctypes.POINTER(_UniqueId)],
            'ncclCommInitRank': [ctypes.POINTER(comm), i, _UniqueId, i],
            'ncclCommDestroy': [comm],
            'ncclCommAbort': [comm],
            'ncclSend': [ptr, size, i, i, comm, stream],
            'ncclRecv': [ptr, size, i, i, comm, stream],
            'ncclBroadcast': [ptr, ptr, size, i, i, comm, stream],
            'ncclAllGather': [ptr, ptr, size, i, comm, stream],
            'ncclGroupStart': [],
            'ncclGroupEnd': [],
        }
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [i], ctypes.c_char_p
        v = ctypes.c_int()
        self._check('ncclGetVersion', lib.ncclGetVersion(ctypes.byref(v)))
        self.version = v.value

    def describe(self):
        v = self.version  # major * 10000 + minor * 100 + patch since 2.9; major * 1000 + minor * 100 + patch before
        big = v >= 10000
        major, minor, patch = v // (10000 if big else 1000), v // 100 % (100 if big else 10), v % 100
        return f'NCCL {major}.{minor}.{patch}'

    def _check(self, what, rc):
        """Raises NcclError for a failed call."""
        if rc != _SUCCESS:
            raise NcclError(f'{what}: {self._reason(rc)}')

    def connect(self, comm, host_id=None, timeout_s=600.0):
        """A NCCL communicator over the ranks of MPI communicator `comm` (collective over it; ranks in
        comm's order). host_id: the host NCCL is told this rank runs on (NCCL_HOSTID, for simulated
        nodes: NCCL then uses its network transport between them, as between real hosts).

        NCCL's setup waits for every rank, so it runs on a thread of its own while this one watches
        for a rank whose setup failed (it tells the others) and for timeout_s: every rank raises
        NcclError then, and none waits forever (a setup that never returns leaves its thread behind).
        The communicator is a blocking one, like those PyTorch and CuPy make."""
        uid = _UniqueId()
        err = None
        if comm.Get_rank() == 0:
            try:
                self._check('ncclGetUniqueId', self.lib.ncclGetUniqueId(ctypes.byref(uid)))
            except NcclError as exc:
                err = str(exc)
        got = comm.bcast((bytes(uid) if err is None else None, err), root=0)
        if got[0] is None:
            raise NcclError(got[1])
        uid = _UniqueId.from_buffer_copy(got[0])
        handle, done = ctypes.c_void_p(), {}
        device = _cuda.current_device()  # NCCL binds the communicator to the setup thread's device

        def setup():
            try:
                _cuda.device.set_device(device)
                with _environment('NCCL_HOSTID', host_id):
                    rc = self.lib.ncclCommInitRank(ctypes.byref(handle), comm.Get_size(), uid, comm.Get_rank())
                done['why'] = f'ncclCommInitRank: {self._reason(rc)}' if rc != _SUCCESS else ''
            except Exception as exc:  # the CUDA layer's error: reported by the watching thread
                done['why'] = f'NCCL setup: {exc}'
        thread = threading.Thread(target=setup, name='mpigpu-nccl-setup', daemon=True)
        thread.start()
        heard = set()  # ranks whose failure message this rank received
        err = self._watch(thread, comm, timeout_s, heard)
        if not err:
            err = done.get('why', 'NCCL setup: its thread ended without an answer')
        me = comm.Get_rank()
        sends = [comm.isend(err, p, _FAILED_TAG) for p in range(comm.Get_size()) if p != me] if err else []
        outcome = comm.allgather(err)
        for p, e in enumerate(outcome):
            if e and p != me and p not in heard:
                comm.recv(source=p, tag=_FAILED_TAG)
        MPI.Request.Waitall(sends)
        failed = [(p, e) for p, e in enumerate(outcome) if e]
        if failed:
            if not thread.is_alive() and handle.value:
                self.lib.ncclCommAbort(handle)
            p, e = failed[0]
            raise NcclError(f'rank {p} of the rail: {e}')
        return Comm(self, handle, comm.Get_size(), me)

    @staticmethod
    def _watch(thread, comm, timeout_s, heard):
        """Waits for the setup thread: '' when it returned, else why this rank stops waiting (a rank of
        the rail failed, or timeout_s passed)."""
        deadline = time.monotonic() + timeout_s
        status = MPI.Status()
        while thread.is_alive():
            if comm.iprobe(MPI.ANY_SOURCE, _FAILED_TAG, status):
                peer = status.Get_source()
                why = comm.recv(source=peer, tag=_FAILED_TAG)
                heard.add(peer)
                return f'rank {peer} of the rail failed: {why}'
            if time.monotonic() > deadline:
                return f'ncclCommInitRank: not done within {timeout_s:g} s (MPIGPU_TIMEOUT_S)'
            thread.join(_POLL_S)
        return ''

    def _reason(self, rc):
        return f'{self.lib.ncclGetErrorString(rc).decode(errors="replace")} (ncclResult {rc})'

    @contextlib.contextmanager
    def group(self, comm=None):
        """Sends and receives issued inside run together (NCCL's group): no order among them (`comm`:
        the communicator they use; unused here, the fake layer's group takes it)."""
        self._check('ncclGroupStart', self.lib.ncclGroupStart())
        try:
            yield
        finally:
            self._check('ncclGroupEnd', self.lib.ncclGroupEnd())


class Comm:
    """One NCCL communicator: bytes between its ranks, enqueued on CUDA streams."""

    def __init__(self, library, handle, size, rank):
        self.library, self.handle, self.size, self.rank = library, handle, size, rank

    def send(self, ptr, nbytes, peer, stream):
        if nbytes:
            self.library._check('ncclSend', self.library.lib.ncclSend(ptr, nbytes, _UINT8, peer, self.handle, stream))

    def recv(self, ptr, nbytes, peer, stream):
        if nbytes:
            self.library._check('ncclRecv', self.library.lib.ncclRecv(ptr, nbytes, _UINT8, peer, self.handle, stream))

    def bcast(self, ptr, nbytes, root, stream):
        if nbytes:
            self.library._check('ncclBroadcast', self.library.lib.ncclBroadcast(ptr, ptr, nbytes, _UINT8, root,
                                                                                self.handle, stream))

    def allgather(self, src, dst, nbytes, stream):
        """dst[k * nbytes ...] = rank k's src (nbytes each; src may be this rank's block of dst). NCCL's
        collectives take its low-latency protocols, which its sends and receives do not: a few small
        rows gathered this way arrive in a fraction of a grouped exchange's time."""
        if nbytes:
            self.library._check('ncclAllGather', self.library.lib.ncclAllGather(src, dst, nbytes, _UINT8,
                                                                                self.handle, stream))

    def close(self, abort=False):
        """Destroys the communicator (abort: without waiting for operations in flight)."""
        h, self.handle = self.handle, None
        if h:
            fn = self.library.lib.ncclCommAbort if abort else self.library.lib.ncclCommDestroy
            self.library._check('ncclCommAbort' if abort else 'ncclCommDestroy', fn(h))


@contextlib.contextmanager
def _environment(name, value):
    """os.environ[name] = value inside (nothing where value is None), the old value restored after."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


_library = None


def library():
    """(the NCCL library, '') or (None, why none loads). The CUDA layer's own library comes first where
    it offers one (the CPU tests' fake)."""
    global _library
    if _library is not None:
        return _library, ''
    own = getattr(_cuda.device, 'nccl_library', None) if _cuda.device is not None else None
    if own is not None:
        return own(), ''
    if _cuda.device is None:
        return None, 'no CUDA layer in this build'
    reasons = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            reasons.append(str(exc))
            continue
        try:
            _library = Library(lib, path)
            return _library, ''
        except (AttributeError, NcclError) as exc:
            reasons.append(f'{path}: {exc}')
    return None, 'no NCCL library could be loaded (' + '; '.join(reasons[-2:]) + ')'
