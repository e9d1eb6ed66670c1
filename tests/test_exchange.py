"""How the exchange path reads one rank's arguments (mpigpu/_paths/exchange.py): the byte ranges of
each form, and the calls it leaves to the mirrors (whose host MPI call says what is wrong, or copes)."""
import numpy as np
import pytest
from mpi4py import MPI

from fake_device import FakeCAI
from mpigpu._paths import exchange


def dev(n, dtype=np.int32):
    return FakeCAI(np.zeros(n, dtype))


def test_alltoallv_ranges_follow_mpi4py_forms():
    s, r = dev(10), dev(12)
    got = exchange.describe('Alltoallv', 1, 2, [[s, ([2, 3], [5, 0]), MPI.INT], [r, [1, 3], [0, 4], MPI.INT]])
    assert got.send_bytes == [8, 12] and got.send_off == [20, 0]
    assert got.recv_bytes == [4, 12] and got.recv_off == [0, 16]
    # counts only: displacements packed; arrays as mpi4py's chkarray takes them
    got = exchange.describe('Alltoallv', 0, 2, [[s, (np.array([4, 6]), None), MPI.INT], [r, [4, 6], MPI.INT]])
    assert got.send_off == [0, 16] and got.recv_off == [0, 16]


def test_bare_buffers_split_evenly_and_packed():
    # a bare v-message: counts split as mpi4py splits them, displacements packed (not all at 0)
    got = exchange.describe('Allgatherv', 0, 3, [dev(2), dev(7)])
    assert got is None  # the own block (2) is not the split's 3: the host MPI call says what is wrong
    got = exchange.describe('Allgatherv', 0, 3, [dev(3), dev(7)])
    assert got.recv_bytes == [12, 8, 8] and got.recv_off == [0, 12, 20]


def test_simple_message_with_displacement_and_blocks():
    s, r = dev(9), dev(8)
    got = exchange.describe('Alltoall', 0, 2, [[s, (4, 1), MPI.INT], r])
    assert got.send_bytes == [16, 16] and got.send_off == [4, 20] and got.recv_off == [0, 16]


def test_in_place_forms():
    r = dev(6)
    got = exchange.describe('Allgatherv', 1, 2, [MPI.IN_PLACE, [r, ([2, 4], [4, 0]), MPI.INT]])
    assert got.send == got.recv and got.send_bytes == [16, 16] and got.recv_off == [16, 0]
    # in-place Alltoall: sent from a copy of the buffer's 24 bytes, received where they were
    got = exchange.describe('Alltoall', 0, 2, [MPI.IN_PLACE, r])
    assert got.span == 24 and got.ranges.send_off == got.ranges.recv_off == [0, 12]
    assert got.send_bytes == got.recv_bytes == [12, 12]


def test_aliased_or_mismatched_buffers_take_the_mirrors():
    x = dev(8)
    assert exchange.describe('Alltoall', 0, 2, [x, x]) is None
    # the own block's send and receive sizes differ (host MPI raises a truncation error)
    assert exchange.describe('Alltoallv', 0, 2, [[dev(4), [2, 2]], [dev(4), [1, 3]]]) is None
    assert exchange.describe('Scatter', 0, 2, [dev(8), dev(2), 0]) is None
    assert exchange.describe('Scatter', 0, 2, [dev(8), dev(4), 0]) is not None


def test_what_it_does_not_read():
    vec = MPI.INT.Create_vector(2, 1, 2).Commit()
    try:
        assert exchange.describe('Alltoall', 0, 2, [[dev(8), 1, vec], dev(8)]) is None
    finally:
        vec.Free()
    assert exchange.describe('Alltoall', 0, 2, [np.zeros(8, np.int32), dev(8)]) is None  # host memory
    assert exchange.describe('Alltoallv', 0, 2, [[dev(4), [2, 2], [0, 3]], dev(4)]) is None  # past the end
    assert exchange.describe('Gather', 0, 2, [dev(2), dev(4), 5]) is None  # no such root


# ---- the fast path's reader (mpigpu/_ext/_exchange.pxi) against describe --------------------------
@pytest.fixture
def fast():
    """The fast path's reader, its module bound for reading only, and bound back as the library binds
    it afterwards."""
    from mpigpu._ext import _device
    from mpigpu._state.undecided import unsettled
    from mpigpu._base.config import config
    from mpigpu._paths.exchange_read import type_of
    _device.bind_exchange_entry((), None, MPI.Datatype, MPI.IN_PLACE, MPI.PROC_NULL, type_of)
    yield _device.exchange_ranges_of
    _device.bind_exchange_entry(unsettled, config, MPI.Datatype, MPI.IN_PLACE, MPI.PROC_NULL, type_of)


