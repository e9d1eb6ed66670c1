"""Sizes, busbw factors and the timing loops: blocking (each call returns with its result, MPI's
semantics) and stream (calls enqueued back to back on one stream, one synchronization at the end,
as nccl-tests times)."""
import contextlib
import gc
import time

from . import redistribute, vrows

# The rows by name, spelled out rather than read from mpigpu._base.codes.Coll: that enum grows with the
# library's collectives, and a row exists only where this tool knows its buffers, check and baselines.
# The engine's collectives (reductions, bcast, allgather), the exchange rows (vrows.py), point-to-point.
ENGINE_COLLS = ('allreduce', 'bcast', 'reduce_scatter_block', 'reduce', 'allgather')
COLLS = ENGINE_COLLS + vrows.COLLS + ('sendrecv', 'pingpong', 'halo')


def parse_size(text):
    text = str(text).strip().upper()
    mult = 1
    for suffix, m in (('K', 1 << 10), ('M', 1 << 20), ('G', 1 << 30), ('T', 1 << 40)):
        if text.endswith(suffix):
            text, mult = text[:-1], m
            break
    return int(float(text) * mult)


def sizes(begin, end, factor):
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = s * factor if factor > 1 else s + 1
    return out


def bus_factor(coll, n):
    """nccl-tests' busbw = algbw x factor. The exchange rows take (n-1)/n, as nccl-tests' alltoall,
    gather and scatter do: of the bytes a rank sends or receives, the 1/n that stay on it cross no link."""
    if coll == 'allreduce':
        return 2 * (n - 1) / n if n > 1 else 1
    if coll == 'neighbor_alltoall':
        return 1.0  # no block stays on its rank: every byte sent to a neighbour crosses a link
    if coll in ('reduce_scatter_block', 'allgather') or coll in vrows.COLLS:
        return (n - 1) / n if n > 1 else 1
    return 1.0


def counts(coll, nbytes, itemsize, n):
    """(count per call argument, bytes the row reports): size is the whole buffer, as nccl-tests.
    An exchange row's count is its base block count (vrows.row_bytes says which bytes it reports)."""
    if coll == 'redistribute':  # the count is the side of one rank's block (redistribute.py)
        b = redistribute.side(nbytes, itemsize, n)
        return b, redistribute.row_bytes(b, n, itemsize)
    if coll in vrows.COLLS:
        per = nbytes // itemsize // n
        return per, vrows.row_bytes(coll, per, n, itemsize)
    if coll in ('reduce_scatter_block', 'allgather'):
        per = nbytes // itemsize // n
        return per, per * n * itemsize
    c = nbytes // itemsize
    return c, c * itemsize


class GcPauses:
    """Python's garbage collections while it is entered (gc.callbacks): how many, how many of them
    full (generation 2), and their seconds. A full collection of a large heap stops a rank for
    milliseconds, which a 20-call average shows as one very slow row; this tells such a row apart."""

    def __init__(self):
        self.count = self.full = 0
        self.seconds = 0.0
        self._t0 = 0.0

    def _callback(self, phase, info):
        if phase == 'start':
            self._t0 = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._t0
        self.count += 1
        self.full += info.get('generation') == 2

    def __enter__(self):
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)
        return False

    def worst(self, comm):
        """{'gc_collections', 'gc_full', 'gc_pause_us'}: each the largest over the ranks."""
        return {'gc_collections': comm.allreduce(self.count, op=_MAX()),
                'gc_full': comm.allreduce(self.full, op=_MAX()),
                'gc_pause_us': comm.allreduce(self.seconds, op=_MAX()) * 1e6}


def time_blocking(comm, fn, iters, warmup, pauses=None):
    """Seconds per call: `fn` runs a blocking collective; the slowest rank's average. `pauses`
    (GcPauses) watches the timed calls."""
    for _ in range(warmup):
        fn()
    comm.Barrier()
    with pauses or contextlib.nullcontext():
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        dt = (time.perf_counter() - t0) / max(iters, 1)
    return comm.allreduce(dt, op=_MAX())


def time_blocking_calls(comm, fn, iters, warmup):
    """(median, slowest) seconds of one blocking call, each call timed alone: the slowest rank's of
    each. A row's average hides whether it is one stall or a slow steady state; this shows which."""
    for _ in range(warmup):
        fn()
    comm.Barrier()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    median, slowest = (times[len(times) // 2], times[-1]) if times else (0.0, 0.0)
    return comm.allreduce(median, op=_MAX()), comm.allreduce(slowest, op=_MAX())


def time_interleaved(comm, fns, iters, warmup, rounds, pauses=None):
    """Seconds per call of each of `fns` (blocking calls), timed in `rounds` alternating rounds of
    iters[i] calls of fns[i] (after warmup[i] calls; the order reversed every other round): the best
    round of each, a round's
    time being the slowest rank's average. Load from other processes comes and goes: timing two
    implementations one after the other gives each a different share of it, and on a busy machine a
    rank that loses its core for a time slice makes a whole round of microsecond calls slow. The
    best round of each, taken from rounds that alternate, compares the two at their least disturbed,
    so their ratio shows what one adds to the other. `pauses`: a GcPauses per fn."""
    for fn, w in zip(fns, warmup):
        for _ in range(w):
            fn()
    local = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else range(len(fns) - 1, -1, -1)
        for i in order:
            comm.Barrier()
            with pauses[i] if pauses else contextlib.nullcontext():
                t0 = time.perf_counter()
                for _ in range(iters[i]):
                    fns[i]()
                local[i].append((time.perf_counter() - t0) / max(iters[i], 1))
    return [min(comm.allreduce(t, op=_MAX()) for t in ts) for ts in local]


def time_stream(comm, launch, sync, iters, warmup, pauses=None):
    """Seconds per call when `launch` only enqueues: back-to-back launches, one `sync` at the end."""
    for _ in range(warmup):
        launch()
    sync()
    comm.Barrier()
    with pauses or contextlib.nullcontext():
        t0 = time.perf_counter()
        for _ in range(iters):
            launch()
        sync()
        dt = (time.perf_counter() - t0) / max(iters, 1)
    return comm.allreduce(dt, op=_MAX())


def _MAX():
    from mpi4py import MPI
    return MPI.MAX


def plan_iters(comm, fn, iters, budget_s):
    """Iterations that fit the time budget of one row (agreed by all ranks): slow baselines at large
    sizes (the staged path at 1 GB) would otherwise take minutes. The second call is the one timed:
    a row's first call may carry one-time setup (a communicator's team, NCCL's communicator, module
    loading), which cut the first row to 1-3 iterations."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = comm.allreduce(time.perf_counter() - t0, op=_MAX())
    return max(1, min(iters, int(budget_s / max(one, 1e-9))))
