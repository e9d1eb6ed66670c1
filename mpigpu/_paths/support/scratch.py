"""Device scratch memory for the paths that need room of their own on a GPU (packed derived datatypes,
the rows of the exchange's reductions): blocks of a power-of-two size from a process-wide pool per
device, so a call that fits a block already made allocates nothing."""
import threading
import weakref

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


class OnScratch:
    """Transport work (the forms exchange_read.Ranges takes: run, enqueue, request, bind; keep) that needs
    `scratch_bytes()` of device scratch: a blocking call's taken and given back around it, a non-blocking
    call's given back once its request is gone (after its stream's work), a persistent request's kept
    for all its rounds. A subclass has `ranges` (its exchange) and says what it runs on a block:
    `run_on(mem, team, stream)` (blocking) and `request_on(mem, team, stream, addr, watch)` (its ticket)."""
    __slots__ = ('kept', 'taken', 'streams', '__weakref__')

    def __init__(self):
        self.kept = None   # a persistent request's scratch, for all its rounds
        self.taken = None  # (scratch, device) a non-blocking call took for its request
        self.streams = []  # the streams its rounds ran on (a persistent request's scratch waits for them)

    @property
    def device(self):
        return self.ranges.device

    @property
    def bufs(self):
        return self.ranges.bufs

    def run(self, team, stream):
        mem = self.kept if self.kept is not None else take(self.scratch_bytes(), team.device)
        try:
            self.run_on(mem, team, stream)
        finally:
            if mem is not self.kept:
                give(mem, team.device)  # the blocking call has waited for its work

    def enqueue(self, team, stream):
        """The stream= form: waited for before the call returns, so its scratch goes back to the pool only
        once the stream has run the work."""
        self.run(team, stream)

    def request(self, team, stream, addr, watch):
        mem = self.kept
        if mem is not None and stream not in self.streams:
            self.streams.append(stream)
        if mem is None:
            mem = take(self.scratch_bytes(), team.device)
            self.taken = (mem, team.device)
        try:
            return self.request_on(mem, team, stream, addr, watch)
        except BaseException:
            if self.taken is not None:  # no request holds it: back once whatever was enqueued is done
                give_after(mem, team.device, stream)
                self.taken = None
            raise

    def bind(self, req, stream):
        """Keeps the buffers alive as long as request `req`, and returns the scratch it took once the
        request is gone (after its stream's work: a request dropped unwaited may still be running)."""
        self.ranges.bind(req, stream)
        if self.taken is not None:
            mem, device = self.taken
            self.taken = None
            weakref.finalize(req, give_after, mem, device, stream)

    def keep(self, device):
        """Takes the scratch of a persistent request's rounds, given back once the request is gone."""
        self.kept = take(self.scratch_bytes(), device)
        weakref.finalize(self, give_after, self.kept, device, self.streams)

