"""GPU suite of the hierarchical path in simulated-nodes mode: several ranks per simulated node, node
phases on each node's device team, network phases through host MPI. On one GPU:

    MPIGPU_SHARED_GPU=1 MPIGPU_SIMULATE_NODES=2 mpirun -n 4 python tests/gpu/check_hier.py   # 2 x 2
    MPIGPU_SHARED_GPU=1 MPIGPU_SIMULATE_NODES=3 mpirun -n 6 python tests/gpu/check_hier.py   # 3 x 2
    MPIGPU_SHARED_GPU=1 MPIGPU_SIMULATE_NODES=2 mpirun -n 5 python tests/gpu/check_hier.py   # 3 + 2

(Open MPI: add --allow-run-as-root --oversubscribe.) Every collective x dtype x op (both forced forms
and the model's), roots, in place, sizes below the ranks, odd, and of many pipeline chunks; results
against a NumPy reference (float64 for floats) and bitwise equal on every rank; the forms' results
bitwise equal to each other; stream=, non-blocking and persistent calls; a CUDA graph capture of a
multi-node call raises. recvbuf is poisoned before every call. Exits 1 on any failure; the last line
says '<n> checks, 0 failed' when all passed. --quick: fewer sizes.
"""
import faulthandler
import hashlib
import os
import sys
import traceback
import zlib

import numpy as np
from reference import FLOATS, reduce_ref

import mpigpu
from mpi4py import MPI

import cupy as cp

try:
    import torch
except ImportError:
    torch = None

QUICK = '--quick' in sys.argv
faulthandler.enable()
world = mpigpu.COMM_WORLD
RANK, SIZE = world.Get_rank(), world.Get_size()
cp.cuda.Device(RANK % cp.cuda.runtime.getDeviceCount()).use()
if torch is not None:
    torch.cuda.set_device(RANK % cp.cuda.runtime.getDeviceCount())
config = mpigpu.config
config.hier_chunk_bytes = int(os.environ.get('MPIGPU_HIER_CHUNK_BYTES') or 64 * 1024)  # many chunks

DT = {'bool': np.bool_, 'int8': np.int8, 'uint8': np.uint8, 'int16': np.int16, 'uint16': np.uint16,
      'int32': np.int32, 'uint32': np.uint32, 'int64': np.int64, 'uint64': np.uint64,
      'float16': np.float16, 'float32': np.float32, 'float64': np.float64,
      'complex64': np.complex64, 'complex128': np.complex128}
INTS = [k for k in DT if k.startswith(('int', 'uint'))]
OPS = {k: (['LAND', 'LOR', 'LXOR'] if k == 'bool' else
           ['SUM', 'PROD', 'MAX', 'MIN', 'LAND', 'LOR', 'LXOR', 'BAND', 'BOR', 'BXOR'] if k in INTS else
           ['SUM', 'PROD', 'MAX', 'MIN'] if k in FLOATS else ['SUM', 'PROD']) for k in DT}
FORMS = ('hier', 'hier-rail', 'hier-leader')
failures = []
checks = 0


def gen(rank, count, dtype, op, salt):
    """Rank `rank`'s input, which every rank can rebuild."""
    rng = np.random.default_rng(zlib.crc32(repr((rank, count, dtype, op, salt)).encode()))
    if dtype == 'bool':
        return rng.integers(0, 2, count).astype(np.bool_)
    if dtype in INTS:
        if op in ('BAND', 'BOR', 'BXOR', 'MAX', 'MIN'):
            info = np.iinfo(DT[dtype])
            return rng.integers(info.min, info.max, count, dtype=DT[dtype], endpoint=True)
        return rng.integers(0 if dtype.startswith('u') else -3, 4, count).astype(DT[dtype])
    x = rng.uniform(0.5, 1.5, count) if op == 'PROD' else rng.uniform(-1, 1, count)
    if dtype.startswith('complex'):
        y = rng.uniform(0.5, 1.5, count) if op == 'PROD' else rng.uniform(-1, 1, count)
        return (x + 1j * y).astype(DT[dtype])
    return x.astype(DT[dtype])


def tol(dtype):
    return {'float16': 4e-3, 'float32': 1e-6, 'float64': 1e-14, 'complex64': 1e-6,
            'complex128': 1e-14}.get(dtype, 0) * SIZE * 4


