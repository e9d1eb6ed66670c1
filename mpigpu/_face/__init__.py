"""The public face: the classes and objects a program calls, and mpigpu under mpi4py's names.

- comm: `Intracomm` and the other communicator classes (subclasses of mpi4py's on the same handle),
  `COMM_WORLD`, `COMM_SELF`; each buffer method sends host buffers to mpi4py and device buffers to
  the plan (mpigpu/_paths/plan.py) or a path;
- objects: Datatype, Op, Win, File, Message, with their buffer methods routed the same way;
- methods: the routing of every other buffer method of mpi4py's (by its annotations) to a path;
- dropin: mpigpu's classes and objects under mpi4py's names (`python -m mpigpu`, `mpigpu.MPI`);
  capi: mpi4py's C API constructors giving mpigpu's classes; pickling: objects pickled by name;
  bsend: the buffered-send buffer (MPI_Buffer_attach) of Bsend and Ibsend;
- interposed: calls made below Python through the MPI interposer (mpigpu/_interpose), run as the
  method of the same name on mpigpu's communicator;
  interposed_requests: the persistent requests those calls make, behind proxies the library knows, and
  the request calls (MPI_Start, MPI_Wait & co.) that meet them;
- support: `query_cuda_support()`; cli: the runner's and the tools' usage errors.
"""
