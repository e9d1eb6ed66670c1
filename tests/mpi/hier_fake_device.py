"""The hierarchical path on CPUs: MPIGPU_SIMULATE_NODES cuts the ranks into simulated nodes, a fake CUDA
layer (host memory plays device memory) runs the node phases staged (it has no device team) and the
network phases over the fake layer's NCCL (host MPI underneath; MPIGPU_NET=mpi: through host MPI, the
fallback). Every collective x form (rail, leader, the model's) x root x in-place,
in blocking, non-blocking, persistent and stream= forms, checked bit for bit against mpi4py on NumPy
buffers (inputs whose reductions are exact in any order), float16 and bfloat16 against the
composition's own order (node ranks in order, then nodes in order, accumulating in float32), and
bitwise identical on every rank. Run under mpiexec -n 2..6 with MPIGPU_SIMULATE_NODES=2..3
(tests/test_hier.py)."""
import os

import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, fake, graphs as fake_graphs, install

install()
import mpigpu  # noqa: E402
from mpigpu._describe import call as _call
from mpigpu._state import comm_state as _state  # noqa: E402
from mpigpu._base.codes import Coll, Dtype, Op  # noqa: E402
from mpigpu._paths import hier  # noqa: E402
from mpigpu._paths.hier import calls as hier_calls, net as hier_net, progress as hier_progress, state as hier_state  # noqa: E402
from mpigpu._state.topology import simulated_node  # noqa: E402

config = mpigpu.config
config.hier_chunk_bytes = 96     # many chunks, more than the pipeline's slots
config.stage_chunk_bytes = 4096  # staged node phases cut into chunks too

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
K = int(os.environ['MPIGPU_SIMULATE_NODES'])
nodes = [simulated_node(r, n, K) for r in range(n)]
checks = 0


def same(got, want, what):
    global checks
    checks += 1
    assert got.tobytes() == want.tobytes(), f'rank {rank}: {what}: got {got[:6]}... want {want[:6]}...'


def everywhere(a, what):
    """The same bytes on every rank."""
    global checks
    checks += 1
    rows = plain.allgather(a.tobytes())
    assert all(r == rows[0] for r in rows), f'rank {rank}: {what}: ranks differ'


def exact(count, dt, salt, r=rank):
    """Inputs whose sums and products are exact in any order (small integers, also as floats)."""
    v = (np.arange(count) * (r + 3) + salt) % 5 - 2
    if dt == np.bool_:
        return v > 0
    if np.dtype(dt).kind == 'u':
        v = np.abs(v)
    return v.astype(dt)


