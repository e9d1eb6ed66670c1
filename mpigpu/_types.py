"""Element types and reduction operators: codes shared with cuda/mpigpu_cuda.h, their MPI names,
and the (type, op) pairs MPI allows."""
from mpi4py import MPI

from ._ext._intake import DTYPE_ALIGNMENTS, DTYPE_NAMES, DTYPE_SIZES
from .errors import Error

# Names and sizes come from the intake (one table; codes are enum mg_dtype of cuda/mpigpu_cuda.h).
DTYPES, SIZES = DTYPE_NAMES, DTYPE_SIZES
CODE = {name: i for i, name in enumerate(DTYPES)}
ALIGNMENT = DTYPE_ALIGNMENTS  # C's alignment of each type (a complex type's is its component's)

OPS = ('SUM', 'PROD', 'MAX', 'MIN', 'LAND', 'LOR', 'LXOR', 'BAND', 'BOR', 'BXOR')
OP_CODE = {getattr(MPI, name).handle: i for i, name in enumerate(OPS)}

ALGO = {'auto': 0, 'oneshot': 1, 'twoshot': 2, 'll': 3, 'll128': 4, 'll128-twoshot': 5, 'ring': 6}

_INTEGER = frozenset(range(1, 9))
_FLOAT = frozenset((9, 10, 11, 12))
_COMPLEX = frozenset((13, 14))
_LOGICAL = frozenset((0,))
# MPI 4.1, section 6.9.2: which type classes each predefined operation takes.
_ALLOWED = {
    'SUM': _INTEGER | _FLOAT | _COMPLEX, 'PROD': _INTEGER | _FLOAT | _COMPLEX,
    'MAX': _INTEGER | _FLOAT, 'MIN': _INTEGER | _FLOAT,
    'LAND': _INTEGER | _LOGICAL, 'LOR': _INTEGER | _LOGICAL, 'LXOR': _INTEGER | _LOGICAL,
    'BAND': _INTEGER, 'BOR': _INTEGER, 'BXOR': _INTEGER,
}


def _mpi(name):
    dt = getattr(MPI, name, None)
    return dt if dt is not None and dt.handle != MPI.DATATYPE_NULL.handle else None


# Predefined MPI datatypes that name one of our element types (several MPI names per type).
_MPI_NAMES = {
    'bool': ('C_BOOL', 'BOOL'),
    'int8': ('INT8_T', 'SIGNED_CHAR', 'CHAR'), 'uint8': ('UINT8_T', 'UNSIGNED_CHAR', 'BYTE'),
    'int16': ('INT16_T', 'SHORT'), 'uint16': ('UINT16_T', 'UNSIGNED_SHORT'),
    'int32': ('INT32_T', 'INT'), 'uint32': ('UINT32_T', 'UNSIGNED'),
    'int64': ('INT64_T', 'LONG_LONG', 'LONG'), 'uint64': ('UINT64_T', 'UNSIGNED_LONG_LONG', 'UNSIGNED_LONG'),
    'float16': ('C_FLOAT16',), 'bfloat16': (),
    'float32': ('FLOAT',), 'float64': ('DOUBLE',),
    'complex64': ('C_FLOAT_COMPLEX', 'C_COMPLEX', 'COMPLEX'), 'complex128': ('C_DOUBLE_COMPLEX', 'DOUBLE_COMPLEX'),
}
FROM_MPI = {}
NATIVE = [None] * len(DTYPES)  # the MPI datatype host MPI reduces for each code, or None
for _name, _mpinames in _MPI_NAMES.items():
    for _m in _mpinames:
        _dt = _mpi(_m)
        if _dt is None or _dt.Get_size() != SIZES[CODE[_name]]:
            continue
        FROM_MPI.setdefault(_dt.handle, CODE[_name])
        if NATIVE[CODE[_name]] is None and _m != 'BYTE':
            NATIVE[CODE[_name]] = _dt
# 16-bit floats have no reduction in the MPIs we target: the staged path reduces them itself.
NATIVE[CODE['float16']] = NATIVE[CODE['bfloat16']] = None

# numpy/typestr characters accepted as datatypes in buffer specifications (as mpi4py does).
TYPECHARS = {'?': 0, 'b': 1, 'B': 2, 'h': 3, 'H': 4, 'i': 5, 'I': 6, 'l': 7, 'L': 8, 'q': 7, 'Q': 8,
             'e': 9, 'f': 11, 'd': 12, 'F': 13, 'D': 14, 'i1': 1, 'u1': 2, 'i2': 3, 'u2': 4, 'i4': 5,
             'u4': 6, 'i8': 7, 'u8': 8, 'f2': 9, 'f4': 11, 'f8': 12, 'c8': 13, 'c16': 14, 'b1': 0}


def op_code(op):
    """Code of a predefined reduction op, or -1 (user-defined ops, MAXLOC/MINLOC, REPLACE...)."""
    return OP_CODE.get(op.handle, -1)


def check_op(call, dtype, op, rank):
    """Raises as MPI does for a predefined op on a type class it is not defined for."""
    code = op_code(op)
    if code < 0 or dtype < 0:
        return
    name = OPS[code]
    if dtype not in _ALLOWED[name]:
        raise Error(call, f'MPI.{name} is not defined for {DTYPES[dtype]} (MPI forbids this pair)',
                    arg='op', rank=rank, error_class=MPI.ERR_OP)
