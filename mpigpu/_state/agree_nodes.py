"""The per-call agreement across nodes through each node's board and its leader ('nodes' mode of
mpigpu/_state/agree.py).

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
import threading
import time

import numpy as np
from mpi4py import MPI

from .._base import plain as _plain
from .._base.codes import Placement, Verdict
from .._base.config import config
from .topology import simulated_node

# The exchange's words: flags (bitwise OR over the nodes' parts) and the collective's bit, which every
# part sets, so two collectives meeting in one exchange show as two bits.
HOST_BIT, REFUSED_BIT, MISMATCH_BIT, BROKEN_BIT = 1, 2, 4, 8
_NODE_BITS = {Verdict.DEVICE: 0, Verdict.HOST_MPI: HOST_BIT, Verdict.REFUSED: REFUSED_BIT,
              Verdict.MISMATCH: MISMATCH_BIT}
# A board wait spins this long holding the GIL between its looks into MPI (the ranks of a call arrive
# within microseconds of each other); after _BUSY_S it sleeps between spins, as host MPI waits do.
_SPIN_S = 20e-6
_VERDICTS = tuple(Verdict)  # by code (faster than Verdict(code) on every call)
_BUSY_S = 1e-3
_FIRST_SLEEP_S = 1e-5


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
    words = np.zeros(4, np.int64)  # send, then receive: one allocation
    send, recv = words[:2], words[2:]
    send[0], send[1] = bits, 1 << coll
    return comm.Iallreduce(send, recv, MPI.BOR), send, recv


class Turn:
    """A leader's call number `call` in its order of exchanges: its node's part once known (`bits`), then
    its exchange; `keep`: the caller reads the exchange's outcome (a device call), else it only has to
    finish."""
    __slots__ = ('call', 'coll', 'bits', 'exchange', 'keep')

    def __init__(self, call, coll, bits, keep):
        self.call, self.coll, self.bits, self.exchange, self.keep = call, coll, bits, None, keep


def _poke():
    """A look into MPI, so this rank's own earlier non-blocking messages advance while it waits on its
    board, as they would inside an MPI call (a peer on another node may need one before it posts).
    mpi4py's own Iprobe: under `python -m mpigpu` MPI.COMM_SELF is mpigpu's, whose Iprobe does more."""
    _plain.Comm.Iprobe(MPI.COMM_SELF, MPI.ANY_SOURCE, MPI.ANY_TAG)


class NodeAgreement:
    """One communicator's 'nodes' agreement at this rank: its node's board and, on the leader, the
    leaders' communicator (`ctrl`) with its calls in order. `pending`: where the exchanges nobody reads
    go to be finished (Agreement._pending). A call's turn may be looked at from the request thread as
    well as the caller's: exchanges start under a lock, in call order."""

    def __init__(self, board, ctrl, pending):
        self.board, self.ctrl, self.pending = board, ctrl, pending
        self.leader = ctrl is not None
        self.queue = collections.deque()  # the leader's turns not started yet, in call order
        self._lock = threading.Lock()

    def ranks(self, board_ranks):
        """Board ranks as the communicator's ranks."""
        return [self.board.ranks[r] for r in board_ranks if r >= 0]

    def _pump(self):
        """Starts the leader's exchanges whose node part is known, in call order, up to the first that is
        not."""
        with self._lock:
            q = self.queue
            while q and q[0].bits is not None:
                turn = q[0]
                turn.exchange = exchange(self.ctrl, turn.bits, turn.coll)
                q.popleft()
                if not turn.keep:
                    self.pending.append(turn.exchange)

    def post(self, coll, placement):
        """A rank that makes the host MPI call or refused: posts, never waits. False when its board post
        timed out (nothing posted)."""
        if not self.board.post(coll, placement):
            return False
        if self.leader:
            self.queue.append(Turn(self.board.calls, coll, bits_of(placement), False))
            self._pump()
        return True

    def post_device(self, coll):
        """A device call's post: (its call number on the board, its Turn on a leader or None), or None when
        the board post timed out."""
        if not self.board.post(coll, Placement.DEVICE):
            return None
        turn = None
        if self.leader:
            turn = Turn(self.board.calls, coll, None, True)
            self.queue.append(turn)
        return self.board.calls, turn

    def abandon(self):
        """At release: the leader's turns whose node part never came count as broken and every turn not
        started starts, so each exchange another leader started has its peers; all go to `pending`."""
        with self._lock:
            for turn in self.queue:
                if turn.bits is None:
                    turn.bits = BROKEN_BIT
                turn.keep = False
        self._pump()

    def _waited(self, ask, call, spin_s, blocking):
        """(answer, who) of board look `ask(spin_s)` for this rank's call `call`; (-1, -1) while there is
        none (after `spin_s`); `blocking`: up to the deadline, polling MPI between short spins and, after
        a while, sleeping between them (MPIGPU_POLL_SLEEP_US), then (TIMEOUT, -1) with this rank's calls
        from `call` given up (peers that look later learn it)."""
        got = ask(_SPIN_S if blocking else spin_s)
        if got[0] >= 0 or not blocking:
            return got
        start = time.monotonic()
        sleep, most = 0.0, config.poll_sleep_us * 1e-6
        while True:
            _poke()
            got = ask(_SPIN_S)
            if got[0] >= 0:
                return got
            now = time.monotonic()
            if now - start > config.timeout_s:
                self.board.give_up(call)
                return Verdict.TIMEOUT, -1
            if now - start > _BUSY_S:
                sleep = min(most, max(sleep * 2, _FIRST_SLEEP_S))
                if sleep > 0:
                    time.sleep(sleep)

    def _node_verdict(self, turn_or_call, coll, spin_s, blocking):
        """The node's verdict of call `turn_or_call` (a Turn: its part set from it): (verdict, who) or
        None while some rank of the node has not posted."""
        turn = turn_or_call if type(turn_or_call) is Turn else None
        call = turn.call if turn is not None else turn_or_call
        board = self.board
        v, who = board.scan(call, coll, _SPIN_S if blocking else spin_s)  # mostly the answer at once
        if v < 0:
            if not blocking:
                return None
            v, who = self._waited(lambda s: board.scan(call, coll, s), call, spin_s, blocking)
        v = _VERDICTS[v]
        if turn is not None and turn.bits is None:
            turn.bits = _NODE_BITS.get(v, BROKEN_BIT)  # TIMEOUT, BROKEN: the other leaders learn it at once
        return v, who

    def look(self, call, coll, turn, spin_s, blocking, outcome):
        """(verdict, culprits) of this rank's device call number `call` once it is decided, else None
        (after `spin_s`; `blocking`: up to the deadline). `outcome(exchange, coll, blocking)` reads an
        exchange (Agreement._outcome)."""
        board = self.board
        if turn is None or turn.bits is None:
            got = self._node_verdict(turn if turn is not None else call, coll, spin_s, blocking)
            if got is None:
                return None
            v, who = got
            local = v in (Verdict.TIMEOUT, Verdict.BROKEN) or (
                turn is None and v != Verdict.DEVICE and board.placement_of(call, 0) != Placement.DEVICE)
            if local:
                # decided within the node: a rank of it gave up, or another is not on the device and the
                # leader, which makes the host call too, publishes nothing
                if turn is not None:
                    self._pump()  # its part is BROKEN: the other leaders learn it
                    board.publish(call, Verdict.BROKEN)  # the node's ranks waiting for the leader too
                board.ack(call)
                culprits = self.ranks(board.missing(call)) if v == Verdict.TIMEOUT else self.ranks([who])
                return v, culprits
            if turn is not None:
                self._pump()
        if turn is None:  # the leader brought device buffers: its verdict, the same on every node
            v, who = self._waited(lambda s: board.published(call, s), call, spin_s, blocking)
            if v < 0:
                return None
            board.ack(call)
            if v == Verdict.TIMEOUT:
                return Verdict.TIMEOUT, self.ranks([0])
            return _VERDICTS[v], (self.ranks([who]) if who >= 0 else [])
        if turn.exchange is None and blocking:
            # earlier calls whose node has not all posted hold this one back: read their parts here
            for earlier in list(self.queue):
                if earlier is turn:
                    break
                if earlier.bits is None and self._node_verdict(earlier, earlier.coll, 0.0, True) is None:
                    return Verdict.TIMEOUT, []
            self._pump()
        if turn.exchange is None:
            return None  # behind an earlier call whose node has not all posted
        got = outcome(turn.exchange, coll, blocking)
        if got is None:
            return None
        board.publish(call, got[0])
        board.ack(call)
        return got


def node_of_each(table):
    """The node of each rank: its host, cut into MPIGPU_SIMULATE_NODES simulated nodes as
    mpigpu._state.topology cuts them (by the launcher's local rank where it says it, else by the
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