def check(label, got, ref, dtype, same_everywhere=True):
    """Records a failure when `got` differs from `ref` (within the type's tolerance for floats) or,
    with same_everywhere, from another rank's `got`. Collective: every rank calls it (got None: this
    rank has no result)."""
    global checks
    checks += 1
    msg = ''
    if got is not None:
        if dtype in FLOATS or dtype.startswith('complex'):
            g = got.astype(ref.dtype)
            err = np.max(np.abs(g - ref) / np.maximum(np.abs(ref), 1.0)) if ref.size else 0.0
            if not np.all(np.isfinite(g)) or err > tol(dtype):
                msg = f'max rel err {err:.3g}'
        elif not np.array_equal(got, ref.astype(got.dtype)):
            bad = np.flatnonzero(got != ref.astype(got.dtype))
            msg = f'{bad.size} wrong, first at {bad[0]}: got {got[bad[0]]} want {ref[bad[0]]}'
    digest = hashlib.sha1(np.ascontiguousarray(got).tobytes()).hexdigest() if got is not None else None
    digests = world.allgather(digest if same_everywhere else None)
    if same_everywhere and len({d for d in digests if d is not None}) > 1:
        msg += ' results differ between ranks'
    if msg:
        failures.append(f'rank {RANK}: {label}: {msg}')
    return got


def poisoned(host):
    d = cp.asarray(host)
    d.view(cp.uint8).fill(0x7F if host.dtype == np.bool_ else 0xFF)
    return d


def case(coll, dtype, op, count, inplace=False, root=0, mode='blocking'):
    """One call of `coll` on every rank, checked; returns this rank's result (host) or None."""
    n, r = SIZE, RANK
    label = f'{coll} {dtype} {op} count={count} inplace={inplace} root={root} {mode} algo={config.algo}'
    mop = getattr(MPI, op) if op else None
    try:
        if coll in ('Allreduce', 'Reduce'):
            rows = [gen(k, count, dtype, op, 1) for k in range(n)]
            ref = reduce_ref(rows, dtype, op)
            if inplace and (coll == 'Allreduce' or r == root):
                send, recv = MPI.IN_PLACE, cp.asarray(rows[r])
            else:
                send, recv = cp.asarray(rows[r]), poisoned(rows[r])
            args = (send, recv, mop) if coll == 'Allreduce' else (send, recv, mop, root)
            run(coll, args, mode)
            got = cp.asnumpy(recv) if coll == 'Allreduce' or r == root else None
            same = True
        elif coll == 'Reduce_scatter_block':
            rows = [gen(k, count * n, dtype, op, 2) for k in range(n)]
            ref = reduce_ref(rows, dtype, op)[r * count:(r + 1) * count]
            if inplace:
                recv = cp.asarray(rows[r])
                run(coll, (MPI.IN_PLACE, recv, mop), mode)
                got = cp.asnumpy(recv)[:count]
            else:
                recv = poisoned(np.zeros(count, DT[dtype]))
                run(coll, (cp.asarray(rows[r]), recv, mop), mode)
                got = cp.asnumpy(recv)
            same = False
        elif coll == 'Allgather':
            rows = [gen(k, count, dtype, 'SUM', 3) for k in range(n)]
            ref = np.concatenate(rows)
            if inplace:
                host = np.zeros(count * n, DT[dtype])
                host[r * count:(r + 1) * count] = rows[r]
                recv = cp.asarray(host)
                run(coll, (MPI.IN_PLACE, recv), mode)
            else:
                recv = poisoned(np.zeros(count * n, DT[dtype]))
                run(coll, (cp.asarray(rows[r]), recv), mode)
            got, same = cp.asnumpy(recv), True
        else:
            ref = gen(root, count, dtype, 'SUM', 4)
            buf = cp.asarray(ref) if r == root else poisoned(ref)
            run(coll, (buf, root), mode)
            got, same = cp.asnumpy(buf), True
    except Exception:
        failures.append(f'rank {r}: {label}: raised\n{traceback.format_exc()}')
        world.allgather(None)
        return None
    return check(label, got, ref, dtype, same)


def run(coll, args, mode):
    if mode == 'blocking':
        getattr(world, coll)(*args)
    elif mode == 'nonblocking':
        getattr(world, 'I' + coll[0].lower() + coll[1:])(*args).Wait()
    elif mode == 'persistent':
        req = getattr(world, coll + '_init')(*args)
        for _ in range(2):  # the same data twice: the second round must give the same result
            req.Start()
            req.Wait()
        req.Free()
    else:  # stream=: enqueued after the stream's work, the stream held until it is done. A blocking
        # stream: the inputs and the poisoned output were written on the legacy default stream, which
        # a non-blocking stream (and so a call ordered after one) would not wait for
        s = cp.cuda.Stream()
        with s:
            getattr(world, coll)(*args, stream=s.ptr)
        s.synchronize()


