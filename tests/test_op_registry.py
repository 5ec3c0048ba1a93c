"""One home per op: every op has its definition, a row in every backend table, an
example, a printed form that reads back, and runs the same everywhere."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from op_examples import COMPOSITE_CALLS, OP_CALLS, op_example
from pointwise_cases import dtype_mix, run_everywhere, whole_kernel

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import ParseError
from fuserlite.kernel.cuda import CUDA, cuda_source
from fuserlite.ops import registry
from fuserlite.ops.forms import Template, build_from_printed, match_body, print_body, tensor_name
from fuserlite.ops.registry import Category, OpDef, all_composites, all_ops, definition
from fuserlite.printer import Namer
from fuserlite.program import Communication
from fuserlite.reference.numpy_ops import NUMPY
from fuserlite.reference.rounding import PROPAGATE
from fuserlite.schedule.pointwise import schedule_pointwise

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(d.name for d in all_ops())
POINTWISE = sorted(d.name for d in all_ops() if d.category is Category.POINTWISE)


# -- every op is everywhere it must be ----------------------------------------------
def test_every_backend_table_has_one_row_per_op() -> None:
    assert sorted(NUMPY) == NAMES
    assert sorted(PROPAGATE) == NAMES
    assert sorted(CUDA) == POINTWISE


def test_every_op_has_an_example_a_builder_and_a_doc_row() -> None:
    assert sorted(OP_CALLS) == NAMES
    doc = (ROOT / "docs" / "fus-format.md").read_text()
    for d in all_ops():
        assert getattr(fl, d.name) is d.build and d.name in fl.__all__
        assert d.doc, f"{d.name}: its builder has no docstring"
        assert f"`{d.name}(" in doc, f"docs/fus-format.md does not list {d.name}"


def test_every_composite_has_an_example_a_builder_and_a_doc_row() -> None:
    doc = (ROOT / "docs" / "fus-format.md").read_text()
    assert sorted(COMPOSITE_CALLS) == sorted(c.name for c in all_composites())
    for c in all_composites():
        assert getattr(fl, c.name) is c.build and c.name in fl.__all__
        assert c.doc, f"{c.name}: its builder has no docstring"
        assert f"`{c.name}(" in doc, f"docs/fus-format.md does not list {c.name}"
        fusion = op_example(c.name)  # parses; its parts write back as .fus and read back
        assert str(fl.parse(fl.to_fus(fusion))) == str(fusion)


# -- printed forms, both ways ---------------------------------------------------------
def _key(operand: object) -> object:
    """A tensor by identity, a scalar by type and repr (nan is nan, True is not 1)."""
    return id(operand) if isinstance(operand, fl.TensorView) else (type(operand), repr(operand))


def rebuilt_from_print(fusion: fl.Fusion) -> fl.Fusion:
    """A clone of `fusion` whose every op expression is rebuilt from its printed body."""
    namer = Namer(fusion)
    clone, mapping = fusion.clone()
    by_name = {t.ir_name: t for t in clone.tensors_created}
    for expr in fusion.exprs():
        if definition(expr) is None:  # communications print themselves
            continue
        mapping[expr].detach()
        body = print_body(expr, namer.tensor)
        outputs = [mapping[t] for t in expr.outputs]
        new = build_from_printed(body, outputs, lambda text: by_name[tensor_name(text)])
        assert type(new) is type(expr) and new.op_name == expr.op_name
        assert [_key(x) for x in new.operands()] == [
            _key(mapping.get(x, x)) for x in expr.operands()
        ]
        assert new.attributes() == expr.attributes()
    return clone


def test_printed_forms_golden(golden) -> None:
    """Every op's example as nvFuser's math printer shows it, one section per op."""
    golden("op_examples.txt", "".join(f"# {op}\n{op_example(op).print_math()}" for op in NAMES))


@pytest.mark.parametrize("op", NAMES)
def test_printed_form_reads_back_to_the_same_expression(op: str) -> None:
    fusion = op_example(op)
    assert str(rebuilt_from_print(fusion)) == str(fusion)


def test_scalars_read_back_exactly() -> None:
    """bool, int64 past 2**53 and -2**63, inf, NaN, -0.0 and a float repr."""
    with fl.Fusion() as fusion:
        x, b = fl.tensor([3]), fl.tensor([3], "bool")
        fusion.add_input(x)
        fusion.add_input(b)
        for out in (fl.add(b, True), fl.mul(x, -0.0), fl.sub(1e-300, x), fl.div(x, 0.1)):
            fusion.add_output(out)
    for f in (fusion, dtype_mix()):
        text = f.print_math()
        assert str(rebuilt_from_print(f)) == str(f)
        assert "int64_t(True)" in text or "int64_t(1152921504606846977)" in text


@pytest.mark.parametrize("name", ["tp_mlp", "sp_mlp", "softmax", "bias_gelu"])
def test_lowered_programs_read_back(name: str) -> None:
    """After every pass: caches (cache_op), partial reductions, scheduled tensors with
    ca_pos / produce_pos, bias adds split off a linear."""
    lowered = fl.lower(fl.load(ROOT / "examples" / f"{name}.fus")).fusion
    assert str(rebuilt_from_print(lowered)) == str(lowered)


def test_seed_000_reads_back() -> None:
    lowered = fl.lower(models.all_gather_all_reduce_reduce_scatter(8)).fusion
    assert str(rebuilt_from_print(lowered)) == str(lowered)


def test_text_of_no_op_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no op is printed as"):
        match_body("frobnicate(T0_g_float[ iS0{2} ]);")


def test_two_ops_printed_alike_are_refused(monkeypatch) -> None:
    exp = registry.lookup("exp")
    twin = OpDef("twin", exp.build, exp.form, exp.params, exp.category)
    monkeypatch.setitem(registry._DEFS, "twin", twin)
    with pytest.raises(ParseError, match="several ops: exp, twin"):
        match_body("exp(T0_g_float[ iS0{2} ]);")


def test_a_form_must_show_every_operand_and_attribute() -> None:
    d = OpDef("hidden", lambda x: x, Template("hidden( {x} )"), (registry.Param("x", "tensor"),))
    registry.register(d)  # fine: x is shown
    registry._DEFS.pop("hidden")
    bad = OpDef("bad", d.build, Template("bad()"), d.params, attrs=("flags",))
    with pytest.raises(fl.FusionError, match="does not show x, flags"):
        registry.register(bad)


def test_template_optional_part_and_kinds() -> None:
    form = Template("f( {x}[, n = {n:ints}], flag = {b:bools}, {k:ident} )")
    assert form.fields == {"x", "n", "b", "k"}
    x = "T1_l_half[ iS0{2} ] ca_pos( 1 )"
    text = f"f( {x}, flag = {{true, false}}, Streaming )"
    assert form.match(text) == {"x": x, "b": (True, False), "k": "Streaming"}
    assert form.match(text.replace("flag", "n = {3, -1}, flag"))["n"] == (3, -1)
    assert form.match("g( T1 )") is None
    with pytest.raises(fl.FusionError, match="do not nest"):
        Template("f( [{x}[{y}]] )")


# -- the same numbers on every path ----------------------------------------------------
def _pointwise_fusion(op: str) -> fl.Fusion:
    """The op on inputs of two shapes (operands broadcast where it takes two)."""
    d = registry.lookup(op)
    with fl.Fusion() as fusion:
        x, y = fl.tensor([67, 5], name="x"), fl.tensor([5], name="y")
        fusion.add_input(x)
        fusion.add_input(y)
        operands = [x, y][: len(d.operands)]
        if op == "broadcast":
            out = fl.broadcast(y, [True, False, True])
        elif op == "set":
            out = fl.set(x, cache_op="Streaming")
        elif op == "cast":
            out = fl.cast(x, "bfloat16")
        elif op == "permute":
            out = fl.permute(x, [1, 0])
        elif op == "iota":  # no operands: start + step * i, against x's rows
            out = fl.mul(x, fl.iota(5, "float32", -1.5, 0.75))
        elif op == "rand":  # no operands: a draw of x's shape, against x
            out = fl.mul(x, fl.rand([67, 5], "float32", seed=3, offset=1))
        elif op == "where":  # the three broadcast, cond a bool of x's sign
            out = fl.where(fl.cast(fl.sub(x, 1.0), "bool"), y, x)
        else:
            out = d.build(*operands)
        fusion.add_output(out)
    return fusion


def _positive(fusion: fl.Fusion) -> list[np.ndarray]:
    """Random inputs, positive where log and sqrt need them."""
    return [np.abs(a) + np.float32(0.5) for a in fl.random_inputs(fusion, seed=3)]


@pytest.mark.parametrize("op", POINTWISE)
def test_pointwise_op_kernel_runner_equals_reference(op: str) -> None:
    fusion = _pointwise_fusion(op)
    inputs = _positive(fusion)
    reference, *others = run_everywhere(fusion, inputs)  # each validated
    for run in others:
        np.testing.assert_allclose(run[0], reference[0], rtol=1e-6)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_every_pointwise_op(tmp_path: Path) -> None:
    kernels = []
    for op in POINTWISE:
        kernel = whole_kernel(_pointwise_fusion(op))
        schedule_pointwise(kernel)
        kernels.append(kernel)
    cu = tmp_path / "ops.cu"
    cu.write_text(cuda_source(kernels))
    subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "ops.ptx"), str(cu)], check=True, timeout=300
    )


@pytest.mark.parametrize("op", POINTWISE)
def test_every_pointwise_op_has_cuda(op: str) -> None:
    kernel = whole_kernel(_pointwise_fusion(op))
    schedule_pointwise(kernel)
    source = cuda_source([kernel])
    assert "__global__" in source and "codegen" not in source


# -- sharding rules ---------------------------------------------------------------------
def test_partial_values_combine_by_their_ops_rule() -> None:
    from fuserlite.ir.types import ReductionOpType
    from fuserlite.ops.sharding import partial_op

    with fl.Fusion():
        x, w = fl.tensor([4, 8]), fl.tensor([3, 8])
        rules = {
            "sum": partial_op(fl.sum(x, 1)),
            "max": partial_op(fl.max(x, 1)),
            "min": partial_op(fl.min(x, 1)),
            "linear": partial_op(fl.linear(x, w)),
            "set of max": partial_op(fl.set(fl.max(x, 1))),
        }
        assert rules == {
            "sum": ReductionOpType.sum,
            "max": ReductionOpType.max,
            "min": ReductionOpType.min,
            "linear": ReductionOpType.sum,
            "set of max": ReductionOpType.max,
        }
        with pytest.raises(fl.LoweringError, match="reduces no axis"):
            partial_op(fl.exp(x))  # never partial: nothing says how values would combine


def test_every_expression_carries_its_ops_definition_and_a_copy_keeps_it() -> None:
    """Expr.op_def is set where an expression is made (Set's on its class); nodes of no
    registered op (communications) have none; Fusion.clone shares it."""
    program = fl.lower(models.all_gather_all_reduce_reduce_scatter(4))
    kinds = set()
    for e in program.fusion.exprs():
        want = registry.lookup(e.op_name) if not isinstance(e, Communication) else None
        assert definition(e) is e.op_def is want, e
        kinds.add(type(e).__name__)
    assert {"Op", "LoadStoreOp", "Communication"} <= kinds
    fusion = models.add_broadcast(2, True)
    copy, mapping = fusion.clone()
    for e in fusion.exprs():
        assert mapping[e].op_def is e.op_def is registry.lookup(e.op_name)
