"""The hierarchical path's cost model: the predicted time of each form of a collective across nodes, from
the node's figures (NVLink, PCIe, host work: constants measured on the 4x H200 host) and the network's
latency and bandwidth per GPU, one way and each way of an exchange (measured at setup or set by knobs,
mpigpu/_state/topology.py), and the choice
of form and pipeline depth. The same functions print docs/scaling.md's tables (python -m
mpigpu.perf.model).

Forms: 'rail' (even nodes: every GPU carries 1/L of the bytes over its own rail), 'leader' (one GPU per
node carries everything: fewer steps, any node sizes) and, for the tables only, 'flat' (one ring over
every GPU, what an MPI that ignores the nodes does). A pipelined form of C chunks whose stages take
t_1..t_s per chunk takes sum(t) + (C - 1) * max(t). Every choice is a pure function of the call and of
figures every rank agreed on, so all ranks choose alike; all hierarchical forms give the same bits
(calls.py), so a choice that follows the measured network changes no result.
"""
import math
from dataclasses import dataclass

from ..._base.codes import Coll
from .net import GPU_REDUCE_BYTES, SMALL_BYTES

# The node (4x H200 SXM host: docs/benchmarks.md, and the NCCL and hardware figures measured there):
NODE_US = 12.0           # one node-phase kernel, launched without waiting, through to its event
NVLINK_GBPS = 340.0      # bytes each GPU stores into its peers per second, all GPUs at once
STAGED_NODE_US = 60.0    # a node phase through host MPI (no device team on the node)
STAGED_NODE_GBPS = 2.0
COPY_US = 10.0           # one copy between the GPU and pinned memory, issued and waited for
PCIE_GBPS = 50.0         # pinned host <-> device, one direction
HOST_REDUCE_GBPS = 4.0   # NumPy reducing rows in host memory, per byte of the rows
GPU_REDUCE_US = 12.0     # the GPU reducing rows in pinned memory (read over PCIe): launch and wait
HBM_GBPS = 2000.0        # the GPU reading rows in its own memory (half the 4,250 GB/s a device copy moves)
STEP_US = 30.0           # the host's own work per pipeline step (Python: events, MPI calls)
MIN_CHUNK = 256 * 1024   # pipeline chunks per rank at least this large (fewer steps cost less host time)
MAX_CHUNKS = 64


@dataclass(frozen=True)
class Shape:
    """What the model knows of a communicator: node sizes (node order), whether each node's ranks are
    consecutive, how its node phases run ('engine', 'staged' or 'single' per node), whether MPI takes
    device pointers, the network (latency us, GB/s per GPU one way; GB/s each way while a GPU sends and
    receives at once, 0: the same), whether its transport moves device memory (NCCL: no staging
    copy, reductions read device memory), and what the agreement across nodes costs every call (us,
    measured at setup: the same for every form)."""
    sizes: tuple
    consecutive: bool
    kinds: tuple
    cuda_aware: bool
    latency_us: float
    gbps: float
    device_net: bool = False
    gbps_both: float = 0.0
    agree_us: float = 0.0

    @property
    def nodes(self):
        return len(self.sizes)

    @property
    def even(self):
        return len(set(self.sizes)) == 1


