"""Collective, algorithm, element-type and op codes, and the placement board's: IntEnums over the one
table of each, the X-macros of cuda/mpigpu_cuda.h and mpigpu/_ext/board.h (read through
mpigpu._ext._codes)."""
from enum import IntEnum

from .._ext import _codes as _table


class _Coll(IntEnum):
    @property
    def mpi_name(self):
        """The name of the MPI function: 'Allreduce', 'Reduce_scatter_block'."""
        return self.name.capitalize()


class _Algo(IntEnum):
    @property
    def knob(self):
        """The name MPIGPU_ALGO takes: 'auto', 'll128-twoshot'."""
        return self.name.lower().replace('_', '-')


class _Dtype(IntEnum):
    @property
    def size(self):
        return SIZES[self]

    @property
    def align(self):
        """C's alignment (a complex type aligns like its component)."""
        return ALIGNMENTS[self]

    @property
    def kind(self):
        """'b' bool, 'i' signed, 'u' unsigned, 'f' IEEE float, 'B' bfloat16, 'c' complex."""
        return KINDS[self]


Coll = _Coll('Coll', [(name, i) for i, name in enumerate(_table.COLLS)], module=__name__)
# The engine's collectives (mg_collective); the other codes are the all-to-all family's (mg_exchange).
ENGINE_COLLS = tuple(Coll[name] for name in _table.ENGINE_COLLS)
Algo = _Algo('Algo', [(name, i) for i, name in enumerate(_table.ALGOS)], module=__name__)
Op = IntEnum('Op', [(name, i) for i, name in enumerate(_table.OPS)], module=__name__)
Dtype = _Dtype('Dtype', [(name.upper(), i) for i, name in enumerate(_table.NAMES)], module=__name__)
# What a rank brings to a collective call, and what the call's ranks agreed (mpigpu/_ext/board.h).
Placement = IntEnum('Placement', [(name, i) for i, name in enumerate(_table.PLACEMENTS)], module=__name__)
Verdict = IntEnum('Verdict', [(name, i) for i, name in enumerate(_table.VERDICTS)], module=__name__)

# Per-code tables for the hot paths (indexing a tuple is cheaper than an enum property), made once in
# mpigpu/_ext/_codes.pyx: names ('float32' ...), bytes, C alignments, kinds; a CUDA Array Interface
# typestr's code; the NumPy typestr of a host mirror of each code's elements.
NAMES, SIZES, ALIGNMENTS, KINDS = _table.NAMES, _table.SIZES, _table.ALIGNMENTS, _table.KINDS
TYPESTR_CODES, MIRROR_TYPESTRS = _table.TYPESTR_CODES, _table.MIRROR_TYPESTRS
_DTYPES = tuple(Dtype)  # by code


def dtype_for(kind, size):
    """The element type of a (kind, bytes) pair ('f', 4) -> Dtype.FLOAT32, or None."""
    code = _table.BY_KIND.get((kind, size))
    return None if code is None else _DTYPES[code]
