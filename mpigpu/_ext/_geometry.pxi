# The count and in-place layout MPI defines for each of the engine's collectives, written once: the fast
# path (_device.pyx) and the general path (mpigpu/_describe/call.py, through _intake.call_geometry) both use it.
# Counts in: the elements each buffer describes in all (a buffer specification's per-block count times
# its blocks). Out: the call's count (Allreduce, Bcast, Reduce: elements; Reduce_scatter_block: per
# rank; Allgather: per contributor) and, for an in-place Allgather, the element where this rank's
# contribution sits in recvbuf.

cdef extern from "mpigpu_cuda.h":
    enum:
        MG_ALLREDUCE
        MG_BCAST
        MG_REDUCE_SCATTER_BLOCK
        MG_REDUCE
        MG_ALLGATHER

cdef enum:
    GEOMETRY_OK = 0
    GEOMETRY_COUNTS_DIFFER = 1      # Allreduce, Reduce: sendbuf and recvbuf counts differ
    GEOMETRY_RECV_NOT_MULTIPLE = 2  # in-place Reduce_scatter_block, Allgather: recvbuf not n blocks
    GEOMETRY_SEND_NOT_MULTIPLE = 3  # Reduce_scatter_block: sendbuf not n blocks
    GEOMETRY_BLOCKS_DIFFER = 4      # Reduce_scatter_block, Allgather: recvbuf is not the n blocks sendbuf gives

# What each error means, for the general path's messages (mpigpu/_describe/call.py)
GEOMETRY_ERRORS = {GEOMETRY_COUNTS_DIFFER: 'counts_differ', GEOMETRY_RECV_NOT_MULTIPLE: 'recv_not_multiple',
                   GEOMETRY_SEND_NOT_MULTIPLE: 'send_not_multiple', GEOMETRY_BLOCKS_DIFFER: 'blocks_differ'}


cdef inline int geometry(int coll, int n, int rank, bint has_send, Py_ssize_t scount, bint has_recv,
                         Py_ssize_t rcount, bint inplace, Py_ssize_t *count, Py_ssize_t *own) noexcept nogil:
    own[0] = 0
    if coll == MG_BCAST:
        count[0] = rcount
    elif coll == MG_ALLREDUCE or coll == MG_REDUCE:
        if not has_recv:           # a Reduce off its root: recvbuf is not significant
            count[0] = scount
        elif inplace:
            count[0] = rcount
        elif scount != rcount:
            return GEOMETRY_COUNTS_DIFFER
        else:
            count[0] = rcount
    elif coll == MG_REDUCE_SCATTER_BLOCK:
        if inplace:
            if rcount % n:
                return GEOMETRY_RECV_NOT_MULTIPLE
            count[0] = rcount // n
        elif scount % n:
            return GEOMETRY_SEND_NOT_MULTIPLE
        elif scount != rcount * n:
            return GEOMETRY_BLOCKS_DIFFER
        else:
            count[0] = rcount
    else:  # MG_ALLGATHER
        if inplace:
            if rcount % n:
                return GEOMETRY_RECV_NOT_MULTIPLE
            count[0] = rcount // n
            own[0] = rank * count[0]
        elif rcount != scount * n:
            return GEOMETRY_BLOCKS_DIFFER
        else:
            count[0] = scount
    return GEOMETRY_OK
