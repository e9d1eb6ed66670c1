"""Waits on host MPI that give up: after MPIGPU_TIMEOUT_S without the peers (a peer that never
arrives), or at once when the communicator is aborted, as the device engine's kernels do.

A call's non-blocking MPI request is polled (busily for a while, then with growing sleeps of at most
MPIGPU_POLL_SLEEP_US). A collective MPI cannot cancel: the one given up stays pending, and GaveUp
carries it with the buffers it may still write, for the caller to keep (CommState.abandon) while it
breaks the communicator.

The sleeps stay short because a request advances only while it is polled: a step of a multi-step
collective (the agreement's MPI_Iallreduce across nodes) that arrives while its rank sleeps waits out
the sleep, and every step can. With sleeps of up to 1 ms, the hierarchical Bcast of 16 MB on 2 x 2
simulated nodes took 7.5 ms where its network phase alone took 1.9 (docs/benchmarks.md).
"""
import os
import pickle
import time

import numpy as np
from mpi4py import MPI

from .config import config

_SPIN_S = 1e-3       # busy polling first: short calls pay no sleep
_FIRST_SLEEP_S = 1e-5
# Past this, each look gives the core up to a runnable process, if any (sched_yield: about a microsecond
# where none is): ranks that outnumber the cores let the peer they wait for run (a 6-rank job on 2 cores:
# 12.3 -> 7.5 s, docs/tuning.md), as the placement board's waits do (mpigpu/_ext/board.h).
_YIELD_AFTER_S = 5e-5
_yield = getattr(os, 'sched_yield', lambda: None)


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
    sleep, most = 0.0, config.poll_sleep_us * 1e-6
    while not req.Test():
        now = time.monotonic()
        why = broken() if broken is not None else None
        if why is None and now > deadline:
            limit = f'MPIGPU_TIMEOUT_S={config.timeout_s:g}' if timeout_s is None else f'{timeout_s:g}'
            why = f'peers did not arrive within {limit} s (host MPI does not say which)'
        if why is not None:
            raise GaveUp(why, (req, keep))
        if now - start > _SPIN_S:
            sleep = min(most, max(sleep * 2, _FIRST_SLEEP_S))
            if sleep > 0:
                time.sleep(sleep)
        elif now - start > _YIELD_AFTER_S:
            _yield()


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
