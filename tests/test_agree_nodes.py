"""The agreement across nodes at one rank (mpigpu/_state/agree_nodes.py), with a board and a leaders'
communicator of its own: a leader starts its exchanges in call order whichever thread decides a call and
in whatever order its calls' node parts come in; at release every turn left starts; a leader that finds
a call broken within its node publishes it; the node's other ranks read the leader's verdict, or decide
at once where the node has a host post and the leader is not on the device. (Across processes the same
runs in tests/mpi/mixed_placement.py and deferred_agreement.py on simulated nodes.)"""
import threading

import numpy as np

from mpigpu._state import agree_nodes as an
from mpigpu._base.codes import Coll, Placement, Verdict


class FakeRequest:
    def __init__(self, done=True):
        self.done = done

    def Test(self):
        return self.done


class FakeLeaders:
    """A leaders' communicator whose exchanges record their (bits, collective bit) in start order; each
    one's result is what `answer` says (the other leaders' OR), completed at once."""

    def __init__(self, others=0, pause=None):
        self.started, self.others, self.pause = [], others, pause

    def Iallreduce(self, send, recv, op):
        if self.pause is not None:
            self.pause()
        self.started.append((int(send[0]), int(send[1])))
        recv[0], recv[1] = int(send[0]) | self.others, int(send[1])
        return FakeRequest()


class FakeBoard:
    """A node's board: `verdicts[call]` the node's verdict once every rank posted (missing: not yet),
    `placements[(call, rank)]` the posts, `out` (the leader's published verdicts) and `acked` what this
    rank stored."""
    ranks = (0, 1)

    def __init__(self):
        self.calls = 0
        self.verdicts, self.placements, self.out, self.acked, self.gave_up = {}, {}, {}, [], []

    def post(self, coll, placement):
        self.calls += 1
        self.placements[(self.calls, 0)] = placement
        return True

    def scan(self, call, coll, spin_s=0.0, blocking=False):
        return (int(self.verdicts[call]), -1) if call in self.verdicts else (-1, -1)

    def published(self, call, spin_s=0.0, blocking=False):
        return (int(self.out[call]), -1) if call in self.out else (-1, -1)

    def placement_of(self, call, rank):
        return self.placements.get((call, rank), -1)

    def publish(self, call, verdict):
        self.out[call] = verdict

    def ack(self, call):
        self.acked.append(call)

    def missing(self, call=0):
        return [1]

    def give_up(self, call=0):
        self.gave_up.append(call)


def outcome(exchange, coll, blocking):
    req, _send, recv = exchange
    if not req.Test():
        return None
    return an.verdict_of(int(recv[0]), int(recv[1]), coll), []


def leader(others=0, pause=None):
    board, ctrl, pending = FakeBoard(), FakeLeaders(others, pause), []
    return an.NodeAgreement(board, ctrl, pending), board, ctrl, pending


def test_exchanges_start_in_call_order_behind_a_call_whose_node_part_is_late():
    na, board, ctrl, pending = leader()
    call, turn = na.post_device(Coll.ALLREDUCE)          # its node has not all posted yet
    assert na.look(call, Coll.ALLREDUCE, turn, 0.0, False, outcome) is None
    na.post(Coll.BCAST, Placement.HOST_MPI)               # a later host call waits its turn
    assert ctrl.started == []
    board.verdicts[call] = Verdict.DEVICE                 # the node's ranks posted
    assert na.look(call, Coll.ALLREDUCE, turn, 0.0, False, outcome) == (Verdict.DEVICE, [])
    assert ctrl.started == [(0, 1 << Coll.ALLREDUCE), (an.HOST_BIT, 1 << Coll.BCAST)]
    assert board.out[call] == Verdict.DEVICE and board.acked == [call]
    assert len(pending) == 1  # the host call's exchange, to be finished; the device call's was read


def test_a_blocking_call_reads_the_node_part_of_the_undecided_call_before_it():
    na, board, ctrl, _pending = leader(others=an.HOST_BIT)
    first, t1 = na.post_device(Coll.ALLREDUCE)
    second, t2 = na.post_device(Coll.REDUCE)
    board.verdicts[first] = Verdict.HOST_MPI
    board.verdicts[second] = Verdict.DEVICE
    assert na.look(second, Coll.REDUCE, t2, 0.0, True, outcome) == (Verdict.HOST_MPI, [])  # another node: host
    assert ctrl.started == [(an.HOST_BIT, 1 << Coll.ALLREDUCE), (0, 1 << Coll.REDUCE)]
    assert na.look(first, Coll.ALLREDUCE, t1, 0.0, True, outcome) == (Verdict.HOST_MPI, [])


