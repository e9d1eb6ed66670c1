"""The harness that runs mpi4py's own test suite through mpigpu (tests/test_mpi4py_suite.py) and the
device-pointer guard that checks no fake device pointer reaches MPI (tests/test_device_guard.py)."""
