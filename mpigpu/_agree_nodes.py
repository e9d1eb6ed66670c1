"""The per-call agreement across nodes through each node's board and its leader ('nodes' mode of
mpigpu/_agree.py).

Every rank posts each call on its node's placement board (mpigpu/_ext/board.h), as the ranks of one
node do. The node's first rank, its leader, also makes the call's one-word exchange with the other
nodes' leaders (an MPI_Iallreduce, bitwise OR, on a communicator of the leaders) and brings its node's
part: its own post where it makes the host MPI call or refused its arguments (it never waits: the
verdict is then the host call or the refusal, whatever the others bring), else its node's verdict once
every rank of the node has posted. A leader that brought device buffers publishes the agreed verdict on
its board; the node's other device ranks read it there, or decide at once where their node's own
verdict is already not the device. So the network carries one exchange among the N leaders per call
instead of one among all N x L ranks: 16 us instead of 31 on 2 x 2 simulated nodes over TCP, 17 instead
of 46 on 2 x 4 (benchmarks/agreement_net_probe.py, docs/benchmarks.md).

A leader starts its exchanges in call order, as MPI orders a communicator's collectives: a device call
whose node has not all posted yet (a non-blocking call left undecided) holds back the exchanges of the
calls after it until its node's verdict is in.
"""
import collections

import numpy as np
from mpi4py import MPI

from ._codes import Placement, Verdict
from ._config import config
from ._topology import simulated_node

# The exchange's words: flags (bitwise OR over the nodes' parts) and the collective's bit, which every
# part sets, so two collectives meeting in one exchange show as two bits.
HOST_BIT, REFUSED_BIT, MISMATCH_BIT, BROKEN_BIT = 1, 2, 4, 8
_NODE_BITS = {Verdict.DEVICE: 0, Verdict.HOST_MPI: HOST_BIT, Verdict.REFUSED: REFUSED_BIT,
              Verdict.MISMATCH: MISMATCH_BIT}


def bits_of(placement):
    """A rank's flags for what it brings to a call."""
    return REFUSED_BIT if placement == Placement.REFUSED else (0 if placement == Placement.DEVICE else HOST_BIT)


def verdict_of(flags, colls, coll):
    """The verdict of an exchange for collective `coll` from its OR-ed words."""
    if flags & BROKEN_BIT:
        return Verdict.BROKEN
    if colls != 1 << coll or flags & MISMATCH_BIT:
        return Verdict.MISMATCH
    if flags & REFUSED_BIT:
        return Verdict.REFUSED
    return Verdict.HOST_MPI if flags & HOST_BIT else Verdict.DEVICE


def exchange(comm, bits, coll):
    """Starts the one-word exchange of a call on `comm`: (request, send, recv)."""
    send = np.array([bits, 1 << coll], np.int64)
    recv = np.zeros(2, np.int64)
    return comm.Iallreduce(send, recv, MPI.BOR), send, recv


class Turn:
    """A leader's call in its order of exchanges: its node's part once known (`bits`), then its exchange;
    `keep`: the caller reads the exchange's outcome (a device call), else it only has to finish."""
    __slots__ = ('coll', 'bits', 'exchange', 'keep')

    def __init__(self, coll, bits, keep):
        self.coll, self.bits, self.exchange, self.keep = coll, bits, None, keep


class NodeAgreement:
    """One communicator's 'nodes' agreement at this rank: its node's board and, on the leader, the
    leaders' communicator (`ctrl`) with its calls in order. `pending`: where the exchanges nobody reads
    go to be finished (Agreement._pending)."""

    def __init__(self, board, ctrl, pending):
        self.board, self.ctrl, self.pending = board, ctrl, pending
        self.leader = ctrl is not None
        self.queue = collections.deque()  # the leader's turns not started yet, in call order

    def ranks(self, board_ranks):
        """Board ranks as the communicator's ranks."""
        return [self.board.ranks[r] for r in board_ranks if r >= 0]

    def _pump(self):
        """Starts the leader's exchanges whose node part is known, in call order, up to the first that is
        not."""
        q = self.queue
        while q and q[0].bits is not None:
            turn = q.popleft()
            turn.exchange = exchange(self.ctrl, turn.bits, turn.coll)
            if not turn.keep:
                self.pending.append(turn.exchange)

    def post(self, coll, placement):
        """A rank that makes the host MPI call or refused: posts, never waits. False when its board post
        timed out (nothing posted)."""
        if not self.board.post(coll, placement):
            return False
        if self.leader:
            self.queue.append(Turn(coll, bits_of(placement), False))
            self._pump()
        return True

    def post_device(self, coll):
        """A device call's post: (its call number on the board, its Turn on a leader or None), or None when
        the board post timed out."""
        if not self.board.post(coll, Placement.DEVICE):
            return None
        turn = None
        if self.leader:
            turn = Turn(coll, None, True)
            self.queue.append(turn)
        return self.board.calls, turn

    def look(self, call, coll, turn, spin_s, blocking, outcome):
        """(verdict, culprits) of this rank's device call number `call` once it is decided, else None
        (after `spin_s`; `blocking`: up to the deadline). `outcome(exchange, coll, blocking)` reads an
        exchange (Agreement._outcome)."""
        board = self.board
        if turn is None or turn.bits is None:
            v, who = board.scan(call, coll, spin_s, blocking)
            if v < 0:
                return None
            v = Verdict(v)
            local = v in (Verdict.TIMEOUT, Verdict.BROKEN) or (
                turn is None and v != Verdict.DEVICE and board.placement_of(call, 0) != Placement.DEVICE)
            if local:
                # decided within the node: a rank of it gave up, or another is not on the device and the
                # leader, which makes the host call too, publishes nothing
                board.ack(call)
                if turn is not None:
                    turn.bits = BROKEN_BIT  # the other leaders learn it at once
                    self._pump()
                culprits = self.ranks(board.missing(call)) if v == Verdict.TIMEOUT else self.ranks([who])
                return v, culprits
            if turn is not None:
                turn.bits = _NODE_BITS[v]
                self._pump()
        if turn is None:  # the leader brought device buffers: its verdict, the same on every node
            v, who = board.published(call, spin_s, blocking)
            if v < 0:
                return None
            board.ack(call)
            return Verdict(v), self.ranks([who])
        if turn.exchange is None:
            return None  # behind an earlier call whose node has not all posted (settled first when blocking)
        got = outcome(turn.exchange, coll, blocking)
        if got is None:
            return None
        board.publish(call, got[0])
        board.ack(call)
        return got


def node_of_each(table):
    """The node of each rank: its host, cut into MPIGPU_SIMULATE_NODES simulated nodes as
    mpigpu._topology cuts them (by the launcher's local rank where it says it, else by the
    communicator's ranks on the host)."""
    hosts = [int(h) for h in table['host']]
    k = config.simulate_nodes
    if k <= 1:
        return hosts
    out = []
    for rank, host in enumerate(hosts):
        same = [r for r, h in enumerate(hosts) if h == host]
        local, nlocal = int(table['local'][rank]), int(table['nlocal'][rank])
        if local < 0:
            local, nlocal = same.index(rank), len(same)
        out.append((host, simulated_node(local, nlocal, k)))
    return out
