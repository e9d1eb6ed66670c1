"""The all-to-all family on device buffers (mpigpu/_paths/exchange.py): Alltoall, Alltoallv, Allgatherv,
Gather, Gatherv, Scatter and Scatterv, in the buffer forms programs use (bare arrays, counts and
displacements, displacements out of order, in place, zero counts, every root; blocking, I*, *_init and stream=), on every rank's device,
on the host, and mixed across ranks; each result compared with plain mpi4py's on host copies (int32:
exactly). Where every rank brought device buffers the call must have taken the exchange transport (the
path's counter), elsewhere the host MPI call.

Runs on CPUs with the fake CUDA layer (EXCHANGE_ENGINE=1: the fake engine of fake_engine.py, whose ranks
meet in shared memory, never in MPI) and on GPUs with MPIGPU_CHECK_ON_GPU=1 (CuPy), under mpiexec -n 1..6.
"""
import numpy as np
from mpi4py import MPI

from exchange_common import (PLACEMENTS, compared, cp, device, engine, exchange, nonblocking, one_node, output,
                             persistent, placed, streamed, values)
import mpigpu  # noqa: E402
from mpigpu._base.config import config  # noqa: E402

plain = MPI.COMM_WORLD
comm = mpigpu.COMM_WORLD
rank, n = plain.Get_rank(), plain.Get_size()
checks = 0


def spec(buf, form, counts, displs):
    """`buf` in one of mpi4py's message forms."""
    if form == 'bare':
        return buf
    if form == 'pair':
        return [buf, (counts, displs), MPI.INT]
    if form == 'four':
        return [buf, counts, displs, MPI.INT]
    if form == 'numpy':  # counts and displacements as arrays, as mpi4py's chkarray takes them
        return [buf, (np.array(counts), np.array(displs)), MPI.INT]
    return [buf, counts, MPI.INT]  # 'counts': displacements packed in order


def v_layout(counts, order):
    """Displacements of blocks of `counts`: packed in rank order, or in reverse order with a gap of one
    element after each (out of order); and the buffer's length."""
    displs, at = [0] * len(counts), 0
    for p in (range(len(counts)) if order == 'in order' else reversed(range(len(counts)))):
        displs[p] = at
        at += counts[p] + (order != 'in order')
    return displs, at


