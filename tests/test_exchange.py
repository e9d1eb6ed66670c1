"""How the exchange path reads one rank's arguments (mpigpu/_paths/exchange.py): the byte ranges of
each form, and the calls it leaves to the mirrors (whose host MPI call says what is wrong, or copes)."""
import numpy as np
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
    assert exchange.describe('Alltoall', 0, 2, [MPI.IN_PLACE, r]) is None  # not on the transport


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
