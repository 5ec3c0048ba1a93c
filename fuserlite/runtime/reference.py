"""The reference evaluator: runs the unscheduled, unsharded fusion on whole arrays."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.runtime.numpy_ops import eval_expr, store


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


Visit = Callable[[Expr, list[np.ndarray], np.ndarray], None]


def evaluate(
    fusion: Fusion, inputs: Sequence[np.ndarray], visit: Visit | None = None
) -> list[np.ndarray]:
    """Evaluate the fusion on global numpy arrays; returns one array per output.

    Intermediates stay in their compute dtype (half as float) and only the outputs
    are rounded to their dtype: the whole fusion as one kernel would compute it.
    `visit(expr, args, value)`, if given, sees every expression as it is evaluated.
    """
    args.instance(fusion, Fusion, "evaluate", "fusion", "a Fusion", ExecutionError)
    values: dict[TensorView, np.ndarray] = dict(zip(fusion.inputs, check_inputs(fusion, inputs)))
    for expr in fusion.exprs():
        missing = [t.name for t in expr.inputs if t not in values]
        if missing:
            raise ExecutionError(
                f"{expr.output.name} = {expr.op_name}(...) reads {', '.join(missing)}, which is "
                "neither a fusion input nor computed; add it with fusion.add_input"
            )
        operands = [values[t] for t in expr.inputs]
        values[expr.output] = eval_expr(expr, operands, expr.output.shape)
        if visit is not None:
            visit(expr, operands, values[expr.output])
    return [store(t, values[t]) for t in fusion.outputs]


MAX_INPUT_BYTES = 2**33  # 8 GiB: larger inputs are a typo, not a test


def random_inputs(fusion: Fusion, seed: int = 0) -> list[np.ndarray]:
    """Seeded random inputs matching the fusion's inputs."""
    args.instance(fusion, Fusion, "random_inputs", "fusion", "a Fusion", ExecutionError)
    seed = args.integer(seed, "random_inputs", "the seed", minimum=0, error=ExecutionError)
    rng = np.random.default_rng(seed)
    arrays = []
    for tv in fusion.inputs:
        elements = 1
        for e in tv.shape:
            elements *= e
        if elements * tv.dtype.itemsize > MAX_INPUT_BYTES:
            raise ExecutionError(
                f"input {tv.name} {list(tv.shape)} needs {elements * tv.dtype.itemsize} bytes; "
                f"random inputs are limited to {MAX_INPUT_BYTES} bytes each"
            )
        if tv.dtype.is_float:
            arrays.append(rng.standard_normal(tv.shape).astype(tv.dtype.numpy))
        elif tv.dtype.name == "bool":
            arrays.append(rng.integers(0, 2, tv.shape).astype(bool))
        else:
            arrays.append(rng.integers(-8, 8, tv.shape).astype(tv.dtype.numpy))
    return arrays
