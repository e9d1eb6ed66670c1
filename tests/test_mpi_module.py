"""`from mpigpu import MPI`: mpi4py's surface with the predefined communicators wrapped."""
from mpi4py import MPI as mpi4py_MPI

import mpigpu
from mpigpu import MPI


def test_surface_matches_mpi4py():
    missing = [name for name in dir(mpi4py_MPI) if not name.startswith('__') and not hasattr(MPI, name)]
    assert not missing, missing
    assert MPI.SUM is mpi4py_MPI.SUM and MPI.FLOAT is mpi4py_MPI.FLOAT and MPI.IN_PLACE is mpi4py_MPI.IN_PLACE
    assert MPI.Intracomm is mpi4py_MPI.Intracomm
    assert MPI._typedict is mpi4py_MPI._typedict


def test_predefined_communicators_are_wrapped():
    assert MPI.COMM_WORLD is mpigpu.COMM_WORLD and isinstance(MPI.COMM_WORLD, mpigpu.Intracomm)
    assert MPI.COMM_SELF is mpigpu.COMM_SELF and MPI.COMM_WORLD == mpi4py_MPI.COMM_WORLD
    assert isinstance(MPI.COMM_WORLD.Dup(), mpigpu.Intracomm)
