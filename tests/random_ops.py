"""The transformer ops for the random sharded fusions (tests/random_sharded.py): casts
(bfloat16, half, double), permute/transpose, where, silu/sigmoid/sqrt/log, the views
(squeeze, unsqueeze, select, slice, cat, flatten, split, chunk) and batched
contractions, each drawn with its call written into the case's script.

DRAWN maps every op of the registry and every composite to the generator kind that
draws it; tests/test_differential.py fails when an op is missing, so a new op is in
the differential test from the commit that adds it.
"""

from __future__ import annotations

import numpy as np
from random_nn_ops import NN_DRAWN

import fuserlite as fl

MAX_RANK = 4

# op or composite -> the generator method (op_<kind>) that draws it
DRAWN = {
    **{u: "unary" for u in ("neg", "exp", "tanh", "relu", "abs", "gelu", "erf", "sigmoid", "silu")},
    "sin": "unary",
    "cos": "unary",
    "rsqrt": "positive",
    "pow": "power",
    "grouped_mm": "grouped",
    **{b: "binary" for b in ("add", "sub", "mul", "maximum", "minimum")},
    "div": "div",
    "sqrt": "positive",
    "log": "positive",
    "broadcast": "broadcast",
    "sum": "reduce",
    "max": "reduce",
    "min": "reduce",
    "set": "set",
    "linear": "linear",
    "matmul": "matmul",
    "expand": "expand",
    "reshape": "reshape",
    "cast": "cast",
    "permute": "permute",
    "transpose": "permute",
    "where": "where",
    "squeeze": "squeeze",
    "unsqueeze": "unsqueeze",
    "select": "select",
    "slice": "slice",
    "split": "slice",
    "chunk": "slice",
    "cat": "cat",
    "flatten": "flatten",
    "take": "take",
    **NN_DRAWN,
}


