"""The engine's protocol and step choices (select.cu), checked by result and read back from the
team: one step over several FIFO slots (fused steps), LL128 areas of other sizes, Reduce's rule and
the Allreduce's line protocol by size.
`mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_protocols.py`."""
import numpy as np

import gpucheck as gc
import wide_steps
from gpucheck import DT, chosen, chosen_algo, cp, record, run_case, settings


def test_fused_steps(world):
    """A channel's whole span as one step over 2-4 consecutive FIFO slots (select.cu, kMaxFusedSlots),
    reached with 2 channels: Allreduce (one- and two-shot) and Reduce_scatter_block whose spans take
    1-5 slots, in and out of place, offset views, 16-bit types; the engine's step for each, and at
    counts whose span crosses a slot boundary only once the two-shot shards are rounded to whole
    vectors (16-bit types), where select and the plan must count the same slots; then such calls back
    to back on one stream with no host synchronization (wide_steps.burst). (Wide steps on split warps:
    the split sweep's two-shot Allreduce of 70001 elements, test_sweep.py, 2 slots per channel in
    float32 on 4 ranks, 3 in float64.)"""
    n = world.Get_size()
    with settings(nchannels=2):
        comm = world.Dup()
        slot = gc.mpigpu.config.chunk_bytes
        for coll, algo in wide_steps.CASES:
            with settings(algo=algo):
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
        # Just past a slot boundary: float16 two-shot shards of whole vectors (8 elements) put up to
        # 30 bytes more in a channel's span than the message divided by n and 2 (3 and 4 ranks).
        with settings(algo='twoshot'):
            for slots in range(1, wide_steps.MAX_SLOTS + 1):
                edge = n * 2 * slots * slot // 2
                for count in (edge - 8 * n - 1, edge - 1, edge + 1, edge + 8 * n + 1):
                    got = chosen(comm, 'allreduce', count, 'twoshot', 2, 'float16')
                    if got is not None:
                        span = wide_steps.span_bytes(n, 'Allreduce', 'twoshot', 2, count)
                        want = wide_steps.step_bytes(-(-span // slot))
                        record(f'select step at a slot edge n={n} float16 count={count}', got[2] == want,
                               f'chose {got}, the plan cuts {want}')
                    run_case(comm, 'Allreduce', 'float16', 'SUM', count)
        s = cp.cuda.Stream(non_blocking=True)
        pending = wide_steps.burst(comm, s, [1 + (i * 7) % (wide_steps.MAX_SLOTS + 1) for i in range(36)])
        s.synchronize()
        for i, (name, c, got, want) in enumerate(pending):
            record(f'wide steps back to back: {name} count={c} #{i}', bool(cp.array_equal(got, want)), 'wrong result')
        gc.free(comm)


def test_ll128_area_sizes(world):
    """Teams with other LL128 areas (MPIGPU_LL128_BYTES): none (every LL128 request falls back) and
    8 MiB (Bcast scatter and Allreduce two-shot on pieces past the default 2 MiB). The results alone
    cannot show which form ran, so the engine's choice is checked too."""
    n = world.Get_size()
    big = (12 << 20) // 4 + 3
    for area in (0, 8 << 20):
        with settings(ll128_bytes=area):
            comm = world.Dup()
            for algo in ('ll128', 'll128-twoshot', 'auto'):
                with settings(algo=algo):
                    for count in (1003, big):
                        run_case(comm, 'Allreduce', 'float32', 'SUM', count)
                        run_case(comm, 'Reduce_scatter_block', 'float32', 'SUM', count // n)
                        run_case(comm, 'Allgather', 'int32', 'SUM', count // n, offset=3)
                        for root in (0, n - 1):
                            run_case(comm, 'Bcast', 'float32', 'SUM', count, root=root)
            lines = (gc.algo_code('ll128'), gc.algo_code('ll128-twoshot'))
            if area == 0:  # no areas: no LL128 form, whatever is asked
                for coll in ('allreduce', 'bcast'):
                    for count in (1003, big):
                        for algo in ('ll128', 'll128-twoshot', 'auto'):
                            got = chosen_algo(comm, coll, count, algo)
                            record(f'select without LL128 areas coll={coll} count={count} algo={algo}',
                                   got not in lines, f'chose {got}')
            else:  # 8 MiB areas: the two-shot Allreduce (and scatter Bcast, 3+ ranks) on a 12 MiB message
                for coll in (('allreduce', 'bcast') if n > 2 else ('allreduce',)):
                    got = chosen_algo(comm, coll, big, 'll128-twoshot')
                    record(f'select with 8 MiB LL128 areas coll={coll} count={big}',
                           got == gc.algo_code('ll128-twoshot'), f'chose {got}')
            gc.free(comm)


def test_reduce_selection(world):
    """Reduce's rule in select.cu (kReduceChainMinBytes): below 1 MiB the Allreduce's LL / LL128
    forms; from 1 MiB the chain on 3+ ranks and the direct one-shot on 2, never an LL form (a 1-2 MiB
    Reduce once fell into the Reduce_scatter_block rule and ran LL128 one-shot, correctly but slowly,
    which results cannot show)."""
    n = world.Get_size()
    lines = (gc.algo_code('ll'), gc.algo_code('ll128'), gc.algo_code('ll128-twoshot'))
    for nbytes in (4 << 10, 256 << 10, (1 << 20) - 16, 1 << 20, 2 << 20, 4 << 20):
        got = chosen_algo(world, 'reduce', nbytes // 4, 'auto')
        want = got in lines if nbytes < 1 << 20 else got == gc.algo_code('ring' if n > 2 else 'oneshot')
        record(f'select Reduce n={n} bytes={nbytes}', want, f'chose {got}')


def test_protocol_selection(world):
    """The Allreduce's line protocol (select.cu): LL for pieces up to 64 KiB with a resident kernel
    (kLLResidentMaxAutoBytes; the default), else up to 32 KiB (kLLMaxAutoBytes, test_resident.py's
    team without one); then on 2 ranks one-shot LL128 while the piece fits its area (2 MiB by
    default), on 3+ two-shot LL128 from 256 KiB. Results are the same either way, so the choice is
    read back."""
    n = world.Get_size()
    for nbytes, want in ((16 << 10, 'll'), (64 << 10, 'll'), ((64 << 10) + 16, 'll128')):
        got = chosen_algo(world, 'allreduce', nbytes // 4, 'auto')
        record(f'select allreduce n={n} bytes={nbytes}', got == gc.algo_code(want), f'chose {got}')
    for nbytes in (512 << 10, 2 << 20):
        got = chosen_algo(world, 'allreduce', nbytes // 4, 'auto')
        want = gc.algo_code('ll128' if n == 2 else 'll128-twoshot')
        record(f'select allreduce n={n} bytes={nbytes}', got == want, f'chose {got}')
