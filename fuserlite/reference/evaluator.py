"""The reference evaluator: runs the unscheduled, unsharded fusion on whole arrays."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.liveness import dead_after
from fuserlite.ir.tensor import TensorView
from fuserlite.reference.numpy_ops import (
    BLOCK,
    blocks,
    eval_outputs,
    eval_stacked,
    stack_key,
    store,
)
from fuserlite.reference.rows import Rows, Span


def check_inputs(fusion: Fusion, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inputs must match the fusion's inputs in number, shape and dtype."""
    args.instance(
        inputs,
        (list, tuple),
        "run",
        "inputs",
        "a list or tuple of arrays, one per fusion input",
        ExecutionError,
    )
    if len(inputs) != len(fusion.inputs):
        raise ExecutionError(f"the fusion takes {len(fusion.inputs)} inputs, got {len(inputs)}")
    arrays = []
    for tv, arr in zip(fusion.inputs, inputs):
        try:
            a = np.asarray(arr)
        except ValueError as exc:  # a ragged nested list
            raise ExecutionError(f"input {tv.name}: not an array: {exc}") from None
        if a.shape != tv.shape:
            raise ExecutionError(
                f"input {tv.name} has shape {list(tv.shape)}, got an array of shape {list(a.shape)}"
            )
        if a.dtype != tv.dtype.numpy:
            raise ExecutionError(
                f"input {tv.name} has dtype {tv.dtype.name}, got an array of dtype {a.dtype}"
            )
        arrays.append(a)
    return arrays


Visit = Callable[[Expr, list[np.ndarray], list[np.ndarray]], None]


def evaluate(
    fusion: Fusion,
    inputs: Sequence[np.ndarray],
    visit: Visit | None = None,
    block: tuple[Rows, Span] | None = None,
) -> list[np.ndarray]:
    """Evaluate the fusion on global numpy arrays; returns one array per output.

    Intermediates stay in their compute dtype (half as float) and only the outputs
    are rounded to their dtype: the whole fusion as one kernel would compute it.
    `visit(expr, args, values)`, if given, sees every expression as it is evaluated
    (values: one per output). `block`: the fusion's rows (reference/rows.py) and a span
    of them: only those rows of the tensors with rows are evaluated, the outputs are
    those rows.
    """
    args.instance(fusion, Fusion, "evaluate", "fusion", "a Fusion", ExecutionError)
    if block is not None and not _is_block(block):
        raise ExecutionError(
            "evaluate: block must be (rows, span): the fusion's rows (reference.rows.rows_of) "
            f"and one of rows.spans(), got {block!r}"
        )
    return _evaluate(fusion, inputs, visit, block)


def _is_block(block) -> bool:
    """Whether `block` is (Rows, a span of slices within its extents, one per axis)."""
    if not (isinstance(block, tuple) and len(block) == 2 and isinstance(block[0], Rows)):
        return False
    rows, span = block
    return (
        isinstance(span, tuple)
        and len(span) == len(rows.extent)
        and all(
            isinstance(s, slice)
            and isinstance(s.start, int)
            and isinstance(s.stop, int)
            and s.step is None
            and 0 <= s.start < s.stop <= n
            for s, n in zip(span, rows.extent)
        )
    )


def _evaluate(
    fusion: Fusion,
    inputs: Sequence[np.ndarray],
    visit: Visit | None,
    block: tuple[Rows, Span] | None = None,
) -> list[np.ndarray]:
    arrays = check_inputs(fusion, inputs)
    if block is None:
        shape_of = attrgetter("shape")
        start_of: Callable[[TensorView], tuple[int, ...] | None] = lambda t: None  # noqa: E731
    else:
        rows, span = block
        arrays = [a[span] if t in rows.tensors else a for t, a in zip(fusion.inputs, arrays)]
        shape_of = lambda t: rows.shape(t, span)  # noqa: E731
        start_of = lambda t: rows.start(t, span)  # noqa: E731
    values: dict[TensorView, np.ndarray] = dict(zip(fusion.inputs, arrays))
    exprs = fusion.exprs()
    # Free each intermediate after its last reader: memory stays near the working set.
    dead = dead_after(exprs, attrgetter("inputs"), attrgetter("outputs"), keep=fusion.outputs)
    for run in stacks(exprs):
        expr = exprs[run.start]
        missing = [t.name for t in expr.inputs if t not in values]
        if missing:
            raise ExecutionError(
                f"{expr.output.name} = {expr.op_name}(...) reads {', '.join(missing)}, which is "
                "neither a fusion input nor computed; add it with fusion.add_input"
            )
        operands = [values[t] for t in expr.inputs]
        if run.stop - run.start == 1:
            shapes = [shape_of(t) for t in expr.outputs]
            made = [eval_outputs(expr, operands, shapes, start=start_of(expr.output))]
        else:
            made = [[row] for row in eval_stacked(exprs[run], operands, shape_of(expr.output))]
        for e, values_of_e in zip(exprs[run], made):
            values.update(zip(e.outputs, values_of_e))
            if visit is not None:
                visit(e, operands, values_of_e)
        del made
        del operands
        # The members of a run read the same tensors: none dies before the last one.
        for drop in dead[run]:
            for t in drop:
                del values[t]
    return [store(t, values[t]) for t in fusion.outputs]


