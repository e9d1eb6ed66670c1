"""Every buffer method of mpi4py's classes made device-aware from its signature, in one place, so that
no method (present or added by a later mpi4py) can hand a device pointer to MPI by being forgotten.

mpi4py annotates each buffer parameter (`BufSpec...`, `Buffer`); for every such method of an mpi4py
class that mpigpu's subclass does not implement itself, `install` generates one with the same
signature: host buffers go to mpi4py's method untouched (the added cost is a type check per buffer),
and a device buffer sends the call down the mirrored path in the form its kind needs (blocking,
non-blocking, persistent, partitioned, split collective), or raises mpigpu.Error before MPI sees the
pointer where host MPI would have to keep using device memory after the call (window memory, the
buffer Bsend uses, pickled receives).
"""
import inspect

from mpi4py import MPI

from .. import _cuda
from .._base.config import config
from .._state.undecided import ordered as is_collective, unsettled
from .._ext._front import note_host
from .._ext._intake import is_device
from .._state.comm_state import follow, settle_before
from .._describe.call import read_once
from .._describe.strided import as_spec
from .._paths import exchange, exchange_reduce, mirrored
from .._paths.support import packing
from .._paths.mirrored import IN, INOUT, OUT
from ..errors import BufferArgumentError, Error

_BUFFER = ('BufSpec', 'Buffer')


# Read once per function: the seven communicator classes share most of mpi4py's methods, and every
# process reads them at import (inspect.signature took 48 of `import mpigpu`'s 200 ms on a CPU host).
_SIGNATURES = {}
_CODE = {}  # a generated method's source -> its compiled code (the classes share most sources)


def _signature(fn):
    """inspect.signature(fn), or None where it has none."""
    try:
        return _SIGNATURES[fn]
    except KeyError:
        pass
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    _SIGNATURES[fn] = sig
    return sig


def buffer_params(fn):
    """The names of `fn`'s buffer parameters, from mpi4py's annotations (empty: not a buffer method)."""
    sig = _signature(fn)
    if sig is None:
        return ()
    return tuple(p.name for p in sig.parameters.values()
                 if isinstance(p.annotation, str) and any(k in p.annotation for k in _BUFFER))


def role(method, param):
    """How `method` uses its buffer parameter `param`: read (IN), written (OUT) or both (INOUT)."""
    m = method.lower()
    if param in ('sendbuf', 'inbuf', 'compare'):
        return IN
    if param == 'origin':
        return OUT if m in ('get', 'rget') else IN
    if param == 'buf':
        if 'bcast' in m or 'replace' in m:
            return INOUT
        if 'send' in m or 'write' in m:
            return IN
        return OUT
    return OUT if param in ('recvbuf', 'result') else INOUT


# Methods whose device memory host MPI would keep using after they return: refused.
_REFUSED = {
    'Iagree': 'the flag of an agreement must be host memory',
    'Create': 'window memory must be host memory: other ranks read and write it through MPI',
    'Attach': 'window memory must be host memory: other ranks read and write it through MPI',
    'Detach': 'window memory must be host memory: other ranks read and write it through MPI',
    'recv': 'pickled objects are received into host memory',
    'irecv': 'pickled objects are received into host memory',
    'sendrecv': 'pickled objects are received into host memory',
}
# Rooted collectives: the buffers the root reads or writes, and those the other ranks do (mpi4py does
# not read the others at all, so those are passed through, not mirrored).
_ROOTED = {'Gather': (('recvbuf',), ('sendbuf',)), 'Gatherv': (('recvbuf',), ('sendbuf',)),
           'Scatter': (('sendbuf',), ('recvbuf',)), 'Scatterv': (('sendbuf',), ('recvbuf',)),
           'Reduce': (('recvbuf',), ('sendbuf',)), 'Bcast': (('buf',), ('buf',))}


def _blocking_name(name, klass):
    """The blocking form a non-blocking or persistent method starts (Gather for Igather and
    Gather_init; Put for a window's Rput), or None for a blocking method."""
    if name.endswith('_init'):
        return name[:-len('_init')]
    starts = 'IR' if issubclass(klass, MPI.Win) else 'I'
    if len(name) > 2 and name[0] in starts:
        blocking = name[1].upper() + name[2:]
        if hasattr(klass, blocking):
            return blocking
    return None


