# The codes shared with the CUDA layer, read from its tables (the X-macros of cuda/mpigpu_cuda.h, and of
# board.h for the placement board), so Python knows every code by the name C gives it;
# mpigpu/_codes.py turns them into IntEnums. This module needs only the headers, so it is built
# without CUDA too.

cdef extern from "mpigpu_cuda.h":
    enum:
        MG_NDTYPES
        MG_NOPS
        MG_NCOLLS
        MG_NALGOS
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
ALGOS = tuple(mg_algo_name(i).decode() for i in range(MG_NALGOS))
# The placement board's codes (board.h): what a rank brings to a call, what the call's ranks agreed.
PLACEMENTS = tuple(mg_placement_name(i).decode() for i in range(MG_NPLACEMENTS))
VERDICTS = tuple(mg_verdict_name(i).decode() for i in range(MG_NVERDICTS))
