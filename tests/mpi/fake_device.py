"""A fake CUDA layer for CPU tests: host memory plays device memory, copies are memmove, streams
and events are no-ops. install() patches mpigpu's modules; FakeCAI exports host arrays as if they
were CUDA arrays (CUDA Array Interface v3)."""
import ctypes
import types

pinned_made = []


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


fake = types.SimpleNamespace(
    DeviceError=DeviceError,
    stream_create=lambda: 1, stream_destroy=lambda s: None, event_create=lambda: 1,
    event_destroy=lambda e: None, event_record=lambda e, s: None, event_sync=lambda e: None,
    stream_wait_event=lambda s, e: None, stream_sync=lambda s: None,
    memcpy_async=lambda dst, src, nb, s: ctypes.memmove(dst, src, nb) if nb else None,
    get_device=lambda: 0, set_device=lambda d: None, PinnedBuffer=_pinned, device_count=lambda: 1,
    pointer_info=lambda ptr: (2, 0), pci_bus_id=lambda d: '0000:00:00.0', MEM_DEVICE=2, MEM_MANAGED=3, MEM_HOST=1, MEM_UNREGISTERED=0,
)


class FakeCAI:
    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {'shape': a.shape, 'typestr': a.dtype.str, 'data': (a.ctypes.data, False),
                                         'version': 3, 'strides': None, 'stream': 1}


def install(layer=fake):
    """Makes `layer` (the fake above by default) mpigpu's CUDA layer: its one door, mpigpu._cuda."""
    from mpigpu import _cuda
    _cuda.device = layer
    return FakeCAI
