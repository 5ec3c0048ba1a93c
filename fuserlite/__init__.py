"""fuserlite: a small, readable, executable multi-device fusion compiler modelled on nvFuser."""

from fuserlite import _checkout  # noqa: F401, I001 - first: finds passes/ in a checkout
from fuserlite import ops, printer  # noqa: F401 - printer installs str(tv), str(fusion), print_math()
from fuserlite.ir import (
    DeviceMesh,
    DType,
    ExecutionError,
    FuserliteError,
    Fusion,
    FusionError,
    IterDomain,
    IterType,
    LoweringError,
    MemoryType,
    ParallelType,
    ParseError,
    ScheduleError,
    TensorView,
    VerifyError,
)
from fuserlite.ops import *  # noqa: F403 - tensor and every op's builder (ops.__all__)
from fuserlite.autodiff import grad, vjp
from fuserlite.reference.evaluator import evaluate, random_inputs
from fuserlite.text import parse, to_fus
from fuserlite.verify.fusion import verify

__version__ = "0.1.0"

__all__ = [
    "DType",
    "DeviceMesh",
    "ExecutionError",
    "FuserliteError",
    "Fusion",
    "FusionError",
    "IterDomain",
    "IterType",
    "LoweringError",
    "MemoryType",
    "ParallelType",
    "ParseError",
    "ScheduleError",
    "TensorView",
    "VerifyError",
    "evaluate",
    "grad",
    "load",
    "parse",
    "random_inputs",
    "to_fus",
    "verify",
    "vjp",
]
__all__ += ops.__all__

# Multi-device lowering and execution.
from fuserlite.ir.errors import ValidationError  # noqa: E402
from fuserlite.pipeline import Pipeline, lower  # noqa: E402
from fuserlite.program import Program  # noqa: E402
from fuserlite.program.parser import load  # noqa: E402 - a .fus file or printed IR
from fuserlite.program.verify import verify_program  # noqa: E402
from fuserlite.reference.validate import validate  # noqa: E402
from fuserlite.runtime.executor import FusionExecutor  # noqa: E402
from fuserlite.timing import Timeline, timeline  # noqa: E402 - the step-time model
from fuserlite.timing.explain import explain  # noqa: E402 - plans, costs and time

__all__ += [
    "FusionExecutor",
    "Pipeline",
    "Program",
    "Timeline",
    "ValidationError",
    "explain",
    "lower",
    "timeline",
    "validate",
    "verify_program",
]
from fuserlite.frontends.parallelize import parallelize  # noqa: E402
from fuserlite.frontends.torch import from_torch  # noqa: E402 - imports torch when called
from fuserlite.schedule.placements import (  # noqa: E402 - installs tv.placements
    Partial,
    Replicate,
    Shard,
    distribute,
    redistribute,
)
from fuserlite.show import show_sharding  # noqa: E402
from fuserlite.spmd.collectives import (  # noqa: E402
    all_gather,
    all_reduce,
    all_to_all,
    axis_index,
    pmax,
    pmin,
    ppermute,
    psum,
    psum_scatter,
    reduce_scatter,
)
from fuserlite.spmd.shard_map import PartitionSpec, shard_map  # noqa: E402

__all__ += [
    "PartitionSpec",
    "from_torch",
    "parallelize",
    "Partial",
    "Replicate",
    "Shard",
    "distribute",
    "redistribute",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "axis_index",
    "pmax",
    "pmin",
    "ppermute",
    "psum",
    "psum_scatter",
    "reduce_scatter",
    "shard_map",
    "show_sharding",
]
