"""Shared helpers of the GPU checks (tests/gpu/test_*.py): inputs every rank can rebuild, NumPy
references, tolerances, comparison across ranks, poisoned outputs, run_case and sweep, mpigpu.config
set for a block, and the agreement of all ranks at the end of each test phase.

The checks run inside every rank: `mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/...`.
Every rank runs the same tests in the same order, so their collectives match. A check that fails is
recorded and the test goes on; at the end of each test phase all ranks agree (end_phase, called by
tests/conftest.py) and fail together, naming every failed check of every rank. Importing this
module skips the importing test module without CuPy, a GPU, an MPI job of 2 or more ranks around it
or a CUDA build of mpigpu.
"""
import hashlib
import os
import sys
import time
import traceback
import zlib
from contextlib import contextmanager, nullcontext

import numpy as np
import pytest

from reference import FLOATS, reduce_ref

cp = pytest.importorskip('cupy')
try:
    _NDEV = cp.cuda.runtime.getDeviceCount()
except Exception:  # CuPy without a driver or device raises here
    _NDEV = 0
if _NDEV == 0:
    pytest.skip('no CUDA device visible to CuPy', allow_module_level=True)
# Inside the ranks of an MPI job only (Open MPI, MPICH's Hydra, PMIx say so in the environment): a
# plain `pytest` leaves the modules to tests/test_gpu.py, which runs each under mpirun, and starts no
# MPI in its own process.
if not any(v in os.environ for v in ('OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', 'PMI_RANK', 'PMIX_RANK')):
    pytest.skip('not inside an MPI job: `mpirun -n N python -m pytest tests/gpu/...` or tests/test_gpu.py '
                'runs these', allow_module_level=True)

import mpigpu  # noqa: E402 (after the skip: importing it starts MPI)
from mpi4py import MPI  # noqa: E402
from mpigpu import _cuda  # noqa: E402
from mpigpu._base.codes import Algo, Coll, Dtype  # noqa: E402
from mpigpu._state.comm_state import state_of  # noqa: E402

if not _cuda.available()[0]:
    pytest.skip(_cuda.available()[1], allow_module_level=True)

try:
    import torch
except ImportError:
    torch = None

world = mpigpu.COMM_WORLD
RANK, SIZE = world.Get_rank(), world.Get_size()
if SIZE < 2:  # also where pytest itself started MPI as a singleton before collecting these
    pytest.skip('the GPU checks need 2 or more ranks', allow_module_level=True)
DEV = RANK % _NDEV
cp.cuda.Device(DEV).use()
if torch is not None:
    torch.cuda.set_device(DEV)
# The agreement's own communicator: its collectives never match one of a test's.
AGREE = MPI.COMM_WORLD.Dup()
QUICK = False  # --quick (tests/conftest.py): smaller sizes, the 'auto' sweep only


# ---- the tally of this rank ---------------------------------------------------------------------
class Tally:
    """This rank's counts. `checks` counts what the scripts before the pytest modules counted (each
    compared result, engine choice and check() call), so totals stay comparable; `others` counts the
    further assertions made through record(). Every failure of either kind is in `failures`."""

    def __init__(self):
        self.checks = 0
        self.others = 0
        self.failures = []


tally = Tally()
tainted = []  # tests that raised: the communicators' state is unknown after them


def _fail(label, msg):
    tally.failures.append(f'rank {RANK}: {label}: {msg}')


def record(label, ok, msg=''):
    """An assertion: a failure is recorded, and the test goes on."""
    tally.others += 1
    if not ok:
        _fail(label, msg)


def check(ok, what):
    """A counted check (the async, point-to-point and buffer API checks count each)."""
    tally.checks += 1
    if not ok:
        tally.failures.append(f'rank {RANK}: {what}')


