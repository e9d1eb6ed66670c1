# Derived datatypes packed on the device (cuda/pack.cu): a layout of mpigpu._describe.datatypes made ready
# for one device (its block table uploaded once), and the pack / unpack launch on a stream.
# Included at the end of _device.pyx, whose `check` and `DeviceError` it uses.
from libc.stdint cimport int64_t

cdef extern from "mpigpu_cuda.h" nogil:
    enum:
        MG_PACK_MAX_DIMS
        MG_PACK
        MG_UNPACK
    ctypedef struct mg_layout:
        int64_t size
        int64_t extent
        int ndims
        int64_t dim_count[MG_PACK_MAX_DIMS]
        int64_t dim_stride[MG_PACK_MAX_DIMS]
        int64_t nblocks
        int64_t start
        int64_t block
        const int64_t *offsets
        const int64_t *packed
        int group
    int mg_layout_upload(mg_layout *layout, const int64_t *offsets, const int64_t *lengths, int64_t n)
    int mg_layout_release(mg_layout *layout)
    int mg_pack(const mg_layout *layout, size_t count, uintptr_t buf, uintptr_t packed, int direction,
                uintptr_t stream)

PACK_MAX_DIMS = MG_PACK_MAX_DIMS


cdef class PackPlan:
    """A datatype layout (mpigpu._describe.datatypes.Layout) on one device: its block table, when it has
    one, in that device's memory, uploaded once. Build it with that device current (pack_plan)."""
    cdef mg_layout lay
    cdef readonly int device
    cdef readonly Py_ssize_t size, extent

    def __cinit__(self, layout, int device):
        cdef const int64_t[::1] offs = layout.offsets
        cdef const int64_t[::1] lens = layout.lengths
        cdef int k
        dims = layout.dims
        if len(dims) > MG_PACK_MAX_DIMS:
            raise ValueError(f'layout of {len(dims)} dimensions (at most {MG_PACK_MAX_DIMS})')
        if offs.shape[0] != lens.shape[0]:
            raise ValueError('layout offsets and lengths differ in length')
        self.lay.offsets = NULL
        self.lay.packed = NULL
        self.lay.size = layout.size
        self.lay.extent = layout.extent
        self.lay.ndims = len(dims)
        for k in range(len(dims)):
            self.lay.dim_count[k] = dims[k][0]
            self.lay.dim_stride[k] = dims[k][1]
        self.lay.nblocks = 1
        self.lay.start = offs[0] if offs.shape[0] else 0
        self.lay.block = lens[0] if offs.shape[0] else 0
        self.lay.group = 1
        self.device, self.size, self.extent = device, layout.size, layout.extent
        if offs.shape[0] > 1:
            self.lay.nblocks = 0  # nothing to release until the upload succeeds
            check(mg_layout_upload(&self.lay, &offs[0], &lens[0], offs.shape[0]), 'datatype block table upload')

    def __dealloc__(self):
        mg_layout_release(&self.lay)  # cudaFree: waits for kernels still reading the table

    cpdef pack(self, size_t count, uintptr_t buf, uintptr_t packed, uintptr_t stream):
        """Enqueues on `stream` the packing of `count` instances at `buf` into `packed`
        (count * size bytes); returns at once."""
        check(mg_pack(&self.lay, count, buf, packed, MG_PACK, stream), 'datatype pack')

    cpdef unpack(self, size_t count, uintptr_t packed, uintptr_t buf, uintptr_t stream):
        """Enqueues on `stream` the unpacking of `count` instances from `packed` into `buf`."""
        check(mg_pack(&self.lay, count, buf, packed, MG_UNPACK, stream), 'datatype unpack')


cpdef PackPlan pack_plan(object layout, int device):
    """The layout's plan for `device` (which must be current), made at first use and kept in the
    layout, so it lives as long as the datatype's cache entry."""
    plan = layout.plans.get(device)
    if plan is None:
        plan = PackPlan(layout, device)
        layout.plans[device] = plan
    return plan
