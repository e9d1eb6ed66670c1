"""Fetches mpi4py's own test suite: the `test/` folder of the sdist of the installed mpi4py's version,
downloaded once with pip (so pip's index and proxy settings apply) and unpacked into an ignored cache
folder, tests/mpi4py_suite/.cache/mpi4py-<version>/test.

    python tests/mpi4py_suite/fetch.py     # prints the folder; exit status 1 (and why) if it cannot
"""
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent / '.cache'


class Unavailable(RuntimeError):
    """The suite cannot be had here (offline, no pip, no sdist of this version)."""


def installed_version():
    try:
        return importlib.metadata.version('mpi4py')
    except importlib.metadata.PackageNotFoundError:
        raise Unavailable('mpi4py is not installed') from None


def suite_dir(cache=CACHE):
    """The suite's test/ folder for the installed mpi4py, fetched if it is not cached yet."""
    version = installed_version()
    dest = Path(cache) / f'mpi4py-{version}'
    test = dest / 'test'
    if (test / 'main.py').is_file():
        return test
    Path(cache).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--no-binary', 'mpi4py', '--dest', tmp,
               f'mpi4py=={version}']
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            raise Unavailable(f'`{" ".join(cmd)}` took more than 600 s') from None
        sdists = list(Path(tmp).glob(f'mpi4py-{version}.tar.gz'))
        if res.returncode != 0 or not sdists:
            tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
            raise Unavailable(f'cannot download the mpi4py {version} sdist (`{" ".join(cmd)}`): ' + ' | '.join(tail))
        unpacked = Path(tmp) / 'unpacked'
        prefix = f'mpi4py-{version}/test/'
        with tarfile.open(sdists[0]) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
            if not any(m.name == prefix + 'main.py' for m in members):
                raise Unavailable(f'the mpi4py {version} sdist has no test/main.py')
            safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}  # Python >= 3.11.4
            tar.extractall(unpacked, members=members, **safe)
        if dest.exists():
            shutil.rmtree(dest)
        (unpacked / f'mpi4py-{version}').rename(dest)  # whole or not at all: a cut download leaves nothing
    return test


if __name__ == '__main__':
    try:
        print(suite_dir())
    except Unavailable as exc:
        print(f'mpi4py suite unavailable: {exc}', file=sys.stderr)
        sys.exit(1)
