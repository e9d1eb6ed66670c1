"""mpigpu-perf: nccl-tests-style benchmark of mpigpu, with baselines in the same run.

    mpiexec -n 4 mpigpu-perf -b 8 -e 1G -f 4 --compare nccl,staged
    mpiexec -n 2 mpigpu-perf                 # host buffers on a machine without GPUs
"""
import argparse
import sys

import numpy as np

_TYPES = ('float32', 'float64', 'float16', 'int32', 'int64', 'int8', 'uint8')
_OPS = ('sum', 'prod', 'max', 'min')


def _args(argv):
    from .._config import ALGOS
    from .sweep import COLLS
    p = argparse.ArgumentParser(prog='mpigpu-perf', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('collective', nargs='?', default='allreduce',
                   help=f'one of {", ".join(COLLS)}, a comma list, or all (default allreduce)')
    p.add_argument('-b', '--minbytes', default='8', help='smallest size (K/M/G suffixes), default 8')
    p.add_argument('-e', '--maxbytes', default='32M', help='largest size, default 32M')
    p.add_argument('-f', '--stepfactor', type=int, default=2, help='size multiplication factor, default 2')
    p.add_argument('-d', '--datatype', default='float32', help=f'{", ".join(_TYPES)} or all')
    p.add_argument('-o', '--op', default='sum', help=f'{", ".join(_OPS)} or all')
    p.add_argument('-r', '--root', type=int, default=0, help='root of bcast/reduce')
    p.add_argument('-n', '--iters', type=int, default=20, help='timed iterations per row')
    p.add_argument('-w', '--warmup_iters', type=int, default=5, help='warm-up iterations per row')
    p.add_argument('-c', '--check', type=int, default=1, help='check results (1) or not (0)')
    p.add_argument('--mem', choices=('auto', 'host', 'device'), default='auto',
                   help='buffers on the GPU (device) or in host memory; auto: device where GPUs exist')
    p.add_argument('--algo', default=None, choices=ALGOS, help='force an engine algorithm (as MPIGPU_ALGO)')
    p.add_argument('--inplace', type=int, default=1, help='also time in-place calls (1) or not (0)')
    p.add_argument('--compare', default='', help='baselines in the same run: nccl,staged,cuda-aware-mpi')
    p.add_argument('--timing', choices=('blocking', 'stream'), default='blocking',
                   help='blocking: each call returns with its result (MPI); stream: stream= calls launched '
                        'back to back, one synchronization per row (nccl-tests\' way)')
    p.add_argument('--budget', type=float, default=2.0, help='seconds at most per baseline row (fewer iterations)')
    p.add_argument('--calls', action='store_true',
                   help='blocking timing: also time each call alone, in a second pass, and print the median '
                        'and slowest call of every row (a comment line after it; in the JSON too)')
    p.add_argument('--json', default=None, help='write every row, the command line and the host here')
    p.add_argument('--plot', default=None, help='write busbw/time plots (PNG) here; needs matplotlib')
    return p.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = _args(argv)
    import mpigpu
    from . import baselines, report, sweep
    comm = mpigpu.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()

    mem = a.mem
    xp = np
    if mem in ('auto', 'device'):
        ok, why = mpigpu.gpu_available()
        try:
            import cupy
        except ImportError:
            cupy, ok, why = None, False, 'CuPy is not installed'
        if ok:
            cupy.cuda.Device(rank % cupy.cuda.runtime.getDeviceCount()).use()
            xp, mem = cupy, 'device'
            # A first GPU collective sets up the device team (collectively); point-to-point goes GPU
            # to GPU only on a communicator whose team is up.
            comm.Allreduce(cupy.zeros(1, cupy.float32), cupy.zeros(1, cupy.float32))
        elif mem == 'device':
            if rank == 0:
                print(f'mpigpu-perf: --mem device: {why}', file=sys.stderr)
            return 2
        else:
            mem = 'host'
    if a.algo:
        mpigpu.config.algo = a.algo
    colls = sweep.COLLS if a.collective == 'all' else a.collective.split(',')
    for c in colls:
        if c not in sweep.COLLS:
            print(f'mpigpu-perf: unknown collective {c!r}', file=sys.stderr)
            return 2
    types = _TYPES if a.datatype == 'all' else a.datatype.split(',')
    ops = _OPS if a.op == 'all' else a.op.split(',')
    names = [x for x in a.compare.split(',') if x]
    for x in names:
        if x not in baselines.IMPLS:
            print(f'mpigpu-perf: unknown baseline {x!r} (choose from {", ".join(baselines.IMPLS)})', file=sys.stderr)
            return 2
    impls = {}
    for x in names:
        try:
            impls[x] = baselines.IMPLS[x](comm)
        except Exception as exc:  # a baseline that cannot start must not stop the others
            impls[x] = exc
    mine = baselines.MpigpuImpl(comm)
    sizes = sweep.sizes(sweep.parse_size(a.minbytes), sweep.parse_size(a.maxbytes), a.stepfactor)

    def measure(impl, b, op, iters):
        streamed = a.timing == 'stream'
        try:
            made = impl.make(b, op, streamed)
        except baselines.Unavailable as exc:
            return {'error': str(exc)}
        if streamed:
            launch, sync = made

            def fn():
                launch()
                sync()
        else:
            fn = made
        k = min(iters, sweep.plan_iters(comm, fn, iters, a.budget))
        pauses = sweep.GcPauses()
        if streamed:
            t = sweep.time_stream(comm, launch, sync, k, min(a.warmup_iters, k), pauses)
        else:
            t = sweep.time_blocking(comm, fn, k, min(a.warmup_iters, k), pauses)
        res = {'time_us': t * 1e6, 'iters': k, **pauses.worst(comm)}
        if a.calls and not streamed:
            median, slowest = sweep.time_blocking_calls(comm, fn, k, 0)
            res['median_us'], res['slowest_us'] = median * 1e6, slowest * 1e6
        wrong = None
        if a.check:
            b2 = baselines.Buffers(xp, b.coll, b.count, b.send.dtype, n, rank, b.inplace, b.root)
            fn2 = impl.make(b2, op, streamed)
            if streamed:
                fn2[0]()
                fn2[1]()
            else:
                fn2()
            got = b2.result()
            exp = b2.expected(op)
            if b.coll == 'reduce' and rank != b.root:
                wrong = 0
            else:
                wrong = int(np.count_nonzero(got.astype(np.float64) != exp.astype(np.float64)))
            wrong = comm.allreduce(wrong)
        res['wrong'] = wrong
        return res

    rows = []
    if rank == 0:
        print(f'# mpigpu-perf: {n} ranks, {mem} buffers, engine algo {mpigpu.config.algo}, '
              f'{a.timing} timing, baselines: {", ".join(names) or "none"}')
    for coll in colls:
        rcoll_ops = ops if coll in ('allreduce', 'reduce', 'reduce_scatter_block') else ['none']
        for dtype in types:
            itemsize = np.dtype(dtype).itemsize
            for op in rcoll_ops:
                if rank == 0:
                    print(f'#\n# Collective test: {coll}  type {dtype}  op {op}\n' + report.header(names))
                for nbytes in sizes:
                    count, row_bytes = sweep.counts(coll, nbytes, itemsize, n)
                    if rank == 0:
                        print(f'[mpigpu-perf] {coll} {dtype} {op} {row_bytes} B', file=sys.stderr, flush=True)
                    root = a.root if coll in ('bcast', 'reduce') else -1
                    bop = 'sum' if op == 'none' else op
                    row = {'coll': coll, 'bytes': row_bytes, 'count': count, 'type': dtype, 'redop': op,
                           'root': root, 'baselines': {}}
                    algbw = lambda t: row_bytes / t / 1e3 if t > 0 else 0.0
                    for inplace in (False, True):
                        if inplace and (not a.inplace or coll in ('bcast', 'sendrecv')):
                            row['ip'] = None
                            continue
                        b = baselines.Buffers(xp, coll, count, dtype, n, rank, inplace, max(root, 0))
                        res = measure(mine, b, bop, a.iters)
                        if 'time_us' in res:
                            res['algbw'] = algbw(res['time_us'])
                            res['busbw'] = res['algbw'] * sweep.bus_factor(coll, n)
                        row['ip' if inplace else 'oop'] = res
                    for name, impl in impls.items():
                        if isinstance(impl, Exception):
                            row['baselines'][name] = {'error': f'{type(impl).__name__}: {impl}'}
                            continue
                        b = baselines.Buffers(xp, coll, count, dtype, n, rank, False, max(root, 0))
                        res = measure(impl, b, bop, a.iters)
                        if 'time_us' in res:
                            res['algbw'] = algbw(res['time_us'])
                            res['busbw'] = res['algbw'] * sweep.bus_factor(coll, n)
                        row['baselines'][name] = res
                    rows.append(row)
                    if rank == 0:
                        print(report.line(row, names), flush=True)
                        if a.calls and a.timing == 'blocking':
                            print(report.calls_line(row, names), flush=True)
                        if report.gc_pause_shows(row, names):
                            print(report.gc_line(row, names), flush=True)
    wrong = 0
    if rank == 0:
        text, wrong = report.footer(rows)
        print(text)
        if a.json:
            report.write_json(a.json, ['mpigpu-perf'] + list(argv), rows, n, mem)
        if a.plot:
            err = report.plot(a.plot, rows, f'mpigpu-perf, {n} ranks, {mem} buffers')
            if err:
                print(f'# {err}', file=sys.stderr)
    wrong = comm.bcast(wrong, root=0)
    return 1 if wrong else 0


if __name__ == '__main__':
    sys.exit(main())
