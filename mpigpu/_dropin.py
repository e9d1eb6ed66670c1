"""mpigpu in mpi4py's place: the objects `from mpigpu import MPI` and `python -m mpigpu` put where
mpi4py.MPI has its own, so that an unmodified program's buffer calls take device arrays.

Replaced: the predefined communicators (COMM_WORLD, COMM_SELF: mpigpu.Intracomm), the predefined
datatypes and ops (objects of mpigpu's Datatype and Op on the same handles, so Pack, Unpack and
Reduce_local take device buffers, and derived datatypes are mpigpu's too), and the classes whose
objects programs make through class methods (Win, File, Op, Message). Communicator classes stay
mpi4py's (`isinstance(c, MPI.Intracomm)` holds for every communicator); every communicator made from
a wrapped one is wrapped.
"""
from mpi4py import MPI

_NULLS = ('DATATYPE_NULL', 'OP_NULL')


def replacements():
    """{name: mpigpu's object} for the names of mpi4py.MPI that mpigpu replaces."""
    from . import COMM_SELF, COMM_WORLD, objects
    out = {'COMM_WORLD': COMM_WORLD, 'COMM_SELF': COMM_SELF, 'Win': objects.Win, 'File': objects.File,
           'Op': objects.Op, 'Message': objects.Message}
    for name in dir(MPI):
        obj = getattr(MPI, name)
        if name in _NULLS:
            continue
        if type(obj) is MPI.Datatype:
            out[name] = objects.Datatype(obj)
        elif type(obj) is MPI.Op:
            out[name] = objects.Op(obj)
    return out


_installed = False


def install():
    """Puts mpigpu's objects into mpi4py.MPI itself (python -m mpigpu), once."""
    global _installed
    if not _installed:
        for name, obj in replacements().items():
            setattr(MPI, name, obj)
        _installed = True
