"""The paths a device-buffer call can take, one module (or package) each, and the plan that binds a call to one:

- plan: a call described (mpigpu/_describe), agreed with its peers (mpigpu/_state) and bound to its path:
  run blocking, enqueued on `stream=`, or started as a request;
- engine: the device team's fused kernels over peer mappings (the five collectives within a node);
- staged: those five collectives through host MPI, the buffer cut into chunks whose copies to and from
  pinned host memory overlap MPI (where there is no team, or the engine lacks the type or op);
- exchange: the all-to-all family and the neighbourhood collectives over the team's exchange transport
  (derived datatypes as block shapes; exchange_read reads a call into its byte ranges; exchange_in_place
  sends an in-place Alltoall(v) from a copy of its buffer); exchange_reduce: Reduce_scatter, Scan and
  Exscan over it, their rows reduced on the GPU;
- mirrored: any other mpi4py buffer method, run unchanged on whole pinned host mirrors of the buffers;
- hier (a package): the five collectives across nodes, node phases on each node's team and network
  phases between nodes, pipelined;
- p2p, p2p_ipc, p2p_target: point-to-point, GPU to GPU over peer mappings where the team is up, else staged
  (p2p_target: where a receive's packed bytes lie, for a GPU sender's payload or a message Probe kept);
- support (a package): what the paths share: pinned host memory, bounded waits, derived
  datatypes packed on the GPU, device scratch (and the lifetime of work held on it: OnScratch).
"""
