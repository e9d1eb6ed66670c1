"""Buffer intake (Cython) and argument parsing, with fake CUDA Array Interface objects: no GPU needed."""
import numpy as np
import pytest
from mpi4py import MPI

import mpigpu
from mpigpu._describe import call as _call
from mpigpu._base.codes import NAMES, SIZES, Coll
from mpigpu._ext import _intake
from conftest import FakeCAI, run_ranks


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
    assert b.nbytes == 15 * SIZES[b.dtype]
    assert b.ptr == 0x10000 and not b.readonly and b.stream == 1


def test_cai_v2_has_no_stream_and_readonly_flag():
    b = _intake.device_buffer(FakeCAI(typestr='<f4', shape=(2,), ptr=64, version=2, readonly=True))
    assert b.stream == -1 and b.readonly


def test_cai_contiguity():
    # C- and F-contiguous strides are accepted, anything else is refused with a clear message
    _intake.device_buffer(FakeCAI(typestr='<f4', shape=(2, 3), ptr=64, strides=(12, 4)))
    _intake.device_buffer(FakeCAI(typestr='<f4', shape=(2, 3), ptr=64, strides=(4, 8)))
    with pytest.raises(BufferError, match='not contiguous'):
        _intake.device_buffer(FakeCAI(typestr='<f4', shape=(4,), ptr=64, strides=(8,)))


def test_dlpack_from_numpy_is_host():
    # numpy exports DLPack on the CPU: not a CUDA device
    with pytest.raises(BufferError, match='not a CUDA device'):
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
    """Each mistake raises an mpigpu.Error that is also the exception mpi4py raises for it."""
    f = FakeCAI(np.zeros(10, np.float32))
    with pytest.raises(ValueError, match=r'Allreduce: recvbuf: message: count 11 .* past the device allocation') as e:
        parse([f, 11, MPI.FLOAT])
    assert isinstance(e.value, mpigpu.Error) and e.value.Get_error_class() == MPI.ERR_COUNT
    assert '(rank 0)' in str(e.value)
    with pytest.raises(ValueError, match='2 to 4 items'):
        parse([f, 1, 2, 3, 4])
    with pytest.raises(ValueError, match='negative count'):
        parse([f, -1, MPI.FLOAT])
    with pytest.raises(TypeError, match='count must be an integer'):
        parse([f, 1.5, MPI.FLOAT])
    with pytest.raises(KeyError, match="cannot map 'z'"):
        parse([f, 'z'])
    with pytest.raises(BufferError, match='not writable'):
        parse(FakeCAI(np.zeros(3, np.float32), readonly=True), writable=True)
    with pytest.raises(BufferError, match='not contiguous'):
        parse(FakeCAI(typestr='<f4', shape=(4,), ptr=64, strides=(8,)))
    with pytest.raises(ValueError, match='datatype is null'):
        parse([f, MPI.DATATYPE_NULL])


def test_explicit_counts_are_trusted_within_the_allocation():
    """MPI trusts an explicit count: it may reach past the object carrying the address (a view shorter
    than its storage, a raw address of no length), as far as the device allocation reaches."""
    storage = np.zeros(40, np.float32)
    owner = FakeCAI(storage)  # the allocation: 160 bytes
    for short in (MPI.memory.fromaddress(storage.ctypes.data, 8), MPI.memory.fromaddress(storage.ctypes.data, 0)):
        arg = parse([short, 40, MPI.FLOAT])
        assert arg.count == 40 and arg.buf.nbytes == 160
        with pytest.raises(ValueError, match='past the device allocation of 160 bytes'):
            parse([short, 41, MPI.FLOAT])
    arg = parse([MPI.memory.fromaddress(storage.ctypes.data + 40, 4), (20, 5), MPI.FLOAT])
    assert arg.count == 20 and arg.buf.ptr == storage.ctypes.data + 60
    del owner


