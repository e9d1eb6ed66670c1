"""The one door to the CUDA layer: the optional import of mpigpu._ext._device, the device-current
context, the translation of its errors into mpigpu.Error, stream choice and pointer checks, and the verbs
the paths need of it (streams, events, copies, memory, graph capture, a reduction kernel).

No other module imports mpigpu._ext._device. The paths, the call description and the public face use the
verbs below; `_cuda.device` itself (looked up at call time, so the fake CUDA layer of the CPU tests
replaces it in one place) is read only by the modules that set up or wire the CUDA layer's own objects:
the device team and its completion requests, the peer-memory (IPC) transport, NCCL, and the fast paths'
bindings (tests/test_layout.py lists them). `device` is None in a build without nvcc.
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
if device is not None:  # the fast paths' reader takes what the placement check read (one read a buffer)
    device.set_recall(_intake.recalled)


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
            after(stream, s, event)
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


# ---- verbs: what the layers above ask of the CUDA layer ------------------------------------------------
# Each looks `device` up at call time (the CPU tests swap the layer). Streams and events are the CUDA
# layer's handles (ints); a call's work is ordered with them, never with a host wait where a stream wait
# will do.
def stream():
    """A new non-blocking stream on the current device."""
    return device.stream_create()


def free_stream(s):
    device.stream_destroy(s)


def event():
    """A new event (timing off) on the current device."""
    return device.event_create()


def free_event(e):
    device.event_destroy(e)


def record(e, s):
    """Event `e` completes once the work queued on stream `s` so far has."""
    device.event_record(e, s)


def wait(s, e):
    """Work queued on stream `s` from now on waits for event `e`."""
    device.stream_wait_event(s, e)


def after(s, producer, e):
    """Work queued on stream `s` from now on waits for the work queued on stream `producer` so far
    (through event `e`, recorded on it)."""
    device.event_record(e, producer)
    device.stream_wait_event(s, e)


def sync(s):
    """Returns once the work queued on stream `s` is done (GIL released)."""
    device.stream_sync(s)


def sync_event(e):
    """Returns once event `e` has completed."""
    device.event_sync(e)


def copy(dst, src, nbytes, s):
    """nbytes from address src to dst (device or page-locked memory) queued on stream `s`."""
    device.memcpy_async(dst, src, nbytes, s)


def device_memory(nbytes):
    """nbytes of device memory on the current device (.ptr; freed with the object or its close())."""
    return device.DeviceMemory(nbytes)


def pinned_memory(nbytes):
    """nbytes of page-locked host memory (.ptr, a NumPy-readable buffer)."""
    return device.PinnedBuffer(nbytes)


def current_device():
    return device.get_device()


def supports(dtype, op_code):
    """True when the engine's kernels reduce elements of `dtype` with `op_code`."""
    return device.supports(dtype, op_code)


def reduce_rows(dtype, op_code, out, rows, row_bytes, nrows, count, s):
    """out = the reduction of nrows rows of row_bytes each at `rows` (device memory), in row order, on `s`."""
    device.reduce_rows(dtype, op_code, out, rows, row_bytes, nrows, count, s)


def capturing(s):
    """True while stream `s` is being captured into a CUDA graph."""
    return device.stream_capturing(s)


def can_capture():
    """True when this CUDA layer records and replays graphs (the CPU tests' fake layer does not)."""
    return device is not None and hasattr(device, 'capture_begin')


def capture_begin(s):
    device.capture_begin(s)


def capture_end(s):
    """The graph captured on `s` since capture_begin (.launch(stream), .close())."""
    return device.capture_end(s)


def wait_host(s, word_ptr, value, timeout_s):
    """Work queued on stream `s` from now on waits until the 32-bit word of page-locked memory at
    word_ptr holds `value` (set by a host thread), at most timeout_s seconds."""
    device.stream_wait_host(s, word_ptr, value, timeout_s)


def pack_plan(layout, dev):
    """The CUDA layer's plan of a datatype layout's pack and unpack kernels on device `dev`."""
    return device.pack_plan(layout, dev)


def load_kernels():
    """Loads every kernel now (a stream that waits for a host thread must not meet a first launch)."""
    device.load_kernels()


def pci_bus_id(dev):
    return device.pci_bus_id(dev)


def fault_reason(code, timeout_s):
    """Why a device team gave up a call, from its fault code; None where the code names no reason."""
    if code == device.ERR_TIMEOUT:
        return f'peers did not arrive within MPIGPU_TIMEOUT_S={timeout_s:g} s'
    if code == device.ERR_ABORTED:
        return 'the communicator was aborted'
    return None
