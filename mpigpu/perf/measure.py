"""One row's measurements: an implementation's calls timed and checked, alone or in alternating rounds
with the baselines' (so their ratios compare the same moments, not the load; on host buffers, plain
mpi4py's ratio shows what mpigpu adds)."""
import numpy as np

from . import baselines, sweep


class Measure:
    """Times and checks rows for the options `a` (mpigpu-perf's) on communicator `comm`, buffers of
    the array module `xp` (numpy: host memory; cupy: the GPU)."""

    def __init__(self, comm, a, xp):
        self.comm, self.a, self.xp = comm, a, xp
        self.n, self.rank = comm.Get_size(), comm.Get_rank()
        self.streamed = a.timing == 'stream'

    def _blocking(self, made):
        """The one-call function of what Impl.make returned."""
        if not self.streamed:
            return made
        launch, sync = made

        def fn():
            launch()
            sync()
        return fn

    def one(self, impl, b, op):
        """{'time_us', 'iters', 'wrong', gc figures, ...} of `impl` on buffers `b`, or {'error'}."""
        try:
            made = impl.make(b, op, self.streamed)
        except baselines.Unavailable as exc:
            return {'error': str(exc)}
        fn = self._blocking(made)
        a, comm = self.a, self.comm
        k = min(a.iters, sweep.plan_iters(comm, fn, a.iters, a.budget))
        pauses = sweep.GcPauses()
        if self.streamed:
            t = sweep.time_stream(comm, made[0], made[1], k, min(a.warmup_iters, k), pauses)
        else:
            t = sweep.time_blocking(comm, fn, k, min(a.warmup_iters, k), pauses)
        res = {'time_us': t * 1e6, 'iters': k, **pauses.worst(comm)}
        self._finish(res, impl, b, op, fn)
        return res

    def interleaved(self, impls, bufs, op):
        """The results of several implementations (blocking calls, on buffers `bufs`, one per
        implementation: mpigpu-perf gives them all the same ones), timed in alternating rounds (sweep.time_interleaved); one that is unavailable gets {'error'}."""
        a, comm = self.a, self.comm
        out, fns = [None] * len(impls), []
        for i, (impl, b) in enumerate(zip(impls, bufs)):
            try:
                fns.append((i, impl.make(b, op, False)))
            except baselines.Unavailable as exc:
                out[i] = {'error': str(exc)}
        if not fns:
            return out
        # each its own calls per round: a slow baseline (the staged path at 1 GB) must not cut the
        # calls of a fast one
        ks = [min(a.iters, sweep.plan_iters(comm, fn, a.iters, a.budget / a.rounds)) for _, fn in fns]
        pauses = [sweep.GcPauses() for _ in fns]
        times = sweep.time_interleaved(comm, [fn for _, fn in fns], ks, [min(a.warmup_iters, k) for k in ks],
                                       a.rounds, pauses)
        for (i, fn), t, p, k in zip(fns, times, pauses, ks):
            res = {'time_us': t * 1e6, 'iters': k, 'rounds': a.rounds, **p.worst(comm)}
            self._finish(res, impls[i], bufs[i], op, fn)
            out[i] = res
        return out

    def _finish(self, res, impl, b, op, fn):
        """--calls figures and the check's count of wrong elements (None without --check)."""
        a, comm = self.a, self.comm
        if a.calls and not self.streamed:
            median, slowest = sweep.time_blocking_calls(comm, fn, res['iters'], 0)
            res['median_us'], res['slowest_us'] = median * 1e6, slowest * 1e6
        res['wrong'] = self.wrong(impl, b, op) if a.check and getattr(impl, 'checks', True) else None

    def wrong(self, impl, b, op):
        """Elements of a fresh call's result that differ from the expected one, summed over the ranks."""
        b2 = baselines.make_buffers(self.xp, b.coll, b.count, b.send.dtype, self.n, self.rank, b.inplace, b.root)
        self._blocking(impl.make(b2, op, self.streamed))()
        copy = getattr(impl, 'copy_result', None)  # an implementation that runs on buffers of its own
        if copy is not None:
            copy(b2)
        if b.coll == 'reduce' and self.rank != b.root:
            wrong = 0
        else:
            got, exp = b2.result(), b2.expected(op)
            wrong = int(np.count_nonzero(got.astype(np.float64) != exp.astype(np.float64)))
        return self.comm.allreduce(wrong)
