"""The neural-network ops for the random sharded fusions (tests/random_sharded.py):
lt feeding a where, iota (positions and masks), the random numbers (rand_like, rand,
uniform, dropout), the normalizations and softmax, var_mean, the pointwise backward
helpers, and attention
(sdpa, its outputs, and sdpa_bwd of the forward's results), each drawn with its call
written into the case's script. random_ops.DRAWN names these kinds too.
"""

from __future__ import annotations

import math

import fuserlite as fl

MAX_BOUND = 100.0  # as random_sharded.MAX_BOUND: |values| within float32's tolerance

NN_DRAWN = {
    "lt": "compare",
    "rand_like": "random",
    "rand": "random",
    "uniform": "random",
    "dropout": "random",
    "layer_norm": "norm",
    "rms_norm": "norm",
    "softmax": "softmax",
    "log_softmax": "softmax",
    "var_mean": "var_mean",
    "gelu_backward": "backward",
    "tanh_backward": "backward",
    "sdpa": "attention",
    "sdpa_bwd": "attention",
    "iota": "iota",
    "embedding": "gather",
    "embedding_backward": "gather",
}


class NNOps:
    """Mixin of random_sharded.Generator: the kinds NN_DRAWN names."""

    def _counters(self) -> tuple[int, int]:
        """(seed, offset) of a random op: small numbers, sometimes a large seed."""
        seed = int(self.pick([0, 7, 2**40 + 3]))
        offset = int(self.pick([0, 4, 1000]))
        return seed, offset

    def op_compare(self):
        """where(lt(x, y or a number), a, b): x and y inputs, whose values are exact on
        every path (a computed x could round across y and flip the condition)."""
        a = self.operand()
        floats = [t for t in self.inputs if t.dtype.is_float and self.broadcastable(a, t)]
        if not floats:
            return None
        x = self.pick(floats)
        ys = [t for t in floats if self.broadcastable(x, t)]
        y = self.pick(ys) if self.chance(0.5) else float(self.pick([0.0, 0.5, -1.0]))
        y_text = self.name(y) if isinstance(y, fl.TensorView) else repr(y)
        conds = [x] + ([y] if isinstance(y, fl.TensorView) else [])
        others = [
            t
            for t in self.live
            if t.dtype.is_float and all(self.broadcastable(t, c) for c in [a, *conds])
        ]
        b = self.pick(others) if self.chance(0.6) else 0.0
        b_text = self.name(b) if isinstance(b, fl.TensorView) else repr(b)
        cond = fl.lt(x, y)
        self.emit(f"cond = fl.lt({self.name(x)}, {y_text})")
        out = fl.where(cond, a, b)
        tensors = [a] + ([b] if isinstance(b, fl.TensorView) else [])
        bound = max(self.bound[id(t)] for t in tensors)
        return self.register(
            out,
            f"fl.where(cond, {self.name(a)}, {b_text})",
            bound,
            self.producer_mesh(a, *tensors, x),
        )

    def op_iota(self):
        """iota along a's last axis, on a's mesh and sharded or not, as positions
        (a * iota) or as a mask (where(lt(iota, k), a, 0)); the iota is no operand
        of later ops (an integer one would meet float-only ops)."""
        a = self.operand()
        if not a.shape:
            return None
        n = a.shape[-1]
        dtype = self.pick(["int64", "int32", "float32"])
        start, step = (
            (0, 1) if self.chance(0.5) else (int(self.pick([-3, 2])), int(self.pick([-1, 2])))
        )
        if dtype == "float32":
            start, step = start + 0.5, step * 0.75
        i = fl.iota(n, dtype, start, step)
        top = abs(start) + abs(step) * (n - 1)
        self.register(i, f"fl.iota({n}, {dtype!r}, {start!r}, {step!r})", top)
        self.live.remove(i)
        mesh = self.producer_mesh(a)
        if mesh is not None:
            self.set_mesh(i, mesh)
            self.maybe_shard(i, 0.6, 0.3)
        bound = self.bound[id(a)] * top
        if bound <= MAX_BOUND and self.chance(0.5):
            return self.register(
                fl.mul(a, i), f"fl.mul({self.name(a)}, {self.name(i)})", bound, mesh
            )
        k = self.pick([0, 1, 2])
        out = fl.where(fl.lt(i, k), a, 0.0)
        call = f"fl.where(fl.lt({self.name(i)}, {k}), {self.name(a)}, 0.0)"
        return self.register(out, call, self.bound[id(a)], mesh)

    def _index_iota(self, n: int, rows: int, mesh) -> tuple[fl.TensorView, str]:
        """n int64 indices of rows 0..rows-1 (an iota counting up, down or standing
        still), on `mesh` and sharded or not: not an operand of later ops."""
        start = int(self.rng.integers(rows))
        steps = [s for s in (0, 1, -1) if 0 <= start + s * (n - 1) < rows]
        step = int(self.pick(steps))
        i = fl.iota(n, "int64", start, step)
        self.register(i, f"fl.iota({n}, 'int64', {start}, {step})", float(rows))
        self.live.remove(i)
        if mesh is not None:
            self.set_mesh(i, mesh)
            self.maybe_shard(i, 0.6, 0.3)
        return i, self.name(i)

    def op_gather(self):
        """embedding(a, indices) (a's axis 0 the rows, a vocabulary sharded or not), or
        embedding_backward(a, indices, V) of a's rows scattered onto V rows."""
        a = self.operand()
        if not a.shape or not a.dtype.is_float:
            return None
        mesh = self.producer_mesh(a)
        if self.chance(0.5):
            i, name = self._index_iota(self.extent(), a.shape[0], mesh)
            call = f"fl.embedding({self.name(a)}, {name})"
            return self.register(fl.embedding(a, i), call, self.bound[id(a)], mesh)
        rows = self.extent()
        bound = self.bound[id(a)] * a.shape[0]
        if bound > MAX_BOUND:
            return None
        i, name = self._index_iota(a.shape[0], rows, mesh)
        out = fl.embedding_backward(a, i, rows)
        call = f"fl.embedding_backward({self.name(a)}, {name}, {rows})"
        return self.register(out, call, bound, mesh)

    def op_random(self):
        """rand_like, uniform, dropout or a rand added to a float tensor, with a seed and an
        offset."""
        a = self.operand()
        seed, offset = self._counters()
        counters = f"seed={seed}, offset={offset}"
        how = self.pick(["rand_like", "uniform", "dropout", "rand"])
        if how == "rand":  # a draw of a's shape with no operand: placed as the add reads it
            shape, dtype = list(a.shape), a.dtype.name
            out = fl.add(a, fl.rand(shape, dtype, seed, offset))
            call = f"fl.add({self.name(a)}, fl.rand({shape}, {dtype!r}, {counters}))"
            return self.register(out, call, self.bound[id(a)] + 1.0, self.producer_mesh(a))
        if how == "rand_like":
            out, call, bound = (
                fl.rand_like(a, seed, offset),
                f"fl.rand_like({self.name(a)}, {counters})",
                1.0,
            )
        elif how == "uniform":
            low, high = (float(v) for v in self.pick([(0.0, 1.0), (-2.0, 3.0), (1.5, 1.5)]))
            out = fl.uniform(a, low, high, seed=seed, offset=offset)
            call = f"fl.uniform({self.name(a)}, {low}, {high}, {counters})"
            bound = max(abs(low), abs(high))
        else:
            p = float(self.pick([0.0, 0.1, 0.5, 1.0]))
            bound = self.bound[id(a)] / (1.0 - p) if p < 1 else 0.0
            if bound > MAX_BOUND:
                return None
            out = fl.dropout(a, p, seed=seed, offset=offset)
            call = f"fl.dropout({self.name(a)}, {p}, {counters})"
        return self.register(out, call, bound, self.producer_mesh(a))

    def op_norm(self):
        """layer_norm or rms_norm over the trailing axes (mostly the last), weight and
        bias (new inputs of the normalized shape) or none."""
        a = self.operand()
        rank = len(a.shape)
        if rank == 0 or len(self.inputs) >= 5 or self.bound[id(a)] > 10.0:
            return None
        k = 1 if rank == 1 or self.chance(0.7) else 2
        shape = list(a.shape[rank - k :])
        n = math.prod(shape)
        name = self.pick(["layer_norm", "rms_norm"])
        weight = self._weight(shape, a, 0.3) if self.chance(0.6) else None
        bias = self._weight(shape, a, 0.3) if name == "layer_norm" and self.chance(0.5) else None
        params = [weight] + ([bias] if name == "layer_norm" else [])
        names = ", ".join("None" if t is None else self.name(t) for t in params)
        out = getattr(fl, name)(a, shape, *params)
        bound = math.sqrt(n) * (4.0 if weight is not None else 1.0) + (4.0 if bias else 0.0)
        call = f"fl.{name}({self.name(a)}, {shape}, {names})"
        return self.register(out, call, bound, self.producer_mesh(a, *[t for t in params if t]))

    def op_softmax(self):
        """softmax or log_softmax over one axis."""
        a = self.operand()
        rank = len(a.shape)
        if rank == 0:
            return None
        dim = int(self.rng.integers(-rank, rank))
        name = self.pick(["softmax", "log_softmax"])
        bound = 1.0 if name == "softmax" else 2.0 * self.bound[id(a)] + math.log(a.shape[dim])
        if bound > MAX_BOUND:
            return None
        out = getattr(fl, name)(a, dim)
        return self.register(out, f"fl.{name}({self.name(a)}, {dim})", bound, self.producer_mesh(a))

    def op_var_mean(self):
        """(variance, mean) over one or two axes, both live tensors."""
        a = self.operand()
        rank = len(a.shape)
        if rank == 0 or self.bound[id(a)] > 7.0:
            return None
        k = 1 if rank == 1 or self.chance(0.7) else 2
        dims = sorted(int(i) for i in self.rng.choice(rank, size=k, replace=False))
        n = math.prod(a.shape[d] for d in dims)
        correction = int(self.pick([0, 1])) if n > 1 else 0  # N - correction = 0: inf
        keepdim = self.chance(0.4)
        arg = dims[0] if k == 1 else dims
        var, mean = fl.var_mean(a, arg, correction=correction, keepdim=keepdim)
        self.emit(
            f"var_mean = fl.var_mean({self.name(a)}, {arg}, correction={correction}, "
            f"keepdim={keepdim})"
        )
        b = self.bound[id(a)]
        self.register(var, "var_mean[0]", b * b * n / max(n - correction, 1), self.producer_mesh(a))
        return self.register(mean, "var_mean[1]", b, self.producer_mesh(a))

    def op_backward(self):
        """gelu_backward(dy, x) or tanh_backward(dy, y) of two same-shape tensors."""
        a = self.operand()
        same = [t for t in self.live if t.dtype.is_float and t.shape == a.shape]
        x = self.pick(same)
        bx, ba = self.bound[id(x)], self.bound[id(a)]
        if self.chance(0.5):
            if bx > 10.0:
                return None
            out, name, bound = fl.gelu_backward(a, x), "gelu_backward", 1.2 * ba
        else:
            bound = ba * (1.0 + bx * bx)
            if bound > MAX_BOUND:
                return None
            out, name = fl.tanh_backward(a, x), "tanh_backward"
        call = f"fl.{name}({self.name(a)}, {self.name(x)})"
        return self.register(out, call, bound, self.producer_mesh(a, x))

    def op_attention(self):
        """sdpa of [batch, heads, seq, dim] operands (the query a live rank-4 tensor or a
        new input; key and value new inputs), its outputs live tensors, and half the time
        sdpa_bwd of the forward's results with the same flags."""
        if len(self.inputs) >= 4:
            return None
        a = self.operand()
        mesh = self.producer_mesh(a)
        if len(a.shape) == 4 and self.bound[id(a)] <= 4.0:
            q = a
        else:
            dtype = "bfloat16" if self.chance(1 / 6) else "float32"
            q = self.new_input(
                [self._small(), self._small(), self.extent(), self.extent()], mesh, 0.3, 0.0, dtype
            )
        n, h, length, e = q.shape
        s, ev = self.extent(), self.extent()
        k = self.new_input([n, h, s, e], mesh, 0.3, 0.0, q.dtype.name)
        v = self.new_input([n, h, s, ev], mesh, 0.3, 0.0, q.dtype.name)
        p = float(self.pick([0.0, 0.0, 0.25]))
        causal = self.chance(0.4)
        scale = None if self.chance(0.6) else 0.5
        seed, offset = self._counters()
        flags = f"dropout_p={p}, is_causal={causal}, scale={scale}, seed={seed}, offset={offset}"
        kw = dict(dropout_p=p, is_causal=causal, scale=scale, seed=seed, offset=offset)
        names = f"{self.name(q)}, {self.name(k)}, {self.name(v)}"
        out, lse = fl.sdpa(q, k, v, **kw)
        self.emit(f"attention = fl.sdpa({names}, {flags})")
        qk = (1.0 / math.sqrt(e) if scale is None else scale) * e * 16.0
        self.register(out, "attention[0]", 4.0 / (1.0 - p), mesh)
        last = self.register(lse, "attention[1]", qk + math.log(s) + 1.0, mesh)
        if self.chance(0.5):
            dout = self.new_input(list(out.shape), mesh, 0.3, 0.0, q.dtype.name)
            grads = fl.sdpa_bwd(dout, q, k, v, out, lse, **kw)
            args = f"{self.name(dout)}, {names}, {self.name(out)}, {self.name(lse)}"
            self.emit(f"grads = fl.sdpa_bwd({args}, {flags})")
            # |dP| <= Ev * 16 / (1 - p); dq, dk sum S or L of probabilities times it
            dp = ev * 16.0 / (1.0 - p)
            for i, grad in enumerate(grads):
                bound = (length * 4.0 / (1.0 - p)) if i == 2 else 2.0 * dp * 4.0 * max(s, length)
                last = self.register(grad, f"grads[{i}]", bound, mesh)
        return last

    def _small(self) -> int:
        """A batch or heads extent: 1, 2 or the mesh size."""
        return int(self.pick([1, 2, self.d]))