def _forms(n, rank, one):
    """(name, args) of one rank's call in forms both readers take (and some both decline)."""
    rng = np.random.default_rng(n * 10 + rank)
    counts = [int(c) for c in rng.integers(0, 4, n)]
    displs = [int(d) for d in np.cumsum([0] + counts[:-1])][::-1]  # out of order, may overlap: describe decides
    order = [int(d) for d in np.cumsum([0] + counts[:-1])]
    total = sum(counts)
    yield 'Alltoall', [dev(3 * n), dev(3 * n)]
    yield 'Alltoall', [dev(2 * n, np.float64), dev(4 * n, np.float32)]
    yield 'Gather', [dev(3), dev(3 * n), n - 1]
    yield 'Gather', [dev(3), dev(3 * n), 0]
    yield 'Gather', [MPI.IN_PLACE, dev(3 * n), rank]
    yield 'Scatter', [dev(3 * n), dev(3), n - 1]
    yield 'Scatter', [dev(3 * n), MPI.IN_PLACE, rank]
    yield 'Scatter', [dev(3 * n), dev(3, np.float64), rank]
    for dt in (None, MPI.INT, MPI.FLOAT):
        extra = [] if dt is None else [dt]
        yield 'Alltoallv', [[dev(total), counts, order] + extra, [dev(total), counts, order] + extra]
        yield 'Alltoallv', [[dev(total + 4), (counts, displs)] + extra, [dev(total), counts] + extra]
        yield 'Alltoallv', [[dev(total), np.array(counts), np.array(order)] + extra, [dev(total), counts] + extra]
        yield 'Allgatherv', [dev(counts[rank]), [dev(total), counts, order] + extra]
        yield 'Allgatherv', [MPI.IN_PLACE, [dev(total), (counts, order)] + extra]
        yield 'Allgatherv', [None, [dev(total + 2), counts, displs] + extra]
        yield 'Gatherv', [dev(counts[rank]), [dev(total), counts, order] + extra, 0]
        yield 'Gatherv', [MPI.IN_PLACE, [dev(total), counts, order] + extra, rank]
        yield 'Scatterv', [[dev(total), counts, displs] + extra, dev(counts[rank]), rank]
        yield 'Scatterv', [[dev(total), (counts, order)] + extra, MPI.IN_PLACE, rank]
        yield 'Scatterv', [[dev(total), counts] + extra, dev(counts[0]), 0]
    x = dev(4 * n)
    yield 'Alltoall', [x, x]  # aliased
    yield 'Alltoallv', [[dev(4), [2, 2] + [0] * (n - 2)], [dev(4), [1, 3] + [0] * (n - 2)]]  # own block differs
    yield 'Alltoallv', [[dev(total), counts, order, one], [dev(total), counts]]  # a derived type without gaps


def _both_read(fast, name, rank, n, args, root=-1):
    """describe's Ranges of a call, checked to be what the fast path's reader read (both decline alike:
    None)."""
    from mpigpu._base.codes import Coll
    want = exchange.describe(name, rank, n, args)
    got = fast(int(getattr(Coll, name.upper())), rank, n, args[0], args[1], root)
    assert (got is None) == (want is None), (name, n, rank, args)
    if got is not None:
        assert got == (want.send, want.recv, want.send_bytes, want.send_off, want.recv_bytes,
                       want.recv_off), (name, n, rank)
    return want


def test_fast_reader_reads_what_describe_reads(fast):
    """The fast path's reader gives describe's byte ranges for the common forms (bare arrays; counts and
    displacements as lists, tuples or NumPy arrays; contiguous datatypes; in place) and declines where
    describe does."""
    taken, declined = set(), 0
    one = MPI.INT.Create_contiguous(1).Commit()
    for n in (1, 2, 3, 5):
        for rank in range(n):
            for name, args in _forms(n, rank, one):
                root = args[2] if name in ('Gather', 'Gatherv', 'Scatter', 'Scatterv') else -1
                want = _both_read(fast, name, rank, n, args, root)
                if want is None:
                    declined += 1
                    continue
                taken.add(name)
    one.Free()
    assert taken == {'Alltoall', 'Alltoallv', 'Allgatherv', 'Gather', 'Gatherv', 'Scatter', 'Scatterv'}
    assert declined  # the corpus holds calls both decline (aliased, mismatched, a list as datatype)


