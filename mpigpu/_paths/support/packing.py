"""Buffer specifications with derived datatypes on device buffers, for the mirrored path: the instances
a call reaches are packed on the GPU straight into its pinned host mirror, host MPI reads them through
a rewritten specification, and outputs are unpacked on the GPU from there. A one-column halo of a
large array then crosses PCIe as its column, not as the array's extent.

How mpi4py reads a specification depends on the method and the parameter (msgbuffer.pxi): a simple
message (one count, per block for `blocks` blocks), a vector one (counts and displacements per block,
in datatype extents) or Alltoallw's (counts, byte displacements and a datatype per block). `form_of`
names the form of each buffer parameter; `plan` works out the runs of instances the call reaches, in
the order they are packed, back to back:

    run = (layout, instances, byte offset of the first from the buffer pointer, offset in the packed bytes)

The rewritten specification describes each block by the packed type of its datatype: the datatype's
elements back to back (its base type, or bytes for a mixed struct), whose extent is its size, so a
count keeps its meaning and a block's displacement is where its run was packed.
"""
import operator

from mpi4py import MPI

from ... import _cuda
from ..._describe import datatypes as _datatypes
from ..._describe.datatypes import SIMPLE, VECTOR, W
from ..._describe.call import unpack_spec
from ..._base.types import NATIVE
from .packed import check_within

# Buffer parameters that hold one block per rank (SIZE: of the communicator, or the remote group of an
# intercommunicator) or per neighbour (IN: sources, OUT: destinations), by blocking method; every other
# parameter is a simple message of one block.
SIZE, IN, OUT = 'size', 'in', 'out'
_FORMS = {
    'Gather': {'recvbuf': (SIMPLE, SIZE)},
    'Gatherv': {'recvbuf': (VECTOR, SIZE)},
    'Scatter': {'sendbuf': (SIMPLE, SIZE)},
    'Scatterv': {'sendbuf': (VECTOR, SIZE)},
    'Allgather': {'recvbuf': (SIMPLE, SIZE)},
    'Allgatherv': {'recvbuf': (VECTOR, SIZE)},
    'Alltoall': {'sendbuf': (SIMPLE, SIZE), 'recvbuf': (SIMPLE, SIZE)},
    'Alltoallv': {'sendbuf': (VECTOR, SIZE), 'recvbuf': (VECTOR, SIZE)},
    'Alltoallw': {'sendbuf': (W, SIZE), 'recvbuf': (W, SIZE)},
    'Reduce_scatter_block': {'sendbuf': (SIMPLE, SIZE)},
    'Neighbor_allgather': {'recvbuf': (SIMPLE, IN)},
    'Neighbor_allgatherv': {'recvbuf': (VECTOR, IN)},
    'Neighbor_alltoall': {'sendbuf': (SIMPLE, OUT), 'recvbuf': (SIMPLE, IN)},
    'Neighbor_alltoallv': {'sendbuf': (VECTOR, OUT), 'recvbuf': (VECTOR, IN)},
    'Neighbor_alltoallw': {'sendbuf': (W, OUT), 'recvbuf': (W, IN)},
}


def form_of(comm, method, param, in_place):
    """(form, blocks) of buffer parameter `param` of the blocking method `method` on `comm`.
    `in_place`: the call's sendbuf is MPI.IN_PLACE (in-place Reduce_scatter_block's recvbuf holds every
    rank's block)."""
    kind, per = _FORMS.get(method, {}).get(param, (SIMPLE, None))
    if method == 'Reduce_scatter_block' and param == 'recvbuf' and in_place:
        kind, per = SIMPLE, SIZE
    if per is None:
        return kind, 0
    if per == SIZE:
        return kind, comm.Get_remote_size() if comm.Is_inter() else comm.Get_size()
    sources, destinations = comm.degrees  # a topology communicator's, as MPI's neighbourhood calls count them
    return kind, sources if per == IN else destinations


# ---- the packed type of a layout: its elements back to back --------------------------------------------
_packed_types = {}  # (element code, elements) -> committed MPI datatype (few distinct ones; kept for the process)


