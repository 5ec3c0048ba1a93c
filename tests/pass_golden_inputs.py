"""The inputs of the per-pass goldens, tests/golden/passes/<pass>/<case>.in.

    python tests/pass_golden_inputs.py      # rewrite every .in (then pytest --update-golden)

Each case is an example or a model, printed after the default pipeline's passes
before <pass> (a `.fus` file where <pass> takes the fusion as written), with a
first comment line saying what the case shows. tests/test_pass_goldens.py runs
`fuserlite opt <case>.in -p <pass>` and compares with <case>.out. Run this only
when the printed dialect changes; review the diff.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ppermute_cases import CASES as PPERMUTE

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.pipeline import DEFAULT_PASSES, Pipeline
from fuserlite.schedule.shard import shard_axis

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "tests" / "golden" / "passes"


def example(name: str) -> Callable[[], Fusion]:
    return lambda: fl.load(REPO / "examples" / f"{name}.fus")


def resharding(name: str) -> Callable[[], Fusion]:
    """One row of docs/design.md §5 on 4 devices (x[8, 12] -> y)."""
    (case,) = [c for c in models.resharding_cases(4) if c.name == name]
    return case.build


@dataclass(frozen=True)
class Case:
    pass_spec: str  # the folder is its name; options go on the `opt -p` line
    name: str
    shows: str
    build: Callable[[], Fusion]
    fus: str | None = None  # an example's .fus file, given as written

    @property
    def pass_name(self) -> str:
        return self.pass_spec.split("[")[0]


def seed_000() -> Fusion:
    return models.all_gather_all_reduce_reduce_scatter(4, 8)


def tp_mlp_sp() -> Fusion:
    return models.tensor_parallel_mlp(2, sequence_parallel=True)


def cross_mesh() -> Fusion:
    """y = -x with x on devices 0 1 and y on devices 2 3, both sharded on rows."""
    with Fusion() as fusion:
        here, there = DeviceMesh([0, 1]), DeviceMesh([2, 3])
        x = fl.tensor([8, 12], name="x")
        fusion.add_input(x)
        x.set_device_mesh(here)
        shard_axis(x, 0, here)
        y = fl.neg(x)
        y.set_device_mesh(there)
        shard_axis(y, 0, there)
        fusion.add_output(y)
    return fusion


CASES = [
    # propagate-shardings: meshes and shardings flow from producers to consumers.
    Case(
        "propagate-shardings",
        "seed004_parallelized",
        "seed 004: y's broadcast axis is bDIDx; z takes x's mesh, replicated",
        example("add_broadcast_parallelized"),
        "add_broadcast_parallelized",
    ),
    Case(
        "propagate-shardings",
        "seed004_not_parallelized",
        "seed 004: x and z sharded, y replicated; the intermediate gets the mesh",
        example("add_broadcast_not_parallelized"),
    ),
    Case(
        "propagate-shardings",
        "linear_with_bias",
        "tensor-parallel MLP: the first linear's output is sharded like its weight, the second's reduction axis is rDIDx",
        example("tp_mlp"),
    ),
    Case(
        "propagate-shardings",
        "softmax_rows",
        "row softmax: the row sharding flows through the reductions and broadcasts",
        example("softmax"),
    ),
    # insert-reshardings: a Set wherever a consumer's sharding differs from its producer's.
    Case(
        "insert-reshardings",
        "reduction_over_sharded_axis",
        "the second linear reduces over the sharded axis: a Set to the replicated output (an Allreduce later)",
        example("tp_mlp"),
    ),
    Case(
        "insert-reshardings",
        "sequence_parallel",
        "sequence-parallel MLP: a Set gathers the sequence axis, another scatters the reduction",
        tp_mlp_sp,
    ),
    Case(
        "insert-reshardings",
        "cross_mesh_move",
        "x on devices 0 1, y on devices 2 3: one Set between the meshes",
        cross_mesh,
    ),
    Case(
        "insert-reshardings",
        "seed004_no_resharding",
        "seed 004 with y's broadcast axis bDIDx: b and bDIDx are the same sharding, no Set",
        example("add_broadcast_parallelized"),
    ),
    # reorder-sharded-axis: the device axis outermost in every resharding buffer.
    Case(
        "reorder-sharded-axis",
        "allgather_inner_axis",
        "sequence-parallel MLP: the gathered axis is not outermost, so the buffers get an allocation domain",
        tp_mlp_sp,
    ),
    Case(
        "reorder-sharded-axis",
        "alltoall",
        "x sharded on rows to y sharded on columns: both buffers device-axis first",
        resharding("alltoall"),
    ),
    Case(
        "reorder-sharded-axis",
        "allreduce_partial",
        "the tensor-parallel MLP's partial sum: its rDIDx axis goes first in the buffer's allocation",
        example("tp_mlp"),
    ),
    # segment: the fusion becomes a program of kernels and data movements.
    Case(
        "segment",
        "linear_with_bias",
        "tensor-parallel MLP: two kernels around the resharding Set",
        example("tp_mlp"),
    ),
    Case(
        "segment",
        "softmax_one_mesh",
        "row softmax: no resharding, one kernel per reduction boundary",
        example("softmax"),
    ),
    Case(
        "segment", "seed_000", "seed 000: the collectives as Sets between local kernels", seed_000
    ),
    Case(
        "segment",
        "ppermute_ring",
        "ppermute's take of whole blocks is a data movement between two kernels",
        PPERMUTE[0].fusion,
    ),
    # schedule-pointwise: pointwise kernels get a block/thread schedule, others a note.
    Case(
        "schedule-pointwise",
        "seed004",
        "seed 004: the one pointwise kernel scheduled (BIDx, Unswitch, TIDx, inlined)",
        example("add_broadcast_parallelized"),
    ),
    Case(
        "schedule-pointwise",
        "bias_gelu",
        "bias add + gelu, columns sharded: the device axis stays outermost",
        example("bias_gelu"),
    ),
    Case(
        "schedule-pointwise",
        "softmax_reductions",
        "row softmax: the reduction kernels are left with a note, the pointwise ones scheduled",
        example("softmax"),
    ),
    # schedule-reduction: a kernel of one sum or max gets a row per block and threads across.
    Case(
        "schedule-reduction",
        "softmax",
        "row softmax, rows sharded: its max and sum kernels each a row per block, 8 threads",
        example("softmax"),
    ),
    Case(
        "schedule-reduction",
        "layer_norm",
        "the GPT block's layer_norms: their sums of 64 a row per block; other kernels untouched",
        lambda: models.transformer_block(8, "bfloat16"),
    ),
    Case(
        "schedule-reduction",
        "partial_sum",
        "seed 000: a sum over the sharded axis is a partial sum, left with a note",
        seed_000,
    ),
    # lower-communications: each resharding Set becomes its Communication.
    Case(
        "lower-communications",
        "allreduce",
        "tensor-parallel MLP: the Set after the sharded reduction is an Allreduce",
        example("tp_mlp"),
    ),
    Case(
        "lower-communications",
        "allgather_reducescatter",
        "sequence-parallel MLP: an Allgather and a ReduceScatter, with their axes",
        example("sp_mlp"),
    ),
    Case(
        "lower-communications",
        "seed_000",
        "seed 000: Allgather, Allreduce and ReduceScatter on 4 devices",
        seed_000,
    ),
    Case(
        "lower-communications",
        "cross_mesh_move",
        "x on devices 0 1 to y on devices 2 3: a SendRecv",
        cross_mesh,
    ),
    Case(
        "lower-communications",
        "ppermute_ring",
        "JAX's ppermute ring shift on 4 devices: a take of whole blocks, one CollectivePermute",
        PPERMUTE[0].fusion,
    ),
    Case(
        "lower-communications",
        "ppermute_ring_2x4",
        "the ring over DIDx of a 2x4 mesh: one CollectivePermute, both DIDx teams at once",
        PPERMUTE[3].fusion,
    ),
    # assign-layouts: every collective gets a buffer layout.
    Case(
        "assign-layouts",
        "seed_000_pinned",
        "seed 000: every collective pinned (what PyTorch/XLA needed)",
        seed_000,
    ),
    Case(
        "assign-layouts",
        "allgather_reducescatter",
        "sequence-parallel MLP: pinned to the allocation order, sharded axis first",
        example("sp_mlp"),
    ),
    Case(
        "assign-layouts[pin=none]",
        "free",
        "pin=none: every collective's layout is free",
        example("tp_mlp"),
    ),
    # resize-mesh: devices 0..k-1 become 0..N-1, sharded on the same axes.
    Case(
        "resize-mesh[devices=8]",
        "linear_with_bias_8",
        "tensor-parallel MLP from 2 to 8 devices: the outer splits take the new size",
        example("tp_mlp"),
        "tp_mlp",
    ),
    Case(
        "resize-mesh[devices=4]",
        "softmax_4",
        "row softmax from 2 to 4 devices",
        example("softmax"),
    ),
    Case(
        "resize-mesh[devices=2]",
        "already_there",
        "a fusion on devices 0 1 asked for 2: unchanged",
        example("bias_gelu"),
    ),
]


def input_text(case: Case) -> str:
    """The case's .in: a comment line, the `opt` line where the pass has options, then
    the .fus file or the print after the default passes before the case's pass."""
    if case.fus is not None:
        head = f"# {case.shows}\n"
        if case.pass_spec != case.pass_name:
            head += f"# opt -p {case.pass_spec}\n"
        return head + (REPO / "examples" / f"{case.fus}.fus").read_text()
    default = list(DEFAULT_PASSES)  # a pass outside it (resize-mesh) takes the fusion
    before = default[: default.index(case.pass_name)] if case.pass_name in default else []
    ir = Pipeline(before).run(case.build()) if before else case.build()
    head = f"// {case.shows}\n"
    if case.pass_spec != case.pass_name:
        head += f"// opt -p {case.pass_spec}\n"
    return head + str(ir)


def main() -> None:
    """Write every case's .in (the .out files are the test's, with --update-golden)."""
    for case in CASES:
        path = FOLDER / case.pass_name / f"{case.name}.in"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(input_text(case))
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
