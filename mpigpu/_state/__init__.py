"""Per-communicator state: what a communicator keeps across calls, and how its ranks agree on each
call's path. Below the paths, which keep their own parts here (`CommState.owned`).

- comm_state: `CommState`, one per communicator handle (an MPI attribute shared by all its
  wrappers; `state_of` is the one lookup): the rank's GPU, the device team, the control
  communicator, the verdicts to follow, release at free;
- agree: the ranks agree on each call's path (the placement board within a node, over
  mpigpu/_ext/_board.pyx; agree_nodes: the exchange between nodes' leaders);
- undecided: the agreements of non-blocking calls made before the peers' placements were known;
- team: the device team's setup (collective: peer mappings, workspace, kernels);
- topology: the nodes (real, or simulated by MPIGPU_SIMULATE_NODES), their communicators and the
  network's measured figures;
- requests: the MPI requests that non-blocking and persistent calls return (generalized requests
  completed in C after GPU work, or by the request agent after host MPI work).
"""
