# The placement board's handle (board.h), for the extensions that post on it without a Python call:
# _front (host buffers' calls) and _device (the engine's fast path).
from libc.stdint cimport uint64_t

cdef extern from "board.h":
    ctypedef struct mg_board:
        uint64_t *base
        uint64_t call
        int n
        int me


# The routes' epoch (_board.pyx, routes_changed): its address, for the interposer's entry.
cdef uint64_t *routes_epoch() noexcept nogil


cdef class Board:
    cdef mg_board b
    cdef object _mm
    cdef bint _mapped
    cdef readonly tuple ranks
    cdef readonly str path
    cdef readonly uint64_t mapped_count
    cdef uint64_t _stash_call
    cdef int _stash_verdict, _stash_who

    cdef int put(self, int coll, int placement) except -2
    cdef int post_host(self, int coll) except -2
    cdef int post_device(self, int coll) except -2
    cdef int wait_device(self, int coll, int *who) except -2
    cdef int agree_device(self, int coll, int *who) except -2
    cdef void stash(self, int verdict, int who) noexcept
    cdef bint has_stash(self) noexcept
    cdef _answer(self, int what, uint64_t call, int coll, double spin_s, bint blocking)
