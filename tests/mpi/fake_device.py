"""A fake CUDA layer for CPU tests: host memory plays device memory, copies are memmove, datatype
packing is mpigpu._describe.datatypes' NumPy reference, streams and events are no-ops; team setup fails as on
GPUs that cannot form a team, so the staged path runs. install() makes it mpigpu's CUDA layer.

Which host memory plays device memory is a registry of address ranges: pointer queries report a
pointer inside a registered range as device memory and every other pointer (NumPy arrays, the pinned
stand-ins) as plain host memory, as the CUDA runtime would. FakeCAI registers its array for its own
lifetime; device_memory() does the same for any object (the mpi4py suite harness registers the
suite's fake GPU arrays with it). Where the device-pointer guard (tests/mpi4py_suite/guard.c) is
preloaded, every registration reaches it too, so it can tell when such a pointer reaches MPI."""
import contextlib
import ctypes
import itertools
import threading
import time
import types
import weakref

pinned_made = []


# ---- registry of host memory that plays device memory -------------------------------------------
_ranges = {}   # (start, nbytes) -> registrations of exactly that range (few are alive at a time)
_live = ()     # the keys of _ranges, replaced whole: finalizers that run during a lookup cannot change it
_guard = None  # the preloaded guard's (register, unregister), or False where it is not loaded


def _guard_fns():
    global _guard
    if _guard is None:
        try:
            lib = ctypes.CDLL(None)
            reg, unreg = lib.mpigpu_guard_register, lib.mpigpu_guard_unregister
            for fn in (reg, unreg):
                fn.argtypes, fn.restype = (ctypes.c_size_t, ctypes.c_size_t), ctypes.c_int
            _guard = (reg, unreg)
        except (AttributeError, OSError):
            _guard = False
    return _guard


def register_device(ptr, nbytes):
    """From now on [ptr, ptr + nbytes) is device memory (until unregister_device)."""
    if nbytes <= 0:
        return
    global _live
    key = (ptr, nbytes)
    _ranges[key] = _ranges.get(key, 0) + 1
    _live = tuple(_ranges)
    if _guard_fns():
        _guard[0](ptr, nbytes)


def unregister_device(ptr, nbytes):
    global _live
    key = (ptr, nbytes)
    if nbytes <= 0 or key not in _ranges:
        return
    _ranges[key] -= 1
    if not _ranges[key]:
        del _ranges[key]
        _live = tuple(_ranges)
    if _guard_fns():
        _guard[1](ptr, nbytes)


def device_memory(owner, ptr, nbytes):
    """Registers [ptr, ptr + nbytes) as device memory while `owner` lives."""
    register_device(ptr, nbytes)
    weakref.finalize(owner, unregister_device, ptr, nbytes)


def is_device_pointer(ptr):
    return any(s <= ptr < s + n for (s, n) in _live)


def allocation(ptr):
    """(start, bytes) of the registered range holding ptr (the driver's allocation), or None."""
    return next(((s, n) for (s, n) in _live if s <= ptr < s + n), None)


MEM_UNREGISTERED, MEM_HOST, MEM_DEVICE, MEM_MANAGED = 0, 1, 2, 3  # cudaMemoryType, as _device has them


def _pointer_info(ptr):
    return (MEM_DEVICE, 0) if is_device_pointer(ptr) else (MEM_UNREGISTERED, -1)


class _PinnedOld(bytearray):
    """Pinned-memory stand-in exporting the buffer protocol (any Python version)."""

    def __init__(self, nbytes):
        super().__init__(max(nbytes, 1))
        self.nbytes = nbytes
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self))


class _DeviceMemory(bytearray):
    """_device.DeviceMemory stand-in: host memory registered as device memory, with its interface."""

    def __init__(self, nbytes):
        super().__init__(max(nbytes, 1))
        self.nbytes, self.device = nbytes, 0
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self))
        self.__cuda_array_interface__ = {'shape': (nbytes,), 'typestr': '|u1', 'data': (self.ptr, False),
                                         'version': 3, 'strides': None, 'stream': None}
        device_memory(self, self.ptr, nbytes)


