"""Where a host receive's packed bytes lie (mpigpu/_paths/p2p_target.py), which a GPU sender's payload and
a message Probe kept are delivered through: every datatype of tests/datatype_cases.py, whole and partial
messages, against MPI's own unpacking and packing of the same host buffers; plain specifications
(predefined types, typecodes, the buffer's own type, counts, displacements); what is refused."""
import math

import numpy as np
import pytest
from mpi4py import MPI

from mpigpu._describe.datatypes import layout
from mpigpu._paths.p2p_target import HostTarget, host_target
from mpigpu.errors import Error
from datatype_cases import CASES, make, mpi_pack, mpi_unpack, span

CALLS = [(name, count) for name, (_, counts, overlapping) in CASES.items() for count in counts if not overlapping]


def _target_buffer(dt, count, seed):
    """(random host bytes, displacement in extents, byte offset of the instances): room before the first
    instance for a type map that reaches below its pointer, and after for the last instance's."""
    lo, hi = span(dt, count)
    extent = dt.Get_extent()[1]
    displ = math.ceil(-lo / extent) if lo < 0 else 0
    base = displ * extent
    buf = np.random.default_rng(seed).integers(0, 256, base + max(hi, 0) + 24, dtype=np.uint8)
    return buf, displ, base


@pytest.mark.parametrize('name,count', CALLS)
def test_place_and_head_match_mpi(name, count):
    dt = make(name)
    if dt.Get_extent()[1] <= 0:
        pytest.skip('no displacement reaches a type map below its pointer')
    buf, displ, base = _target_buffer(dt, count, count)
    target = HostTarget('Recv', 0, [buf, (count, displ), dt])
    assert target.room == count * dt.Get_size()
    packed = np.random.default_rng(count + 11).integers(0, 256, target.room, dtype=np.uint8).tobytes()
    ours, theirs = buf.copy(), buf.copy()
    target.u8 = ours
    target.place(packed, len(packed))
    mpi_unpack(dt, count, packed, theirs, base)
    assert np.array_equal(ours, theirs)
    # a message shorter than the room: its bytes where the type map's first bytes lie, the rest untouched
    offs = layout(dt).byte_offsets(count)
    for k in {0, 1, 5, target.room // 2, max(target.room - 3, 0)}:
        ours, want = buf.copy(), buf.copy()
        target.u8 = ours
        target.place(packed, k)
        want[base + offs[:k]] = np.frombuffer(packed, np.uint8, count=k)
        assert np.array_equal(ours, want), k
    target.u8 = buf
    whole = mpi_pack(dt, count, buf, base)
    for k in {0, 1, min(128, target.room), target.room}:
        assert target.head(k) == whole[:k], k


@pytest.mark.parametrize('spec_rest,start,room', [
    ([MPI.FLOAT], 0, 400),
    ([25, MPI.FLOAT], 0, 100),
    ([(25, 3), MPI.FLOAT], 12, 100),
    ([25, 3, MPI.FLOAT], 12, 100),
    (['f'], 0, 400),
    ([(10, 2), 'd'], 16, 80),
    ([(7, 4)], 16, 28),                     # the buffer's own type (float32)
    ([MPI.FLOAT.Create_contiguous(4).Commit()], 0, 400),
    ([(2, 3), MPI.DOUBLE.Create_contiguous(5).Commit()], 120, 80),
])
def test_plain_specifications(spec_rest, start, room):
    h = np.arange(100, dtype=np.float32)
    target = HostTarget('Recv', 0, [h, *spec_rest])
    assert (target.start, target.room, target.layout) == (start, room, None)
    data = np.arange(room, dtype=np.uint8).tobytes()
    before = h.view(np.uint8).copy()
    target.place(data, room - 1)
    after = h.view(np.uint8)
    assert after[start:start + room - 1].tobytes() == data[:room - 1]
    assert np.array_equal(after[:start], before[:start]) and np.array_equal(after[start + room - 1:],
                                                                          before[start + room - 1:])
    assert target.head(room) == after[start:start + room].tobytes()


def test_what_is_refused():
    h = np.zeros(100, np.float32)
    for rest in ([200, MPI.FLOAT], [(50, 60), MPI.FLOAT], [(1, 101), MPI.FLOAT], [MPI.DOUBLE.Create_vector(30, 1, 2).Commit()]):
        with pytest.raises(Error):
            HostTarget('Recv', 0, [h, *rest])
    with pytest.raises(Error):
        HostTarget('Recv', 0, [np.zeros(99, np.uint8), MPI.FLOAT])  # a count inferred from a partial extent
    # host_target: None where the room is below the threshold or the argument is not one it reads
    assert host_target('Recv', 0, [h, MPI.FLOAT], 400) is not None
    assert host_target('Recv', 0, [h, MPI.FLOAT], 401) is None
    assert host_target('Recv', 0, [h, 10, MPI.FLOAT], 100) is None
    assert host_target('Recv', 0, [h, 200, MPI.FLOAT], 100) is None
    assert host_target('Recv', 0, [None, 0, MPI.FLOAT], 0) is None


def test_a_datatype_freed_before_the_message_arrives():
    """MPI lets a program free a receive's datatype while the receive is pending: the bytes still go where
    its type map put them (block by block, without the handle)."""
    dt = MPI.DOUBLE.Create_vector(6, 1, 3).Commit()
    h = np.zeros(18, np.float64)
    target = HostTarget('Irecv', 0, [h, 1, dt])
    dt.Free()
    target.place(np.arange(6, dtype=np.float64).tobytes(), 48)
    want = np.zeros(18, np.float64)
    want[::3] = np.arange(6)
    assert np.array_equal(h, want)