@contextmanager
def settings(**fields):
    """mpigpu.config with `fields` set inside the block and restored after it, also when it raises.
    Knobs read when a communicator's team is set up (resident_us, ll128_bytes, split_steps...) must
    be in effect at its first device call."""
    saved = {}
    try:
        for name, value in fields.items():
            if not hasattr(mpigpu.config, name):
                raise AttributeError(f'mpigpu.config has no field {name!r}')
            saved[name] = getattr(mpigpu.config, name)
            setattr(mpigpu.config, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(mpigpu.config, name, value)


def team_up(comm):
    """A first device collective on `comm`, which sets its device team up (collective)."""
    comm.Allreduce(cp.ones(4, cp.float32), cp.empty(4, cp.float32))


def team(comm):
    """The device team of `comm`, or None."""
    return state_of(comm).team


def free(comm):
    """Frees a communicator a test made, unless a test raised (its state is unknown: the collective
    release could wait for a rank that is elsewhere) or it is freed already."""
    if comm != MPI.COMM_NULL and not tainted:
        comm.Free()


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


# ---- inputs, references, comparison ------------------------------------------------------------
DT = {'bool': np.bool_, 'int8': np.int8, 'uint8': np.uint8, 'int16': np.int16, 'uint16': np.uint16,
      'int32': np.int32, 'uint32': np.uint32, 'int64': np.int64, 'uint64': np.uint64,
      'float16': np.float16, 'float32': np.float32, 'float64': np.float64,
      'complex64': np.complex64, 'complex128': np.complex128}
INTS = [k for k in DT if k.startswith(('int', 'uint'))]
OPS_FOR = {}
for _name in DT:
    if _name == 'bool':
        OPS_FOR[_name] = ['LAND', 'LOR', 'LXOR']
    elif _name in INTS:
        OPS_FOR[_name] = ['SUM', 'PROD', 'MAX', 'MIN', 'LAND', 'LOR', 'LXOR', 'BAND', 'BOR', 'BXOR']
    elif _name in FLOATS:
        OPS_FOR[_name] = ['SUM', 'PROD', 'MAX', 'MIN']
    else:
        OPS_FOR[_name] = ['SUM', 'PROD']
COLLS = ('Allreduce', 'Reduce', 'Reduce_scatter_block', 'Allgather', 'Bcast')


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


def tol(dtype, n):
    return {'float16': 4e-3 * n, 'float32': 1e-6 * n, 'float64': 1e-14 * n,
            'complex64': 1e-6 * n, 'complex128': 1e-14 * n}.get(dtype, 0)


def compare(got, ref, dtype, comm):
    """(ok, message, digest) of a result against its reference; a counted check."""
    tally.checks += 1
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


# ---- device arrays of CuPy and PyTorch -----------------------------------------------------------
def xp_array(lib, host):
    if lib == 'cupy':
        return cp.asarray(host)
    return torch.from_numpy(host).cuda()


def to_host(lib, dev):
    if lib == 'cupy':
        return cp.asnumpy(dev)
    return dev.cpu().numpy()


def poison(lib, dev):
    """Fills an output with bytes no correct result holds (NaN for floats)."""
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
    """One collective call on device buffers (recvbuf poisoned first), checked against the NumPy
    reference and, where every rank holds the same result, for bitwise equality across ranks. An
    exception is recorded as a failure and the ranks stay in step (the digest exchange still runs)."""
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
        _fail(label, 'raised\n' + traceback.format_exc())
        comm.allgather(None)
        return
    if got is None:
        comm.allgather(None)
        return
    ok, msg, digest = compare(got, ref if not (dtype in INTS or dtype == 'bool') else ref.astype(got.dtype), dtype, comm)
    if not ok:
        _fail(label, msg)
    digests = comm.allgather(digest if same_digest else None)
    if same_digest:
        roots_only = [d for d in digests if d is not None]
        if len(set(roots_only)) > 1:
            _fail(label, 'results differ between ranks (not bitwise identical)')


def sizes(n):
    """Size classes: 0, fewer than the ranks, odd, not a multiple of the vector width or chunk."""
    base = [0, 1, n - 1 if n > 1 else 1, 7, 1003, 4096 + 3, 65537]
    return base if QUICK else base + [1 << 20 | 13, (8 << 20) // 4 + 5]


def sweep_algo(comm, algo):
    """Every collective x dtype x op x size class on `comm` with MPIGPU_ALGO `algo`."""
    n = comm.Get_size()
    with settings(algo=algo):
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
            for coll in COLLS:
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
                for coll in COLLS:
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


def sweep(comm, algos):
    for algo in algos:
        sweep_algo(comm, algo)


# ---- the engine's choices ----------------------------------------------------------------------
def algo_code(knob):
    """The Algo of an MPIGPU_ALGO value: 'll128-twoshot' -> Algo.LL128_TWOSHOT."""
    return Algo[knob.upper().replace('-', '_')]


def chosen(comm, coll, count, algo, nchannels=0, dtype='float32'):
    """(algorithm code, channels, step bytes) the engine runs for a call of collective `coll` ('Allreduce'
    or 'allreduce') of `count` elements of `dtype` forced to `algo` (and `nchannels`, 0: its choice);
    a forced protocol that does not apply falls back. A counted check: None, recorded as a failure,
    without a device team."""
    tally.checks += 1
    t = team(comm)
    if t is None:
        _fail(f'select n={comm.Get_size()} coll={coll} count={count} algo={algo}', 'no device team')
        return None
    return t.select(Coll[coll.upper()], Dtype[dtype.upper()], count, algo_code(algo), nchannels)


def chosen_algo(comm, coll, count, algo):
    """The algorithm code of chosen(), or None."""
    got = chosen(comm, coll, count, algo)
    return None if got is None else got[0]


# ---- output past pytest's capture, and the agreement of the ranks --------------------------------
_pytest_config = None


def _uncaptured():
    """A block whose output reaches the terminal although pytest captures the test's."""
    capman = _pytest_config.pluginmanager.getplugin('capturemanager') if _pytest_config else None
    return capman.global_and_fixture_disabled() if capman is not None else nullcontext()


def say(*parts):
    """Prints a line on rank 0 at the start of a line of the terminal, also while pytest captures
    (benchmarks/device_session.sh greps some of these lines)."""
    if RANK != 0:
        return
    line = ' '.join(str(p) for p in parts)
    reporter = _pytest_config.pluginmanager.getplugin('terminalreporter') if _pytest_config else None
    with _uncaptured():
        if reporter is not None:
            reporter.ensure_newline()
            # progress letters of -q leave the line open without telling ensure_newline
            if getattr(getattr(reporter, '_tw', None), 'width_of_current_line', 0):
                reporter.write('\n')
            reporter.write_line(line)
        else:
            print(line, flush=True)


began = None  # the tally when the first GPU module began (snapshot())


def begin_session(config):
    """The start of the first GPU module of a run (tests/conftest.py): options, each rank's GPU."""
    global _pytest_config, QUICK, began
    if began is not None:
        return
    began = snapshot()
    _pytest_config = config
    QUICK = bool(config.getoption('quick', False))
    _wait_for_all('the start of the GPU checks (a rank that failed to collect them never comes)', [])
    name = cp.cuda.runtime.getDeviceProperties(DEV)['name']
    lines = AGREE.gather(f'rank {RANK}/{SIZE} on GPU {DEV} {name.decode() if isinstance(name, bytes) else name}')
    for line in lines or ():
        say(line)


def deadline_s():
    """How long a rank waits for the others at the end of a test phase before it ends the job:
    longer than a device wait's own timeout (MPIGPU_TIMEOUT_S), after which a waiting rank raises."""
    return max(120.0, 2 * mpigpu.config.timeout_s)


def _wait_for_all(what, own):
    """Returns once every rank reached this point; ends the job (MPI_Abort) when they do not within
    deadline_s(): a rank that raised may have left the others in a collective it never joins."""
    req = AGREE.Ibarrier()
    limit = time.monotonic() + deadline_s()
    while not req.Test():
        if time.monotonic() > limit:
            with _uncaptured():
                sys.stderr.write(f'rank {RANK}: the other ranks did not reach {what} within '
                                 f'{deadline_s():g} s; ending the job. This rank\'s failures:\n'
                                 + '\n'.join(own[-10:]) + '\n')
                sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)
        time.sleep(0.001)


def _short_traceback(exc):
    """The traceback of `exc` without pytest's and pluggy's frames."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(part in f.filename for part in ('_pytest', 'pluggy', 'conftest.py'))]
    return (''.join(traceback.format_list(frames)) + ''.join(traceback.format_exception_only(exc))).rstrip()


def end_phase(item, phase, mark, exc):
    """All ranks agree at the end of a test phase ('setup', 'call', 'teardown') and fail together.
    `mark`: len(tally.failures) when the phase began; `exc`: what the phase raised on this rank, or
    None. Raises pytest's failure naming every rank's failures of the phase; returns otherwise (the
    caller re-raises a skip, which must be on every rank). A phase that raised somewhere stops the
    session after this test on every rank, since its communicators may be out of step."""
    skipped = isinstance(exc, pytest.skip.Exception)
    raised = exc is not None and not skipped
    if raised:
        tally.failures.append(f'rank {RANK}: {item.name} ({phase}) raised:\n' + _short_traceback(exc))
    own = tally.failures[mark:]
    _wait_for_all(f'the end of {item.nodeid} ({phase})', own)
    every = AGREE.allgather((own, raised, skipped))
    fails = [f for o, _r, _s in every for f in o]
    raisers = [k for k, (_o, r, _s) in enumerate(every) if r]
    if raisers:
        tainted.append(item.nodeid)
        item.session.shouldstop = (f'{item.nodeid} ({phase}) raised on rank(s) {raisers}: the ranks may be out '
                                   'of step, so the session stops')
    if fails:  # the same message on every rank (rank 0 prints it: tests/conftest.py)
        head = f'{len(fails)} failed on {len({f.split(":")[0] for f in fails})} rank(s):'
        body = fails[:40] + ([f'... and {len(fails) - 40} more'] if len(fails) > 40 else [])
        pytest.fail('\n'.join([head] + ['FAIL ' + f for f in body]), pytrace=False)
    skips = [s for _o, _r, s in every]
    if any(skips) and not all(skips):
        pytest.fail(f'{item.nodeid} ({phase}) skipped on some ranks only: {skips}', pytrace=False)


def summary(label, start):
    """Prints, on rank 0, the counted checks passed and failed since `start` ((checks, others,
    failures) of this rank), summed over the ranks, as the scripts before these modules printed them."""
    mine = (tally.checks - start[0], tally.others - start[1], len(tally.failures) - start[2])
    _wait_for_all(f'the summary of {label}', [])
    total = AGREE.allreduce(np.array(mine, dtype=np.int64))
    checks, others, failed = (int(v) for v in total)
    say(f'{label}: {checks - failed} passed, {failed} failed ({SIZE} ranks; besides the counted checks, '
        f'{others} assertions)')


def snapshot():
    return tally.checks, tally.others, len(tally.failures)
