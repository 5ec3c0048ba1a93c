"""Everything `fuserlite print` prints, at every pass boundary, parses back to a program
that prints the same text, runs the next pass the same way and computes the same values."""

from __future__ import annotations

from pathlib import Path

import pytest
from op_examples import OP_CALLS, op_example
from random_sharded import build_case
from test_nd_examples import fsdp_tp_mlp

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.fusion import Fusion
from fuserlite.pipeline import DEFAULT_PASSES, Pipeline
from fuserlite.program import host
from fuserlite.program.communication import Communication
from fuserlite.program.parser import parse_printed
from fuserlite.program.printer import host_line
from fuserlite.program.program import Kernel, Program

REPO = Path(__file__).resolve().parents[1]


def example_fusions() -> dict[str, Fusion]:
    """Every example: the .fus files and the fusions the Python scripts build."""
    cases = {p.stem: fl.load(str(p)) for p in sorted((REPO / "examples").glob("*.fus"))}
    cases["seed_000.py"] = models.all_gather_all_reduce_reduce_scatter(8, 16)
    cases["tp_mlp.py"] = models.tensor_parallel_mlp(2)
    cases["sp_mlp.py"] = models.tensor_parallel_mlp(2, sequence_parallel=True)
    cases["fsdp_tp.py"] = fsdp_tp_mlp()
    return cases


def stages(fusion: Fusion) -> list[Fusion | Program]:
    """The fusion, then the IR after each pass of the default pipeline."""
    out: list[Fusion | Program] = [fusion]
    for name in DEFAULT_PASSES:
        out.append(run_pass(name, out[-1]))
    return out


def run_pass(name: str, ir: Fusion | Program) -> Fusion | Program:
    """One pass, with its contracts and the validator, on a copy of `ir`."""
    level = "program" if isinstance(ir, Program) else "fusion"
    return Pipeline([name], input_level=level).run(ir)


def nameless(fusion: Fusion) -> Fusion:
    """A copy without the user's names, which the printed dialect does not show (a
    pass's note that names `h1 (T5)` says `T5` after a round trip)."""
    copy = fusion.clone()[0]
    for tv in copy.tensors_created:
        tv.user_name = None
    return copy


CASES = example_fusions()
STAGES = {name: stages(fusion) for name, fusion in CASES.items()}
NAMELESS_STAGES = {name: stages(nameless(fusion)) for name, fusion in CASES.items()}
BOUNDARIES = [
    pytest.param(name, k, id=f"{name}-{'input' if k == 0 else DEFAULT_PASSES[k - 1]}")
    for name in CASES
    for k in range(len(DEFAULT_PASSES) + 1)
]


def state(ir: Fusion | Program) -> list:
    """What an IR holds beside the text of its expressions and tensors: the fusion's
    inputs and outputs in order, and each step's fields (a kernel's inputs, outputs,
    mesh, schedule and notes; every field of a communication)."""
    fusion = ir.fusion if isinstance(ir, Program) else ir
    out: list = [[t.number for t in fusion.inputs], [t.number for t in fusion.outputs]]
    for s in host.walk(ir.steps) if isinstance(ir, Program) else []:
        if isinstance(s, host.PostOnStream):
            s = s.step
        if host.is_host_node(s):  # a loop, stream, view or buffer: its printed line
            out.append(type(s).__name__ if isinstance(s, host.ForLoop) else host_line(s))
        elif isinstance(s, Kernel):
            ref = None if s.reference is None else s.reference.number
            io = [[t.number for t in s.inputs], [t.number for t in s.outputs]]
            out.append(("kernel", *io, s.mesh, s.scheduled, ref, s.notes))
        elif isinstance(s, Communication):
            fields = (s.kind, s.team, s.root, s.op, s.in_axis, s.out_axis, s.layout, s.mesh)
            planned = (
                s.group,
                s.before,
                s.after,
                s.axes,
                s.transfers,
                s.sources,
                s.bytes_per_device,
            )
            out.append((*fields, *planned, s.input.number, s.output.number))
        else:
            out.append((s.op_name, s.input.number, s.output.number))
    return out


@pytest.mark.parametrize(("name", "k"), BOUNDARIES)
def test_print_parse_print_is_identity(name: str, k: int) -> None:
    ir = STAGES[name][k]
    text = str(ir)
    back = parse_printed(text)
    assert type(back) is type(ir)
    assert str(back) == text
    assert state(back) == state(ir)


@pytest.mark.parametrize(
    ("name", "k"), [b for b in BOUNDARIES if b.values[1] < len(DEFAULT_PASSES)]
)
def test_next_pass_on_the_parsed_text_is_the_next_stage(name: str, k: int) -> None:
    back = parse_printed(str(NAMELESS_STAGES[name][k]))
    assert str(run_pass(DEFAULT_PASSES[k], back)) == str(NAMELESS_STAGES[name][k + 1])


@pytest.mark.parametrize("name", CASES)
def test_explain_of_a_parsed_program_is_that_of_the_original(name: str) -> None:
    """The reshardings fl.explain reads come back from the communications: after
    lower-communications and after assign-layouts."""
    for ir in NAMELESS_STAGES[name][DEFAULT_PASSES.index("lower-communications") + 1 :]:
        assert fl.explain(parse_printed(str(ir))) == fl.explain(ir)


@pytest.mark.parametrize("name", CASES)
def test_parsed_lowered_program_computes_the_reference(name: str) -> None:
    fusion = CASES[name]
    program = parse_printed(str(STAGES[name][-1]))
    inputs = fl.random_inputs(fusion, seed=3)
    outputs = fl.FusionExecutor(program, backend="sim").run(inputs)
    fl.validate(fusion, inputs, outputs)


def assert_round_trips_at_every_stage(ir: Fusion | Program) -> None:
    """print -> parse -> print at the input and after each default pass the compiler
    accepts (a case it rejects stops there: test_differential's business)."""
    for name in ("input", *DEFAULT_PASSES):
        if name != "input":
            try:
                ir = run_pass(name, ir)
            except fl.FuserliteError:
                return
        text = str(ir)
        back = parse_printed(text)
        assert str(back) == text, name
        assert state(back) == state(ir), name


@pytest.mark.parametrize("seed", range(20))
def test_random_sharded_fusions_round_trip_at_every_stage(seed: int) -> None:
    """tests/random_sharded.py's fusions (every op it draws, 1-4 devices, two meshes)."""
    assert_round_trips_at_every_stage(build_case(seed).fusion)


@pytest.mark.parametrize("op", OP_CALLS)
def test_every_op_round_trips_at_every_stage(op: str) -> None:
    assert_round_trips_at_every_stage(op_example(op))


def test_a_2d_mesh_round_trips_at_every_stage() -> None:
    fusion = fl.parse(
        "mesh m = [[0, 1], [2, 3]]\ninput x: float32[4, 8] on m\ny = neg(x)\noutput y\n"
        "outer_split x axis 0 by 2\nparallelize x axis 0 DIDy\n"
        "outer_split x axis 2 by 2\nparallelize x axis 2 DIDx\n"
    )
    assert "DeviceMesh{{0 1}{2 3}}" in str(fusion)
    assert_round_trips_at_every_stage(fusion)
