"""mpi4py's own classes, bound when mpigpu is imported, and the metaclass of mpigpu's classes that take
their names.

`python -m mpigpu` puts mpigpu's subclasses in mpi4py.MPI under mpi4py's names (MPI.Comm,
MPI.Intracomm, MPI.Win, ...), so a program's `MPI.Comm.f2py(h)` or `MPI.Intracomm(c)` makes mpigpu's
objects. mpigpu itself calls mpi4py's methods and makes plain objects through the names here: looked
up in mpi4py.MPI at call time they would be mpigpu's own again.
"""
from mpi4py import MPI

Comm, Intracomm, Intercomm, Topocomm = MPI.Comm, MPI.Intracomm, MPI.Intercomm, MPI.Topocomm
Cartcomm, Graphcomm, Distgraphcomm = MPI.Cartcomm, MPI.Graphcomm, MPI.Distgraphcomm
Win, File, Op, Datatype, Message = MPI.Win, MPI.File, MPI.Op, MPI.Datatype, MPI.Message
Prequest = MPI.Prequest
Attach_buffer, Detach_buffer = MPI.Attach_buffer, MPI.Detach_buffer


class StandsIn(type):
    """Metaclass of an mpigpu class that stands in for an mpi4py class under its name (the class sets
    `stands_for`): mpi4py's own objects of that class (made by mpi4py's C API, other libraries, or
    before mpigpu took the name) are instances of it too, so `isinstance(c, MPI.Intracomm)` keeps
    holding for every communicator. Subclasses of it (a program's own) check as classes do."""

    def __instancecheck__(cls, obj):
        plain = cls.__dict__.get('stands_for')
        return isinstance(obj, plain) if plain is not None else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub):
        plain = cls.__dict__.get('stands_for')
        return issubclass(sub, plain) if plain is not None else type.__subclasscheck__(cls, sub)
