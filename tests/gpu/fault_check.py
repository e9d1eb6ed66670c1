"""Faults of the device engine on GPUs: a peer that never arrives and an abort end the call with an
error, and the process stays usable. Three ranks on one GPU (or more GPUs):
    MPIGPU_SHARED_GPU=1 MPIGPU_TIMEOUT_S=3 mpirun -n 3 python -m mpi4py tests/gpu/fault_check.py
Exits non-zero on any failure; prints one line per case with how long the failing call took.

Teams are made here from mpigpu._ext._device directly (the layer under test), one per case:
- timeout: the last rank skips one Allreduce; the others get DeviceError(ERR_TIMEOUT), the team's
  fault, missing_peers() == [last], ERR_BROKEN at once for a later call; the last rank finds its team
  broken without running a call; every rank closes its team. For the LL kernel (resident on and off),
  LL128 one-shot (resident on and off) and two-shot, the direct kernel one-shot and two-shot (split
  warps), the ring, and a request (Team.run_request: request_wait raises, MPI's Wait reports ERR_OTHER);
- abort: a thread of rank 0 calls Team.abort() while ranks 0 .. n-2 wait in an Allreduce the last
  rank never joins (timeout 600 s): both end with ERR_ABORTED, origin rank 0 (LL resident, direct);
- afterwards a new team runs a correct Allreduce of every path, an mpigpu communicator made by
  COMM_WORLD.Dup() runs a correct Allreduce, and plain CuPy work gives the right numbers (a trap
  would have left a sticky error that fails every later CUDA call).
"""
import copy
import os
import sys
import threading
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

import mpigpu
from mpigpu import _cuda
from mpigpu._base.codes import Algo, Coll, Dtype, Op
from mpigpu._state import requests

dm = _cuda.device
plain = MPI.COMM_WORLD
rank, n = plain.Get_rank(), plain.Get_size()
last = n - 1
dev = rank % cp.cuda.runtime.getDeviceCount()
cp.cuda.Device(dev).use()
timeout_s = mpigpu.config.timeout_s
fails, lines = [], []


def check(ok, what):
    if not ok:
        fails.append(f'rank {rank}: {what}')


def make_team(resident_us, timeout=None):
    """A team of every rank on a private communicator (as mpigpu's setup makes one)."""
    cfg = copy.copy(mpigpu.config)
    cfg.resident_us = resident_us
    cfg.max_channels = 16
    if timeout is not None:
        cfg.timeout_s = timeout
    team = _cuda.with_device(dev, dm.Team, rank, n, dev, cfg)
    for peer, h in enumerate(plain.allgather(team.export_handle())):
        team.open_peer(peer, h)
    return team


def buffers(count):
    x = cp.arange(count, dtype=cp.float32) % 97 * (rank + 1)
    y = cp.zeros(count, cp.float32)
    want = np.arange(count, dtype=np.float32) % 97 * (n * (n + 1) / 2)
    return x, y, want


def allreduce(team, algo, x, y, nchannels=0, sync=True, stream=None):
    s = cp.cuda.get_current_stream().ptr if stream is None else stream
    team.run(Coll.ALLREDUCE, algo, Dtype.FLOAT32, Op.SUM, x.data.ptr, y.data.ptr, x.size, 0, nchannels, s, sync)


def expect_fault(fn, code, what):
    """Runs fn, which must raise DeviceError with `code`; returns the seconds it took."""
    t0 = time.monotonic()
    try:
        fn()
        check(False, f'{what}: returned without an error')
    except dm.DeviceError as exc:
        check(exc.code == code and exc.fault, f'{what}: code {exc.code} ({exc}), expected {code}')
    return time.monotonic() - t0


# Any gap between calls shorter than this keeps a call in the resident kernel (resident.cu): the
# calls of the resident cases run there whatever the host's pace.
RESIDENT_US = 1e7
# (name, algo, elements, resident_us, nchannels): every kernel family that waits for peers.
PATHS = [
    ('LL resident', Algo.LL, 1000, RESIDENT_US, 0),
    ('LL launched', Algo.LL, 1000, 0, 0),
    ('LL128 resident', Algo.LL128, 65536, RESIDENT_US, 0),
    ('LL128 launched', Algo.LL128, 65536, 0, 0),
    ('LL128 two-shot', Algo.LL128_TWOSHOT, 300_001, 0, 0),
    ('direct one-shot', Algo.ONESHOT, 1 << 20, 0, 2),
    ('direct two-shot', Algo.TWOSHOT, 4 << 20, 0, 2),  # 2 channels: many steps, split warps
    ('ring', Algo.RING, 1 << 20, 0, 2),
]


