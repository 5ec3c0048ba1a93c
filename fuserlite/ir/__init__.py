"""The IR core: data model only. Imports nothing from passes, pipeline or runtime."""

from fuserlite.ir.domain import IterDomain, Merge, Split, TensorDomain
from fuserlite.ir.errors import (
    ExecutionError,
    FuserliteError,
    FusionError,
    LoweringError,
    ParseError,
    ScheduleError,
    VerifyError,
)
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.fusion import Fusion, active_fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import Axis, TensorView
from fuserlite.ir.types import DType, IterType, MemoryType, ParallelType, ReductionOpType

__all__ = [
    "Axis",
    "DType",
    "DeviceMesh",
    "ExecutionError",
    "Expr",
    "FuserliteError",
    "Fusion",
    "FusionError",
    "IterDomain",
    "IterType",
    "LoadStoreOp",
    "LoweringError",
    "MemoryType",
    "Merge",
    "ParallelType",
    "ParseError",
    "ReductionOpType",
    "ScheduleError",
    "Split",
    "TensorDomain",
    "TensorView",
    "VerifyError",
    "active_fusion",
]
