"""The lowered program: compute kernels and communications in execution order."""
