"""Engine probe for tuning (not a user tool): `mpirun -n N python benchmarks/engine_probe.py`.

1. Per-call host overhead, by part (intake, parse, device checks, launch+sync), on a 1 KB Allreduce.
2. Blocking time of the raw engine call (team.run) for each size x algorithm x channel count, so the
   cost model's constants can be read off one table. Prints rank 0's table.
"""
import sys
import time

import cupy as cp
from mpi4py import MPI

import mpigpu
from mpigpu._describe import call as _call
from mpigpu import _cuda
from mpigpu._paths import plan as _plan
from mpigpu._base.codes import Algo, Coll, Dtype, Op
from mpigpu._ext import _intake
from mpigpu._state.comm_state import state_of

comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
LARGE = "--large" in sys.argv
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()


def tm(fn, iters=2000):
    for _ in range(20):
        fn()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return comm.allreduce((time.perf_counter() - t0) / iters * 1e6, op=MPI.MAX)


x = cp.ones(256, cp.float32)
y = cp.empty_like(x)
comm.Allreduce(x, y)
st = state_of(comm)
AR, AUTO, F32, SUM = Coll.ALLREDUCE, Algo.AUTO, Dtype.FLOAT32, Op.SUM
c = _call.build('Allreduce', AR, n, rank, x, y, MPI.SUM, 0, _cuda.consumer_stream)
parts = {
    'cupy __cuda_array_interface__': tm(lambda: x.__cuda_array_interface__),
    '_intake.is_device': tm(lambda: _intake.is_device(x)),
    '_intake.device_buffer': tm(lambda: _intake.device_buffer(x)),
    '_call.build (both args)': tm(lambda: _call.build('Allreduce', AR, n, rank, x, y, MPI.SUM, 0,
                                                      _cuda.consumer_stream)),
    '_plan._device_of (pointer checks)': tm(lambda: _plan._device_of(st, c)),
    'pointer_info': tm(lambda: _cuda.device.pointer_info(x.data.ptr)),
    'team.run launch+sync (1 KB)': tm(lambda: st.team.run(AR, AUTO, F32, SUM, x.data.ptr, y.data.ptr, 256, 0, 0, 0,
                                                          True)),
    'comm.Allreduce (1 KB)': tm(lambda: comm.Allreduce(x, y)),
}


def stream_mode(iters=500):
    comm.Barrier()
    s = cp.cuda.get_current_stream()
    t0 = time.perf_counter()
    for _ in range(iters):
        st.team.run(AR, AUTO, F32, SUM, x.data.ptr, y.data.ptr, 256, 0, 0, 0, False)
    s.synchronize()
    return comm.allreduce((time.perf_counter() - t0) / iters * 1e6, op=MPI.MAX)


parts['team.run back-to-back, no sync (1 KB)'] = stream_mode()
_empty = cp.RawKernel('extern "C" __global__ void e() {}', 'e')
parts['cupy empty kernel launch+sync'] = tm(lambda: (_empty((1,), (32,), ()), cp.cuda.get_current_stream().synchronize()))
_ns = cp.cuda.Stream(non_blocking=True)
parts['team.run launch+sync, own stream'] = tm(lambda: st.team.run(AR, AUTO, F32, SUM, x.data.ptr, y.data.ptr, 256, 0, 0,
                                                                   _ns.ptr, True))
if rank == 0 and not LARGE:
    print('# host overhead per call (us), 1 KB float32 Allreduce')
    for k, v in parts.items():
        print(f'{k:>40}: {v:8.2f}')
if rank == 0 and LARGE:
    import os
    print(f"# MPIGPU_CHUNK_BYTES={os.environ.get('MPIGPU_CHUNK_BYTES')} MPIGPU_NSLOTS={os.environ.get('MPIGPU_NSLOTS')}")

# size x algo x channels
COLL = {'allreduce': Coll.ALLREDUCE, 'bcast': Coll.BCAST, 'rs': Coll.REDUCE_SCATTER_BLOCK, 'allgather': Coll.ALLGATHER}
# the direct kernel's form of each: Allreduce and Bcast two-shot (Bcast: scatter-forward), the others one-shot
DIRECT = (('allreduce', Coll.ALLREDUCE, Algo.TWOSHOT), ('bcast', Coll.BCAST, Algo.TWOSHOT),
          ('rs', Coll.REDUCE_SCATTER_BLOCK, Algo.ONESHOT), ('allgather', Coll.ALLGATHER, Algo.ONESHOT))
