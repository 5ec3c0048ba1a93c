"""Kernels: index lowering of scheduled tensors and code generation (CUDA)."""