def test_derived_datatypes_go_to_the_mirrored_path():
    """A non-contiguous datatype, or an element type mpigpu does not know, is for mpi4py to read: the
    call description says so instead of refusing it."""
    f = FakeCAI(np.zeros(10, np.float32))
    assert parse([f, MPI.FLOAT.Create_vector(2, 1, 2).Commit()]) is None
    assert parse(FakeCAI(typestr='<f16', shape=(2,), ptr=64)) is None
    c = build('Allreduce', Coll.ALLREDUCE, 2, [f, 2, MPI.FLOAT.Create_vector(2, 1, 2).Commit()], FakeCAI(np.zeros(4, np.float32)))
    assert c.mirror is not None


@pytest.mark.parametrize('cai,error', [
    ({'data': (64,)}, ValueError), ({'data': ()}, ValueError), ({'data': [64, False]}, TypeError),
    ({'data': (64, False, 1)}, ValueError), ({'data': ('x', False)}, TypeError), ({'data': (-1, False)}, ValueError),
    ({'data': (None, False)}, TypeError), ({'data': (2 ** 70, False)}, ValueError), ({'data': (0, False)}, BufferError),
    ({'shape': (-4,)}, BufferError), ({'shape': (4.0,)}, TypeError), ({'shape': [4]}, TypeError),
    ({'shape': (2 ** 62, 2 ** 62)}, BufferError), ({'strides': (8,), 'shape': (2, 2)}, IndexError),
    ({'strides': [4]}, TypeError), ({'typestr': 'xyz'}, ValueError), ({'typestr': 5}, TypeError),
    ({'typestr': '>f8'}, BufferError), ({'version': 'x'}, TypeError), ({'stream': 'abc'}, TypeError),
    ({'stream': 2 ** 70}, ValueError), ({'stream': 0}, ValueError), ({'mask': 1}, BufferError),
    ({'data': None}, TypeError),
])
def test_malformed_cuda_array_interfaces_raise_as_mpi4py_does(cai, error):
    """Every malformed export is refused before any pointer arithmetic, with mpi4py's exception class
    (the intake reads nothing out of bounds: a one-item 'data' used to crash the process)."""
    base = {'shape': (4,), 'typestr': '<f8', 'data': (0x10000, False), 'version': 3, 'strides': None, 'stream': 1}
    base.update(cai)

    class Odd:
        __cuda_array_interface__ = base
    with pytest.raises(error) as e:
        parse(Odd())
    assert isinstance(e.value, mpigpu.Error) and 'Allreduce: recvbuf:' in str(e.value)


def test_missing_keys_and_non_dict_interfaces():
    class NoData:
        __cuda_array_interface__ = {'shape': (4,), 'typestr': '<f8'}

    class NotADict:
        __cuda_array_interface__ = 5
    with pytest.raises(KeyError, match='data'):
        parse(NoData())
    with pytest.raises(TypeError, match='must be a dict'):
        parse(NotADict())


def test_memory_is_classified_by_its_pointer(fake_layer):
    """Device or host memory is decided by where the pointer lives, not by the wrapper: host memory
    behind a CUDA Array Interface is host memory; MPI.memory at a device address is device memory;
    NumPy arrays, bytes and bytearray are host memory without a query."""
    a = np.zeros(8, np.float32)
    host_cai = FakeCAI(a, register=False)
    assert not _intake.is_device(host_cai)
    dev = FakeCAI(np.zeros(8, np.float32))
    ptr = dev.__cuda_array_interface__['data'][0]
    assert _intake.is_device(MPI.memory.fromaddress(ptr, 32))
    assert _intake.is_device([MPI.memory.fromaddress(ptr, 32), 8, MPI.FLOAT])
    assert not _intake.is_device(MPI.memory.fromaddress(a.ctypes.data, 32))
    asked = []
    real = fake_layer.fake.is_device_memory
    fake_layer.fake.is_device_memory = lambda p: asked.append(p) or real(p)
    try:
        for obj in (a, bytes(8), bytearray(8), [a, MPI.FLOAT], None, MPI.IN_PLACE):
            assert not _intake.is_device(obj)
    finally:
        fake_layer.fake.is_device_memory = real
    assert asked == []
    buf = _intake.device_buffer(MPI.memory.fromaddress(ptr, 32))
    assert buf.ptr == ptr and buf.nbytes == 32