class TransformerOps:
    """Mixin of random_sharded.Generator: the methods DRAWN names beyond its own."""

    def _unary_op(self, a: fl.TensorView, out: fl.TensorView, call: str, bound: float):
        return self.register(out, call, bound, self.producer_mesh(a))

    def op_positive(self):
        """sqrt, log or rsqrt of |a| + 1 (their domain)."""
        a = self.operand()
        name = self.pick(["sqrt", "log", "rsqrt"])
        out = getattr(fl, name)(fl.add(fl.abs(a), 1.0))
        call = f"fl.{name}(fl.add(fl.abs({self.name(a)}), 1.0))"
        bound = 1.0 if name == "rsqrt" else self.bound[id(a)] + 1.0
        return self._unary_op(a, out, call, bound)

    def op_power(self):
        """(|a| + 1) ** e for a small exponent e (a tensor base, a number exponent)."""
        a = self.operand()
        e = float(self.pick([0.5, 2.0, 3.0]))
        bound = (self.bound[id(a)] + 1.0) ** e
        if bound > 1000.0:
            return None
        out = fl.pow(fl.add(fl.abs(a), 1.0), e)
        call = f"fl.pow(fl.add(fl.abs({self.name(a)}), 1.0), {e!r})"
        return self._unary_op(a, out, call, bound)

    def op_grouped(self):
        """grouped_mm of a[m, k] by a weight w[g, k, n] sharded at random (on experts:
        gathered; on n or k: in place), the groups' ends an iota (every row in a group
        but those past the last end, which are 0)."""
        a = self.operand()
        if len(a.shape) != 2 or len(self.inputs) >= 5 or self.bound[id(a)] * 4.0 * a.shape[1] > 100:
            return None
        m, k = a.shape
        g = min(int(self.pick([1, 2, 3])), m)
        step = m // g
        w = self._weight([g, k, self.extent()], a, 0.5)
        ends = fl.iota(g, "int32", step, step)
        call = (
            f"fl.grouped_mm({self.name(a)}, {self.name(w)}, fl.iota({g}, 'int32', {step}, {step}))"
        )
        out = fl.grouped_mm(a, w, ends)
        return self.register(out, call, self.bound[id(a)] * 4.0 * k, self.producer_mesh(a, w))

    def op_cast(self):
        """To bfloat16, half or double (and back to float32 half the time): the loosest
        dtype on the way sets the output's tolerance."""
        a = self.operand()
        if self.bound[id(a)] > 1000.0:
            return None
        dtype = self.pick(["bfloat16", "float16", "float64", "float32"])
        out = fl.cast(a, dtype)
        call = f"fl.cast({self.name(a)}, {dtype!r})"
        if self.chance(0.5):
            out, call = fl.cast(out, "float32"), f"fl.cast({call}, 'float32')"
        return self._unary_op(a, out, call, self.bound[id(a)] * 1.01)

    def op_permute(self):
        a = self.operand()
        rank = len(a.shape)
        if rank < 2:
            return None
        if self.chance(0.5):
            dims = [int(d) for d in self.rng.permutation(rank)]
            return self._unary_op(
                a, fl.permute(a, dims), f"fl.permute({self.name(a)}, {dims})", self.bound[id(a)]
            )
        d0, d1 = (int(d) for d in self.rng.choice(rank, size=2, replace=False))
        call = f"fl.transpose({self.name(a)}, {d0}, {d1})"
        return self._unary_op(a, fl.transpose(a, d0, d1), call, self.bound[id(a)])

    def op_where(self):
        """where(cond, a, b or a number), cond a fresh bool input broadcastable with a
        (a bool made from a float would flip where rounding moves it across 0)."""
        a = self.operand()
        if len(self.inputs) >= 5:
            return None
        shape = [1 if self.chance(0.3) else e for e in a.shape]
        cond = self.new_input(shape, self.producer_mesh(a), 0.3, 0.0, dtype="bool")
        self.live.remove(cond)  # a condition only: arithmetic on bools is refused
        others = [t for t in self.live if t.dtype.is_float and self.broadcastable(a, t)]
        tensors = [a] + ([self.pick(others)] if others and self.chance(0.6) else [])
        b = tensors[1] if len(tensors) > 1 else -1.5
        b_text = self.name(b) if isinstance(b, fl.TensorView) else repr(b)
        bound = max([self.bound[id(t)] for t in tensors] + [1.5])
        out = fl.where(cond, a, b)
        call = f"fl.where({self.name(cond)}, {self.name(a)}, {b_text})"
        return self.register(out, call, bound, self.producer_mesh(*tensors))

    def op_squeeze(self):
        a = self.operand()
        ones = [k for k, e in enumerate(a.shape) if e == 1]
        if not ones or len(a.shape) < 2:
            return None
        dims = [int(self.pick(ones))]
        call = f"fl.squeeze({self.name(a)}, {dims})"
        return self._unary_op(a, fl.squeeze(a, dims), call, self.bound[id(a)])

    def op_unsqueeze(self):
        a = self.operand()
        rank = len(a.shape)
        if rank >= MAX_RANK:
            return None
        d = int(self.rng.integers(-(rank + 1), rank + 1))
        call = f"fl.unsqueeze({self.name(a)}, {d})"
        return self._unary_op(a, fl.unsqueeze(a, d), call, self.bound[id(a)])

    def op_select(self):
        a = self.operand()
        axes = [k for k, e in enumerate(a.shape) if e >= 2]
        if len(a.shape) < 2 or not axes:
            return None
        axis = int(self.pick(axes))
        index = int(self.rng.integers(-a.shape[axis], a.shape[axis]))
        call = f"fl.select({self.name(a)}, {axis}, {index})"
        return self._unary_op(a, fl.select(a, axis, index), call, self.bound[id(a)])

    def op_slice(self):
        """A static slice, or the pieces of a split or chunk (each a live tensor)."""
        a = self.operand()
        axes = [k for k, e in enumerate(a.shape) if e >= 2]
        if not axes:
            return None
        how = self.pick(["slice", "split", "chunk"])
        if how == "slice":
            starts, stops, steps = [], [], []
            for e in a.shape:
                lo = int(self.rng.integers(0, e))
                starts.append(lo)
                stops.append(int(self.rng.integers(lo + 1, e + 1)))
                steps.append(int(self.pick([1, 1, 2])))
            call = f"fl.slice({self.name(a)}, {starts}, {stops}, {steps})"
            return self._unary_op(a, fl.slice(a, starts, stops, steps), call, self.bound[id(a)])
        axis = int(self.pick(axes))
        if how == "split":
            first = int(self.rng.integers(1, a.shape[axis]))
            sizes = [first, a.shape[axis] - first]
            pieces, call = fl.split(a, sizes, axis), f"fl.split({self.name(a)}, {sizes}, {axis})"
        else:
            n = int(self.rng.integers(2, min(a.shape[axis], 4) + 1))
            pieces, call = fl.chunk(a, n, axis), f"fl.chunk({self.name(a)}, {n}, {axis})"
        self.emit(f"pieces = {call}")
        out = None
        for k, piece in enumerate(pieces):
            out = self._unary_op(a, piece, f"pieces[{k}]", self.bound[id(a)])
        return out

    def op_cat(self):
        a = self.operand()
        if not a.shape:
            return None
        axis = int(self.rng.integers(len(a.shape)))
        fits = [
            t
            for t in self.live
            if t.dtype == a.dtype
            and len(t.shape) == len(a.shape)
            and all(x == y for k, (x, y) in enumerate(zip(t.shape, a.shape)) if k != axis)
        ]
        parts = [a, self.pick(fits)] + ([a] if self.chance(0.3) else [])
        names = ", ".join(self.name(t) for t in parts)
        out = fl.cat(parts, axis)
        bound = max(self.bound[id(t)] for t in parts)
        return self.register(out, f"fl.cat([{names}], {axis})", bound, self.producer_mesh(*parts))

    def op_take(self):
        """Rows of axis 0, in any order, repeated or not."""
        a = self.operand()
        if not a.shape:
            return None
        n = a.shape[0]
        indices = [int(i) for i in self.rng.integers(0, n, size=int(self.rng.integers(1, 5)))]
        call = f"fl.take({self.name(a)}, {indices})"
        return self._unary_op(a, fl.take(a, indices), call, self.bound[id(a)])

    def op_flatten(self):
        a = self.operand()
        rank = len(a.shape)
        if rank < 2:
            return None
        start = int(self.rng.integers(rank - 1))
        end = int(self.rng.integers(start + 1, rank))
        call = f"fl.flatten({self.name(a)}, {start}, {end})"
        return self._unary_op(a, fl.flatten(a, start, end), call, self.bound[id(a)])

    def op_batched(self):
        """matmul of a[..., m, k] with a batched b[..., k, n] (batch axes broadcast), or
        linear with a batched weight [W, n, k] (nvFuser's device-batched layout)."""
        a = self.operand()
        if len(a.shape) < 2 or len(self.inputs) >= 5 or self.bound[id(a)] * 4.0 * a.shape[-1] > 100:
            return None
        k, n = a.shape[-1], self.extent()
        if self.chance(0.5):
            batch = [1 if self.chance(0.3) else e for e in a.shape[:-2]]
            b = self._weight(batch + [k, n], a, 0.5)
            out, call = fl.matmul(a, b), f"fl.matmul({self.name(a)}, {self.name(b)})"
        else:
            w = self._weight([int(self.pick([self.d, 2])), n, k], a, 0.5)
            out, call = fl.linear(a, w), f"fl.linear({self.name(a)}, {self.name(w)})"
        return self.register(out, call, self.bound[id(a)] * 4.0 * k, self.producer_mesh(a))


def bfloat16_share(rng: np.random.Generator) -> str:
    """The dtype of a new float input: bfloat16 one time in six."""
    return "bfloat16" if rng.random() < 1 / 6 else "float32"
