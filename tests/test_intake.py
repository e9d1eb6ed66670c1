"""Buffer intake (Cython) and argument parsing, with fake CUDA Array Interface objects: no GPU needed."""
import numpy as np
import pytest
from mpi4py import MPI

import mpigpu
from mpigpu import _call
from mpigpu._codes import NAMES, Coll
from mpigpu._ext import _intake
from conftest import FakeCAI


def no_stream(dev):
    return None


def test_host_objects_are_not_device():
    for obj in (np.zeros(3), bytearray(4), memoryview(b'ab'), [np.zeros(3), MPI.DOUBLE], None, MPI.IN_PLACE):
        assert not _intake.is_device(obj)


def test_cai_objects_are_device():
    a = np.zeros(4, np.float32)
    assert _intake.is_device(FakeCAI(a))
    assert _intake.is_device([FakeCAI(a), MPI.FLOAT])
    assert _intake.is_device((FakeCAI(a), 2, MPI.FLOAT))


@pytest.mark.parametrize('typestr,name', [('|b1', 'bool'), ('|i1', 'int8'), ('|u1', 'uint8'), ('<i2', 'int16'),
                                          ('<u2', 'uint16'), ('<i4', 'int32'), ('<u4', 'uint32'), ('<i8', 'int64'),
                                          ('<u8', 'uint64'), ('<f2', 'float16'), ('<f4', 'float32'),
                                          ('<f8', 'float64'), ('<c8', 'complex64'), ('<c16', 'complex128')])
def test_cai_typestrs(typestr, name):
    b = _intake.device_buffer(FakeCAI(typestr=typestr, shape=(3, 5), ptr=0x10000))
    assert NAMES[b.dtype] == name
    assert b.count == 15
    assert b.nbytes == 15 * _intake.DTYPE_SIZES[b.dtype]
    assert b.ptr == 0x10000 and not b.readonly and b.stream == 1


def test_cai_v2_has_no_stream_and_readonly_flag():
    b = _intake.device_buffer(FakeCAI(typestr='<f4', shape=(2,), ptr=64, version=2, readonly=True))
    assert b.stream == -1 and b.readonly


def test_cai_contiguity():
    # C- and F-contiguous strides are accepted, anything else is refused with a clear message
    _intake.device_buffer(FakeCAI(typestr='<f4', shape=(2, 3), ptr=64, strides=(12, 4)))
    _intake.device_buffer(FakeCAI(typestr='<f4', shape=(2, 3), ptr=64, strides=(4, 8)))
    with pytest.raises(_intake.IntakeError, match='not contiguous'):
        _intake.device_buffer(FakeCAI(typestr='<f4', shape=(4,), ptr=64, strides=(8,)))


def test_dlpack_from_numpy_is_host():
    # numpy exports DLPack on the CPU: not a CUDA device
    with pytest.raises(_intake.IntakeError, match='not a CUDA device'):
        _intake.device_buffer(memoryview_like())