def bf16(a32):
    """float32 -> bfloat16 bits (round to nearest even), as the host reduction rounds."""
    u = a32.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def unbf16(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def composed(rows, kind):
    """The hierarchical path's float16/bfloat16 sum: each node's ranks in order, then the nodes in
    order, each accumulated in float32 and rounded once."""
    to32 = (lambda a: a.astype(np.float32)) if kind == 'f16' else unbf16
    back = (lambda a: a.astype(np.float16)) if kind == 'f16' else bf16
    partial = []
    for node in sorted(set(nodes)):
        acc = None
        for r in range(n):
            if nodes[r] == node:
                acc = to32(rows[r]) if acc is None else acc + to32(rows[r])
        partial.append(back(acc))
    acc = to32(partial[0])
    for p in partial[1:]:
        acc = acc + to32(p)
    return back(acc)


def rand16(count, kind, r):
    a = np.random.default_rng(1000 + r).uniform(-1, 1, count).astype(np.float32)
    return a.astype(np.float16) if kind == 'f16' else bf16(a)


# ---- the forms, each call shape -----------------------------------------------------------------------
FORMS = ('hier', 'hier-rail', 'hier-leader')
# HIER_SWEEP=short: the blocking sweep at one count and one type per form (tests/test_hier.py's variants
# that change one thing, the transport or the thread level, after the full sweep ran on the same shapes)
SHORT = os.environ.get('HIER_SWEEP') == 'short'
COUNTS = (7,) if SHORT else (1, 7, 333)
ROOTS = range(n) if n <= 4 else (0, n // 2, n - 1)
MODES = ('blocking', 'nonblocking', 'persistent', 'stream')


def call(mode, name, *args, root=None):
    """world.<name>(*args) in the given form."""
    if mode == 'blocking':
        getattr(world, name)(*args)
    elif mode == 'nonblocking':
        getattr(world, 'I' + name[0].lower() + name[1:])(*args).Wait()
    elif mode == 'persistent':
        req = getattr(world, name + '_init')(*args)
        req.Start()
        req.Wait()
        req.Free()
    else:
        stream = 7 + rank  # a stream of the caller's (a number to the fake layer)
        getattr(world, name)(*args, stream=stream)
        fake.stream_sync(stream)


def run_all(mode, form, count, dt):
    config.algo = form
    what = f'{mode} {form} count {count} {np.dtype(dt).name}'
    # Allreduce, out of place and in place
    ops = ((MPI.LOR, 'lor'), (MPI.LXOR, 'lxor')) if dt == np.bool_ else ((MPI.SUM, 'sum'), (MPI.MAX, 'max'))
    for op, npop in ops:
        x = exact(count, dt, 1)
        want = np.empty_like(x)
        plain.Allreduce(x, want, op)
        out = np.zeros_like(x)
        call(mode, 'Allreduce', FakeCAI(x), FakeCAI(out), op)
        same(out, want, f'Allreduce {npop} {what}')
        buf = x.copy()
        call(mode, 'Allreduce', MPI.IN_PLACE, FakeCAI(buf), op)
        same(buf, want, f'Allreduce in place {what}')
    # Bcast from every root
    for root in ROOTS:
        b = exact(count, dt, 2)
        call(mode, 'Bcast', FakeCAI(b), root)
        same(b, exact(count, dt, 2, root), f'Bcast root {root} {what}')
    # Reduce to every root, out of place and in place
    op = MPI.SUM if dt != np.bool_ else MPI.LAND
    x = exact(count, dt, 3)
    for root in ROOTS:
        want = np.empty_like(x)
        plain.Reduce(x, want, op, root)
        out = np.zeros_like(x)
        call(mode, 'Reduce', FakeCAI(x), FakeCAI(out), op, root)
        if rank == root:
            same(out, want, f'Reduce root {root} {what}')
        buf = x.copy()
        call(mode, 'Reduce', MPI.IN_PLACE if rank == root else FakeCAI(buf), FakeCAI(buf), op, root)
        if rank == root:
            same(buf, want, f'Reduce in place root {root} {what}')
    # Reduce_scatter_block, out of place and in place
    x = exact(count * n, dt, 4)
    want = np.empty(count, x.dtype)
    plain.Reduce_scatter_block(x, want, op)
    out = np.zeros(count, x.dtype)
    call(mode, 'Reduce_scatter_block', FakeCAI(x), FakeCAI(out), op)
    same(out, want, f'Reduce_scatter_block {what}')
    buf = x.copy()
    call(mode, 'Reduce_scatter_block', MPI.IN_PLACE, FakeCAI(buf), op)
    same(buf[:count], want, f'Reduce_scatter_block in place {what}')
    # Allgather, out of place and in place
    x = exact(count, dt, 5)
    want = np.empty(count * n, x.dtype)
    plain.Allgather(x, want)
    out = np.zeros(count * n, x.dtype)
    call(mode, 'Allgather', FakeCAI(x), FakeCAI(out))
    same(out, want, f'Allgather {what}')
    buf = np.zeros(count * n, x.dtype)
    buf[rank * count:(rank + 1) * count] = x
    call(mode, 'Allgather', MPI.IN_PLACE, FakeCAI(buf))
    same(buf, want, f'Allgather in place {what}')


def sixteen(mode, form, count, kind):
    """float16 / bfloat16 sums: the composition's order, bit for bit, the same on every rank. bfloat16
    arrays reach mpigpu through DLPack only: here a uint16 array's call is retyped before it runs."""
    config.algo = form
    rows = [rand16(count, kind, r) for r in range(n)]
    want = composed(rows, kind)
    full = [rand16(count * n, kind, r + 50) for r in range(n)]
    out = np.zeros_like(rows[rank])
    if kind == 'bf16':
        direct('Allreduce', Coll.ALLREDUCE, rows[rank], out, 0)
    else:
        call(mode, 'Allreduce', FakeCAI(rows[rank]), FakeCAI(out), MPI.SUM)
    same(out, want, f'Allreduce {kind} {mode} {form} {count}')
    everywhere(out, f'Allreduce {kind} {mode} {form}')
    for root in (0, n - 1):
        out = np.zeros_like(rows[rank])
        if kind == 'bf16':
            direct('Reduce', Coll.REDUCE, rows[rank], out if rank == root else None, root)
        else:
            call(mode, 'Reduce', FakeCAI(rows[rank]), FakeCAI(out), MPI.SUM, root)
        if rank == root:
            same(out, want, f'Reduce {kind} root {root} {mode} {form} {count}')
    out = np.zeros(count, full[0].dtype)
    if kind == 'bf16':
        direct('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, full[rank], out, 0)
    else:
        call(mode, 'Reduce_scatter_block', FakeCAI(full[rank]), FakeCAI(out), MPI.SUM)
    same(out, composed(full, kind)[rank * count:(rank + 1) * count], f'Reduce_scatter_block {kind} {form}')


def direct(name, coll, send, recv, root):
    """A bfloat16 SUM on the hierarchical path: the call of uint16 arrays, retyped."""
    st = _state.state_of(world)
    c = _call.build(name, coll, n, rank, FakeCAI(send), None if recv is None else FakeCAI(recv), MPI.SUM, root,
                    lambda d: None)
    c.dtype, c.op_code = Dtype.BFLOAT16, Op.SUM
    assert hier.runs(st, c)
    hier.run(st, c, 0, True)


for form in FORMS:
    for count in COUNTS:
        for dt in (np.float64,) if SHORT else (np.float64, np.int32) + ((np.uint8, np.bool_) if form == 'hier' else ()):
            run_all('blocking', form, count, dt)
for mode in ('nonblocking', 'persistent', 'stream'):
    for form in ('hier-rail', 'hier-leader'):
        run_all(mode, form, 333, np.float32)
# stream= calls on the progress thread, the caller's stream held by a wait for the host (the fake
# layer's staged node phases would otherwise complete them before they return)
inline = hier_calls.stream_waits
hier_calls.stream_waits = lambda hs: hier_progress.threads()
for form in FORMS:
    run_all('stream', form, 333, np.float32)
    run_all('stream', form, 7, np.int32)
hier_calls.stream_waits = inline
hier_net.GPU_REDUCE_BYTES = 0  # the reductions through the CUDA layer's reduce_rows (host code here)
for form in FORMS:
    run_all('blocking', form, 333, np.int32)
    sixteen('blocking', form, 333, 'f16')
hier_net.GPU_REDUCE_BYTES = 1 << 20
for form in FORMS:
    for count in (5, 333):
        sixteen('blocking', form, count, 'f16')
        sixteen('blocking', form, count, 'bf16')
sixteen('stream', 'hier-rail', 333, 'f16')
sixteen('nonblocking', 'hier-leader', 333, 'f16')

# the model's forms and the status
config.algo = 'hier'
status = world.engine_status()
assert status.startswith('hierarchical: '), status
assert f'{len(set(nodes))} nodes' in status, status
hs = _state.state_of(world)._owned[hier_state.HierState]
assert hs.topo.nnodes == len(set(nodes)) and hs.topo.sizes == [nodes.count(k) for k in sorted(set(nodes))]
assert hs.node.kind in ('staged', 'single'), hs.node.kind
# the network's transport: the fake layer's NCCL unless MPIGPU_NET=mpi (every call above ran on it)
network = 'nccl' if hs.dnet is not None else 'mpi'
assert network == ('mpi' if config.net == 'mpi' else 'nccl'), (network, config.net)
assert ('fake NCCL' in status) == (network == 'nccl'), status

# calls that come again on the same buffers: recorded as a graph the second time, replayed after, by the
# ranks whose every phase runs on the GPU (a transport of device memory, a node of one rank here; a
# rank of a staged node issues each call's steps, and ranks may differ: the work is the same)
config.algo = 'hier'
recorded = len(fake_graphs)
x, out, b = exact(333, np.float32, 1), np.zeros(333, np.float32), np.zeros(333, np.float64)
xs, outs, bs = FakeCAI(x), FakeCAI(out), FakeCAI(b)
for i in range(4):
    x[:] = exact(333, np.float32, 1 + i)  # each replay reads the buffers as they are at its launch
    want = np.empty_like(x)
    plain.Allreduce(x, want, MPI.SUM)
    out[:] = 0
    if i == 3:
        world.Allreduce(xs, outs, MPI.SUM, stream=7 + rank)
        fake.stream_sync(7 + rank)
    else:
        world.Allreduce(xs, outs, MPI.SUM)
    same(out, want, f'Allreduce, call {i} on the same buffers')
    root = n - 1
    b[:] = exact(333, np.float64, 10 + i, root) if rank == root else 0
    world.Bcast(bs, root)
    same(b, exact(333, np.float64, 10 + i, root), f'Bcast, call {i} on the same buffers')
launches = [g.launches for g in fake_graphs[recorded:]]
assert launches == ([3, 3] if hs.replays is not None else []), ('recorded calls and their launches', launches)
checks += 1
# the fast path's entry into them (mpigpu/_ext/_fast.pxi reads the call on a GPU, then calls this): an
# all-device call launches its graph; where a peer brings host memory, the entry hands the call to the
# general path with the verdict, and every rank makes the host MPI call
replayed = _state.state_of(world).hier_replayed
assert (replayed is not None) == (hs.replays is not None)
for host_rank in (None, 0, None):
    x[:] = exact(333, np.float32, 30 + rank if host_rank is None else 40)
    want = np.empty_like(x)
    plain.Allreduce(x, want, MPI.SUM)
    out[:] = 0
    if rank == host_rank:
        world.Allreduce(x, out, MPI.SUM)  # numpy: host memory
    elif replayed is None:
        world.Allreduce(xs, outs, MPI.SUM)
    else:
        graph = fake_graphs[recorded]
        before = graph.launches
        ran = replayed(Coll.ALLREDUCE, 0, Dtype.FLOAT32, Op.SUM, x.ctypes.data, out.ctypes.data, 333, False, 0, False)
        assert ran == (host_rank is None) and graph.launches == before + ran, (host_rank, ran, graph.launches, before)
        if not ran:  # agreed on the host MPI call: the general path makes it, with the verdict kept
            world.Allreduce(xs, outs, MPI.SUM)
    same(out, want, f'Allreduce through the fast entry, host memory on rank {host_rank}')

# a CUDA-aware MPI takes device pointers in the copying phases (fake device memory is host memory)
config.mpi_cuda_aware, net = '1', config.net
config.net = 'mpi'  # (NCCL, where there is one, comes before a CUDA-aware MPI)
aware = world.Dup()
for form in FORMS:
    config.algo = form
    for root in ROOTS:
        b = exact(333, np.float32, 2)
        aware.Bcast(FakeCAI(b), root)
        same(b, exact(333, np.float32, 2, root), f'CUDA-aware Bcast {form} root {root}')
    x = exact(333, np.float32, 5)
    want = np.empty(333 * n, np.float32)
    plain.Allgather(x, want)
    out = np.zeros(333 * n, np.float32)
    aware.Allgather(FakeCAI(x), FakeCAI(out))
    same(out, want, f'CUDA-aware Allgather {form}')
    x = exact(333, np.float32, 1)
    want = np.empty_like(x)
    plain.Allreduce(x, want, MPI.SUM)
    out = np.zeros_like(x)
    aware.Allreduce(FakeCAI(x), FakeCAI(out), MPI.SUM)
    same(out, want, f'CUDA-aware Allreduce {form}')
assert _state.state_of(aware)._owned[hier_state.HierState].cuda_aware
config.mpi_cuda_aware, config.net = 'auto', net
aware.Free()

# ranks that disagree on MPIGPU_NET still agree on one transport: host MPI where one rank asks for it
if config.net != 'mpi':
    net = config.net
    config.net = 'mpi' if rank == 0 else net
    mixed = world.Dup()
    x = exact(333, np.float32, 1)
    want = np.empty_like(x)
    plain.Allreduce(x, want, MPI.SUM)
    out = np.zeros_like(x)
    mixed.Allreduce(FakeCAI(x), FakeCAI(out), MPI.SUM)
    same(out, want, 'Allreduce, rank 0 with MPIGPU_NET=mpi')
    assert _state.state_of(mixed)._owned[hier_state.HierState].dnet is None, 'mixed MPIGPU_NET: NCCL taken'
    if rank:
        assert 'no NCCL: rank 0: MPIGPU_NET=mpi' in mixed.engine_status(), mixed.engine_status()
    config.net = net
    mixed.Free()

# a sub-communicator of one simulated node has no hierarchical path
config.algo = 'hier'
mine = world.Split(nodes[rank], rank)
if mine.Get_size() > 1:  # (the fake layer has no team for a node of one rank to set up)
    x = exact(9, np.float64, 1)
    out = np.zeros_like(x)
    mine.Allreduce(FakeCAI(x), FakeCAI(out), MPI.SUM)
    want = np.empty_like(x)
    mine.Allreduce(x, want, MPI.SUM)
    same(out, want, 'one node')
    assert not mine.engine_status().startswith('hierarchical'), mine.engine_status()
mine.Free()

world.Barrier()
if rank == 0:
    print(f'hierarchical path on {n} ranks as {len(set(nodes))} simulated nodes '
          f'({"+".join(str(nodes.count(k)) for k in sorted(set(nodes)))}), network: {network}: {checks} checks ok',
          flush=True)