def _kind(name, klass):
    """The form of a buffer method of mpi4py's `klass` on the mirrored path."""
    if name in _REFUSED:
        return 'refused'
    if name in ('Psend_init', 'Precv_init'):
        return 'partitioned'
    if name.endswith('_init'):
        return 'persistent'
    if name.endswith('_begin'):
        return 'begin'
    if name.endswith('_end'):
        return 'end'
    return 'start' if _blocking_name(name, klass) else 'blocking'


def _significant(self, name, params, args):
    """The buffer parameters that mean nothing at this rank: a rooted collective's root-only buffers
    off the root, and on an intercommunicator the root group's other ranks' (MPI.PROC_NULL) too."""
    rooted = _ROOTED.get(_blocking_name(name, type(self)) or name)
    if rooted is None or 'root' not in params or not isinstance(self, MPI.Comm):
        return set()
    at_root, at_leaf = rooted
    try:
        root = int(args[params.index('root')])
    except (TypeError, ValueError):
        return set()  # mpi4py raises for it
    if not self.Is_inter():
        used = set(at_root) | set(at_leaf) if root == self.Get_rank() else set(at_leaf)
    elif root == MPI.ROOT:
        used = set(at_root)
    elif root == MPI.PROC_NULL:
        used = set()
    else:
        used = set(at_leaf)
    return {p for p in at_root + at_leaf if p not in used}


def _form(obj, method, param, in_place):
    """How mpi4py reads buffer parameter `param` (packing.form_of); a simple message of one block
    outside communicators (windows, files, messages)."""
    if not isinstance(obj, MPI.Comm):
        return (packing.SIMPLE, 0)
    return packing.form_of(obj, method, param, in_place)


def _exchanged(owner, name):
    """The placement board's code of a blocking, non-blocking (I*) or persistent (*_init) method the
    exchange path may take on `owner`'s communicators (mpigpu/_paths/exchange.py; the reductions:
    exchange_reduce.py), else None. Its host-buffer calls are posted
    for the ranks that may bring device buffers, as the engine's collectives are (mpigpu/_state/agree.py)."""
    if not config.exchange or not issubclass(owner, MPI.Intracomm):
        return None
    kind = _kind(name, owner)
    if kind in ('start', 'persistent'):
        name = _blocking_name(name, owner)
    elif kind != 'blocking':
        return None
    return exchange.CODES.get(name, exchange_reduce.CODES.get(name))


