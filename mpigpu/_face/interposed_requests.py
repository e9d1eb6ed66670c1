"""Persistent requests made below Python: what MPI_Send_init, MPI_Allreduce_init & co. with device buffers
give a C caller, and the request calls (MPI_Start, MPI_Wait & co.) that meet them.

mpigpu's persistent request (a `Startable`: its Start is mpigpu's, each round a generalized request that
completes once the GPU work is done) does the work. The caller gets a request of the library's that
stands for it: a proxy, an inactive persistent receive from MPI_PROC_NULL, so a handle the library never
trips over. The interposer (pmpi/requests.c) knows the proxies and hands a request call that holds one
here (`Requests.dispatch`); the call then runs on mpi4py's class-level functions over mpigpu's requests in
the proxies' places and the library's requests as they are, and every handle but a proxy is written back
as the library left it. A proxy stays the caller's handle until MPI_Request_free, as an inactive
persistent request does.
"""
import ctypes

from mpi4py import MPI

from .._base import plain as _plain
from .._interpose.functions import REQUEST_TABLE
from .._state import requests as _requests

_WORD = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
_IGNORE = (0, 1)  # MPI_STATUS(ES)_IGNORE: Open MPI's, MPICH's
_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_ssize_t))


class Requests:
    """The proxies of one process (proxy handle -> (mpigpu's request, the proxy)) and the request calls'
    handler; `fail(function, exc)` turns an exception into the MPI error code the caller gets."""

    def __init__(self, lib, fail):
        self.lib, self.fail = lib, fail
        self.proxies = {}
        self.freeing = []  # mpigpu's requests freed by the caller while a round ran: freed once it ends
        self.size = MPI._sizeof(MPI.Request)
        self.status_size = MPI._sizeof(MPI.Status)
        self.cell = ctypes.c_int32 if self.size == 4 else ctypes.c_int64
        self.cfunc = _HANDLER(self.dispatch)
        lib.mpigpu_pmpi_proxy_add.argtypes = lib.mpigpu_pmpi_proxy_remove.argtypes = (ctypes.c_ssize_t,)
        lib.mpigpu_pmpi_set_request_handler(self.cfunc, self.size)

    # ---- the persistent calls' side ----------------------------------------------------------------
    def hand_out(self, request, comm, address):
        """Writes a proxy of mpigpu's persistent `request` (made on `comm`) to the caller's MPI_Request at
        `address`."""
        proxy = _plain.Comm.Recv_init(comm, None, MPI.PROC_NULL)
        word = proxy.handle & _WORD
        if self.lib.mpigpu_pmpi_proxy_add(self._signed(word)) != 0:
            proxy.Free()
            raise MemoryError('no memory left for the interposer\'s table of persistent requests')
        self.proxies[word] = (request, proxy)
        ctypes.memmove(address, MPI._addressof(proxy), self.size)

    def _signed(self, word):
        return word - (1 << 64) if word >= 1 << 63 else word

    # ---- the request calls' side -------------------------------------------------------------------
    def _words(self, address, n):
        cells = (self.cell * n).from_address(address)
        return [c & _WORD for c in cells]

    def _put(self, address, i, handle):
        cells = (self.cell * (i + 1)).from_address(address)
        bits = 8 * self.size
        h = handle & ((1 << bits) - 1)
        cells[i] = h - (1 << bits) if h >= 1 << (bits - 1) else h

    def _objects(self, words, persistent=False):
        """mpigpu's request for each proxy, the library's request (as mpi4py's object) for each other."""
        cls = MPI.Prequest if persistent else MPI.Request
        return [self.proxies[w][0] if w in self.proxies else cls.fromhandle(w) for w in words]

    def _write_back(self, address, words, objs):
        for i, (w, r) in enumerate(zip(words, objs)):
            if w not in self.proxies and (r.handle & _WORD) != w:
                self._put(address, i, r.handle)

    def _status(self, address, status, i=0):
        if address not in _IGNORE and status is not None:
            ctypes.memmove(address + i * self.status_size, MPI._addressof(status), self.status_size)

    def dispatch(self, index, words):
        fn = REQUEST_TABLE[index]
        try:
            if self.freeing:
                self._reap()
            a = {p.name: words[i] & _WORD for i, p in enumerate(fn.params)}
            return getattr(self, '_' + fn.name.lower())(a)
        except BaseException as exc:  # back to the C caller as an MPI error
            return self.fail(fn, exc)

    def _int(self, address, value):
        ctypes.c_int.from_address(address).value = value

    def _proxied(self, address):
        """mpigpu's request behind the proxy in the caller's MPI_Request at `address`."""
        return self.proxies[self._words(address, 1)[0]][0]

    def _start(self, a):
        self._proxied(a['request']).Start()
        return MPI.SUCCESS

    def _startall(self, a):
        _requests.Startall(self._objects(self._words(a['requests'], a['count']), persistent=True))
        return MPI.SUCCESS

    def _wait(self, a):
        status = MPI.Status()
        self._proxied(a['request']).Wait(status)
        self._status(a['status'], status)
        return MPI.SUCCESS

    def _test(self, a):
        status = MPI.Status()
        flag = self._proxied(a['request']).Test(status)
        self._int(a['flag'], int(flag))
        if flag:
            self._status(a['status'], status)
        return MPI.SUCCESS

    def _many(self, a, call):
        """A call over an array of requests: call(objects, statuses) with mpi4py's class-level function;
        handles written back, statuses copied out. Where it raises (MPI_ERR_IN_STATUS), the handles
        mpi4py already updated are written back all the same, and every status copied out."""
        n = a['count']
        words = self._words(a['requests'], n)
        objs = self._objects(words)
        statuses = [MPI.Status() for _ in range(n)]
        try:
            result = call(objs, statuses)
        except BaseException:
            if 'statuses' in a:  # (the array forms: each request's MPI_ERROR says how it ended)
                for i, s in enumerate(statuses):
                    self._status(a['statuses'], s, i)
            raise
        finally:
            self._write_back(a['requests'], words, objs)
        return result, statuses

    def _all(self, a, call):
        """Waitall, Testall, Request_get_status_all: every status copied out once all are done (Waitall
        returns None: done); the flag written where the call has one."""
        flag, statuses = self._many(a, call)
        done = flag is None or bool(flag)
        if 'flag' in a:
            self._int(a['flag'], int(done))
        if done:
            for i, s in enumerate(statuses):
                self._status(a['statuses'], s, i)
        return MPI.SUCCESS

    def _any(self, a, call):
        """Waitany, Testany, Request_get_status_any: the index (and flag) written, the one status copied."""
        got, statuses = self._many(a, lambda objs, sts: call(objs, sts[0] if sts else None))
        index, flag = got if isinstance(got, tuple) else (got, True)
        self._int(a['index'], index)
        if 'flag' in a:
            self._int(a['flag'], int(flag))
        if flag and statuses:
            self._status(a['status'], statuses[0])
        return MPI.SUCCESS

    def _waitall(self, a):
        return self._all(a, MPI.Request.Waitall)

    def _testall(self, a):
        return self._all(a, MPI.Request.Testall)

    def _waitany(self, a):
        return self._any(a, MPI.Request.Waitany)

    def _testany(self, a):
        return self._any(a, MPI.Request.Testany)

    def _some(self, a, call):
        got, statuses = self._many(a, call)
        done = got if got is not None else []
        self._int(a['outcount'], MPI.UNDEFINED if got is None else len(done))
        for k, i in enumerate(done):
            self._int(a['indices'] + 4 * k, i)
            self._status(a['statuses'], statuses[k], k)
        return MPI.SUCCESS

    def _waitsome(self, a):
        return self._some(a, MPI.Request.Waitsome)

    def _testsome(self, a):
        return self._some(a, MPI.Request.Testsome)

    def _request_free(self, a):
        """The caller's handle is REQUEST_NULL at once; a round still running ends on its own (MPI frees an
        active request once its operation completes) and mpigpu's request is freed then (_reap)."""
        word = self._words(a['request'], 1)[0]
        request, proxy = self.proxies.pop(word)
        self.lib.mpigpu_pmpi_proxy_remove(self._signed(word))
        try:
            if request._active():
                self.freeing.append(request)
            else:
                request.Free()
        finally:
            proxy.Free()
            self._put(a['request'], 0, MPI.REQUEST_NULL.handle)
        return MPI.SUCCESS

    def _reap(self):
        """Frees the requests of _request_free whose round has ended."""
        running = []
        for request in self.freeing:
            if request.Test():
                request.Free()
            else:
                running.append(request)
        self.freeing = running

    def close(self):
        self.lib.mpigpu_pmpi_set_request_handler(None, self.size)
        for request in self.freeing:  # (at exit: their rounds must end before MPI does)
            try:
                request.Wait()
                request.Free()
            except Exception:
                pass
        self.freeing = []

    def _cancel(self, a):
        """An active point-to-point round is cancelled where mpigpu's request holds the library's own (the
        mirrored paths: its receive or send on host mirrors; a persistent receive's round: its posted
        receive); MPI does not let collectives be cancelled."""
        request = self._proxied(a['request'])
        if request._active() and getattr(request, 'cancels_rounds', False):  # p2p.RecvInit's own
            request.Cancel()
            return MPI.SUCCESS
        inner = getattr(request, '_host', None)
        if not request._active() or inner is None:
            raise ValueError('MPI_Cancel: mpigpu\'s persistent request is not an active point-to-point round '
                             'on the mirrored path (collectives and inactive requests cannot be cancelled)')
        inner.Cancel()
        return MPI.SUCCESS

    def _request_get_status_any(self, a):
        return self._any(a, MPI.Request.Get_status_any)

    def _request_get_status_all(self, a):
        return self._all(a, MPI.Request.Get_status_all)

    def _request_get_status_some(self, a):
        return self._some(a, MPI.Request.Get_status_some)

    def _by_value(self, word):
        """mpigpu's request behind a proxy passed by value (a word of the library's handle width)."""
        word &= (1 << (8 * self.size)) - 1
        if self.size == 4 and word >= 1 << 31:
            word = (word - (1 << 32)) & _WORD
        return self.proxies[word][0]

    @staticmethod
    def _c_int(word):
        word &= 0xFFFFFFFF
        return word - (1 << 32) if word >= 1 << 31 else word

    def _request_get_status(self, a):
        status = MPI.Status()
        flag = self._by_value(a['request']).Get_status(status)
        self._int(a['flag'], int(flag))
        if flag:
            self._status(a['status'], status)
        return MPI.SUCCESS

    # ---- partitioned requests (Psend_init, Precv_init) ---------------------------------------------------
    def _pready(self, a):
        self._by_value(a['request']).Pready(self._c_int(a['partition']))
        return MPI.SUCCESS

    def _pready_range(self, a):
        self._by_value(a['request']).Pready_range(self._c_int(a['partition_low']), self._c_int(a['partition_high']))
        return MPI.SUCCESS

    def _pready_list(self, a):
        n = self._c_int(a['length'])
        partitions = list((ctypes.c_int * n).from_address(a['array_of_partitions'])) if n > 0 else []
        self._by_value(a['request']).Pready_list(partitions)
        return MPI.SUCCESS

    def _parrived(self, a):
        self._int(a['flag'], int(self._by_value(a['request']).Parrived(self._c_int(a['partition']))))
        return MPI.SUCCESS
