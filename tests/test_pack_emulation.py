"""The pack kernels' index arithmetic without a GPU: tests/pack_emulator.cpp plans each call as
cuda/pack.cu does and runs every thread of the grid on the host; its bytes must equal MPI's own
packing and unpacking of the same host arrays, for every case of datatype_cases.py, at several
buffer alignments (which pick the unit width) and grid sizes (which exercise the grid-stride loops)."""
import struct
import subprocess

import numpy as np
import pytest
from mpi4py import MPI

from mpigpu._describe.datatypes import MAX_DIMS, layout
from conftest import host_emulator
from datatype_cases import CASES, host_buffer, make, mpi_pack, mpi_unpack

# (buffer misalignment, packed-side misalignment, grid cap in blocks): an H100's full grid
# (132 SMs x 4 blocks), then small grids so each thread loops over many items
VARIANTS = ((0, 0, 528), (4, 0, 1), (1, 3, 2), (8, 8, 5), (2, 6, 3))


@pytest.fixture(scope='module')
def emulator(tmp_path_factory):
    return host_emulator(tmp_path_factory, 'pack_emulator')


def _call(lay, direction, count, buf, base, packed, variant):
    dims = list(lay.dims) + [(1, 0)] * (MAX_DIMS - len(lay.dims))
    words = [direction, count, lay.size, lay.extent, len(lay.dims)] + [n for n, _ in dims] + [s for _, s in dims]
    words += [len(lay.offsets), len(buf), base, *variant]
    blob = struct.pack(f'<{len(words)}q', *words)
    return blob + lay.offsets.astype('<i8').tobytes() + lay.lengths.astype('<i8').tobytes() + buf.tobytes() + packed


def _answers(out, n):
    res, pos = [], 0
    for _ in range(n):
        width, nbytes = struct.unpack_from('<2q', out, pos)
        pos += 16
        res.append((width, out[pos:pos + nbytes]))
        pos += nbytes
    assert pos == len(out)
    return res


@pytest.mark.parametrize('name', sorted(CASES))
def test_emulated_kernels_match_mpi(emulator, name):
    dt = make(name)
    lay = layout(dt)
    calls, expect = [], []
    for count in CASES[name][1]:
        buf, base = host_buffer(dt, count, seed=count)
        want = mpi_pack(dt, count, buf, base)
        noise = np.random.default_rng(count + 3).integers(0, 256, len(want), dtype=np.uint8).tobytes()
        for variant in VARIANTS:
            calls.append(_call(lay, 0, count, buf, base, noise, variant))
            expect.append(('pack', count, variant, want))
            if not CASES[name][2]:
                theirs = buf.copy()
                mpi_unpack(dt, count, noise, theirs, base)
                calls.append(_call(lay, 1, count, buf, base, noise, variant))
                expect.append(('unpack', count, variant, theirs.tobytes()))
    proc = subprocess.run([emulator], input=b''.join(calls), capture_output=True, check=True)
    for (width, got), (what, count, variant, want) in zip(_answers(proc.stdout, len(calls)), expect):
        assert got == want, f'{name}: {what} of {count} (misalign/grid {variant}, unit width {width}) differs from MPI'


@pytest.mark.parametrize('make_type,misalign,width', [
    (lambda: MPI.DOUBLE.Create_contiguous(4), 0, -1),            # one block: a plain copy
    (lambda: MPI.DOUBLE.Create_indexed([2, 1], [0, 5]), 0, 0),   # a table
    (lambda: MPI.DOUBLE.Create_vector(3, 2, 4), 0, 16),          # 16-byte rows 32 bytes apart
    (lambda: MPI.DOUBLE.Create_vector(3, 2, 4), 8, 8),           # the same, 8 bytes off alignment
    (lambda: MPI.FLOAT.Create_hvector(3, 2, 20), 0, 4),
    (lambda: MPI.SHORT.Create_vector(3, 1, 3), 0, 2),
    (lambda: MPI.BYTE.Create_hvector(3, 3, 5), 0, 1),
])
def test_unit_width_follows_alignment(emulator, make_type, misalign, width):
    dt = make_type().Commit()
    lay = layout(dt)
    buf, base = host_buffer(dt, 1)
    want = mpi_pack(dt, 1, buf, base)
    call = _call(lay, 0, 1, buf, base, bytes(len(want)), (misalign, 0, 528))
    proc = subprocess.run([emulator], input=call, capture_output=True, check=True)
    assert _answers(proc.stdout, 1) == [(width, want)]
    dt.Free()
