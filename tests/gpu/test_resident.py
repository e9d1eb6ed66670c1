"""Blocking LL and LL128 calls in the resident kernel (resident_kernel.cuh): every (dtype, op) pair
through it, calls back to back with no launch between them, ranks whose call is launched (work
queued on their stream) meeting ranks whose call runs resident, instances that idle out and are
launched again (resident_linger), a direct kernel between resident calls, an in-flight stream= call
before a blocking one, calls that come alone, and a communicator freed while its instance runs. The
counters prove which path ran. `mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_resident.py`."""
import time

import pytest

import gpucheck as gc
from gpucheck import MPI, OPS_FOR, chosen_algo, cp, record, run_case, settings, spin_stream

_RECENT = None
_DEDICATED = None


def resident_stats(comm):
    """(resident calls, instances launched, calls alone) of the communicator's team."""
    return gc.team(comm).resident_stats


def dedicated(comm):
    """True when every rank of the job has a GPU of its own. Only then do the counters say which path
    the timing rules chose: under MPIGPU_SHARED_GPU=1 the kernels of two processes on one GPU take
    turns, so an instance's wait for the next call outlasts its slice and calls launch (results are
    checked either way)."""
    global _DEDICATED
    if _DEDICATED is None:
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        mine = node.Get_size() <= cp.cuda.runtime.getDeviceCount()
        node.Free()
        _DEDICATED = comm.allreduce(mine, op=MPI.LAND)
    return _DEDICATED


def recent_call(comm):
    """A blocking call on every rank, so that the next call does not come alone: a call after a gap
    longer than MPIGPU_RESIDENT_US since the last one launches (resident.cu), and the checks between
    calls can take longer than the second these tests give (CuPy compiles a kernel at its first use)."""
    global _RECENT
    if _RECENT is None:
        _RECENT = (cp.ones(4, cp.float32), cp.empty(4, cp.float32))
    cp.cuda.get_current_stream().synchronize()
    comm.Allreduce(*_RECENT)


@pytest.fixture(scope='module', autouse=True)
def lingering(world):
    """A second's limit (fixed when a team is set up) for the teams made here: no call here comes
    alone (but instances end between checks). World's team is set up first, with the default."""
    with settings(resident_us=1e6):
        yield


@pytest.fixture(scope='module')
def comm(world):
    """The communicator whose instance most tests use; test_then_direct frees it while it runs."""
    c = world.Dup()
    world.Barrier()
    gc.team_up(c)
    yield c
    gc.free(c)