def _pinned(nbytes):
    pinned_made.append(nbytes)
    return _PinnedOld(nbytes)


class DeviceError(RuntimeError):
    pass


class _NoEngine:
    """Team setup fails as on a machine whose GPUs cannot form a team: the staged path runs."""

    def __init__(self, *args):
        raise DeviceError('the fake CUDA layer has no device engine')


def _memory(ptr, lo, hi):
    """The host bytes [ptr + lo, ptr + hi) as a writable uint8 array."""
    import numpy as np
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(hi - lo, 1)).from_address(ptr + lo))


class _PackPlan:
    """_device.PackPlan over host memory: mpigpu._describe.datatypes' NumPy packing at raw addresses."""

    def __init__(self, layout, device):
        self.layout, self.device, self.size, self.extent = layout, device, layout.size, layout.extent

    def _span(self, count):
        offs = self.layout.byte_offsets(count)
        return (int(offs.min()), int(offs.max()) + 1) if len(offs) else (0, 0)

    def pack(self, count, buf, packed, stream):
        from mpigpu._describe.datatypes import pack_host
        lo, hi = self._span(count)
        if hi > lo:
            data = pack_host(self.layout, count, _memory(buf, lo, hi), -lo)
            ctypes.memmove(packed, data, len(data))

    def unpack(self, count, packed, buf, stream):
        from mpigpu._describe.datatypes import unpack_host
        lo, hi = self._span(count)
        if hi > lo:
            data = ctypes.string_at(packed, count * self.size)
            unpack_host(self.layout, count, data, _memory(buf, lo, hi), -lo)


def _pack_plan(layout, device):
    plan = layout.plans.get(device)
    if plan is None:
        plan = layout.plans[device] = _PackPlan(layout, device)
    return plan


# Streams are numbers (each a new one: a stream= call's stream is not the path's own); a wait for the
# host (stream_wait_host) holds the stream's synchronization until the host has written the word.
_streams = itertools.count(100)
_host_waits = []
_waits_lock = threading.Lock()


def _stream_wait_host(stream, words, value, timeout_s):
    with _waits_lock:
        _host_waits.append((stream, words, value))


def _word(ptr):
    return ctypes.c_uint32.from_address(ptr).value


def _stream_sync(stream):
    with _waits_lock:
        mine = [w for w in _host_waits if w[0] == stream]
    for w in mine:
        while ((_word(w[1]) - w[2]) & 0xFFFFFFFF) >= 0x80000000:
            time.sleep(1e-4)
        with _waits_lock:
            _host_waits.remove(w)


# A recording (capture_begin .. capture_end): the enqueued work of the fake layer (copies, reductions,
# the fake NCCL's operations) is kept in order instead of done, and done at each launch of the graph.
_recording = None


def _enqueued(fn):
    """fn() done now, or kept for the graph being recorded."""
    if _recording is not None:
        _recording.append(fn)
    else:
        fn()


class _Graph:
    def __init__(self, ops):
        self.ops = ops
        self.launches = 0

    def launch(self, stream):
        self.launches += 1
        for op in self.ops:
            op()

    def close(self):
        self.ops = []


graphs = []  # every graph recorded (the tests count their launches)


def _capture_begin(stream):
    global _recording
    if _recording is not None:
        raise DeviceError('capture_begin: a recording is already under way')
    _recording = []


def _capture_end(stream):
    global _recording
    ops, _recording = _recording, None
    if ops is None:
        raise DeviceError('capture_end: no recording under way')
    graphs.append(_Graph(ops))
    return graphs[-1]


def _memcpy_async(dst, src, nb, stream):
    if nb:
        _enqueued(lambda: ctypes.memmove(dst, src, nb))


def _reduce_rows(dtype, op, dst, src, row_bytes, nrows, count, stream):
    _enqueued(lambda: _reduce_rows_now(dtype, op, dst, src, row_bytes, nrows, count))


