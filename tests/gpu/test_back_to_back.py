"""Calls with no host work between them: two communicators alternately, producers on a non-default
stream, and calls of every protocol back to back on one stream.
`mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_back_to_back.py`."""
import gpucheck as gc
from gpucheck import cp, record, settings


def test_two_communicators(world):
    """Many calls, two communicators alternately."""
    other = world.Dup()
    x = cp.arange(1 << 16, dtype=cp.float32) * (world.Get_rank() + 1)
    total = sum(range(1, world.Get_size() + 1))
    for i in range(200):
        c = world if i % 2 else other
        y = cp.empty_like(x)
        c.Allreduce(x, y)
        if i % 50 == 0:
            record('back-to-back', bool(cp.allclose(y, cp.arange(1 << 16, dtype=cp.float32) * total)), f'iteration {i}')
    gc.free(other)


def test_stream_ordered(world):
    """A producer on a non-default stream: the call must order itself after it."""
    x = cp.arange(1 << 16, dtype=cp.float32) * (world.Get_rank() + 1)
    total = sum(range(1, world.Get_size() + 1))
    cp.cuda.get_current_stream().synchronize()  # x is ready before the non-blocking stream reads it
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for i in range(20):
            z = x * 2
            w = cp.empty_like(z)
            world.Allreduce(z, w)
            record('stream-ordered', bool(cp.allclose(w, cp.arange(1 << 16, dtype=cp.float32) * 2 * total)), f'it {i}')


def test_mixed_protocols(world):
    """Calls of every protocol (LL, LL128 one- and two-shot, direct, ring) back to back on one stream
    with no host synchronization between them: each protocol's reuse of its buffers without acks
    must hold across calls of the others, and the Bcasts (two in a row, roots changing, whose root
    receives nothing) must make the next call wait for its peers' acks; Reduces whose non-roots own
    empty shards must still hear from their peers before reusing the areas."""
    comm = world
    n, r = comm.Get_size(), comm.Get_rank()
    total = sum(range(1, n + 1))
    counts = [256, 1 << 16, (1 << 19) + 7, 5, (1 << 20) + 3, 3 << 20]
    base = {c: cp.arange(c, dtype=cp.float32) % 97 for c in counts}
    # Written on the current stream; s is non-blocking, so its first calls could read them unwritten
    # (the first Reduce's result was wrong on rank 0 in 2 of 5 runs on a shared GPU before this).
    cp.cuda.get_current_stream().synchronize()
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
                with settings(algo='ring'):
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
            if i % 2 == 0:  # Reduce as the LL128 two-shot on 5 elements: most ranks own an empty shard
                with settings(algo='ll128-twoshot'):
                    root = (i // 2) % n
                    rd = cp.full(5, -1, cp.float32) if r == root else None
                    comm.Reduce(base[5] * (r + 1), rd, root=root, stream=s)
                    if r == root:
                        pending.append((f'll128-twoshot Reduce root={root}', 5, rd, base[5] * total))
            y = cp.empty(c, cp.float32)
            comm.Allreduce(base[c] * (r + 1), y, stream=s)
            pending.append(('Allreduce', c, y, base[c] * total))
    s.synchronize()
    for i, (name, c, got, want) in enumerate(pending):
        record(f'mixed protocols back to back: {name} count={c} #{i}', bool(cp.array_equal(got, want)), 'wrong result')
