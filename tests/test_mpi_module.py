"""`from mpigpu import MPI`: mpi4py's surface with mpigpu's objects where they take buffers, and the
pickling of its predefined objects."""
import pickle

from mpi4py import MPI as mpi4py_MPI

import mpigpu
from mpigpu import MPI, objects


def test_surface_matches_mpi4py():
    missing = [name for name in dir(mpi4py_MPI) if not name.startswith('__') and not hasattr(MPI, name)]
    assert not missing, missing
    assert MPI.IN_PLACE is mpi4py_MPI.IN_PLACE and MPI.Intracomm is mpi4py_MPI.Intracomm
    assert MPI._typedict is mpi4py_MPI._typedict


def test_predefined_objects_are_mpigpus_on_the_same_handles():
    assert MPI.COMM_WORLD is mpigpu.COMM_WORLD and isinstance(MPI.COMM_WORLD, mpigpu.Intracomm)
    assert MPI.COMM_SELF is mpigpu.COMM_SELF and MPI.COMM_WORLD == mpi4py_MPI.COMM_WORLD
    assert isinstance(MPI.FLOAT, objects.Datatype) and MPI.FLOAT == mpi4py_MPI.FLOAT
    assert isinstance(MPI.SUM, objects.Op) and MPI.SUM == mpi4py_MPI.SUM
    assert MPI.Win is objects.Win and MPI.File is objects.File and MPI.Op is objects.Op
    assert MPI.Message is mpi4py_MPI.Message and isinstance(MPI.WIN_NULL, objects.Win)
    assert MPI.DATATYPE_NULL is mpi4py_MPI.DATATYPE_NULL


def test_what_is_made_from_them_is_mpigpus():
    assert isinstance(MPI.COMM_WORLD.Dup(), mpigpu.Intracomm)
    cart = MPI.COMM_WORLD.Create_cart([MPI.COMM_WORLD.Get_size()])
    assert isinstance(cart, mpigpu.Cartcomm) and isinstance(cart, mpi4py_MPI.Cartcomm)
    assert isinstance(cart.Sub([True]), mpigpu.Cartcomm)
    vector = MPI.DOUBLE.Create_vector(2, 1, 2)
    assert isinstance(vector, objects.Datatype) and isinstance(vector.Dup(), objects.Datatype)
    assert MPI.COMM_WORLD.Split(mpi4py_MPI.UNDEFINED, 0) == mpi4py_MPI.COMM_NULL


def test_predefined_objects_pickle_by_name():
    for obj in (MPI.COMM_WORLD, MPI.COMM_SELF, MPI.FLOAT, MPI.SUM, MPI.WIN_NULL, MPI.FILE_NULL):
        assert pickle.loads(pickle.dumps(obj)) is obj