class _Unreferenceable:
    """A CUDA Array Interface exporter counting its reads, without weak references (`__slots__`)."""
    __slots__ = ('a', 'reads', 'cai')

    def __init__(self, fake, a):
        self.a, self.reads = a, 0
        self.cai = {'shape': a.shape, 'typestr': a.dtype.str, 'data': (a.ctypes.data, False), 'version': 3,
                    'strides': None, 'stream': None}
        fake.device_memory(a, a.ctypes.data, a.nbytes)  # while its array lives

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return self.cai


class _CountingCAI(_Unreferenceable):
    """The same exporter with weak references, as a Python class has them by default."""
    __slots__ = ('__weakref__',)


def test_a_placement_check_read_is_taken_once_by_the_same_exporter(fake_layer):
    """read_device takes what is_device read (no second read), for that exporter only, once, in the
    same thread, until the next is_device; an exporter without weak references is read again; a
    different exporter is read itself."""
    a, b = (_CountingCAI(fake_layer, np.arange(4, dtype=np.float32)) for _ in range(2))
    assert _intake.is_device(a) and a.reads == 1
    assert _intake.read_device(a, no_stream).ptr == a.a.ctypes.data and a.reads == 1
    assert _intake.read_device(a, no_stream) is not None and a.reads == 2  # taken: read again
    assert _intake.is_device(a) and _intake.read_device(b, no_stream).ptr == b.a.ctypes.data
    assert a.reads == 3 and b.reads == 1  # b read itself, not given a's
    assert _intake.read_device(a, no_stream) is not None and a.reads == 3  # a's check still held
    c = _Unreferenceable(fake_layer, np.arange(4, dtype=np.float32))
    assert _intake.is_device(c) and _intake.read_device(c, no_stream).ptr == c.a.ctypes.data and c.reads == 2
    assert _intake.is_device(b)
    del b  # a check's exporter gone: nothing kept alive, nothing matched
    assert _intake.read_device(a, no_stream) is not None and a.reads == 4
    # a finding no reading took (a call that raised) is dropped by the next call's placement check
    assert _intake.is_device(a) and not _intake.is_device(np.zeros(2)) and a.reads == 5
    assert _intake.read_device(a, no_stream) is not None and a.reads == 6
    # another thread's reading of the same exporter asks it itself (its stream may differ)
    import threading
    assert _intake.is_device(a) and a.reads == 7
    other = threading.Thread(target=_intake.read_device, args=(a, no_stream))
    other.start()
    other.join()
    assert a.reads == 8 and _intake.read_device(a, no_stream) is not None and a.reads == 8


