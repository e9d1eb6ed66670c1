"""Reduce_scatter, Scan and Exscan on device buffers (mpigpu/_paths/exchange_reduce.py): blocks gathered
over the exchange transport into rows, reduced on the GPU in rank order. Uneven and zero counts, in
place, buffer specifications, several ops and element types, on every rank's device, on the host and
mixed across ranks; blocking, I*, *_init and stream= forms; each result compared with plain mpi4py's on host
copies (integers and small integral floats: exactly). Where every rank brought device buffers the call
must have taken the transport, except what it leaves to the mirrors (an op it does not reduce, counts
not given), which must not have.

Runs on CPUs with the fake CUDA layer (EXCHANGE_ENGINE=1) and on GPUs with MPIGPU_CHECK_ON_GPU=1, under
mpiexec -n 1..6.
"""
import numpy as np
from mpi4py import MPI

from exchange_common import PLACEMENTS, engine, exchange, nonblocking, one_node, persistent, placed, streamed, values
import mpigpu  # noqa: E402
from mpigpu._base.config import config  # noqa: E402

plain = MPI.COMM_WORLD
comm = mpigpu.COMM_WORLD
rank, n = plain.Get_rank(), plain.Get_size()
transport = engine and one_node and config.exchange
TYPES = {'int32': (np.int32, MPI.INT), 'float64': (np.float64, MPI.DOUBLE)}
OPS = {'sum': MPI.SUM, 'max': MPI.MAX, 'prod': MPI.PROD, 'band': MPI.BAND}


def data(count, dtype, seed):
    return ((np.arange(count) * 3 + 7 * seed + 1) % 5 + 1).astype(dtype)


def reduce_scatter(dev, dtype, mpi_type, op, form, in_place):
    counts = [(p * 2 + 1) % 4 for p in range(n)]  # uneven, some zero
    total = sum(counts)
    s = data(total, dtype, rank)
    r = np.full(total if in_place else counts[rank], -1, dtype)
    if in_place:
        r[:] = s
    wrap = (lambda b, c: [b, c, mpi_type]) if form == 'spec' else (lambda b, c: b)
    send_a = MPI.IN_PLACE if in_place else wrap(placed(s, dev), total)
    send_b = MPI.IN_PLACE if in_place else wrap(s.copy(), total)
    rc = len(r)
    return [send_a, wrap(placed(r, dev), rc), counts, op], [send_b, wrap(r.copy(), rc), counts, op]


def scan(dev, dtype, mpi_type, op, form, in_place):
    count = 5
    s = data(count, dtype, rank)
    r = s.copy() if in_place else np.full(count, -1, dtype)
    wrap = (lambda b: [b, count, mpi_type]) if form == 'spec' else (lambda b: b)
    send_a = MPI.IN_PLACE if in_place else wrap(placed(s, dev))
    send_b = MPI.IN_PLACE if in_place else wrap(s.copy())
    return [send_a, wrap(placed(r, dev)), op], [send_b, wrap(r.copy()), op]


def output(args):
    x = args[1]
    return x[0] if type(x) in (list, tuple) else x


checks = 0
for name, build in (('Reduce_scatter', reduce_scatter), ('Scan', scan), ('Exscan', scan)):
    for tname, (dtype, mpi_type) in TYPES.items():
        for oname, op in OPS.items():
            if oname == 'band' and tname == 'float64':
                continue  # MPI defines BAND for integers only
            for form in ('bare', 'spec'):
                for in_place in (False, True):
                    for placement, on in PLACEMENTS.items():
                        dev = on(rank, 0)
                        a, b = build(dev, dtype, mpi_type, op, form, in_place)
                        before = exchange.calls()
                        getattr(comm, name)(*a)
                        taken = exchange.calls() - before
                        getattr(plain, name)(*b)
                        how = f'{form}{" in place" if in_place else ""}'
                        where = f'{name} {tname} {oname} {how}, {placement}, rank {rank}'
                        if not (name == 'Exscan' and rank == 0):  # MPI defines nothing there
                            got, want = values(output(a)), values(output(b))
                            assert np.array_equal(got, want), f'{where}: {got} != {want}'
                            checks += 1
                        expect = int(transport and all(on(p, 0) for p in range(n)))
                        assert taken == expect, f'{where}: exchange path taken {taken} times, expected {expect}'
                        checks += 1
                        k = None if name == 'Exscan' and rank == 0 else 1

                        def again(d, root, build=build, args=(dtype, mpi_type, op, form, in_place), k=k):
                            return (*build(d, *args), k)
                        checks += nonblocking(comm, plain, name, again, dev, 0, k, where, expect)
                        checks += persistent(comm, plain, name, again, dev, 0, where, expect, 1 if in_place else 2)
                        checks += streamed(comm, plain, name, again, dev, 0, where, expect)

# What the mirrors take: an op the device does not reduce, Reduce_scatter without counts; MPI's
# results all the same
pair = np.array([3 + rank % 2, rank], np.int32)
for placement, on in PLACEMENTS.items():
    dev = on(rank, 0)
    a, b = placed(pair, dev), np.full(2, -1, np.int32)
    got = placed(np.full(2, -1, np.int32), dev)
    before = exchange.calls()
    comm.Scan([a, 1, MPI.TWOINT], [got, 1, MPI.TWOINT], MPI.MAXLOC)
    plain.Scan([pair.copy(), 1, MPI.TWOINT], [b, 1, MPI.TWOINT], MPI.MAXLOC)
    assert np.array_equal(values(got), b) and exchange.calls() == before, f'Scan MAXLOC, {placement}, rank {rank}'
    s = data(n, np.int32, rank)
    got, want = placed(np.full(1, -1, np.int32), dev), np.full(1, -1, np.int32)
    comm.Reduce_scatter(placed(s, dev), got)
    plain.Reduce_scatter(s.copy(), want)
    assert np.array_equal(values(got), want) and exchange.calls() == before, f'Reduce_scatter, no counts, {placement}'
    checks += 2

total = plain.allreduce(checks)
if rank == 0:
    print(f'exchange reductions on {n} ranks: {total} checks identical to mpi4py '
          f'({"the exchange transport" if transport else "the host MPI call"})')
