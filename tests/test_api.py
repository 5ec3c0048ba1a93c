"""The Python API: issue 2's snippet, op shapes and dtypes, op errors, reference evaluation."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl

REPO = Path(__file__).resolve().parents[1]

# Issue 2, item 4, verbatim; `text` is the one name the snippet leaves to the reader.
API_SNIPPET = """\
import numpy as np, fuserlite as fl
with fl.Fusion() as fusion:
    mesh = fl.DeviceMesh.for_num_devices(2)        # also fl.DeviceMesh([0, 1])
    x = fl.tensor([2])                             # contiguous, concrete, float32 by default
    y = fl.tensor([1])                             # a concrete extent-1 axis is a broadcast axis
    x.set_device_mesh(mesh); y.set_device_mesh(mesh)
    z = fl.add(x, y)                               # also x + y, and fl.sub/mul/div/neg/exp/tanh/relu/set/broadcast/sum/max
    fusion.add_input(x); fusion.add_input(y); fusion.add_output(z)
    y.axis(0).parallelize(fl.ParallelType.DIDx)
print(fusion.print_math()); print(fusion.print_transforms()); print(fusion)   # str(fusion) = %kernel {...} with TransformPrinter
out, = fl.evaluate(fusion, [np.ones(2, np.float32), np.ones(1, np.float32)])  # unsharded numpy reference
fusion2 = fl.parse(text); fusion3 = fl.load("examples/add_broadcast.fus")
"""


def test_issue_snippet_runs_as_written(capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    text = "\n".join(API_SNIPPET.splitlines()[:-1]) + "\n"
    scope: dict = {"text": None}
    exec(compile(text, "<issue-2-snippet>", "exec"), scope)
    scope["text"] = fl.to_fus(scope["fusion"])
    exec(compile(API_SNIPPET.splitlines()[-1], "<issue-2-snippet>", "exec"), scope)
    assert str(scope["fusion2"]) == str(scope["fusion"])
    assert isinstance(scope["fusion3"], fl.Fusion)
    np.testing.assert_array_equal(scope["out"], np.full(2, 2, np.float32))
    assert "%kernel {" in capsys.readouterr().out


def test_issue_snippet_builds_and_evaluates(capsys) -> None:
    """Everything up to the parser line, independent of the .fus format."""
    body = "\n".join(API_SNIPPET.splitlines()[:-1])
    scope: dict = {}
    exec(compile(body, "<issue-2-snippet>", "exec"), scope)
    fusion = scope["fusion"]
    assert [t.name for t in fusion.inputs] == ["T0", "T1"]
    assert [t.name for t in fusion.outputs] == ["T2"]
    assert "bdeviceIdx.x1{1}" in str(fusion)
    np.testing.assert_array_equal(scope["out"], np.full(2, 2, np.float32))
    assert "TransformPrinter : " in capsys.readouterr().out
    fl.verify(fusion)


def test_tensor_view_surface() -> None:
    with fl.Fusion():
        x = fl.tensor([4, 6])
        assert (x.name, x.ndim, x.shape, x.dtype) == ("T0", 2, (4, 6), fl.DType.float32)
        assert x.axis(-1).extent == 6
        x.split(1, 2).outer_split(0, 2).merge(2, 3).reorder({0: 1})
        assert x.ndim == 3 and x.shape == (4, 6)
        y = x + 1.0
        assert y.name == "T1" and y.shape == (4, 6)
        assert (2 - x).definition.op_name == "sub"
        assert (x * x).shape == (x / 2).shape == (-x).shape == (4, 6)


def test_mesh() -> None:
    assert fl.DeviceMesh.for_num_devices(3) == fl.DeviceMesh([0, 1, 2])
    assert str(fl.DeviceMesh([0, 1])) == "DeviceMesh{0 1}"
    for bad in ([], [0, 0], [-1]):
        with pytest.raises(fl.FusionError):
            fl.DeviceMesh(bad)


def test_long_meshes_are_abbreviated_in_messages_only() -> None:
    mesh = fl.DeviceMesh(range(100))
    assert str(mesh) == "DeviceMesh{0 1 2 3 4 5 6 ... 99}"  # 8 ids at most
    assert mesh.text() == "DeviceMesh{" + " ".join(map(str, range(100))) + "}"
    assert fl.DeviceMesh.for_num_devices(4096).size == 4096
    with pytest.raises(fl.FusionError, match=r"an integer in 1\.\.4096, got 4097"):
        fl.DeviceMesh.for_num_devices(4097)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (
            lambda: fl.matmul(fl.tensor([2, 3]), fl.tensor([4])),
            "b must be [..., k, n] (2-D or more), it has 1",
        ),
        (lambda: fl.matmul(fl.tensor([]), fl.tensor([3, 4])), "a is 0-d"),
        (
            lambda: fl.matmul(fl.tensor([2, 3]), fl.tensor([4, 5])),
            "the contracted extents differ: a's last axis has 3, axis 0 of b ([..., k, n]) has 4",
        ),
        (
            lambda: fl.matmul(fl.tensor([2, 3]), fl.tensor([2, 4, 5])),
            "a's last axis has 3, axis 1 of b ([..., k, n]) has 4",
        ),
        (
            lambda: fl.linear(fl.tensor([2, 3]), fl.tensor([5, 4])),
            "the contracted extents differ: x's last axis has 3, axis 1 of weight ([..., n, k]) "
            "has 4",
        ),
        (
            lambda: fl.matmul(fl.tensor([3, 2, 4]), fl.tensor([5, 4, 6])),
            "batch axis 0 (counted from the left of the broadcast batch) has extent 3 in one",
        ),
        (
            lambda: fl.linear(fl.tensor([2, 3]), fl.tensor([2, 4, 3]), fl.tensor([4])),
            "bias T2[4] must have shape [2, 4]",
        ),
    ],
)
def test_matmul_and_linear_say_what_is_unsupported(build, says: str) -> None:
    with pytest.raises(fl.FusionError) as info:
        _out(build)
    assert says in str(info.value) and "equal k" not in str(info.value)


# -- shapes and dtypes ----------------------------------------------------------------
def _out(build: Callable[[], fl.TensorView]) -> fl.TensorView:
    with fl.Fusion():
        return build()


@pytest.mark.parametrize(
    ("build", "shape", "dtype"),
    [
        (lambda: fl.add(fl.tensor([4, 3]), fl.tensor([1, 3])), (4, 3), "float32"),
        (lambda: fl.add(fl.tensor([4, 3]), fl.tensor([3])), (4, 3), "float32"),
        (lambda: fl.mul(fl.tensor([2], "int32"), 2), (2,), "int32"),
        (lambda: fl.mul(fl.tensor([2], "int32"), 2.0), (2,), "float32"),
        (lambda: fl.div(fl.tensor([2], "int32"), fl.tensor([2], "int32")), (2,), "float32"),
        (lambda: fl.add(fl.tensor([2], "float16"), fl.tensor([2], "float64")), (2,), "float64"),
        (lambda: fl.exp(fl.tensor([2], "int32")), (2,), "float32"),
        (lambda: fl.neg(fl.tensor([2], "int64")), (2,), "int64"),
        (lambda: fl.broadcast(fl.tensor([3]), [True, False]), (1, 3), "float32"),
        (lambda: fl.sum(fl.tensor([4, 5, 6]), [0, 2]), (5,), "float32"),
        (lambda: fl.sum(fl.tensor([4, 5]), 1, keepdim=True), (4, 1), "float32"),
        (lambda: fl.max(fl.tensor([4, 5])), (), "float32"),
        (lambda: fl.expand(fl.tensor([1, 5]), [3, 5]), (3, 5), "float32"),
        (lambda: fl.reshape(fl.tensor([2, 6]), [-1, 4]), (3, 4), "float32"),
        (lambda: fl.matmul(fl.tensor([2, 4, 8]), fl.tensor([8, 3])), (2, 4, 3), "float32"),
        (lambda: fl.linear(fl.tensor([4, 8]), fl.tensor([5, 8])), (4, 5), "float32"),
        (lambda: fl.set(fl.tensor([7], "bool")), (7,), "bool"),
    ],
)
def test_op_shape_and_dtype(build, shape: tuple[int, ...], dtype: str) -> None:
    out = _out(build)
    assert out.shape == shape
    assert out.dtype is fl.DType.parse(dtype)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: fl.add(fl.tensor([4]), fl.tensor([3])), r"add: shapes T0\[4\] and T1\[3\]"),
        (
            lambda: fl.sub(fl.tensor([2, 4]), fl.tensor([3, 4])),
            r"axis 0 of T0 has extent 2 and axis 0 of T1 has extent 3",
        ),
        (lambda: fl.reshape(fl.tensor([2, 6]), [5, 2]), r"reshape: cannot view T0\[2, 6\]"),
        (lambda: fl.reshape(fl.tensor([2, 6]), [-1, 5]), r"reshape: cannot view"),
        (lambda: fl.reshape(fl.tensor([2, 6]), [-1, -1]), r"at most one -1"),
        (lambda: fl.broadcast(fl.tensor([2, 3]), [True, False]), r"broadcast: T0\[2, 3\] has 2"),
        (lambda: fl.broadcast(fl.tensor([2]), [False, False]), r"give one False per input axis"),
        (lambda: fl.expand(fl.tensor([2]), [4]), r"expand: T0\[2\] axis 0 .* not a broadcast"),
        (lambda: fl.sum(fl.tensor([2]), 3), r"sum: T0\[2\] has 1 axes; axis 3 is out of range"),
        (lambda: fl.matmul(fl.tensor([2, 3]), fl.tensor([4, 2])), r"matmul: T0\[2, 3\] @ T1"),
        (lambda: fl.linear(fl.tensor([2, 3]), fl.tensor([4, 2])), r"linear: T0\[2, 3\]"),
        (lambda: fl.add(fl.tensor([2]), "x"), r"add: b must be a tensor or a number"),
        (
            lambda: fl.tensor([2, 0]),
            r"shape must be a list or tuple of integers in 1..2\*\*63-1, got \[2, 0\]: item 1 is 0",
        ),
        (lambda: fl.tensor([2], "complex"), r"unknown dtype 'complex'"),
        (lambda: fl.max(fl.tensor([2]), fl.tensor([2])), r"use fl.maximum"),
    ],
)
def test_op_errors(build, match: str) -> None:
    with pytest.raises(fl.FusionError, match=match):
        _out(build)


def test_tensor_needs_an_active_fusion() -> None:
    with pytest.raises(fl.FusionError, match="no active fusion"):
        fl.tensor([2])


def test_operands_from_two_fusions() -> None:
    a = _out(lambda: fl.tensor([2]))
    b = _out(lambda: fl.tensor([2]))
    with pytest.raises(fl.FusionError, match="different fusions"):
        fl.add(a, b)


# -- reference evaluation ----------------------------------------------------------
def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


EVAL_CASES: dict[str, tuple[list[list[int]], Callable, Callable]] = {
    "add": ([[4, 3], [1, 3]], fl.add, np.add),
    "sub": ([[4, 3], [3]], fl.sub, np.subtract),
    "mul_scalar": ([[5]], lambda x: fl.mul(x, 3.0), lambda x: x * 3),
    "rsub_scalar": ([[5]], lambda x: 2.0 - x, lambda x: 2 - x),
    "div": ([[5], [5]], fl.div, np.divide),
    "maximum": ([[5], [5]], fl.maximum, np.maximum),
    "minimum": ([[5], [5]], fl.minimum, np.minimum),
    "neg": ([[5]], fl.neg, np.negative),
    "exp": ([[5]], fl.exp, np.exp),
    "tanh": ([[5]], fl.tanh, np.tanh),
    "relu": ([[5]], fl.relu, lambda x: np.maximum(x, 0)),
    "abs": ([[5]], fl.abs, np.abs),
    "gelu": ([[5]], fl.gelu, _gelu),
    "sqrt": ([[5]], lambda x: fl.sqrt(fl.abs(x)), lambda x: np.sqrt(np.abs(x))),
    "log": ([[5]], lambda x: fl.log(fl.abs(x)), lambda x: np.log(np.abs(x))),
    "sigmoid": ([[5]], lambda x: fl.sigmoid(x * 30.0), lambda x: 1 / (1 + np.exp(-30 * x))),
    "silu": ([[5]], lambda x: fl.silu(x * 30.0), lambda x: 30 * x / (1 + np.exp(-30 * x))),
    "where": (
        [[4, 1], [3]],
        lambda x, y: fl.where(fl.cast(x, "bool"), y, 2.0),
        lambda x, y: np.where(x != 0, y, np.float32(2)),
    ),
    "set": ([[5]], fl.set, lambda x: x),
    "cast": (  # float32 -> bfloat16 -> float32: the top 16 bits, rounded to nearest even
        [[64]],
        lambda x: fl.cast(fl.cast(x, "bfloat16"), "float32"),
        lambda x: (
            ((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16 << 16)
            .astype(np.uint32)
            .view(np.float32)
        ),
    ),
    "broadcast": ([[3]], lambda x: fl.broadcast(x, [True, False]), lambda x: x[None]),
    "sum": ([[4, 6]], lambda x: fl.sum(x, 1), lambda x: x.sum(1)),
    "sum_keepdim": ([[4, 6]], lambda x: fl.sum(x, 0, True), lambda x: x.sum(0, keepdims=True)),
    "max": ([[4, 6]], lambda x: fl.max(x, [0]), lambda x: x.max(0)),
    "min": ([[4, 6]], lambda x: fl.min(x, [0]), lambda x: x.min(0)),
    "sin": ([[5]], lambda x: fl.sin(x * 7.0), lambda x: np.sin(7 * x)),
    "cos": ([[5]], lambda x: fl.cos(x * 7.0), lambda x: np.cos(7 * x)),
    "rsqrt": ([[5]], lambda x: fl.rsqrt(fl.abs(x) + 0.5), lambda x: (np.abs(x) + 0.5) ** -0.5),
    "pow": ([[5], [5]], lambda x, y: fl.abs(x) ** y, lambda x, y: np.abs(x) ** y),
    "pow_scalar": ([[5]], lambda x: fl.pow(2.0, x) + x**3, lambda x: 2.0**x + x**3),
    "expand": ([[1, 3]], lambda x: fl.expand(x, [4, 3]), lambda x: np.broadcast_to(x, (4, 3))),
    "reshape": ([[2, 6]], lambda x: fl.reshape(x, [3, 4]), lambda x: x.reshape(3, 4)),
    "permute": ([[2, 3, 4]], lambda x: fl.permute(x, [2, 0, -2]), lambda x: x.transpose(2, 0, 1)),
    "transpose": ([[2, 3, 4]], lambda x: fl.transpose(x, -1, 0), lambda x: x.transpose(2, 1, 0)),
    "squeeze": ([[3, 1, 4, 1]], lambda x: fl.squeeze(x, [1, -1]), lambda x: x[:, 0, :, 0]),
    "unsqueeze": ([[3, 4]], lambda x: fl.unsqueeze(x, 1), lambda x: x[:, None, :]),
    "select": ([[3, 4, 5]], lambda x: fl.select(x, 1, -1), lambda x: x[:, 3, :]),
    "slice": (
        [[6, 9]],
        lambda x: fl.slice(x, [1, -7], [6, 9], [2, 3]),
        lambda x: x[1:6:2, 2:9:3],
    ),
    "cat": ([[2, 3], [4, 3]], lambda a, b: fl.cat([a, b, a], 0), lambda a, b: np.r_[a, b, a]),
    "flatten": ([[2, 3, 4, 5]], lambda x: fl.flatten(x, 1, 2), lambda x: x.reshape(2, 12, 5)),
    "split": ([[7, 2]], lambda x: fl.split(x, [3, 4])[1], lambda x: x[3:]),
    "chunk": ([[2, 7]], lambda x: fl.chunk(x, 3, -1)[2], lambda x: x[:, 6:]),
    "iota": (
        [[3, 5]],
        lambda x: x + fl.iota(5, "float32", 0.5, 2),
        lambda x: x + 0.5 + 2 * np.arange(5),
    ),
    "iota_mask": (  # torch.arange(n) < k as a mask
        [[3, 5]],
        lambda x: fl.where(fl.lt(fl.iota(5), 2), x, 0.0),
        lambda x: np.where(np.arange(5) < 2, x, 0),
    ),
    "matmul": ([[2, 4, 8], [8, 3]], fl.matmul, np.matmul),
    "matmul_batched": ([[3, 1, 4, 8], [2, 8, 5]], fl.matmul, np.matmul),
    "matmul_vector": ([[8], [2, 8, 5]], fl.matmul, np.matmul),
    "linear": ([[4, 8], [5, 8], [5]], fl.linear, lambda x, w, b: x @ w.T + b),
    "linear_device_batched": (  # nvFuser's [D, n/D, k] weight: out [D, ..., n/D]
        [[2, 3, 8], [4, 5, 8], [4, 5]],
        fl.linear,
        lambda x, w, b: np.einsum("bsk,dnk->dbsn", x, w) + b[:, None, None, :],
    ),
    "softmax": (
        [[4, 6]],
        lambda x: fl.div(
            fl.exp(fl.sub(x, fl.max(x, 1, True))),
            fl.sum(fl.exp(fl.sub(x, fl.max(x, 1, True))), 1, True),
        ),
        lambda x: (
            np.exp(x - x.max(1, keepdims=True))
            / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(EVAL_CASES))
def test_evaluate_matches_numpy(name: str) -> None:
    shapes, build, reference = EVAL_CASES[name]
    with fl.Fusion() as fusion:
        inputs = [fl.tensor(s) for s in shapes]
        for tv in inputs:
            fusion.add_input(tv)
        fusion.add_output(build(*inputs))
    arrays = fl.random_inputs(fusion, seed=3)
    (out,) = fl.evaluate(fusion, arrays)
    expected = reference(*arrays)
    assert out.shape == fusion.outputs[0].shape
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_random_inputs_are_seeded() -> None:
    with fl.Fusion() as fusion:
        for dtype in ("float32", "int32", "bool"):
            fusion.add_input(fl.tensor([3], dtype))
    a, b = fl.random_inputs(fusion, 7), fl.random_inputs(fusion, 7)
    assert [x.dtype for x in a] == [np.float32, np.int32, np.bool_]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def _add_fusion() -> fl.Fusion:
    with fl.Fusion() as fusion:
        x, y = fl.tensor([2]), fl.tensor([1])
        fusion.add_input(x)
        fusion.add_input(y)
        fusion.add_output(x + y)
    return fusion


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ([np.ones(2, np.float32)], r"the fusion takes 2 inputs, got 1"),
        (
            [np.ones(3, np.float32), np.ones(1, np.float32)],
            r"input T0 has shape \[2\], got .*\[3\]",
        ),
        (
            [np.ones(2, np.float64), np.ones(1, np.float32)],
            r"input T0 has dtype float32, got .*float64",
        ),
        ([np.ones(2, np.float32), np.ones((1, 1), np.float32)], r"input T1 has shape \[1\]"),
    ],
)
def test_evaluate_rejects_bad_inputs(inputs: list[np.ndarray], match: str) -> None:
    with pytest.raises(fl.ExecutionError, match=match):
        fl.evaluate(_add_fusion(), inputs)


def test_fusion_errors() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([2])
        y = fl.neg(x)
        fusion.add_input(x)
        with pytest.raises(fl.FusionError, match=r"add_input: T1 is computed by neg"):
            fusion.add_input(y)
        with pytest.raises(fl.FusionError, match=r"add_input: T0 is already an input"):
            fusion.add_input(x)


def test_clone_prints_identically() -> None:
    fusion = _add_fusion()
    fusion.outputs[0].split(0, 2)
    copy, _ = fusion.clone()
    assert str(copy) == str(fusion)


def test_a_clone_keeps_the_orders_of_its_original_until_it_changes() -> None:
    """A clone is given its original's expression and tensor orders (mapped): they are
    the orders its own graph gives, and they move once the clone's graph changes."""
    with fl.Fusion() as fusion:
        x, w, unread = fl.tensor([4]), fl.tensor([4]), fl.tensor([4])
        for t in (x, w, unread):
            fusion.add_input(t)
        dead = fl.neg(x)  # no output needs it: in neither order
        y = fl.add(fl.exp(w), x)
        fusion.add_output(y)
        fusion.add_output(fl.relu(y))
    fusion.tensors()  # the original's tensor order, worked out before the clone
    copy, mapping = fusion.clone()
    assert copy.exprs() == copy._exprs() == [mapping[e] for e in fusion._exprs()]
    assert copy.tensors() == copy._tensors(copy._exprs())
    assert mapping[dead] not in copy.tensors()
    extra = fl.neg(copy.outputs[1])  # the clone changes: its orders follow
    copy.add_output(extra)
    assert copy.exprs()[-1] is extra.definition and copy.tensors()[-1] is extra


