"""mpigpu in mpi4py's place: the objects `from mpigpu import MPI` and `python -m mpigpu` put where
mpi4py.MPI has its own, so that an unmodified program's buffer calls take device arrays.

Replaced: the predefined communicators (COMM_WORLD, COMM_SELF: mpigpu.Intracomm), the predefined
datatypes and ops (objects of mpigpu's Datatype and Op on the same handles, so Pack, Unpack and
Reduce_local take device buffers, and derived datatypes are mpigpu's too), the communicator classes
(so `MPI.Intracomm(c)`, `MPI.Comm.f2py(h)`, `MPI.Comm.fromhandle(h)` make mpigpu's communicators),
the classes whose objects programs make through class methods (Win, File, Op, Message: its Probe and
Iprobe), Prequest (its Startall starts mpigpu's persistent requests too), and the functions of the
buffered-send buffer (Attach_buffer, Detach_buffer: a device buffer is replaced by host memory MPI
can write, mpigpu/_face/bsend.py). mpi4py's own objects of a replaced class are instances of
mpigpu's (mpigpu/_base/plain.py), so `isinstance(c, MPI.Intracomm)` holds for every communicator, and
mpigpu's methods take them (mpi4py.util.pkl5 calls MPI.Comm.Recv and MPI.Message.Recv on its own).
Request classes stay mpi4py's. Null objects (DATATYPE_NULL, OP_NULL, WIN_NULL, FILE_NULL,
COMM_NULL, the MESSAGE_ constants) stay mpi4py's: they take no buffers, and they compare, pickle and
come out of mpi4py's C API as its own. mpi4py's C API constructors give mpigpu's classes too
(mpigpu/_face/capi.py).

Pickling: mpi4py pickles a predefined object by its name in mpi4py.MPI, which then names mpigpu's
object, so the plain ones that mpi4py itself still makes (a datatype's decoded parts, ...) pickle
through copyreg to mpigpu's object of the same name.
"""
import copyreg

from mpi4py import MPI

from . import bsend as _bsend, capi as _capi, pickling as _pickle
from .._base import plain as _plain


def _null(obj):
    """A null object (DATATYPE_NULL and the names this MPI leaves on its handle: Fortran and optional
    types it lacks; OP_NULL, WIN_NULL, FILE_NULL): mpi4py's objects stay, so they pickle, compare and
    come out of mpi4py's C API as mpi4py's nulls do."""
    nulls = {_plain.Datatype: MPI.DATATYPE_NULL, _plain.Op: MPI.OP_NULL, _plain.Win: MPI.WIN_NULL,
             _plain.File: MPI.FILE_NULL}
    return type(obj) in nulls and obj == nulls[type(obj)]


_replaced = {}


def replacements():
    """{name: mpigpu's object} for the names of mpi4py.MPI that mpigpu replaces (made once: the
    drop-in and `from mpigpu import MPI` share them)."""
    if _replaced:
        return _replaced
    from . import comm, objects
    from .._state import requests
    out = {'COMM_WORLD': comm.COMM_WORLD, 'COMM_SELF': comm.COMM_SELF}
    for cls in (comm.Comm, comm.Intracomm, comm.Intercomm, comm.Topocomm, comm.Cartcomm, comm.Graphcomm,
                comm.Distgraphcomm, objects.Win, objects.File, objects.Op, objects.Message, requests.Prequest):
        out[cls.__name__] = cls
    out['Attach_buffer'], out['Detach_buffer'] = _bsend.Attach_buffer, _bsend.Detach_buffer
    ours = _ours_by_plain()
    for name in dir(MPI):
        obj = getattr(MPI, name)
        if type(obj) in ours and not _null(obj):
            out[name] = objects.constant(ours[type(obj)](obj))
    _replaced.update(out)
    return _replaced


def _ours_by_plain():
    from . import objects
    return {_plain.Datatype: objects.Datatype, _plain.Op: objects.Op, _plain.Win: objects.Win,
            _plain.File: objects.File}


_installed = False


def installed():
    """True once mpigpu is under mpi4py in this process (python -m mpigpu)."""
    return _installed


def install():
    """Puts mpigpu's objects into mpi4py.MPI itself (python -m mpigpu), once."""
    global _installed
    if not _installed:
        replaced = replacements()
        # mpi4py's classes whose objects pickle through copyreg: those replaced, and those of the
        # replaced constants (a plain MPI.INT would otherwise pickle as the name of mpigpu's)
        plain = {getattr(_plain, name) for name, obj in replaced.items() if isinstance(obj, type)}
        plain |= {type(getattr(MPI, name)) for name, obj in replaced.items()
                  if not isinstance(obj, type) and type(getattr(MPI, name)).__module__ == 'mpi4py.MPI'}
        # per class, the constants a copy of one may equal (named before mpigpu's take the names)
        named = {cls: [n for n in dir(MPI) if not n.startswith('_') and isinstance(getattr(MPI, n), cls.__mro__[-2])]
                 for cls in plain}
        for name, obj in replaced.items():
            setattr(MPI, name, obj)
        for cls in plain:
            copyreg.pickle(cls, _plain_reducer(cls, named[cls]))
        _capi.install(_ours_by_plain())
        _installed = True


def _plain_reducer(cls, names):
    """Pickles mpi4py's own objects of `cls`: a predefined one by name, back as mpigpu's; others as
    mpi4py does."""
    def reduce(obj):
        return _pickle.by_name(obj, names) or cls.__reduce__(obj)
    return reduce
