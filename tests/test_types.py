"""Type/op tables and the host reduction the staged path uses for types MPI lacks."""
import numpy as np
import pytest
from mpi4py import MPI

from mpigpu._base import types as _types
from mpigpu._base.codes import Coll, Dtype, Op
from mpigpu._paths.staged import _bf16_to_f32, _f32_to_bf16, host_reduce


def test_codes_read_from_the_c_tables():
    assert [d.name.lower() for d in Dtype][:3] == ['bool', 'int8', 'uint8'] and Dtype.COMPLEX128.size == 16
    assert Dtype.COMPLEX128.align == 8 and Dtype.BFLOAT16.kind == 'B'
    assert Coll.REDUCE_SCATTER_BLOCK.mpi_name == 'Reduce_scatter_block' and Coll.BCAST.mpi_name == 'Bcast'
    assert _types.op_code(MPI.MAX) == Op.MAX and _types.op_code(MPI.MAXLOC) == -1


def test_mpi_datatype_map():
    assert _types.FROM_MPI[MPI.FLOAT.handle] == Dtype.FLOAT32
    assert _types.FROM_MPI[MPI.INT64_T.handle] == Dtype.INT64
    assert _types.FROM_MPI[MPI.C_DOUBLE_COMPLEX.handle] == Dtype.COMPLEX128
    assert _types.NATIVE[Dtype.FLOAT16] is None  # reduced by mpigpu, not by host MPI


@pytest.mark.parametrize('typecode,dtype', [('f', Dtype.FLOAT32), ('<f8', Dtype.FLOAT64), ('i8', Dtype.INT64),
                                            ('?', Dtype.BOOL), ('B', Dtype.UINT8), ('D', Dtype.COMPLEX128),
                                            ('e', Dtype.FLOAT16)])
def test_typecodes(typecode, dtype):
    assert _types.from_typecode(typecode) == dtype
    assert _types.numpy_dtype(dtype) == np.dtype(typecode)


def test_float16_accumulates_in_float32_in_rank_order():
    rows = np.array([[2048, 1], [1, 1], [1, 1]], np.float16)
    # pairwise in float16, 2048 + 1 rounds back to 2048; in float32 the sum is exact, then rounds once
    got = host_reduce(rows, Dtype.FLOAT16, Op.SUM)
    assert got.dtype == np.float16
    assert got[0] == np.float16(2050) and got[1] == np.float16(3)


def test_bfloat16_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38], np.float32)
    bf = _f32_to_bf16(x)
    back = _bf16_to_f32(bf)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == np.float32(1.015625) and back[3] == -2.5
    assert np.isnan(_bf16_to_f32(_f32_to_bf16(np.array([np.nan], np.float32))))[0]


@pytest.mark.parametrize('op,expect', [(Op.LAND, [0, 0, 1]), (Op.LOR, [1, 1, 1]), (Op.LXOR, [1, 1, 0]),
                                       (Op.BAND, [0, 0, 3]), (Op.BOR, [2, 2, 3]), (Op.BXOR, [2, 2, 0])])
def test_logical_and_bitwise(op, expect):
    rows = np.array([[0, 2, 3], [2, 0, 3]], np.int32)
    assert host_reduce(rows, Dtype.INT32, op).tolist() == expect