def stacks(exprs: list[Expr]) -> list[slice]:
    """The expressions as runs, each evaluated as one numpy step: consecutive ones of one
    numpy_ops.stack_key (one op, operand tensors, scalar positions, dtypes and shape;
    their scalars alone differ: many outputs `x + k`), at most BLOCK elements together; every
    other expression alone."""
    runs: list[list[int]] = []  # [start, stop) of each run
    last, size = None, 0
    for i, expr in enumerate(exprs):
        key = stack_key(expr)
        n = 0 if key is None else math.prod(key[-1])
        if key is not None and key == last and size + n <= BLOCK:
            runs[-1][1] = i + 1
            size += n
        else:
            runs.append([i, i + 1])
            last, size = key, n
    return [slice(a, b) for a, b in runs]


MAX_INPUT_BYTES = 2**32  # 4 GiB of random inputs in all: more is a typo, not a test
INITS = ("scaled", "normal")  # random_inputs' `init`
# Ops whose operand 1 is a weight, and where its contraction axis (fan_in) is.
WEIGHT_FAN_IN = {"matmul": -2, "linear": -1}  # b[..., k, n]; weight[..., n, k]
# Ops that pass a tensor's values on unchanged: a weight reached through them is a weight.
VIEWS = frozenset({"set", "permute", "reshape", "squeeze", "broadcast", "expand", "cast"})


def fan_ins(fusion: Fusion) -> dict[TensorView, int]:
    """The fusion inputs that are weights, each with its fan_in: the second operand of a
    matmul or linear (directly or through copies, views and casts: VIEWS), fan_in the
    extent of its contraction axis there, and a linear's bias, with its weight's fan_in
    (the first such use decides)."""
    found: dict[TensorView, int] = {}
    inputs = set(fusion.inputs)
    for expr in fusion.exprs():
        axis = WEIGHT_FAN_IN.get(expr.op_name)
        if axis is None or len(expr.inputs) < 2:
            continue
        weight = expr.inputs[1]
        fan_in = weight.shape[axis]
        for t in expr.inputs[1:]:  # the weight, and a linear's bias
            while t not in inputs and t.definition is not None and t.definition.op_name in VIEWS:
                t = t.definition.inputs[0]
            if t in inputs:
                found.setdefault(t, fan_in)
    return found


def random_inputs(fusion: Fusion, seed: int = 0, init: str = "scaled") -> list[np.ndarray]:
    """Seeded random inputs matching the fusion's inputs (at most MAX_INPUT_BYTES in all).

    Floats are normal: with init="scaled" (the default) a weight (`fan_ins`: the second
    operand of a matmul or linear, and a linear's bias) has standard deviation
    1/sqrt(fan_in), as a layer is initialised (torch's kaiming-uniform and Xavier have
    that scale), so that activations stay of order 1 through the layers; every other
    float input is standard normal, and init="normal" makes the weights standard normal
    too. Integers are uniform in [-8, 8), bools fair coins. Each input is drawn in
    blocks straight into an array of its dtype, which gives the same values as drawing
    it whole."""
    args.instance(fusion, Fusion, "random_inputs", "fusion", "a Fusion", ExecutionError)
    seed = args.integer(seed, "random_inputs", "the seed", minimum=0, error=ExecutionError)
    if init not in INITS:
        raise ExecutionError(
            f"random_inputs: init must be one of {', '.join(INITS)} (weights scaled by "
            f"1/sqrt(fan_in), or every float standard normal), got {init!r}"
        )
    sizes = {tv: tv.nbytes for tv in fusion.inputs}
    total = sum(sizes.values())
    if total > MAX_INPUT_BYTES:
        largest = sorted(sizes, key=lambda tv: -sizes[tv])[:3]
        named = ", ".join(f"{tv.name} {list(tv.shape)} {sizes[tv]} bytes" for tv in largest)
        raise ExecutionError(
            f"the random inputs of this fusion need {total} bytes in all (largest: {named}); "
            f"random inputs are limited to {MAX_INPUT_BYTES} bytes (4 GiB) in all: shrink the "
            "shapes, or pass your own arrays to FusionExecutor.run"
        )
    fan_in = fan_ins(fusion) if init == "scaled" else {}
    rng = np.random.default_rng(seed)
    return [
        _draw(
            rng,
            tv.shape,
            tv.dtype.numpy,
            tv.dtype.is_float,
            1 / math.sqrt(max(fan_in.get(tv, 1), 1)),
        )
        for tv in fusion.inputs
    ]


def _draw(
    rng: np.random.Generator, shape, dtype: np.dtype, is_float: bool, std: float = 1.0
) -> np.ndarray:
    """One input: `rng`'s stream cast element by element into an array of `dtype`
    (floats times `std`)."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)  # a view: a float64 temporary of a block, not of the input
    for b in blocks(flat.size):
        part = flat[b]
        if is_float:
            part[...] = rng.standard_normal(part.size) * std
        elif dtype == np.bool_:
            part[...] = rng.integers(0, 2, part.size)
        else:
            part[...] = rng.integers(-8, 8, part.size)
    return out