def cases():
    """(name, description, builder) for every case; builder(on_device, root) -> (args for mpigpu, args
    for plain mpi4py, index of the output among them or None for the root-less ranks' nothing)."""
    c = 3
    for count in (c, 0):
        def alltoall(dev, root, form, count=count):
            s = (np.arange(n * count, dtype=np.int32) + 100 * rank)
            r = np.full(n * count, -1, np.int32)
            a = [spec(placed(s, dev), form, count, None), spec(placed(r, dev), form, count, None)]
            b = [spec(s.copy(), form, count, None), spec(r.copy(), form, count, None)]
            return a, b, 1
        for form in ('bare', 'counts'):
            yield 'Alltoall', f'count {count}, {form}', lambda d, rt, f=form, g=alltoall: g(d, rt, f)
    for order in ('in order', 'out of order'):
        for form in ('pair', 'four', 'counts', 'numpy'):
            if form == 'counts' and order != 'in order':
                continue

            def alltoallv(dev, root, order=order, form=form):
                # zero-count blocks between some pairs, never a rank with nothing at all (the fake layer
                # reads an empty array as host memory)
                scounts = [(rank + p) % 3 + (p == rank) for p in range(n)]
                rcounts = [(p + rank) % 3 + (p == rank) for p in range(n)]
                sd, slen = v_layout(scounts, order)
                rd, rlen = v_layout(rcounts, order)
                s = np.arange(slen, dtype=np.int32) + 1000 * rank
                r = np.full(rlen, -1, np.int32)
                a = [spec(placed(s, dev), form, scounts, sd), spec(placed(r, dev), form, rcounts, rd)]
                b = [spec(s.copy(), form, scounts, sd), spec(r.copy(), form, rcounts, rd)]
                return a, b, 1
            yield 'Alltoallv', f'{order}, {form}', alltoallv

    # in place: each block is sent from where the block from that rank lands (exchange_in_place)
    def alltoall_in_place(dev, root):
        r = np.arange(n * c, dtype=np.int32) + 100 * rank
        return [MPI.IN_PLACE, placed(r, dev)], [MPI.IN_PLACE, r.copy()], 1
    yield 'Alltoall', 'in place', alltoall_in_place
    for order in ('in order', 'out of order'):
        def alltoallv_in_place(dev, root, order=order):
            counts = [(rank + p) % 3 + 1 for p in range(n)]  # symmetric: what p sends me, I send p
            displs, rlen = v_layout(counts, order)
            r = np.arange(rlen, dtype=np.int32) + 1000 * rank
            return ([MPI.IN_PLACE, [placed(r, dev), (counts, displs), MPI.INT]],
                    [MPI.IN_PLACE, [r.copy(), (counts, displs), MPI.INT]], 1)
        yield 'Alltoallv', f'in place, {order}', alltoallv_in_place
    for in_place in (False, True):
        def allgatherv(dev, root, in_place=in_place):
            counts = [p % 3 + 1 for p in range(n)]
            displs, rlen = v_layout(counts, 'out of order')
            s = np.arange(counts[rank], dtype=np.int32) + 10 * rank
            r = np.full(rlen, -1, np.int32)
            if in_place:
                r[displs[rank]:displs[rank] + counts[rank]] = s
            a = [MPI.IN_PLACE if in_place else placed(s, dev), [placed(r, dev), (counts, displs), MPI.INT]]
            b = [MPI.IN_PLACE if in_place else s.copy(), [r.copy(), (counts, displs), MPI.INT]]
            return a, b, 1
        yield 'Allgatherv', 'in place' if in_place else 'out of place', allgatherv
    for in_place in (False, True):
        def gather(dev, root, in_place=in_place):
            s = np.arange(c, dtype=np.int32) + 10 * rank
            r = np.full(n * c, -1, np.int32)
            ip = in_place and rank == root
            if ip:
                r[root * c:(root + 1) * c] = s
            a = [MPI.IN_PLACE if ip else placed(s, dev), placed(r, dev) if rank == root else None, root]
            b = [MPI.IN_PLACE if ip else s.copy(), r.copy() if rank == root else None, root]
            return a, b, 1 if rank == root else None
        yield 'Gather', 'in place' if in_place else 'out of place', gather

        def gatherv(dev, root, in_place=in_place):
            counts = [p % 3 + 1 for p in range(n)]
            displs, rlen = v_layout(counts, 'out of order')
            s = np.arange(counts[rank], dtype=np.int32) + 10 * rank
            r = np.full(rlen, -1, np.int32)
            ip = in_place and rank == root
            if ip:
                r[displs[rank]:displs[rank] + counts[rank]] = s
            rv = [placed(r, dev), (counts, displs), MPI.INT] if rank == root else None
            a = [MPI.IN_PLACE if ip else placed(s, dev), rv, root]
            b = [MPI.IN_PLACE if ip else s.copy(), [r.copy(), (counts, displs), MPI.INT] if rank == root else None, root]
            return a, b, 1 if rank == root else None
        yield 'Gatherv', 'in place' if in_place else 'out of place', gatherv

        def scatter(dev, root, in_place=in_place):
            s = np.arange(n * c, dtype=np.int32) + 7
            r = np.full(c, -1, np.int32)
            ip = in_place and rank == root
            a = [placed(s, dev) if rank == root else None, MPI.IN_PLACE if ip else placed(r, dev), root]
            b = [s.copy() if rank == root else None, MPI.IN_PLACE if ip else r.copy(), root]
            return a, b, (0 if ip else 1)
        yield 'Scatter', 'in place' if in_place else 'out of place', scatter

        def scatterv(dev, root, in_place=in_place):
            counts = [(p + 1) % 3 + 1 for p in range(n)]
            displs, slen = v_layout(counts, 'out of order')
            s = np.arange(slen, dtype=np.int32) + 7
            r = np.full(counts[rank], -1, np.int32)
            ip = in_place and rank == root
            sv = [placed(s, dev), (counts, displs), MPI.INT] if rank == root else None
            a = [sv, MPI.IN_PLACE if ip else placed(r, dev), root]
            b = [[s.copy(), (counts, displs), MPI.INT] if rank == root else None, MPI.IN_PLACE if ip else r.copy(), root]
            return a, b, (0 if ip else 1)
        yield 'Scatterv', 'in place' if in_place else 'out of place', scatterv


