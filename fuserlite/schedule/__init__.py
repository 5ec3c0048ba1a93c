"""Scheduling: primitives on loop domains, and transform propagation."""

from fuserlite.schedule.primitives import merge, parallelize, parallelize_axis, reorder, split

__all__ = ["merge", "parallelize", "parallelize_axis", "reorder", "split"]
