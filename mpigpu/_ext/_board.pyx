# The placement board (board.h): the file the ranks of one node map to agree on each collective call's
# path, and this rank's handle on it. mpigpu/_state/agree.py makes the file and decides when a board is used;
# the communicators' methods post on it from C (host buffers: _front; the engine's fast path: _device).
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint64_t

cdef extern from "board.h":
    enum:
        MG_PLACE_HOST_MPI
        MG_PLACE_DEVICE
        MG_VERDICT_TIMEOUT
        MG_BOARD_DEPTH
        MG_BOARD_BEHIND
    uint64_t mg_board_bytes(int n)
    uint64_t mg_board_load(const uint64_t *p) nogil
    void mg_board_store(uint64_t *p, uint64_t v) nogil
    uint64_t mg_board_join(mg_board *b, uint64_t *base, int n, int me, double timeout_s) nogil
    int mg_board_valid(const mg_board *b) nogil
    int mg_board_post(mg_board *b, int coll, int placement) nogil
    int mg_board_wait(mg_board *b, int coll, int *who, double spin_s) nogil
    int mg_board_wait_call(mg_board *b, uint64_t k, int coll, int *who, double spin_s) nogil
    enum:
        MG_BOARD_SCAN
        MG_BOARD_PUBLISHED
    int mg_board_wait_as(mg_board *b, int what, uint64_t k, int coll, int *who, double spin_s) nogil
    int mg_board_look_as(mg_board *b, int what, uint64_t k, int coll, int *who) nogil
    void mg_board_ack_call(mg_board *b, uint64_t k) nogil
    int mg_board_placement_of(const mg_board *b, uint64_t k, int r) nogil
    void mg_board_publish(mg_board *b, uint64_t k, int verdict) nogil
    int mg_board_look_call(mg_board *b, uint64_t k, int coll, int *who) nogil
    int mg_board_missing_call(const mg_board *b, uint64_t k, int *out, int max) nogil
    void mg_board_give_up_from(mg_board *b, uint64_t k) nogil
    int mg_board_may_wait(const mg_board *b) nogil

# A device rank spins this long holding the GIL for its peers' posts (a call's ranks arrive within
# microseconds of each other), then waits without it: a peer may need this process's other threads.
cdef double _SPIN_S = 20e-6


BEHIND = MG_BOARD_BEHIND  # a TIMEOUT verdict's rank when the post itself timed out (nothing posted)

# The routes' epoch: moved on whenever a communicator's host calls may go elsewhere than they went (its
# host_hook set, its state released, a non-blocking call left undecided or settled: mpigpu/_state). The
# engine's entry keeps where a communicator's host calls are posted, per communicator, with the epoch it
# learned it in, for the interposer, which asks Python again once the epoch moved (pmpi/host_routes.h).
cdef uint64_t _routes_epoch = 1


cdef uint64_t *routes_epoch() noexcept nogil:
    return &_routes_epoch


def routes_changed():
    """Moves the routes' epoch on: what the interposer's entry kept of any communicator's routes is
    asked again (called under the GIL, by each change of a communicator's host_hook or undecided calls)."""
    mg_board_store(&_routes_epoch, mg_board_load(&_routes_epoch) + 1)


def board_bytes(int n):
    """The size of the file of a board of n ranks."""
    return mg_board_bytes(n)


cdef inline bint _may_wait(mg_board *b) noexcept nogil:
    """True when the next post may wait for the slowest rank (about once per ring of calls): it then runs
    without the GIL."""
    return mg_board_may_wait(b) != 0