def test_ll_calls(comm):
    """Every (dtype, op) pair, every LL collective (Reduce runs as the LL Allreduce), in and out of
    place; the largest piece LL takes (64 KiB: two passes of the grid). The first test on `comm`."""
    n = comm.Get_size()
    calls0 = resident_stats(comm)[0]
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
    with settings(algo='ll'):
        run_case(comm, 'Allreduce', 'float32', 'SUM', (64 << 10) // 4)
        run_case(comm, 'Allgather', 'int8', 'SUM', (64 << 10) - 3)
    # run_case's poisoning fill may still run on the stream at the call, which then launches, and a
    # call after a check that compiled a CuPy kernel (over a second, on a cold cache) comes alone
    if dedicated(comm):
        record('resident path ran the LL calls', resident_stats(comm)[0] - calls0 >= cases // 2,
               f'{resident_stats(comm)[0] - calls0} resident calls, {cases} cases')


def test_back_to_back(comm):
    """No host work between the calls but the blocking calls themselves: one instance runs them."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
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
    if dedicated(comm):
        record('resident instance stayed up back to back',
               after[0] - before[0] == 64 and after[2] == before[2] and after[1] - before[1] <= 2,
               f'(resident calls, launches, alone) {before} -> {after}')


def test_linger(comm):
    """How long an instance waits after a call follows the gaps between the program's calls
    (resident.cu), not the limit (MPIGPU_RESIDENT_US, a second on this communicator): one that waited
    through a 200 ms pause after a burst of calls would still run, and the call after the pause would
    launch no instance. (The wait is twice the longest recent gap, halved at each call: after the
    seven calls before a pause, at most 1 s / 2**6 even if the gap before them came close to the
    limit.) Calls rung while an instance waits, just as it gives up, or after it ended (pauses of
    0-60 us between calls) all complete. A call whose stream is busy launches after its work and ends
    the waiting instance, so the next call launches one."""
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


def test_ll128(comm):
    """Blocking LL128 calls in the resident kernel, whose grid (MPIGPU_RESIDENT_BLOCKS) is not the
    launched kernel's: every (dtype, op) pair and every form (one-shot, two-shot with phase 0 split,
    Reduce_scatter_block, Allgather, Bcast one-shot and scatter), ranks whose call is launched meeting
    ranks whose call runs resident, and calls past MPIGPU_RESIDENT_MAX_BYTES, which launch."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    calls0 = resident_stats(comm)[0]
    cases = 0
    for algo in ('ll128', 'll128-twoshot'):
        with settings(algo=algo):  # a form that does not apply (2 ranks, RS/AG two-shot) falls back
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
    if dedicated(comm):
        record('resident path ran the LL128 calls', calls1 - calls0 >= cases // 2,
               f'{calls1 - calls0} resident calls, {cases} cases')
    # half the ranks launch (work queued first), the others run resident, every form by size
    line_forms = (gc.algo_code('ll'), gc.algo_code('ll128'), gc.algo_code('ll128-twoshot'))
    for k, count in enumerate(((128 << 10) // 4 + 1, (2 << 20) // 4 + 7, (6 << 20) // 4 + 3) * 2):
        busy = (r + k) % 2 == 0
        for coll in ('Allreduce', 'Reduce_scatter_block', 'Allgather', 'Bcast'):
            m = count // n if coll in ('Reduce_scatter_block', 'Allgather') else count
            # idle ranks run the LL and LL128 forms resident up to MPIGPU_RESIDENT_MAX_BYTES (6 MiB on
            # 2 ranks: the direct kernel)
            message = m * 4 * (n if coll in ('Reduce_scatter_block', 'Allgather') else 1)
            recent_call(comm)
            if busy:
                spin_stream(3000)  # long enough that the host reaches the call before the stream drains
            a = cp.full(m * (n if coll == 'Reduce_scatter_block' else 1), r + 1, cp.float32)
            b = cp.full(m * (n if coll == 'Allgather' else 1), -1, cp.float32)
            if not busy:
                cp.cuda.get_current_stream().synchronize()
            # the path follows the stream as the call finds it (a spin the host outlasted leaves it idle:
            # on 4x H100 a 300 us spin once did, at the first size)
            idle = cp.cuda.get_current_stream().done
            resident = (idle and chosen_algo(comm, coll.lower(), m, 'auto') in line_forms
                        and message <= gc.mpigpu.config.resident_max_bytes)
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
                   f'busy={busy} stream idle={idle} resident calls {ran}, want {int(resident)}')
    # a limit of 256 KiB: a 1 MiB call launches, a 256 KiB one runs resident (2 MiB by default)
    with settings(resident_max_bytes=256 << 10):
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
        gc.free(small)


def test_block_counts(comm):
    """Back-to-back resident calls that each run on another number of the instance's blocks
    (resident_blocks_for: 1 for 4 KiB, 16 for a 64 KiB LL piece, every block for 1 MiB of LL128
    lines): blocks that sat out calls take the next one that needs them, and no call waits for a
    block it does not need. Inputs are made before and outputs checked after, so nothing but the
    calls runs between them; the counters prove that resident instances ran them all."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    blocks = gc.mpigpu.config.resident_blocks
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
    # Every call ran in a resident instance. How many instances is timing, not behaviour: an instance
    # waits about twice the recent gap between calls, and a gap stretched by the host scheduler (a peer
    # descheduled past it: 3 launches once in a 4-GPU run) ends it, so the next call launches another.
    record(f'resident block counts: resident instances ({blocks} blocks)', calls1 - calls0 == len(plan),
           f'{calls1 - calls0} resident calls of {len(plan)}, {launches1 - launches0} launches')


def test_launched_mix(comm):
    """Work queued on half the ranks' streams: those launch (after it), the others run resident."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    for k in range(4):
        busy = (r + k) % 2 == 0
        recent_call(comm)
        if busy:
            spin_stream(3000)  # long enough that the host reaches the call before the stream drains
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
        # the path follows the stream as the call finds it: a spin the host outlasted (descheduled past
        # it: once in a 2-GPU run) leaves an idle stream, which runs resident as it should
        record(f'resident/launched mix {k} path', ran == (1 if idle else 0),
               f'busy={busy} stream idle={idle} (resident calls, launches, alone) {before} -> {after}')


def _exchange_plan(comm, k, unit):
    """One blocking call of the all-to-all family numbered k, `unit` float32 elements per share: its
    name, a function that makes it, its output and the output MPI gives, and the largest pair of
    bytes this rank moves. Counts are uneven (zeros included) and displacements out of order."""
    n, r = comm.Get_size(), comm.Get_rank()
    F = MPI.FLOAT
    kind = ('Alltoall', 'Alltoallv', 'Allgatherv', 'Gatherv', 'Scatterv', 'Alltoall in place')[k % 6]
    root = k % n
    salt = 100.0 * (k % 7)
    if kind.startswith('Alltoall') and kind != 'Alltoallv':
        send = cp.concatenate([cp.full(unit, r * n + p + salt, cp.float32) for p in range(n)])
        want = cp.concatenate([cp.full(unit, q * n + r + salt, cp.float32) for q in range(n)])
        if kind == 'Alltoall':
            out = cp.full(n * unit, -1, cp.float32)
            return kind, lambda: comm.Alltoall(send, out), out, want, unit * 4
        return kind, lambda: comm.Alltoall(MPI.IN_PLACE, send), send, want, unit * 4
    if kind == 'Alltoallv':
        c = lambda s_, d: ((s_ + 2 * d + k) % 4) * unit  # noqa: E731 (elements rank s_ sends to rank d)
        scounts = [c(r, d) for d in range(n)]
        sdispls, at = [0] * n, 0
        for d in reversed(range(n)):  # blocks to higher ranks first: displacements out of order
            sdispls[d], at = at, at + scounts[d]
        send = cp.full(max(at, 1), -7, cp.float32)
        for d in range(n):
            send[sdispls[d]:sdispls[d] + scounts[d]] = r * n + d + salt
        rcounts = [c(q, r) for q in range(n)]
        rdispls = [sum(rcounts[:q]) for q in range(n)]
        out = cp.full(max(sum(rcounts), 1), -1, cp.float32)
        want = out.copy()
        for q in range(n):
            want[rdispls[q]:rdispls[q] + rcounts[q]] = q * n + r + salt
        biggest = 4 * max(scounts + rcounts)
        return kind, lambda: comm.Alltoallv([send, (scounts, sdispls), F], [out, (rcounts, rdispls), F]), out, want, biggest
    counts = [((q + k) % 3) * unit for q in range(n)]  # rank q's share (some zero)
    displs = [sum(counts[:q]) for q in range(n)]
    total = max(sum(counts), 1)
    full = cp.full(total, -1, cp.float32)
    for q in range(n):
        full[displs[q]:displs[q] + counts[q]] = q + salt
    mine = [cp.full(max(counts[r], 1), r + salt, cp.float32), counts[r], F]  # a zero share too
    if kind == 'Allgatherv':
        out = cp.full(total, -1, cp.float32)
        return kind, lambda: comm.Allgatherv(mine, [out, (counts, displs), F]), out, full, 4 * max(counts)
    if kind == 'Gatherv':
        out = cp.full(total, -1, cp.float32) if r == root else cp.full(1, -1, cp.float32)
        want = full if r == root else out.copy()
        recv = [out, (counts, displs), F] if r == root else None
        biggest = 4 * (max(counts) if r == root else counts[r])
        return kind, lambda: comm.Gatherv(mine, recv, root=root), out, want, biggest
    send = full.copy() if r == root else None  # Scatterv
    out = cp.full(max(counts[r], 1), -1, cp.float32)
    want = out.copy()
    want[:counts[r]] = r + salt
    spec = [send, (counts, displs), F] if r == root else None
    biggest = 4 * (max(counts) if r == root else counts[r])
    return kind, lambda: comm.Scatterv(spec, [out, counts[r], F], root=root), out, want, biggest


def _exchange_calls(comm, ll):
    """test_exchange_calls on `comm`, whose team moves pairs of at most `ll` bytes in the LL format."""
    n, r = comm.Get_size(), comm.Get_rank()
    most = gc.mpigpu.config.resident_max_bytes
    channel = gc.mpigpu.config.exchange_channel_bytes
    plan, resident, either = [], 0, 0
    units = (1, 250, 1000, 4096, 16384 + 3, 65536)  # float32 elements per share
    for k in range(36):
        unit = units[(k + k // 6) % 6]  # every kind at every size
        if k >= 30:  # pairs past the limit: launched
            unit = most // 4 + 1024
        name, call, out, want, biggest = _exchange_plan(comm, k, unit)
        # exchange_channels: an LL pair takes one channel, a larger one a channel per `channel` bytes
        fits = biggest <= most and (biggest <= ll or biggest <= channel)
        if 'in place' in name:
            # in place, the buffer is first copied to scratch on the call's stream (exchange_in_place.py):
            # the exchange runs resident only where that copy is done by the time it looks at the stream
            either += int(fits)
        else:
            resident += int(fits)
        plan.append((f'{name} k={k} unit={unit}', call, out, want))
        if k % 5 == 4:  # an LL call between them
            a, b = cp.full(33, r + 1, cp.float32), cp.full(33, -1, cp.float32)
            plan.append((f'Allreduce k={k}', (lambda a=a, b=b: comm.Allreduce(a, b)), b,
                         cp.full(33, n * (n + 1) // 2, cp.float32)))
            resident += 1
    recent_call(comm)
    before = resident_stats(comm)
    for _, call, _, _ in plan:
        call()
    after = resident_stats(comm)
    for name, _, out, want in plan:
        record(f'resident exchange {name}', bool(cp.array_equal(out, want)), 'wrong result')
    if dedicated(comm):
        record(f'resident exchange (LL to {ll} B): the calls that fit ran resident',
               resident <= after[0] - before[0] <= resident + either,
               f'(resident calls, launches, alone) {before} -> {after}, want {resident} resident calls '
               f'(and up to {either} in-place ones)')


def test_exchange_calls(comm):
    """Blocking calls of the all-to-all family with plain blocks in the resident kernel (exchange.cu,
    exchange_resident_form), back to back: Alltoall (and in place), Alltoallv, Allgatherv, Gatherv and
    Scatterv with uneven counts, zero counts and displacements out of order, at sizes from 4 B to 256 KiB
    a share, mixed with LL calls; calls of more than one channel launch, as do pairs past
    MPIGPU_RESIDENT_MAX_BYTES. With the default knobs every pair of one channel is in the LL format; a
    team whose LL format stops at 1 KiB runs FIFO pairs, and calls mixing both, resident. Then ranks
    whose call launches (work queued first) meet ranks whose call runs resident."""
    n, r = comm.Get_size(), comm.Get_rank()
    _exchange_calls(comm, gc.mpigpu.config.exchange_ll_bytes)
    with settings(exchange_ll_bytes=1024):
        fifo = comm.Dup()
        gc.team_up(fifo)
    _exchange_calls(fifo, 1024)
    # (on `fifo`: FIFO pairs of 4 KiB, whose slots lie at the sender for Scatterv, at the receiver for
    # Alltoallv, under MPIGPU_EXCHANGE_SLOTS=auto: a resident rank and a launched one agree on the end)
    for k, (team, kind, unit) in enumerate([(comm, 0, 256), (comm, 1, 256), (comm, 2, 256), (comm, 3, 256),
                                            (fifo, 4, 1024), (fifo, 1, 1024), (fifo, 4, 1024), (fifo, 1, 1024)]):
        busy = (r + k) % 2 == 0
        recent_call(team)
        if busy:
            spin_stream(3000)
        name, call, out, want, _ = _exchange_plan(team, 6 * k + kind, unit)
        if not busy:
            cp.cuda.get_current_stream().synchronize()
        idle = cp.cuda.get_current_stream().done
        s0 = resident_stats(team)[0]
        call()
        ran = resident_stats(team)[0] - s0
        record(f'resident/launched exchange mix {name} {k}', bool(cp.array_equal(out, want)), 'wrong result')
        record(f'resident/launched exchange mix {name} {k} path', ran == (1 if idle else 0),
               f'busy={busy} stream idle={idle} resident calls {ran}')
    gc.free(fifo)


def test_exchange_one_rank(world):
    """A one-rank team's exchanges launch (its resident instance only copies: resident_copy_kernel), back
    to back at small sizes, where they once ran there as a copy of one byte."""
    one = world.Split(world.Get_rank())
    gc.team_up(one)
    plan = [_exchange_plan(one, k, unit) for k in range(5) for unit in (1, 250, 4096)]
    recent_call(one)
    for _, call, _, _, _ in plan:
        call()
    for name, _, out, want, _ in plan:
        record(f'one-rank exchange {name} {out.size}', bool(cp.array_equal(out, want)), 'wrong result')
    gc.free(one)


def test_blocking_after_stream(comm):
    """A stream= call in flight, then a blocking call on another stream that reads its output."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
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


def test_then_direct(comm):
    """A direct kernel between resident calls (it stops the instance first); then the communicator
    is freed with its instance running."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    big = cp.full((32 << 20) // 4, r + 1, cp.float32)
    for k in range(3):
        a = cp.full(100, k + r, cp.float32)
        b = cp.empty(100, cp.float32)
        comm.Allreduce(a, b)
        comm.Allreduce(MPI.IN_PLACE, big)
        record(f'resident then direct {k}', bool((b == n * k + total - n).all()), 'small call')
    record('resident then direct: large', bool((big == total * n ** 2).all()), 'large calls')
    gc.free(comm)  # with its instance running


def test_calls_alone(world):
    """Calls that come alone (after a gap longer than MPIGPU_RESIDENT_US, here 1 ms) launch, and no
    instance starts for them; the next call soon after runs resident again."""
    n, r = world.Get_size(), world.Get_rank()
    with settings(resident_us=1000):
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
            record(f'resident: a call alone and the next {k}',
                   bool((b == k + n - 1).all() and (c == n * (k + n - 1)).all()), 'wrong result')
        gc.free(short)


def test_off(world):
    """MPIGPU_RESIDENT_US=0: every call launched, and LL only up to 32 KiB pieces."""
    with settings(resident_us=0):
        off = world.Dup()
        run_case(off, 'Allreduce', 'float32', 'SUM', 37)
        record('resident off', resident_stats(off) == (0, 0, 0), str(resident_stats(off)))
        for nbytes, want in ((32 << 10, 'll'), ((32 << 10) + 16, 'll128')):
            got = chosen_algo(off, 'allreduce', nbytes // 4, 'auto')
            record(f'select allreduce without a resident kernel bytes={nbytes}', got == gc.algo_code(want),
                   f'chose {got}')
        gc.free(off)
    gc.say('world resident kernel (calls, launches, alone):', resident_stats(world))