def timeout_case(name, algo, count, resident_us, nchannels, request=False):
    x, y, want = buffers(count)  # first: CuPy's kernels compile before the team's first call
    team = make_team(resident_us)
    allreduce(team, algo, x, y, nchannels)  # every rank: the path works (and the instance runs)
    check(np.array_equal(cp.asnumpy(y), want), f'{name}: correct call before the fault')
    if rank != last:
        if request:
            req = MPI.Request()
            s = cp.cuda.get_current_stream().ptr
            ticket = team.run_request(Coll.ALLREDUCE, algo, Dtype.FLOAT32, Op.SUM, x.data.ptr, y.data.ptr, count, 0,
                                      nchannels, s, MPI._addressof(req), False)
            took = expect_fault(lambda: dm.request_wait(ticket), dm.ERR_TIMEOUT, f'{name}: request_wait')
            try:  # completed by request_wait: MPI's Wait returns at once, with MPI_ERR_OTHER
                req.Wait()
            except MPI.Exception as exc:
                check(exc.Get_error_class() == MPI.ERR_OTHER, f'{name}: MPI Wait error class {exc.Get_error_class()}')
            check(req == MPI.REQUEST_NULL, f'{name}: the request was not freed by MPI Wait')
        else:
            took = expect_fault(lambda: allreduce(team, algo, x, y, nchannels), dm.ERR_TIMEOUT, name)
            if resident_us:  # the warm-up call and the failed one ran in the resident kernel
                check(team.resident_stats[0] >= 2, f'{name}: resident calls {team.resident_stats}')
        check(team.fault == dm.ERR_TIMEOUT, f'{name}: team.fault {team.fault}')
        check(team.fault_origin in range(last), f'{name}: fault origin {team.fault_origin}')
        check(team.missing_peers() == [last], f'{name}: missing peers {team.missing_peers()}')
        late = expect_fault(lambda: allreduce(team, algo, x, y, nchannels), dm.ERR_BROKEN, f'{name}: call after the fault')
        lines.append(f'{name}: the call failed after {took:.2f} s (timeout {timeout_s:g} s); a later one in {late * 1e3:.2f} ms')
        plain.send(None, dest=last)
    else:  # skips the call: waits until the others have their error
        for peer in range(last):
            plain.recv(source=peer)
        check(team.fault == dm.ERR_TIMEOUT, f'{name}: the late rank sees fault {team.fault}')
        check(team.fault_origin in range(last), f'{name}: the late rank sees origin {team.fault_origin}')
        expect_fault(lambda: allreduce(team, algo, x, y, nchannels), dm.ERR_BROKEN, f'{name}: late rank\'s call')
    t0 = time.monotonic()
    team.close()
    lines.append(f'{name}: close took {time.monotonic() - t0:.3f} s')
    plain.Barrier()


def abort_case(name, algo, count, resident_us, nchannels):
    x, y, want = buffers(count)
    team = make_team(resident_us, timeout=600.0)  # only the abort can end the call in time
    allreduce(team, algo, x, y, nchannels)
    check(np.array_equal(cp.asnumpy(y), want), f'{name}: correct call before the abort')
    if rank != last:
        aborted = []
        if rank == 0:
            def abort_later():
                time.sleep(0.5)  # the main thread is in the call by then
                aborted.append(time.monotonic())
                team.abort()
            th = threading.Thread(target=abort_later)
            th.start()
        expect_fault(lambda: allreduce(team, algo, x, y, nchannels), dm.ERR_ABORTED, name)
        done = time.monotonic()
        if rank == 0:
            th.join()
            lines.append(f'{name}: the call ended {(done - aborted[0]) * 1e3:.1f} ms after abort()')
        check(team.fault == dm.ERR_ABORTED and team.fault_origin == 0,
              f'{name}: fault {team.fault} origin {team.fault_origin}')
        check(team.missing_peers() == [last], f'{name}: missing peers {team.missing_peers()}')
        plain.send(None, dest=last)
    else:
        for peer in range(last):
            plain.recv(source=peer)
        check(team.fault == dm.ERR_ABORTED and team.fault_origin == 0,
              f'{name}: the late rank sees fault {team.fault} origin {team.fault_origin}')
    team.close()
    plain.Barrier()


requests.c_completion()  # MPI's generalized requests for run_request
for case in PATHS:
    timeout_case(*case)
timeout_case('request (LL)', Algo.LL, 1000, 0, 0, request=True)
timeout_case('request (direct)', Algo.TWOSHOT, 1 << 20, 0, 2, request=True)
abort_case('abort LL resident', Algo.LL, 1000, RESIDENT_US, 0)
abort_case('abort direct', Algo.TWOSHOT, 4 << 20, 0, 2)

# The process is usable: a new team of each path, an mpigpu communicator, plain CuPy work.
team = make_team(25.0)
for name, algo, count, _res, nchannels in PATHS:
    x, y, want = buffers(count)
    allreduce(team, algo, x, y, nchannels)
    check(np.array_equal(cp.asnumpy(y), want), f'new team, {name}: wrong result')
check(team.fault == 0, f'new team fault {team.fault}')
team.close()
comm = mpigpu.COMM_WORLD.Dup()
x, y, want = buffers(100_000)
comm.Allreduce(x, y)
check(np.array_equal(cp.asnumpy(y), want), 'mpigpu communicator after the faults: wrong Allreduce')
comm.Free()
a = cp.arange(256, dtype=cp.float64).reshape(16, 16)
check(float((a @ a).sum()) == float((cp.asnumpy(a) @ cp.asnumpy(a)).sum()), 'CuPy matmul after the faults')
cp.cuda.Device(dev).synchronize()

for line in lines:
    print(f'rank {rank}: {line}', flush=True)
all_fails = plain.gather(fails, root=0)
if rank == 0:
    flat = [f for fs in all_fails for f in fs]
    for f in flat:
        print('FAIL', f, flush=True)
    print(f'fault_check: {n} ranks, {len(flat)} failed', flush=True)
sys.exit(1 if plain.bcast(any(all_fails) if rank == 0 else None, root=0) else 0)