def _reduce_rows_now(dtype, op, dst, src, row_bytes, nrows, count):
    """The GPU reduction of rows, done on the host (the staged path's host_reduce, same order)."""
    import numpy as np
    from mpigpu._paths.staged import host_reduce
    from mpigpu._base.types import numpy_dtype
    npt = numpy_dtype(dtype)
    nb = count * npt.itemsize
    rows = [np.ctypeslib.as_array((ctypes.c_uint8 * nb).from_address(src + k * row_bytes)).view(npt)
            for k in range(nrows)]
    out = np.ctypeslib.as_array((ctypes.c_uint8 * nb).from_address(dst)).view(npt)
    out[:] = host_reduce(rows, dtype, op)


class _FakeNcclComm:
    """A NCCL communicator played by host MPI on a duplicate of the MPI communicator it was made from:
    the transport's verbs on fake device memory (host memory), done when issued (streams are no-ops)."""

    def __init__(self, lib, comm):
        from mpi4py import MPI
        self.MPI, self.lib, self.comm = MPI, lib, comm.Dup()
        self.size, self.rank = comm.Get_size(), comm.Get_rank()

    def _buf(self, ptr, nbytes):
        return [self.MPI.memory.fromaddress(ptr, nbytes), nbytes, self.MPI.BYTE]

    def send(self, ptr, nbytes, peer, stream):
        if nbytes:
            self.lib.issue(lambda: self.comm.Isend(self._buf(ptr, nbytes), peer, 0))

    def recv(self, ptr, nbytes, peer, stream):
        if nbytes:
            self.lib.issue(lambda: self.comm.Irecv(self._buf(ptr, nbytes), peer, 0))

    def bcast(self, ptr, nbytes, root, stream):
        if nbytes:
            _enqueued(lambda: self.comm.Bcast(self._buf(ptr, nbytes), root))

    def allgather(self, src, dst, nbytes, stream):
        if nbytes:
            def run():  # (src may be this rank's block of dst)
                data = _memory(src, 0, nbytes).copy()
                self.comm.Allgather([data, nbytes, self.MPI.BYTE], [self._buf(dst, nbytes * self.size)[0], self.MPI.BYTE])
            _enqueued(run)

    def close(self, abort=False):
        self.comm.Free()


class _FakeNccl:
    """The NCCL library of the fake layer (mpigpu/_transports/nccl.py's interface): a group's sends and
    receives run together when it closes, as NCCL's do."""

    shares_gpus = True  # over host MPI, ranks may share the fake GPU (NCCL itself takes one rank per GPU)

    def __init__(self):
        self.pending = None
        self.comms = 0  # communicators made (the tests ask whether the transport was set up)

    def describe(self):
        return 'fake NCCL (host MPI)'

    def connect(self, comm, host_id=None, timeout_s=600.0):
        self.comms += 1
        return _FakeNcclComm(self, comm)

    def issue(self, start):
        """start(): an operation's request, started now (or at the group's end, or at each launch of
        the graph being recorded)."""
        if self.pending is None:
            _enqueued(lambda: start().Wait())
        else:
            self.pending.append(start)

    @contextlib.contextmanager
    def group(self, comm=None):
        self.pending = []
        try:
            yield
        finally:
            starts, self.pending = self.pending, None

            def run():
                for r in [s() for s in starts]:
                    r.Wait()
            _enqueued(run)


fake_nccl = _FakeNccl()


fake = types.SimpleNamespace(
    DeviceError=DeviceError,
    stream_create=lambda: next(_streams), stream_destroy=lambda s: None, event_create=lambda: 1,
    event_destroy=lambda e: None, event_record=lambda e, s: None, event_sync=lambda e: None,
    stream_wait_event=lambda s, e: None, stream_sync=_stream_sync,
    stream_wait_host=_stream_wait_host, stream_capturing=lambda s: False,
    reduce_rows=_reduce_rows, load_kernels=lambda: None, nccl_library=lambda: fake_nccl,
    memcpy_async=_memcpy_async, capture_begin=_capture_begin, capture_end=_capture_end,
    get_device=lambda: 0, set_device=lambda d: None, PinnedBuffer=_pinned, device_count=lambda: 1,
    pointer_info=_pointer_info, is_device_memory=is_device_pointer, pci_bus_id=lambda d: '0000:00:00.0',
    MEM_DEVICE=MEM_DEVICE, MEM_MANAGED=MEM_MANAGED, MEM_HOST=MEM_HOST, MEM_UNREGISTERED=MEM_UNREGISTERED,
    MAX_RANKS=8, Team=_NoEngine,
    PackPlan=_PackPlan, pack_plan=_pack_plan, DeviceMemory=_DeviceMemory,
    armed=lambda: True, allocation=allocation,  # a process with device buffers: its communicators agree across nodes too
)


