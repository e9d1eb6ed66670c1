"""`from mpigpu import MPI`: the surface of `mpi4py.MPI` with mpigpu's objects where they take buffers.

Every name of mpi4py.MPI is here (datatypes, ops, classes, functions, constants); `COMM_WORLD` and
`COMM_SELF` are `mpigpu.Intracomm` objects on the same handles, the predefined datatypes and ops are
mpigpu's (Pack, Unpack, Reduce_local take device buffers), and the communicator classes, `Win`,
`File` and `Op` are mpigpu's (mpigpu/_face/dropin.py: `MPI.Intracomm(comm)` wraps a communicator), so an
mpi4py program changes one import line and its buffer calls accept GPU arrays. Message and Request
classes stay mpi4py's own.
"""
from mpi4py import MPI as _MPI
from mpi4py.MPI import *  # noqa: F401,F403  (the whole public surface)

from ._face.dropin import replacements as _replacements

globals().update(_replacements())


def __getattr__(name):
    # private or late names (e.g. MPI._typedict) resolve in mpi4py.MPI
    return getattr(_MPI, name)


def __dir__():
    return sorted(set(dir(_MPI)) | set(_replacements()))
