"""Datatype layouts (mpigpu/_describe/datatypes.py): every constructor, nested types, negative strides,
resized extents and counts decoded and packed with NumPy, byte for byte against MPI's own packing
of the same host arrays; the compact forms the GPU kernels get; the cache and its invalidation."""
import numpy as np
import pytest
from mpi4py import MPI

from mpigpu._describe import datatypes as _datatypes
from mpigpu._describe.datatypes import BYTES, layout, pack_host, unpack_host
from mpigpu._base.codes import Dtype
from datatype_cases import CASES, host_buffer, make, mpi_pack, mpi_unpack, span

CALLS = [(name, count) for name, (_, counts, _) in CASES.items() for count in counts]


@pytest.mark.parametrize('name,count', CALLS)
def test_pack_and_unpack_match_mpi(name, count):
    dt = make(name)
    lay = layout(dt)
    assert (lay.size, lay.lb, lay.extent) == (dt.Get_size(), *dt.Get_extent())
    assert (lay.true_lb, lay.true_extent) == dt.Get_true_extent()
    buf, base = host_buffer(dt, count, seed=count)
    want = mpi_pack(dt, count, buf, base)
    assert pack_host(lay, count, buf, base) == want
    offs = lay.byte_offsets(count)
    assert len(offs) == count * dt.Get_size()
    if len(offs):
        lo, hi = span(dt, count)
        assert offs.min() >= lo and offs.max() < hi
        one = lay.byte_offsets(1)
        assert (one.min(), one.max() + 1) == (dt.true_lb, dt.true_lb + dt.true_extent)
    if CASES[name][2]:
        return  # overlapping type map: MPI leaves unpacking undefined
    packed = np.random.default_rng(count + 7).integers(0, 256, len(want), dtype=np.uint8).tobytes()
    ours, theirs = buf.copy(), buf.copy()
    unpack_host(lay, count, packed, ours, base)
    mpi_unpack(dt, count, packed, theirs, base)
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize('name', sorted(CASES))
def test_layout_is_at_most_max_dims_and_consistent(name):
    lay = layout(make(name))
    assert len(lay.dims) <= _datatypes.MAX_DIMS
    assert len(lay.offsets) == len(lay.lengths) and (lay.lengths > 0).all()
    assert int(lay.lengths.sum()) * int(np.prod([n for n, _ in lay.dims])) == lay.size
    assert not lay.offsets.flags.writeable


def test_halo_column_is_one_strided_dimension():
    n = 8192
    col = MPI.DOUBLE.Create_vector(n, 1, n).Commit()
    lay = layout(col)
    assert lay.regular and lay.block == 8 and lay.start == 0 and lay.dims == ((n, 8 * n),)
    assert lay.code == Dtype.FLOAT64 and lay.elements == n
    sub = MPI.DOUBLE.Create_subarray([n, n], [n, 1], [0, n - 1]).Commit()
    lay = layout(sub)
    assert lay.regular and lay.block == 8 and lay.start == 8 * (n - 1) and lay.dims == ((n, 8 * n),)
    col.Free()
    sub.Free()


def test_subarray_faces_collapse_to_strided_blocks():
    n = 512
    faces = {0: ([1, n, n], [5, 0, 0]), 1: ([n, 1, n], [0, 5, 0]), 2: ([n, n, 1], [0, 0, 5])}
    got = {}
    for axis, (sub, start) in faces.items():
        dt = MPI.FLOAT.Create_subarray([n, n, n], sub, start).Commit()
        lay = layout(dt)
        got[axis] = (lay.start, lay.block, lay.dims)
        dt.Free()
    assert got[0] == (5 * n * n * 4, n * n * 4, ())                  # one contiguous plane
    assert got[1] == (5 * n * 4, n * 4, ((n, n * n * 4),))           # rows of a plane
    assert got[2] == (5 * 4, 4, ((n * n, n * 4),))                   # one element per row: rows merge


def test_subarrays_of_billions_of_elements_decode_without_listing_them():
    # an array library's resplit of a 2 x (2^31 + 2) byte array (heat's large-count test): each
    # dimension of a subarray becomes one strided dimension, never an index per element (listing them
    # took seconds and gigabytes per datatype)
    big = 2 ** 31 + 2
    half = big // 2
    cases = {'column': ([big, 2], [half, 1], [half, 1], (half * 2 + 1, 1, ((half, 2),))),
             'rows': ([2, big], [2, half], [0, half], (half, half, ((2, big),)))}
    for name, (sizes, sub, start, want) in cases.items():
        dt = MPI.INT8_T.Create_subarray(sizes, sub, start).Commit()
        lay = layout(dt)
        assert (lay.start, lay.block, lay.dims) == want, name
        assert lay.size == sub[0] * sub[1]
        dt.Free()


def test_counts_compose_at_the_extent():
    vec = MPI.DOUBLE.Create_vector(4, 1, 4).Commit()
    lay = layout(vec)
    assert lay.dims_for(3) == ((4, 32), (3, vec.extent))
    col = MPI.DOUBLE.Create_vector(4, 1, 4).Create_resized(0, 32 * 4).Commit()
    assert layout(col).dims_for(3) == ((12, 32),)          # instances continue the stride
    assert layout(MPI.DOUBLE).dims_for(5) == ()            # contiguous: one block
    assert layout(MPI.DOUBLE).contiguous(5) and not lay.contiguous(1)
    vec.Free()
    col.Free()


