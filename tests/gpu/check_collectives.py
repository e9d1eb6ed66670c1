"""GPU suite, one rank per GPU: `mpirun -n N python tests/gpu/check_collectives.py [--quick]`.

Every collective x dtype x op x algorithm x size class (0, < ranks, odd, not a multiple of the
vector width or chunk, unaligned offsets), in place and out of place, non-zero roots, sub-
communicators, two communicators alternately, back-to-back calls; CuPy and PyTorch buffers; the
engine and the staged path. recvbuf is poisoned before every call; results are checked against a
NumPy reference (float64 for floats) and for bitwise equality across ranks. Exits 1 on any failure.
"""
import faulthandler
import hashlib
import sys
import time
import traceback
import zlib

import numpy as np

import mpigpu
from mpi4py import MPI
from mpigpu._ext._device import COLLS
from mpigpu._types import ALGO, CODE

try:
    import cupy as cp
except ImportError:
    cp = None
try:
    import torch
except ImportError:
    torch = None

import wide_steps  # noqa: E402 (this directory, beside the script)

QUICK = '--quick' in sys.argv
SPLIT_STEPS = mpigpu.config.split_steps
RESIDENT_US = mpigpu.config.resident_us
faulthandler.enable()
world = mpigpu.COMM_WORLD
RANK, SIZE = world.Get_rank(), world.Get_size()
ndev = cp.cuda.runtime.getDeviceCount()
DEV = RANK % ndev
cp.cuda.Device(DEV).use()
if torch is not None:
    torch.cuda.set_device(DEV)

DT = {'bool': np.bool_, 'int8': np.int8, 'uint8': np.uint8, 'int16': np.int16, 'uint16': np.uint16,
      'int32': np.int32, 'uint32': np.uint32, 'int64': np.int64, 'uint64': np.uint64,
      'float16': np.float16, 'float32': np.float32, 'float64': np.float64,
      'complex64': np.complex64, 'complex128': np.complex128}
INTS = [k for k in DT if k.startswith(('int', 'uint'))]
FLOATS = ['float16', 'float32', 'float64']
OPS_FOR = {}
for name in DT:
    if name == 'bool':
        OPS_FOR[name] = ['LAND', 'LOR', 'LXOR']
    elif name in INTS:
        OPS_FOR[name] = ['SUM', 'PROD', 'MAX', 'MIN', 'LAND', 'LOR', 'LXOR', 'BAND', 'BOR', 'BXOR']
    elif name in FLOATS:
        OPS_FOR[name] = ['SUM', 'PROD', 'MAX', 'MIN']
    else:
        OPS_FOR[name] = ['SUM', 'PROD']

failures = []
checks = 0


def gen(rank, count, dtype, op, salt):
    """Deterministic input of `rank`: every rank can rebuild every other rank's input."""
    # crc32, not hash(): string hashing differs between processes, and every rank must rebuild
    # every other rank's input bit for bit.
    rng = np.random.default_rng(zlib.crc32(repr((rank, count, dtype, op, salt)).encode()))
    if dtype == 'bool':
        return rng.integers(0, 2, count).astype(np.bool_)
    if dtype in INTS:
        lo, hi = (0, 4) if dtype.startswith('u') else (-3, 4)
        if op in ('BAND', 'BOR', 'BXOR', 'MAX', 'MIN'):
            info = np.iinfo(DT[dtype])
            return rng.integers(info.min, info.max, count, dtype=DT[dtype], endpoint=True)
        return rng.integers(lo, hi, count).astype(DT[dtype])
    if op == 'PROD':
        x = rng.uniform(0.5, 1.5, count)
    else:
        x = rng.uniform(-1, 1, count)
    if dtype.startswith('complex'):
        y = rng.uniform(0.5, 1.5, count) if op == 'PROD' else rng.uniform(-1, 1, count)
        return (x + 1j * y).astype(DT[dtype])
    return x.astype(DT[dtype])


def reduce_ref(rows, dtype, op):
    if dtype in FLOATS or dtype.startswith('complex'):
        acc = rows[0].astype(np.complex128 if dtype.startswith('complex') else np.float64)
        for r in rows[1:]:
            r = r.astype(acc.dtype)
            acc = acc + r if op == 'SUM' else acc * r if op == 'PROD' else np.maximum(acc, r) if op == 'MAX' else np.minimum(acc, r)
        return acc
    acc = rows[0].copy()
    with np.errstate(over='ignore'):
        for r in rows[1:]:
            if op == 'SUM':
                acc = acc + r
            elif op == 'PROD':
                acc = acc * r
            elif op == 'MAX':
                acc = np.maximum(acc, r)
            elif op == 'MIN':
                acc = np.minimum(acc, r)
            elif op in ('LAND', 'LOR', 'LXOR'):
                a, b = acc != 0, r != 0
                acc = (a & b if op == 'LAND' else a | b if op == 'LOR' else a ^ b).astype(rows[0].dtype)
            elif op == 'BAND':
                acc = acc & r
            elif op == 'BOR':
                acc = acc | r
            else:
                acc = acc ^ r
    return acc


def tol(dtype, n):
    return {'float16': 4e-3 * n, 'float32': 1e-6 * n, 'float64': 1e-14 * n,
            'complex64': 1e-6 * n, 'complex128': 1e-14 * n}.get(dtype, 0)


def compare(label, got, ref, dtype, comm):
    global checks
    checks += 1
    ok = True
    msg = ''
    if dtype in FLOATS or dtype.startswith('complex'):
        g = got.astype(ref.dtype)
        if not np.all(np.isfinite(g)):
            ok, msg = False, 'non-finite (unwritten?) elements'
        else:
            scale = np.maximum(np.abs(ref), 1.0)
            err = np.max(np.abs(g - ref) / scale) if ref.size else 0.0
            if err > tol(dtype, comm.Get_size()) * 4:
                ok, msg = False, f'max rel err {err:.3g}'
    elif not np.array_equal(got, ref):
        bad = np.flatnonzero(got != ref)
        ok, msg = False, f'{bad.size} wrong, first at {bad[0]}: got {got[bad[0]]} want {ref[bad[0]]}'
    # bitwise equality across ranks (every rank holds the same result for these calls)
    digest = hashlib.sha1(np.ascontiguousarray(got).tobytes()).hexdigest()
    return ok, msg, digest


def record(label, ok, msg):
    if not ok:
        failures.append(f'rank {RANK}: {label}: {msg}')


def xp_array(lib, host):
    if lib == 'cupy':
        return cp.asarray(host)
    return torch.from_numpy(host).cuda()


def to_host(lib, dev):
    if lib == 'cupy':
        return cp.asnumpy(dev)
    return dev.cpu().numpy()


