"""Reverse-mode differentiation of fusions (fl.grad, fl.vjp): the driver; each op's rule
is its OpDef's `vjp` (fuserlite/ops)."""

from fuserlite.autodiff.reverse import grad, vjp

__all__ = ["grad", "vjp"]
