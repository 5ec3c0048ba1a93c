"""A reduction over device axes whose local extent is 1 is lowered to its collective
alone, no partial-reduction kernel (passes/lower_communications.py,
`drop_local_reductions`), as nvFuser lowers it (its LowerCollectiveTest cases Allreduce,
Allreduce_Concrete, Reduce, ReduceScatter_LogicalSplit, ReduceScatter_StaticShape and
ReduceScatter_Allgather; its ReduceScatter, ReduceScatterNoncontig and AllreduceNoncontig,
whose reduced axis keeps 3 rows a device, keep the kernel). The collective reads the
reduction's input and reduces those axes itself (`reduces=(0)`); the MPI runs of the
same rule are tests/test_mpi.py's."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.program.parser import parse_printed

MESH4 = "mesh m = [0, 1, 2, 3]\n"

# name: (.fus text, the communications' kinds)
DROPPED = {
    # nvFuser Allreduce: [iDIDx{D}, i{N}] -> sum(0) -> [r{D}, i{N}], on the same mesh
    "allreduce": (
        MESH4 + "input x: float32[4, 8] on m\ny = sum(x, [0])\noutput y\n"
        "parallelize x axis 0 DIDx\n",
        ["Allreduce"],
    ),
    # Allreduce_Concrete (every shape is concrete here): a max on another mesh size
    "allreduce-max-2dev": (
        "mesh m = [0, 1]\ninput x: float32[2, 6] on m\ny = max(x, [0])\noutput y\n"
        "parallelize x axis 0 DIDx\n",
        ["Allreduce"],
    ),
    # Reduce: the output on one device
    "reduce": (
        MESH4 + "mesh r = [0]\ninput x: float32[4, 8] on m\ny = sum(x, [0])\nset_mesh y r\n"
        "output y\nparallelize x axis 0 DIDx\n",
        ["Reduce"],
    ),
    # ReduceScatter_LogicalSplit: [iDIDx{D}, i{D}, i{N}] -> [r{D}, iDIDx{D}, i{N}]
    "reducescatter": (
        MESH4 + "input x: float32[4, 4, 8] on m\ny = sum(x, [0])\noutput y\n"
        "parallelize x axis 0 DIDx\nparallelize y axis 1 DIDx\n",
        ["ReduceScatter"],
    ),
    # ReduceScatter_StaticShape: the output's axis of 3D outer-split by D
    "reducescatter-split-output": (
        MESH4 + "input x: float32[4, 12] on m\ny = sum(x, [0])\noutput y\n"
        "parallelize x axis 0 DIDx\nouter_split y axis 1 by 4\nparallelize y axis 1 DIDx\n",
        ["ReduceScatter"],
    ),
    # ReduceScatter_Allgather: then gathered to a replicated z
    "reducescatter-allgather": (
        MESH4 + "input x: float32[4, 4, 8] on m\ny = sum(x, [0])\nz = set(y)\nset_mesh z m\n"
        "output z\nparallelize x axis 0 DIDx\nparallelize y axis 1 DIDx\n",
        ["ReduceScatter", "Allgather"],
    ),
    # the loop-split form: DIDx on an outer split whose inner part holds 1 row
    "outer-split-one-row": (
        MESH4 + "input x: float32[4, 8] on m\ny = max(x, [0])\noutput y\n"
        "outer_split x axis 0 by 4\nparallelize x axis 0 DIDx\n",
        ["Allreduce"],
    ),
    # a 2-D mesh: the reduced axis over DIDy, the other sharded on DIDx
    "didy-2x3": (
        "mesh m = [[0, 1, 2], [3, 4, 5]]\ninput x: float32[2, 3, 8] on m\ny = sum(x, [0])\n"
        "output y\nparallelize x axis 0 DIDy\nparallelize x axis 1 DIDx\n",
        ["Allreduce"],
    ),
    # both axes of a 2-D mesh reduced onto one device: a move between meshes
    "didy-didx-onto-one-device": (
        "mesh m = [[0, 1, 2], [3, 4, 5]]\nmesh r = [5]\ninput x: float32[2, 3, 8] on m\n"
        "y = sum(x, [0, 1])\nset_mesh y r\noutput y\nparallelize x axis 0 DIDy\n"
        "parallelize x axis 1 DIDx\n",
        ["Reduce"],
    ),
}
REDUCES = {"didy-didx-onto-one-device": (0, 1)}  # the others reduce axis 0

# Where a device holds more than one row of a reduced axis, or sums of bfloat16 are held
# in float32: today's partial-reduction kernel, then the collective.
KEPT = {
    # nvFuser ReduceScatter: [i{2D}, iDIDx{D}, i{3}] -> sum(1): 3 rows a device
    "reducescatter-3-rows": (
        MESH4 + "input x: float32[8, 12] on m\ny = sum(x, [1])\noutput y\n"
        "outer_split x axis 1 by 4\nparallelize x axis 1 DIDx\nouter_split y axis 1 by 4\n"
        "parallelize y axis 1 DIDx\nouter_split y axis 0 by 4\nparallelize y axis 0 DIDx\n",
        ["ReduceScatter"],
    ),
    # AllreduceNoncontig: [i{5}, iDIDx{D}, i{3}] -> sum(1)
    "allreduce-3-rows": (
        MESH4 + "input x: float32[5, 12] on m\ny = sum(x, [1])\noutput y\n"
        "outer_split x axis 1 by 4\nparallelize x axis 1 DIDx\n",
        ["Allreduce"],
    ),
    # a second reduced axis, local: the kernel sums its 8 values
    "and-a-local-axis": (
        MESH4 + "input x: float32[4, 8] on m\ny = sum(x, [0, 1])\noutput y\n"
        "parallelize x axis 0 DIDx\n",
        ["Allreduce"],
    ),
    # 3 rows over 4 devices: device 3 holds none
    "uneven": (
        MESH4 + "input x: float32[3, 8] on m\ny = sum(x, [0])\noutput y\n"
        "outer_split x axis 0 by 4\nparallelize x axis 0 DIDx\n",
        ["Allreduce"],
    ),
    # bfloat16 partial sums are float32 (insert-reshardings' partial_dtype): the kernel
    # widens them
    "sum-bfloat16": (
        MESH4 + "input x: bfloat16[4, 8] on m\ny = sum(x, [0])\noutput y\n"
        "parallelize x axis 0 DIDx\n",
        ["Allreduce"],
    ),
}


def lowered(text: str) -> fl.Program:
    return fl.lower(fl.parse(text))


def check_values(fusion: fl.Fusion, program: fl.Program, compute: str = "numpy") -> None:
    """Run `program` on sim and validate it against the reference of `fusion`."""
    inputs = fl.random_inputs(fusion, seed=4)
    outputs = fl.FusionExecutor(program, compute=compute).run(inputs)
    fl.validate(fusion, inputs, outputs)
    ref = fl.evaluate(fusion, inputs)
    for got, want in zip(outputs, ref):
        np.testing.assert_array_equal(got, want)  # one value a device: the sums are exact


@pytest.mark.parametrize("name", DROPPED)
def test_the_reduction_is_its_collective_alone(name):
    text, kinds = DROPPED[name]
    fusion = fl.parse(text)
    program = fl.lower(fusion)
    assert not program.kernels, str(program)
    assert [c.kind.value for c in program.communications] == kinds
    first = program.communications[0]
    x = program.inputs[0]
    reduces = REDUCES.get(name, (0,))
    assert first.input is x and first.reduces == reduces
    printed = str(program)
    shown = " ".join(map(str, reduces))
    assert "%kernel" not in printed and f"reduces=({shown}), input=T0_" in printed
    assert str(parse_printed(printed)) == printed  # it reads back
    check_values(fusion, program)
    check_values(fusion, parse_printed(printed))  # and runs so read back


@pytest.mark.parametrize("name", KEPT)
@pytest.mark.parametrize("compute", ["numpy", "interpret", "compiled"])
def test_more_rows_or_wider_partials_keep_the_kernel(name, compute):
    text, kinds = KEPT[name]
    fusion = fl.parse(text)
    program = fl.lower(fusion)
    (kernel,) = program.kernels
    assert [c.kind.value for c in program.communications] == kinds
    assert all(c.reduces is None for c in program.communications)
    assert program.communications[0].input is kernel.outputs[0]
    inputs = fl.random_inputs(fusion, seed=4)
    fl.validate(fusion, inputs, fl.FusionExecutor(program, compute=compute).run(inputs))


def test_a_max_of_bfloat16_is_exact_and_its_collective_alone():
    """A max is exact in any dtype (its partials are bfloat16): no kernel, the reference's
    values on NaN, inf and -0.0 (0.0 and -0.0 compare equal: which one a tie keeps is the
    fold's, as with the kernel); the sum beside it keeps its float32 kernel."""
    fusion = fl.parse(
        MESH4 + "input x: bfloat16[4, 8] on m\ny = sum(x, [0])\nz = max(x, [0])\n"
        "output y\noutput z\nparallelize x axis 0 DIDx\n"
    )
    program = fl.lower(fusion)
    by_output = {c.output.user_name: c for c in program.communications}
    assert by_output["z"].reduces == (0,) and by_output["y"].reduces is None
    assert by_output["y"].input.dtype is fl.DType.float32  # the kernel's partial sums
    assert len(program.kernels) == 1
    x = np.array([[np.nan, 1, -0.0, np.inf, 3, -np.inf, 0.5, 2]] * 4, np.float32)
    x[1, 1], x[2, 2], x[3, 4] = 7, 0.0, -3
    inputs = [x.astype(fusion.inputs[0].dtype.numpy)]
    outputs = fl.FusionExecutor(program).run(inputs)
    fl.validate(fusion, inputs, outputs)
    want = fl.evaluate(fusion, inputs)[1]
    np.testing.assert_array_equal(outputs[1].astype(np.float32), want.astype(np.float32))
    assert np.isnan(outputs[1][0]) and outputs[1][3] == np.inf


def test_explain_and_the_timeline_show_no_kernel():
    program = lowered(DROPPED["allreduce"][0])
    text = fl.explain(program)
    assert text.startswith("y (T1) = sum(x (T0)), needed by the fusion output y (T1)")
    assert "the sum is the Allreduce alone: each device holds one row of x (T0) axis 0" in text
    assert "no partial-reduction kernel" in text
    tl = fl.timeline(program)
    assert {e.kind for e in tl.events} == {"communication"}
    assert tl.totals().compute == 0
    kept = fl.timeline(lowered(KEPT["allreduce-3-rows"][0]))
    assert {e.kind for e in kept.events} == {"compute", "communication"}


def _edited(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_the_verifier_rejects_a_collective_reducing_an_axis_of_more_rows():
    """Reading the kernel's input (2 rows a device) instead of its partial sums would add
    up the devices' rows pairwise wrong: the verifier says which device holds how many."""
    text = (
        MESH4 + "input x: float32[8, 6] on m\ny = sum(x, [0])\noutput y\n"
        "outer_split x axis 0 by 4\nparallelize x axis 0 DIDx\n"
    )
    program = lowered(text)
    (kernel,) = program.kernels
    (comm,) = program.communications
    comm.replace_input(kernel.outputs[0], program.inputs[0])
    comm.reduces = (0,)
    program.steps = [comm]
    with pytest.raises(fl.VerifyError, match=r"device 0 holds 2 rows of it, not 1"):
        fl.verify_program(program)


def test_printed_reduces_are_checked_against_the_input():
    printed = str(lowered(DROPPED["allreduce"][0]))
    with pytest.raises(fl.ParseError, match=r"reduces axis 1 of T0, which no mesh axis shards"):
        parse_printed(_edited(printed, "reduces=(0)", "reduces=(1)"))
    # without reduces=, x's rows are complete values: the Allreduce would not apply
    with pytest.raises(fl.ParseError, match=r"does not apply to \(S0\)"):
        parse_printed(_edited(printed, "reduces=(0), ", ""))


def test_a_gradient_summed_over_one_row_a_device_is_its_allreduce_alone():
    """grad_w of sum((x * w)**2), x's rows one a device: the backward sum over the rows is
    the Allreduce alone; the loss's sum, over a local axis too, keeps its kernel."""
    fusion = fl.parse(
        MESH4 + "input x: float32[4, 8] on m\ninput w: float32[8] on m\np = mul(x, w)\n"
        "q = mul(p, p)\nloss = sum(q)\noutput loss\nparallelize x axis 0 DIDx\n"
    )
    step = fl.grad(fusion, ["w", "x"])
    program = fl.lower(step)
    reduces = [c.reduces for c in program.communications]
    assert [c.kind.value for c in program.communications] == ["Allreduce", "Allreduce"]
    assert reduces == [None, (0,)]
    inputs = fl.random_inputs(step, seed=4)
    fl.validate(step, inputs, fl.FusionExecutor(program).run(inputs))


# The collective folds in the input's dtype, so the rule holds where the partial values
# would be held in it: not for sums of float16 and bfloat16 (float32 partial sums) or of
# integers narrower than int64 and bools (int64 totals, as torch counts them).
KEEPS_KERNEL = {("float16", "sum"), ("bfloat16", "sum"), ("int32", "sum"), ("bool", "sum")}


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"]
)
def test_the_rule_holds_where_the_partials_are_of_the_input_dtype(dtype, op):
    fusion = fl.parse(
        MESH4 + f"input x: {dtype}[4, 8] on m\ny = {op}(x, [0])\noutput y\n"
        "parallelize x axis 0 DIDx\n"
    )
    program = fl.lower(fusion)
    kept = (dtype, op) in KEEPS_KERNEL
    assert len(program.kernels) == kept
    (comm,) = program.communications
    assert comm.reduces == (None if kept else (0,))
    inputs = fl.random_inputs(fusion, seed=4)
    outputs = fl.FusionExecutor(program, compute="numpy").run(inputs)
    fl.validate(fusion, inputs, outputs)
    if not kept:  # the devices' rows folded in order: the reference's values exactly
        want = fl.evaluate(fusion, inputs)[0]
        np.testing.assert_array_equal(outputs[0], want)