def _handler(owner, name, base, params, bufs, state_of):
    """The device-buffer side of one generated method."""
    kind = _kind(name, owner)
    exchanged = _exchanged(owner, name) is not None
    reduces = 'op' in params or name in ('Accumulate', 'Raccumulate', 'Get_accumulate', 'Rget_accumulate',
                                         'Reduce_local')
    receive = kind == 'start' and ('recv' in name.lower() or 'read' in name.lower())

    fast = exchange.fast_entry() if exchanged and kind == 'blocking' and name in exchange.FAST else None
    code = int(exchange.CODES[name]) if fast is not None else -1
    rooted = 'root' in params
    topology = name.startswith('Neighbor_')
    blocking = _blocking_name(name, owner)  # what an I* or *_init method starts (None: it blocks)
    path = exchange_reduce if (blocking or name) in exchange_reduce.CODES else exchange

    where = tuple(params.index(b) for b in bufs)

    def device_call(self, args):
        if fast is not None and fast(self, code, args[0], args[1], args[2] if rooted else None,
                                     exchange.edges_of(state_of(self)) if topology else None):
            return None  # the exchange's fast path ran it (mpigpu/_ext/_exchange.pxi)
        st = state_of(self)
        args = list(args)
        for i in where:  # each device buffer read once for every step below (the exchange's, the mirrors')
            args[i] = read_once(args[i], _cuda.consumer_stream)
        if kind == 'refused':
            raise BufferArgumentError(name, f'device memory is not supported here: {_REFUSED[name]}', arg=bufs[0],
                        rank=st.rank, error_class=MPI.ERR_BUFFER)
        if exchanged and kind == 'persistent':
            return path.persistent(st, name, blocking, args, lambda: mirrored_call(self, st, args, 'persistent'))
        if exchanged and kind == 'start':  # its host MPI call after the undecided calls, as MPI orders it
            return path.start(st, name, blocking, args, lambda: follow(
                self, name, lambda: mirrored_call(self, st, args, 'start')))
        if exchanged:  # the mirrors' forms are read only where the ranks agree on the host MPI call
            return path.run(st, name, args, lambda: mirrored_call(self, st, args, 'blocking'))
        return mirrored_call(self, st, args, kind)

    def stream_call(self, args, stream):
        """The stream= form (the exchange's blocking calls and its reductions): on that CUDA stream."""
        handle = _cuda.stream_handle_or_none(stream) if fast is not None else None
        if handle is not None and fast(self, code, args[0], args[1], args[2] if rooted else None,
                                       exchange.edges_of(state_of(self)) if topology else None, handle):
            return None  # enqueued by the exchange's fast path
        st = state_of(self)
        try:
            handle = _cuda.stream_handle(name, st.rank, stream)
            if not any(is_device(args[params.index(b)]) for b in bufs):
                raise Error(name, 'stream= needs device buffers (host buffers go to MPI, which has no streams)',
                            arg='stream', rank=st.rank, error_class=MPI.ERR_ARG)
        except Error:
            if exchanged:
                st.agreement.refuse(name, path.CODES[name])  # the peers raise too
            raise
        if not exchanged:  # the exchange switched off (MPIGPU_EXCHANGE=0): the mirrors, the stream's work first
            with _cuda.errors_as(name, st.rank):
                _cuda.sync(handle)
            return mirrored_call(self, st, args, 'blocking')
        return path.on_stream(st, name, args, handle, lambda: mirrored_call(self, st, args, 'blocking'))
    device_call.on_stream = stream_call

    def mirrored_call(self, st, args, kind):
        skip = _significant(self, name, params, args)
        where = [i for i, p in enumerate(params) if p in bufs and p not in skip]
        in_place = 'sendbuf' in params and args[params.index('sendbuf')] is MPI.IN_PLACE
        blocking = _blocking_name(name, type(self)) or name
        forms = [_form(self, blocking, params[i], in_place) for i in where]
        args = list(args)
        for i, form in zip(where, forms):
            args[i] = as_spec(args[i], form, name, st.rank)  # strided arrays: read through their strides
        items = [(args[i], role(name, params[i]), form) for i, form in zip(where, forms)]

        def call(*hosts):
            full = list(args)
            for i, h in zip(where, hosts):
                full[i] = h
            return base(self, *full)
        if kind == 'blocking':
            return mirrored.run(st, name, call, items, reduces)
        if kind == 'start':
            return mirrored.start(st, name, call, items, reduces, receive)
        if kind == 'persistent':
            return mirrored.Persistent.create(st, name, call, items, reduces)
        if kind == 'partitioned':
            return mirrored.Partitioned.create(st, name, call, args[0], args[params.index('partitions')],
                                               name == 'Psend_init')
        return mirrored.split_collective(st, self, name, call, items, kind == 'begin')
    return device_call


def ordered(owner, name):
    """True for a collective of a communicator: it follows the communicator's undecided non-blocking
    engine calls in MPI's order (mpigpu/_state/agree.py), so it has them decided first."""
    return issubclass(owner, MPI.Comm) and is_collective(name)


def _streamed(owner, name):
    """True for a blocking method of the exchange path's family (its reductions too) that takes
    `stream=`, whether or not the exchange is switched on (a program's calls stay valid)."""
    return (issubclass(owner, MPI.Intracomm) and _kind(name, owner) == 'blocking'
            and (name in exchange.CODES or name in exchange_reduce.CODES))