def packed_type(lay):
    """The MPI datatype of one packed instance of layout `lay`: the base type once or `elements` times
    contiguous (extent = size), or bytes for a layout whose leaves differ or that host MPI lacks."""
    base = NATIVE[lay.code] if lay.code >= 0 else None
    if base is None:
        base, n = MPI.BYTE, lay.size
    else:
        n = lay.size // base.Get_size()
    if n == 1:
        return base
    key = (base.handle, n)
    t = _packed_types.get(key)
    if t is None:
        t = _packed_types[key] = base.Create_contiguous(n).Commit()
    return t


def _wanted(dt, unsized):
    """True for a datatype whose instances the GPU must gather (not one block at the pointer of its
    size), or for any datatype on a buffer of unknown length (a raw address: no whole-buffer mirror)."""
    if not isinstance(dt, MPI.Datatype) or dt.handle == MPI.DATATYPE_NULL.handle:
        return False
    if unsized:
        return True
    if dt.is_predefined:
        return False
    return not _datatypes.layout(dt).plain


class _Unsupported(Exception):
    """The specification is not one this module rewrites: the whole-buffer mirror takes it unchanged (and
    mpi4py raises for it where it is malformed)."""


def _index(value):
    try:
        v = operator.index(value)
    except TypeError:
        raise _Unsupported from None
    if v < 0:
        raise _Unsupported
    return v


def _integral(value):
    """An integer rather than a sequence of them, as mpi4py tells them apart."""
    return hasattr(value, '__index__') and not hasattr(value, '__len__')


def _ints(values, blocks):
    try:
        out = [_index(v) for v in values]
    except TypeError:
        raise _Unsupported from None
    if len(out) != blocks:
        raise _Unsupported
    return out


# ---- what a specification reaches -------------------------------------------------------------------------
class _Flat:
    """The layout of the elements of a buffer that a specification names no datatype for (or names by a
    typecode): `itemsize` bytes each, back to back."""

    def __init__(self, itemsize):
        self.size = self.extent = self.true_extent = itemsize
        self.true_lb = 0


def _layout_of(dt, itemsize):
    """The layout of a specification's datatype (an MPI.Datatype, a typecode, or None: the buffer's own
    elements of `itemsize` bytes), for `reach`."""
    if isinstance(dt, MPI.Datatype):
        if dt.handle == MPI.DATATYPE_NULL.handle:
            raise _Unsupported
        return _datatypes.layout(dt)
    if isinstance(dt, str):
        try:
            return _datatypes.layout(MPI.Datatype.fromcode(dt))
        except (KeyError, ValueError):
            raise _Unsupported from None
    return _Flat(itemsize)


