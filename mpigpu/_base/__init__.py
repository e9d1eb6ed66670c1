"""What every layer shares, below the door to CUDA; imports nothing of mpigpu above it.

- codes: the collective, algorithm, element type and op codes as IntEnums, read from the C table
  (cuda/mpigpu_cuda.h through mpigpu/_ext/_codes.pyx), and what is derived from them once;
- types: those codes against MPI's datatypes and ops and NumPy's dtypes (which pairs MPI allows);
- config: every environment knob, read in one place (docs/tuning.md);
- deadline: how long a rank waits for its peers before it gives up (MPIGPU_TIMEOUT_S);
- plain: mpi4py's own classes, kept for mpigpu's own host MPI calls (the drop-in replaces the names);
- host_mpi: whether the host MPI library takes device pointers itself (CUDA-aware).
"""
