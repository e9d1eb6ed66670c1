"""Transports between nodes that move device memory themselves (GPUDirect RDMA where the cluster has
it): the hierarchical path's network phases run over one of them when every rank of a communicator
has it, else through host MPI (mpigpu/_paths/hier/net.py).

- nccl: NCCL's point-to-point and broadcast, from the NCCL library the process can load.
"""
