"""Waits on host MPI that give up: after MPIGPU_TIMEOUT_S without the peers (a peer that never
arrives), or at once when the communicator is aborted, as the device engine's kernels do.

A call's non-blocking MPI request is polled (busily for a while, then with growing sleeps). A
collective MPI cannot cancel: the one given up stays pending, and GaveUp carries it with the buffers
it may still write, for the caller to keep (CommState.abandon) while it breaks the communicator.
"""
import pickle
import time

import numpy as np
from mpi4py import MPI

from ._config import config

_SPIN_S = 1e-3       # busy polling first: short calls pay no sleep
_MAX_SLEEP_S = 1e-3


class GaveUp(Exception):
    """A wait given up: `why`, and `pending`: what MPI may still use (requests, buffers)."""

    def __init__(self, why, pending):
        super().__init__(why)
        self.why, self.pending = why, pending


def wait(req, broken=None, keep=(), timeout_s=None):
    """Waits for `req`; raises GaveUp after the deadline (MPIGPU_TIMEOUT_S, or `timeout_s`), or once
    `broken()` returns a reason. `keep`: the buffers the request uses, handed on with it when the wait
    is given up."""
    start = time.monotonic()
    deadline = start + (config.timeout_s if timeout_s is None else timeout_s)
    sleep = 0.0
    while not req.Test():
        now = time.monotonic()
        why = broken() if broken is not None else None
        if why is None and now > deadline:
            limit = f'MPIGPU_TIMEOUT_S={config.timeout_s:g}' if timeout_s is None else f'{timeout_s:g}'
            why = f'peers did not arrive within {limit} s (host MPI does not say which)'
        if why is not None:
            raise GaveUp(why, (req, keep))
        if now - start > _SPIN_S:
            sleep = min(_MAX_SLEEP_S, max(sleep * 2, 1e-5))
            time.sleep(sleep)


def allgather(comm, obj, broken=None):
    """comm.allgather(obj) (pickled objects), given up as `wait` does."""
    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    n = comm.Get_size()
    sizes = np.zeros(n, np.int64)
    mine = np.array([len(data)], np.int64)
    wait(comm.Iallgather(mine, sizes), broken, (mine, sizes))
    out = np.zeros(int(sizes.sum()), np.uint8)
    displs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    wait(comm.Iallgatherv(data, [out, (sizes, displs), MPI.BYTE]), broken, (data, out, sizes, displs))
    return [pickle.loads(out[int(d):int(d) + int(k)].tobytes()) for d, k in zip(displs, sizes)]
