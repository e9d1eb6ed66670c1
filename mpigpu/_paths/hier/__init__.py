"""The hierarchical path: the five collectives across nodes, node phases on each node's device team and
network phases between nodes, pipelined. One module per job:

- calls: the path's entry (runs, run, request) and its forms ('rail', 'leader'), composed of phases;
- state: a communicator's state on this path (its nodes, leaders' and rails' communicators, the
  pipeline's streams, events, pinned chunks and device scratch);
- node: the node phases, on the node's device team (or staged where a node has none);
- net: the network phases between nodes, through host MPI, and their reductions;
- net_device, device_forms: the network phases and the forms over a transport that moves device memory
  (NCCL, mpigpu/_transports), every phase enqueued on the GPU;
- model: the cost model that chooses a form and a chunking per call shape;
- replay: calls that come again on the same buffers, recorded once as a CUDA graph and replayed, and the
  fast path's entry into them;
- progress: the progress thread that runs non-blocking and stream= calls.
"""
from .calls import request, run, runs

__all__ = ['request', 'run', 'runs']