def test_fast_reader_declines_what_it_does_not_read(fast):
    from mpigpu._base.codes import Coll
    vec = MPI.INT.Create_vector(2, 1, 2).Commit()
    try:
        assert fast(int(Coll.ALLTOALLV), 0, 2, [dev(8), [1, 1], [0, 2], vec], [dev(8), [1, 1], [0, 2], vec]) is None
    finally:
        vec.Free()
    x = dev(8)
    assert fast(int(Coll.ALLTOALL), 0, 2, x, x) is None  # aliased
    assert fast(int(Coll.ALLTOALL), 0, 2, MPI.IN_PLACE, x) is None
    assert fast(int(Coll.ALLTOALL), 0, 2, [dev(8), 4, MPI.INT], dev(8)) is None  # another form: describe reads it
    assert fast(int(Coll.ALLTOALLV), 0, 2, [dev(4), [2, 2], [0, 3]], [dev(4), [2, 2]]) is None  # past the end
    assert fast(int(Coll.ALLTOALLV), 0, 2, [dev(4), [2, True]], [dev(4), [2, 2]]) is None  # not an int
    assert fast(int(Coll.ALLTOALL), 0, 2, np.zeros(8, np.int32), dev(8)) is None  # host memory
    assert fast(int(Coll.ALLTOALL), 0, 2, dev(7), dev(8)) is None  # not n equal blocks


def _neighbor_forms(n, rank):
    """(name, args, edges) of neighbourhood collectives over made-up topologies: neighbours out of
    order, PROC_NULL among them, a rank twice (both readers decline), itself."""
    null = MPI.PROC_NULL
    topologies = [([(rank - 1) % n, (rank + 1) % n], [(rank - 1) % n, (rank + 1) % n]),
                  ([null, (rank + 1) % n, rank], [rank, null, (rank - 1) % n]),
                  ([], [(rank + 2) % n])]
    for srcs, dests in topologies:
        edges = (list(srcs), list(dests))
        ki, ko = len(srcs), len(dests)
        yield 'Neighbor_allgather', [dev(2), dev(2 * ki)], edges
        yield 'Neighbor_alltoall', [dev(3 * ko), dev(3 * ki)], edges
        rc = [1 + j for j in range(ki)]
        sc = [1 + i for i in range(ko)]
        yield 'Neighbor_allgatherv', [dev(2), [dev(sum(rc) + 3), rc, [3 + sum(rc[:j]) for j in range(ki)], MPI.INT]], edges
        yield 'Neighbor_alltoallv', [[dev(sum(sc)), sc, MPI.INT], [dev(sum(rc)), (rc, None), MPI.INT]], edges
        yield 'Neighbor_alltoallv', [[dev(sum(sc)), (sc, [0] * ko)], [dev(sum(rc)), rc]], edges
        yield 'Neighbor_alltoall', [MPI.IN_PLACE, dev(3 * ki)], edges
        yield 'Neighbor_alltoall', [dev(3 * ko), dev(3 * ki)], None  # no topology


def test_fast_reader_reads_neighbors_as_describe_does(fast):
    from mpigpu._base.codes import Coll
    taken, declined = set(), 0
    for n in (1, 2, 3, 5):
        for rank in range(n):
            for name, args, edges in _neighbor_forms(n, rank):
                want = exchange.describe(name, rank, n, args, edges)
                got = fast(int(getattr(Coll, name.upper())), rank, n, args[0], args[1], -1, edges)
                assert (got is None) == (want is None), (name, n, rank, args, edges)
                if got is None:
                    declined += 1
                    continue
                assert got == (want.send, want.recv, want.send_bytes, want.send_off, want.recv_bytes,
                               want.recv_off), (name, n, rank, edges)
                taken.add(name)
    assert taken == {'Neighbor_allgather', 'Neighbor_allgatherv', 'Neighbor_alltoall', 'Neighbor_alltoallv'}
    assert declined


def test_shaped_blocks_carry_their_layout():
    # rows split to columns: each send block one resized vector (2 rows of 2 ints, 4 apart), displaced
    # by whole extents; the receive blocks plain
    col = MPI.INT.Create_vector(2, 2, 4).Create_resized(0, 8).Commit()
    try:
        got = exchange.describe('Alltoallv', 0, 2, [[dev(8), ([1, 1], [0, 1]), col],
                                                   [dev(8), ([4, 4], [0, 4]), MPI.INT]])
        assert got.send_bytes == [16, 16] and got.send_off == [0, 8] and got.recv_shape == [None, None]
        assert got.shapes is not None and got.send_shape[0].dims == ((2, 16),) and got.send_shape[0].block == 8
        # a block reaching past the array's end: the host MPI call says what is wrong
        assert exchange.describe('Alltoallv', 0, 2, [[dev(7), ([1, 1], [0, 1]), col],
                                                    [dev(8), ([4, 4], [0, 4]), MPI.INT]]) is None
    finally:
        col.Free()


