# User buffers over CUDA IPC (cuda/ipc_buffers.cu) and generalized requests completed after GPU work
# (cuda/completion.cu), for point-to-point and the non-blocking paths (included by _device.pyx).

# ---- user buffers over CUDA IPC (cuda/ipc_buffers.cu) --------------------------------------------
cpdef tuple ipc_describe(uintptr_t ptr):
    """(base, size, buffer id, exportable) of the allocation holding device pointer `ptr`."""
    cdef uintptr_t base = 0
    cdef size_t size = 0
    cdef uint64_t ident = 0
    cdef int capable = 0
    check(mg_ipc_describe(ptr, &base, &size, &ident, &capable), 'cuPointerGetAttributes')
    return base, size, ident, bool(capable)


def ipc_export(uintptr_t base):
    """The IPC handle (bytes) of the allocation at `base`."""
    cdef char h[MG_IPC_HANDLE_BYTES]
    check(mg_ipc_export(base, h), 'cudaIpcGetMemHandle')
    return h[:MG_IPC_HANDLE_BYTES]


def ipc_open(bytes handle):
    """Maps a peer's allocation on the current device; returns its base address here."""
    cdef uintptr_t base = 0
    if len(handle) != MG_IPC_HANDLE_BYTES:
        raise ValueError('IPC handle must be %d bytes' % MG_IPC_HANDLE_BYTES)
    check(mg_ipc_open(<const char *>handle, &base), 'cudaIpcOpenMemHandle')
    return base


def ipc_close(uintptr_t base):
    check(mg_ipc_close(base), 'cudaIpcCloseMemHandle')


# ---- generalized requests for GPU work (cuda/completion.cu) --------------------------------------
def request_init(uintptr_t grequest_start, uintptr_t grequest_complete, uintptr_t status_set_elements,
                 uintptr_t status_set_cancelled, intptr_t byte_type, int status_source_offset,
                 int status_tag_offset, int any_source, int any_tag, int err_other, int request_bytes):
    """Hands the MPI functions and ABI facts to the completion layer (once per process)."""
    cdef mg_mpi_api api
    if request_bytes not in (4, 8):
        raise ValueError('MPI_Request of %d bytes' % request_bytes)
    api.grequest_start = <void *>grequest_start
    api.grequest_complete = <void *>grequest_complete
    api.status_set_elements = <void *>status_set_elements
    api.status_set_cancelled = <void *>status_set_cancelled
    api.byte_type = byte_type
    api.status_source_offset = status_source_offset
    api.status_tag_offset = status_tag_offset
    api.any_source = any_source
    api.any_tag = any_tag
    api.err_other = err_other
    api.request_bytes = request_bytes
    check(mg_completion_init(&api), 'request_init')


cpdef request_wait(uint64_t ticket):
    """Blocks (GIL released) until the ticket's GPU work is done and its request completed; raises
    DeviceError with the completion's code when the work failed (a CUDA error or a fault)."""
    cdef int e
    with nogil:
        e = mg_completion_wait(ticket)
    check(e, 'GPU work of a request')


cpdef bint request_test(uint64_t ticket) except -1:
    """True when the ticket's GPU work is done (its request is then complete); raises as request_wait."""
    cdef int done = 0
    check(mg_completion_test(ticket, &done), 'GPU work of a request')
    return done


def request_shutdown():
    """Stops the completion watcher thread (before MPI is finalized)."""
    with nogil:
        mg_completion_shutdown()
