"""A fake CUDA layer for CPU tests: host memory plays device memory, copies are memmove, datatype
packing is mpigpu._datatypes' NumPy reference, streams and events are no-ops. install() makes it
mpigpu's CUDA layer; FakeCAI exports host arrays as if they were CUDA arrays (CUDA Array Interface v3)
and registers their memory as "device memory", which is what the fake layer's pointer queries then
report (every other pointer is host memory)."""
import ctypes
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


class _DeviceMemory(bytearray):
    """_device.DeviceMemory stand-in: host memory registered as device memory, with its interface."""

    def __init__(self, nbytes):
        super().__init__(max(nbytes, 1))
        self.nbytes, self.device = nbytes, 0
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self))
        self.__cuda_array_interface__ = {'shape': (nbytes,), 'typestr': '|u1', 'data': (self.ptr, False),
                                         'version': 3, 'strides': None, 'stream': None}
        register(self.ptr, nbytes, self)


def _pinned(nbytes):
    pinned_made.append(nbytes)
    return _PinnedOld(nbytes)


class DeviceError(RuntimeError):
    pass


def _memory(ptr, lo, hi):
    """The host bytes [ptr + lo, ptr + hi) as a writable uint8 array."""
    import numpy as np
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(hi - lo, 1)).from_address(ptr + lo))


class _PackPlan:
    """_device.PackPlan over host memory: mpigpu._datatypes' NumPy packing at raw addresses."""

    def __init__(self, layout, device):
        self.layout, self.device, self.size, self.extent = layout, device, layout.size, layout.extent

    def _span(self, count):
        offs = self.layout.byte_offsets(count)
        return (int(offs.min()), int(offs.max()) + 1) if len(offs) else (0, 0)

    def pack(self, count, buf, packed, stream):
        from mpigpu._datatypes import pack_host
        lo, hi = self._span(count)
        if hi > lo:
            data = pack_host(self.layout, count, _memory(buf, lo, hi), -lo)
            ctypes.memmove(packed, data, len(data))

    def unpack(self, count, packed, buf, stream):
        from mpigpu._datatypes import unpack_host
        lo, hi = self._span(count)
        if hi > lo:
            data = ctypes.string_at(packed, count * self.size)
            unpack_host(self.layout, count, data, _memory(buf, lo, hi), -lo)


def _pack_plan(layout, device):
    plan = layout.plans.get(device)
    if plan is None:
        plan = layout.plans[device] = _PackPlan(layout, device)
    return plan


fake = types.SimpleNamespace(
    DeviceError=DeviceError,
    stream_create=lambda: 1, stream_destroy=lambda s: None, event_create=lambda: 1,
    event_destroy=lambda e: None, event_record=lambda e, s: None, event_sync=lambda e: None,
    stream_wait_event=lambda s, e: None, stream_sync=lambda s: None,
    memcpy_async=lambda dst, src, nb, s: ctypes.memmove(dst, src, nb) if nb else None,
    get_device=lambda: 0, set_device=lambda d: None, PinnedBuffer=_pinned, device_count=lambda: 1,
    pointer_info=_pointer_info, is_device_memory=is_device_memory, pci_bus_id=lambda d: '0000:00:00.0',
    MEM_DEVICE=2, MEM_MANAGED=3, MEM_HOST=1, MEM_UNREGISTERED=0,
    PackPlan=_PackPlan, pack_plan=_pack_plan, DeviceMemory=_DeviceMemory,
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
