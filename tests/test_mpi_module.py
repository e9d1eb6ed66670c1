"""`from mpigpu import MPI`: mpi4py's surface with mpigpu's objects where they take buffers, and the
pickling of its predefined objects."""
import pickle

import pytest

from mpi4py import MPI as mpi4py_MPI

import mpigpu
from mpigpu import MPI
from mpigpu._face import objects


def test_surface_matches_mpi4py():
    missing = [name for name in dir(mpi4py_MPI) if not name.startswith('__') and not hasattr(MPI, name)]
    assert not missing, missing
    assert MPI.IN_PLACE is mpi4py_MPI.IN_PLACE and MPI.Request is mpi4py_MPI.Request
    assert MPI._typedict is mpi4py_MPI._typedict


def test_predefined_objects_are_mpigpus_on_the_same_handles():
    assert MPI.COMM_WORLD is mpigpu.COMM_WORLD and isinstance(MPI.COMM_WORLD, mpigpu.Intracomm)
    assert MPI.COMM_SELF is mpigpu.COMM_SELF and MPI.COMM_WORLD == mpi4py_MPI.COMM_WORLD
    assert isinstance(MPI.FLOAT, objects.Datatype) and MPI.FLOAT == mpi4py_MPI.FLOAT
    assert isinstance(MPI.SUM, objects.Op) and MPI.SUM == mpi4py_MPI.SUM
    assert MPI.Win is objects.Win and MPI.File is objects.File and MPI.Op is objects.Op
    assert MPI.Message is objects.Message and MPI.Request is mpi4py_MPI.Request
    for null in ('DATATYPE_NULL', 'OP_NULL', 'WIN_NULL', 'FILE_NULL', 'COMM_NULL', 'MESSAGE_NULL'):
        assert getattr(MPI, null) is getattr(mpi4py_MPI, null), null  # they take no buffers


def test_what_is_made_from_them_is_mpigpus():
    assert type(MPI.COMM_WORLD.Dup()) is mpigpu.Intracomm
    cart = MPI.COMM_WORLD.Create_cart([MPI.COMM_WORLD.Get_size()])
    assert type(cart) is mpigpu.Cartcomm and isinstance(cart, mpi4py_MPI.Cartcomm)
    assert type(cart.Sub([True])) is mpigpu.Cartcomm
    vector = MPI.DOUBLE.Create_vector(2, 1, 2)
    assert isinstance(vector, objects.Datatype) and isinstance(vector.Dup(), objects.Datatype)
    assert MPI.COMM_WORLD.Split(mpi4py_MPI.UNDEFINED, 0) == mpi4py_MPI.COMM_NULL


def test_predefined_objects_pickle_by_name():
    for obj in (MPI.COMM_WORLD, MPI.COMM_SELF, MPI.FLOAT, MPI.SUM, MPI.WIN_NULL, MPI.FILE_NULL):
        assert pickle.loads(pickle.dumps(obj)) is obj


def test_communicator_classes_are_mpigpus_and_accept_mpi4pys_objects():
    assert MPI.Intracomm is mpigpu.Intracomm and MPI.Comm is mpigpu._face.comm.Comm and MPI.Cartcomm is mpigpu.Cartcomm
    plain = mpi4py_MPI.COMM_WORLD
    assert isinstance(plain, MPI.Intracomm) and isinstance(plain, MPI.Comm) and not isinstance(plain, MPI.Cartcomm)
    assert issubclass(mpi4py_MPI.Cartcomm, MPI.Topocomm) and not issubclass(mpi4py_MPI.Intercomm, MPI.Intracomm)
    assert type(MPI.Intracomm(plain)) is mpigpu.Intracomm
    cart = MPI.COMM_WORLD.Create_cart([MPI.COMM_WORLD.Get_size()])
    for made in (MPI.Comm.fromhandle(cart.handle), MPI.Comm.fromint(cart.toint()), MPI.Comm.f2py(cart.py2f())):
        assert type(made) is mpigpu.Cartcomm and made == cart
    with pytest.raises(TypeError):
        MPI.Topocomm(MPI.COMM_SELF)  # mpi4py's constructor still checks the topology kind
    with pytest.raises(TypeError):
        MPI.Graphcomm(cart)
    cart.Free()