def section(title):
    if RANK == 0:
        print(f'--- {title}', flush=True)


# ---- setup -----------------------------------------------------------------------------------------
x = cp.ones(4, cp.float32)
world.Allreduce(MPI.IN_PLACE, x)
status = world.engine_status()
if RANK == 0:
    print('engine:', status, flush=True)
if not status.startswith('hierarchical'):
    failures.append(f'rank {RANK}: engine_status() is {status!r}, not hierarchical (MPIGPU_SIMULATE_NODES?)')
# a node of one rank has no node phase to run: its engine is that rank alone
alone = world.Get_size() == int(os.environ.get('MPIGPU_SIMULATE_NODES', '0') or 0)
if f"node engine: {'one rank' if alone else 'device engine'}" not in status:
    failures.append(f'rank {RANK}: the node phases are not on the expected engine: {status!r}')

sizes = (1, SIZE - 1, 1001) if QUICK else (1, SIZE - 1, 1001, 100003)

section('every dtype x op, each form')
for form in FORMS:
    config.algo = form
    for dtype in DT:
        for op in OPS[dtype]:
            for coll in ('Allreduce', 'Reduce_scatter_block', 'Reduce'):
                case(coll, dtype, op, 1001, root=SIZE - 1 if coll == 'Reduce' else 0)
        case('Allgather', dtype, None, 1001)
        case('Bcast', dtype, None, 1001, root=SIZE // 2)

section('sizes x in place x roots')
for form in FORMS:
    config.algo = form
    for count in sizes:
        for dtype, op in (('float32', 'SUM'), ('float16', 'SUM'), ('int64', 'BXOR')):
            for inplace in (False, True):
                case('Allreduce', dtype, op, count, inplace)
                case('Reduce_scatter_block', dtype, op, count, inplace)
                case('Allgather', dtype, None, count, inplace)
                for root in range(SIZE):
                    case('Reduce', dtype, op, count, inplace, root)
            for root in range(SIZE):
                case('Bcast', dtype, None, count, root=root)

section('the forms give the same bits')
for dtype, op in (('float32', 'SUM'), ('float16', 'SUM'), ('float64', 'PROD')):
    for coll in ('Allreduce', 'Reduce_scatter_block', 'Reduce'):
        results = []
        for form in FORMS:
            config.algo = form
            results.append(case(coll, dtype, op, 100003 if not QUICK else 30001))
        global_same = world.allgather(all(r is None or r.tobytes() == results[0].tobytes() for r in results)
                                      if results[0] is not None else True)
        checks += 1
        if not all(global_same):
            failures.append(f'rank {RANK}: {coll} {dtype} {op}: rail, leader and the model\'s form differ')

section('stream=, non-blocking, persistent')
config.algo = 'hier'
for mode in ('stream', 'nonblocking', 'persistent'):
    for dtype, op in (('float32', 'SUM'), ('float16', 'MAX')):
        for count in (SIZE - 1, 100003):
            case('Allreduce', dtype, op, count, mode=mode)
            case('Reduce_scatter_block', dtype, op, count, mode=mode)
            case('Reduce', dtype, op, count, root=SIZE - 1, mode=mode)
            case('Allgather', dtype, None, count, mode=mode)
            case('Bcast', dtype, None, count, root=1 % SIZE, mode=mode)

section('stream= ordering: producer and consumer kernels on the stream, no host synchronization')
s = cp.cuda.Stream(non_blocking=True)
with s:  # CuPy's kernels loaded first: a first load while a stream waits for the host may wait for it
    warm = cp.full(8, 1.0, cp.float32) * 2
    cp.asnumpy(warm)
s.synchronize()
with s:
    b = cp.empty(200001, cp.float32)  # allocated before: an allocation may wait for the whole GPU
    for it in range(5):
        a = cp.full(200001, float(RANK + it), cp.float32)  # written by a kernel queued on s
        world.Allreduce(MPI.IN_PLACE, a, stream=s.ptr)
        cp.multiply(a, 2, out=b)  # reads the result on s
        got = cp.asnumpy(b)
        want = np.full(200001, 2 * sum(k + it for k in range(SIZE)), np.float32)
        check(f'stream= ordering {it}', got, want.astype(np.float64), 'float32')
s.synchronize()

section('calls on the same buffers: recorded once, replayed (MPIGPU_HIER_GRAPHS)')


def replayed_case(coll, dtype, op, count, bufs, it):
    """One call of `coll` on the device buffers of `bufs` (made on the first call, reused after) with
    inputs of round `it` written into them; blocking for rounds 0-2 (from round 2 on the fast path's
    replay), stream= after. Checked as case() checks."""
    n, r, root = SIZE, RANK, SIZE - 1
    mop = getattr(MPI, op) if op else None
    if coll == 'Bcast':
        ref = gen(root, count, dtype, 'SUM', 10 + it)
        if not bufs:
            bufs.append(cp.empty(count, DT[dtype]))
        buf = bufs[0]
        if r == root:
            buf.set(ref)
        else:
            buf.view(cp.uint8).fill(0xFF)
        args, out = (buf, root), buf
    else:
        scount = count * n if coll == 'Reduce_scatter_block' else count
        rcount = count * n if coll == 'Allgather' else count
        rows = [gen(k, scount, dtype, op or 'SUM', 10 + it) for k in range(n)]
        ref = (np.concatenate(rows) if coll == 'Allgather' else
               reduce_ref(rows, dtype, op)[r * count:(r + 1) * count] if coll == 'Reduce_scatter_block' else
               reduce_ref(rows, dtype, op))
        if not bufs:
            bufs.extend([cp.empty(scount, DT[dtype]), cp.empty(rcount, DT[dtype])])
        send, out = bufs
        send.set(rows[r])
        out.view(cp.uint8).fill(0xFF)
        args = (send, out, mop) if coll != 'Allgather' else (send, out)
        if coll == 'Reduce':
            args += (root,)
    run(coll, args, 'blocking' if it < 3 else 'stream')
    mine = coll != 'Reduce' or r == root
    check(f'{coll} {dtype} {op} count={count} round {it} algo={config.algo}', cp.asnumpy(out) if mine else None,
          ref, dtype, coll != 'Reduce_scatter_block')


for form in FORMS:
    config.algo = form
    for count in (SIZE - 1, 1001, 100003):
        for coll, dtype, op in (('Allreduce', 'float32', 'SUM'), ('Reduce', 'int64', 'BXOR'),
                                ('Reduce_scatter_block', 'float16', 'SUM'), ('Allgather', 'float64', None),
                                ('Bcast', 'int32', None)):
            bufs = []
            for it in range(5):
                replayed_case(coll, dtype, op, count, bufs, it)
from mpigpu._state import comm_state as _state  # noqa: E402
from mpigpu._paths.hier.state import HierState  # noqa: E402
hs = _state.state_of(world)._owned[HierState]
graphs = 0 if hs.replays is None else sum(1 for v in hs.replays.graphs.values() if v is not None)
checks += 1
if config.hier_graphs and hs.dnet is not None and not graphs:
    failures.append(f'rank {RANK}: no call was recorded for replay (replays: {hs.replays is not None})')
if RANK == 0:
    print(f'recorded calls on rank 0: {graphs}', flush=True)

section('CUDA graph capture of a multi-node call raises')
g = cp.cuda.Stream(non_blocking=True)
y = cp.ones(16, cp.float32)
checks += 1
with g:
    g.begin_capture()
    try:
        world.Allreduce(MPI.IN_PLACE, y, stream=g.ptr)
        failures.append(f'rank {RANK}: a captured multi-node call did not raise')
    except mpigpu.Error as exc:
        if 'CUDA graph' not in str(exc):
            failures.append(f'rank {RANK}: capture error does not say why: {exc}')
    finally:
        g.end_capture()
world.Barrier()

if torch is not None:
    section('bfloat16 (PyTorch)')
    for form in FORMS:
        config.algo = form
        for op in ('SUM', 'MAX'):
            rows = [gen(k, 30001, 'float32', op, 5) for k in range(SIZE)]
            bf = [torch.from_numpy(r).to(torch.bfloat16) for r in rows]
            ref = reduce_ref([b.float().numpy().astype(np.float64) for b in bf], 'float64', op)
            t = bf[RANK].cuda()
            out = torch.full_like(t, float('nan'))
            world.Allreduce(t, out, getattr(MPI, op))
            got = out.float().cpu().numpy()
            err = np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1.0))
            if err > 3e-2 * SIZE:
                failures.append(f'rank {RANK}: bfloat16 {op} {form}: max rel err {err:.3g}')
            check(f'bfloat16 {op} {form} everywhere', got.astype(np.float64), got.astype(np.float64), 'float64')

world.Barrier()
nfail = world.allreduce(len(failures))
for f in failures[:20]:
    print(f, flush=True)
if RANK == 0:
    print(f'hierarchical GPU suite, {SIZE} ranks: {checks} checks, {nfail} failed', flush=True)
sys.exit(1 if nfail else 0)
