"""Random pointwise fusions for tests/test_schedule_adversarial.py.

Pointwise fusions of rank 1-4 with extents 1..300 (primes, 1, powers of two and
their neighbours), broadcasts on every axis position, outputs of different ranks,
several outputs, a tensor used twice, scalar operands, int32 / float16 / bfloat16 /
float32 / float64, sharded or not on 1, 2 or 4 devices, a reduction now and then
(a kernel later pointwise kernels read by index), and a random `block_size` of the
schedule-pointwise pass. Everything derives from the seed; a case prints as a
runnable script.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from random_fusion import BINARY, RandomFusion, repro_script

import fuserlite as fl
from fuserlite.ir.types import ParallelType
from fuserlite.pipeline import default_pass_names
from fuserlite.schedule.shard import shard_axis

MAX_RANK = 4
MAX_ELEMENTS = 4096  # per tensor: keeps a case a few milliseconds
MAX_BOUND = 60.0  # |values| stay small so float16 neither overflows nor loses its tolerance
EXTENTS = (1, 1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 31, 32, 64, 97, 127, 128, 129, 251, 256, 257, 300)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
FLOAT_UNARY = ("neg", "abs", "relu", "exp", "tanh", "gelu")
INT_UNARY = ("neg", "abs", "relu")


def block_size_for(rng: np.random.Generator) -> int:
    """Mostly the default, often a random 1..1024 (non powers of two included)."""
    r = rng.random()
    if r < 0.3:
        return 128
    if r < 0.5:
        return int(rng.choice([1, 2, 3, 31, 32, 33, 127, 129, 255, 257, 1000, 1023, 1024]))
    return int(rng.integers(1, 1025))


@dataclass
class Case:
    seed: int
    fusion: fl.Fusion
    lines: list[str]
    block_size: int
    vectorize: bool = False
    dtypes: set = field(default_factory=set)

    @property
    def options(self) -> str:
        return f"block_size={self.block_size}" + (",vectorize=true" if self.vectorize else "")

    def script(self) -> str:
        names = f'fl.pipeline.default_pass_names(**{{"schedule-pointwise": "{self.options}"}})'
        return repro_script(
            self.lines, self.seed, f"fl.FusionExecutor(f, pipeline=fl.Pipeline({names}))"
        )


class Generator(RandomFusion):
    """One random pointwise fusion inside an active `fl.Fusion()`."""

    def __init__(self, seed: int, fusion: fl.Fusion) -> None:
        super().__init__(seed, fusion)
        self.mesh: fl.DeviceMesh | None = None
        self.dtypes: set[str] = set()

    def register(self, tv: fl.TensorView, expr: str, bound: float) -> fl.TensorView:
        self.dtypes.add(tv.dtype.name)
        return super().register(tv, expr, bound)

    # -- shapes and shardings -------------------------------------------------
    def base_shape(self, rank: int, d: int) -> list[int]:
        shape: list[int] = []
        for _ in range(rank):
            room = MAX_ELEMENTS // max(1, int(np.prod(shape)))
            options = [e for e in EXTENTS if e <= room]
            e = int(self.pick(options))
            if d > 1 and e > 1 and self.chance(0.5) and max(d, e - e % d) <= room:
                e = max(d, e - e % d)  # make it shardable
            shape.append(e)
        return shape

    def maybe_shard(self, tv: fl.TensorView, p_shard: float, p_bcast: float) -> None:
        mesh = self.mesh
        if mesh is None:
            return
        tv.set_device_mesh(mesh)
        self.lines.append(f"{self.name(tv)}.set_device_mesh(mesh)")
        if mesh.size == 1:
            return
        logical = tv.domain.logical
        shardable = [
            i for i, ax in enumerate(logical) if ax.is_iteration and ax.extent % mesh.size == 0
        ]
        bcast = [i for i, ax in enumerate(logical) if ax.is_broadcast]
        if shardable and self.chance(p_shard):
            i = int(self.pick(shardable))
            shard_axis(tv, i, mesh)
            self.lines.append(f"shard_axis({self.name(tv)}, {i}, mesh)")
        elif bcast and self.chance(p_bcast):  # seed 004: bDIDx
            i = int(self.pick(bcast))
            pos = tv.domain.loop_positions.index(i)
            tv.axis(pos).parallelize(ParallelType.DIDx)
            self.lines.append(f"{self.name(tv)}.axis({pos}).parallelize(fl.ParallelType.DIDx)")

    # -- ops --------------------------------------------------------------------
    def operand(self) -> fl.TensorView:
        return self.live[-1] if self.chance(0.5) else self.pick(self.live)

    @staticmethod
    def broadcastable(a: fl.TensorView, b: fl.TensorView) -> bool:
        xs, ys = a.data_axes(), b.data_axes()
        for x, y in zip(reversed(xs), reversed(ys)):
            if not (x.is_broadcast or y.is_broadcast or x.extent == y.extent):
                return False
        if max(len(xs), len(ys)) > MAX_RANK:
            return False
        # an outer product of two broadcasts must stay small too
        n = len(xs) - len(ys)
        longer, shorter = (xs, ys) if n >= 0 else (ys, xs)
        extents = [ax.extent for ax in longer[: abs(n)]]
        extents += [max(x.extent, y.extent) for x, y in zip(longer[abs(n) :], shorter)]
        return int(np.prod(extents)) <= 4 * MAX_ELEMENTS

    def op(self) -> fl.TensorView | None:
        kinds = ["unary"] * 3 + ["binary"] * 5 + ["scalar"] * 2 + ["bcast"] * 2 + ["set", "reduce"]
        kind = self.pick(kinds)
        return getattr(self, f"op_{kind}")()

    def op_unary(self):
        a = self.operand()
        b = self.bound[id(a)]
        names = FLOAT_UNARY if a.dtype.is_float else INT_UNARY
        name = self.pick([n for n in names if n != "exp" or b <= 3.0])
        nb = float(np.exp(b)) if name == "exp" else (1.0 if name == "tanh" else b)
        return self.register(getattr(fl, name)(a), f"fl.{name}({self.name(a)})", nb)

    def op_binary(self):
        a = self.operand()
        b = a if self.chance(0.2) else self.pick([t for t in self.live if self.broadcastable(a, t)])
        name = self.pick(BINARY)
        ba, bb = self.bound[id(a)], self.bound[id(b)]
        nb = ba * bb if name == "mul" else (ba + bb if name in ("add", "sub") else max(ba, bb))
        if nb > MAX_BOUND:
            name, nb = "maximum", max(ba, bb)
        out = getattr(fl, name)(a, b)
        return self.register(out, f"fl.{name}({self.name(a)}, {self.name(b)})", nb)

    def op_scalar(self):
        a = self.operand()
        name = self.pick(BINARY)
        if a.dtype.is_float or self.chance(0.2):  # a float scalar promotes int32 to float32
            s: float | int = float(self.pick([0.5, -1.5, 2.0, 3.0]))
        else:
            s = int(self.pick([-3, -1, 2, 3]))
        b = self.bound[id(a)]
        nb = b * abs(s) if name == "mul" else b + abs(s)
        if nb > MAX_BOUND:
            name, nb = "minimum", b + abs(s)
        left = self.chance(0.5)
        out = getattr(fl, name)(s, a) if left else getattr(fl, name)(a, s)
        args = f"{s!r}, {self.name(a)}" if left else f"{self.name(a)}, {s!r}"
        return self.register(out, f"fl.{name}({args})", nb)

    def op_bcast(self):
        a = self.operand()
        made = self.broadcast_of(a, MAX_RANK)
        return None if made is None else self.register(*made, self.bound[id(a)])

    def op_reduce(self):
        """A reduction kernel whose output later pointwise kernels read by index."""
        a = self.operand()
        rank = len(a.shape)
        axis = int(self.rng.integers(rank))
        keepdim = self.chance(0.5)
        if rank == 1 and not keepdim:
            return None
        n = a.shape[axis]
        name = "sum" if self.bound[id(a)] * n <= MAX_BOUND and self.chance(0.6) else "max"
        nb = self.bound[id(a)] * (n if name == "sum" else 1)
        out = getattr(fl, name)(a, axis, keepdim=keepdim)
        return self.register(out, f"fl.{name}({self.name(a)}, {axis}, keepdim={keepdim})", nb)

    def op_set(self):
        a = self.operand()
        return self.register(fl.set(a), f"fl.set({self.name(a)})", self.bound[id(a)])

    # -- whole case ---------------------------------------------------------------
    def build(self) -> None:
        rng = self.rng
        d = int(self.pick([1, 1, 2, 4, 4]))
        if d > 1 or self.chance(0.5):
            self.mesh = fl.DeviceMesh.for_num_devices(d)
            self.lines.append(f"mesh = fl.DeviceMesh.for_num_devices({d})")
        dtype = self.pick(DTYPES)
        rank = int(rng.integers(1, MAX_RANK + 1))
        base = self.base_shape(rank, d)
        for _ in range(int(rng.integers(1, 4))):
            r = rank if self.chance(0.6) else int(rng.integers(1, rank + 1))
            shape = [1 if self.chance(0.25) else e for e in base[rank - r :]]
            dt = dtype if self.chance(0.8) else self.pick(DTYPES)
            expr, bound = f"fl.tensor({shape}, dtype={dt!r})", 4.0 if dt != "int32" else 8.0
            tv = self.add_input(fl.tensor(shape, dtype=dt), expr, bound)
            self.maybe_shard(tv, 0.5, 0.3)
        for _ in range(int(rng.integers(1, 9))):
            out = self.op()
            if out is not None:
                self.maybe_shard(out, 0.3, 0.1)
        computed = [t for t in self.live if t not in self.inputs]
        if not computed:
            a = self.live[-1]
            computed = [self.register(fl.neg(a), f"fl.neg({self.name(a)})", self.bound[id(a)])]
            self.maybe_shard(computed[0], 0.3, 0.1)
        outputs = [computed[-1]] + [t for t in computed[:-1] if self.chance(0.3)]
        if self.chance(0.1):  # an input that is also an output
            outputs.append(self.pick(self.inputs))
        for t in outputs:
            self.add_output(t)


def build_case(seed: int) -> Case:
    with fl.Fusion() as fusion:
        g = Generator(seed, fusion)
        g.build()
    rng = np.random.default_rng([seed, 1])
    block_size = block_size_for(rng)
    return Case(seed, fusion, g.lines, block_size, bool(rng.random() < 0.25), g.dtypes)


def pipeline_for(block_size: int, vectorize: bool = False) -> fl.Pipeline:
    options = f"block_size={block_size}" + (",vectorize=true" if vectorize else "")
    return fl.Pipeline(default_pass_names(**{"schedule-pointwise": options}))