def test_a_clone_shares_the_domain_values_and_schedules_on_its_own() -> None:
    """A copy's domain is the original's value (domains are values); splitting the copy
    gives it a new one and leaves the original alone."""
    fusion = _add_fusion()
    copy, mapping = fusion.clone()
    old, new = fusion.outputs[0], copy.outputs[0]
    assert new.domain is old.domain and mapping[old] is new
    new.split(0, 2)
    assert len(new.domain.loop) == len(new.domain.logical) + 1
    assert len(old.domain.loop) == len(old.domain.logical) and not old.domain.transforms


def test_a_clone_copies_every_field_and_slot_it_shares() -> None:
    """A copied tensor holds every field of its original but its fusion and links; a
    copied expression every slot of its kind but its lists (the slots each kind shares,
    worked out once per class: Op's name, scalars and attributes, Set's cache op)."""
    from fuserlite.ir.expr import Expr, LoadStoreOp, _slots
    from fuserlite.ir.tensor import _FIELDS
    from fuserlite.ops.registry import Op

    for cls in (Expr, Op, LoadStoreOp):
        assert cls._shared_slots == tuple(
            n for n in _slots(cls) if n not in ("inputs", "outputs")
        ), cls
    assert "op_name" in Op._shared_slots
    with fl.Fusion() as fusion:
        x = fl.tensor([4], name="x")
        fusion.add_input(x)
        y = fl.set(fl.add(x, 2.0))
        y.user_name = "y"
        fusion.add_output(y)
    copy, mapping = fusion.clone()
    for old, new in mapping.items():
        if isinstance(old, Expr):
            for name in type(old)._shared_slots:
                assert getattr(new, name) is getattr(old, name), name
            assert [mapping[t] for t in old.inputs] == list(new.inputs)
            continue
        for name in _FIELDS:
            if name not in ("fusion", "definition", "uses"):
                assert getattr(new, name) == getattr(old, name), name
        assert new.fusion is copy and (new.definition is None) == (old.definition is None)
    assert str(copy) == str(fusion)


def test_readme_python_example_runs(capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    readme = (REPO / "README.md").read_text()
    first, *rest = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    scope: dict = {}
    exec(compile(first, "README.md", "exec"), scope)
    assert str(fl.parse(scope["text"])) == str(scope["fusion"])
    for block in rest:  # later blocks continue in the same session, as a reader would
        exec(compile(block, "README.md", "exec"), scope)
    assert "%kernel {" in capsys.readouterr().out


def test_scalars_and_bools_the_result_cannot_hold_are_rejected() -> None:
    with fl.Fusion():
        i = fl.tensor([2], "int32")
        b = fl.tensor([2], "bool")
        x = fl.tensor([2])
        with pytest.raises(fl.FusionError, match="3000000000 does not fit the int32"):
            fl.mul(i, 3000000000)
        with pytest.raises(fl.FusionError, match="does not fit the float32"):
            fl.mul(x, 10**400)
        with pytest.raises(fl.FusionError, match="neg: T1 is bool"):
            fl.neg(b)
        with pytest.raises(fl.FusionError, match="both operands are bool"):
            fl.sub(b, b)
        fl.add(x, float("inf"))  # infinities are values, not overflows
