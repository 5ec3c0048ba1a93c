"""One small example per op, as a .fus call: the text, registry and backend tests run
every op through them (tests/test_op_registry.py checks that every op has one)."""

from __future__ import annotations

import fuserlite as fl

# The inputs the calls read.
INPUTS = (
    "input x: float32[4, 8]\ninput w: float32[1, 8]\ninput k: float32[8, 3]\n"
    "input k2: float32[3, 8]\ninput bias: float32[3]\ninput c: bool[4, 8]\n"
)

# op name -> one call of it, reading INPUTS
OP_CALLS = {
    "neg": "neg(x)",
    "exp": "exp(x)",
    "tanh": "tanh(x)",
    "relu": "relu(x)",
    "abs": "abs(x)",
    "gelu": "gelu(x)",
    "erf": "erf(x)",
    "sqrt": "sqrt(x)",
    "log": "log(x)",
    "sigmoid": "sigmoid(x)",
    "silu": "silu(x)",
    "where": "where(c, x, -1.5)",
    "cast": "cast(x, bfloat16)",
    "set": "set(x)",
    "add": "add(x, w)",
    "sub": "sub(2, x)",
    "mul": "mul(x, 0.5)",
    "div": "div(x, w)",
    "maximum": "maximum(x, -inf)",
    "minimum": "minimum(w, x)",
    "broadcast": "broadcast(x, [false, true, false])",
    "sum": "sum(x, [0])",
    "max": "max(x, axes=1)",
    "sin": "sin(x)",
    "cos": "cos(x)",
    "rsqrt": "rsqrt(x)",
    "pow": "pow(x, 2.5)",
    "min": "min(x, axes=1)",
    "expand": "expand(w, [4, 8])",
    "reshape": "reshape(x, [2, -1])",
    "permute": "permute(x, [1, 0])",
    "take": "take(x, [3, 0, 0])",
    "squeeze": "squeeze(w, 0)",
    "select": "select(x, 1, -2)",
    "slice": "slice(x, [1, 0], [4, -1], [2, 3])",
    "cat": "cat([x, w, x], 0)",
    "matmul": "matmul(x, k)",
    # the groups' ends an iota (1 3), as random offsets would be no ends of groups
    "grouped_mm": "input e: float32[2, 8, 3]\nends = iota(2, int32, 1, 2)\ny = grouped_mm(x, e, ends)",
    "linear": "linear(x, k2, bias)",
    "embedding": "ids = iota(3, int64, 3, -1)\ny = embedding(x, ids)",
    "embedding_backward": "ids = iota(4, int64, 0, 2)\ny = embedding_backward(x, ids, num_weights=8)",
    "lt": "lt(x, w)",
    "rand_like": "rand_like(x, seed=3, offset=1)",
    "rand": "rand([4, 8], float32, seed=3, offset=1)",
    "iota": "iota(8, float32, -1.5, 0.25)",
    "sdpa": "y, lse = sdpa(x, x, x, dropout_p=0.25, is_causal=true, seed=5, offset=1)",
    "sdpa_bwd": (
        "o, lse = sdpa(x, x, x, dropout_p=0.25, is_causal=true, seed=5)\n"
        "y, dk, dv = sdpa_bwd(x, x, x, x, o, lse, dropout_p=0.25, is_causal=true, seed=5)"
    ),
}

# composite name -> one call of it (a composite writes its primitives back, not itself)
COMPOSITE_CALLS = {
    "softmax": "softmax(x, 1)",
    "log_softmax": "log_softmax(x, -1)",
    "layer_norm": "layer_norm(x, [4, 8], eps=0.001)",
    "rms_norm": "rms_norm(x, [8])",
    "gelu_backward": "gelu_backward(x, w)",
    "tanh_backward": "tanh_backward(w, x)",
    "uniform": "uniform(x, -1, 1, seed=2)",
    "dropout": "dropout(x, 0.25, seed=1, offset=4)",
    "transpose": "transpose(x, 0, -1)",
    "unsqueeze": "unsqueeze(bias, -1)",
    "flatten": "flatten(x)",
    "split": "y, y2 = split(x, [1, 3], dim=0)",  # one name per result; y is the output
    "chunk": "y0, y, y2 = chunk(x, 3, 1)",
    "var_mean": "y, mean = var_mean(x, [1], correction=0)",
}


def op_example(op: str) -> fl.Fusion:
    """A fusion of INPUTS and `y = <the op's call>`, with y its output."""
    call = OP_CALLS.get(op) or COMPOSITE_CALLS[op]
    statement = call if " = " in call else f"y = {call}"
    return fl.parse(f"{INPUTS}{statement}\noutput y\n", f"{op}.fus")
