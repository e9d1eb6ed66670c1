"""Builds the device-pointer guard (guard.c plus one wrapper per MPI function taking a buffer) against
the MPI library that mpi4py loads, and says how to preload it.

The wrappers are generated from that MPI's own header, so every function of the library is covered
(blocking, I*, *_init, partitioned, matched, neighbourhood, v/w, large-count _c forms, Pack/Unpack,
Reduce_local, File, Win, Buffer_attach...) with the signature the library declares. Which parameters
are buffers is decided by name (BUFFER_ARGS): MPI's prototypes name them consistently.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORE = HERE / 'guard.c'
EXIT_CODE = 97  # the exit status of a process the guard ended (guard.c's MPIGPU_GUARD_EXIT)

# Parameters that hand MPI memory to read or write (the MPI standard's names).
BUFFER_ARGS = frozenset({
    'buf', 'sendbuf', 'recvbuf', 'buffer', 'inbuf', 'outbuf', 'inoutbuf',
    'origin_addr', 'result_addr', 'compare_addr', 'base',
})
# Functions whose buffer-named parameter moves no data: freeing MPI_Alloc_mem memory, detaching
# memory from a dynamic window (attaching it is checked).
NO_TRANSFER = frozenset({'MPI_Free_mem', 'MPI_Win_detach'})

_PROTO = re.compile(r'\bint\s+(MPIX?_\w+)\s*\(([^()]*)\)')
_PARAM = re.compile(r'^(?P<type>.*?)\b(?P<name>\w+)\s*(?P<array>\[\s*\])?$')


class GuardUnavailable(RuntimeError):
    """The guard cannot be built here (no C compiler, no header for the MPI that mpi4py loads)."""


def _loaded_mpi_library(python=sys.executable):
    """Path of the MPI library mpi4py.MPI loads (the mapped shared object that defines PMPI_Send)."""
    probe = (
        'import ctypes\nfrom mpi4py import MPI\n'
        'seen = set()\n'
        'for line in open("/proc/self/maps"):\n'
        '    p = line.split()[-1]\n'
        '    if "mpi" in p and ".so" in p and "mpi4py" not in p and p not in seen:\n'
        '        seen.add(p)\n'
        '        try:\n'
        '            if hasattr(ctypes.CDLL(p), "PMPI_Send"): print(p)\n'
        '        except OSError: pass\n'
    )
    env = dict(os.environ, MPI4PY_RC_INITIALIZE='0')  # no MPI_Init: no process manager needed
    out = subprocess.run([python, '-c', probe], capture_output=True, text=True, env=env, timeout=120)
    libs = out.stdout.split()
    if out.returncode != 0 or not libs:
        raise GuardUnavailable(f'cannot find the MPI library mpi4py loads: {out.stderr.strip()[-500:]}')
    return Path(libs[0])


def _header_for(lib):
    """mpi.h of the installation that holds `lib` (prefix/lib -> prefix/include), else mpicc's."""
    name = 'mpi_abi.h' if 'mpi_abi' in lib.name else 'mpi.h'
    real = lib.resolve()
    for prefix in {lib.parent.parent, real.parent.parent}:
        h = prefix / 'include' / name
        if h.is_file():
            return h
    mpicc = shutil.which('mpicc')
    if mpicc:
        show = subprocess.run([mpicc, '-show'], capture_output=True, text=True).stdout.split()
        for flag in show:
            if flag.startswith('-I') and (Path(flag[2:]) / name).is_file():
                return Path(flag[2:]) / name
    raise GuardUnavailable(f'no {name} for {lib} (looked beside it and in `mpicc -show`)')


def _params(text):
    out = []
    for raw in text.split(','):
        p = ' '.join(raw.split())
        if p in ('', 'void'):
            continue
        m = _PARAM.match(p)
        if m is None:
            return None  # a form this generator does not know: leave the function alone
        out.append((m.group('type'), m.group('name'), bool(m.group('array'))))
    return out


def wrappers(header, lib):
    """C source of the wrappers for every buffer-taking function declared in `header` whose PMPI
    entry point `lib` exports; and the list of wrapped names."""
    import ctypes
    cc = shutil.which('gcc') or shutil.which('cc')
    if cc is None:
        raise GuardUnavailable('no C compiler (gcc) to build the guard')
    pre = subprocess.run([cc, '-E', '-P', '-I', str(header.parent), '-'], input=f'#include <{header.name}>\n',
                         capture_output=True, text=True)
    if pre.returncode != 0:
        raise GuardUnavailable(f'preprocessing {header} failed: {pre.stderr[-500:]}')
    dll = ctypes.CDLL(str(lib))
    seen, body, names = set(), [], []
    for fn, text in _PROTO.findall(pre.stdout):
        params = _params(text)
        if fn in seen or fn in NO_TRANSFER or params is None:
            continue
        seen.add(fn)
        checked = [n for t, n, arr in params if n in BUFFER_ARGS and not arr and 'void' in t and '*' in t]
        if not checked or not hasattr(dll, 'P' + fn):
            continue
        decl = ', '.join(f'{t}{n}{"[]" if arr else ""}' for t, n, arr in params)
        checks = ''.join(f'    mpigpu_guard_check("{fn}", "{n}", {n});\n' for n in checked)
        call = ', '.join(n for _, n, _ in params)
        body.append(f'int {fn}({decl})\n{{\n{checks}    return P{fn}({call});\n}}\n')
        names.append(fn)
    src = (f'/* generated by guard_build.py from {header}: do not edit */\n#include <{header.name}>\n'
           'void mpigpu_guard_check(const char *fn, const char *arg, const void *ptr);\n\n' + '\n'.join(body))
    return src, names


def build(cache):
    """Builds (once per MPI library and source) the guard; returns (path of the .so, wrapped names)."""
    lib = _loaded_mpi_library()
    header = _header_for(lib)
    src, names = wrappers(header, lib)
    if not names:
        raise GuardUnavailable(f'no buffer-taking MPI functions found in {header}')
    key = hashlib.sha256((src + CORE.read_text() + str(lib.resolve())).encode()).hexdigest()[:16]
    out_dir = Path(cache) / f'guard-{key}'
    so = out_dir / 'libmpigpu_guard.so'
    if not so.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        gen = out_dir / 'wrappers.c'
        gen.write_text(src)
        tmp = out_dir / f'.libmpigpu_guard.{os.getpid()}.so'
        cmd = [shutil.which('gcc') or 'cc', '-shared', '-fPIC', '-O1', '-Wall', f'-DMPIGPU_GUARD_EXIT={EXIT_CODE}',
               '-o', str(tmp), str(CORE), str(gen),
               '-I', str(header.parent), str(lib), f'-Wl,-rpath,{lib.parent}', '-Wl,-z,defs', '-pthread']
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise GuardUnavailable(f'compiling the guard failed: {" ".join(cmd)}\n{res.stderr[-3000:]}')
        tmp.replace(so)  # atomic: concurrent builders never see half a library
    (out_dir / 'wrapped.txt').write_text('\n'.join(names) + '\n')
    return so, names


if __name__ == '__main__':
    path, wrapped = build(HERE / '.cache')
    print(path)
    print(f'{len(wrapped)} MPI functions wrapped', file=sys.stderr)
