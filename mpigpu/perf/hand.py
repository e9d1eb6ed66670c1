"""The `hand` baseline: staging by hand, what a GPU program does on an MPI that is not CUDA-aware."""
import numpy as np

from .._base import plain as _plain
from .baselines import Unavailable, make_buffers, mpi_call, require_staging


class HandImpl:
    """Each call copies the device send buffer into a host NumPy array, makes plain mpi4py's call on
    host arrays, and copies the result back into the device buffer. The host arrays are made once a
    row and kept, as such a program keeps them: the copies are timed, not allocations (the `staged`
    baseline allocates them in every call, as asnumpy does). Any row, the exchange rows included."""
    name = 'hand'

    def __init__(self, comm):
        self.comm = _plain.Intracomm(comm)

    def make(self, b, op, stream=False):
        require_staging(b, stream)
        if b.inplace:
            raise Unavailable('in-place calls are not staged by hand')
        host = make_buffers(np, b.coll, b.count, b.send.dtype, b.n, b.rank, False, b.root)
        call = mpi_call(self.comm, host, op)
        # the buffer a call writes: Bcast's is its one buffer
        device_out, host_out = (b.send, host.send) if b.coll == 'bcast' else (b.recv, host.recv)
        stream = b.xp.cuda.get_current_stream()

        def run():
            if host.send.size:  # empty where this rank sends nothing (scatterv off its root)
                b.send.get(out=host.send)  # returns with the copy done
            call()
            if host_out.size:
                device_out.set(host_out)
            stream.synchronize()
        return run