def test_the_fast_paths_reader_takes_the_placement_checks_read(fake_layer):
    """The exchange's fast path reads a generic exporter through what the placement check read of it."""
    device = pytest.importorskip('mpigpu._ext._device')
    s, r = (_CountingCAI(fake_layer, np.arange(4, dtype=np.float32)) for _ in range(2))
    assert _intake.is_device(s) and s.reads == 1
    got = device.exchange_ranges_of(int(Coll.ALLTOALL), 0, 1, s, r)
    assert got is not None and got[0] == s.a.ctypes.data and got[2] == [16]
    assert (s.reads, r.reads) == (1, 1)


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
    with pytest.raises(ValueError, match='mismatch in send count 12 and receive count 11'):
        build('Allreduce', Coll.ALLREDUCE, n, f32, FakeCAI(np.zeros(11, np.float32)))
    with pytest.raises(ValueError, match='mismatch in send and receive MPI datatypes'):
        build('Allreduce', Coll.ALLREDUCE, n, f32, FakeCAI(np.zeros(12, np.float64)))
    with pytest.raises(ValueError, match='not a multiple of required number of blocks 4'):
        build('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, n, FakeCAI(np.zeros(10, np.float32)),
              FakeCAI(np.zeros(2, np.float32)))
    with pytest.raises(ValueError, match='cannot infer count'):
        build('Allgather', Coll.ALLGATHER, n, FakeCAI(np.zeros(3, np.float32)), FakeCAI(np.zeros(5, np.float32)))
    with pytest.raises(mpigpu.Error, match='root 4 is not a rank') as e:
        build('Bcast', Coll.BCAST, n, None, f32, root=4)
    assert e.value.Get_error_class() == MPI.ERR_ROOT
    with pytest.raises(ValueError, match='IN_PLACE is valid only at the root'):
        build('Reduce', Coll.REDUCE, n, MPI.IN_PLACE, None, root=1, rank=0)
    with pytest.raises(TypeError, match='an integer is required'):
        build('Bcast', Coll.BCAST, n, None, f32, root='0')


