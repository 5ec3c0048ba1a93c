"""The examples' gradients against PyTorch autograd (the optional torch extra, pinned
torch==2.13.0): the same functions written in torch, the same inputs, the same dropout
masks (fuserlite's Philox draws), float64 on torch's side."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.numerics.philox import keep_mask

torch = pytest.importorskip(
    "torch", reason="torch is an optional extra: pip install -e '.[torch]' (torch==2.13.0, CPU)"
)
F = torch.nn.functional

REPO = Path(__file__).resolve().parents[1]


def example(name: str):
    """An examples/ script as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def autograd(fn, inputs: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """fn's value at `inputs` and its gradient with respect to each, by torch in float64."""
    ts = [torch.tensor(x.astype(np.float64), requires_grad=True) for x in inputs]
    loss = fn(*ts)
    loss.backward()
    return float(loss.detach()), [t.grad.numpy() for t in ts]


def check(step: fl.Fusion, inputs: list[np.ndarray], fn, wrt: list[int], rtol: float) -> None:
    """fl.grad's step (its reference evaluation and its sharded run) against autograd:
    each gradient within rtol of the largest (a gradient that is zero in exact arithmetic,
    as a key bias's under softmax, is float32's rounding of the terms that cancel)."""
    want_loss, want = autograd(fn, inputs)
    scale = max(float(np.max(np.abs(want[k]))) for k in wrt)
    for outputs in (
        fl.evaluate(step, inputs),
        fl.FusionExecutor(step).run(inputs),
    ):
        assert float(outputs[0]) == pytest.approx(want_loss, rel=rtol)
        for got, k in zip(outputs[1:], wrt):
            error = float(np.max(np.abs(got.astype(np.float64) - want[k])))
            assert error <= rtol * scale, f"input {k}: {error:.3g} of {scale:.3g}"


def test_fsdp_train_step_matches_autograd() -> None:
    fsdp = example("fsdp_train_step")
    forward = fsdp.mlp_loss()
    step = fl.grad(forward, ["w1", "w2"])
    inputs = fl.random_inputs(step, seed=4)

    def mlp(x, target, w1, w2):
        y = F.linear(F.gelu(F.linear(x, w1), approximate="tanh"), w2)
        return torch.mean((y - target) ** 2)

    check(step, inputs, mlp, [2, 3], rtol=1e-5)


def test_tp_mlp_loss_fus_step_matches_autograd() -> None:
    forward = fl.load(REPO / "examples" / "tp_mlp_loss.fus")
    names = ["w1", "b1", "w2", "b2", "x"]
    step = fl.grad(forward, names)
    inputs = fl.random_inputs(step, seed=5)

    def mlp(x, w1, b1, w2, b2):
        out = F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)
        return torch.sum(out * out) * 0.00390625

    check(step, inputs, mlp, [1, 2, 3, 4, 0], rtol=1e-5)


def torch_block(p: float, shape: models.BlockShape):
    """models.transformer_block in torch, with fuserlite's dropout masks, and the loss
    of examples/transformer_train_step.py."""
    b, s, h, heads = shape.batch, shape.seq, shape.hidden, shape.heads
    d = h // heads
    scale = 1.0 / (1.0 - p)

    def mask(shape: tuple[int, ...], offset: int):
        index = np.arange(math.prod(shape)).reshape(shape)
        return torch.tensor(keep_mask(p, 0, offset, index, np.float32).astype(np.float64))

    attention_mask, mask1, mask2 = mask((b, heads, s, s), 0), mask((b, s, h), 1), mask((b, s, h), 2)
    causal = torch.ones(s, s, dtype=torch.bool).tril()

    def block(x, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2):
        def heads_first(y):
            return y.reshape(b, s, heads, d).permute(0, 2, 1, 3)

        ln1 = F.layer_norm(x, [h], ln1_w, ln1_b)
        q, k, v = (
            heads_first(F.linear(ln1, w, bias)) for w, bias in ((wq, bq), (wk, bk), (wv, bv))
        )
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        probs = torch.softmax(scores.masked_fill(~causal, -math.inf), -1)
        o = ((probs * attention_mask * scale) @ v).permute(0, 2, 1, 3).reshape(b, s, h)
        r1 = x + F.linear(o, wo, bo) * mask1 * scale
        ln2 = F.layer_norm(r1, [h], ln2_w, ln2_b)
        mlp = F.linear(F.gelu(F.linear(ln2, w1, b1), approximate="tanh"), w2, b2)
        y = r1 + mlp * mask2 * scale
        return torch.mean(y * y)

    return block


def test_transformer_train_step_matches_autograd() -> None:
    train = example("transformer_train_step")
    forward = train.block_loss("float32")
    step = fl.grad(forward, [t.user_name for t in forward.inputs])
    inputs = fl.random_inputs(step, seed=6)
    check(step, inputs, torch_block(0.1, models.BlockShape()), list(range(17)), rtol=1e-4)
