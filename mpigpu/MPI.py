"""`from mpigpu import MPI`: the surface of `mpi4py.MPI` with the predefined communicators wrapped.

Every name of mpi4py.MPI is here (datatypes, ops, classes, functions, constants); `COMM_WORLD` and
`COMM_SELF` are `mpigpu.Intracomm` objects on the same handles, so an mpi4py program changes one import
line and its buffer calls accept GPU arrays. Classes stay mpi4py's own (`MPI.Intracomm(comm)` gives a
plain communicator; `mpigpu.Intracomm(comm)` wraps one).
"""
from mpi4py import MPI as _MPI
from mpi4py.MPI import *  # noqa: F401,F403  (the whole public surface)

from . import COMM_SELF, COMM_WORLD  # noqa: F401  (wrapped; they replace mpi4py's here)


def __getattr__(name):
    # private or late names (e.g. MPI._typedict) resolve in mpi4py.MPI
    return getattr(_MPI, name)


def __dir__():
    return sorted(set(dir(_MPI)) | {'COMM_WORLD', 'COMM_SELF'})
