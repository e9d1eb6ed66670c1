# The codes shared with the CUDA layer, read from its tables (the X-macros of cuda/mpigpu_cuda.h, and of
# board.h for the placement board), so Python knows every code by the name C gives it;
# mpigpu/_base/codes.py turns them into IntEnums. This module needs only the headers, so it is built
# without CUDA too.

cdef extern from "mpigpu_cuda.h":
    enum:
        MG_NDTYPES
        MG_NOPS
        MG_NCOLLS
        MG_NALGOS
        MG_LAST_ENGINE_COLL
    ctypedef struct mg_dtype_info:
        const char *name
        int size
        int align
        char kind
    const mg_dtype_info *mg_dtype_table()
    const char *mg_op_name(int op)
    const char *mg_coll_name(int coll)
    const char *mg_algo_name(int algo)

cdef extern from "board.h":
    enum:
        MG_NPLACEMENTS
        MG_NVERDICTS
    const char *mg_placement_name(int code)
    const char *mg_verdict_name(int code)

cdef const mg_dtype_info *_dt = mg_dtype_table()

# Element types, by code: (name, bytes, C alignment, kind). kind: 'b' bool, 'i' signed, 'u' unsigned,
# 'f' IEEE float, 'B' bfloat16, 'c' complex.
DTYPES = tuple((_dt[i].name.decode(), _dt[i].size, _dt[i].align, chr(_dt[i].kind)) for i in range(MG_NDTYPES))
OPS = tuple(mg_op_name(i).decode() for i in range(MG_NOPS))
COLLS = tuple(mg_coll_name(i).decode() for i in range(MG_NCOLLS))
ENGINE_COLLS = COLLS[:MG_LAST_ENGINE_COLL + 1]  # the engine's five; the rest take the exchange transport
ALGOS = tuple(mg_algo_name(i).decode() for i in range(MG_NALGOS))

# The placement board's codes (board.h): what a rank brings to a call, what the call's ranks agreed.
PLACEMENTS = tuple(mg_placement_name(i).decode() for i in range(MG_NPLACEMENTS))
VERDICTS = tuple(mg_verdict_name(i).decode() for i in range(MG_NVERDICTS))

# What the rest of the package reads of the element types, made here once: mpigpu._base.codes re-exports
# these, and the Cython modules bind them to typed globals at import (a tuple index or a dict lookup
# on the hot path, no enum property).
NAMES = tuple(row[0] for row in DTYPES)         # 'float32' ...
SIZES = tuple(row[1] for row in DTYPES)
ALIGNMENTS = tuple(row[2] for row in DTYPES)
KINDS = tuple(row[3] for row in DTYPES)
BY_KIND = {(kind, size): code for code, (_name, size, _align, kind) in enumerate(DTYPES)}  # (kind, bytes) -> code


def typestr(kind, size):
    """The array interface typestr (NumPy's) of elements of (kind, bytes): '|' for byte-sized ones,
    little-endian '<' otherwise."""
    return ('|' if size == 1 else '<') + kind + str(size)


# CUDA Array Interface typestr -> code, for the fast paths (bfloat16 has no typestr; the general path
# reads any byte-order mark).
TYPESTR_CODES = {typestr(kind, size): code for code, (_name, size, _align, kind) in enumerate(DTYPES) if kind != 'B'}
# The typestr of a host mirror of each code's elements, which NumPy reads and mpi4py maps (bfloat16,
# which NumPy lacks, as its raw uint16).
MIRROR_TYPESTRS = tuple(typestr('u' if kind == 'B' else kind, size) for kind, size in zip(KINDS, SIZES))
