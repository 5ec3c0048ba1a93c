"""Passes, one module each; importing this package registers all of them."""

from fuserlite.passes import (
    allocate_and_deallocate,  # noqa: F401
    assign_layouts,  # noqa: F401
    insert_reshardings,  # noqa: F401
    lower_communications,  # noqa: F401
    lower_streams,  # noqa: F401
    propagate_shardings,  # noqa: F401
    reorder_sharded_axis,  # noqa: F401
    resize_mesh,  # noqa: F401
    schedule_pointwise,  # noqa: F401
    schedule_reduction,  # noqa: F401
    segment,  # noqa: F401
)
from fuserlite.passes.base import REGISTRY, Pass, make_pass, register

__all__ = ["REGISTRY", "Pass", "make_pass", "register"]
