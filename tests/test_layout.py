"""The package's layering, read from its source: no import circles in mpigpu/, one door to the CUDA
layer (only mpigpu/_cuda.py imports mpigpu._ext._device), and every module says its job first."""
import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'mpigpu')


def _modules():
    """{module name: (path, [imported mpigpu modules])} for the package's Python modules."""
    out = {}
    for root, _dirs, files in os.walk(PKG):
        for f in files:
            if not f.endswith('.py'):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, os.path.dirname(PKG))[:-3].replace(os.sep, '.')
            name = rel[:-len('.__init__')] if rel.endswith('.__init__') else rel
            package = name if f == '__init__.py' else name.rsplit('.', 1)[0]
            tree = ast.parse(open(path).read())
            deps = []
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    base = package.split('.')
                    if node.level:
                        base = base[:len(base) - node.level + 1]
                        mod = '.'.join(base + ([node.module] if node.module else []))
                    else:
                        mod = node.module or ''
                    if mod.startswith('mpigpu'):
                        deps.append(mod)
                        deps += [f'{mod}.{a.name}' for a in node.names]
                elif isinstance(node, ast.Import):
                    deps += [a.name for a in node.names if a.name.startswith('mpigpu')]
            out[name] = (path, tree, deps)
    return out


def test_no_import_circles():
    mods = _modules()
    graph = {m: {d for d in deps if d in mods and d != m} for m, (_p, _t, deps) in mods.items()}
    # a package's __init__ importing its own submodules is not a circle through them
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
            if not d.startswith(m + '.'):
                visit(d)
        stack.pop()
    for m in sorted(graph):
        visit(m)
    assert not cycles, cycles


def test_one_door_to_the_cuda_layer():
    importers = sorted(m for m, (_p, _t, deps) in _modules().items() if 'mpigpu._ext._device' in deps)
    assert importers == ['mpigpu._cuda'], importers


def test_every_module_says_its_job():
    for name, (path, tree, _deps) in _modules().items():
        doc = ast.get_docstring(tree)
        assert doc and doc.strip(), f'{path}: no module docstring'


def test_every_buffer_method_of_mpi4py_is_routed():
    """Each buffer method (by mpi4py's annotations) of each class mpigpu wraps is mpigpu's, so none
    can hand a device pointer to MPI unseen; the drop-in replaces what programs reach them through."""
    from mpigpu import _methods, comm, objects
    classes = (comm.Comm, comm.Intracomm, comm.Intercomm, comm.Topocomm, comm.Cartcomm, comm.Graphcomm, comm.Distgraphcomm,
               objects.Message, objects.Datatype, objects.Op, objects.File, objects.Win)
    assert {cls.__name__: _methods.unrouted(cls) for cls in classes} == {cls.__name__: [] for cls in classes}
