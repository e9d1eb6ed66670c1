"""A fake CUDA layer for CPU tests: host memory plays device memory, copies are memmove, streams
and events are no-ops. install() makes it mpigpu's CUDA layer; FakeCAI exports host arrays as if they
were CUDA arrays (CUDA Array Interface v3) and registers their memory as "device memory", which is
what the fake layer's pointer queries then report (every other pointer is host memory)."""
import ctypes
import itertools
import threading
import time
import types
import weakref

pinned_made = []
_device_ranges = {}  # start -> end of the memory the fake layer calls device memory


def register(ptr, nbytes, owner=None):
    """Makes [ptr, ptr + nbytes) device memory for the fake layer, until `owner` is collected."""
    if nbytes <= 0:
        return
    _device_ranges[ptr] = ptr + nbytes
    if owner is not None:
        weakref.finalize(owner, _device_ranges.pop, ptr, None)


def is_device_memory(ptr):
    return any(start <= ptr < end for start, end in _device_ranges.items())


def _pointer_info(ptr):
    return (2, 0) if is_device_memory(ptr) else (0, -1)


class _PinnedOld(bytearray):
    """Pinned-memory stand-in exporting the buffer protocol (any Python version)."""

    def __init__(self, nbytes):
        super().__init__(max(nbytes, 1))
        self.nbytes = nbytes
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self))


def _pinned(nbytes):
    pinned_made.append(nbytes)
    return _PinnedOld(nbytes)


class DeviceError(RuntimeError):
    pass


class DeviceMemory:
    """Device memory stand-in: host memory the fake layer reports as device memory."""

    def __init__(self, nbytes):
        self._mem = bytearray(max(nbytes, 1))
        self.nbytes = nbytes
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self._mem))
        register(self.ptr, max(nbytes, 1), self)


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


def _reduce_rows(dtype, op, dst, src, row_bytes, nrows, count, stream):
    """The GPU reduction of rows, done on the host (the staged path's host_reduce, same order)."""
    import numpy as np
    from mpigpu._paths.staged import host_reduce
    from mpigpu._types import numpy_dtype
    npt = numpy_dtype(dtype)
    nb = count * npt.itemsize
    rows = [np.ctypeslib.as_array((ctypes.c_uint8 * nb).from_address(src + k * row_bytes)).view(npt)
            for k in range(nrows)]
    out = np.ctypeslib.as_array((ctypes.c_uint8 * nb).from_address(dst)).view(npt)
    out[:] = host_reduce(rows, dtype, op)


fake = types.SimpleNamespace(
    DeviceError=DeviceError,
    stream_create=lambda: next(_streams), stream_destroy=lambda s: None, event_create=lambda: 1,
    event_destroy=lambda e: None, event_record=lambda e, s: None, event_sync=lambda e: None,
    stream_wait_event=lambda s, e: None, stream_sync=_stream_sync,
    stream_wait_host=_stream_wait_host, stream_capturing=lambda s: False, DeviceMemory=DeviceMemory,
    reduce_rows=_reduce_rows, load_kernels=lambda: None,
    MAX_RANKS=8,
    memcpy_async=lambda dst, src, nb, s: ctypes.memmove(dst, src, nb) if nb else None,
    get_device=lambda: 0, set_device=lambda d: None, PinnedBuffer=_pinned, device_count=lambda: 1,
    pointer_info=_pointer_info, is_device_memory=is_device_memory, pci_bus_id=lambda d: '0000:00:00.0',
    MEM_DEVICE=2, MEM_MANAGED=3, MEM_HOST=1, MEM_UNREGISTERED=0,
)


class FakeCAI:
    """A host array exported as a CUDA array, its memory registered as device memory."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {'shape': a.shape, 'typestr': a.dtype.str, 'data': (a.ctypes.data, False),
                                         'version': 3, 'strides': None, 'stream': 1}
        register(a.ctypes.data, a.nbytes, self)


def install(layer=fake):
    """Makes `layer` (the fake above by default) mpigpu's CUDA layer: its one door, mpigpu._cuda."""
    from mpigpu import _cuda
    _cuda.device = layer
    return FakeCAI
