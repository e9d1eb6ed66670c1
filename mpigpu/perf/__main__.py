"""mpigpu-perf: nccl-tests-style benchmark of mpigpu, with baselines in the same run.

    mpiexec -n 4 mpigpu-perf -b 8 -e 1G -f 4 --compare nccl,staged
    mpiexec -n 2 mpigpu-perf                 # host buffers on a machine without GPUs

On GPU buffers each row shows mpigpu's device engine and the --compare baselines (ratio columns:
baseline's time / mpigpu's, above 1 where mpigpu is faster). On host buffers mpigpu hands the
buffers to mpi4py unchanged (the device engine is not involved): each row then shows mpigpu against
plain mpi4py on the same communicator, timed in alternating rounds (the best of each), and the ratio is the overhead
mpigpu adds (1.00x: none).
"""
import sys

import numpy as np

from .._face.cli import UsageError, say, usage_error
from . import options
from .vrows import COLLS as EXCHANGE_COLLS

# The rows with no in-place column: bcast and the point-to-point rows have no such form; the exchange rows time the
# out-of-place calls only (--inplace applies to the reductions and allgather).
OUT_OF_PLACE_ONLY = ('bcast', 'sendrecv', 'pingpong', 'halo') + EXCHANGE_COLLS


def _memory(a, comm, rank):
    """(array module, 'device' | 'host'), or raises UsageError for --mem device without a GPU."""
    import mpigpu
    if a.mem == 'host':
        return np, 'host'
    ok, why = mpigpu.gpu_available()
    try:
        import cupy
    except ImportError:
        cupy, ok, why = None, False, 'CuPy is not installed'
    if not ok:
        if a.mem == 'device':
            raise UsageError(f'--mem device: {why}')
        return np, 'host'
    cupy.cuda.Device(rank % cupy.cuda.runtime.getDeviceCount()).use()
    # A first GPU collective sets up the device team (collectively); point-to-point goes GPU to GPU
    # only on a communicator whose team is up.
    comm.Allreduce(cupy.zeros(1, cupy.float32), cupy.zeros(1, cupy.float32))
    return cupy, 'device'


def _title(n, mem, a, names):
    import mpigpu
    if mem == 'host':
        return (f'# mpigpu-perf: {n} ranks, host buffers, {a.timing} timing.\n'
                f'# Host buffers go to MPI unchanged: the device engine is not involved. Each row times\n'
                f'# mpigpu and plain mpi4py in {a.rounds} alternating rounds (the best round of each);\n'
                f'# x{"mpi4py":<7}= mpi4py\'s time / mpigpu\'s: the overhead mpigpu adds (1.00x: none).\n'
                f'# Baselines: {", ".join(names)}')
    return (f'# mpigpu-perf: {n} ranks, {mem} buffers, engine algo {mpigpu.config.algo}, '
            f'{a.timing} timing, baselines: {", ".join(names) or "none"}\n' + (
                f'# mpigpu and the baselines are timed in {a.rounds} alternating rounds (the best round of each)\n'
                if names and a.timing == 'blocking' else '') +
            f'# engine: {mpigpu.COMM_WORLD.engine_status()}' + (
                '\n# [rail] / [leader] after a row: the hierarchical form that ran (docs/architecture.md)'
                if mpigpu.COMM_WORLD.engine_status().startswith('hierarchical') else ''))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    from . import baselines
    from .impls import IMPLS
    try:
        a = options.parse(argv, __doc__, IMPLS)
    except UsageError as exc:
        return usage_error(options.PROG, exc, options.HINT)
    import mpigpu
    from . import report, sweep
    from .measure import Measure
    comm = mpigpu.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    try:
        options.check_root(a, n)
        xp, mem = _memory(a, comm, rank)
    except UsageError as exc:
        return usage_error(options.PROG, exc, options.HINT)
    if a.algo:
        mpigpu.config.algo = a.algo
    names = list(a.names)
    if mem == 'host' and 'mpi4py' not in names:
        names.insert(0, 'mpi4py')
    impls = {}
    for x in names:
        try:
            impls[x] = IMPLS[x](comm)
        except Exception as exc:  # a baseline that cannot start must not stop the others
            impls[x] = exc
    mine = baselines.MpigpuImpl(comm)
    measure = Measure(comm, a, xp)
    sizes = sweep.sizes(a.minbytes, a.maxbytes, a.stepfactor)

    rows = []
    say(_title(n, mem, a, names))
    for coll in a.colls:
        rcoll_ops = a.ops if coll in ('allreduce', 'reduce', 'reduce_scatter_block') else ['none']
        for dtype in a.types:
            itemsize = np.dtype(dtype).itemsize
            for op in rcoll_ops:
                say(f'#\n# Collective test: {coll}  type {dtype}  op {op}\n' + report.header(names))
                for nbytes in sizes:
                    count, row_bytes = sweep.counts(coll, nbytes, itemsize, n)
                    say(f'[mpigpu-perf] {coll} {dtype} {op} {row_bytes} B', sys.stderr)
                    root = a.root if coll in options.ROOTED else -1
                    bop = 'sum' if op == 'none' else op
                    row = {'coll': coll, 'bytes': row_bytes, 'count': count, 'type': dtype, 'redop': op,
                           'root': root, 'baselines': {}}
                    across = coll in sweep.ENGINE_COLLS  # the collectives the hierarchical path runs
                    if across:
                        baselines.forget_form(comm)

                    def buffers(inplace):
                        return baselines.make_buffers(xp, coll, count, dtype, n, rank, inplace, max(root, 0))

                    # mpigpu and its baselines in alternating rounds (blocking timing): each ratio then
                    # compares the two at the same moments (on host buffers, what mpigpu adds), on the
                    # same buffers: where a buffer lies changes a large copy's time for every
                    # implementation alike (one H200, 512 MB: the driver's copy 263.6 us on the pair
                    # allocated first, 262.3 on the next; docs/benchmarks.md, one rank)
                    paired = [] if measure.streamed else [
                        x for x, impl in impls.items() if not isinstance(impl, Exception)]
                    if paired:
                        shared = buffers(False)
                        res = measure.interleaved([mine] + [impls[x] for x in paired],
                                                  [shared] * (len(paired) + 1), bop)
                        row['oop'] = res[0]
                        row['baselines'].update(zip(paired, res[1:]))
                    else:
                        row['oop'] = measure.one(mine, buffers(False), bop)
                    if a.inplace and coll not in OUT_OF_PLACE_ONLY:
                        row['ip'] = measure.one(mine, buffers(True), bop)
                    else:
                        row['ip'] = None
                    for name, impl in impls.items():
                        if name in row['baselines']:
                            continue
                        if isinstance(impl, Exception):
                            row['baselines'][name] = {'error': f'{type(impl).__name__}: {impl}'}
                        else:
                            row['baselines'][name] = measure.one(impl, buffers(False), bop)
                    row['form'] = baselines.form_of(comm) if across else None
                    row['predicted_us'] = baselines.predicted_us(comm, coll, count, itemsize) if across else None
                    for res in [row['oop'], row['ip'], *row['baselines'].values()]:
                        if res and 'time_us' in res:
                            res['algbw'] = row_bytes / res['time_us'] / 1e3 if res['time_us'] > 0 else 0.0
                            res['busbw'] = res['algbw'] * sweep.bus_factor(coll, n)
                    rows.append(row)
                    say(report.line(row, names))
                    if a.calls and a.timing == 'blocking':
                        say(report.calls_line(row, names))
                    if report.gc_pause_shows(row, names):
                        say(report.gc_line(row, names))
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