class _Team:
    """What a Reduction asks of a device team, recorded (the fake engine completes requests at once, so
    the request forms' scratch handling runs here)."""
    device = 0

    def __init__(self):
        self.requests = []

    def exchange_request(self, coll, send, recv, sb, so, rb, ro, stream, addr, watch, shapes, then):
        self.requests.append((recv, then))
        return 1


@pytest.fixture
def reduces(monkeypatch):
    """The fake CUDA layer reducing every (type, op) pair, as the fake engine's does."""
    from mpigpu import _cuda
    monkeypatch.setattr(_cuda.device, 'supports', lambda dtype, op: True, raising=False)


def test_reduction_scratch_lives_as_long_as_its_request(reduces):
    import gc

    from mpigpu._paths import exchange_reduce
    from mpigpu._state import requests
    from mpigpu._paths.support import scratch
    red = exchange_reduce.describe('Scan', 1, 3, [dev(4), dev(4), MPI.SUM])
    assert red.rows == 2 and red.ranges.send_bytes == [0, 16, 16] and red.ranges.recv_bytes == [16, 16, 0]
    team, req = _Team(), requests.GpuRequest()
    red.request(team, 5, 0, False)
    recv, then = team.requests[0]
    assert then == (red.dtype, red.op, red.out, recv, 16, 2, 4)  # rows 0 and 1 of the scratch into the output
    red.bind(req, 5)
    pooled = sum(len(v) for v in scratch._pool.values())
    del req
    gc.collect()
    assert sum(len(v) for v in scratch._pool.values()) == pooled + 1  # back once the request is gone
    # a persistent request's scratch: one block for every round, back once the request lets go of it
    red = exchange_reduce.describe('Reduce_scatter', 0, 2, [dev(6), dev(2), [2, 4], MPI.SUM])
    red.keep(0)
    red.request(team, 5, 0, False)
    red.request(team, 5, 0, False)
    assert team.requests[-1][0] == team.requests[-2][0] == red.kept.ptr and red.streams == [5]
    pooled = sum(len(v) for v in scratch._pool.values())
    del red
    gc.collect()
    assert sum(len(v) for v in scratch._pool.values()) == pooled + 1
    # a request the team refuses (a broken team): its scratch is back at once, not held by anything
    red = exchange_reduce.describe('Exscan', 1, 2, [dev(4), dev(4), MPI.SUM])

    def refuse(*args):
        raise RuntimeError('broken team')
    team.exchange_request = refuse
    pooled = sum(len(v) for v in scratch._pool.values())
    with pytest.raises(RuntimeError):
        red.request(team, 5, 0, False)
    assert sum(len(v) for v in scratch._pool.values()) == pooled and red.taken is None  # taken, given back


def test_reductions_the_device_cannot_take(reduces):
    assert exchange_reduce_describe('Scan', [dev(4), dev(4), MPI.MAXLOC]) is None
    assert exchange_reduce_describe('Reduce_scatter', [dev(4), dev(2), None, MPI.SUM]) is None  # no counts
    assert exchange_reduce_describe('Scan', [dev(4), dev(4, np.float32), MPI.SUM]) is None  # types differ
    assert exchange_reduce_describe('Exscan', [dev(4, np.float32), dev(4, np.float32), MPI.BAND]) is None


def exchange_reduce_describe(name, args):
    from mpigpu._paths import exchange_reduce
    return exchange_reduce.describe(name, 0, 2, args)


def _shape_words(lay):
    return None if lay is None else (lay.start, lay.block, lay.size, lay.extent, tuple(tuple(d) for d in lay.dims))


