"""Validation of a run in two steps, each saying what it compared and why it may differ.

1. The sharded result against the same program run unsharded on the same compute path:
   the fusion with every mesh resized to one device (resize-mesh[mesh=1] or [mesh=1x1]
   on a 2-D mesh, first in the executor's own pipeline), lowered alike and run by the
   same compute path (compiled, interpret or numpy) on the sim backend. Its kernels,
   dtypes and stores are the sharded program's; only the order of the sums across
   devices (partial sums folded after each device's own, GEMMs over other shapes)
   differs, and whether a compiled kernel's exp or tanh meets an element in its
   vectorized loop or its tail, so the two agree within that rounding
   (rounding.SAME_PATH) and are bit-identical wherever neither is on the way. A wrong communication, a dropped
   partial or two swapped shards shows here, named as the sharding's fault.
2. The numerics against the float reference (fl.validate: rounding.AGAINST_REFERENCE):
   the compute path's own rounding (half stores, math libraries), whatever the sharding.

Where there is no unsharded run (the executor was given a lowered Program, the fusion
is on one device already, or its meshes cannot be resized: a whole-axis DID, a
shard_map region written for its device count, meshes other than 0..k-1) the report
says why, and step 2 alone decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fuserlite.ir.errors import FuserliteError, ValidationError
from fuserlite.pipeline import Pipeline
from fuserlite.reference.rounding import SAME_PATH
from fuserlite.reference.validate import Comparison, compare, validate

if TYPE_CHECKING:
    from fuserlite.runtime.executor import FusionExecutor


@dataclass(frozen=True)
class Validation:
    """What a run was checked against and how close it came."""

    devices: int
    compute: str
    unsharded: Comparison | None  # the sharded result against the unsharded run
    no_unsharded: str  # why there is no unsharded run ("" where there is one)
    reference: Comparison  # the result against the float reference
    gemm: str = "blas"  # "amx" where some library kernel's GEMM ran on AMX (kernel/amx.py)

    def lines(self) -> list[str]:
        """The report: each comparison's summary, its details indented."""
        if self.unsharded is not None:
            first, *more = self.unsharded.summary()
            what = (
                f"sharded ({self.devices} devices) vs the same program on 1 device ({_path(self)})"
            )
            lines = [f"{what}: {first}", *(f"  {m}" for m in more)]
        else:
            lines = [f"sharded vs unsharded: not compared ({self.no_unsharded})"]
        first, *more = self.reference.summary()
        return [*lines, f"vs the float reference: {first}", *(f"  {m}" for m in more)]


def unsharded_run(executor: FusionExecutor) -> FusionExecutor | str:
    """The executor of `executor`'s fusion with every mesh resized to one device, lowered
    by its pipeline and run by its compute path on the sim backend; or why there is none."""
    if executor.pipeline is None:
        return "the executor was given a lowered Program, not the fusion to lower again"
    if len(executor.devices) <= 1:
        return "the run is on one device"
    meshes = [t.mesh for t in executor.fusion.tensors_created if t.mesh is not None]
    rank = max((m.rank for m in meshes), default=1)
    passes = [p for p in executor.pipeline.passes if p.name != "resize-mesh"]
    try:
        pipeline = Pipeline([f"resize-mesh[mesh={'x'.join(['1'] * rank)}]", *passes])
        compute = executor.compiler or executor.compute
        return type(executor)(
            executor.fusion, compute=compute, pipeline=pipeline, gemm=executor.gemm
        )
    except FuserliteError as exc:
        why = str(exc).splitlines()[0].split(" failed: ", 1)[-1]  # resize-mesh's own words
        return f"the fusion cannot be resized to one device: {why}"


def validate_run(
    executor: FusionExecutor, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> Validation:
    """Check `outputs` of `executor` on `inputs` (module doc); a ValidationError names
    the step that failed and its worst element."""
    fusion = executor.fusion
    other = unsharded_run(executor)
    unsharded = None
    if not isinstance(other, str):
        against = f"the unsharded run (the same program on 1 device, {_path(executor)})"
        with other:
            expected = other.run(inputs)
        unsharded = compare(fusion, inputs, outputs, expected, SAME_PATH, against)
        if not unsharded.ok:
            raise ValidationError(
                "the sharded run disagrees with the same program run unsharded beyond the "
                f"rounding they may differ by: {unsharded.failure()}"
            )
    reference = validate(fusion, inputs, outputs)
    return Validation(
        len(executor.devices),
        executor.compute,
        unsharded,
        other if isinstance(other, str) else "",
        reference,
        _gemm_ran(executor),
    )


def _path(run: FusionExecutor | Validation) -> str:
    """`compiled`, or `compiled, gemm=amx` where AMX computed the bfloat16 GEMMs."""
    gemm = run.gemm if isinstance(run, Validation) else _gemm_ran(run)
    return run.compute if gemm == "blas" else f"{run.compute}, gemm={gemm}"


def _gemm_ran(executor: FusionExecutor) -> str:
    """ "amx" where some library kernel of the executor runs on AMX, else "blas"."""
    return "amx" if executor.amx_kernels else "blas"
