"""MPI datatypes flattened to the layout the GPU pack kernels copy: decoded once per datatype handle,
cached until the datatype is freed; plus the host reference of packing with NumPy.

A layout is a block table repeated over nested strided dimensions:

    for each outer index (i_0 innermost, ..., i_{d-1} outermost), in that order,
        for each table entry t, in order:
            lengths[t] bytes at  offsets[t] + sum_k i_k * strides[k]   (bytes from the buffer pointer)

which is the type map of one instance in MPI's order, packed contiguously (MPI_Pack's bytes).
A regular layout has one table entry (`start`, `block`): a vector, a subarray of any dimension, a
contiguous type are all one block repeated over at most MAX_DIMS dimensions. Offsets and strides
may be negative (lb < 0, negative vector strides). `count` instances of a type follow each other at
its extent: one more, outermost, dimension (`dims_for(count)`).
"""
import itertools

import numpy as np
from mpi4py import MPI

from .._base.codes import NAMES, SIZES
from .._base.types import FROM_MPI, from_typecode
from ..errors import Error

# The forms of a buffer argument as mpi4py reads it: one message [data, count, type]; per-rank counts and
# displacements [data, counts, displs, type]; and per-rank types as well (Alltoallw)
SIMPLE, VECTOR, W = 'simple', 'vector', 'w'

BYTES = -1      # element code of a layout whose leaves are not all one type: its bytes move, nothing reduces
MAX_DIMS = 7    # nested dimensions a layout keeps (MG_PACK_MAX_DIMS in cuda/mpigpu_cuda.h)

_I64 = np.int64
_EMPTY = np.zeros(0, _I64)