class FakeCAI:
    """A host array exported as a CUDA array, its memory registered as device memory."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {'shape': a.shape, 'typestr': a.dtype.str, 'data': (a.ctypes.data, False),
                                         'version': 3, 'strides': None, 'stream': 1}
        device_memory(self, a.ctypes.data, a.nbytes)


def install_unless_gpu():
    """The CUDA layer of a check that runs on either: with MPIGPU_CHECK_ON_GPU=1, CuPy on this rank's GPU
    (the real layer; returns the cupy module), else this fake layer installed (returns None)."""
    import os
    if os.environ.get('MPIGPU_CHECK_ON_GPU') != '1':
        install()
        return None
    import cupy
    from mpi4py import MPI
    cupy.cuda.Device(MPI.COMM_WORLD.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
    return cupy


def install(layer=fake):
    """Makes `layer` (the fake above by default) mpigpu's CUDA layer: its one door, mpigpu._cuda."""
    from mpigpu import _cuda
    _cuda.device = layer
    return FakeCAI


# ---- DLPack exports of fake device memory ------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [('device_type', ctypes.c_int32), ('device_id', ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [('code', ctypes.c_uint8), ('bits', ctypes.c_uint8), ('lanes', ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [('data', ctypes.c_void_p), ('device', _DLDevice), ('ndim', ctypes.c_int32), ('dtype', _DLDataType),
                ('shape', ctypes.POINTER(ctypes.c_int64)), ('strides', ctypes.POINTER(ctypes.c_int64)),
                ('byte_offset', ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [('dl_tensor', _DLTensor), ('manager_ctx', ctypes.c_void_p), ('deleter', _DELETER)]


_KDLCUDA = 2
_DL_CODES = {'i': 0, 'u': 1, 'f': 2, 'c': 5, 'b': 6}
_exports = {}  # address of a managed tensor -> (its struct, shape, the array it keeps alive)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
# the capsule's destructor gets a capsule being freed: it is passed on as a raw pointer, never as an object
_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(('PyCapsule_IsValid', ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ('PyCapsule_GetPointer', ctypes.pythonapi))


@_DELETER
def _delete_export(address):
    _exports.pop(address, None)  # the struct and the array it kept alive go


@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _capsule_gone(capsule):
    # an export never consumed (a consumer renames the capsule): its deleter runs here
    if _capsule_valid(capsule, b'dltensor'):
        _delete_export(_capsule_pointer(capsule, b'dltensor'))


class FakeDLPack:
    """A host array exported through DLPack as CUDA device memory (registered as such while this object
    lives): each export keeps the array alive until its consumer's deleter (or the capsule's
    destructor, if never consumed) lets it go, as a GPU framework's tensor does, so a reference that a
    consumer keeps shows in sys.getrefcount(self.a)."""

    def __init__(self, a):
        self.a = a
        device_memory(self, a.ctypes.data, max(a.nbytes, 1))  # an empty tensor is device memory too

    def __dlpack_device__(self):
        return (_KDLCUDA, 0)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        a = self.a
        m = _DLManagedTensor()
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        m.dl_tensor.data = a.ctypes.data
        m.dl_tensor.device = _DLDevice(_KDLCUDA, 0)
        m.dl_tensor.ndim = a.ndim
        m.dl_tensor.dtype = _DLDataType(_DL_CODES[a.dtype.kind], a.dtype.itemsize * 8, 1)
        m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        m.deleter = _delete_export
        address = ctypes.addressof(m)
        _exports[address] = (m, shape, a)
        return _capsule_new(address, b'dltensor', ctypes.cast(_capsule_gone, ctypes.c_void_p))