def test_two_threads_deciding_start_exchanges_once_each_in_order():
    # the request thread decides call 1 while the caller posts call 2: with the pop and the start under
    # one lock, call 2's exchange never starts before call 1's (mpi4py lets go of the GIL inside MPI)
    gate = threading.Event()
    release = threading.Event()

    def pause():  # the first exchange's start lets the other thread run before it is recorded
        if not gate.is_set():
            gate.set()
            release.wait(0.2)
    na, board, ctrl, _pending = leader(pause=pause)
    call, turn = na.post_device(Coll.ALLREDUCE)
    board.verdicts[call] = Verdict.DEVICE
    t = threading.Thread(target=na.look, args=(call, Coll.ALLREDUCE, turn, 0.0, False, outcome))
    t.start()
    gate.wait(1.0)
    na.post(Coll.BCAST, Placement.HOST_MPI)
    release.set()
    t.join()
    assert ctrl.started == [(0, 1 << Coll.ALLREDUCE), (an.HOST_BIT, 1 << Coll.BCAST)]


def test_release_starts_every_turn_left_a_missing_part_broken():
    na, board, ctrl, pending = leader()
    call, turn = na.post_device(Coll.ALLREDUCE)
    na.post(Coll.BCAST, Placement.HOST_MPI)
    na.abandon()
    assert ctrl.started == [(an.BROKEN_BIT, 1 << Coll.ALLREDUCE), (an.HOST_BIT, 1 << Coll.BCAST)]
    assert len(pending) == 2 and not na.queue


def test_a_leader_that_finds_the_call_broken_in_its_node_publishes_it():
    na, board, ctrl, _pending = leader()
    call, turn = na.post_device(Coll.ALLREDUCE)
    board.verdicts[call] = Verdict.BROKEN
    v, _culprits = na.look(call, Coll.ALLREDUCE, turn, 0.0, False, outcome)
    assert v == Verdict.BROKEN and board.out[call] == Verdict.BROKEN
    assert ctrl.started == [(an.BROKEN_BIT, 1 << Coll.ALLREDUCE)]  # the other leaders learn it too


def test_other_ranks_read_the_leader_or_decide_within_the_node():
    board = FakeBoard()
    na = an.NodeAgreement(board, None, [])
    call, turn = na.post_device(Coll.ALLREDUCE)
    assert turn is None
    board.verdicts[call] = Verdict.HOST_MPI               # a host post on the node ...
    board.placements[(call, 0)] = Placement.DEVICE        # ... and the leader on the device: wait for it
    assert na.look(call, Coll.ALLREDUCE, None, 0.0, False, outcome) is None
    board.out[call] = Verdict.REFUSED               # what the leaders agreed (a refusal elsewhere)
    assert na.look(call, Coll.ALLREDUCE, None, 0.0, False, outcome) == (Verdict.REFUSED, [])
    call2, _ = na.post_device(Coll.BCAST)
    board.verdicts[call2] = Verdict.HOST_MPI
    board.placements[(call2, 0)] = Placement.HOST_MPI     # the leader makes the host call: decided here
    assert na.look(call2, Coll.BCAST, None, 0.0, False, outcome) == (Verdict.HOST_MPI, [])
    assert board.acked == [call, call2]


def test_exchange_words():
    assert an.verdict_of(0, 1 << Coll.BCAST, Coll.BCAST) == Verdict.DEVICE
    assert an.verdict_of(an.HOST_BIT, 1 << Coll.BCAST, Coll.BCAST) == Verdict.HOST_MPI
    assert an.verdict_of(an.HOST_BIT | an.REFUSED_BIT, 1 << Coll.BCAST, Coll.BCAST) == Verdict.REFUSED
    assert an.verdict_of(0, (1 << Coll.BCAST) | (1 << Coll.REDUCE), Coll.BCAST) == Verdict.MISMATCH
    assert an.verdict_of(an.BROKEN_BIT | an.HOST_BIT, 1 << Coll.BCAST, Coll.BCAST) == Verdict.BROKEN
    assert [an.bits_of(p) for p in (Placement.DEVICE, Placement.HOST_MPI, Placement.REFUSED)] == \
        [0, an.HOST_BIT, an.REFUSED_BIT]
    req, send, recv = an.exchange(FakeLeaders(), an.HOST_BIT, Coll.REDUCE)
    assert send.dtype == np.int64 and list(recv) == [an.HOST_BIT, 1 << Coll.REDUCE]