PAIR = MPI.INT.Create_contiguous(2).Commit()  # Alltoallw's second datatype (freed at the end)


def alltoallw_case(dev, root):
    """Alltoallw with byte displacements out of order and a datatype per peer (int32 and a contiguous
    pair of them)."""
    pair = PAIR
    types = [pair if p % 2 else MPI.INT for p in range(n)]
    scounts = [1 + (rank + p) % 2 for p in range(n)]  # in each peer's type
    rcounts = [1 + (p + rank) % 2 for p in range(n)]
    sints = [c * (2 if p % 2 else 1) for p, c in enumerate(scounts)]
    rints = [c * (2 if rank % 2 else 1) for c in rcounts]
    rtypes = [pair if rank % 2 else MPI.INT] * n  # what peer p sends me is in my type
    sd, slen = v_layout(sints, 'out of order')
    rd, rlen = v_layout(rints, 'out of order')
    s = np.arange(slen, dtype=np.int32) + 1000 * rank
    r = np.full(rlen, -1, np.int32)
    sb, rb = [d * 4 for d in sd], [d * 4 for d in rd]
    a = [[placed(s, dev), scounts, sb, types], [placed(r, dev), (rcounts, rb), rtypes]]
    b = [[s.copy(), scounts, sb, types], [r.copy(), (rcounts, rb), rtypes]]
    return a, b, 1


for name, what, build in cases():
    for placement, on in PLACEMENTS.items():
        for root in sorted({0, n - 1}):
            dev = on(rank, root)
            a, b, k = build(dev, root)
            where = f'{name} {what}, {placement}, root {root}, rank {rank}'
            taken, made = compared(comm, plain, name, a, b, k, where)
            checks += made
            everywhere = all(on(p, root) for p in range(n))
            # the rooted calls' insignificant buffers aside, all ranks on the device: the transport
            # (with MPIGPU_EXCHANGE_MIN_BYTES above these calls' few bytes, every rank votes for the mirrors)
            expect = int(engine and everywhere and one_node and config.exchange and config.exchange_min_bytes == 0)
            if 'count 0' in what:  # an empty array may read as host memory (no pointer): either path
                expect = taken
            assert taken == expect, f'{where}: exchange path taken {taken} times, expected {expect}'
            checks += 1
            checks += nonblocking(comm, plain, name, build, dev, root, k, where, expect)
            if 'count 0' not in what:
                # in place, a second round would exchange the first's output again
                rounds = 1 if 'in place' in what and name.startswith('Alltoall') else 2
                checks += persistent(comm, plain, name, build, dev, root, where, expect, rounds)
                checks += streamed(comm, plain, name, build, dev, root, where, expect)
            if name not in ('Gather', 'Gatherv', 'Scatter', 'Scatterv'):
                break  # one root is enough for the rootless ones

# Alltoallw: counts in each peer's datatype (the pairs' bytes match, the types differ)
transport = config.exchange and config.exchange_min_bytes == 0  # these calls' few bytes: else the mirrors
for placement, on in PLACEMENTS.items():
    a, b, k = alltoallw_case(on(rank, 0), 0)
    before = exchange.calls()
    comm.Alltoallw(*a)
    taken = exchange.calls() - before
    plain.Alltoallw(*b)
    assert np.array_equal(values(output(a, k)), values(output(b, k))), f'Alltoallw, {placement}, rank {rank}'
    expect = int(engine and all(on(p, 0) for p in range(n)) and one_node and transport)
    assert taken == expect, f'Alltoallw, {placement}, rank {rank}: exchange taken {taken}, expected {expect}'
    checks += 2
    checks += nonblocking(comm, plain, 'Alltoallw', alltoallw_case, on(rank, 0), 0, 1, f'{placement}', expect)
    checks += persistent(comm, plain, 'Alltoallw', alltoallw_case, on(rank, 0), 0, f'{placement}', expect)
    checks += streamed(comm, plain, 'Alltoallw', alltoallw_case, on(rank, 0), 0, f'{placement}', expect)


