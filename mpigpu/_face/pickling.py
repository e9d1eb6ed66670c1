"""How mpigpu's predefined objects pickle: by name, as mpi4py's do, and back as the objects of the same
name in `from mpigpu import MPI` (mpigpu's), looked up when they are unpickled.

The names resolve through the drop-in's table of replacements, which the package binds here when it is
imported (before any of its modules: unpickling `mpigpu._face.pickling.predefined` imports the package first),
so this module needs nothing above it."""
from mpi4py import MPI

from .._base import plain as _plain

_replacements = None  # () -> {name: mpigpu's object} (mpigpu/_face/dropin.py), bound by the package


def bind(replacements):
    """Sets the table the names resolve in (the package's __init__ calls it)."""
    global _replacements
    _replacements = replacements


def predefined(name):
    """The object named `name` in mpigpu.MPI (what a pickled predefined object comes back as): mpigpu's
    replacement of that name, else mpi4py's object (the null objects, which stay mpi4py's)."""
    obj = _replacements().get(name)
    return obj if obj is not None else getattr(MPI, name)


def copy_of(cls, name):
    """A new `cls` object on the handle of the predefined object `name` (what a copy of one pickles as).
    `cls` is a class, or the name of one of mpi4py's own classes (python -m mpigpu puts mpigpu's under
    mpi4py's names, so pickle cannot refer to mpi4py's by name: mpigpu/_base/plain.py keeps them)."""
    if isinstance(cls, str):
        cls = getattr(_plain, cls)
    return cls(predefined(name))


def _class_ref(cls):
    return cls.__name__ if cls.__module__ == 'mpi4py.MPI' else cls


def by_name(obj, names):
    """The __reduce__ value of `obj` when it holds the handle of the predefined object of one of `names`,
    else None: the name itself for that object (aliases such as COMPLEX4 are objects of their own),
    a copy of it for another object on its handle (as mpi4py pickles them, so identity survives a
    round trip and copies stay copies)."""
    for name in names:
        if obj is getattr(MPI, name, None) or obj is predefined(name):
            return predefined, (name,)
    for name in names:
        named = getattr(MPI, name, None)
        if named is not None and obj == named:
            return copy_of, (_class_ref(type(obj)), name)
    return None