def poison(lib, dev):
    if lib == 'cupy':
        dev.view(cp.uint8).fill(0xFF) if dev.dtype != cp.bool_ else dev.view(cp.uint8).fill(0x7F)
    else:
        dev.view(torch.uint8).fill_(0xFF if dev.dtype != torch.bool else 0x7F)


def offset_view(lib, host, offset):
    """A device array whose data starts `offset` elements into a larger allocation (unaligned). A
    half-integer offset (complex arrays, CuPy) starts one component further, so a complex128 array
    sits 8 bytes off a 16-byte boundary: aligned as C aligns it, not to its own size."""
    if offset == int(offset):
        big = np.zeros(host.size + int(offset) + 5, dtype=host.dtype)
        big[int(offset):int(offset) + host.size] = host
        dev = xp_array(lib, big)
        return dev[int(offset):int(offset) + host.size]
    assert lib == 'cupy' and host.dtype.kind == 'c', 'half-element offsets are for complex CuPy arrays'
    part = np.float32 if host.dtype == np.complex64 else np.float64
    start = int(2 * offset)  # in components
    comps = np.zeros(2 * host.size + start + 5, dtype=part)
    comps[start:start + 2 * host.size] = host.view(part)
    dev = xp_array(lib, comps)[start:start + 2 * host.size].view(host.dtype)
    assert dev.data.ptr % dev.itemsize == dev.itemsize // 2
    return dev


def run_case(comm, coll, dtype, op, count, inplace=False, root=0, offset=0, lib='cupy', same_digest=True):
    n, r = comm.Get_size(), comm.Get_rank()
    label = f'{coll} n={n} {lib} {dtype} {op} count={count} inplace={inplace} root={root} off={offset} algo={mpigpu.config.algo}'
    mop = getattr(MPI, op) if op else None
    try:
        if coll == 'Allreduce' or coll == 'Reduce':
            inputs = [gen(k, count, dtype, op, 1) for k in range(n)]
            ref = reduce_ref(inputs, dtype, op)
            if inplace and (coll == 'Allreduce' or r == root):
                recv = offset_view(lib, inputs[r], offset)
                send = MPI.IN_PLACE
            else:
                send = offset_view(lib, inputs[r], offset)
                recv = offset_view(lib, np.zeros(count, DT[dtype]), offset)
                poison(lib, recv)
            if coll == 'Allreduce':
                comm.Allreduce(send, recv, mop)
            else:
                comm.Reduce(send, recv, mop, root=root)
            if coll == 'Reduce' and r != root:
                got = None
            else:
                got = to_host(lib, recv)
        elif coll == 'Reduce_scatter_block':
            inputs = [gen(k, count * n, dtype, op, 2) for k in range(n)]
            ref = reduce_ref(inputs, dtype, op)[r * count:(r + 1) * count]
            if inplace:
                recv = offset_view(lib, inputs[r], offset)
                comm.Reduce_scatter_block(MPI.IN_PLACE, recv, mop)
                got = to_host(lib, recv)[:count]
            else:
                send = offset_view(lib, inputs[r], offset)
                recv = offset_view(lib, np.zeros(count, DT[dtype]), offset)
                poison(lib, recv)
                comm.Reduce_scatter_block(send, recv, mop)
                got = to_host(lib, recv)
            same_digest = False
        elif coll == 'Allgather':
            inputs = [gen(k, count, dtype, 'SUM', 3) for k in range(n)]
            ref = np.concatenate(inputs)
            if inplace:
                host = np.zeros(count * n, DT[dtype])
                host[r * count:(r + 1) * count] = inputs[r]
                recv = offset_view(lib, host, offset)
                comm.Allgather(MPI.IN_PLACE, recv)
            else:
                send = offset_view(lib, inputs[r], offset)
                recv = offset_view(lib, np.zeros(count * n, DT[dtype]), offset)
                poison(lib, recv)
                comm.Allgather(send, recv)
            got = to_host(lib, recv)
        elif coll == 'Bcast':
            data = gen(root, count, dtype, 'SUM', 4)
            ref = data
            if r == root:
                buf = offset_view(lib, data, offset)
            else:
                buf = offset_view(lib, np.zeros(count, DT[dtype]), offset)
                poison(lib, buf)
            comm.Bcast(buf, root=root)
            got = to_host(lib, buf)
        else:
            raise ValueError(coll)
    except Exception:
        record(label, False, 'raised\n' + traceback.format_exc())
        comm.allgather(None)
        return
    if got is None:
        comm.allgather(None)
        return
    ok, msg, digest = compare(label, got, ref if not (dtype in INTS or dtype == 'bool') else ref.astype(got.dtype), dtype, comm)
    record(label, ok, msg)
    digests = comm.allgather(digest if same_digest else None)
    if same_digest:
        roots_only = [d for d in digests if d is not None]
        if len(set(roots_only)) > 1:
            record(label, False, 'results differ between ranks (not bitwise identical)')


