"""Device scratch memory for the paths that need room of their own on a GPU (packed derived datatypes,
the rows of the exchange's reductions): blocks of a power-of-two size from a process-wide pool per
device, so a call that fits a block already made allocates nothing."""
import threading

from ... import _cuda

_lock = threading.Lock()
_pool = {}  # (device, size class) -> free DeviceMemory


def take(nbytes, device):
    """A DeviceMemory of at least nbytes (64 KiB at least) on `device`, from the pool where it has one."""
    size = max(1 << 16, 1 << (max(nbytes, 1) - 1).bit_length())
    with _lock:
        free = _pool.get((device, size))
        if free:
            return free.pop()
    return _cuda.with_device(device, _cuda.device_memory, size)


def give(mem, device):
    """Returns a block to the pool (no GPU work may still use it)."""
    with _lock:
        _pool.setdefault((device, mem.nbytes), []).append(mem)


def give_after(mem, device, streams):
    """Gives a block back to the pool once the GPU work of `streams` (one, or a list) is done (a request's
    scratch, from its finalizer)."""
    try:
        for s in streams if isinstance(streams, list) else [streams]:
            _cuda.with_device(device, _cuda.sync, s)
    except Exception:  # noqa: BLE001 - at exit or after a fault: the block is not reused then
        return
    give(mem, device)
