"""The package's layering, read from its source: every import counted (module level, inside functions,
`importlib.import_module` of a constant name, the Cython extensions' imports and cimports), none goes
up the layers (LAYERS) and none closes a circle, none among the C and CUDA headers either; one door to
the CUDA layer (only mpigpu/_cuda.py imports mpigpu._ext._device), and every module says its job first."""
import ast
import functools
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, 'mpigpu')
# a Cython module's imports: `from X cimport ...`, `from X import ...`, `cimport X`, `import X`
_PYX_IMPORT = re.compile(r'^\s*(?:from\s+(\.*[\w.]*)\s+c?import\s+([\w, ]+)|c?import\s+([\w.]+))', re.M)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The layers, top first (docs/architecture.md): a module imports only from its own layer or those below.
# Each entry is a module or package; a module belongs to the longest entry its name starts with.
LAYERS = [
    ('tools', ['mpigpu.__main__', 'mpigpu.perf']),
    ('public names', ['mpigpu', 'mpigpu.MPI']),
    ('public face', ['mpigpu._face']),
    ('paths', ['mpigpu._paths']),
    ('call description', ['mpigpu._describe']),
    ('per-communicator state', ['mpigpu._state']),
    ('transports between nodes', ['mpigpu._transports']),
    ('door to CUDA', ['mpigpu._cuda']),
    ('hot path', ['mpigpu._ext']),
    # (the C code table's reader is compiled with the hot path but imports nothing: base)
    ('base', ['mpigpu._base', 'mpigpu.errors', 'mpigpu._interpose', 'mpigpu._ext._codes']),
]


def _name_of(path):
    """(module name, its package) of a file under mpigpu/."""
    rel = os.path.relpath(path, ROOT).rsplit('.', 1)[0].replace(os.sep, '.')
    if rel.endswith('.__init__'):
        name = rel[:-len('.__init__')]
        return name, name
    return rel, rel.rsplit('.', 1)[0]


def _target(package, level, module):
    base = package.split('.')
    if level:
        base = base[:len(base) - level + 1]
        return '.'.join(base + ([module] if module else []))
    return module or ''


def _python_deps(tree, package, known):
    """The mpigpu modules a Python module imports, wherever the import is (edges to `pkg.sub` for
    `from pkg import sub` where sub is a module: importing a submodule is not importing its package's
    __init__ again)."""
    deps = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _target(package, node.level, node.module)
            if mod.startswith('mpigpu'):
                for a in node.names:
                    sub = f'{mod}.{a.name}'
                    deps.append(sub if sub in known else mod)
        elif isinstance(node, ast.Import):
            deps += [a.name for a in node.names if a.name.startswith('mpigpu')]
        elif isinstance(node, ast.Call) and getattr(node.func, 'attr', getattr(node.func, 'id', '')) == 'import_module':
            if node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith('mpigpu'):
                deps.append(node.args[0].value)
    return deps


def _cython_deps(text, package, known):
    deps = []
    for m in _PYX_IMPORT.finditer(text):
        frm, names, plain = m.groups()
        if plain:
            mods = [plain]
        else:
            level = len(frm) - len(frm.lstrip('.'))
            mod = _target(package, level, frm.lstrip('.'))
            mods = [f'{mod}.{n.strip()}' if f'{mod}.{n.strip()}' in known else mod for n in names.split(',')]
        deps += [d for d in mods if d.startswith('mpigpu')]
    return deps


@functools.lru_cache(maxsize=1)  # read once: every test below reads the same tree, none changes it
def _modules():
    """{module name: (path, ast or None, [imported mpigpu modules])} for the package's Python and Cython
    modules (a .pyx and its .pxd are one module)."""
    files = {}
    for root, _dirs, names in os.walk(PKG):
        for f in names:
            if f.endswith(('.py', '.pyx', '.pxd')):
                path = os.path.join(root, f)
                files.setdefault(_name_of(path), []).append(path)
    known = {name for name, _package in files}
    out = {}
    for (name, package), paths in files.items():
        tree, deps = None, []
        for path in paths:
            text = open(path).read()
            if path.endswith('.py'):
                tree = ast.parse(text)
                deps += _python_deps(tree, package, known)
            else:
                deps += _cython_deps(text, package, known)
        out[name] = (paths[0], tree, deps)
    return out


def _cycles(graph):
    """The circles of a directed graph {node: set of nodes}, one path each."""
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for d in sorted(graph[m]):
            visit(d)
        stack.pop()
    for m in sorted(graph):
        visit(m)
    return cycles


def test_no_import_circles():
    mods = _modules()
    graph = {m: {d for d in deps if d in mods and d != m} for m, (_p, _t, deps) in mods.items()}
    assert not _cycles(graph)


def layer_of(module):
    """The index in LAYERS (0: top) of a module: its longest entry."""
    best = None
    for i, (_name, entries) in enumerate(LAYERS):
        for e in entries:
            if (module == e or module.startswith(e + '.')) and (best is None or len(e) > len(best[1])):
                best = (i, e)
    assert best is not None, f'{module} is in no layer of LAYERS'
    return best[0]


def test_no_import_goes_up_the_layers():
    ups = []
    for m, (path, _t, deps) in _modules().items():
        for d in deps:
            if layer_of(d) < layer_of(m):
                ups.append(f'{os.path.relpath(path, ROOT)} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})')
    assert not ups, '\n'.join(sorted(set(ups)))