def _simple(name, label, rank, rest, nbytes, blocks, elementwise, itemsize=0):
    """(runs, rewritten rest) of a simple message: one run from its displacement. `elementwise`: the
    packed bytes are described as elements of the base type (reductions: the element type decides, and
    host MPIs reduce only named types), else as instances of the packed type. Read as point-to-point
    reads a specification (_call.unpack_spec, whose errors are mpi4py's). `itemsize`: any datatype,
    read for `reach` (no rewritten rest)."""
    _obj, count, displ, dt = unpack_spec(name, label, rank, [None, *rest])
    if itemsize:
        lay = _layout_of(dt, itemsize)
        if count is None:
            raise _Unsupported  # inferred from the length: within it
        return [(lay, count * max(blocks, 1), displ * lay.extent, 0)], None
    if not _wanted(dt, not nbytes):
        raise _Unsupported
    lay = _datatypes.layout(dt)
    if lay.extent <= 0 and (displ or count is None):
        raise _Unsupported  # mpi4py's error
    offset = displ * lay.extent
    if count is None:
        length = nbytes - offset
        if length < 0 or length % lay.extent:
            raise _Unsupported  # mpi4py's "cannot infer count"
        instances = length // lay.extent
    else:
        instances = count * max(blocks, 1)
    base = NATIVE[lay.code] if elementwise and lay.code >= 0 else None
    if base is not None:
        spec = [base] if count is None else [count * (lay.size // base.Get_size()), base]
    else:
        spec = [packed_type(lay)] if count is None else [count, packed_type(lay)]
    return [(lay, instances, offset, 0)], spec


def vector_spec(rest):
    """(counts, displacements, datatype) from the items after a vector message's buffer, as mpi4py's
    message_vector reads them (None: not given)."""
    counts = displs = dt = None
    if len(rest) == 1:
        x = rest[0]
        if isinstance(x, (MPI.Datatype, str)):
            dt = x
        elif type(x) is tuple and len(x) == 2:
            counts, displs = x
        else:
            counts = x
    elif len(rest) == 2:
        counts, dt = rest
        if type(counts) is tuple and len(counts) == 2:
            counts, displs = counts
    elif len(rest) == 3:
        counts, displs, dt = rest
    return counts, displs, dt


def vector_counts(counts, displs, instances, blocks):
    """Each block's count and displacement (in extents) of a vector message over `instances` instances,
    filled as message_vector fills what is not given: counts split evenly, displacements packed in block
    order, or a stride. Raises _Unsupported where mpi4py would raise."""
    if counts is None:
        counts = [instances // blocks + (instances % blocks > i) for i in range(blocks)]
    elif _integral(counts):
        counts = [_index(counts)] * blocks
    else:
        counts = _ints(counts, blocks)
    if displs is None:
        displs, at = [], 0
        for c in counts:
            displs.append(at)
            at += c
    elif _integral(displs):
        step = _index(displs)
        displs = [step * i for i in range(blocks)]
    else:
        displs = _ints(displs, blocks)
    return counts, displs


def _vector(rest, nbytes, blocks, itemsize=0):
    """(runs, rewritten rest) of a vector message: one run per block, packed in block order (`itemsize`:
    any datatype, read for `reach`)."""
    counts, displs, dt = vector_spec(rest)
    if itemsize:
        if counts is None:
            raise _Unsupported  # inferred from the length: within it
        lay = _layout_of(dt, itemsize)
    elif not _wanted(dt, not nbytes):
        raise _Unsupported
    else:
        lay = _datatypes.layout(dt)
    if counts is None and nbytes and (lay.extent <= 0 or nbytes % lay.extent):
        raise _Unsupported
    counts, displs = vector_counts(counts, displs, nbytes // lay.extent if nbytes else 0, blocks)
    runs, packed_at, at = [], [], 0
    for c, d in zip(counts, displs):
        runs.append((lay, c, d * lay.extent, at * lay.size))
        packed_at.append(at)
        at += c
    return runs, (None if itemsize else [counts, packed_at, packed_type(lay)])


def _vector_w(rest, nbytes, blocks, itemsize=0):
    """(runs, rewritten rest) of Alltoallw's message: one run per block, each with its own datatype
    (`itemsize`: any datatypes, read for `reach`)."""
    if len(rest) == 1:
        types, counts, displs = rest[0], [1] * blocks, [0] * blocks
    elif len(rest) == 2 and type(rest[0]) in (list, tuple) and len(rest[0]) == 2:
        (counts, displs), types = rest
    elif len(rest) == 3:
        counts, displs, types = rest
    else:
        raise _Unsupported
    if type(types) not in (list, tuple) or len(types) != blocks or not all(isinstance(t, MPI.Datatype) for t in types):
        raise _Unsupported
    if not itemsize and not any(_wanted(t, not nbytes) for t in types):
        raise _Unsupported
    counts, displs = _ints(counts, blocks), _ints(displs, blocks)
    runs, packed_at, new_types, at = [], [], [], 0
    for c, d, t in zip(counts, displs, types):
        lay = _datatypes.layout(t)
        runs.append((lay, c, d, at))
        packed_at.append(at)
        if not itemsize:
            new_types.append(packed_type(lay))
        at += c * lay.size
    return runs, (None if itemsize else [counts, packed_at, new_types])


def reach(name, label, rank, rest, form, itemsize):
    """(lowest, highest) byte from the buffer's pointer that the explicit counts of specification `rest`
    reach, read as its method reads it (`form`), or None where its counts are inferred from the buffer's
    length or mpi4py refuses it (its own error then). The mirrored path checks it against the memory
    really there, as MPI trusts an explicit count: past the buffer's length, within its allocation."""
    kind, blocks = form
    try:
        if kind == W:
            runs, _ = _vector_w(rest, 0, blocks, itemsize)
        elif kind == VECTOR:
            runs, _ = _vector(rest, 0, blocks, itemsize)
        else:
            runs, _ = _simple(name, label, rank, rest, 0, blocks, False, itemsize)
    except Exception:  # (_Unsupported, or anything a malformed specification makes fail here)
        return None
    lo, hi = 0, 0
    for lay, count, offset, _ in runs:
        if count and lay.size:
            lo = min(lo, offset + lay.true_lb + min(0, (count - 1) * lay.extent))
            hi = max(hi, offset + lay.true_lb + lay.true_extent + max(0, (count - 1) * lay.extent))
    return lo, hi


class Packing:
    """One device buffer argument of the mirrored path whose specification has a derived datatype: the
    runs of instances it reaches, their packed size, and the specification (after the buffer) that reads
    the packed bytes."""
    __slots__ = ('buf', 'device', 'stream', 'runs', 'nbytes', 'rest', 'code')

    def pack(self, pinned_ptr):
        """Packs every run into pinned memory on the producer's stream, and waits for it."""
        self._move(pinned_ptr, unpacking=False)

    def unpack(self, pinned_ptr):
        """Scatters every run from pinned memory into the user's buffer on its stream, and waits for it."""
        self._move(pinned_ptr, unpacking=True)

    def _move(self, pinned_ptr, unpacking):
        runs = [r for r in self.runs if r[1] and r[0].size]
        if not runs:
            return
        stream, base = self.stream, self.buf.ptr

        def run():
            for lay, count, offset, at in runs:
                plan = _cuda.pack_plan(lay, self.device)
                if unpacking:
                    plan.unpack(count, pinned_ptr + at, base + offset, stream)
                else:
                    plan.pack(count, base + offset, pinned_ptr + at, stream)
            _cuda.sync(stream)
        _cuda.with_device(self.device, run)


def plan(name, label, rank, buf, device, rest, form, reduces):
    """The Packing of device buffer `buf` (a DeviceBuffer on `device`) given with specification `rest`,
    read by its method as `form` ((kind, blocks) of form_of), or None where the whole-buffer mirror is
    the right path: no derived datatype on a buffer of known length, a specification mpi4py rejects
    (its error then), more packed bytes than the buffer holds (instances that overlap), or a reduction
    of what host MPI can only reduce in the datatype itself (bytes of a mixed struct). A raw address
    of no length (MPI.memory.fromaddress(p, 0), as C passes pointers) is always packed: its
    specification alone says which bytes the call reaches."""
    kind, blocks = form
    try:
        if kind == W:
            runs, spec = _vector_w(rest, buf.nbytes, blocks)
        elif kind == VECTOR:
            runs, spec = _vector(rest, buf.nbytes, blocks)
        else:
            runs, spec = _simple(name, label, rank, rest, buf.nbytes, blocks, reduces)
    except _Unsupported:
        return None
    codes = {lay.code for lay, *_ in runs}
    if reduces and (_datatypes.BYTES in codes or len(codes) > 1):
        return None
    nbytes = sum(count * lay.size for lay, count, _, _ in runs)
    if buf.nbytes and nbytes > buf.nbytes:
        alloc = _cuda.allocation(buf.ptr)  # the memory really there may hold them (a short view)
        if alloc is None or nbytes > alloc[0] + alloc[1] - buf.ptr:
            return None
    for lay, count, offset, _ in runs:
        check_within(name, label, rank, buf, lay, count, offset)
    p = Packing()
    p.buf, p.device, p.runs, p.nbytes, p.rest = buf, device, runs, nbytes, spec
    p.stream = _cuda.stream_of(buf, device)
    p.code = codes.pop() if len(codes) == 1 else _datatypes.BYTES
    return p

