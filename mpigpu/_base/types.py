"""Element types and reduction ops as MPI and NumPy know them: the MPI datatypes and typecodes that name
each Dtype, the ops of MPI.Op handles, the (type, op) pairs MPI allows, and the NumPy dtype of each."""
import numpy as np
from mpi4py import MPI

from .codes import MIRROR_TYPESTRS, Dtype, Op, dtype_for
from ..errors import Error

OP_CODE = {getattr(MPI, op.name).handle: op for op in Op}  # MPI.SUM.handle -> Op.SUM


def op_code(op):
    """Code of a predefined reduction op, or -1 (user-defined ops, MAXLOC/MINLOC, REPLACE...)."""
    return OP_CODE.get(op.handle, -1)


# MPI 4.1, section 6.9.2: which type classes each predefined operation takes.
_INTEGER = frozenset(t for t in Dtype if t.kind in 'iu')
_FLOAT = frozenset(t for t in Dtype if t.kind in 'fB')
_COMPLEX = frozenset(t for t in Dtype if t.kind == 'c')
_LOGICAL = frozenset(t for t in Dtype if t.kind == 'b')
_ALLOWED = {
    Op.SUM: _INTEGER | _FLOAT | _COMPLEX, Op.PROD: _INTEGER | _FLOAT | _COMPLEX,
    Op.MAX: _INTEGER | _FLOAT, Op.MIN: _INTEGER | _FLOAT,
    Op.LAND: _INTEGER | _LOGICAL, Op.LOR: _INTEGER | _LOGICAL, Op.LXOR: _INTEGER | _LOGICAL,
    Op.BAND: _INTEGER, Op.BOR: _INTEGER, Op.BXOR: _INTEGER,
}


def check_op(call, dtype, op, rank):
    """Raises as MPI does for a predefined op on a type class it is not defined for."""
    code = op_code(op)
    if code < 0 or dtype < 0:
        return
    if dtype not in _ALLOWED[code]:
        raise Error(call, f'MPI.{code.name} is not defined for {Dtype(dtype).name.lower()} (MPI forbids this '
                    'pair)', arg='op', rank=rank, error_class=MPI.ERR_OP)


# Predefined MPI datatypes that name one of our element types (several MPI names per type), the first
# usable one being the type host MPI reduces.
_MPI_NAMES = {
    Dtype.BOOL: ('C_BOOL', 'BOOL'),
    Dtype.INT8: ('INT8_T', 'SIGNED_CHAR', 'CHAR'), Dtype.UINT8: ('UINT8_T', 'UNSIGNED_CHAR', 'BYTE'),
    Dtype.INT16: ('INT16_T', 'SHORT'), Dtype.UINT16: ('UINT16_T', 'UNSIGNED_SHORT'),
    Dtype.INT32: ('INT32_T', 'INT'), Dtype.UINT32: ('UINT32_T', 'UNSIGNED'),
    Dtype.INT64: ('INT64_T', 'LONG_LONG', 'LONG'),
    Dtype.UINT64: ('UINT64_T', 'UNSIGNED_LONG_LONG', 'UNSIGNED_LONG'),
    Dtype.FLOAT16: ('C_FLOAT16',), Dtype.BFLOAT16: (),
    Dtype.FLOAT32: ('FLOAT',), Dtype.FLOAT64: ('DOUBLE',),
    Dtype.COMPLEX64: ('C_FLOAT_COMPLEX', 'C_COMPLEX', 'COMPLEX'),
    Dtype.COMPLEX128: ('C_DOUBLE_COMPLEX', 'DOUBLE_COMPLEX'),
}
FROM_MPI = {}                    # MPI datatype handle -> Dtype
NATIVE = [None] * len(Dtype)     # the MPI datatype host MPI reduces for each code, or None
for _code, _mpinames in _MPI_NAMES.items():
    for _m in _mpinames:
        _dt = getattr(MPI, _m, None)
        if _dt is None or _dt.handle == MPI.DATATYPE_NULL.handle or _dt.Get_size() != _code.size:
            continue
        FROM_MPI.setdefault(_dt.handle, _code)
        if NATIVE[_code] is None and _m != 'BYTE':
            NATIVE[_code] = _dt
# 16-bit floats: the engine's paths reduce them themselves (the staged path too, in the engine's
# order), whatever host MPI offers.
NATIVE[Dtype.FLOAT16] = NATIVE[Dtype.BFLOAT16] = None


def _host_float16():
    """True when host MPI has a float16 type that mpi4py maps NumPy's float16 to (MPICH's MPIX_C_FLOAT16):
    the host MPI call a rank makes on float16 mirrors then reduces them as it does for host arrays."""
    try:
        return MPI.Datatype.fromcode('e').handle != MPI.DATATYPE_NULL.handle
    except (KeyError, ValueError, AttributeError):
        return False


HOST_FLOAT16 = _host_float16()


def numpy_dtype(code):
    """The NumPy dtype holding elements of `code` (bfloat16, which NumPy lacks, as its raw uint16)."""
    return np.dtype(MIRROR_TYPESTRS[Dtype(code)])


def from_typecode(typecode):
    """The Dtype of a NumPy typecode or typestr given as a datatype ('f', '<f4', 'i8', '?'), or None."""
    try:
        dt = np.dtype(typecode)
    except TypeError:
        return None
    if dt.byteorder == '>':
        return None
    return dtype_for(dt.kind, dt.itemsize)
