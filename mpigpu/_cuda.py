"""The one door to the CUDA layer: the optional import of mpigpu._ext._device, the device-current
context, the translation of its errors into mpigpu.Error, stream choice and pointer checks.

No other module imports mpigpu._ext._device: they use `_cuda.device` (looked up at call time, so the
fake CUDA layer of the CPU tests replaces it in one place). `device` is None in a build without nvcc.
"""
import sys
from contextlib import contextmanager

from mpi4py import MPI

from ._ext import _intake
from .errors import Error

try:
    from ._ext import _device as device
except ImportError:  # CPU-only build: no nvcc when it was built
    device = None


def _is_device_pointer(ptr):
    """The intake's question for exports that do not say where their memory is (a CUDA Array
    Interface, the buffer protocol): device or managed memory? Without a CUDA layer, never."""
    return device is not None and device.is_device_memory(ptr)


_intake.set_pointer_query(_is_device_pointer)


class _NoDeviceError(Exception):
    """Stands for DeviceError in a build without the CUDA layer (nothing raises it)."""


def device_error():
    """The exception class of the CUDA layer (to catch it on the hot path)."""
    return device.DeviceError if device is not None else _NoDeviceError


def available():
    """(True, '') when this build has the CUDA engine and sees a GPU; else (False, why)."""
    if device is None:
        return False, 'mpigpu was built without CUDA (nvcc was not found at build time)'
    if device.device_count() == 0:
        return False, 'no CUDA device or driver is visible'
    return True, ''


# Libraries whose arrays live in GPU memory: a process that has loaded one may pass device buffers.
_GPU_LIBRARIES = ('cupy', 'torch', 'jax', 'jaxlib', 'numba', 'cudf', 'pycuda', 'tensorflow', 'cuda')


def armed():
    """True when this process may pass device buffers to a collective: the CUDA layer is here and a GPU
    array library is loaded (the CPU tests' fake layer says for itself). Decides, per communicator
    spanning several nodes, whether its calls pay for an agreement (mpigpu/_state/agree.py)."""
    if device is None:
        return False
    own = getattr(device, 'armed', None)
    if own is not None:
        return bool(own())
    return any(name in sys.modules for name in _GPU_LIBRARIES)


def require(call, rank, arg='buffer'):
    """Raises mpigpu.Error for a device buffer when this build has no CUDA layer."""
    if device is None:
        raise Error(call, available()[1], arg=arg, rank=rank, error_class=MPI.ERR_BUFFER)


@contextmanager
def errors_as(call, rank):
    """Turns the CUDA layer's errors inside the block into mpigpu.Error naming the call and rank."""
    try:
        yield
    except device_error() as exc:
        raise Error(call, str(exc), rank=rank, error_class=MPI.ERR_OTHER) from None


def with_device(dev, fn, *args):
    """fn(*args) with device `dev` current, the caller's current device restored after: kernels,
    copies and events must be issued on the device that owns their stream."""
    prev = device.get_device()
    if prev != dev:
        device.set_device(dev)
    try:
        return fn(*args)
    finally:
        if prev != dev:
            device.set_device(prev)


_consumer_streams = {}


def consumer_stream(dev):
    """The stream mpigpu offers DLPack producers on device `dev` (created once per process)."""
    if dev is None or dev < 0 or device is None:
        return None
    s = _consumer_streams.get(dev)
    if s is None:
        s = _consumer_streams[dev] = with_device(dev, device.stream_create)
    return s


def stream_handle(name, rank, stream):
    """The cudaStream_t behind `stream=`: an int, a CuPy stream (.ptr) or a PyTorch stream (.cuda_stream)."""
    for attr in ('ptr', 'cuda_stream'):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise Error(name, f'stream must be a CUDA stream (an int handle, a CuPy or PyTorch stream), not '
                    f'{type(stream).__name__}', arg='stream', rank=rank, error_class=MPI.ERR_ARG)
    return stream


def stream_handle_or_none(stream):
    """stream_handle's answer where `stream` is one, else None (the caller's general path says why)."""
    for attr in ('ptr', 'cuda_stream'):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    return stream if type(stream) is int and stream >= 0 else None


def stream_of(buf, dev):
    """The stream a DeviceBuffer's data is ordered on: the consumer stream of `dev` for a DLPack
    producer that synchronized to it, the CAI v3 producer stream, else the legacy default stream."""
    return consumer_stream(dev) if buf.stream_synced else max(buf.stream, 0)


def launch_stream(bufs, dev, event):
    """The stream a call on DeviceBuffers `bufs` (device `dev` current) is enqueued on: the first one's
    producer stream, made to wait (through `event`) for each other producer stream; 0 for none."""
    stream = None
    for buf in bufs:
        s = stream_of(buf, dev)
        if stream is None:
            stream = s
        elif s != stream:
            device.event_record(event, s)
            device.stream_wait_event(stream, event)
    return 0 if stream is None else stream


def device_of(call, arg, rank, buf):
    """The device holding DeviceBuffer `buf`, checked to be device (or managed) memory; for an empty
    buffer the exporter's device or the current one."""
    if buf.nbytes:
        memtype, dev = device.pointer_info(buf.ptr)
        if memtype not in (device.MEM_DEVICE, device.MEM_MANAGED):
            raise Error(call, 'buffer claims to be on a CUDA device but its pointer is not device memory',
                        arg=arg, rank=rank, error_class=MPI.ERR_BUFFER)
        return dev
    return buf.device if buf.device >= 0 else device.get_device()


def allocation(ptr):
    """(base, bytes) of the device allocation holding `ptr`, as the driver reports it, or None (host
    memory, no CUDA layer): how far an explicit count and datatype may reach, as MPI trusts them."""
    if device is None or not ptr:
        return None
    own = getattr(device, 'allocation', None)
    if own is not None:
        return own(ptr)
    try:
        base, size, _ident, _capable = device.ipc_describe(ptr)
    except device.DeviceError:
        return None
    return (base, size) if size else None


def release_streams():
    """Destroys the consumer streams (at exit, before the CUDA context goes)."""
    for s in _consumer_streams.values():
        try:
            device.stream_destroy(s)
        except Exception:
            pass
    _consumer_streams.clear()
