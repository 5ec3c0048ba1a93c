"""Random sharded fusions for tests/test_differential.py.

Each case is a small random fusion built with the Python API (1-3 inputs of rank
1-3, float32 or bfloat16, a chain/DAG of 2-10 ops: pointwise, broadcast, reductions,
set, linear, matmul, expand, reshape, and the transformer ops of random_ops.py), on meshes of 1, 2 or 4 devices (one mesh, one device to many, many
to one device, two meshes) or, one case in five, an N-D mesh (random_nd.py), with random
shardings, written as a runnable script.
Everything derives from the seed (numpy's Generator).

KNOWN_BUGS lists known compiler bugs; while a flag is in it, the generator avoids
the pattern behind it, so the suite stays green. Remove a flag once the bug is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from random_fusion import BINARY, RandomFusion, fusion_script, repro_script
from random_nd import Shardings, is_nd_case
from random_nn_ops import NNOps
from random_ops import TransformerOps, bfloat16_share

import fuserlite as fl

# Known compiler bugs the generator steers around (flag -> what triggers it).
KNOWN_BUGS: dict[str, str] = {}

MAX_RANK = 4
MAX_BOUND = 100.0  # keep |values| small so float32 reordering stays within tolerance
UNARY = ("neg", "exp", "tanh", "relu", "abs", "gelu", "erf", "sigmoid", "silu", "sin", "cos")


@dataclass
class Case:
    """A generated fusion, the script that rebuilds it, and what the generator did."""

    seed: int
    fusion: fl.Fusion
    lines: list[str]
    sharded: bool  # some tensor was given a device-parallel axis
    meshes: set = field(default_factory=set)

    def build_script(self) -> str:
        return fusion_script(self.lines)

    def script(self) -> str:
        """A runnable repro of the whole case."""
        return repro_script(self.lines, self.seed)


class Generator(NNOps, TransformerOps, Shardings, RandomFusion):
    """Builds one random fusion inside an active `fl.Fusion()`."""

    def __init__(self, seed: int, fusion: fl.Fusion) -> None:
        super().__init__(seed, fusion)
        self.mesh_of: dict[int, fl.DeviceMesh | None] = {}
        self.sharded = False
        self.meshes: set = set()
        self.mesh_names: dict[fl.DeviceMesh, str] = {}
        self.d = 1
        self.in_mesh: fl.DeviceMesh | None = None

    def mesh_text(self, mesh: fl.DeviceMesh) -> str:
        if mesh not in self.mesh_names:
            name = f"mesh{len(self.mesh_names)}"
            self.mesh_names[mesh] = name
            self.emit(f"{name} = fl.DeviceMesh({mesh.tolist()})")
        return self.mesh_names[mesh]

    def register(self, tv: fl.TensorView, expr: str, bound: float, mesh=None) -> fl.TensorView:
        self.mesh_of[id(tv)] = mesh
        return super().register(tv, expr, bound)

    def set_mesh(self, tv: fl.TensorView, mesh: fl.DeviceMesh) -> None:
        tv.set_device_mesh(mesh)
        self.mesh_of[id(tv)] = mesh
        self.meshes.add(mesh)
        self.emit(f"{self.name(tv)}.set_device_mesh({self.mesh_text(mesh)})")

    def extent(self) -> int:
        """1..8, mostly multiples of the mesh size (the others shard unevenly)."""
        d = self.d
        if self.chance(0.6):
            return int(self.pick([m for m in range(d, 9, d)]))
        return int(self.rng.integers(1, 9))

    # -- inputs -------------------------------------------------------------
    def new_input(
        self, shape: list[int], mesh, p_shard=0.4, p_bcast=0.15, dtype: str | None = None
    ) -> fl.TensorView:
        """A new input (float32, bfloat16 one time in six, or `dtype`) on `mesh`."""
        dtype = dtype or bfloat16_share(self.rng)
        tv = self.add_input(fl.tensor(shape, dtype), f"fl.tensor({shape}, {dtype!r})", 4.0)
        if mesh is not None:
            self.set_mesh(tv, mesh)
        self.maybe_shard(tv, p_shard, p_bcast)
        return tv

    # -- ops ----------------------------------------------------------------
    def operand(self) -> fl.TensorView:
        """Mostly the most recent tensors (chains), sometimes any (DAGs)."""
        if self.chance(0.6):
            return self.live[-1]
        return self.pick(self.live)

    def producer_mesh(self, *tvs):
        return next((self.mesh_of[id(t)] for t in tvs if self.mesh_of[id(t)] is not None), None)

    def partner(self, a: fl.TensorView) -> fl.TensorView | None:
        """A live tensor that broadcasts with `a` (None when `a` has over MAX_RANK axes)."""
        others = [t for t in self.live if self.broadcastable(a, t)]
        return self.pick(others) if others else None

    @staticmethod
    def broadcastable(a: fl.TensorView, b: fl.TensorView) -> bool:
        xs = [ax for ax in a.domain.logical if not ax.is_reduction]
        ys = [ax for ax in b.domain.logical if not ax.is_reduction]
        for x, y in zip(reversed(xs), reversed(ys)):
            if not (x.is_broadcast or y.is_broadcast or x.extent == y.extent):
                return False
        return max(len(xs), len(ys)) <= MAX_RANK

    def op(self) -> fl.TensorView | None:
        kind = self.pick(
            ["unary"] * 4
            + ["binary"] * 5
            + ["scalar"] * 2
            + ["div"] * 2
            + ["broadcast"] * 2
            + ["reduce"] * 3
            + ["set"] * 2
            + ["linear", "matmul"]
            + ["expand"] * 2
            + ["reshape"] * 2
            + ["positive", "cast", "cast", "permute", "permute", "where", "squeeze", "unsqueeze"]
            + ["select", "slice", "slice", "cat", "flatten", "batched", "take"]
            + ["compare", "random", "norm", "softmax", "var_mean", "backward", "attention"]
            + ["iota", "power", "grouped", "gather"]
        )
        return getattr(self, f"op_{kind}")()

    def op_unary(self):
        a = self.operand()
        b = self.bound[id(a)]
        name = self.pick([u for u in UNARY if u != "exp" or b <= 4.0])
        call = f"fl.{name}({self.name(a)})"
        if name == "gelu" and self.chance(0.5):  # exact: mul, add and erf
            out, call = fl.gelu(a, approximate="none"), call[:-1] + ', approximate="none")'
        else:
            out = getattr(fl, name)(a)
        bounds = {"tanh": 1.0, "sin": 1.0, "cos": 1.0, "erf": min(1.0, 1.13 * b)}
        bound = float(np.exp(b)) if name == "exp" else bounds.get(name, b)
        return self.register(out, call, bound, self.producer_mesh(a))

    def op_binary(self):
        a = self.operand()
        b = self.partner(a)
        if b is None:
            return None
        name = self.pick(list(BINARY))
        ba, bb = self.bound[id(a)], self.bound[id(b)]
        nb = ba * bb if name == "mul" else (ba + bb if name in ("add", "sub") else max(ba, bb))
        if nb > MAX_BOUND:
            name, nb = "maximum", max(ba, bb)
        out = getattr(fl, name)(a, b)
        expr = f"fl.{name}({self.name(a)}, {self.name(b)})"
        return self.register(out, expr, nb, self.producer_mesh(a, b))

    def op_scalar(self):
        a = self.operand()
        name = self.pick(list(BINARY))
        s = float(self.pick([0.5, -1.5, 2.0, 3.0]))
        left = self.chance(0.5)
        out = getattr(fl, name)(s, a) if left else getattr(fl, name)(a, s)
        args = f"{s}, {self.name(a)}" if left else f"{self.name(a)}, {s}"
        b = self.bound[id(a)]
        nb = b * abs(s) if name == "mul" else b + abs(s)
        return self.register(out, f"fl.{name}({args})", nb, self.producer_mesh(a))

    def op_div(self):
        a = self.operand()
        b = self.partner(a)
        if b is None:
            return None
        if self.bound[id(b)] > 10.0:
            b = a
        out = fl.div(a, fl.add(fl.mul(b, b), 1.0))
        expr = f"fl.div({self.name(a)}, fl.add(fl.mul({self.name(b)}, {self.name(b)}), 1.0))"
        return self.register(out, expr, self.bound[id(a)], self.producer_mesh(a, b))

    def op_broadcast(self):
        a = self.operand()
        made = self.broadcast_of(a, MAX_RANK)
        if made is None:
            return None
        return self.register(*made, self.bound[id(a)], self.producer_mesh(a))

    def op_reduce(self):
        a = self.operand()
        rank = len(a.shape)
        if rank == 0:
            return None
        if self.chance(0.15):
            axes = list(range(rank))
        else:
            k = 1 if rank == 1 or self.chance(0.7) else 2
            axes = sorted(int(i) for i in self.rng.choice(rank, size=k, replace=False))
        keepdim = self.chance(0.4)
        name = self.pick(["sum", "max", "min"])
        arg = axes[0] if len(axes) == 1 else axes
        n = int(np.prod([a.shape[i] for i in axes]))
        nb = self.bound[id(a)] * (n if name == "sum" else 1)
        if nb > MAX_BOUND:
            return None
        out = getattr(fl, name)(a, arg, keepdim=keepdim)
        expr = f"fl.{name}({self.name(a)}, {arg}, keepdim={keepdim})"
        return self.register(out, expr, nb, self.producer_mesh(a))

    def op_set(self):
        a = self.operand()
        out = fl.set(a)
        return self.register(
            out, f"fl.set({self.name(a)})", self.bound[id(a)], self.producer_mesh(a)
        )

    def _weight(self, shape: list[int], a: fl.TensorView, shard_p: float) -> fl.TensorView:
        mesh = self.producer_mesh(a)
        return self.new_input(shape, mesh, p_shard=shard_p, p_bcast=0.0)

    def op_linear(self):
        a = self.operand()
        if len(a.shape) < 1 or len(self.inputs) >= 5 or self.bound[id(a)] > 10:
            return None
        k, n = a.shape[-1], self.extent()
        w = self._weight([n, k], a, 0.5)
        bias = self._weight([n], a, 0.4) if self.chance(0.4) else None
        out = fl.linear(a, w, bias)
        args = f"{self.name(a)}, {self.name(w)}" + (f", {self.name(bias)}" if bias else "")
        nb = self.bound[id(a)] * 4.0 * k + (4.0 if bias else 0.0)
        return self.register(out, f"fl.linear({args})", nb, self.producer_mesh(a, w))

    def op_matmul(self):
        a = self.operand()
        if len(a.shape) < 1 or len(self.inputs) >= 5 or self.bound[id(a)] > 10:
            return None
        k = a.shape[-1]
        square = len(a.shape) >= 2 and a.shape[-2] == k
        if square and self.bound[id(a)] ** 2 * k <= MAX_BOUND and self.chance(0.5):
            b, nb = a, self.bound[id(a)] ** 2 * k  # matmul(x, x): one tensor read two ways
        else:
            b, nb = self._weight([k, self.extent()], a, 0.5), self.bound[id(a)] * 4.0 * k
        out = fl.matmul(a, b)
        expr = f"fl.matmul({self.name(a)}, {self.name(b)})"
        return self.register(out, expr, nb, self.producer_mesh(a, b))

    def op_expand(self):
        cands = [
            t
            for t in self.live
            if any(ax.is_broadcast for ax in t.domain.logical if not ax.is_reduction)
        ]
        if not cands:
            return None
        a = self.pick(cands)
        data = [ax for ax in a.domain.logical if not ax.is_reduction]
        shape = [-1] * len(data)
        for i, ax in enumerate(data):
            if ax.is_broadcast and (self.chance(0.6) or all(s == -1 for s in shape)):
                shape[i] = int(self.pick([m for m in range(self.d, 9, self.d)] + [3]))
        out = fl.expand(a, shape)
        expr = f"fl.expand({self.name(a)}, {shape})"
        return self.register(out, expr, self.bound[id(a)], self.producer_mesh(a))

    def op_reshape(self):
        a = self.operand()
        shape = list(a.shape)
        options = ["flatten"] if len(shape) > 1 else []
        if len(shape) >= 2:
            options.append("merge")
        if any(e in (4, 6, 8) for e in shape) and len(shape) < MAX_RANK:
            options.append("split")
        if not options:
            return None
        how = self.pick(options)
        if how == "flatten":
            new = [-1]
        elif how == "merge":
            i = int(self.rng.integers(len(shape) - 1))
            new = shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2 :]
        else:
            i = int(self.pick([j for j, e in enumerate(shape) if e in (4, 6, 8)]))
            f = 2 if self.chance(0.5) else shape[i] // 2
            new = shape[:i] + [f, shape[i] // f] + shape[i + 1 :]
        out = fl.reshape(a, new)
        expr = f"fl.reshape({self.name(a)}, {new})"
        return self.register(out, expr, self.bound[id(a)], self.producer_mesh(a))

    # -- whole case ---------------------------------------------------------
    def build(self, nd: bool = False) -> None:
        """A 1-D case (`nd`: one on an N-D mesh, Shardings.build_nd)."""
        if nd:
            return self.build_nd()
        self.d = d = int(self.pick([1, 2, 4]))
        mode = self.pick(
            ["single"] * 6 + ["none", "one_to_many", "one_to_many", "many_to_one", "two"]
        )
        primary = fl.DeviceMesh.for_num_devices(d)
        if mode == "none":
            in_mesh, other = None, None
        elif mode == "one_to_many" and d > 1:
            in_mesh, other = fl.DeviceMesh([0]), primary
        elif mode == "many_to_one" and d > 1:
            in_mesh, other = primary, fl.DeviceMesh([self.pick([0, d])])
        elif mode == "two" and d > 1:
            in_mesh, other = primary, fl.DeviceMesh(range(d, 2 * d))
        else:
            in_mesh, other = primary, None
        self.in_mesh = in_mesh
        self.build_on(primary, other, mode)

    def build_on(self, primary: fl.DeviceMesh, other: fl.DeviceMesh | None, mode: str) -> None:
        """Inputs on self.in_mesh, ops, outputs; `other`: the second mesh of the mode."""
        rng, in_mesh = self.rng, self.in_mesh
        rank = int(rng.integers(1, 4))
        base = [self.extent() for _ in range(rank)]
        for _ in range(int(rng.integers(1, 4))):
            r = rank if self.chance(0.7) else int(rng.integers(1, rank + 1))
            shape = [1 if self.chance(0.2) else e for e in base[rank - r :]]
            meshless = self.chance(0.1) and "mesh-not-propagated-to-siblings" not in KNOWN_BUGS
            self.new_input(shape, None if meshless else in_mesh)
        n_ops = int(rng.integers(2, 11))
        for _ in range(n_ops):
            out = self.op()
            if out is None:
                continue
            if other is not None and self.chance(0.25):
                self.set_mesh(out, other)
            elif mode == "single" and self.chance(0.1):
                self.set_mesh(out, primary)
            if not (
                out.definition.op_name == "reshape"
                and "reshape-sharding-on-indivisible-group" in KNOWN_BUGS
            ):
                self.maybe_shard(out, 0.25, 0.1)
        computed = [t for t in self.live if t not in self.inputs]
        if not computed:
            a = self.live[-1]
            computed = [
                self.register(fl.neg(a), f"fl.neg({self.name(a)})", 4.0, self.mesh_of[id(a)])
            ]
        outputs = [computed[-1]] + [t for t in computed[:-1] if self.chance(0.2)]
        for t in outputs:
            self.add_output(t)
        if "dead-input-on-other-mesh" in KNOWN_BUGS:
            live = {id(t) for t in self.fusion.tensors()}
            if any(t.uses and id(t) not in live for t in self.inputs):
                for t in computed:
                    if not t.uses and id(t) not in live:
                        self.add_output(t)


def build_case(seed: int) -> Case:
    with fl.Fusion() as fusion:
        g = Generator(seed, fusion)
        g.build(nd=is_nd_case(seed))
    return Case(seed, fusion, g.lines, g.sharded, g.meshes)
