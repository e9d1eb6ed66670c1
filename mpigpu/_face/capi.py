"""mpi4py's C API under `python -m mpigpu`: the constructors in `MPI.__pyx_capi__` (PyMPIComm_New,
PyMPIDatatype_New, PyMPIOp_New, PyMPIWin_New, PyMPIFile_New) give mpigpu's classes.

C extensions built on mpi4py (and ctypes users) fetch these capsules when they are imported; a
communicator they hand back to Python is then mpigpu's, so its buffer calls take device arrays instead
of passing device pointers to an MPI that is not CUDA-aware. Each replacement calls mpi4py's own
constructor and wraps its object; a null handle stays mpi4py's object, as the module's null constants
do. Extensions imported before the drop-in keep mpi4py's functions.
"""
import ctypes

from mpi4py import MPI

from .._base import plain as _plain

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer.restype = ctypes.c_void_p
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.argtypes = [ctypes.py_object]
_capsule_name.restype = ctypes.c_char_p
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_new.restype = ctypes.py_object

_kept = []  # callbacks, names and mpi4py's capsules: a capsule only points at them


def _handle_type(plain_class):
    """The C type of an MPI handle of `plain_class` as a value (int in MPICH, a pointer in Open MPI)."""
    return {ctypes.sizeof(ctypes.c_uint32): ctypes.c_uint32,
            ctypes.sizeof(ctypes.c_uint64): ctypes.c_uint64}[MPI._sizeof(plain_class)]


def _wrap(typename, convert):
    table = MPI.__pyx_capi__
    key = f'PyMPI{typename}_New'
    capsule = table.get(key)
    if capsule is None:
        return
    name = _capsule_name(capsule)
    functype = ctypes.PYFUNCTYPE(ctypes.py_object, _handle_type(getattr(_plain, typename)))
    original = functype(_capsule_pointer(capsule, name))

    def new(handle):
        obj = original(handle)
        try:
            return convert(obj)
        except Exception:  # noqa: BLE001 -- a C caller cannot take a Python error from here: mpi4py's object
            return obj

    callback = functype(new)
    _kept.append((callback, name, capsule))
    table[key] = _capsule_new(ctypes.cast(callback, ctypes.c_void_p), name, None)


def install(classes):
    """Replaces the constructors; `classes` maps mpi4py's Datatype, Op, Win, File to mpigpu's."""
    from .comm import ours
    _wrap('Comm', ours)
    for plain, cls in classes.items():
        null = {_plain.Datatype: MPI.DATATYPE_NULL, _plain.Op: MPI.OP_NULL, _plain.Win: MPI.WIN_NULL,
                _plain.File: MPI.FILE_NULL}[plain]
        _wrap(plain.__name__, lambda obj, cls=cls, null=null: obj if obj == null else cls(obj))
