"""The nodes of a communicator: which ranks share a node (Split_type(COMM_TYPE_SHARED), each host's ranks
cut into MPIGPU_SIMULATE_NODES simulated nodes), the node, rail and leaders' communicators, and the
network's latency and bandwidth that the hierarchical path's cost model uses.

Made collectively by the first device collective of a communicator that spans several nodes (the
hierarchical path keeps it in the communicator's state, mpigpu/_paths/hier/) and freed with it.
Nodes are numbered by their lowest rank; a node's ranks keep the communicator's order, so local rank 0
(the node's leader) is its lowest rank. A rail is the ranks with the same local rank on every node that
has one; rail 0 is the leaders' communicator.
"""
import statistics
import time

import numpy as np
from mpi4py import MPI

from .._base.config import config

# Marks a communicator that is one node already (a node communicator made here): a team set up on it is
# not cut again into simulated nodes.
_ONE_NODE = MPI.Comm.Create_keyval()


def simulated_node(local, size, k):
    """The simulated node of host-local rank `local` of `size` cut into k nodes of consecutive ranks, the
    first size % k of them one rank larger (5 ranks, k = 2: 3 + 2)."""
    k = max(1, min(k, size))
    big, extra = -(-size // k), size % k
    if extra == 0:
        return local // (size // k)
    if local < extra * big:
        return local // big
    return extra + (local - extra * big) // (size // k)


def node_comm(comm):
    """The ranks of `comm` on this rank's node (collective over `comm`): Split_type(COMM_TYPE_SHARED), cut
    into simulated nodes under MPIGPU_SIMULATE_NODES. A process's simulated node comes from its place
    among its host's processes of the job where the launcher says it (then every communicator sees the
    same nodes), else from its place among the communicator's ranks on the host (a communicator that
    is one node already is not cut again)."""
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    k = config.simulate_nodes
    if k <= 1:
        return shared
    fixed = config.launcher_local
    if fixed is None and comm.Get_attr(_ONE_NODE):
        return shared
    try:
        local = shared.Get_rank()
        where = fixed if fixed is not None else (local, shared.Get_size())
        return shared.Split(simulated_node(where[0], where[1], k), local)
    finally:
        shared.Free()


# The network measurement: round trips between the leaders of nodes 0 and 1 (host buffers).
_PROBE_SMALL, _PROBE_LARGE = 8, 1 << 20
_PROBE_ROUNDS_SMALL, _PROBE_ROUNDS_LARGE = 20, 4
_PROBE_TAG = 31


def _round_trips(comm, peer, nbytes, rounds, first):
    """The shortest of `rounds` round trips of nbytes with `peer` (seconds); `first` sends first."""
    buf = np.zeros(max(nbytes, 1), np.uint8)
    best = float('inf')
    for _ in range(rounds + 1):  # the first round only warms the connection
        t0 = time.perf_counter()
        if first:
            comm.Send([buf, nbytes, MPI.BYTE], peer, _PROBE_TAG)
            comm.Recv([buf, nbytes, MPI.BYTE], peer, _PROBE_TAG)
        else:
            comm.Recv([buf, nbytes, MPI.BYTE], peer, _PROBE_TAG)
            comm.Send([buf, nbytes, MPI.BYTE], peer, _PROBE_TAG)
        best = min(best, time.perf_counter() - t0)
    return best


def _exchanges(comm, peer, nbytes, rounds):
    """The shortest of `rounds` exchanges of nbytes each way with `peer`, both sending at once (seconds)."""
    out, into = np.zeros(max(nbytes, 1), np.uint8), np.zeros(max(nbytes, 1), np.uint8)
    best = float('inf')
    for _ in range(rounds + 1):  # the first round only warms the connection
        t0 = time.perf_counter()
        comm.Sendrecv([out, nbytes, MPI.BYTE], peer, _PROBE_TAG, [into, nbytes, MPI.BYTE], peer, _PROBE_TAG)
        best = min(best, time.perf_counter() - t0)
    return best


def measure_network(comm, leaders, node, round_trips=None, exchanges=None):
    """(latency us, GB/s per GPU one way, GB/s each way while a GPU sends and receives at once) of the
    network, the same on every rank of `comm` (collective): MPIGPU_NET_LATENCY_US and MPIGPU_NET_GBPS
    (then both ways) where set, else measured once between the leaders of nodes 0 and 1 by round trips
    of 8 bytes and 1 MiB and by exchanges of 1 MiB both ways at once: through host MPI on host buffers,
    or through `round_trips(peer, nbytes, rounds, first)` and `exchanges(peer, nbytes, rounds)` (seconds
    of the shortest: the transport the network phases take)."""
    lat, gbps = config.net_latency_us, config.net_gbps
    both = gbps
    measured = None
    if (lat <= 0 or gbps <= 0) and leaders is not None and node < 2:
        peer, first = 1 - node, node == 0
        trips = round_trips or (lambda *args: _round_trips(leaders, *args))
        swaps = exchanges or (lambda *args: _exchanges(leaders, *args))
        small = trips(peer, _PROBE_SMALL, _PROBE_ROUNDS_SMALL, first) / 2
        large = trips(peer, _PROBE_LARGE, _PROBE_ROUNDS_LARGE, first) / 2
        swap = swaps(peer, _PROBE_LARGE, _PROBE_ROUNDS_LARGE)
        measured = (small * 1e6, _PROBE_LARGE / max(large - small, 1e-9) / 1e9,
                    _PROBE_LARGE / max(swap - small, 1e-9) / 1e9)
    measured = comm.bcast(measured, root=0)  # rank 0 is node 0's leader
    if measured is not None:
        lat = lat if lat > 0 else measured[0]
        gbps, both = (gbps, gbps) if gbps > 0 else measured[1:]
    return lat, gbps, both


_AGREE_ROUNDS = 10  # and one to warm up


def measure_agreement(comm, leaders):
    """What the agreement across nodes costs a call (us, the same on every rank of `comm`; collective):
    the median of rounds of its leaders' step, the one-word allreduce (bitwise or) it makes over host MPI
    on every call (mpigpu/_state/agree_nodes.py), blocking here as the network probes above are. 0 on
    one node."""
    measured = None
    if leaders is not None and leaders.Get_size() > 1:
        words = np.zeros(4, np.int64)
        times = []
        for _ in range(_AGREE_ROUNDS + 1):
            t0 = time.perf_counter()
            leaders.Allreduce(words[:2], words[2:], MPI.BOR)
            times.append(time.perf_counter() - t0)
        measured = statistics.median(times[1:]) * 1e6  # the first round only warms the connection
    measured = comm.bcast(measured, root=0)  # rank 0 is node 0's leader
    return measured or 0.0


class Topology:
    """One rank's view of the nodes of a communicator (made collectively; `close` frees what it made).

    nnodes, node: the number of nodes and this rank's; sizes, firsts: each node's ranks and lowest rank;
    local, nlocal: this rank's place on its node and the node's size; node_of, local_of: per rank of the
    communicator; even: every node has as many ranks; consecutive: every node's ranks are consecutive
    ranks of the communicator; node_comm, rail, leaders: the communicators (leaders: rail 0, None off
    the leaders); rail_nodes: the node of each rank of this rank's rail."""

    def __init__(self, comm):
        rank = comm.Get_rank()
        self.node_comm = node = node_comm(comm)
        node.Set_attr(_ONE_NODE, True)
        self.local, self.nlocal = node.Get_rank(), node.Get_size()
        first = node.bcast(rank, root=0)
        table = comm.allgather((first, self.local, self.nlocal))
        self.firsts = sorted({f for f, _l, _n in table})
        index = {f: i for i, f in enumerate(self.firsts)}
        self.nnodes = len(self.firsts)
        self.node = index[first]
        self.node_of = [index[f] for f, _l, _n in table]
        self.local_of = [loc for _f, loc, _n in table]
        self.sizes = [0] * self.nnodes
        for f, _l, n in table:
            self.sizes[index[f]] = n
        self.even = len(set(self.sizes)) == 1
        self.consecutive = all(r == f + loc for r, (f, loc, _n) in enumerate(table))
        self.rail = comm.Split(self.local, self.node)
        self.rail_nodes = [n for n in range(self.nnodes) if self.sizes[n] > self.local]
        self.leaders = self.rail if self.local == 0 else None

    def describe(self):
        """'3 nodes (2+2+1 ranks)'."""
        return f'{self.nnodes} nodes ({"+".join(str(s) for s in self.sizes)} ranks)'

    def close(self):
        for c in (self.rail, self.node_comm):
            try:
                c.Free()
            except MPI.Exception:
                pass
        self.rail = self.node_comm = self.leaders = None