def test_each_layer_is_its_own_package():
    """Below the public names, each module sits in its layer's package: no flat modules beside them."""
    flat = sorted(f for f in os.listdir(PKG) if f.endswith(('.py', '.pyx')) and f not in
                  ('__init__.py', '__main__.py', 'MPI.py', 'errors.py', '_cuda.py'))
    assert not flat, flat


def test_the_layer_check_sees_an_upward_import():
    """The layer reader places modules as the check relies on (a regression guard for it)."""
    assert layer_of('mpigpu._state.agree') > layer_of('mpigpu._paths.hier.calls') > layer_of('mpigpu._face.comm')
    assert layer_of('mpigpu._interpose') == layer_of('mpigpu._base.config') and layer_of('mpigpu') < layer_of('mpigpu._face')


def test_the_graph_sees_deferred_imports():
    """The reader of imports finds what the circle test relies on (a regression guard for the reader)."""
    mods = _modules()
    assert 'mpigpu._base.plain' in mods['mpigpu._face.pickling'][2]  # module level
    assert 'mpigpu._face.comm' in mods['mpigpu._face.capi'][2]       # inside a function
    assert 'mpigpu._ext._board' in mods['mpigpu._ext._front'][2]     # a Cython cimport
    tree = ast.parse("import importlib\ndef f():\n    return importlib.import_module('mpigpu.MPI')\n")
    assert _python_deps(tree, 'mpigpu', {'mpigpu.MPI'}) == ['mpigpu.MPI']


def test_no_include_circles():
    """The C and CUDA headers (cuda/, mpigpu/_ext/) include each other without a circle."""
    graph = {}
    for folder in (os.path.join(ROOT, 'cuda'), os.path.join(PKG, '_ext')):
        for f in os.listdir(folder):
            if f.endswith(('.h', '.cuh', '.cu', '.pxi')):
                text = open(os.path.join(folder, f)).read()
                graph.setdefault(f, set()).update(os.path.basename(i) for i in _INCLUDE.findall(text))
    graph = {k: {d for d in v if d in graph and d != k} for k, v in graph.items()}
    assert not _cycles(graph)


def test_one_door_to_the_cuda_layer():
    importers = sorted(m for m, (_p, _t, deps) in _modules().items() if 'mpigpu._ext._device' in deps)
    assert importers == ['mpigpu._cuda'], importers


# The modules that set up or wire the CUDA layer's own objects, which read `_cuda.device` itself: the
# device team, its completion requests, the peer-memory (IPC) transport, NCCL, and the bindings of the
# fast paths (point-to-point, engine, exchange, the interposer's entry). Every other module asks the
# door's verbs (mpigpu/_cuda.py).
_WIRING = {'mpigpu._state.team', 'mpigpu._state.requests', 'mpigpu._paths.p2p_ipc', 'mpigpu._paths.p2p',
           'mpigpu._paths.engine', 'mpigpu._paths.exchange', 'mpigpu._transports.nccl',
           'mpigpu._face.interposed', 'mpigpu._cuda'}


def _door_uses(tree):
    """The attributes a module reads off `_cuda` (the door), by name."""
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == '_cuda'}


def test_the_door_is_narrow():
    readers = sorted(m for m, (_p, tree, _d) in _modules().items()
                     if tree is not None and 'device' in _door_uses(tree) and m not in _WIRING)
    assert not readers, f'modules reading _cuda.device instead of the door\'s verbs: {readers}'


def test_every_verb_used_is_the_doors():
    """A name the paths ask of the door exists there (the GPU-only paths, NCCL's and the replays', run in
    no CPU test: a misspelt verb would show only on a GPU)."""
    from mpigpu import _cuda
    missing = sorted(f'{m}: _cuda.{name}' for m, (_p, tree, _d) in _modules().items() if tree is not None
                     for name in _door_uses(tree) if not hasattr(_cuda, name))
    assert not missing, missing


def test_every_module_says_its_job():
    for name, (path, tree, _deps) in _modules().items():
        if tree is None:  # a Cython module: its comment block says it (not a docstring ast can read)
            continue
        doc = ast.get_docstring(tree)
        assert doc and doc.strip(), f'{path}: no module docstring'


def _unrouted(owner):
    """Buffer methods of owner's mpi4py bases that still reach mpi4py directly."""
    from mpigpu._face.methods import buffer_params
    out = []
    for klass in owner.__mro__:
        if not klass.__module__.startswith('mpi4py'):
            continue
        for name, attr in klass.__dict__.items():
            if callable(attr) and not isinstance(attr, (classmethod, staticmethod)) and buffer_params(attr):
                if getattr(owner, name) is attr:
                    out.append(f'{klass.__name__}.{name}')
    return out


def test_every_buffer_method_of_mpi4py_is_routed():
    """Each buffer method (by mpi4py's annotations) of each class mpigpu wraps is mpigpu's, so none
    can hand a device pointer to MPI unseen; the drop-in replaces what programs reach them through."""
    from mpigpu._face import comm, objects
    classes = (comm.Comm, comm.Intracomm, comm.Intercomm, comm.Topocomm, comm.Cartcomm, comm.Graphcomm, comm.Distgraphcomm,
               objects.Message, objects.Datatype, objects.Op, objects.File, objects.Win)
    assert {cls.__name__: _unrouted(cls) for cls in classes} == {cls.__name__: [] for cls in classes}