def sizes(n):
    base = [0, 1, n - 1 if n > 1 else 1, 7, 1003, 4096 + 3, 65537]
    return base if QUICK else base + [1 << 20 | 13, (8 << 20) // 4 + 5]


def sweep(comm, algos, libs=('cupy',)):
    n = comm.Get_size()
    for algo in algos:
        mpigpu.config.algo = algo
        # every (dtype, op) pair: Allreduce, two sizes, in and out of place
        for dtype, ops in OPS_FOR.items():
            for op in ops:
                for count in (5, 70001):
                    run_case(comm, 'Allreduce', dtype, op, count, inplace=(count == 5))
        # every (dtype, op) pair on the other reductions; every dtype on the copies
        if algo == 'auto':
            for dtype, ops in OPS_FOR.items():
                for op in ops:
                    run_case(comm, 'Reduce', dtype, op, 1003, root=n - 1)
                    run_case(comm, 'Reduce_scatter_block', dtype, op, 1003)
                run_case(comm, 'Bcast', dtype, 'SUM', 1003, root=n - 1)
                run_case(comm, 'Allgather', dtype, 'SUM', 1003)
            if torch is not None:
                for dtype, ops in OPS_FOR.items():
                    if dtype in ('uint16', 'uint32', 'uint64'):
                        continue  # PyTorch has these types with few operations
                    for op in ops:
                        run_case(comm, 'Allreduce', dtype, op, 1003, lib='torch')
                    run_case(comm, 'Reduce_scatter_block', dtype, ops[0], 1003, lib='torch')
                    run_case(comm, 'Reduce', dtype, ops[0], 1003, lib='torch', root=n - 1)
                    run_case(comm, 'Bcast', dtype, 'SUM', 1003, lib='torch', root=n - 1)
                    run_case(comm, 'Allgather', dtype, 'SUM', 1003, lib='torch')
        # size classes and shapes for every collective
        for count in sizes(n):
            for coll in ('Allreduce', 'Reduce', 'Reduce_scatter_block', 'Allgather', 'Bcast'):
                for dtype, op in (('float32', 'SUM'), ('int32', 'MAX'), ('float16', 'SUM')):
                    if coll in ('Allgather', 'Bcast') and op != 'SUM':
                        continue
                    for inplace in (False, True):
                        if coll == 'Bcast' and inplace:
                            continue
                        root = (n - 1) if coll in ('Reduce', 'Bcast') else 0
                        off = 3 if count % 2 else 0
                        run_case(comm, coll, dtype, op, count, inplace=inplace, root=root, offset=off)
        # complex arrays aligned only like their component (one component off): products and copies
        for dtype in ('complex64', 'complex128'):
            for count in (5, 1003, 70001):
                for coll in ('Allreduce', 'Reduce', 'Reduce_scatter_block', 'Allgather', 'Bcast'):
                    op = 'PROD' if coll in ('Allreduce', 'Reduce', 'Reduce_scatter_block') else 'SUM'
                    run_case(comm, coll, dtype, op, count, inplace=coll != 'Bcast' and count == 5,
                             root=n - 1, offset=1.5)
        for root in range(n):
            run_case(comm, 'Bcast', 'float64', 'SUM', 300007, root=root)
            run_case(comm, 'Reduce', 'float32', 'SUM', 300007, root=root)
        if torch is not None:
            for dtype, op in (('float32', 'SUM'), ('bool', 'LOR'), ('int64', 'MAX'), ('float16', 'SUM')):
                run_case(comm, 'Allreduce', dtype, op, 100003, lib='torch')
            run_case(comm, 'Bcast', 'float32', 'SUM', 100003, lib='torch', root=n - 1)
            run_case(comm, 'Allgather', 'int8', 'SUM', 1001, lib='torch')
            run_case(comm, 'Reduce_scatter_block', 'float64', 'SUM', 5001, lib='torch')
    mpigpu.config.algo = 'auto'


def bf16_cases(comm):
    """bfloat16 through PyTorch (CuPy has no bfloat16)."""
    if torch is None:
        return
    n, r = comm.Get_size(), comm.Get_rank()
    for count in (1, 1001, 300003):
        for op in ('SUM', 'MAX'):
            rows = [torch.from_numpy(gen(k, count, 'float32', op, 5)).to(torch.bfloat16) for k in range(n)]
            ref = rows[0].float().double()
            for x in rows[1:]:
                ref = ref + x.double() if op == 'SUM' else torch.maximum(ref, x.double())
            x = rows[r].cuda()
            y = torch.full_like(x, float('nan'))
            label = f'Allreduce bf16 {op} count={count} n={n}'
            try:
                comm.Allreduce(x, y, getattr(MPI, op))
                got = y.double().cpu()
                err = ((got - ref).abs() / ref.abs().clamp(min=1)).max().item()
                record(label, err < 1e-2 * n, f'max rel err {err}')
                d = hashlib.sha1(y.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
                if len(set(comm.allgather(d))) > 1:
                    record(label, False, 'results differ between ranks')
            except Exception:
                record(label, False, traceback.format_exc())
                comm.allgather(None)


def error_cases(comm):
    """Rejected calls raise mpigpu.Error naming call/arg/rank and leave recvbuf untouched."""
    r = comm.Get_rank()
    x = cp.ones(10, cp.float32)
    y = cp.full(10, 7, cp.float32)
    cases = [
        ('BAND on float', lambda: comm.Allreduce(x, y, MPI.BAND), 'op'),
        ('count mismatch', lambda: comm.Allreduce(x, cp.full(9, 7, cp.float32)), 'recvbuf'),
        ('non-contiguous', lambda: comm.Allreduce(cp.ones(20, cp.float32)[::2], y), 'sendbuf'),
        ('host/device mixed', lambda: comm.Allreduce(np.ones(10, np.float32), y), 'recvbuf'),
        ('type mismatch', lambda: comm.Allreduce(cp.ones(10, cp.float64), y), 'recvbuf'),
        ('bad root', lambda: comm.Bcast(y, root=comm.Get_size()), 'root'),
    ]
    for label, fn, arg in cases:
        try:
            fn()
            record(f'error case {label}', False, 'did not raise')
        except mpigpu.Error as e:
            record(f'error case {label}', e.arg == arg and f'rank {r}' in str(e), f'wrong message: {e}')
        record(f'error case {label} leaves recvbuf', bool((y == 7).all()), 'recvbuf changed')


def back_to_back(comm):
    """Many calls with no host work between them, two communicators alternately."""
    other = comm.Dup()
    x = cp.arange(1 << 16, dtype=cp.float32) * (comm.Get_rank() + 1)
    total = sum(range(1, comm.Get_size() + 1))
    for i in range(200):
        c = comm if i % 2 else other
        y = cp.empty_like(x)
        c.Allreduce(x, y)
        if i % 50 == 0:
            record('back-to-back', bool(cp.allclose(y, cp.arange(1 << 16, dtype=cp.float32) * total)), f'iteration {i}')
    s = cp.cuda.Stream(non_blocking=True)
    with s:  # producer on a non-default stream: the call must order itself after it
        for i in range(20):
            z = x * 2
            w = cp.empty_like(z)
            comm.Allreduce(z, w)
            record('stream-ordered', bool(cp.allclose(w, cp.arange(1 << 16, dtype=cp.float32) * 2 * total)), f'it {i}')
    other.Free()
    mixed_protocols(comm)


def mixed_protocols(comm):
    """Calls of every protocol (LL, LL128 one- and two-shot, direct, ring) back to back on one stream with
    no host synchronization between them: each protocol's reuse of its buffers without acks must hold
    across calls of the others, and the Bcasts (two in a row, roots changing, whose root receives
    nothing) must make the next call wait for its peers' acks; Reduces whose non-roots own empty
    shards must still hear from their peers before reusing the areas."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = sum(range(1, n + 1))
    counts = [256, 1 << 16, (1 << 19) + 7, 5, (1 << 20) + 3, 3 << 20]
    base = {c: cp.arange(c, dtype=cp.float32) % 97 for c in counts}
    s = cp.cuda.Stream(non_blocking=True)
    pending = []
    with s:
        for i in range(48):
            c = counts[i % len(counts)]
            if i % 4 == 3:  # an Allgather and a Reduce_scatter_block of the same elements between them
                g = cp.empty(c * n, cp.float32)
                comm.Allgather(base[c] * (r + 1), g, stream=s)
                pending.append(('Allgather', c, g, cp.concatenate([base[c] * (k + 1) for k in range(n)])))
                rs = cp.empty(c, cp.float32)
                comm.Reduce_scatter_block(cp.tile(base[c], n) * (r + 1), rs, stream=s)
                pending.append(('Reduce_scatter_block', c, rs, base[c] * total))
            if i % 3 == 1:  # two Bcasts in a row, other roots each time
                for root in (i % n, (i + 1) % n):
                    b = base[c] * (r + 1) if r == root else cp.full(c, -1, cp.float32)
                    comm.Bcast(b, root=root, stream=s)
                    pending.append((f'Bcast root={root}', c, b, base[c] * (root + 1)))
            if i % 5 == 2:  # the ring and chain forms, which share the direct kernel's counters
                mpigpu.config.algo = 'ring'
                y = cp.empty(c, cp.float32)
                comm.Allreduce(base[c] * (r + 1), y, stream=s)
                pending.append(('ring Allreduce', c, y, base[c] * total))
                root = i % n
                b = base[c] * (r + 1) if r == root else cp.full(c, -1, cp.float32)
                comm.Bcast(b, root=root, stream=s)
                pending.append((f'chain Bcast root={root}', c, b, base[c] * (root + 1)))
                root = (i + 1) % n
                rd = cp.full(c, -1, cp.float32) if r == root else None
                comm.Reduce(base[c] * (r + 1), rd, root=root, stream=s)
                if r == root:
                    pending.append((f'chain Reduce root={root}', c, rd, base[c] * total))
                mpigpu.config.algo = 'auto'
            if i % 2 == 0:  # Reduce as the LL128 two-shot on 5 elements: most ranks own an empty shard
                mpigpu.config.algo = 'll128-twoshot'
                root = (i // 2) % n
                rd = cp.full(5, -1, cp.float32) if r == root else None
                comm.Reduce(base[5] * (r + 1), rd, root=root, stream=s)
                if r == root:
                    pending.append((f'll128-twoshot Reduce root={root}', 5, rd, base[5] * total))
                mpigpu.config.algo = 'auto'
            y = cp.empty(c, cp.float32)
            comm.Allreduce(base[c] * (r + 1), y, stream=s)
            pending.append(('Allreduce', c, y, base[c] * total))
    s.synchronize()
    for i, (name, c, got, want) in enumerate(pending):
        record(f'mixed protocols back to back: {name} count={c} #{i}', bool(cp.array_equal(got, want)), 'wrong result')


_SPIN = None


def spin_stream(usec):
    """Keeps the current stream busy for about `usec` microseconds (one thread spinning on the clock)."""
    global _SPIN
    if _SPIN is None:
        _SPIN = cp.RawKernel(r'''
extern "C" __global__ void spin(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}''', 'spin')
    _SPIN((1,), (1,), (np.int64(usec * 1000),))


def resident_stats(comm):
    return comm._mg_state.team.resident_stats


def recent_call(comm):
    """A blocking call on every rank, so that the next call does not come alone: a call after a gap
    longer than MPIGPU_RESIDENT_US since the last one launches (resident.cu), and the checks between
    calls can take longer than the second these tests give (CuPy compiles a kernel at its first use)."""
    global _RECENT
    if _RECENT is None:
        _RECENT = (cp.ones(4, cp.float32), cp.empty(4, cp.float32))
    cp.cuda.get_current_stream().synchronize()
    comm.Allreduce(*_RECENT)


_RECENT = None


def resident_kernel(world):
    """Blocking LL calls in the resident kernel (resident_kernel.cuh): every (dtype, op) pair through it,
    calls back to back with no launch between them, ranks whose call is launched (work queued on
    their stream) meeting ranks whose call runs resident, instances that idle out and are launched
    again (resident_linger), a direct kernel between resident calls, an in-flight stream= call before a
    blocking one, calls that come alone, and a communicator freed while its instance runs. The
    counters prove which path ran."""
    n, r = world.Get_size(), world.Get_rank()
    total = n * (n + 1) // 2
    default = mpigpu.config.resident_us
    mpigpu.config.resident_us = 1e6  # a second: no call here comes alone (but instances end between checks)
    comm = world.Dup()
    world.Barrier()
    comm.Allreduce(cp.ones(4, cp.float32), cp.empty(4, cp.float32))  # sets the team up
    calls0 = resident_stats(comm)[0]
    # every (dtype, op) pair, every LL collective (Reduce runs as the LL Allreduce), in and out of place
    cases = 0
    for dtype, ops in OPS_FOR.items():
        for op in ops:
            run_case(comm, 'Allreduce', dtype, op, 37, inplace=op == ops[0])
            run_case(comm, 'Reduce_scatter_block', dtype, op, 33, inplace=op == ops[-1])
            run_case(comm, 'Reduce', dtype, op, 29, root=n - 1, offset=3)
            cases += 3
        run_case(comm, 'Allgather', dtype, 'SUM', 31, inplace=dtype == 'float32')
        cases += 1
    run_case(comm, 'Allreduce', 'complex128', 'PROD', 5, offset=1.5)
    mpigpu.config.algo = 'll'  # the largest piece LL takes (64 KiB): two passes of the grid
    run_case(comm, 'Allreduce', 'float32', 'SUM', (64 << 10) // 4)
    run_case(comm, 'Allgather', 'int8', 'SUM', (64 << 10) - 3)
    mpigpu.config.algo = 'auto'
    # run_case's poisoning fill may still run on the stream at the call, which then launches, and a
    # call after a check that compiled a CuPy kernel (over a second, on a cold cache) comes alone
    record('resident path ran the LL calls', resident_stats(comm)[0] - calls0 >= cases // 2,
           f'{resident_stats(comm)[0] - calls0} resident calls, {cases} cases')
    # back to back: no host work between the calls but the blocking calls themselves
    x = [cp.full(256, k + r, cp.float32) for k in range(64)]
    y = [cp.empty(256, cp.float32) for _ in range(64)]
    recent_call(comm)
    before = resident_stats(comm)
    for k in range(64):
        comm.Allreduce(x[k], y[k])
    after = resident_stats(comm)
    for k in range(64):
        record('resident back to back', bool((y[k] == n * k + total - n).all()), f'call {k}')
    # a pause of the host longer than the instance's wait (~10 us here) launches another
    record('resident instance stayed up back to back',
           after[0] - before[0] == 64 and after[2] == before[2] and after[1] - before[1] <= 2,
           f'(resident calls, launches, alone) {before} -> {after}')
    resident_linger(comm)
    resident_ll128(comm)
    resident_block_counts(comm)
    # work queued on half the ranks' streams: those launch (after it), the others run resident
    for k in range(4):
        busy = (r + k) % 2 == 0
        recent_call(comm)
        if busy:
            spin_stream(300)
        a = cp.full(1000, r + 1, cp.float32)  # produced after the spin on this stream
        b = cp.empty(1000, cp.float32)
        if not busy:
            cp.cuda.get_current_stream().synchronize()
        idle = cp.cuda.get_current_stream().done
        before = resident_stats(comm)
        comm.Allreduce(a, b)
        after = resident_stats(comm)
        ran = after[0] - before[0]
        record(f'resident/launched mix {k}', bool((b == total).all()), 'wrong result')
        record(f'resident/launched mix {k} path', ran == (0 if busy else 1),
               f'busy={busy} stream idle={idle} (resident calls, launches, alone) {before} -> {after}')
    # a stream= call in flight, then a blocking call on another stream that reads its output
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        spin_stream(300)
        a = cp.full(500, r + 1, cp.float32)
        b = cp.empty(500, cp.float32)
        comm.Allreduce(a, b, stream=s)
    c = cp.empty(500, cp.float32)
    comm.Allreduce(b, c)
    record('blocking after stream=', bool((c == n * total).all()), 'not ordered after the in-flight call')
    s.synchronize()
    # a direct kernel between resident calls (it stops the instance first)
    big = cp.full((32 << 20) // 4, r + 1, cp.float32)
    for k in range(3):
        a = cp.full(100, k + r, cp.float32)
        b = cp.empty(100, cp.float32)
        comm.Allreduce(a, b)
        comm.Allreduce(MPI.IN_PLACE, big)
        record(f'resident then direct {k}', bool((b == n * k + total - n).all()), 'small call')
    record('resident then direct: large', bool((big == total * n ** 2).all()), 'large calls')
    comm.Free()  # with its instance running
    # calls that come alone (after a gap longer than MPIGPU_RESIDENT_US, here 1 ms) launch, and no
    # instance starts for them; the next call soon after runs resident again
    mpigpu.config.resident_us = 1000
    short = world.Dup()
    short.Allreduce(cp.ones(4, cp.float32), cp.empty(4, cp.float32))
    outs = []
    for k in range(3):
        a = cp.full(64, k + r, cp.int64)
        b, c = cp.empty(64, cp.int64), cp.empty(64, cp.int64)
        cp.cuda.get_current_stream().synchronize()
        time.sleep(0.02)
        before = resident_stats(short)
        short.Allreduce(a, b, op=MPI.MAX)
        middle = resident_stats(short)
        short.Allreduce(b, c, op=MPI.SUM)
        after = resident_stats(short)
        outs.append((k, b, c))
        record(f'resident: a call alone launches {k}', middle[0] == before[0] and middle[2] == before[2] + 1,
               f'(resident calls, launches, alone) {before} -> {middle}')
        record(f'resident: the call after it runs resident {k}',
               after[0] == middle[0] + 1 and after[1] == middle[1] + 1 and after[2] == middle[2],
               f'(resident calls, launches, alone) {middle} -> {after}')
    for k, b, c in outs:
        record(f'resident: a call alone and the next {k}', bool((b == k + n - 1).all() and (c == n * (k + n - 1)).all()),
               'wrong result')
    short.Free()
    mpigpu.config.resident_us = 0  # off: every call launched
    off = world.Dup()
    run_case(off, 'Allreduce', 'float32', 'SUM', 37)
    record('resident off', resident_stats(off) == (0, 0, 0), str(resident_stats(off)))
    for nbytes, want in ((32 << 10, 'll'), ((32 << 10) + 16, 'll128')):
        got = chosen_algo(off, 'allreduce', nbytes // 4, 'auto')
        record(f'select allreduce without a resident kernel bytes={nbytes}', got == ALGO[want], f'chose {got}')
    off.Free()
    mpigpu.config.resident_us = default
    if r == 0:
        print('world resident kernel (calls, launches, alone):', resident_stats(world), flush=True)


def resident_linger(comm):
    """How long an instance waits after a call follows the gaps between the program's calls
    (resident.cu), not the limit (MPIGPU_RESIDENT_US, a second on this communicator): one that waited
    through a 200 ms pause after a burst of calls would still run, and the call after the pause would
    launch no instance. (The wait is twice the longest recent gap, halved at each call: after the seven
    calls before a pause, at most 1 s / 2**6 even if the gap before them came close to the limit.) Calls rung while an instance waits, just as it gives up, or after it ended
    (pauses of 0-60 us between calls) all complete. A call whose stream is busy launches after
    its work and ends the waiting instance, so the next call launches one."""
    n, r = comm.Get_size(), comm.Get_rank()
    outs = []
    for k in range(16):
        a = cp.full(64, k + r, cp.int64)
        b = cp.empty(64, cp.int64)
        cp.cuda.get_current_stream().synchronize()
        pause = [0, 10e-6, 30e-6, 60e-6, 0, 0, 0, 0.2][k % 8]
        if pause:
            end = time.perf_counter() + pause
            while time.perf_counter() < end:
                pass
        if pause == 0.2:
            before = resident_stats(comm)
        comm.Allreduce(a, b, op=MPI.MAX)
        if pause == 0.2:
            after = resident_stats(comm)
            record(f'resident: an instance ends after a burst {k}',
                   after[0] == before[0] + 1 and after[1] == before[1] + 1 and after[2] == before[2],
                   f'(resident calls, launches, alone) {before} -> {after}')
        outs.append((k, b))
    for k, b in outs:
        record(f'resident: calls as an instance gives up {k}', bool((b == k + n - 1).all()), 'wrong result')
    # a busy stream: that call launches and stops the instance
    a = cp.full(100, r + 1, cp.float32)
    b, c, d = cp.empty(100, cp.float32), cp.empty(100, cp.float32), cp.empty(100, cp.float32)
    cp.cuda.get_current_stream().synchronize()
    comm.Allreduce(a, b)
    s0 = resident_stats(comm)
    spin_stream(300)
    comm.Allreduce(b, c)
    s1 = resident_stats(comm)
    comm.Allreduce(c, d)
    s2 = resident_stats(comm)
    total = n * (n + 1) // 2
    record('resident: a busy stream ends the instance',
           s1[0] == s0[0] and s2[0] == s1[0] + 1 and s2[1] == s1[1] + 1 and bool((d == total * n * n).all()),
           f'(resident calls, launches, alone) {s0} -> {s1} -> {s2}')


def resident_ll128(comm):
    """Blocking LL128 calls in the resident kernel, whose grid (MPIGPU_RESIDENT_BLOCKS) is not the
    launched kernel's: every (dtype, op) pair and every form (one-shot, two-shot with phase 0 split,
    Reduce_scatter_block, Allgather, Bcast one-shot and scatter), ranks whose call is launched meeting
    ranks whose call runs resident, and calls past MPIGPU_RESIDENT_MAX_BYTES, which launch."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    calls0 = resident_stats(comm)[0]
    cases = 0
    for algo in ('ll128', 'll128-twoshot'):
        mpigpu.config.algo = algo  # a form that does not apply (2 ranks, RS/AG two-shot) falls back
        for dtype, ops in OPS_FOR.items():
            if dtype in ('complex128',):
                continue  # 16-byte elements: no LL128 form
            for op in ops:
                run_case(comm, 'Allreduce', dtype, op, 1003, inplace=op == ops[0])
                run_case(comm, 'Reduce', dtype, op, 1001, root=n - 1, offset=3)
                if algo == 'll128':
                    run_case(comm, 'Reduce_scatter_block', dtype, op, 333, inplace=op == ops[-1])
                cases += 3
            run_case(comm, 'Allgather', dtype, 'SUM', 1007, inplace=dtype == 'int16', offset=3)
            run_case(comm, 'Bcast', dtype, 'SUM', 2003, root=n - 1)
    mpigpu.config.algo = 'auto'
    # the default forms by size: one-shot, two-shot with phase 0 split (2 MiB shards on 4 ranks),
    # blocks, Bcast one-shot and scatter; every root
    for count in ((96 << 10) // 4 + 1, (1 << 20) // 4 + 5, (8 << 20) // 4 - 3):
        run_case(comm, 'Allreduce', 'float32', 'SUM', count)
        run_case(comm, 'Allreduce', 'float16', 'SUM', count, inplace=True)
        run_case(comm, 'Reduce_scatter_block', 'float32', 'SUM', count // n)
        run_case(comm, 'Allgather', 'float16', 'SUM', count // n, offset=3)
        for root in range(n):
            run_case(comm, 'Bcast', 'float32', 'SUM', count, root=root)
            run_case(comm, 'Reduce', 'float32', 'SUM', count // 2, root=root)
    calls1 = resident_stats(comm)[0]
    # run_case's poisoning fill may still run on the stream at the call, which then launches
    record('resident path ran the LL128 calls', calls1 - calls0 >= cases // 2,
           f'{calls1 - calls0} resident calls, {cases} cases')
    # half the ranks launch (work queued first), the others run resident, every form by size
    line_forms = (ALGO['ll'], ALGO['ll128'], ALGO['ll128-twoshot'])
    for k, count in enumerate(((128 << 10) // 4 + 1, (2 << 20) // 4 + 7, (6 << 20) // 4 + 3) * 2):
        busy = (r + k) % 2 == 0
        for coll in ('Allreduce', 'Reduce_scatter_block', 'Allgather', 'Bcast'):
            m = count // n if coll in ('Reduce_scatter_block', 'Allgather') else count
            # idle ranks run the LL and LL128 forms resident up to MPIGPU_RESIDENT_MAX_BYTES (6 MiB on
            # 2 ranks: the direct kernel)
            message = m * 4 * (n if coll in ('Reduce_scatter_block', 'Allgather') else 1)
            resident = (not busy and chosen_algo(comm, coll.lower(), m, 'auto') in line_forms
                        and message <= mpigpu.config.resident_max_bytes)
            recent_call(comm)
            if busy:
                spin_stream(300)
            a = cp.full(m * (n if coll == 'Reduce_scatter_block' else 1), r + 1, cp.float32)
            b = cp.full(m * (n if coll == 'Allgather' else 1), -1, cp.float32)
            if not busy:
                cp.cuda.get_current_stream().synchronize()
            before = resident_stats(comm)[0]
            if coll == 'Allreduce':
                comm.Allreduce(a, b)
                want = cp.full(m, total, cp.float32)
            elif coll == 'Reduce_scatter_block':
                comm.Reduce_scatter_block(a, b)
                want = cp.full(m, total, cp.float32)
            elif coll == 'Allgather':
                comm.Allgather(a, b)
                want = cp.repeat(cp.arange(1, n + 1, dtype=cp.float32), m)
            else:
                root = k % n
                b = a if r == root else b
                comm.Bcast(b, root=root)
                want = cp.full(m, root + 1, cp.float32)
            ran = resident_stats(comm)[0] - before
            record(f'resident/launched LL128 mix {coll} count={m}', bool(cp.array_equal(b, want)), 'wrong result')
            record(f'resident/launched LL128 mix {coll} count={m} path', ran == int(resident),
                   f'busy={busy} resident calls {ran}, want {int(resident)}')
    # a limit of 256 KiB: a 1 MiB call launches, a 256 KiB one runs resident (2 MiB by default)
    default = mpigpu.config.resident_max_bytes
    mpigpu.config.resident_max_bytes = 256 << 10
    small = comm.Dup()
    small.Allreduce(cp.ones(4, cp.float32), cp.empty(4, cp.float32))
    for nbytes, resident in ((256 << 10, 1), (1 << 20, 0)):
        a = cp.full(nbytes // 4, r + 1, cp.float32)
        b = cp.empty_like(a)
        cp.cuda.get_current_stream().synchronize()
        before = resident_stats(small)[0]
        small.Allreduce(a, b)
        ran = resident_stats(small)[0] - before
        record(f'resident max bytes {nbytes}', bool((b == total).all()) and ran == resident,
               f'resident calls {ran}, want {resident}')
    small.Free()
    mpigpu.config.resident_max_bytes = default


def resident_block_counts(comm):
    """Back-to-back resident calls that each run on another number of the instance's blocks
    (resident_blocks_for: 1 for 4 KiB, 16 for a 64 KiB LL piece, every block for 1 MiB of LL128
    lines): blocks that sat out calls take the next one that needs them, and no call waits for a
    block it does not need. Inputs are made before and outputs checked after, so nothing but the
    calls runs between them; the counters prove that one instance ran them all."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    blocks = mpigpu.config.resident_blocks
    # (collective, float32 count): LL pieces of 16 B, 4 KiB, 40 KiB and 64 KiB; LL128 lines on
    # 18 blocks (256 KiB two-shot on 4 ranks) and on all of them (1 MiB)
    plan = [('Allreduce', 4), ('Allreduce', (64 << 10) // 4), ('Allreduce', 1 << 10), ('Allreduce', (1 << 20) // 4),
            ('Allreduce', 3), ('Allgather', (40 << 10) // 4), ('Bcast', (512 << 10) // 4 + 1),
            ('Allreduce', (256 << 10) // 4), ('Reduce_scatter_block', 5), ('Allreduce', (1 << 20) // 4 - 1),
            ('Allreduce', 1)] * 3
    args = []
    for k, (coll, count) in enumerate(plan):
        if coll == 'Allgather':
            a, b = cp.full(count, r + k, cp.float32), cp.full(count * n, -1, cp.float32)
            want = cp.repeat(cp.arange(k, n + k, dtype=cp.float32), count)
        elif coll == 'Reduce_scatter_block':
            a, b = cp.full(count * n, r + k, cp.float32), cp.full(count, -1, cp.float32)
            want = cp.full(count, total - n + n * k, cp.float32)
        elif coll == 'Bcast':
            root = k % n
            a = b = cp.full(count, r + k if r == root else -1, cp.float32)
            want = cp.full(count, root + k, cp.float32)
        else:
            a, b = cp.full(count, r + k, cp.float32), cp.full(count, -1, cp.float32)
            want = cp.full(count, total - n + n * k, cp.float32)
        args.append((coll, a, b, want))
    recent_call(comm)
    calls0, launches0, _ = resident_stats(comm)
    for k, (coll, a, b, _) in enumerate(args):
        if coll == 'Allreduce':
            comm.Allreduce(a, b)
        elif coll == 'Allgather':
            comm.Allgather(a, b)
        elif coll == 'Reduce_scatter_block':
            comm.Reduce_scatter_block(a, b)
        else:
            comm.Bcast(b, root=k % n)
    calls1, launches1, _ = resident_stats(comm)
    for k, (coll, a, b, want) in enumerate(args):
        record(f'resident block counts {k} {coll} count={b.size}', bool(cp.array_equal(b, want)), 'wrong result')
    record(f'resident block counts: one instance ({blocks} blocks)',
           calls1 - calls0 == len(plan) and launches1 - launches0 <= 1,
           f'{calls1 - calls0} resident calls of {len(plan)}, {launches1 - launches0} launches')


def chosen(comm, coll, count, algo, nchannels=0, dtype='float32'):
    """(algorithm code, channels, step bytes) the engine runs for a call of collective `coll` (a name
    in COLLS) of `count` elements of `dtype` forced to `algo` (and `nchannels`, 0: its choice); a
    forced protocol that does not apply falls back. None, recorded as a failure, without a device
    team."""
    global checks
    checks += 1
    team = getattr(comm.__dict__.get('_mg_state'), 'team', None)
    if team is None:
        record(f'select n={comm.Get_size()} coll={coll} count={count} algo={algo}', False, 'no device team')
        return None
    return team.select(COLLS.index(coll), CODE[dtype], count, ALGO[algo], nchannels)


def chosen_algo(comm, coll, count, algo):
    """The algorithm code of chosen(), or None."""
    got = chosen(comm, coll, count, algo)
    return None if got is None else got[0]


def ll128_area_sizes(world):
    """Teams with other LL128 areas (MPIGPU_LL128_BYTES): none (every LL128 request falls back) and
    8 MiB (Bcast scatter and Allreduce two-shot on pieces past the default 2 MiB). The results alone
    cannot show which form ran, so the engine's choice is checked too."""
    n = world.Get_size()
    default = mpigpu.config.ll128_bytes
    big = (12 << 20) // 4 + 3
    for area in (0, 8 << 20):
        mpigpu.config.ll128_bytes = area
        comm = world.Dup()
        for algo in ('ll128', 'll128-twoshot', 'auto'):
            mpigpu.config.algo = algo
            for count in (1003, big):
                run_case(comm, 'Allreduce', 'float32', 'SUM', count)
                run_case(comm, 'Reduce_scatter_block', 'float32', 'SUM', count // n)
                run_case(comm, 'Allgather', 'int32', 'SUM', count // n, offset=3)
                for root in (0, n - 1):
                    run_case(comm, 'Bcast', 'float32', 'SUM', count, root=root)
        mpigpu.config.algo = 'auto'
        if area == 0:  # no areas: no LL128 form, whatever is asked
            for coll in ('allreduce', 'bcast'):
                for count in (1003, big):
                    for algo in ('ll128', 'll128-twoshot', 'auto'):
                        got = chosen_algo(comm, coll, count, algo)
                        record(f'select without LL128 areas coll={coll} count={count} algo={algo}',
                               got not in (ALGO['ll128'], ALGO['ll128-twoshot']), f'chose {got}')
        else:  # 8 MiB areas: the two-shot Allreduce (and scatter Bcast, 3+ ranks) on a 12 MiB message
            for coll in (('allreduce', 'bcast') if n > 2 else ('allreduce',)):
                got = chosen_algo(comm, coll, big, 'll128-twoshot')
                record(f'select with 8 MiB LL128 areas coll={coll} count={big}', got == ALGO['ll128-twoshot'],
                       f'chose {got}')
        comm.Free()
    mpigpu.config.ll128_bytes = default


def reduce_selection(world):
    """Reduce's rule in select.cu (kReduceChainMinBytes): below 1 MiB the Allreduce's LL / LL128
    forms; from 1 MiB the chain on 3+ ranks and the direct one-shot on 2, never an LL form (a 1-2 MiB
    Reduce once fell into the Reduce_scatter_block rule and ran LL128 one-shot, correctly but slowly,
    which results cannot show)."""
    n = world.Get_size()
    lines = (ALGO['ll'], ALGO['ll128'], ALGO['ll128-twoshot'])
    for nbytes in (4 << 10, 256 << 10, (1 << 20) - 16, 1 << 20, 2 << 20, 4 << 20):
        got = chosen_algo(world, 'reduce', nbytes // 4, 'auto')
        want = got in lines if nbytes < 1 << 20 else got == ALGO['ring' if n > 2 else 'oneshot']
        record(f'select Reduce n={n} bytes={nbytes}', want, f'chose {got}')


def fused_steps(world):
    """A channel's whole span as one step over 2-4 consecutive FIFO slots (select.cu, kMaxFusedSlots),
    reached with 2 channels: Allreduce (one- and two-shot) and Reduce_scatter_block whose spans take
    1-5 slots, in and out of place, offset views, 16-bit types; the engine's step for each, and at
    counts whose span crosses a slot boundary only once the two-shot shards are rounded to whole
    vectors (16-bit types), where select and the plan must count the same slots; then such calls back
    to back on one stream with no host synchronization (wide_steps.burst). Wide steps on split warps:
    the split section's two-shot Allreduce of 70001 elements (2 slots per channel in float32 on 4
    ranks, 3 in float64)."""
    n = world.Get_size()
    mpigpu.config.nchannels = 2
    comm = world.Dup()
    slot = mpigpu.config.chunk_bytes

    for coll, algo in wide_steps.CASES:
        mpigpu.config.algo = algo
        for slots in range(1, wide_steps.MAX_SLOTS + 2):
            for dtype, op in (('float32', 'SUM'), ('float16', 'SUM'), ('int32', 'MAX')):
                count = wide_steps.fused_counts(n, coll, algo, np.dtype(DT[dtype]).itemsize, slots)
                for inplace in (False, True):
                    run_case(comm, coll, dtype, op, count, inplace=inplace, offset=3 if inplace else 0)
                got = chosen(comm, coll.lower(), count, algo, 2, dtype)
                if got is not None:
                    want = wide_steps.step_bytes(slots)
                    record(f'select step n={n} {coll} {algo} {dtype} slots={slots} count={count}',
                           got[2] == want, f'chose {got}')
    # Just past a slot boundary: float16 two-shot shards of whole vectors (8 elements) put up to 30
    # bytes more in a channel's span than the message divided by n and 2 (3 and 4 ranks).
    mpigpu.config.algo = 'twoshot'
    for slots in range(1, wide_steps.MAX_SLOTS + 1):
        edge = n * 2 * slots * slot // 2
        for count in (edge - 8 * n - 1, edge - 1, edge + 1, edge + 8 * n + 1):
            got = chosen(comm, 'allreduce', count, 'twoshot', 2, 'float16')
            if got is not None:
                want = wide_steps.step_bytes(-(-wide_steps.span_bytes(n, 'Allreduce', 'twoshot', 2, count) // slot))
                record(f'select step at a slot edge n={n} float16 count={count}', got[2] == want,
                       f'chose {got}, the plan cuts {want}')
            run_case(comm, 'Allreduce', 'float16', 'SUM', count)
    mpigpu.config.algo = 'auto'
    s = cp.cuda.Stream(non_blocking=True)
    pending = wide_steps.burst(comm, s, [1 + (i * 7) % (wide_steps.MAX_SLOTS + 1) for i in range(36)])
    s.synchronize()
    for i, (name, c, got, want) in enumerate(pending):
        record(f'wide steps back to back: {name} count={c} #{i}', bool(cp.array_equal(got, want)), 'wrong result')
    comm.Free()
    mpigpu.config.nchannels = 0


def protocol_selection(world):
    """The Allreduce's line protocol (select.cu): LL for pieces up to 64 KiB with a resident kernel
    (kLLResidentMaxAutoBytes; the default), else up to 32 KiB (kLLMaxAutoBytes, resident_kernel's
    team without one); then on 2 ranks one-shot LL128 while the piece fits its area (2 MiB by
    default), on 3+ two-shot LL128 from 256 KiB. Results are the same either way, so the choice is
    read back."""
    n = world.Get_size()
    for nbytes, want in ((16 << 10, 'll'), (64 << 10, 'll'), ((64 << 10) + 16, 'll128')):
        got = chosen_algo(world, 'allreduce', nbytes // 4, 'auto')
        record(f'select allreduce n={n} bytes={nbytes}', got == ALGO[want], f'chose {got}')
    for nbytes in (512 << 10, 2 << 20):
        got = chosen_algo(world, 'allreduce', nbytes // 4, 'auto')
        want = ALGO['ll128' if n == 2 else 'll128-twoshot']
        record(f'select allreduce n={n} bytes={nbytes}', got == want, f'chose {got}')


def section(name):
    if RANK == 0:
        print(f'-- {name}', flush=True)


def main():
    print(f'rank {RANK}/{SIZE} on GPU {DEV} {cp.cuda.runtime.getDeviceProperties(DEV)["name"].decode()}', flush=True)
    world.Barrier()
    section('world sweep')
    sweep(world, ['auto'] if QUICK else ['ll', 'll128', 'll128-twoshot', 'oneshot', 'twoshot', 'ring', 'auto'])
    if RANK == 0:
        print('world engine:', world.engine_status(), flush=True)
    section('bfloat16')
    bf16_cases(world)
    section('errors')
    error_cases(world)
    section('back-to-back')
    back_to_back(world)
    section('resident kernel')
    resident_kernel(world)
    section('direct kernel with its stages on separate warps, many steps per channel')
    mpigpu.config.split_steps, mpigpu.config.nchannels = 1, 2
    split = world.Dup()
    sweep(split, ['oneshot', 'twoshot'])
    split.Free()
    mpigpu.config.split_steps, mpigpu.config.nchannels = SPLIT_STEPS, 0
    section('one step over several slots')
    fused_steps(world)
    section('LL128 area sizes')
    ll128_area_sizes(world)
    reduce_selection(world)
    protocol_selection(world)
    section('sub-communicators')
    if SIZE >= 2:
        for color_fn, name in ((lambda r: r % 2, 'odd/even'), (lambda r: r < SIZE // 2, 'halves')):
            # the halves without a resident kernel: the launched LL and LL128 kernels on blocking calls
            mpigpu.config.resident_us = 0 if name == 'halves' else RESIDENT_US
            sub = world.Split(int(color_fn(RANK)), RANK)
            assert isinstance(sub, mpigpu.Intracomm)
            sweep(sub, ['auto', 'ring'] if name == 'odd/even' else ['auto'])
            sub.Free()
        mpigpu.config.resident_us = RESIDENT_US
    section('staged path')
    if RANK == 0:
        print('MPI reports CUDA-aware:', mpigpu._engine._mpi_cuda_aware(), flush=True)
    mpigpu.config.algo = 'staged'
    staged = world.Dup()
    for dtype, ops in OPS_FOR.items():
        for op in ops:
            run_case(staged, 'Allreduce', dtype, op, 1001)
            run_case(staged, 'Reduce', dtype, op, 1001, root=SIZE - 1)
            run_case(staged, 'Reduce_scatter_block', dtype, op, 1001)
        run_case(staged, 'Bcast', dtype, 'SUM', 1001, root=SIZE - 1)
        run_case(staged, 'Allgather', dtype, 'SUM', 1001)
        if torch is not None and dtype not in ('uint16', 'uint32', 'uint64'):
            run_case(staged, 'Allreduce', dtype, ops[0], 1001, lib='torch', inplace=True)
            run_case(staged, 'Bcast', dtype, 'SUM', 1001, lib='torch')
    for count in (0, 1, 1003, (9 << 20) // 4 + 3):
        for coll in ('Allreduce', 'Reduce', 'Reduce_scatter_block', 'Allgather', 'Bcast'):
            for dtype in ('float32', 'float16'):
                run_case(staged, coll, dtype, 'SUM', count, root=SIZE - 1)
                if coll != 'Bcast':
                    run_case(staged, coll, dtype, 'SUM', count, root=0, inplace=True)
    if RANK == 0:
        print('staged engine:', staged.engine_status(), flush=True)
    staged.Free()
    mpigpu.config.algo = 'auto'

    allf = world.gather(failures, root=0)
    total = world.reduce(checks, root=0)
    if RANK == 0:
        flat = [f for fs in allf for f in fs]
        for f in flat[:40]:
            print('FAIL', f)
        print(f'{total - len(flat)} passed, {len(flat)} failed')
        sys.stdout.flush()
    bad = world.bcast(len([f for fs in (allf or []) for f in fs]) if RANK == 0 else None, root=0)
    return 1 if bad else 0


if __name__ == '__main__':
    code = main()
    sys.stdout.flush()
    if code:
        MPI.COMM_WORLD.Abort(1)