class memoryview_like:
    def __init__(self):
        self.a = np.arange(4.0)

    def __dlpack__(self, stream=None, max_version=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def parse(obj, writable=False):
    return _call.parse('Allreduce', 'recvbuf', 0, obj, writable, no_stream)


def test_buffer_specifications():
    a = np.zeros(10, np.float32)
    f = FakeCAI(a)
    assert parse(f).count == 10
    assert parse([f, MPI.FLOAT]).count == 10
    assert parse([f, 4, MPI.FLOAT]).count == 4
    arg = parse([f, 4, 3, MPI.FLOAT])
    assert arg.count == 4 and arg.buf.ptr == a.ctypes.data + 12
    arg = parse([f, (5, 2), MPI.FLOAT])
    assert arg.count == 5 and arg.buf.ptr == a.ctypes.data + 8
    assert parse([f, 6]).count == 6
    assert parse([f, 'f']).count == 10
    # a raw byte buffer read as another MPI type
    raw = FakeCAI(np.zeros(16, np.uint8))
    arg = parse([raw, MPI.DOUBLE])
    assert arg.count == 2 and NAMES[arg.dtype] == 'float64'


def test_specification_errors_name_call_arg_rank():
    f = FakeCAI(np.zeros(10, np.float32))
    with pytest.raises(mpigpu.Error, match=r'Allreduce: recvbuf: count 11 .* exceeds') as e:
        parse([f, 11, MPI.FLOAT])
    assert e.value.Get_error_class() == MPI.ERR_BUFFER and '(rank 0)' in str(e.value)
    with pytest.raises(mpigpu.Error, match='2 to 4 items'):
        parse([f, 1, 2, 3, 4])
    with pytest.raises(mpigpu.Error, match='non-negative'):
        parse([f, -1, MPI.FLOAT])
    with pytest.raises(mpigpu.Error, match='read-only'):
        parse(FakeCAI(np.zeros(3, np.float32), readonly=True), writable=True)
    with pytest.raises(mpigpu.Error, match='not contiguous'):
        parse(FakeCAI(typestr='<f4', shape=(4,), ptr=64, strides=(8,)))
    with pytest.raises(mpigpu.Error, match='not contiguous; device buffers take contiguous'):
        parse([f, MPI.FLOAT.Create_vector(2, 1, 2).Commit()])


def build(name, coll, size, sendbuf, recvbuf, op=MPI.SUM, root=0, rank=0):
    return _call.build(name, coll, size, rank, sendbuf, recvbuf, op, root, no_stream)


def test_build_counts_and_inplace_layouts():
    n = 4
    s = FakeCAI(np.zeros(12, np.float32))
    r = FakeCAI(np.zeros(12, np.float32))
    c = build('Allreduce', Coll.ALLREDUCE, n, s, r)
    assert c.count == 12 and not c.inplace
    c = build('Allreduce', Coll.ALLREDUCE, n, MPI.IN_PLACE, r)
    assert c.inplace and c.send_ptr == c.recv_ptr
    c = build('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, n, s, FakeCAI(np.zeros(3, np.float32)))
    assert c.count == 3
    c = build('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, n, MPI.IN_PLACE, r)
    assert c.count == 3 and c.send_ptr == c.recv_ptr
    c = build('Allgather', Coll.ALLGATHER, n, FakeCAI(np.zeros(3, np.float32)), r, rank=2)
    assert c.count == 3
    c = build('Allgather', Coll.ALLGATHER, n, MPI.IN_PLACE, r, rank=2)
    assert c.count == 3 and c.send_ptr == c.recv_ptr + 2 * 3 * 4
    c = build('Reduce', Coll.REDUCE, n, s, None, root=1, rank=0)  # recvbuf ignored off the root
    assert c.count == 12 and c.recv is None
    c = build('Bcast', Coll.BCAST, n, None, r, root=3)
    assert c.count == 12 and c.root == 3


def test_build_errors():
    n = 4
    f32 = FakeCAI(np.zeros(12, np.float32))
    with pytest.raises(mpigpu.Error, match='sendbuf has 12 elements but recvbuf has 11'):
        build('Allreduce', Coll.ALLREDUCE, n, f32, FakeCAI(np.zeros(11, np.float32)))
    with pytest.raises(mpigpu.Error, match='sendbuf holds float32 but recvbuf holds float64'):
        build('Allreduce', Coll.ALLREDUCE, n, f32, FakeCAI(np.zeros(12, np.float64)))
    with pytest.raises(mpigpu.Error, match='not a multiple of the communicator size'):
        build('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, n, FakeCAI(np.zeros(10, np.float32)), FakeCAI(np.zeros(2, np.float32)))
    with pytest.raises(mpigpu.Error, match='recvbuf has 5 elements but needs 3 x 4'):
        build('Allgather', Coll.ALLGATHER, n, FakeCAI(np.zeros(3, np.float32)), FakeCAI(np.zeros(5, np.float32)))
    with pytest.raises(mpigpu.Error, match='root 4 is not a rank') as e:
        build('Bcast', Coll.BCAST, n, None, f32, root=4)
    assert e.value.Get_error_class() == MPI.ERR_ROOT
    with pytest.raises(mpigpu.Error, match='IN_PLACE is valid only at the root'):
        build('Reduce', Coll.REDUCE, n, MPI.IN_PLACE, None, root=1, rank=0)


@pytest.mark.parametrize('op', [MPI.BAND, MPI.BOR, MPI.BXOR, MPI.LAND, MPI.LOR, MPI.LXOR])
def test_mpi_forbidden_pairs_raise_before_transfer(op):
    with pytest.raises(mpigpu.Error, match='is not defined for float32') as e:
        build('Allreduce', Coll.ALLREDUCE, 2, FakeCAI(np.zeros(4, np.float32)), FakeCAI(np.zeros(4, np.float32)), op=op)
    assert e.value.Get_error_class() == MPI.ERR_OP and e.value.arg == 'op'


def test_complex_and_bool_rules():
    c64 = FakeCAI(np.zeros(4, np.complex64))
    build('Allreduce', Coll.ALLREDUCE, 2, c64, FakeCAI(np.zeros(4, np.complex64)), op=MPI.PROD)
    with pytest.raises(mpigpu.Error, match='MPI.MAX is not defined for complex64'):
        build('Allreduce', Coll.ALLREDUCE, 2, c64, FakeCAI(np.zeros(4, np.complex64)), op=MPI.MAX)
    b = FakeCAI(np.zeros(4, np.bool_))
    build('Allreduce', Coll.ALLREDUCE, 2, b, FakeCAI(np.zeros(4, np.bool_)), op=MPI.LXOR)
    with pytest.raises(mpigpu.Error, match='MPI.SUM is not defined for bool'):
        build('Allreduce', Coll.ALLREDUCE, 2, b, FakeCAI(np.zeros(4, np.bool_)), op=MPI.SUM)


def test_element_alignment():
    """Complex elements need only their component's alignment (C's); anything less is refused on the
    rank that passes it, whatever path would run, since the kernels access elements where C would."""
    raw = np.zeros(64, np.uint8)
    base = raw.ctypes.data + (-raw.ctypes.data) % 16  # 16-byte aligned

    def at(offset, dtype, count=2):
        return FakeCAI(typestr=np.dtype(dtype).str, shape=(count,), ptr=base + offset)

    build('Allreduce', Coll.ALLREDUCE, 2, at(8, np.complex128), at(24, np.complex128), op=MPI.PROD)
    build('Allreduce', Coll.ALLREDUCE, 2, at(4, np.complex64), at(12, np.complex64), op=MPI.PROD)
    build('Bcast', Coll.BCAST, 2, None, at(2, np.float16))
    with pytest.raises(mpigpu.Error, match='not aligned to the 8 bytes of complex128') as e:
        build('Allreduce', Coll.ALLREDUCE, 2, at(8, np.complex128), at(20, np.complex128), op=MPI.PROD)
    assert e.value.Get_error_class() == MPI.ERR_BUFFER and e.value.arg == 'recvbuf'
    with pytest.raises(mpigpu.Error, match='not aligned to the 4 bytes of float32') as e:
        build('Reduce', Coll.REDUCE, 2, at(2, np.float32), None, root=1, rank=0)
    assert e.value.arg == 'sendbuf'
    with pytest.raises(mpigpu.Error, match='not aligned to the 2 bytes of float16') as e:
        build('Bcast', Coll.BCAST, 2, None, at(1, np.float16))
    assert e.value.arg == 'buf'


def test_mixed_host_device_is_rejected():
    with pytest.raises(mpigpu.Error, match='host and device buffers mixed'):
        mpigpu.COMM_WORLD.Allreduce(np.zeros(4, np.float32), FakeCAI(np.zeros(4, np.float32)))


def test_error_is_an_mpi_exception():
    e = mpigpu.Error('Bcast', 'boom', arg='buf', rank=3, error_class=MPI.ERR_BUFFER)
    assert isinstance(e, MPI.Exception)
    assert str(e) == 'Bcast: buf: boom (rank 3)'


def test_op_must_be_an_mpi_op():
    with pytest.raises(mpigpu.Error, match='op must be an MPI.Op') as e:
        build('Allreduce', Coll.ALLREDUCE, 2, FakeCAI(np.zeros(4, np.float32)), FakeCAI(np.zeros(4, np.float32)), op=None)
    assert e.value.Get_error_class() == MPI.ERR_OP


def test_numpy_integers_as_counts():
    f = FakeCAI(np.zeros(10, np.float32))
    assert parse([f, np.int64(4), np.int32(3), MPI.FLOAT]).count == 4


def test_methods_without_device_path_refuse_device_buffers():
    # a device pointer must never reach a non-CUDA-aware MPI (it would crash the process)
    comm = mpigpu.COMM_WORLD
    x = FakeCAI(np.zeros(4, np.float32))
    for call in (lambda: comm.Send_init(x, 0, 0),
                 lambda: comm.Alltoallw([x, ([1], [0]), [MPI.FLOAT]], [x, ([1], [0]), [MPI.FLOAT]])):
        with pytest.raises(mpigpu.Error, match='not supported by this method yet') as e:
            call()
        assert '(rank 0)' in str(e.value)
    # host buffers go through unchanged
    req = comm.Iallreduce(np.ones(3), np.zeros(3))
    req.Wait()
