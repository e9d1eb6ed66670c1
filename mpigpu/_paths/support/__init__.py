"""What the paths share, one module each:

- pinned: the pinned host memory and copy streams the staging paths share;
- bounded: the staged path's host MPI collectives that give up at the deadline (a peer that never arrives);
- packing: derived datatypes read into pack plans, packed and unpacked on the GPU;
- packed: a device buffer with a derived datatype, packed into device scratch and back;
- scratch: the device scratch memory the packing, the exchange's reductions and in-place Alltoall(v) share,
  and how long work holds a block of it (OnScratch: a blocking call, a request, a persistent request).
"""
