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
from fuserlite.ir.expr import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    ExpandOp,
    Expr,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    UnaryOp,
    UnaryOpType,
)
from fuserlite.ir.fusion import Fusion, active_fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, MemoryType, ParallelType

__all__ = [
    "BinaryOp",
    "BinaryOpType",
    "BroadcastOp",
    "DType",
    "DeviceMesh",
    "ExecutionError",
    "ExpandOp",
    "Expr",
    "FuserliteError",
    "Fusion",
    "FusionError",
    "IterDomain",
    "IterType",
    "LinearOp",
    "LoadStoreOp",
    "LoweringError",
    "MatmulOp",
    "MemoryType",
    "Merge",
    "ParallelType",
    "ParseError",
    "ReductionOp",
    "ReductionOpType",
    "ReshapeOp",
    "ScheduleError",
    "Split",
    "TensorDomain",
    "TensorView",
    "UnaryOp",
    "UnaryOpType",
    "VerifyError",
    "active_fusion",
]