def lg(n):
    """ceil(log2(n)) steps of a tree or recursive halving over n ranks (0 for one)."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 0


# ---- network phases (seconds) over n ranks, x bytes per rank --------------------------------------
def _a(s):
    return s.latency_us * 1e-6


def _b(s, x):
    """x bytes one way (a tree's or a chain's step: the rank sends or receives)."""
    return x / (s.gbps * 1e9)


def _b2(s, x):
    """x bytes each way of a rank that sends and receives at once (exchanges, rings): over NCCL's sockets
    between the simulated nodes of one host half the one-way rate each (docs/scaling.md)."""
    return x / ((s.gbps_both or s.gbps) * 1e9)


def _reduce(s, rows_bytes, gpu):
    """Reducing rows of rows_bytes in all: on the GPU (reading device memory where the transport moves
    it, else pinned memory over PCIe) or the host."""
    if s.device_net:
        return GPU_REDUCE_US * 1e-6 + rows_bytes / (HBM_GBPS * 1e9)
    if gpu:
        return GPU_REDUCE_US * 1e-6 + rows_bytes / (PCIE_GBPS * 1e9)
    return rows_bytes / (HOST_REDUCE_GBPS * 1e9)


def net_allreduce(s, n, x, gpu=False):
    if n <= 1:
        return 0.0
    if x * n <= SMALL_BYTES:  # Allgather, then every rank reduces all n rows
        return lg(n) * _a(s) + (n - 1) * _b2(s, x) + _reduce(s, n * x, gpu)
    rs = (n - 1) * _a(s) + (n - 1) / n * _b2(s, x) + _reduce(s, x, gpu)  # Alltoallv, reduce
    return rs + lg(n) * _a(s) + (n - 1) / n * _b2(s, x)  # Allgatherv


def net_reduce(s, n, x, gpu=False):
    if n <= 1:
        return 0.0
    if x * n <= SMALL_BYTES:  # host MPI gathers the rows to the root (one way), a device transport all-gathers
        return lg(n) * _a(s) + (n - 1) * (_b2(s, x) if s.device_net else _b(s, x)) + _reduce(s, n * x, gpu)
    return ((n - 1) * _a(s) + (n - 1) / n * _b2(s, x) + _reduce(s, x, gpu)
            + lg(n) * _a(s) + (n - 1) / n * _b(s, x))  # the root gathers: one way


def net_bcast(s, n, x):
    """MPI's Bcast (MPICH's choices): a binomial tree for short messages or 2 ranks, scatter then a
    recursive-doubling allgather up to 512 KiB, scatter then a ring allgather above."""
    if n <= 1:
        return 0.0
    if x <= 12 * 1024 or n == 2:
        return lg(n) * (_a(s) + _b(s, x))
    spread = (n - 1) / n * (_b(s, x) + _b2(s, x))  # the scatter one way, the allgather both ways at once
    if x <= 512 * 1024:
        return 2 * lg(n) * _a(s) + spread
    return (lg(n) + n - 1) * _a(s) + spread


def net_allgather(s, n, total):
    """Every rank ends with `total` bytes, 1/n of them its own."""
    if n <= 1:
        return 0.0
    return lg(n) * _a(s) + (n - 1) / n * _b2(s, total)


# ---- node phases (seconds): bytes each rank stores ------------------------------------------------
def _node(s, stored):
    kinds = set(s.kinds)
    if kinds == {'single'}:
        return 0.0
    if 'staged' in kinds:
        return STAGED_NODE_US * 1e-6 + stored / (STAGED_NODE_GBPS * 1e9)
    return NODE_US * 1e-6 + stored / (NVLINK_GBPS * 1e9)


def _copy(s, x, reduces):
    """A staging copy of x bytes (none where the transport moves device memory, nor where MPI takes
    device pointers and the phase only copies)."""
    if s.device_net or (s.cuda_aware and not reduces):
        return 0.0
    return COPY_US * 1e-6 + x / (PCIE_GBPS * 1e9)


def _pipelined(stages, chunks, serial):
    """A pipeline of `chunks` chunks whose stages take `stages` each; `serial`: no overlap (node
    phases staged through host MPI block the host that drives everything)."""
    if serial:
        return chunks * sum(stages)
    return sum(stages) + (chunks - 1) * max(stages)


def _chunk_counts(per_rank, chunk_bytes):
    if chunk_bytes:
        return [max(1, math.ceil(per_rank / chunk_bytes))]
    counts, c = [], 1
    while c <= MAX_CHUNKS and (c == 1 or per_rank // c >= MIN_CHUNK):
        counts.append(c)
        c *= 2
    return counts


# ---- the forms ------------------------------------------------------------------------------------
def _forms(coll, nbytes, s, chunks, itemsize):
    """{form: (seconds, chunks)} of the forms that apply; nbytes as mpigpu-perf counts a row's bytes
    (Reduce_scatter_block: each rank's block; Allgather: each rank's contribution)."""
    n, big = s.nodes, max(s.sizes)
    L = s.sizes[0] if s.even else big
    serial = 'staged' in s.kinds
    out = {}
    step = STEP_US * 1e-6

    def best(per_rank, stages_of):
        return min(((_pipelined(stages_of(per_rank / c), c, serial), c)
                    for c in _chunk_counts(per_rank, chunks)), key=lambda tc: tc[0])

    def leader_only(nb):  # the leader form of a rooted or all-reduce/bcast of nb bytes
        if coll == Coll.BCAST:
            return best(nb, lambda m: [_node(s, m), _copy(s, m, False), net_bcast(s, n, m) + step,
                                       _copy(s, m, False), _node(s, m)])
        net = net_allreduce if coll == Coll.ALLREDUCE else net_reduce
        return best(nb, lambda m: [_node(s, 2 * (big - 1) / big * m) + _node(s, m), _copy(s, m, True),
                                   net(s, n, m, gpu) + step, _copy(s, m, True)])

    gpu = nbytes >= GPU_REDUCE_BYTES  # where the call reduces what arrives (net.Net.reduce_on_gpu)
    count = nbytes // max(itemsize, 1)
    body, tail = count // L * L * itemsize, count % L * itemsize  # a rail form's shards, and the rest
    if coll in (Coll.ALLREDUCE, Coll.REDUCE):
        net = net_allreduce if coll == Coll.ALLREDUCE else net_reduce
        if s.even and body:  # node reduce-scatter, rail (all-)reduce of the shard, node all-gather
            t, c = best(body / L, lambda m: [2 * _node(s, (L - 1) * m), _copy(s, m, True),
                                             net(s, n, m, gpu) + step, _copy(s, m, True)])
            out['rail'] = (t + (leader_only(tail)[0] if tail else 0.0), c)
        out['leader'] = leader_only(nbytes)
    elif coll == Coll.BCAST:
        if s.even and L > 1 and body:  # root's node bcast, rails carry 1/L each, node all-gathers
            t, c = best(body / L, lambda m: [_node(s, L * m), _copy(s, m, False), net_bcast(s, n, m) + step,
                                             _copy(s, m, False), _node(s, (L - 1) * m)])
            out['rail'] = (t + (leader_only(tail)[0] if tail else 0.0), c)
        out['leader'] = leader_only(nbytes)
    elif coll == Coll.ALLGATHER and s.consecutive:
        p = sum(s.sizes)
        own = _node(s, (big - 1) * nbytes)
        if s.even:  # rail allgather of each rank's block, then a node all-gather per remote node
            h2d = (n - 1) * _copy(s, nbytes, False)
            ags = (n - 1) * _node(s, (L - 1) * nbytes)
            overlap = min(h2d, ags) * (n - 2) / (n - 1) if n > 1 else 0.0
            out['rail'] = (own + _copy(s, nbytes, False) + net_allgather(s, n, n * nbytes) + step + h2d + ags
                           - (0.0 if serial else overlap), 1)
        rest = (p - big) * nbytes
        t_net = own + _copy(s, big * nbytes, False) + net_allgather(s, n, p * nbytes) + step
        seconds, c = best(rest, lambda m: [_copy(s, m, False), _node(s, m)])
        out['leader'] = (t_net + seconds, c)
    elif coll == Coll.REDUCE_SCATTER_BLOCK and s.consecutive:
        p = sum(s.sizes)
        if s.even:  # a node reduce-scatter per node's region, pieces exchanged over the rail, reduced
            host = (n - 1) * _a(s) + (n - 1) * _b2(s, nbytes) + _reduce(s, n * nbytes, gpu) + step
            out['rail'] = (n * _node(s, (L - 1) * nbytes) + _copy(s, n * nbytes, True) + host
                           + _copy(s, nbytes, True), 1)
        seconds, c = best(p * nbytes, lambda m: [_node(s, 2 * (big - 1) / big * m), _copy(s, m, True)])
        # the leader hands the node its blocks: host MPI's scatter, or over a device transport a node bcast
        scatter = (_node(s, big * nbytes) if s.device_net else
                   STAGED_NODE_US * 1e-6 + big * nbytes / (STAGED_NODE_GBPS * 1e9))
        host = ((n - 1) * _a(s) + (n - 1) / n * _b2(s, p * nbytes) + _reduce(s, p * nbytes, gpu) + scatter
                + step)
        out['leader'] = (seconds + host + _copy(s, nbytes, True), c)
    return out


# The rail form is chosen only when the model says it is faster by more than this fraction: where both
# are latency-bound they take the same steps, and the leader form keeps the other GPUs' hosts idle.
RAIL_MARGIN = 0.02


def predict(coll, nbytes, shape, chunk_bytes=0, itemsize=4):
    """{form: (seconds, chunks)} for every form of `coll` that applies to `shape`, each with the call's
    agreement across nodes (the same whatever the form: `choose` compares the forms without it)."""
    agree = shape.agree_us * 1e-6
    return {f: (t + agree, c) for f, (t, c) in _forms(coll, nbytes, shape, chunk_bytes, itemsize).items()}


def choose(coll, nbytes, shape, forced='', chunk_bytes=0, itemsize=4):
    """(form, chunks) of the call: the fastest form, or `forced` ('rail', 'leader') where it applies."""
    forms = _forms(coll, nbytes, shape, chunk_bytes, itemsize)
    if forced in forms:
        return forced, forms[forced][1]
    if 'rail' in forms and forms['rail'][0] * (1 + RAIL_MARGIN) < forms['leader'][0]:
        return 'rail', forms['rail'][1]
    return 'leader', forms['leader'][1]