def topologies():
    """(name, mpigpu communicator, plain one, every rank's (sources, destinations)) of the
    neighbourhood collectives' checks: a line, a ring, 2-D grids and a directed graph."""
    dims = MPI.Compute_dims(n, 2)
    # the ring and the periodic grid have a rank that is a neighbour twice where a periodic dimension
    # holds 1 or 2 ranks (the host MPI call takes those); the plain grid never does
    for what, d, periods in (('line', [n], [False]), ('ring', [n], [True]), ('grid', dims, [False, False]),
                             ('periodic grid', dims, [True, True])):
        cart, pcart = comm.Create_cart(d, periods), plain.Create_cart(d, periods)
        every = plain.allgather(tuple(list(e) for e in pcart.inoutedges))
        yield f'cart {what} {d} {periods}', cart, pcart, every
    dests = sorted({(rank + 1) % n, (rank - 2) % n})
    srcs = sorted({(rank - 1) % n, (rank + 2) % n})
    graph = comm.Create_dist_graph_adjacent(srcs, dests)
    pgraph = plain.Create_dist_graph_adjacent(srcs, dests)
    yield 'dist graph', graph, pgraph, plain.allgather((srcs, dests))


def unique(edges):
    """True where no rank is a neighbour twice in one direction (else the host MPI call takes it)."""
    return all(len(set(p for p in side if p != MPI.PROC_NULL)) == len([p for p in side if p != MPI.PROC_NULL])
               for sides in edges for side in sides)


def neighbor_case(kind, srcs, dests, dev):
    """Arguments of Neighbor_<kind> on this rank for mpigpu and plain mpi4py."""
    c, indeg, outdeg = 2, len(srcs), len(dests)
    if kind == 'allgather':
        s, r = np.arange(c, dtype=np.int32) + 100 * rank, np.full(c * indeg, -1, np.int32)
        return [placed(s, dev), placed(r, dev)], [s.copy(), r.copy()]
    if kind == 'allgatherv':
        counts = [1 + srcs[j] % 2 if srcs[j] != MPI.PROC_NULL else 0 for j in range(indeg)]  # source j's
        displs, rlen = v_layout(counts, 'out of order')
        s = np.arange(1 + rank % 2, dtype=np.int32) + 100 * rank
        r = np.full(rlen, -1, np.int32)
        return [placed(s, dev), [placed(r, dev), (counts, displs), MPI.INT]], [s.copy(), [r.copy(), (counts, displs), MPI.INT]]
    if kind == 'alltoall':
        s = np.arange(c * outdeg, dtype=np.int32) + 100 * rank
        r = np.full(c * indeg, -1, np.int32)
        return [placed(s, dev), placed(r, dev)], [s.copy(), r.copy()]
    # alltoallv and alltoallw: block i to dests[i] holds 1 + (rank + dests[i]) % 3 ints, in both counts
    sc = [1 + (rank + d) % 3 if d != MPI.PROC_NULL else 0 for d in dests]
    rc = [1 + (q + rank) % 3 if q != MPI.PROC_NULL else 0 for q in srcs]
    sd, slen = v_layout(sc, 'out of order')
    rd, rlen = v_layout(rc, 'out of order')
    s = np.arange(slen, dtype=np.int32) + 100 * rank
    r = np.full(rlen, -1, np.int32)
    if kind == 'alltoallv':
        return ([[placed(s, dev), sc, sd, MPI.INT], [placed(r, dev), (rc, rd), MPI.INT]],
                [[s.copy(), sc, sd, MPI.INT], [r.copy(), (rc, rd), MPI.INT]])
    sb, rb = [x * 4 for x in sd], [x * 4 for x in rd]
    return ([[placed(s, dev), sc, sb, [MPI.INT] * outdeg], [placed(r, dev), (rc, rb), [MPI.INT] * indeg]],
            [[s.copy(), sc, sb, [MPI.INT] * outdeg], [r.copy(), (rc, rb), [MPI.INT] * indeg]])


