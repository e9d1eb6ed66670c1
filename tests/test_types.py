"""Type/op tables and the host reduction the staged path uses for types MPI lacks."""
import numpy as np
import pytest
from mpi4py import MPI

from mpigpu import _types
from mpigpu._staged import _bf16_to_f32, _f32_to_bf16, host_reduce


def test_codes_match_the_c_abi_order():
    assert _types.DTYPES[0] == 'bool' and _types.DTYPES[11] == 'float32' and _types.DTYPES[14] == 'complex128'
    assert _types.OPS.index('SUM') == 0 and _types.OPS.index('BXOR') == 9
    assert _types.op_code(MPI.MAX) == 2 and _types.op_code(MPI.MAXLOC) == -1


def test_mpi_datatype_map():
    assert _types.FROM_MPI[MPI.FLOAT.handle] == _types.CODE['float32']
    assert _types.FROM_MPI[MPI.INT64_T.handle] == _types.CODE['int64']
    assert _types.FROM_MPI[MPI.C_DOUBLE_COMPLEX.handle] == _types.CODE['complex128']
    assert _types.NATIVE[_types.CODE['float16']] is None  # reduced by mpigpu, not by host MPI


def test_float16_accumulates_in_float32_in_rank_order():
    rows = np.array([[2048, 1], [1, 1], [1, 1]], np.float16)
    # pairwise in float16, 2048 + 1 rounds back to 2048; in float32 the sum is exact, then rounds once
    got = host_reduce(rows, _types.CODE['float16'], 0)
    assert got.dtype == np.float16
    assert got[0] == np.float16(2050) and got[1] == np.float16(3)


def test_bfloat16_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38], np.float32)
    bf = _f32_to_bf16(x)
    back = _bf16_to_f32(bf)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == np.float32(1.015625) and back[3] == -2.5
    assert np.isnan(_bf16_to_f32(_f32_to_bf16(np.array([np.nan], np.float32))))[0]


@pytest.mark.parametrize('op,expect', [(4, [0, 0, 1]), (5, [1, 1, 1]), (6, [1, 1, 0]), (7, [0, 0, 3]),
                                       (8, [2, 2, 3]), (9, [2, 2, 0])])
def test_logical_and_bitwise(op, expect):
    rows = np.array([[0, 2, 3], [2, 0, 3]], np.int32)
    assert host_reduce(rows, _types.CODE['int32'], op).tolist() == expect
