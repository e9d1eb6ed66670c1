"""Cython hot path of mpigpu: buffer intake (_intake) and the CUDA device layer (_device, CUDA builds only)."""
