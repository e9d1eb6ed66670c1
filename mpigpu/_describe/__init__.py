"""The call description: what a call's buffers are, read from the caller's arguments and checked,
with MPI's error classes, before any path moves a byte. The paths read their calls through it; it
knows no path and no communicator's state.

- call: a collective's arguments parsed into one plain `Call` (kind, pointers, count, dtype, op, root,
  device), and the buffer readers the paths share (a buffer specification read whole, or as an
  explicit datatype's span);
- datatypes: MPI datatypes decoded into block layouts (how a derived datatype's bytes lie), once per
  handle, and their pack forms (simple, vector, general);
- strided: a strided array as the buffer specification MPI takes (an explicit vector datatype).
"""