def test_negative_strides_and_lower_bounds():
    vec = MPI.DOUBLE.Create_vector(4, 1, -3).Commit()
    lay = layout(vec)
    assert lay.lb == -72 and lay.regular and lay.start == 0 and lay.dims == ((4, -24),)
    assert list(lay.byte_offsets(1)[::8]) == [0, -24, -48, -72]
    vec.Free()


def test_irregular_types_keep_a_block_table():
    idx = MPI.DOUBLE.Create_indexed([2, 1, 3], [0, 5, 9]).Commit()
    lay = layout(idx)
    assert not lay.regular and list(lay.offsets) == [0, 40, 72] and list(lay.lengths) == [16, 8, 24]
    assert lay.code == Dtype.FLOAT64
    # equal blocks at evenly spaced displacements are a vector after all
    even = MPI.FLOAT.Create_indexed_block(2, [0, 6, 12, 18]).Commit()
    assert layout(even).regular and layout(even).dims == ((4, 24),)
    idx.Free()
    even.Free()


def test_element_codes():
    one = MPI.Datatype.Create_struct([1, 2], [0, 16], [MPI.DOUBLE, MPI.DOUBLE]).Commit()
    mixed = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT]).Commit()
    assert layout(one).code == Dtype.FLOAT64 and layout(one).elements == 3
    assert layout(mixed).code == BYTES and layout(mixed).elements == 0
    assert layout(MPI.DOUBLE_INT).code == BYTES
    assert layout(MPI.INT).code == Dtype.INT32 and layout(MPI.C_DOUBLE_COMPLEX).code == Dtype.COMPLEX128
    one.Free()
    mixed.Free()


def test_pair_type_with_a_gap():
    lay = layout(MPI.SHORT_INT)
    assert list(lay.offsets) == [0, 4] and list(lay.lengths) == [2, 4] and lay.extent == 8


def test_cache_returns_one_layout_per_handle():
    vec = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
    assert layout(vec) is layout(vec)
    assert _datatypes.cached(vec) is layout(vec)
    assert layout(MPI.DOUBLE) is layout(MPI.DOUBLE)
    vec.Free()


def test_free_drops_the_cache_entry_and_a_reused_handle_is_decoded_afresh():
    vec = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
    handle = vec.handle
    assert layout(vec).dims == ((3, 16),)
    vec.Free()
    assert handle not in _datatypes._cache
    for _ in range(8):  # MPI reuses freed handles: a new type at the old handle must not see the old layout
        other = MPI.INT.Create_vector(5, 2, 3).Commit()
        assert layout(other).dims == ((5, 12),) and layout(other).block == 8
        reused = other.handle == handle
        other.Free()
        if reused:
            break


def test_decoding_frees_the_handles_mpi_hands_out():
    """Get_contents hands out new references to the inner types: unless the decoder frees them, the
    inner type outlives every Free of the program and its attributes are never deleted."""
    deleted = []
    keyval = MPI.Datatype.Create_keyval(delete_fn=lambda dt, k, value: deleted.append(value))
    inner = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    inner.Set_attr(keyval, 'inner')
    pair = MPI.Datatype.Create_struct([1, 1], [0, 64], [inner, inner])
    outer = pair.Create_contiguous(3).Commit()
    layout(outer)
    for dt in (inner, pair, outer):
        dt.Free()
    MPI.Datatype.Free_keyval(keyval)
    assert deleted == ['inner']


def test_predefined_types_carry_no_attribute():
    layout(MPI.FLOAT)
    keyval = _datatypes._keyval
    if keyval is not None:
        assert MPI.FLOAT.Get_attr(keyval) is None


def test_null_datatype_is_an_error():
    import mpigpu
    with pytest.raises(mpigpu.Error, match='DATATYPE_NULL'):
        layout(MPI.DATATYPE_NULL)


def test_host_pack_checks_the_array_bounds():
    import mpigpu
    vec = MPI.DOUBLE.Create_vector(4, 1, -3).Commit()
    with pytest.raises(mpigpu.Error, match='outside'):
        pack_host(layout(vec), 1, np.zeros(64, np.uint8), 0)
    vec.Free()


def _fake_device():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mpi', 'fake_device.py')
    spec = importlib.util.spec_from_file_location('fake_device', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fake


@pytest.mark.parametrize('name', sorted(CASES))
def test_fake_device_packs_at_raw_addresses_as_mpi_does(name):
    """The fake CUDA layer's PackPlan (tests/mpi/fake_device.py), which CPU tests of the dispatch
    use in place of the kernels, packs and unpacks at raw addresses as MPI does."""
    fake = _fake_device()
    dt = make(name)
    plan = fake.pack_plan(layout(dt), 0)
    assert fake.pack_plan(layout(dt), 0) is plan
    for count in CASES[name][1]:
        buf, base = host_buffer(dt, count, seed=count)
        want = mpi_pack(dt, count, buf, base)
        out = np.zeros(len(want) + 1, np.uint8)
        plan.pack(count, buf.ctypes.data + base, out.ctypes.data, 0)
        assert out[:len(want)].tobytes() == want and out[-1] == 0
        if CASES[name][2]:
            continue
        ours, theirs = buf.copy(), buf.copy()
        packed = out[:len(want)][::-1].copy()  # other bytes than the buffer holds
        mpi_unpack(dt, count, packed.tobytes(), theirs, base)
        plan.unpack(count, packed.ctypes.data, ours.ctypes.data + base, 0)
        assert np.array_equal(ours, theirs)