def _shaped_forms(n, rank, types, twin, far):
    """(name, args) of Alltoallv and Alltoallw calls of datatypes with gaps (the redistribute row's
    resized column, vectors, a subarray, a negative stride), some both readers decline (`far`: a
    datatype whose second instance lies 2^63 bytes on)."""
    col, vec, neg, sub, contig = types
    b = 3
    yield 'Alltoallv', [[dev(b * n * b), ([1] * n, list(range(n))), col], [dev(n * b * b), [b * b] * n, MPI.INT]]
    yield 'Alltoallv', [[dev(n * b * b), [b * b] * n, MPI.INT], [dev(b * n * b), ([1] * n, list(range(n))), col]]
    yield 'Alltoallv', [[dev(8 * n), [1] * n, [2 * p for p in range(n)], vec], [dev(8 * n), [2] * n, MPI.INT]]
    yield 'Alltoallv', [[dev(8 * n), [1] * n, vec], [dev(2 * n), [2] * n, MPI.INT]]  # displacements packed
    yield 'Alltoallv', [[dev(8 * n), [1] * n, [2 * p + 1 for p in range(n)], neg], [dev(2 * n), [2] * n, MPI.INT]]
    yield 'Alltoallv', [[dev(8 * n), [2] * n, [0] * n, vec], [dev(4 * n), [4] * n, MPI.INT]]  # past the end
    yield 'Alltoallv', [[dev(24 * n), [1] * n, [p for p in range(n)], sub], [dev(6 * n), [6] * n, MPI.INT]]
    x = dev(8 * n)
    yield 'Alltoallv', [[x, [1] * n, vec], [x, [2] * n, MPI.INT]]  # aliased
    # the own block sent and received in place, the others apart: taken with one datatype on both sides,
    # not with a twin (another datatype of the same layout: describe's rule is the datatype's own)
    y, sd, rd = dev(8 * n + 8), [0 if p == rank else p for p in range(n)], [0 if p == rank else n + p for p in range(n)]
    yield 'Alltoallv', [[y, [1] * n, sd, vec], [y, [1] * n, rd, vec]]
    yield 'Alltoallv', [[y, [1] * n, sd, vec], [y, [1] * n, rd, twin]]
    yield 'Alltoallw', [[dev(4 * n), [1] * n, [4] * n, [far] * n], [dev(4 * n), [1] * n, [0] * n, [MPI.INT] * n]]
    rng = np.random.default_rng(n * 7 + rank)
    picks = [types[int(k)] for k in rng.integers(0, len(types), n)]
    counts = [int(c) for c in rng.integers(0, 3, n)]
    sizes = [c * t.Get_size() for c, t in zip(counts, picks)]
    spans = [c * t.Get_extent()[1] + 64 for c, t in zip(counts, picks)]
    sdispl = [int(v) for v in np.cumsum([0] + spans[:-1])]
    rdispl = [int(v) for v in np.cumsum([0] + sizes[:-1])]
    ints = [MPI.INT] * n
    send, recv = dev(sum(spans) // 4 + 16), dev(sum(sizes) // 4 + 1)
    yield 'Alltoallw', [[send, counts, sdispl, picks], [recv, [s // 4 for s in sizes], rdispl, ints]]
    yield 'Alltoallw', [[send, (counts, sdispl), picks], [recv, ([s // 4 for s in sizes], rdispl), ints]]
    yield 'Alltoallw', [[recv, [s // 4 for s in sizes], rdispl, ints], [send, counts, sdispl, picks]]
    yield 'Alltoallw', [[dev(4 * n), [MPI.INT] * n], [dev(4 * n), [MPI.INT] * n]]  # one of each, at 0
    yield 'Alltoallw', [[send, counts, sdispl, picks[:-1]], [recv, [s // 4 for s in sizes], rdispl, ints]]  # too few


def test_fast_reader_reads_shapes_as_describe(fast):
    """Alltoallv and Alltoallw of datatypes with gaps: the fast path's reader gives describe's byte
    ranges and block shapes, and declines where describe does (past the end, aliased, too few types)."""
    from mpigpu._base.codes import Coll
    from mpigpu._ext import _device
    col = MPI.INT.Create_vector(3, 3, 9).Create_resized(0, 12).Commit()
    vec = MPI.INT.Create_vector(2, 1, 3).Commit()
    neg = MPI.INT.Create_vector(2, 1, -1).Commit()
    sub = MPI.INT.Create_subarray([2, 3, 4], [1, 2, 3], [1, 1, 0]).Commit()
    contig = MPI.INT.Create_contiguous(2).Commit()
    twin = MPI.INT.Create_vector(2, 1, 3).Commit()
    far = MPI.INT.Create_hvector(2, 1, 2 ** 63 - 8).Commit()
    types = (col, vec, neg, sub, contig)
    taken, declined, shaped = set(), 0, 0
    for n in (1, 2, 3, 4):
        for rank in range(n):
            for name, args in _shaped_forms(n, rank, types, twin, far):
                want = _both_read(fast, name, rank, n, args)
                if want is None:
                    declined += 1
                    continue
                shapes = _device.exchange_shapes_of(int(getattr(Coll, name.upper())), rank, n, args[0], args[1])
                expect = (None, None) if want.shapes is None else want.shapes
                for side, lays in zip(shapes, expect):
                    assert side == [_shape_words(lay) for lay in (lays or [None] * n)], (name, n, rank)
                shaped += want.shapes is not None
                taken.add(name)
    for t in (*types, twin, far):
        t.Free()
    assert taken == {'Alltoallv', 'Alltoallw'} and declined and shaped
