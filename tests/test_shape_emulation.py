"""The exchange's block-shape arithmetic without a GPU: tests/shape_emulator.cpp runs cuda/block_shape.cuh
on the host. For every regular datatype of datatype_cases.py (and the strided views array libraries
build), the offset it gives each packed byte of `count` instances must be MPI's own type map, with fast
and with plain division, and the unit it picks must keep every unit inside one row, aligned; the runs the kernel copies
(ShapeRuns) must cover every packed byte once, at the same offsets."""
import struct
import subprocess

import numpy as np
import pytest

from mpigpu._describe.datatypes import layout
from mpigpu._paths.exchange_read import SHAPE_MAX_DIMS
from conftest import host_emulator
from datatype_cases import CASES, make

PLAIN_DIVISION = 1 << 31  # a block at least this long takes the plain 64-bit division


@pytest.fixture(scope='module')
def emulator(tmp_path_factory):
    return host_emulator(tmp_path_factory, 'shape_emulator')


def _shaped(lay):
    """True for the layouts the exchange takes as block shapes (mpigpu/_paths/exchange.py's _shape)."""
    return lay.regular and lay.size > 0 and lay.extent > 0 and len(lay.dims) <= SHAPE_MAX_DIMS


def _words(lay, prepared, base, n):
    dims = list(lay.dims) + [(1, 0)] * (SHAPE_MAX_DIMS - len(lay.dims))
    words = [lay.start, lay.block, lay.size, lay.extent, len(lay.dims)]
    words += [c for c, _ in dims] + [s for _, s in dims] + [prepared, base, n]
    return struct.pack(f'<{len(words)}q', *words)


def _run(emulator, calls):
    out = subprocess.run([emulator], input=b''.join(w for w, _ in calls), capture_output=True, check=True).stdout
    res, pos = [], 0
    for _, n in calls:
        code, unit = struct.unpack_from('<2q', out, pos)
        pos += 16
        res.append((code, unit, *(np.frombuffer(out, '<i8', n, pos + 8 * n * k) for k in range(3))))
        pos += 24 * n
    assert pos == len(out)
    return res


NAMES = sorted(name for name in CASES if not CASES[name][2] and _shaped(layout(make(name))))


def test_cases_cover_shapes():
    """The cases hold vectors, negative strides, subarrays of up to four dimensions: the shapes exist."""
    assert {'vector', 'vector-negative-stride', 'subarray-3d-xface', 'hvector-odd-bytes'} <= set(NAMES)


@pytest.mark.parametrize('name', NAMES)
def test_offsets_are_mpis_type_map(emulator, name):
    lay = layout(make(name))
    calls, want = [], []
    for count in CASES[name][1]:
        n = count * lay.size
        expect = lay.byte_offsets(count)
        for prepared in (n, -(-PLAIN_DIVISION // n) * n):  # whole instances, either division
            for base in (0, 4, 1, 8):
                calls.append((_words(lay, prepared, base, n), n))
                want.append((expect, base))
    for (code, unit, got, walked, runs), (expect, base) in zip(_run(emulator, calls), want):
        assert code == 0
        assert np.array_equal(got, expect), f'{name}: offsets differ from the type map'
        assert np.array_equal(walked, expect), f'{name}: the threads\' cursors differ from the type map'
        assert np.array_equal(runs, expect), f'{name}: the runs differ from the type map (or miss or repeat a byte)'
        # every unit starts aligned and its bytes are consecutive (within one row)
        assert unit in (1, 2, 4, 8, 16)
        starts = got[::unit]
        assert np.all((starts + base) % unit == 0)
        assert np.array_equal(got.reshape(-1, unit) - starts[:, None], np.tile(np.arange(unit), (len(starts), 1)))


def test_refuses_what_is_not_a_shape(emulator):
    lay = layout(make('vector'))
    n = lay.size
    # a block whose bytes are not whole instances, and a size that the counts do not make
    bad = [(_words(lay, n + 1, 0, 0), 0)]
    words = bytearray(_words(lay, n, 0, 0))
    struct.pack_into('<q', words, 16, lay.size + lay.block)  # size
    bad.append((bytes(words), 0))
    assert [res[0] for res in _run(emulator, bad)] == [-2, -2]  # MG_ERR_ARG
