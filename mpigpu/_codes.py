"""Collective, algorithm, element-type and op codes, and the placement board's: IntEnums over the one
table of each, the X-macros of cuda/mpigpu_cuda.h and mpigpu/_ext/board.h (read through
mpigpu._ext._codes)."""
from enum import IntEnum

from ._ext import _codes as _table


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
Algo = _Algo('Algo', [(name, i) for i, name in enumerate(_table.ALGOS)], module=__name__)
Op = IntEnum('Op', [(name, i) for i, name in enumerate(_table.OPS)], module=__name__)
Dtype = _Dtype('Dtype', [(row[0].upper(), i) for i, row in enumerate(_table.DTYPES)], module=__name__)
# What a rank brings to a collective call, and what the call's ranks agreed (mpigpu/_ext/board.h).
Placement = IntEnum('Placement', [(name, i) for i, name in enumerate(_table.PLACEMENTS)], module=__name__)
Verdict = IntEnum('Verdict', [(name, i) for i, name in enumerate(_table.VERDICTS)], module=__name__)

# Per-code tuples for the hot paths (indexing a tuple is cheaper than an enum property).
NAMES = tuple(row[0] for row in _table.DTYPES)          # 'float32' ...
SIZES = tuple(row[1] for row in _table.DTYPES)
ALIGNMENTS = tuple(row[2] for row in _table.DTYPES)
KINDS = tuple(row[3] for row in _table.DTYPES)
_BY_KIND = {(kind, size): Dtype(i) for i, (_name, size, _align, kind) in enumerate(_table.DTYPES)}


def dtype_for(kind, size):
    """The element type of a (kind, bytes) pair ('f', 4) -> Dtype.FLOAT32, or None."""
    return _BY_KIND.get((kind, size))
