"""One call, one contract: the ranks of every engine collective (Allreduce, Bcast, Reduce_scatter_block,
Reduce, Allgather, in every form) agree on its path for that call, as a CUDA-aware MPI's ranks run
one algorithm whatever memory each passes.

A rank brings to a call either device buffers the engine can take (`Placement.DEVICE`), or the host
MPI call (`HOST_MPI`: host buffers, or device buffers only host MPI reads, or one rank's mix of both),
or a refusal of its own arguments (`REFUSED`). Host ranks make the MPI call as mpi4py would, and only
post that they do; a device rank learns every rank's post and takes the engine (or the hierarchical or
staged path, which all-device calls share) only when every rank brought device buffers. Otherwise it
makes the very MPI call the host ranks make, on host mirrors of its buffers (or its device pointers,
where MPI is CUDA-aware), as a CUDA-aware MPI would inside.

How the posts travel depends on where the ranks are, decided once per communicator at its first
engine collective (every rank makes that call, whatever its buffers: one allgather):
- one rank ('solo'): nothing to agree;
- one node ('board'): the placement board, a file the node's ranks map (mpigpu/_ext/board.h). A host
  rank's post is a store into its own line; a device rank reads its peers' lines. No MPI message on
  any call after the setup;
- several nodes ('nodes'): a board per node, and a one-word MPI_Iallreduce per call among the nodes'
  leaders, which publish its verdict on their boards (mpigpu/_state/agree_nodes.py); host ranks post and never
  wait;
- several nodes whose ranks cannot map a board ('net'): a one-word MPI_Iallreduce per call among all
  ranks, on a private duplicate of the communicator; host ranks start it and never wait for it;
- either only where some rank had a GPU array library loaded at the setup ('armed', _cuda.armed);
  otherwise ('off') nothing is posted and device ranks make the host MPI call (correct, through
  mirrors), so programs that pass only host buffers pay for no board and no exchange.
A first call that is non-blocking (`Iallreduce` ...) starts the setup without waiting and is made as
the host MPI call by every rank; the next engine collective finishes the setup.

A non-blocking call on device buffers never waits for its peers' posts (MPI: it returns whatever the
other ranks do, and a peer may reach the call only after a message this rank sends next). Where they
have not all posted, it returns undecided (`Undecided`): its request decides it when it is waited for
or tested (or the request thread does, for mpi4py's Waitall and friends), and so does this rank's next
collective on the communicator, of any kind, which must follow it in MPI's order (host MPI's too:
a call agreed on host MPI is made before any later collective on the communicator).
"""
import collections
import itertools
import logging
import mmap
import os
import secrets
import socket
import time
import warnings

import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._base import deadline as _deadline
from . import undecided as _undecided
from .._base.codes import ENGINE_COLLS, Coll, Placement, Verdict
from .._base.config import config
from .agree_nodes import NodeAgreement, Turn, bits_of, exchange, node_of_each as _nodes, verdict_of
from .._ext._board import BEHIND, Board, board_bytes, routes_changed
from .undecided import Undecided
from ..errors import CommunicatorBroken, Error

log = logging.getLogger('mpigpu')

# The setup's allgather: one record per rank.
_RECORD = np.dtype([('host', '<u8'), ('pid', '<i8'), ('serial', '<i8'), ('nonce', '<u8'), ('armed', '<i8'),
                    ('local', '<i8'), ('nlocal', '<i8')])
# The board's check that every rank of the node mapped the same file: (device, inode, ok).
_MAPPED = np.dtype([('dev', '<u8'), ('ino', '<u8'), ('ok', '<i8')])
_serials = itertools.count(1)  # boards this process has started
_PENDING_MAX = 256             # a host rank's unfinished exchanges before it waits for the oldest
_CLOSE_WAIT_S = 5.0            # at exit, how long a host rank's last exchanges may take to finish
# A non-blocking device call spins this long for its peers' posts before it returns undecided: the ranks
# of a call arrive within microseconds of each other, and a decided call launches at once.
_LOOK_S = 20e-6
# The all-to-all family's codes (mpigpu/_paths/exchange.py): its transport lives within one node's team,
# so on a communicator spanning nodes these calls are the host MPI call whatever the ranks bring, and
# nothing is posted for them (no MPI_Iallreduce per host call).
_NODE_ONLY = frozenset(Coll) - frozenset(ENGINE_COLLS)