def _source(name, params, defaults, bufs, settles, posts, streamed=False):
    """Python source of a method with mpi4py's signature that routes device buffers (`settles`: a
    collective, which first has the communicator's undecided calls decided; 'follows': a non-blocking
    one, made after them without waiting; `posts`: a host-buffer call is posted for the peers first;
    a non-blocking one that posts agrees on its device calls itself, mpigpu/_paths/exchange.py)."""
    sig = ', '.join(f'{p}=_default_{p}' if p in defaults else p for p in params)
    test = ' or '.join(f'_is_device({b})' for b in bufs)
    args = ', '.join(params)
    if posts and settles == 'follows':  # posted now, in call order; its host MPI call after the undecided
        return (f'def {name}(self, {sig}):\n'
                f'    if {test}:\n'
                f'        return _device_call(self, ({args},))\n'
                f'    _note_host(self, _code, True)\n'
                f'    if _unsettled:\n'
                f'        return _follow(self, {name!r}, lambda: _base(self, {args}))\n'
                f'    return _base(self, {args})\n')
    post = '    _note_host(self, _code, False)\n' if posts else ''
    on_stream = (f'    if stream is not None:\n'
                 f'        return _stream_call(self, ({args},), stream)\n') if streamed else ''
    body = (f'{on_stream}'
            f'    if {test}:\n'
            f'        return _device_call(self, ({args},))\n'
            f'{post}'
            f'    return _base(self, {args})\n')
    if streamed:
        sig += ', *, stream=None'  # mpigpu's stream= form (its blocking calls only)
    if settles == 'follows':  # a non-blocking collective: made after the undecided calls, never waiting
        return (f'def {name}(self, {sig}):\n'
                f'    if _unsettled:\n'
                f'        return _follow(self, {name!r}, lambda: _route(self, {args}))\n'
                f'    return _route(self, {args})\n\n\n'
                f'def _route(self, {", ".join(params)}):\n' + body)
    settle = '    if _unsettled:\n        _settle(self)\n' if settles else ''
    return f'def {name}(self, {sig}):\n{settle}' + body


def make(owner, name, base, state_of):
    """A method of class `owner` with the signature of mpi4py's `base` (a function of an mpi4py class)
    that sends device buffers down the mirrored path."""
    sig = _signature(base)
    params = [p for p in sig.parameters if p != 'self']
    defaults = {p.name: p.default for p in sig.parameters.values() if p.default is not inspect.Parameter.empty}
    bufs = buffer_params(base)
    code = _exchanged(owner, name)
    namespace = {'_is_device': is_device, '_base': base, '_unsettled': unsettled, '_settle': settle_before,
                 '_follow': follow, '_device_call': _handler(owner, name, base, params, bufs, state_of),
                 '_note_host': note_host, '_code': int(code) if code is not None else -1}
    namespace['_stream_call'] = namespace['_device_call'].on_stream
    namespace.update({f'_default_{p}': v for p, v in defaults.items()})
    settles = ordered(owner, name) and ('follows' if _kind(name, owner) == 'start' else True)
    source = _source(name, params, defaults, bufs, settles, code is not None, _streamed(owner, name))
    compiled = _CODE.get(source)
    if compiled is None:
        compiled = _CODE[source] = compile(source, f'<mpigpu method {name}>', 'exec')
    exec(compiled, namespace)
    fn = namespace[name]
    fn.__qualname__ = f'{owner.__name__}.{name}'
    fn.__doc__ = base.__doc__
    fn.__module__ = owner.__module__
    return fn


def host_post(klass, name):
    """For a method this module made for `klass`: the collective code its host-buffer calls post for their
    peers before mpi4py's call (-1: none), which is all they do; None for a method of its own (or none)."""
    fn = getattr(klass, name, None)
    code = getattr(fn, '__code__', None)
    if code is None or code.co_filename != f'<mpigpu method {name}>':
        return None
    return fn.__globals__.get('_code', -1)


def _own(owner):
    """The names mpigpu's own classes in owner's hierarchy define (the generator leaves those); not
    those another stand-in class above it was given (mpigpu's Comm above Intracomm): owner gets its own
    methods, made for its kind of communicator."""
    names = set()
    for klass in owner.__mro__:
        if klass.__module__.startswith('mpi4py') or (klass is not owner and 'stands_for' in klass.__dict__):
            continue
        names.update(klass.__dict__)
    return names


def install(owner, state_of):
    """Gives class `owner` a device-aware method for every buffer method of its mpi4py bases that it
    does not define itself. `state_of(obj)` gives the state (rank, staging buffers) of an instance."""
    own = _own(owner)
    for klass in owner.__mro__:
        if not klass.__module__.startswith('mpi4py'):
            continue
        for name, attr in klass.__dict__.items():
            if name in own or name.startswith('_') or isinstance(attr, (classmethod, staticmethod)):
                continue
            if not callable(attr) or not buffer_params(attr):
                continue
            setattr(owner, name, make(owner, name, attr, state_of))
            own.add(name)

