"""Non-blocking device calls whose path is not decided yet (mpigpu/_state/agree.py), in this process's call
order, and the one place that decides them.

A device rank's `Iallreduce` ... returns undecided where its peers had not all posted their placement.
Each undecided call is decided and its path started (`Undecided.then`) strictly in the order the
process made them, across communicators: the engine's kernels meet their peers' in launch order, so a
later engine call on any communicator first has every earlier undecided call started (as the calls
were made before they could be deferred), and a later collective of any kind on the same
communicator has that communicator's started (MPI's order). One lock serialises the deciding; a call
leaves the order only once its path has started, so a thread that finds calls undecided waits for
the one starting them (the request thread may be).
"""
import collections
import threading

from .._ext._board import routes_changed

unsettled = set()                # the agreements with undecided calls (every collective's method looks)
_order = collections.deque()     # the process's undecided calls, in call order
_lock = threading.Lock()
_deciding = [None]               # the thread inside settle() (a call's start may make collectives)
_DROP_WAIT_S = 5.0               # a release waits this long for a call being started on another thread


class Undecided:
    """A non-blocking device call this rank posted DEVICE for whose peers had not all posted when it
    returned: `then(verdict)` starts its path and returns its request (`result`), or the decision's
    error is kept (`exc`, without its traceback: that would keep the call's buffers)."""
    __slots__ = ('agreement', 'name', 'coll', 'call', 'exchange', 'then', 'result', 'exc', 'decided')

    def __init__(self, agreement, name, coll, then, call, exchange):
        self.agreement, self.name, self.coll, self.then = agreement, name, coll, then
        self.call = call          # 'board': this rank's call number on the board
        self.exchange = exchange  # 'net': (request, send, recv) of the one-word exchange
        self.result = self.exc = None
        self.decided = False


def ordered(name):
    """True for a collective method's name (not point-to-point): MPI orders it after the
    communicator's earlier collectives, undecided ones included."""
    low = name.lower()
    return 'send' not in low and 'recv' not in low


def pending():
    """True while any call of the process is undecided."""
    return bool(_order)


def deciding_here():
    """True inside settle() on this thread: the call being started is the oldest, so what it makes
    now is in order."""
    return _deciding[0] == threading.get_ident()


def add(u):
    """Queues undecided call `u` after every earlier one."""
    with _lock:
        _order.append(u)
        agreement = u.agreement
        agreement.undecided.append(u)
        if len(agreement.undecided) == 1:
            # first: a host call below Python on another thread (the interposer's entry, no GIL) stops
            # using the routes it kept, and learns of this call from Python
            routes_changed()
            unsettled.add(agreement)
            agreement.route()


def follow(agreement, name, start):
    """A non-blocking call with no path to agree on (host MPI's own: `Ibarrier`, a mirrored `I*`
    collective, the MPI call of a host-buffer `I*` whose post is already made) made while `agreement`
    has undecided calls: it joins the order, and `start()` (which returns its MPI request) runs once
    the calls before it have started, so it never waits for them (MPI: it returns at once)."""
    u = Undecided(agreement, name, None, lambda _verdict: start(), 0, None)
    add(u)
    return u


def settle(until=None, blocking=True, agreement=None):
    """Decides undecided calls in call order, starting each one's path: up to `until`, else up to the
    last of `agreement`, else all. True when those are decided; False when a peer has not posted yet
    (not `blocking`) or another thread is deciding. A call's start that makes a collective on this
    thread finds the calls before it started (returns at once)."""
    me = threading.get_ident()
    if _deciding[0] == me:
        return True
    if not _lock.acquire(blocking):
        return False
    _deciding[0] = me
    try:
        if until is None:
            queue = agreement.undecided if agreement is not None else _order
            if not queue:
                return True
            until = queue[-1]
        while not until.decided:
            u = _order[0]
            got = u.agreement.look(u, blocking)
            if got is None:
                return False
            _start(u, got)
        return True
    finally:
        _deciding[0] = None
        _lock.release()


def _start(u, got):
    """Starts the head of the order, `u`, on its verdict `got` (verdict, culprits), then lets it go."""
    agreement, interrupt = u.agreement, None
    try:
        u.result = u.then(agreement.judged(u.name, *got) if u.coll is not None else None)
    except Exception as exc:  # its request raises it
        u.exc = exc.with_traceback(None)
    except BaseException as exc:  # an interrupt: the call is given up, the interrupt goes on
        u.exc, interrupt = RuntimeError(f'{u.name}: interrupted while it was started'), exc
    u.then = u.exchange = None
    u.decided = True
    _order.popleft()
    agreement.undecided.popleft()
    agreement.settled(u)
    if not agreement.undecided:
        unsettled.discard(agreement)
        agreement.route()
    if interrupt is not None:
        raise interrupt


def drop(agreement):
    """Takes a released communicator's undecided calls out of the order (they never run); returns them.
    Waits a moment for a call being started on another thread."""
    got = _lock.acquire(timeout=_DROP_WAIT_S) if _deciding[0] != threading.get_ident() else False
    try:
        mine = list(agreement.undecided)
        agreement.undecided.clear()
        for u in mine:
            try:
                _order.remove(u)
            except ValueError:
                pass
        unsettled.discard(agreement)
        return mine
    finally:
        if got:
            _lock.release()