class Layout:
    """The flattened type map of one MPI datatype (see the module docstring). `code` is the element
    type of every leaf (a code of mpigpu._base.types) or BYTES; sizes, bounds and offsets are bytes."""
    __slots__ = ('code', 'size', 'lb', 'extent', 'true_lb', 'true_extent', 'offsets', 'lengths', 'dims',
                 'plans', '_contiguous', '__weakref__')

    def __init__(self, code, size, lb, extent, true_lb, true_extent, offsets, lengths, dims):
        self.code = code
        self.size, self.lb, self.extent = size, lb, extent
        self.true_lb, self.true_extent = true_lb, true_extent
        self.offsets, self.lengths = offsets, lengths   # the block table (int64 arrays, read-only)
        self.dims = dims                                # ((count, stride), ...) innermost first
        self.plans = {}  # device ordinal -> the layout's device-side plan (mpigpu._ext._device.PackPlan)
        self._contiguous = {}  # count -> contiguous(count): asked by every call of a packed buffer

    @property
    def regular(self):
        """One block repeated over the dimensions (or an empty type)."""
        return len(self.offsets) <= 1

    @property
    def start(self):
        return int(self.offsets[0]) if len(self.offsets) else 0

    @property
    def block(self):
        """Bytes of the one block of a regular layout."""
        return int(self.lengths[0]) if len(self.lengths) == 1 else 0

    @property
    def elements(self):
        """Elements of the base type in one instance (0 for a BYTES layout)."""
        return self.size // SIZES[self.code] if self.code >= 0 else 0

    def dims_for(self, count):
        """Dimensions of `count` instances: this layout's, then (count, extent) merged where it can."""
        return _normalize(self.offsets, self.lengths, self.dims + ((count, self.extent),))[2]

    @property
    def plain(self):
        """One block from the buffer pointer whose extent is its size: any count of it is plain bytes,
        which the paths move as they are (no packing)."""
        return self.contiguous(1) and self.start == 0 and self.size == self.extent

    def contiguous(self, count=1):
        """True when `count` instances are one block starting `start` bytes from the pointer (kept per count,
        up to 64 counts, then forgotten all at once: working it out normalizes the dimensions, ~10 us of a
        halo's Sendrecv)."""
        hit = self._contiguous.get(count)
        if hit is None:
            hit = self.size == 0 or (self.regular and not self.dims_for(count))
            if len(self._contiguous) >= 64:
                self._contiguous.clear()
            self._contiguous[count] = hit
        return hit

    def span(self, count):
        """(lo, hi): the bytes from the first instance's pointer that `count` instances' type map reaches
        (lo < 0 where it reaches before it)."""
        reach = (count - 1) * self.extent
        return self.true_lb + min(0, reach), self.true_lb + self.true_extent + max(0, reach)

    def byte_offsets(self, count=1):
        """Offset from the buffer pointer of every packed byte of `count` instances, in order."""
        offs, lens, dims = _normalize(self.offsets, self.lengths, self.dims + ((count, self.extent),))
        offs, lens = _expand(offs, lens, dims)
        if not len(lens):
            return _EMPTY
        first = np.repeat(offs - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
        return first + np.arange(int(lens.sum()), dtype=_I64)

    def runs(self):
        """(offset from the buffer pointer, bytes) of one instance's blocks in packed order, one at a time:
        a prefix of the type map read without expanding all of it (byte_offsets)."""
        offs, lens = self.offsets.tolist(), self.lengths.tolist()
        strides = [s for _, s in reversed(self.dims)]  # outermost first: the innermost dimension runs fastest
        for idx in itertools.product(*(range(n) for n, _ in reversed(self.dims))):
            base = sum(i * s for i, s in zip(idx, strides))
            for o, n in zip(offs, lens):
                yield base + o, n

    def __repr__(self):
        kind = f'start={self.start} block={self.block}' if self.regular else f'{len(self.offsets)} blocks'
        name = NAMES[self.code] if self.code >= 0 else 'bytes'
        return (f'Layout({name}, size={self.size}, lb={self.lb}, extent={self.extent}, {kind}, '
                f'dims={self.dims})')


# ---- the cache: one layout per datatype handle, dropped when MPI frees the datatype ---------------------
_cache = {}
_keyval = None


def _forget(datatype, keyval, handle):
    """Attribute delete callback: MPI is freeing the datatype, so its handle may be reused."""
    _cache.pop(handle, None)


def layout(datatype):
    """The layout of an MPI datatype, decoded on first use and cached per handle. Derived types
    carry an attribute whose delete callback drops the entry when the type is freed; predefined
    types live as long as MPI."""
    global _keyval
    handle = datatype.handle
    lay = _cache.get(handle)
    if lay is not None:
        return lay
    if handle == MPI.DATATYPE_NULL.handle:
        raise Error('datatype', 'MPI.DATATYPE_NULL has no type map', arg='datatype', error_class=MPI.ERR_TYPE)
    lay = decode(datatype)
    if not datatype.is_predefined:
        if _keyval is None:
            _keyval = MPI.Datatype.Create_keyval(delete_fn=_forget)
        datatype.Set_attr(_keyval, handle)
    _cache[handle] = lay
    return lay


def cached(datatype):
    """The cached layout of a datatype, or None (for tests and diagnostics)."""
    return _cache.get(datatype.handle)


# ---- decoding -------------------------------------------------------------------------------------------
class _Pat:
    """A block table repeated over dimensions, as in a Layout, and its leaves' element codes."""
    __slots__ = ('offs', 'lens', 'dims', 'codes')

    def __init__(self, offs, lens, dims, codes):
        self.offs, self.lens, self.dims = _normalize(offs, lens, dims)
        self.codes = codes if len(self.lens) else frozenset()

    def same_blocks(self, other):
        return (self.dims == other.dims and np.array_equal(self.offs, other.offs)
                and np.array_equal(self.lens, other.lens))


def decode(datatype):
    """Flattens a datatype to a new Layout (uncached; `layout()` caches)."""
    pat = _flatten(datatype)
    code = next(iter(pat.codes)) if len(pat.codes) == 1 else BYTES
    lb, extent = datatype.Get_extent()
    true_lb, true_extent = datatype.Get_true_extent()
    size = datatype.Get_size()
    offs, lens = pat.offs, pat.lens
    got = int(lens.sum()) * int(np.prod([n for n, _ in pat.dims], dtype=_I64))
    if got != size:
        raise Error('datatype', f'decoded {got} bytes of a type of size {size}', arg='datatype',
                    error_class=MPI.ERR_INTERN)
    for a in (offs, lens):
        a.setflags(write=False)
    return Layout(code, size, lb, extent, true_lb, true_extent, offs, lens, pat.dims)


def _leaf(datatype):
    """A named (or Fortran 90, or value-index) type: its bytes at true_lb; MPI's pair types (value,
    int) may have a gap before the int, which always ends the type."""
    size = datatype.Get_size()
    true_lb, true_extent = datatype.Get_true_extent()
    code = FROM_MPI.get(datatype.handle)
    if code is None:
        c = from_typecode(datatype.typechar) if datatype.typechar else None
        code = c if c is not None and SIZES[c] == size else BYTES
    if size == true_extent or size <= 4:
        offs, lens = np.array([true_lb], _I64), np.array([size], _I64)
    else:
        offs = np.array([true_lb, true_lb + true_extent - 4], _I64)
        lens = np.array([size - 4, 4], _I64)
    return _Pat(offs, lens, (), frozenset((code,)))


_NAMED = frozenset(getattr(MPI, 'COMBINER_' + n) for n in ('NAMED', 'F90_REAL', 'F90_COMPLEX', 'F90_INTEGER',
                                                           'VALUE_INDEX') if hasattr(MPI, 'COMBINER_' + n))


def _flatten(datatype):
    if datatype.combiner in _NAMED:
        return _leaf(datatype)
    base, name, p = datatype.decode()
    children = p['datatypes'] if name == 'STRUCT' else [base]
    try:
        return _combine(name, p, children)
    finally:
        # Get_contents hands out new handles for derived types: ours to free.
        for child in children:
            if not child.is_predefined:
                child.Free()


def _combine(name, p, children):
    child = children[0]
    if name == 'STRUCT':
        items = [(_flatten(t), t.Get_extent()[1], n, d)
                 for t, n, d in zip(children, p['blocklengths'], p['displacements'])]
        return _concat([(_repeat(pat, n, ext), d) for pat, ext, n, d in items])
    pat = _flatten(child)
    ext = child.Get_extent()[1]
    if name in ('DUP', 'RESIZED'):  # resizing changes bounds and extent, never where the data is
        return pat
    if name == 'CONTIGUOUS':
        return _repeat(pat, p['count'], ext)
    if name in ('VECTOR', 'HVECTOR'):
        stride = p['stride'] * (ext if name == 'VECTOR' else 1)
        return _repeat(_repeat(pat, p['blocklength'], ext), p['count'], stride)
    if name in ('INDEXED', 'HINDEXED', 'INDEXED_BLOCK', 'HINDEXED_BLOCK'):
        unit = ext if name.startswith('INDEXED') else 1
        displs = np.asarray(p['displacements'], _I64) * unit
        lengths = p['blocklengths'] if 'blocklengths' in p else [p['blocklength']] * len(displs)
        return _indexed(pat, ext, np.asarray(lengths, _I64), displs)
    if name == 'SUBARRAY':
        return _array(pat, ext, p['sizes'], [range(s, s + n) for s, n in zip(p['starts'], p['subsizes'])],
                      p['order'])
    if name == 'DARRAY':
        return _array(pat, ext, p['gsizes'], _darray_indices(p), p['order'])
    raise Error('datatype', f'unknown type constructor {name}', arg='datatype', error_class=MPI.ERR_TYPE)


def _indexed(pat, ext, lengths, displs):
    """Blocks of lengths[i] copies of pat (`ext` bytes apart) at displs[i], without a Python loop
    over the blocks (indexed types may have millions)."""
    keep = lengths > 0
    lengths, displs = lengths[keep], displs[keep]
    if not len(lengths):
        return _Pat(_EMPTY, _EMPTY, (), frozenset())
    if (lengths == lengths[0]).all():
        return _replicate(_repeat(pat, int(lengths[0]), ext), displs)
    offs, lens = _expand(pat.offs, pat.lens, pat.dims)
    if len(offs) == 1 and lens[0] == ext:  # a gapless element: each block is one run of bytes
        return _Pat(offs[0] + displs, lengths * ext, (), pat.codes)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    copies = np.repeat(displs, lengths) + (np.arange(int(lengths.sum()), dtype=_I64) - first) * ext
    return _Pat((copies[:, None] + offs[None, :]).ravel(), np.tile(lens, len(copies)), (), pat.codes)


def _array(pat, ext, sizes, indices, order):
    """Elements of an n-dimensional array of `pat` (each `ext` bytes) at the given indices per
    dimension (an index array, or a range: a subarray's, one dimension without listing its indices,
    which may number billions): C order runs the last index fastest, Fortran order the first."""
    nd = len(sizes)
    dims = range(nd - 1, -1, -1) if order == MPI.ORDER_C else range(nd)
    mult = 1
    for k in dims:  # fastest first: each wraps the pattern built so far
        idx, step = indices[k], mult * ext
        if isinstance(idx, range):
            pat = _Pat(pat.offs + idx.start * step, pat.lens, pat.dims + ((len(idx), step),), pat.codes)
        else:
            pat = _replicate(pat, idx * step)
        mult *= sizes[k]
    return pat


def _darray_indices(p):
    """The global indices this process holds in each dimension of MPI_Type_create_darray; processes
    are numbered row-major in the grid, whatever the array's order (MPI 4.1, section 5.1.4)."""
    coords, r = [], p['rank']
    for n in reversed(p['psizes']):
        coords.append(r % n)
        r //= n
    coords.reverse()
    out = []
    for g, dist, arg, n, c in zip(p['gsizes'], p['distribs'], p['dargs'], p['psizes'], coords):
        i = np.arange(g, dtype=_I64)
        if dist == MPI.DISTRIBUTE_NONE:
            out.append(i)
        elif dist == MPI.DISTRIBUTE_BLOCK:
            b = -(-g // n) if arg == MPI.DISTRIBUTE_DFLT_DARG else arg
            out.append(i[c * b:min((c + 1) * b, g)])
        else:
            b = 1 if arg == MPI.DISTRIBUTE_DFLT_DARG else arg
            out.append(i[(i // b) % n == c])
    return out


def _repeat(pat, n, stride):
    """n copies of pat, `stride` bytes apart."""
    return _Pat(pat.offs, pat.lens, pat.dims + ((n, stride),), pat.codes)


def _replicate(pat, displs):
    """Copies of pat at the given displacements, in order: one more dimension when they are
    evenly spaced (or nest), else a table."""
    displs = np.asarray(displs, _I64)
    if not len(displs):
        return _Pat(_EMPTY, _EMPTY, (), frozenset())
    nest = _nest(displs)
    if nest is not None:
        return _Pat(pat.offs + displs[0], pat.lens, pat.dims + nest, pat.codes)
    offs, lens = _expand(pat.offs, pat.lens, pat.dims)
    return _Pat((displs[:, None] + offs[None, :]).ravel(), np.tile(lens, len(displs)), (), pat.codes)


def _concat(items):
    """Patterns at displacements, in order (indexed and struct types)."""
    items = [(pat, d) for pat, d in items if len(pat.lens)]
    codes = frozenset().union(*(pat.codes for pat, _ in items))
    if items and all(pat.same_blocks(items[0][0]) for pat, _ in items):
        pat = _replicate(items[0][0], [d for _, d in items])
        return _Pat(pat.offs, pat.lens, pat.dims, codes)
    offs, lens = [], []
    for pat, d in items:
        o, n = _expand(pat.offs, pat.lens, pat.dims)
        offs.append(o + d)
        lens.append(n)
    if not items:
        return _Pat(_EMPTY, _EMPTY, (), codes)
    return _Pat(np.concatenate(offs), np.concatenate(lens), (), codes)


def _expand(offs, lens, dims):
    """The table of every block, in order, of a table repeated over dims."""
    outer = np.zeros(1, _I64)
    for n, s in reversed(dims):  # outermost first: the innermost dimension runs fastest
        outer = (outer[:, None] + np.arange(n, dtype=_I64)[None, :] * s).ravel()
    return (outer[:, None] + offs[None, :]).ravel(), np.tile(lens, len(outer))


def _nest(offs):
    """Dimensions (innermost first) such that offs == offs[0] + sum_k i_k * stride_k in order,
    or None. A run of equal steps is the innermost dimension; the starts of its rows, the next."""
    dims = []
    while len(offs) > 1:
        step = offs[1] - offs[0]
        breaks = np.flatnonzero(np.diff(offs) != step)
        n = len(offs) if not len(breaks) else int(breaks[0]) + 1
        if len(offs) % n or len(dims) == MAX_DIMS:
            return None
        rows = offs.reshape(-1, n)
        if not np.array_equal(rows - rows[:, :1], np.broadcast_to(rows[0] - rows[0, 0], rows.shape)):
            return None
        dims.append((n, int(step)))
        offs = rows[:, 0]
    return tuple(dims)


def _normalize(offs, lens, dims):
    """The simplest equal form: empty blocks and single repetitions dropped, touching blocks merged,
    a table of equal blocks at nesting offsets turned into dimensions, a dimension whose stride is the
    block (or the span of the dimension inside it) merged into it; at most MAX_DIMS dimensions."""
    offs, lens = np.asarray(offs, _I64), np.asarray(lens, _I64)
    dims = tuple((int(n), int(s)) for n, s in dims if n != 1)
    keep = lens > 0
    if not keep.all():
        offs, lens = offs[keep], lens[keep]
    if not len(lens) or any(n == 0 for n, _ in dims):
        return _EMPTY, _EMPTY, ()
    if len(lens) > 1:
        ends = offs[:-1] + lens[:-1]
        joined = np.flatnonzero(ends == offs[1:])
        if len(joined):  # merge runs of touching blocks
            first = np.ones(len(offs), bool)
            first[joined + 1] = False
            starts = np.flatnonzero(first)
            offs, lens = offs[starts], np.add.reduceat(lens, starts)
    if len(lens) > 1 and (lens == lens[0]).all():
        nest = _nest(offs)
        if nest is not None:
            offs, lens, dims = offs[:1], lens[:1], nest + dims
    dims = list(dims)
    if len(lens) == 1:
        while dims and dims[0][1] == lens[0]:
            lens = lens * dims.pop(0)[0]
    k = 0
    while k + 1 < len(dims):
        (n0, s0), (n1, s1) = dims[k], dims[k + 1]
        if s1 == n0 * s0:
            dims[k:k + 2] = [(n0 * n1, s0)]
        else:
            k += 1
    while len(dims) > MAX_DIMS:  # fold the innermost dimension into the table
        offs, lens = _expand(offs, lens, dims[:1])
        del dims[0]
    return offs, lens, tuple(dims)


# ---- host reference -------------------------------------------------------------------------------------
def _index(lay, count, nbytes, base_offset, what):
    idx = lay.byte_offsets(count) + base_offset
    if len(idx) and (idx.min() < 0 or idx.max() >= nbytes):
        raise Error(what, f'the type map reaches bytes {idx.min() - base_offset}..{idx.max() - base_offset} '
                    f'from the buffer pointer, outside the {nbytes}-byte array at offset {base_offset}',
                    arg='buffer', error_class=MPI.ERR_BUFFER)
    return idx


def pack_host(lay, count, src, base_offset=0):
    """MPI_Pack of `count` instances with NumPy: `src` is a uint8 array and the buffer pointer is
    its byte `base_offset` (type maps may reach before it). Returns the packed bytes."""
    src = np.asarray(src).view(np.uint8).reshape(-1)
    return src[_index(lay, count, len(src), base_offset, 'pack')].tobytes()


def unpack_host(lay, count, packed, dst, base_offset=0):
    """MPI_Unpack of `count` instances into the uint8 array `dst` (buffer pointer at its byte
    `base_offset`) from the packed bytes."""
    dst = np.asarray(dst).view(np.uint8).reshape(-1)
    data = np.frombuffer(packed, np.uint8)
    idx = _index(lay, count, len(dst), base_offset, 'unpack')
    if len(data) < len(idx):
        raise Error('unpack', f'{len(data)} packed bytes for {len(idx)} bytes of data', arg='packed',
                    error_class=MPI.ERR_TRUNCATE)
    dst[idx] = data[:len(idx)]