for what, topo, ptopo, every in topologies():
    srcs, dests = (list(e) for e in ptopo.inoutedges)
    for kind in ('allgather', 'allgatherv', 'alltoall', 'alltoallv', 'alltoallw'):
        for placement, on in PLACEMENTS.items():
            a, b = neighbor_case(kind, srcs, dests, on(rank, 0))
            name = f'Neighbor_{kind}'
            before = exchange.calls()
            getattr(topo, name)(*a)
            taken = exchange.calls() - before
            getattr(ptopo, name)(*b)
            where = f'{name} on {what}, {placement}, rank {rank}'
            got, want = values(output(a, 1)), values(output(b, 1))
            assert np.array_equal(got, want), f'{where}: {got} != {want}'
            empty = any(len(e[0]) == 0 or len(e[1]) == 0 for e in every)  # an empty array may read as host memory
            expect = int(engine and all(on(p, 0) for p in range(n)) and one_node and transport and unique(every))
            if empty:
                expect = taken
            assert taken == expect, f'{where}: exchange taken {taken}, expected {expect}'
            checks += 2
            if not empty:
                build = lambda d, rt: (*neighbor_case(kind, srcs, dests, d), 1)  # noqa: E731
                checks += nonblocking(topo, ptopo, name, build, on(rank, 0), 0, 1, where, expect)
                checks += persistent(topo, ptopo, name, build, on(rank, 0), 0, where, expect)
                checks += streamed(topo, ptopo, name, build, on(rank, 0), 0, where, expect)
    topo.Free()
    ptopo.Free()

# stream= with host buffers on every rank: each raises (MPI.ERR_ARG) and none waits for the others
try:
    comm.Alltoall(np.zeros(max(n, 1), np.int32), np.zeros(max(n, 1), np.int32), stream=0)
    raise AssertionError(f'Alltoall(stream=) with host buffers did not raise (rank {rank})')
except mpigpu.Error as exc:
    assert exc.Get_error_class() == MPI.ERR_ARG and 'stream=' in str(exc), str(exc)
checks += 1
r = np.full(max(n, 1), -1, np.int32)
comm.Alltoall(np.arange(max(n, 1), dtype=np.int32), r)  # the communicator goes on as before
assert list(r) == [rank] * n, f'Alltoall after a refused stream= call: {r}'
checks += 1

# A non-blocking call whose peers have not all posted when it returns (rank 0 comes late): its request
# starts the path once they have, and a collective made meanwhile follows it in MPI's order.
if engine and one_node and transport:
    import time

    from mpigpu._state.comm_state import state_of
    for late_rank in sorted({0, n - 1}):
        s = np.arange(2 * n, dtype=np.int32) + 100 * rank
        r1, r2 = device(np.full(2 * n, -1, np.int32)), device(np.full(2 * n, -1, np.int32))
        src = device(s)
        comm.Alltoall(src, r1)  # the team is up, and the blocking result to compare with
        if rank == late_rank:
            time.sleep(0.2)
        before = exchange.calls()
        req = comm.Ialltoall(src, r2)
        # the others' call returned undecided (rank late_rank had not posted within the agreement's spin)
        undecided = state_of(comm).agreement.undecided
        assert undecided or rank == late_rank or n == 1, f'Ialltoall, rank {late_rank} late: decided'
        comm.Barrier()  # a collective after it: the undecided call starts first
        req.Wait()
        want = np.empty(2 * n, np.int32)
        plain.Alltoall(s, want)
        assert np.array_equal(values(r2), want), f'Ialltoall, rank {late_rank} late, rank {rank}'
        assert np.array_equal(values(r1), want)
        assert exchange.calls() - before == 1, f'Ialltoall, rank {late_rank} late, rank {rank}: not on the transport'
        checks += 3

if not one_node:  # across nodes the family is the host MPI call: nothing posted, no exchange started
    from mpigpu._state.comm_state import state_of
    assert not state_of(comm).agreement._pending, 'the all-to-all family posted across nodes'
total = plain.allreduce(checks)
if rank == 0:
    print(f'exchange collectives on {n} ranks: {total} checks identical to mpi4py '
          f'({"the exchange transport" if engine else "no device team"})')
PAIR.Free()