def test_counts_of_block_collectives_are_per_block():
    """An explicit count in Allgather's recvbuf or Reduce_scatter_block's sendbuf is per rank, as
    mpi4py reads it; a root of 1.5 is rank 1, as mpi4py's int parameter takes it."""
    n = 4
    r = FakeCAI(np.zeros(12, np.float32))
    c = build('Allgather', Coll.ALLGATHER, n, FakeCAI(np.zeros(3, np.float32)), [r, 3, MPI.FLOAT])
    assert c.count == 3
    c = build('Allgather', Coll.ALLGATHER, n, [FakeCAI(np.zeros(5, np.float32)), 2, MPI.FLOAT], [r, 2, MPI.FLOAT])
    assert c.count == 2
    c = build('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, n, [r, 2, MPI.FLOAT],
              FakeCAI(np.zeros(2, np.float32)))
    assert c.count == 2
    c = build('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, n, MPI.IN_PLACE, [r, 1, MPI.FLOAT])
    assert c.count == 1
    c = build('Allreduce', Coll.ALLREDUCE, n, None, r)
    assert c.inplace
    c = build('Allreduce', Coll.ALLREDUCE, n, [MPI.IN_PLACE, 12, MPI.FLOAT], r)
    assert c.inplace
    c = build('Bcast', Coll.BCAST, n, None, r, root=1.5)
    assert c.root == 1


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


def test_host_and_device_buffers_in_one_call(fake_layer):
    # legal in MPI (a CUDA-aware MPI runs it): the host MPI call, the device buffer through a mirror
    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    mpigpu.COMM_WORLD.Allreduce(x, FakeCAI(out))
    assert (out == x).all()
    back = np.zeros(4, np.float32)
    mpigpu.COMM_WORLD.Allreduce(FakeCAI(x), back)
    assert (back == x).all()


def test_error_is_an_mpi_exception():
    e = mpigpu.Error('Bcast', 'boom', arg='buf', rank=3, error_class=MPI.ERR_BUFFER)
    assert isinstance(e, MPI.Exception)
    assert str(e) == 'Bcast: buf: boom (rank 3)'


def test_op_must_be_an_mpi_op():
    with pytest.raises(TypeError, match="Argument 'op' has incorrect type") as e:
        build('Allreduce', Coll.ALLREDUCE, 2, FakeCAI(np.zeros(4, np.float32)), FakeCAI(np.zeros(4, np.float32)), op=None)
    assert e.value.Get_error_class() == MPI.ERR_OP


def test_numpy_integers_as_counts():
    f = FakeCAI(np.zeros(10, np.float32))
    assert parse([f, np.int64(4), np.int32(3), MPI.FLOAT]).count == 4


def test_every_buffer_method_takes_device_buffers_or_refuses_them():
    """Methods with no engine path run on host mirrors (persistent point-to-point, Alltoallw); those
    whose device memory MPI would keep using after the call refuse it before MPI sees the pointer."""
    comm = mpigpu.COMM_SELF
    x = FakeCAI(np.arange(4, dtype=np.float32))
    y = FakeCAI(np.zeros(4, np.float32))
    sreq, rreq = comm.Send_init(x, 0, 7), comm.Recv_init(y, 0, 7)
    for _ in range(2):
        mpigpu.Startall([rreq, sreq])
        MPI.Request.Waitall([sreq, rreq])
    assert y.array.tolist() == [0, 1, 2, 3]
    sreq.Free()
    rreq.Free()
    z = FakeCAI(np.zeros(4, np.float32))
    comm.Alltoallw([x, ([4], [0]), [MPI.FLOAT]], [z, ([4], [0]), [MPI.FLOAT]])
    assert z.array.tolist() == [0, 1, 2, 3]
    # the buffered-send buffer: host memory of its size stands in for device memory (MPI writes it)
    space = FakeCAI(np.zeros(64 + MPI.BSEND_OVERHEAD, np.uint8))
    comm.Attach_buffer(space)
    comm.Bsend(x, 0, 9)
    got = FakeCAI(np.zeros(4, np.float32))
    comm.Recv(got, 0, 9)
    assert got.array.tolist() == [0, 1, 2, 3] and space.array.tolist() == [0] * space.array.size
    assert comm.Detach_buffer() is space
    from mpigpu import MPI as mpigpu_MPI
    mpigpu_MPI.Attach_buffer(space)  # the process's buffer too
    assert mpigpu_MPI.Detach_buffer() is space
    from mpigpu._face import objects
    with pytest.raises(mpigpu.Error, match='window memory'):
        objects.Win.Create(x, comm=comm)
    # host buffers go through unchanged
    req = comm.Iallreduce(np.ones(3), np.zeros(3))
    req.Wait()


def test_startall_starts_in_the_lists_order(monkeypatch):
    """Which requests of a Startall are mpigpu's depends on each rank's own buffers (device: mpigpu's, host:
    the library's), so they start in the list's order, never mpigpu's first: two persistent collectives
    placed oppositely on two ranks would otherwise start in different orders there. Runs of the library's
    requests start in one call."""
    from mpigpu._state import requests
    started = []

    class Ours(requests.Startable):
        def __init__(self, name):
            self.name = name

        def Start(self):
            started.append(self.name)

    class Library:
        def __init__(self, name):
            self.name = name

    import types
    library_startall = types.SimpleNamespace(Startall=lambda reqs: started.append(tuple(r.name for r in reqs)))
    monkeypatch.setattr(requests, '_plain', types.SimpleNamespace(Prequest=library_startall))
    requests.Startall([Library('a'), Ours('b'), Library('c'), Library('d'), Ours('e')])
    assert started == [('a',), 'b', ('c', 'd'), 'e']
    started.clear()
    requests.Startall([Ours('x'), Library('y')])
    assert started == ['x', ('y',)]


def test_the_general_path_reads_each_buffer_once():
    """A generic CUDA Array Interface exporter is asked for its memory once per call, by the method's
    placement check or by the general path: 2-3 reads per buffer before (issue 45)."""
    out = run_ranks(2, 'reads_fake_device.py')
    assert 'buffer reads on 2 ranks: 11 calls as counted' in out, out


@pytest.mark.parametrize('n', (1, 3))
def test_read_buffers_reach_a_cuda_aware_mpi_as_cuda_arrays(n):
    """With host MPI taken for CUDA-aware, the general path hands mpi4py the DeviceBuffers it read once;
    mpi4py reads them through their CUDA Array Interface (without one it raised TypeError)."""
    out = run_ranks(n, 'aware_host_fake_device.py', env={'MPIGPU_MPI_CUDA_AWARE': '1'})
    assert f'CUDA-aware host MPI on the general path, {n} ranks: ok' in out, out