cdef class Board:
    """This rank's handle on a mapped board: `ranks` the communicator rank of each of its ranks (its
    place among them is this rank's), `path` the file (removed once every rank has mapped it)."""

    def __cinit__(self, object mm, int me, tuple ranks, str path, double timeout_s):
        cdef Py_buffer view
        PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
        try:
            if <uint64_t>view.len < mg_board_bytes(len(ranks)):
                raise ValueError(f'board file {path} holds {view.len} bytes, not {mg_board_bytes(len(ranks))}')
            self.mapped_count = mg_board_join(&self.b, <uint64_t *>view.buf, len(ranks), me, timeout_s)
        finally:
            PyBuffer_Release(&view)  # the mapping stays: mm holds it until close()
        self._mm, self._mapped, self.ranks, self.path = mm, True, ranks, path
        self._stash_call = 0

    @property
    def valid(self):
        """True when every rank that made the board agrees on its shape."""
        return self._mapped and mg_board_valid(&self.b) != 0

    @property
    def calls(self):
        """The calls this rank has posted."""
        return self.b.call

    cdef int put(self, int coll, int placement) except -2:
        """Posts `placement` for this rank's next call: 0, or -1 when the slowest rank stayed a whole ring
        behind past the deadline (nothing posted; the caller raises)."""
        cdef int rc
        if not self._mapped:
            return -1
        if _may_wait(&self.b):
            with nogil:
                rc = mg_board_post(&self.b, coll, placement)
            return rc
        return mg_board_post(&self.b, coll, placement)

    cdef int post_host(self, int coll) except -2:
        """put() of a call that makes the host MPI call (_front's host path)."""
        return self.put(coll, MG_PLACE_HOST_MPI)

    cdef int post_device(self, int coll) except -2:
        """put() of a call that brings device buffers (_device's fast path)."""
        return self.put(coll, MG_PLACE_DEVICE)

    cdef int wait_device(self, int coll, int *who) except -2:
        """The verdict of this rank's last call (posted DEVICE) once every peer has posted (MG_VERDICT_*);
        *who: the board rank a REFUSED, MISMATCH, TIMEOUT or BROKEN verdict names, else -1."""
        cdef int v
        who[0] = -1
        v = mg_board_wait(&self.b, coll, who, _SPIN_S)
        if v < 0:
            with nogil:
                v = mg_board_wait(&self.b, coll, who, 0.0)
        return v

    cdef int agree_device(self, int coll, int *who) except -2:
        """post_device, then wait_device: the verdict of this call."""
        who[0] = -1
        if self.post_device(coll) != 0:
            return MG_VERDICT_TIMEOUT
        return self.wait_device(coll, who)

    cdef void stash(self, int verdict, int who) noexcept:
        """Keeps the verdict of the call just agreed for the general path, which runs it (the fast
        path agreed, then found the call is not the engine's)."""
        self._stash_call, self._stash_verdict, self._stash_who = self.b.call, verdict, who

    cdef bint has_stash(self) noexcept:
        """Whether a verdict waits in the stash for the general path (take_stash would return it)."""
        return self._stash_call != 0 and self._stash_call == self.b.call

    def take_stash(self):
        """(verdict, board rank) the fast path agreed for this rank's last call, or None."""
        if not self.has_stash():
            return None
        self._stash_call = 0
        return self._stash_verdict, self._stash_who

    def post(self, int coll, int placement):
        """put() for Python callers: False on a timeout (nothing posted)."""
        return self.put(coll, placement) == 0

    def agree(self, int coll):
        """post(DEVICE) and the verdict: (verdict, board rank or -1)."""
        cdef int who = -1
        cdef int v = self.agree_device(coll, &who)
        return v, who

    def look(self, uint64_t call, int coll, double spin_s):
        """The verdict of this rank's call `call` (posted DEVICE, the oldest it has not decided) if every
        peer has posted it within `spin_s` (the GIL held): (verdict, board rank or -1), else (-1, -1)."""
        cdef int who = -1
        cdef int v
        if not self._mapped:
            return MG_VERDICT_TIMEOUT, -1
        if spin_s > 0.0:
            v = mg_board_wait_call(&self.b, call, coll, &who, spin_s)
        else:
            v = mg_board_look_call(&self.b, call, coll, &who)
        if v < 0:
            return -1, -1
        return v, who

    def wait(self, uint64_t call, int coll):
        """look() that waits for the peers' posts up to the deadline (the GIL released after a spin):
        (verdict, board rank or -1); TIMEOUT names a rank that never posted."""
        cdef int who = -1
        cdef int v
        if not self._mapped:
            return MG_VERDICT_TIMEOUT, -1
        v = mg_board_wait_call(&self.b, call, coll, &who, _SPIN_S)
        if v < 0:
            with nogil:
                v = mg_board_wait_call(&self.b, call, coll, &who, 0.0)
        return v, who

    # ---- several nodes ('nodes' mode, mpigpu/_state/agree_nodes.py): a board per node, its leader publishes ----
    cdef _answer(self, int what, uint64_t call, int coll, double spin_s, bint blocking):
        cdef int who = -1
        cdef int v
        if not self._mapped:
            return MG_VERDICT_TIMEOUT, -1
        if blocking:
            v = mg_board_wait_as(&self.b, what, call, coll, &who, _SPIN_S)
            if v < 0:
                with nogil:
                    v = mg_board_wait_as(&self.b, what, call, coll, &who, 0.0)
        elif spin_s > 0.0:
            v = mg_board_wait_as(&self.b, what, call, coll, &who, spin_s)
        else:
            v = mg_board_look_as(&self.b, what, call, coll, &who)
        if v < 0:
            return -1, -1
        return v, who

    def scan(self, uint64_t call, int coll, double spin_s=0.0, bint blocking=False):
        """The node's verdict of this rank's call `call` (posted DEVICE) once every peer on the board
        has posted it, as look() (within `spin_s`) or wait() (`blocking`) answer it, but not acked: the
        rank reads the leader's verdict next, or acks."""
        return self._answer(MG_BOARD_SCAN, call, coll, spin_s, blocking)

    def published(self, uint64_t call, double spin_s=0.0, bint blocking=False):
        """The verdict the node's leader published for call `call` (BROKEN, board rank 0, where it gave
        up on it), within `spin_s` or up to the deadline (`blocking`): (verdict, board rank or -1), else
        (-1, -1). Not acked."""
        return self._answer(MG_BOARD_PUBLISHED, call, 0, spin_s, blocking)

    def placement_of(self, uint64_t call, int rank):
        """What board rank `rank` posted for call `call` (a Placement code), or -1 (another call there)."""
        if not self._mapped or not 0 <= rank < self.b.n:
            return -1
        return mg_board_placement_of(&self.b, call, rank)

    def ack(self, uint64_t call):
        """This rank is done reading call `call`."""
        if self._mapped:
            mg_board_ack_call(&self.b, call)

    def publish(self, uint64_t call, int verdict):
        """The leader's verdict of its call `call`, for the node's ranks that wait for it."""
        if self._mapped:
            mg_board_publish(&self.b, call, verdict)

    def missing(self, uint64_t call=0):
        """The board ranks that have not posted this rank's call `call` (0: its last) (for error messages)."""
        cdef int out[64]
        cdef int count
        if not self._mapped:
            return []
        count = mg_board_missing_call(&self.b, call if call else self.b.call, out, 64)
        return [out[i] for i in range(min(count, 64))]

    def give_up(self, uint64_t from_call=0):
        """This rank stops waiting for its calls from `from_call` (0: its last call) to its last (a
        timeout, an abort from any thread): its peers' later looks at them find the communicator broken."""
        if self._mapped:
            mg_board_give_up_from(&self.b, from_call)

    def close(self):
        """Unmaps the board (no call of this rank may use it after)."""
        if self._mapped:
            self._mapped = False
            self.b.base = NULL
            try:
                self._mm.close()
            except (BufferError, ValueError):
                pass
            self._mm = None