sizes = [1 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
if LARGE:
    sizes = [16 << 20, 256 << 20]
elif "--mid" in sys.argv:  # the 128 KB - 16 MB band of the engine issue's targets
    sizes = [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
elif "--short" in sys.argv:
    sizes = [1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20]
chans = [32, 64, 96, 128] if LARGE else [8, 16, 32, 64, 96, 128] if "--mid" in sys.argv else [1, 8, 16, 32, 48, 64]
chans = [c for c in chans if c <= st.team.max_channels] if hasattr(st.team, 'max_channels') else chans
big = cp.ones((256 << 20) // 4 * n, cp.float32)
out = cp.empty_like(big)
factor = {'allreduce': 2 * (n - 1) / n, 'bcast': 1, 'rs': (n - 1) / n, 'allgather': (n - 1) / n}


def call_count(coll, nb):
    """Elements of a float32 `coll` call that moves nb bytes (per block for RS and Allgather)."""
    return nb // 4 // (n if coll in ('rs', 'allgather') else 1)


def iterations(nb):
    """Timed calls per cell: about 200 MB moved, 3 to 50 calls."""
    return max(3, min(50, int(2e8 / max(nb, 1))))


LL128_MAX = mpigpu.config.ll128_bytes
if "--ll128" in sys.argv:
    # LL128 past its default areas against the direct kernel, 4-64 MB: a team with 16 MiB areas.
    mpigpu.config.ll128_bytes = 16 << 20
    c2 = comm.Dup()
    c2.Allreduce(x, y)
    team = state_of(c2).team
    lchans = (64, 96, 128)
    if rank == 0:
        print(f'# busbw GB/s by channels {lchans}; LL128 areas of 16 MiB per peer; algo 1=oneshot 2=twoshot '
              '4=ll128 5=ll128-twoshot (Bcast: scatter)')
    for coll, code, algos in (('allreduce', AR, (Algo.LL128_TWOSHOT, Algo.TWOSHOT)),
                              ('bcast', Coll.BCAST, (Algo.LL128_TWOSHOT, Algo.TWOSHOT)),
                              ('rs', Coll.REDUCE_SCATTER_BLOCK, (Algo.LL128, Algo.ONESHOT)),
                              ('allgather', Coll.ALLGATHER, (Algo.LL128, Algo.ONESHOT))):
        for nb in (4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20):
            count = call_count(coll, nb)
            iters = iterations(nb)
            for algo in algos:
                row = [nb / tm(lambda: team.run(code, algo, F32, SUM, big.data.ptr, out.data.ptr, count, 0, ch, 0,
                                                True), iters) / 1e3 * factor[coll] for ch in lchans]
                if rank == 0:
                    print(f'{coll:>10} {nb:>10} algo{algo}: ' + ' '.join(f'{v:6.1f}' for v in row), flush=True)
    sys.exit(0)
if "--wide" in sys.argv:
    # One step over 4 consecutive slots (chunk 4 x slot, as cut_into_steps grants it) against steps
    # of one slot (chunk = slot), interleaved round by round: sizes whose channel spans take 3.5-4
    # slots at 128 channels (4 ranks: 56-64 MB; 2 ranks: 28-32 MB). Blocking us per call; the
    # measurement behind kMaxFusedSlots = 4 (select.cu).
    slot = mpigpu.config.chunk_bytes
    mbs = (56, 64) if n > 2 else (28, 32)
    for coll, code, algo in (('allreduce', AR, Algo.TWOSHOT), ('rs', Coll.REDUCE_SCATTER_BLOCK, Algo.ONESHOT)):
        for mb in mbs:
            nb = mb << 20
            count = call_count(coll, nb)
            runs = {slot: [], 4 * slot: []}
            for _ in range(6):
                for chunk in runs:
                    runs[chunk].append(tm(lambda: st.team.run(code, algo, F32, SUM, big.data.ptr, out.data.ptr, count,
                                                              0, 128, 0, True, chunk), 20))
            if rank == 0:
                print(f'wide {coll:>9} {mb:>3} MB: ' + ' | '.join(
                    f'chunk {c}: ' + ' '.join(f'{t:6.1f}' for t in ts) for c, ts in runs.items()), flush=True)
    sys.exit(0)
if "--chunks" in sys.argv:
    # Direct kernel: step bytes x channels, for the default MPIGPU_SPLIT_STEPS and for 2, next to
    # the cost model's choice (algo, channels, step).
    steps, step_chans = (8192, 16384, 32768), (32, 64, 128)
    teams = {}
    for v in (mpigpu.config.split_steps, 2):
        mpigpu.config.split_steps = v
        c2 = comm.Dup()
        c2.Allreduce(x, y)
        teams[v] = state_of(c2).team
    if rank == 0:
        print(f'# direct kernel busbw GB/s; columns: step bytes {steps} x channels {step_chans}; '
              f'teams split_steps {tuple(teams)}; auto = cost model (algo, ch, step)')
    for coll, code, algo in DIRECT:
        for nb in (4 << 20, 16 << 20, 64 << 20, 256 << 20):
            count = call_count(coll, nb)
            iters = iterations(nb)
            for v, team in teams.items():
                row = []
                for ch in step_chans:
                    for step in steps:
                        t = tm(lambda: team.run(code, algo, F32, SUM, big.data.ptr, out.data.ptr, count, 0, ch, 0, True,
                                                step), iters)
                        row.append(nb / t / 1e3 * factor[coll])
                if rank == 0:
                    print(f'{coll:>10} {nb:>10} split{v}: ' + ' | '.join(
                        ' '.join(f'{b:6.1f}' for b in row[i:i + 3]) for i in range(0, len(row), 3)), flush=True)
            t = tm(lambda: st.team.run(code, AUTO, F32, SUM, big.data.ptr, out.data.ptr, count, 0, 0, 0, True), iters)
            if rank == 0:
                print(f'{coll:>10} {nb:>10} auto: {nb / t / 1e3 * factor[coll]:6.1f} {st.team.select(code, F32, count)}',
                      flush=True)
    sys.exit(0)
if "--ring" in sys.argv:
    # Ring and chain forms (algo 6) by channels, next to the cost model's choice (auto), 256 KB-256 MB.
    ring_chans = (8, 32, 128)
    if rank == 0:
        print(f'# ring busbw GB/s by channels {ring_chans} | auto (cost model: algo, ch, step)')
    for coll, code in tuple(COLL.items()) + (('reduce', Coll.REDUCE),):
        for nb in (256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20):
            count = call_count(coll, nb)
            iters = iterations(nb)
            f = factor.get(coll, 1)
            row = [nb / tm(lambda: st.team.run(code, Algo.RING, F32, SUM, big.data.ptr, out.data.ptr, count, 0, ch, 0,
                                               True), iters) / 1e3 * f for ch in ring_chans]
            t = tm(lambda: st.team.run(code, AUTO, F32, SUM, big.data.ptr, out.data.ptr, count, 0, 0, 0, True), iters)
            if rank == 0:
                print(f'{coll:>10} {nb:>10}: ' + ' '.join(f'{v:6.1f}' for v in row) +
                      f' | {nb / t / 1e3 * f:6.1f} {st.team.select(code, F32, count)}', flush=True)
    sys.exit(0)
if "--split" in sys.argv:
    # Direct kernel, stages on separate warps from MPIGPU_SPLIT_STEPS steps per channel: one team per
    # setting (the value is fixed at team setup), busbw by channels for each.
    splits, split_chans = (0, 2, 4, 8), (32, 64, 128)
    teams = {}
    for v in splits:
        mpigpu.config.split_steps = v
        c2 = comm.Dup()
        c2.Allreduce(x, y)
        teams[v] = state_of(c2).team
    if rank == 0:
        print(f'# direct kernel busbw GB/s; columns: split_steps {splits} x channels {split_chans}')
    for coll, code, algo in DIRECT:
        for nb in (4 << 20, 16 << 20, 64 << 20, 256 << 20):
            count = call_count(coll, nb)
            row = []
            for v in splits:
                for ch in split_chans:
                    iters = iterations(nb)
                    t = tm(lambda: teams[v].run(code, algo, F32, SUM, big.data.ptr, out.data.ptr, count, 0, ch, 0,
                                                True), iters)
                    row.append(nb / t / 1e3 * factor[coll])
            if rank == 0:
                print(f'{coll:>10} {nb:>10}: ' + ' | '.join(' '.join(f'{v:6.1f}' for v in row[i:i + 3])
                                                         for i in range(0, len(row), 3)), flush=True)
    sys.exit(0)
for coll, code in COLL.items():
    algos = (Algo.ONESHOT, Algo.TWOSHOT) if coll in ('allreduce', 'bcast') else (Algo.ONESHOT,)
    if LARGE:
        algos = (Algo.TWOSHOT,) if coll in ('allreduce', 'bcast') else (Algo.ONESHOT,)
    if coll != 'bcast':
        algos = algos + (Algo.LL,)
    algos = algos + (Algo.LL128,)
    if coll in ('allreduce', 'bcast'):
        algos = algos + (Algo.LL128_TWOSHOT,)
    if rank == 0:
        print(f'# {coll}: busbw GB/s by channels ({", ".join(map(str, chans))}); '
              'algo 1=oneshot 2=twoshot 3=ll 4=ll128 5=ll128-twoshot; auto = what the cost model runs')
    for nb in sizes:
        count = call_count(coll, nb)
        piece = nb // (n if coll in ('rs', 'allgather') else 1)
        for algo in algos + (AUTO,):
            parts = n - 1 if coll == 'bcast' else n
            if algo == Algo.LL and piece > 64 * 1024 or algo == Algo.LL128 and piece > LL128_MAX or \
                    algo == Algo.LL128_TWOSHOT and (-(-piece // parts) > LL128_MAX or parts < 2):
                continue
            if algo == AUTO:  # the cost model's choice, once
                iters = iterations(nb)
                t = tm(lambda: st.team.run(code, AUTO, F32, SUM, big.data.ptr, out.data.ptr, count, 0, 0, 0, True),
                       iters)
                if rank == 0:
                    print(f'{nb:>11} auto : {nb / t / 1e3 * factor[coll]:7.1f}   = algo, ch '
                          f'{st.team.select(code, F32, count)}')
                continue
            row = []
            for ch in chans:
                iters = iterations(nb)
                t = tm(lambda: st.team.run(code, algo, F32, SUM, big.data.ptr, out.data.ptr, count, 0, ch, 0, True),
                       iters)
                row.append(nb / t / 1e3 * factor[coll])
            if rank == 0:
                best = chans[max(range(len(row)), key=row.__getitem__)]
                print(f'{nb:>11} algo{algo}: ' + ' '.join(f'{v:7.1f}' for v in row) + f'   best ch={best}')
    sys.stdout.flush()
