"""Scheduling: sharding, transform propagation and the pointwise scheduler.

The primitives (split, outer_split, merge, reorder, parallelize) are methods of
the IR's TensorView and IterDomain.
"""
