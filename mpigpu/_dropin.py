"""mpigpu in mpi4py's place: the objects `from mpigpu import MPI` and `python -m mpigpu` put where
mpi4py.MPI has its own, so that an unmodified program's buffer calls take device arrays.

Replaced: the predefined communicators (COMM_WORLD, COMM_SELF: mpigpu.Intracomm), the predefined
datatypes and ops (objects of mpigpu's Datatype and Op on the same handles, so Pack, Unpack and
Reduce_local take device buffers, and derived datatypes are mpigpu's too), and the classes whose
objects programs make through class methods (Win, File, Op) with their null objects. Communicator,
Message and Request classes stay mpi4py's (`isinstance(c, MPI.Intracomm)` holds for every
communicator; mpi4py.util.pkl5 builds on MPI.Message); every communicator made from a wrapped one is
wrapped, and a matched probe on one gives mpigpu's Message.

Pickling: mpi4py pickles a predefined object by its name in mpi4py.MPI, which then names mpigpu's
object, so the plain ones that mpi4py itself still makes (a datatype's decoded parts, ...) pickle
through copyreg to mpigpu's object of the same name.
"""
import copyreg

from mpi4py import MPI

from . import _pickle

_NULLS = ('DATATYPE_NULL',)


_replaced = {}


def replacements():
    """{name: mpigpu's object} for the names of mpi4py.MPI that mpigpu replaces (made once: the
    drop-in and `from mpigpu import MPI` share them)."""
    if _replaced:
        return _replaced
    from . import COMM_SELF, COMM_WORLD, objects
    out = {'COMM_WORLD': COMM_WORLD, 'COMM_SELF': COMM_SELF, 'Win': objects.Win, 'File': objects.File,
           'Op': objects.Op}
    ours = {MPI.Datatype: objects.Datatype, MPI.Op: objects.Op, MPI.Win: objects.Win, MPI.File: objects.File}
    for name in dir(MPI):
        obj = getattr(MPI, name)
        if name not in _NULLS and type(obj) in ours:
            out[name] = objects.constant(ours[type(obj)](obj))
    _replaced.update(out)
    return _replaced


_installed = False


def install():
    """Puts mpigpu's objects into mpi4py.MPI itself (python -m mpigpu), once."""
    global _installed
    if not _installed:
        replaced = replacements()
        for name, obj in replaced.items():
            setattr(MPI, name, obj)
        for cls in (MPI.Datatype, MPI.Op, MPI.Intracomm, MPI.Comm):
            copyreg.pickle(cls, _plain_reducer(cls, [n for n, o in replaced.items()
                                                     if isinstance(o, cls) and not isinstance(o, type)]))
        _installed = True


def _plain_reducer(cls, names):
    """Pickles mpi4py's own objects of `cls`: a predefined one by name, back as mpigpu's; others as
    mpi4py does."""
    def reduce(obj):
        return _pickle.by_name(obj, names) or cls.__reduce__(obj)
    return reduce
