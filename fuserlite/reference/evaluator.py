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
    fusion: Fusion, inputs: Sequence[np.ndarray], visit: Visit | None = None
) -> list[np.ndarray]:
    """Evaluate the fusion on global numpy arrays; returns one array per output.

    Intermediates stay in their compute dtype (half as float) and only the outputs
    are rounded to their dtype: the whole fusion as one kernel would compute it.
    `visit(expr, args, values)`, if given, sees every expression as it is evaluated
    (values: one per output).
    """
    args.instance(fusion, Fusion, "evaluate", "fusion", "a Fusion", ExecutionError)
    return _evaluate(fusion, inputs, visit)


def _evaluate(
    fusion: Fusion, inputs: Sequence[np.ndarray], visit: Visit | None
) -> list[np.ndarray]:
    values: dict[TensorView, np.ndarray] = dict(zip(fusion.inputs, check_inputs(fusion, inputs)))
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
            made = [eval_outputs(expr, operands, [t.shape for t in expr.outputs])]
        else:
            made = [[row] for row in eval_stacked(exprs[run], operands, expr.output.shape)]
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


def random_inputs(fusion: Fusion, seed: int = 0) -> list[np.ndarray]:
    """Seeded random inputs matching the fusion's inputs (at most MAX_INPUT_BYTES in all).

    Floats are standard normal, integers uniform in [-8, 8), bools fair coins; each
    input is drawn in blocks straight into an array of its dtype, which gives the same
    values as drawing it whole."""
    args.instance(fusion, Fusion, "random_inputs", "fusion", "a Fusion", ExecutionError)
    seed = args.integer(seed, "random_inputs", "the seed", minimum=0, error=ExecutionError)
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
    rng = np.random.default_rng(seed)
    return [_draw(rng, tv.shape, tv.dtype.numpy, tv.dtype.is_float) for tv in fusion.inputs]


def _draw(rng: np.random.Generator, shape, dtype: np.dtype, is_float: bool) -> np.ndarray:
    """One input: `rng`'s stream cast element by element into an array of `dtype`."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)  # a view: a float64 temporary of a block, not of the input
    for b in blocks(flat.size):
        part = flat[b]
        if is_float:
            part[...] = rng.standard_normal(part.size)
        elif dtype == np.bool_:
            part[...] = rng.integers(0, 2, part.size)
        else:
            part[...] = rng.integers(-8, 8, part.size)
    return out