def test_every_communicator_class_derives_from_mpigpus_comm_at_the_c_level():
    """A Cython extension's `MPI.Comm` argument (resolved to mpigpu's class under the drop-in) is checked by
    the type's ancestry: every communicator class has mpigpu's Comm in its MRO, and its mpi4py class first
    (the C base whose __new__ checks a topology's kind)."""
    for cls in (MPI.Intracomm, MPI.Intercomm, MPI.Topocomm, MPI.Cartcomm, MPI.Graphcomm, MPI.Distgraphcomm):
        assert mpigpu._face.comm.Comm in cls.__mro__, cls
        assert cls.__base__ is cls.stands_for, (cls, cls.__base__)
    assert mpigpu._face.comm.Comm in type(MPI.COMM_WORLD).__mro__


def test_a_programs_subclass_of_a_replaced_class():
    class Mine(MPI.Cartcomm):
        def __new__(cls, comm=None):
            return MPI.Cartcomm.__new__(cls, comm)
    cart = MPI.COMM_WORLD.Create_cart([MPI.COMM_WORLD.Get_size()])
    mine = Mine(cart)
    assert isinstance(mine, mpigpu.Cartcomm) and not isinstance(cart, Mine) and mine == cart
    cart.Free()


def test_copies_of_predefined_objects_pickle_as_copies():
    for obj in (MPI.COMM_WORLD, MPI.COMM_NULL, MPI.FLOAT, MPI.SUM, MPI.DATATYPE_NULL):
        cls = type(obj)
        copy = pickle.loads(pickle.dumps(cls(obj)))
        assert type(copy) is cls and copy == obj and copy is not obj


def test_message_class_methods_and_mpi4pys_own_messages():
    req = MPI.COMM_SELF.Isend(bytearray(b'ab'), 0, 7)
    m = MPI.Message.Probe(MPI.COMM_SELF, 0, 7)
    assert type(m) is objects.Message and isinstance(m, mpi4py_MPI.Message)
    buf = bytearray(2)
    m.Recv(buf)
    req.Wait()
    assert buf == b'ab' and m == MPI.MESSAGE_NULL
    assert MPI.Message.Iprobe(MPI.COMM_SELF, 0, 7) is None
    req = mpi4py_MPI.COMM_SELF.Isend(bytearray(b'cd'), 0, 8)
    plain = mpi4py_MPI.COMM_SELF.Mprobe(0, 8)
    assert type(plain) is mpi4py_MPI.Message and isinstance(plain, MPI.Message)
    MPI.Message.Recv(plain, buf)  # as mpi4py.util.pkl5 calls it
    req.Wait()
    assert buf == b'cd'


def test_buffered_send_buffer_of_host_memory_goes_to_mpi():
    space = bytearray(64 + MPI.BSEND_OVERHEAD)
    MPI.Attach_buffer(space)
    MPI.COMM_SELF.Bsend(bytearray(b'xy'), 0, 3)
    buf = bytearray(2)
    MPI.COMM_SELF.Recv(buf, 0, 3)
    assert buf == b'xy'
    detached = MPI.Detach_buffer()
    assert len(detached) == len(space)


def test_query_cuda_support_answers_for_mpi4pys_objects(monkeypatch):
    from mpigpu import _cuda
    from mpigpu._face import dropin as _dropin
    from mpigpu._base import host_mpi as _host_mpi
    monkeypatch.setattr(_host_mpi, 'cuda_aware', lambda: False)
    monkeypatch.setattr(_cuda, 'available', lambda: (True, ''))
    monkeypatch.setattr(_dropin, '_installed', False)
    assert mpigpu.query_cuda_support() == 0  # mpi4py.MPI's objects would pass device pointers to MPI
    monkeypatch.setattr(_dropin, '_installed', True)
    assert mpigpu.query_cuda_support() == 1  # python -m mpigpu: they take mpigpu's paths
    monkeypatch.setattr(_cuda, 'available', lambda: (False, 'no GPU'))
    assert mpigpu.query_cuda_support() == 0
    monkeypatch.setattr(_host_mpi, 'cuda_aware', lambda: True)
    assert mpigpu.query_cuda_support() == 1  # the MPI library's own support
