"""How mpigpu's predefined objects pickle: by name, as mpi4py's do, and back as the objects of the same
name in `from mpigpu import MPI` (mpigpu's), looked up when they are unpickled."""
import importlib

from mpi4py import MPI


def predefined(name):
    """The object named `name` in mpigpu.MPI (what a pickled predefined object comes back as)."""
    return getattr(importlib.import_module('mpigpu.MPI'), name)


def by_name(obj, names):
    """The __reduce__ value of `obj` when it is the predefined object of one of `names`, else None."""
    for name in names:
        if obj == getattr(MPI, name, None):
            return predefined, (name,)
    return None