def _host_key():
    """This host, as the ranks that can map one file see it: its name and its boot (a host's ranks in
    separate namespaces still fail the board's inode check and use the 'net' exchange)."""
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            boot = f.read().strip()
    except OSError:
        boot = ''
    digest = 1469598103934665603
    for ch in (socket.gethostname() + '/' + boot).encode():
        digest = ((digest ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return digest


def _board_dir():
    return '/dev/shm' if os.path.isdir('/dev/shm') and os.access('/dev/shm', os.W_OK) else '/tmp'


class Agreement:
    """What one communicator's ranks use to agree on each call (CommState.agreement)."""

    def __init__(self, st):
        self.st = st
        self.mode = None if st.size > 1 else 'solo'  # None: not set up; 'pending': setup under way
        self.board = None
        self.ctrl = None       # 'net': the private duplicate the exchange runs on; 'nodes': the leaders'
        self.across = None     # 'nodes': this rank's NodeAgreement
        self._setup = None     # 'pending': (request, send record, table)
        self._pending = collections.deque()  # 'net': a host rank's unfinished exchanges
        self.nodes = 1
        self.armed = False
        self._warned = False  # 'off': device calls were warned about
        self.undecided = collections.deque()  # its non-blocking device calls not decided yet (mpigpu/_state/undecided.py)
        self._broke = None                     # a timeout or break found while deciding them (host calls raise it)
        self._kept = None  # 'net': the verdict the fast path of replayed calls reached for the call it handed on

    # ---- setup -----------------------------------------------------------------------------------
    def _record(self):
        rec = np.zeros(1, _RECORD)
        launcher = config.launcher_local
        rec['host'], rec['pid'], rec['serial'] = _host_key(), os.getpid(), next(_serials)
        rec['nonce'] = secrets.randbits(64)
        rec['armed'] = int(_cuda.armed())
        rec['local'], rec['nlocal'] = launcher if launcher is not None else (-1, -1)
        return rec

    def _start(self, nonblocking):
        """Starts the setup at this rank's first engine collective: True when this call can be agreed
        (the setup is done), False when it is non-blocking (the host MPI call, on every rank)."""
        rec = self._record()
        table = np.zeros(self.st.size, _RECORD)
        req = self.st.comm.Iallgather([rec.view(np.uint8), MPI.BYTE], [table.view(np.uint8), MPI.BYTE])
        self._setup = (req, rec, table)
        self.mode = 'pending'
        if nonblocking:
            return False
        self._finish()
        return True

    def _finish(self):
        """Completes the setup (a blocking call: every rank finishes it at the same call). A setup that
        fails leaves the communicator broken for device calls ('broken'), never half set up."""
        st = self.st
        req, rec, table = self._setup
        try:
            _deadline.wait(req, self._broken, (rec, table))
            self._setup = None
            nodes = _nodes(table)
            self.nodes = len(set(nodes))
            self.armed = bool(table['armed'].any())
            mode = 'off' if not self.armed else 'board' if self.nodes == 1 else 'nodes'
            if mode in ('board', 'nodes'):
                mode = self._open_board(table, nodes)
            if mode == 'nodes':
                first = nodes.index(nodes[st.rank])  # the node's first rank leads it
                self.ctrl = st.comm.Split(0 if first == st.rank else MPI.UNDEFINED, st.rank)
                if self.ctrl == MPI.COMM_NULL:
                    self.ctrl = None
                self.across = NodeAgreement(self.board, self.ctrl, self._pending)
            if mode == 'net' and self.ctrl is None:
                self.ctrl = st.comm.Dup()  # collective: every rank reached the same mode
        except _deadline.GaveUp as exc:
            self.mode = 'broken'
            routes_changed()  # first: the interposer's entry stops using what it kept of the old routes
            st.host_hook = self.host
            routes_changed()  # and after: what it kept meanwhile (another thread) is not used either
            st.abandon(exc.pending, exc.why + ' (at the agreement setup)')
            raise CommunicatorBroken('collective', st.broken, rank=st.rank) from None
        self.mode = mode
        self.route()
        log.debug('rank %d: calls agreed by %s', st.rank, self.describe())

    def _broken(self):
        return self.st.broken

    def team_board(self):
        """What the communicator's device team gets to agree on in its fast path: the board, None where
        there is nothing to agree (one rank), or False, which sends every call to the general path
        (the 'net' exchange, a broken communicator, undecided calls before it)."""
        if self.mode == 'board' and self.st.broken is None and not self.undecided:
            return self.board
        return None if self.mode == 'solo' else False

    def route(self):
        """Points the fast posts (a host call's in _front, the engine's fast path) at the board, or at
        this object's methods where a call needs more (several nodes, undecided calls before it)."""
        st, mode = self.st, self.mode
        routes_changed()  # first: the interposer's entry asks again where this communicator's calls go
        if self.undecided or mode not in ('board', 'off'):
            st.host_hook = self.host
        else:
            st.host_hook = self.board if mode == 'board' else None
        routes_changed()  # and after: what it kept meanwhile (another thread) is not used either
        if st.team is not None:
            st.team.board = self.team_board()

    def _route_general(self):
        """The fast path stops agreeing on its own (a broken communicator): every call takes the general
        path, which raises at once."""
        team = self.st.team
        if team is not None:
            team.board = False

    def _open_board(self, table, nodes):
        """Maps this rank's node's board (`nodes`: each rank's node) and checks with the peers that each
        node's ranks mapped one file: 'board' (one node) or 'nodes', or, where some could not, 'net' or
        'off' (every rank reaches the same answer)."""
        st = self.st
        members = tuple(r for r in range(st.size) if nodes[r] == nodes[st.rank])
        leader = table[members[0]]
        path = os.path.join(_board_dir(), 'mpigpu-board-%d-%d-%x' % (leader['pid'], leader['serial'], leader['nonce']))
        size = board_bytes(len(members))
        mine = np.zeros(1, _MAPPED)
        board = None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                # the blocks allocated now (a full /dev/shm raises here, not as SIGBUS at a store); the
                # same size on every rank: the first creates, none shrinks
                os.posix_fallocate(fd, 0, size)
                info = os.fstat(fd)
                mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            board = Board(mm, members.index(st.rank), members, path, config.timeout_s)
            mine['dev'], mine['ino'], mine['ok'] = info.st_dev, info.st_ino, int(board.valid)
        except (OSError, ValueError) as exc:
            log.debug('rank %d: placement board %s: %s', st.rank, path, exc)
        try:
            seen = _deadline.allgather(st.comm, mine.tobytes(), self._broken)
        except _deadline.GaveUp:
            if board is not None:
                board.close()
            _unlink(path)
            raise
        rows = [np.frombuffer(x, _MAPPED)[0] for x in seen]
        files = {}  # node -> the files its ranks mapped
        for node, r in zip(nodes, rows):
            files.setdefault(node, set()).add((int(r['dev']), int(r['ino'])))
        if all(r['ok'] for r in rows) and all(len(f) == 1 for f in files.values()):
            if board.mapped_count == len(members):
                _unlink(path)
            self.board = board
            return 'board' if self.nodes == 1 else 'nodes'
        if board is not None:
            board.close()
        _unlink(path)
        return 'net' if bool(table['armed'].any()) else 'off'

    def _ready(self, nonblocking):
        """True when this call is agreed through the communicator's mode; False while the setup is under
        way and this call is non-blocking (every rank makes it as the host MPI call, posting nothing:
        a non-blocking call must not wait for its peers, so only the next blocking engine collective,
        which every rank reaches at the same point, finishes the setup)."""
        if self.mode is None:
            return self._start(nonblocking)
        if self.mode == 'pending':
            if nonblocking:
                return False
            self._finish()
        elif self.mode == 'broken':
            raise CommunicatorBroken('collective', self.st.broken or 'the agreement setup failed', rank=self.st.rank)
        return True

    # ---- posts -----------------------------------------------------------------------------------
    def host(self, coll, nonblocking=False, behind=False):
        """This rank makes call `coll` as the host MPI call (host buffers): post it. Never waits for peers (but at a first call's setup, and a
        whole ring of calls ahead of the slowest, as collectives may). `behind`: the fast post already
        waited that long for the slowest rank (it raises)."""
        if self.undecided and not nonblocking:  # a non-blocking one posts now; its MPI call follows them
            self.settle_before(Coll(coll).mpi_name)
        if not self._ready(nonblocking):
            return
        if behind:
            self._timed_out(Coll(coll).mpi_name, self._missing(), True)
        self._post(Coll(coll).mpi_name, coll, Placement.HOST_MPI)

    def refuse(self, name, coll, nonblocking=False):
        """This rank refused its own arguments of call `coll` (it raises): its peers raise too (on a
        broken communicator they learn it is broken). A call the fast path already posted (and found
        not the engine's) is not posted again: it is given up."""
        try:
            if (self.board is not None and self.board.take_stash() is not None) or self._kept is not None:
                self._kept = None
                self.give_up()
                return
            if self.undecided:
                _undecided.settle(agreement=self)
            if not self._ready(nonblocking):
                return
            self._post(name, coll, Placement.REFUSED)
            if self.st.broken is not None:
                self.give_up()
        except Error:
            pass  # the refusal's own error is the one to raise

    def give_up(self):
        """This rank stops waiting for its last call (a timeout, mpigpu.abort from any thread, a refusal
        after the fast path posted): peers that read that call later find the communicator broken (one
        node; across nodes they time out), and this rank's device calls on it take the general path,
        which raises."""
        board = self.board
        if board is not None:
            try:
                first = self.undecided[0].call  # another thread may be starting it
            except IndexError:
                first = 0
            board.give_up(first)
        if self.st.broken is None:
            self.st.broken = 'this rank gave up on a call its peers may have begun'
        self._route_general()

    def _missing(self, call=0):
        """The communicator's ranks that have not posted this rank's call `call` (0: its last) on its board."""
        board = self.board
        return [board.ranks[r] for r in board.missing(call)] if board is not None else []

    def _host_only(self, coll):
        """True for a call that can only be the host MPI call here (every rank reaches the same answer
        once the setup is done): the all-to-all family across nodes."""
        return self.nodes > 1 and coll in _NODE_ONLY

    def _post(self, name, coll, placement):
        if self._host_only(coll):
            return
        mode = self.mode
        if mode == 'board':
            if not self.board.post(coll, placement):
                self._timed_out(name, self.board.missing() or [], behind=True)
        elif mode == 'nodes':
            self._reap()
            if not self.across.post(coll, placement):
                self._timed_out(name, self._missing(), behind=True)
        elif mode == 'net':
            self._reap()
            self._pending.append(exchange(self.ctrl, bits_of(placement), coll))

    def decide(self, name, coll, placement, nonblocking=False, then=None):
        """The path of this rank's call `coll`, which brings `placement` (DEVICE or HOST_MPI): the
        Verdict every rank reaches (DEVICE: all brought device buffers; HOST_MPI: every rank makes the
        host MPI call). Raises when a peer refused, is in another collective, or never came.
        `then(verdict)`: a non-blocking call's continuation; given, the call may come back `Undecided`
        (its peers had not all posted), and then(verdict) starts its path once the ranks agree."""
        defer = nonblocking and then is not None and placement == Placement.DEVICE
        if _undecided.pending():
            # the calls before this one start first: a device call's engine kernels meet their peers'
            # in launch order, on any communicator (all of them); a host call follows this
            # communicator's in MPI's order; a non-blocking one queues behind them if it must
            if defer:
                _undecided.settle(blocking=False)
            elif nonblocking and placement != Placement.DEVICE:
                pass  # posted now, in call order; its host MPI call follows them (Plan.request)
            elif placement == Placement.DEVICE:
                _undecided.settle()
            else:
                _undecided.settle(agreement=self)
            if not nonblocking:
                self.st.check_usable(name)
        if not self._ready(nonblocking) or self._host_only(coll):
            return Verdict.HOST_MPI
        if self._kept is not None:  # agreed already (keep): the call the fast path handed on
            kept, self._kept = self._kept, None
            return kept
        mode = self.mode
        if defer and mode in ('board', 'net', 'nodes'):
            return self._decide_or_defer(name, coll, then)
        if mode == 'solo':
            return Verdict.DEVICE if placement == Placement.DEVICE else Verdict.HOST_MPI
        if mode == 'off':
            if placement == Placement.DEVICE and not self._warned:
                self._warned = True
                warnings.warn(f'{name}: device buffers on a communicator whose ranks had no GPU array library '
                              'loaded at its first collective: its collectives take the host MPI call (import '
                              'the library first, or Dup the communicator after; comm.agreement_status())',
                              RuntimeWarning, stacklevel=4)
            return Verdict.HOST_MPI
        got = self.board.take_stash() if mode == 'board' else None  # the fast path agreed this call
        if got is None and placement != Placement.DEVICE:
            self._post(name, coll, placement)  # this rank makes the host MPI call: so does every rank
            return Verdict.HOST_MPI
        if mode == 'board':
            verdict, who = got if got is not None else self.board.agree(coll)
            if verdict == Verdict.TIMEOUT:  # BEHIND: nothing posted, the slowest stayed a ring behind
                self._timed_out(name, self.board.missing(), who == BEHIND)
            return self.judged(name, Verdict(verdict), [who] if who >= 0 else [])
        if mode == 'nodes':
            posted = self.across.post_device(coll)
            if posted is None:
                self._timed_out(name, self._missing(), behind=True)
            call, turn = posted
            return self.judged(name, *self.across.look(call, coll, turn, 0.0, True, self._outcome))
        return self.judged(name, *self._exchange(coll))

    def keep(self, verdict):
        """The fast path of replayed calls (mpigpu/_paths/hier/replay.py) agreed on `verdict` (not the
        device) and hands the call to the general path, whose decide() takes it instead of exchanging
        again (the peers made this call's exchange once)."""
        self._kept = verdict

    def _exchange(self, coll):
        """A device rank's 'net' exchange: (verdict, culprits)."""
        return self._outcome(self._start_exchange(coll), coll, True)

    def _start_exchange(self, coll):
        """Starts a device rank's 'net' exchange for call `coll`: (request, send, recv)."""
        self._reap()
        return exchange(self.ctrl, bits_of(Placement.DEVICE), coll)

    def _outcome(self, exchange, coll, blocking):
        """(verdict, culprits) of a 'net' exchange; None while it runs (not `blocking`)."""
        req, send, recv = exchange
        if not blocking:
            if not req.Test():
                return None
        else:
            try:
                _deadline.wait(req, self._broken, (send, recv))
            except _deadline.GaveUp as exc:
                self.st.abandon(exc.pending, exc.why)
                return Verdict.TIMEOUT, []
        return verdict_of(int(recv[0]), int(recv[1]), coll), []

    def _decide_or_defer(self, name, coll, then):
        """A non-blocking device call's post: its verdict when its peers have all posted within a short
        spin (and no call before it is undecided), else an Undecided that settle() decides later."""
        if self.mode == 'board':
            if not self.board.post(coll, Placement.DEVICE):
                self._timed_out(name, self.board.missing() or [], behind=True)
            call, exchange = self.board.calls, None
        elif self.mode == 'nodes':
            posted = self.across.post_device(coll)
            if posted is None:
                self._timed_out(name, self._missing(), behind=True)
            call, exchange = posted
        else:
            call, exchange = 0, self._start_exchange(coll)
        if not _undecided.pending():
            got = self._look(coll, call, exchange, _LOOK_S)
            if got is not None:
                return self.judged(name, *got)
        u = Undecided(self, name, coll, then, call, exchange)
        _undecided.add(u)
        return u

    def started(self, u, blocking):
        """The request of undecided call `u` once the ranks agreed on it and its path started (raises
        what the decision or the start raised); None while some peer has not posted (not `blocking`)."""
        if not u.decided and not _undecided.settle(u, blocking):
            return None
        if u.exc is not None:
            raise u.exc
        return u.result

    def _look(self, coll, call, exchange, spin_s, blocking=False):
        """(verdict, culprits) of this rank's device call `coll` (board: its call number; 'net': its
        exchange; 'nodes': its call number and its Turn) once every rank has posted it; None while some
        have not (after `spin_s`; `blocking`: waits up to the deadline)."""
        if self.mode == 'nodes':
            return self.across.look(call, coll, exchange, spin_s, blocking, self._outcome)
        if self.mode == 'board':
            verdict, who = self.board.wait(call, coll) if blocking else self.board.look(call, coll, spin_s)
            if verdict < 0:
                return None
            if verdict == Verdict.TIMEOUT:
                return Verdict.TIMEOUT, self.board.missing(call)
            return Verdict(verdict), ([who] if who >= 0 else [])
        if exchange is None:  # the communicator was released meanwhile
            return Verdict.BROKEN, []
        if blocking:
            return self._outcome(exchange, coll, True)
        deadline = time.monotonic() + spin_s
        while True:
            got = self._outcome(exchange, coll, False)
            if got is not None or time.monotonic() >= deadline:
                return got

    def look(self, u, blocking):
        """(verdict, culprits) of undecided call `u` once every rank has posted it, else None (not
        `blocking`; blocking: up to the deadline). A call that follows (no path to agree on) is ready
        as soon as it is the oldest."""
        if u.coll is None:
            return None, []
        return self._look(u.coll, u.call, u.exchange, 0.0, blocking)

    def settled(self, u):
        """Undecided call `u` was decided (mpigpu/_state/undecided.py): a timeout or break found there is kept
        for the host call or collective that had it decided (settle_before raises it)."""
        if isinstance(u.exc, CommunicatorBroken):
            self._broke = u.exc

    def settle_before(self, name):
        """Before a collective of this communicator: its undecided calls start first (MPI's order).
        Raises CommunicatorBroken where one of them found the communicator broken (the collective's
        peers may never come)."""
        _undecided.settle(agreement=self)
        broke, self._broke = self._broke, None
        if broke is not None:
            raise CommunicatorBroken(name, self.st.broken or str(broke), rank=self.st.rank)

    def judged(self, name, verdict, culprits):
        st = self.st
        if verdict in (Verdict.DEVICE, Verdict.HOST_MPI):
            return verdict
        who = ', '.join(str(r) for r in culprits)
        if verdict == Verdict.REFUSED:
            raise Error(name, f'rank {who or "(another)"} refused its arguments of this call, so this rank '
                        'does not run it either', rank=st.rank, error_class=MPI.ERR_OTHER)
        if verdict == Verdict.MISMATCH:
            raise Error(name, f'rank {who or "(another)"} is in another collective call of this communicator '
                        '(every rank must make its collectives through mpigpu, in the same order)',
                        rank=st.rank, error_class=MPI.ERR_OTHER)
        if verdict == Verdict.BROKEN:
            why = ('the communicator was aborted' if culprits == [st.rank] else
                   f'rank {who} gave up on this communicator (a peer never came, or an abort)')
            if st.broken is None:
                st.broken = why
            self._route_general()
            raise CommunicatorBroken(name, st.broken, rank=st.rank)
        self._timed_out(name, culprits)

    def _timed_out(self, name, missing, behind=False):
        st = self.st
        if not behind:
            self.give_up()
        why = (f'rank{"s" if len(missing) > 1 else ""} {", ".join(str(r) for r in missing)} ' if missing
               else 'peers ')
        why += ('stayed a whole ring of calls behind' if behind else 'never began the call') + \
            f' within MPIGPU_TIMEOUT_S={config.timeout_s:g} s'
        if st.broken is None:
            st.broken = why
        self._route_general()
        raise CommunicatorBroken(name, why, rank=st.rank)

    def _reap(self):
        """Forgets the exchanges that finished; waits for the oldest while too many are under way."""
        q = self._pending
        while q and q[0][0].Test():
            q.popleft()
        while len(q) > _PENDING_MAX:
            req, send, recv = q.popleft()
            try:
                _deadline.wait(req, self._broken, (send, recv))
            except _deadline.GaveUp as exc:
                self.st.abandon(exc.pending, exc.why)

    # ---- status and release ----------------------------------------------------------------------
    def describe(self):
        return {None: 'not set up yet', 'pending': 'being set up', 'solo': 'one rank',
                'broken': 'none: the setup failed (the communicator is broken)',
                'board': 'the node\'s placement board (shared memory)',
                'net': f'an exchange between {self.nodes} node{"s" if self.nodes > 1 else ""} (host MPI)',
                'nodes': f'each node\'s placement board and an exchange between {self.nodes} nodes\' leaders (host MPI)',
                'off': 'none: no rank had a GPU array library loaded at the setup, so device buffers take the '
                       'host MPI call'}[self.mode]

    def close(self, collective, mpi=True):
        """Releases what the agreement holds. `collective`: every rank is releasing too (the private
        duplicate is freed); `mpi`: MPI may be called (not in an attribute's delete callback). The
        requests still under way (a setup started by a non-blocking call, a host rank's exchanges) are
        finished within one deadline where MPI may be called (every rank started as many), else kept
        with their buffers for MPI."""
        dropped = _undecided.drop(self)  # calls nobody waited for (the communicator is released): never run
        if dropped and self.board is not None:
            self.board.give_up(dropped[0].call)  # peers that read them learn it, rather than wait
        if self.across is not None and mpi:
            self.across.abandon()  # every exchange another leader started meets this leader's
        pending = list(self._pending)
        self._pending.clear()
        for u in dropped:
            started = u.exchange.exchange if isinstance(u.exchange, Turn) else u.exchange
            if started is not None:
                pending.append(started)  # its MPI_Iallreduce still runs on the private duplicate
            u.decided, u.then, u.exchange = True, None, None
            u.exc = CommunicatorBroken(u.name, 'the communicator was released before the call was agreed',
                                       rank=self.st.rank)
        if self._setup is not None:
            pending.append(self._setup)
            self._setup = None
        deadline = time.monotonic() + (config.timeout_s if collective else _CLOSE_WAIT_S)
        for req, *bufs in pending:
            try:
                if not mpi:
                    raise _deadline.GaveUp('released without MPI', (req, bufs))
                _deadline.wait(req, None, bufs, max(0.0, deadline - time.monotonic()))
            except _deadline.GaveUp as exc:
                _kept_requests.append(exc.pending)
        if self.ctrl is not None:
            ctrl, self.ctrl = self.ctrl, None
            if collective and mpi:
                try:
                    ctrl.Free()
                except MPI.Exception:
                    pass
            else:
                _kept_requests.append(ctrl)
        if self.board is not None:
            self.board.close()
            self.board = None


_kept_requests = []  # what MPI may still use after a release that could not wait for it


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass

