"""The public boundary: every function of fuserlite/__init__.py checks its arguments.

The table of bad calls: each raises a FuserliteError subclass whose message names
the argument and what was given. The coercions that used to pass silently and the
spellings numpy/torch users write are tests/test_api_spellings.py.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.schedule.shard import shard_axis

ROOT = Path(__file__).resolve().parents[1]


class Env:
    """A small fusion to call the API on; the executor is built only when a row needs it."""

    def __init__(self) -> None:
        self.fusion = fl.Fusion()
        with self.fusion:
            self.mesh = fl.DeviceMesh([0, 1])
            self.x = fl.tensor([4, 6])
            self.i = fl.tensor([4], "int32")
            self.w = fl.tensor([5, 6])
            self.w3 = fl.tensor([2, 5, 6])
            self.b = fl.tensor([5])
            self.y = fl.neg(self.x)
        self.fusion.add_input(self.x)
        self.fusion.add_output(self.y)

    def local(self, fn: Callable) -> object:
        """fn(x's local value) inside a shard_map over x's rows (each device a [2, 6])."""
        spec = [(fl.ParallelType.DIDx,)]
        return fl.shard_map(lambda s: fn(s) or s, self.mesh, spec, spec)(self.x)

    @functools.cached_property
    def ex(self) -> fl.FusionExecutor:
        return fl.FusionExecutor(self.fusion)

    @property
    def inputs(self) -> list[np.ndarray]:
        return [np.ones((4, 6), np.float32)]


@dataclass(frozen=True)
class Bad:
    id: str
    call: Callable[[Env], object]
    expect: tuple[str, ...]  # fragments the message must contain: the argument, the value


def bad(id: str, call: Callable[[Env], object], *expect: str) -> Bad:
    return Bad(id, call, expect)


class Ragged:
    """An object numpy cannot turn into an array of one dtype and shape."""


BAD = [
    # -- fl.tensor -------------------------------------------------------------------
    bad("tensor str shape", lambda e: fl.tensor("12"), "shape", "'12'"),
    bad("tensor float extent", lambda e: fl.tensor([2.5]), "shape", "2.5"),
    bad("tensor integral float", lambda e: fl.tensor([2.0]), "shape", "2.0"),
    bad("tensor bool extent", lambda e: fl.tensor([True]), "shape", "True"),
    bad("tensor zero extent", lambda e: fl.tensor([2, 0]), "shape", "item 1 is 0"),
    bad("tensor negative extent", lambda e: fl.tensor([-1]), "shape", "-1"),
    bad("tensor None shape", lambda e: fl.tensor(None), "shape", "None"),
    bad("tensor nested shape", lambda e: fl.tensor([[2, 3]]), "shape", "[2, 3]"),
    bad("tensor set shape", lambda e: fl.tensor({2, 3}), "shape", "set"),
    bad("tensor 2-D array shape", lambda e: fl.tensor(np.ones((2, 2), int)), "shape", "array"),
    bad("tensor inf shape", lambda e: fl.tensor(float("inf")), "shape", "inf"),
    bad("tensor huge extent", lambda e: fl.tensor([2**63]), "shape", "9223372036854775808"),
    bad("tensor dtype value", lambda e: fl.tensor([2], np.int64(3)), "dtype", "np.int64(3)"),
    bad("tensor 65 axes", lambda e: fl.tensor([1] * 65), "shape", "65 items", "at most 64 axes"),
    bad("tensor 10**9 axes", lambda e: fl.tensor(range(10**9)), "shape", "1000000000 items"),
    bad("tensor dtype None", lambda e: fl.tensor([2], None), "dtype", "None"),
    bad("tensor dtype complex", lambda e: fl.tensor([2], "complex64"), "dtype", "complex64"),
    bad("tensor dtype int", lambda e: fl.tensor([2], 5), "dtype", "5"),
    bad("tensor dtype numpy complex", lambda e: fl.tensor([2], np.complex64), "dtype", "complex"),
    bad("tensor contiguous str", lambda e: fl.tensor([2], contiguous="yes"), "contiguous", "yes"),
    bad("tensor contiguous int", lambda e: fl.tensor([2], contiguous=0), "contiguous", "0"),
    bad("tensor fusion int", lambda e: fl.tensor([2], fusion=5), "fusion", "5"),
    bad("tensor name digit", lambda e: fl.tensor([2], name="1x"), "name", "'1x'"),
    bad("tensor name space", lambda e: fl.tensor([2], name="w 1"), "name", "'w 1'"),
    bad("tensor name int", lambda e: fl.tensor([2], name=5), "name", "5"),
    # -- unary ops -------------------------------------------------------------------
    bad("neg int", lambda e: fl.neg(5), "neg", "x must be a TensorView", "5"),
    bad("exp str", lambda e: fl.exp("x"), "exp", "x must be", "'x'"),
    bad("tanh None", lambda e: fl.tanh(None), "tanh", "x must be", "None"),
    bad("relu list", lambda e: fl.relu([1]), "relu", "x must be", "[1]"),
    bad("abs array", lambda e: fl.abs(np.ones(2)), "abs", "x must be", "ndarray"),
    bad("gelu axis", lambda e: fl.gelu(e.x.axis(0)), "gelu", "x must be", "Axis"),
    bad("sqrt fusion", lambda e: fl.sqrt(e.fusion), "sqrt", "x must be", "Fusion"),
    bad("log float", lambda e: fl.log(3.0), "log", "x must be", "3.0"),
    bad("sin str", lambda e: fl.sin("x"), "sin", "x must be", "'x'"),
    bad("cos None", lambda e: fl.cos(None), "cos", "x must be", "None"),
    bad("rsqrt int", lambda e: fl.rsqrt(3), "rsqrt", "x must be", "3"),
    bad("pow str exponent", lambda e: fl.pow(e.x, "2"), "pow", "'2'"),
    bad("pow two numbers", lambda e: fl.pow(2, 3), "pow", "one must be a tensor"),
    bad("grouped_mm float offsets", lambda e: fl.grouped_mm(e.x, e.w3, e.b), "offsets", "int32"),
    bad("grouped_mm groups", lambda e: fl.grouped_mm(e.w, e.w3, e.i), "2 groups", "offsets"),
    bad("sigmoid tuple", lambda e: fl.sigmoid((e.x,)), "sigmoid", "x must be", "tuple"),
    bad(
        "cast unknown dtype",
        lambda e: fl.cast(e.x, "float8"),
        "cast",
        "T0[4, 6]",
        "'float8'",
        "bfloat16",
    ),
    bad("permute repeat", lambda e: fl.permute(e.x, [0, 0]), "permute", "[0, 0]", "T0[4, 6]"),
    bad("permute short", lambda e: fl.permute(e.x, [1]), "permute", "not a permutation", "2 axes"),
    bad("permute range", lambda e: fl.permute(e.x, [0, 2]), "permute", "[0, 2]", "0..1"),
    bad("transpose range", lambda e: fl.transpose(e.x, 0, 5), "transpose", "dim1 5", "T0[4, 6]"),
    bad("where float cond", lambda e: fl.where(e.x, e.x, 0.0), "where", "cond T0[4, 6]", "bool"),
    bad(
        "where shapes",
        lambda e: fl.where(fl.tensor([3], "bool"), e.x, 0.0),
        "where",
        "[3]",
        "[4, 6]",
    ),
    bad(
        "where two scalars too big",
        lambda e: fl.where(fl.tensor([2], "bool"), 1, 2**70),
        "where",
        "does not fit",
    ),
    bad("silu int", lambda e: fl.silu(3), "silu", "x must be", "3"),
    bad("squeeze non-1", lambda e: fl.squeeze(e.x, 0), "squeeze", "axis 0 of T0[4, 6]", "extent 4"),
    bad("select index", lambda e: fl.select(e.x, 1, 6), "select", "index 6", "T0[4, 6]"),
    bad("select axis", lambda e: fl.select(e.x, 2, 0), "select", "axis 2", "out of range"),
    bad(
        "slice range",
        lambda e: fl.slice(e.x, [0, 2], [5, 6]),
        "slice",
        "[0:5] on axis 0",
        "T0[4, 6]",
    ),
    bad(
        "slice empty", lambda e: fl.slice(e.x, [0, 3], [4, 3]), "slice", "[3:3] on axis 1", "empty"
    ),
    bad(
        "slice step 0", lambda e: fl.slice(e.x, [0, 0], [4, 6], [1, 0]), "slice", "step 0", "axis 1"
    ),
    bad("slice arity", lambda e: fl.slice(e.x, [0], [4]), "slice", "starts has 1", "2 axes"),
    bad("cat shapes", lambda e: fl.cat([e.x, e.w], 1), "cat", "T2[5, 6]", "T0[4, 6]", "axis 1"),
    bad("cat empty", lambda e: fl.cat([], 0), "cat", "tensors must be"),
    bad("cat axis", lambda e: fl.cat([e.x, e.x], 3), "cat", "axis 3", "out of range"),
    bad("unsqueeze dim", lambda e: fl.unsqueeze(e.x, 4), "unsqueeze", "dim 4", "-3..2"),
    bad("flatten order", lambda e: fl.flatten(e.x, 1, 0), "flatten", "start_dim 1", "end_dim 0"),
    bad("split sizes", lambda e: fl.split(e.x, [1, 2]), "split", "add up to 3", "has 4"),
    bad("chunk zero", lambda e: fl.chunk(e.x, 0), "chunk", "chunks", "0"),
    bad("cast list", lambda e: fl.cast([e.x], "float32"), "cast", "x must be", "[<TensorView"),
    bad("neg bool tensor", lambda e: fl.neg(fl.tensor([2], "bool")), "neg", "bool"),
    # -- composites ------------------------------------------------------------------
    bad("softmax dim", lambda e: fl.softmax(e.x, 5), "softmax", "dim 5 is out of range"),
    bad("log_softmax str", lambda e: fl.log_softmax(e.x, "0"), "log_softmax", "dim", "'0'"),
    bad("var_mean no dims", lambda e: fl.var_mean(e.x, []), "var_mean", "at least one"),
    bad("layer_norm shape", lambda e: fl.layer_norm(e.x, [3]), "layer_norm", "normalized_shape"),
    bad("rms_norm eps", lambda e: fl.rms_norm(e.x, [6], eps="x"), "eps", "'x'"),
    bad(
        "layer_norm_backward dy",
        lambda e: fl.layer_norm_backward(fl.tensor([3]), e.x, [6]),
        "layer_norm_backward",
        "must have the shape of x",
    ),
    bad("gelu_backward int", lambda e: fl.gelu_backward(e.x, 1), "gelu_backward", "x must be"),
    bad("lt str", lambda e: fl.lt(e.x, "1"), "lt", "b must be", "'1'"),
    bad("rand_like int", lambda e: fl.rand_like(e.i), "rand_like", "int32", "float tensor"),
    bad("rand_like seed", lambda e: fl.rand_like(e.x, seed=1.5), "rand_like", "seed", "1.5"),
    bad("rand int", lambda e: fl.rand([4], "int32"), "rand", "int32", "float32"),
    bad("rand zero extent", lambda e: fl.rand([4, 0]), "rand", "[4, 0]", "1.."),
    bad("rand seed", lambda e: fl.rand([4], seed=-1), "rand", "seed", "-1"),
    bad("uniform shape text", lambda e: fl.uniform("4"), "rand_like", "'4'"),
    bad("iota n", lambda e: fl.iota(0), "iota", "n (the number of values)", "0"),
    bad("iota n float", lambda e: fl.iota(2.5), "iota", "n (the number of values)", "2.5"),
    bad("iota bool", lambda e: fl.iota(4, "bool"), "iota", "bool", "integer or a float"),
    bad("iota dtype", lambda e: fl.iota(4, "int8"), "dtype", "int8"),
    bad("iota int start", lambda e: fl.iota(4, "int32", 0.5), "iota", "start", "0.5"),
    bad("iota step nan", lambda e: fl.iota(4, "float32", 0, float("nan")), "iota", "step", "nan"),
    bad("iota tensor start", lambda e: fl.iota(4, "int64", e.x), "iota", "start", "T0"),
    bad(
        "iota range",
        lambda e: fl.iota(2**20, "int32", 0, 2**12),
        "iota",
        "do not fit int32",
        "use int64",
    ),
    bad(
        "iota start range", lambda e: fl.iota(2, "int32", 2**31, -1), "iota", "2147483648", "int32"
    ),
    bad("uniform low", lambda e: fl.uniform(e.x, low="0"), "uniform", "low", "'0'"),
    bad("dropout p", lambda e: fl.dropout(e.x, -0.5), "dropout", "[0, 1]", "-0.5"),
    bad("sdpa str", lambda e: fl.sdpa(e.x, e.x, "v"), "sdpa", "value must be", "'v'"),
    bad("sdpa causal", lambda e: fl.sdpa(e.x, e.x, e.x, is_causal="yes"), "is_causal", "'yes'"),
    bad("sdpa_bwd shapes", lambda e: fl.sdpa_bwd(e.x, e.x, e.x, e.x, e.x, e.x), "sdpa_bwd"),
    bad("tanh_backward y", lambda e: fl.tanh_backward(e.x, None), "tanh_backward", "y must be"),
    # -- binary ops ------------------------------------------------------------------
    bad("add str", lambda e: fl.add(e.x, "1"), "add", "b must be", "'1'"),
    bad("sub str first", lambda e: fl.sub("1", e.x), "sub", "a must be", "'1'"),
    bad("mul None", lambda e: fl.mul(e.x, None), "mul", "b must be", "None"),
    bad("div complex", lambda e: fl.div(e.x, 1j), "div", "b must be", "1j"),
    bad("maximum list", lambda e: fl.maximum(e.x, [1]), "maximum", "b must be", "[1]"),
    bad("minimum array", lambda e: fl.minimum(e.x, np.ones(2)), "minimum", "b must be"),
    bad("add 0-d array", lambda e: fl.add(e.x, np.array(1.0)), "add", "b must be", "array"),
    bad("add two numbers", lambda e: fl.add(1, 2), "add", "a and b are both numbers"),
    bad("add int overflow", lambda e: fl.add(e.i, 2**40), "add", "1099511627776", "int32"),
    bad("array times tensor", lambda e: np.ones(2) * e.x, "mul", "a must be", "ndarray"),
    bad("add shapes", lambda e: fl.add(e.x, e.b), "add", "T0[4, 6]", "T4[5]"),
    bad("operator str", lambda e: e.x + "1", "add", "b must be", "'1'"),
    # -- set, broadcast ----------------------------------------------------------------
    bad("set int", lambda e: fl.set(5), "set", "x must be", "5"),
    bad("set cache_op", lambda e: fl.set(e.x, cache_op="Bogus"), "cache_op", "'Bogus'"),
    bad("set cache_op int", lambda e: fl.set(e.x, cache_op=1), "cache_op", "1"),
    bad("broadcast str flags", lambda e: fl.broadcast(e.b, "ab"), "flags", "'ab'"),
    bad("broadcast int flags", lambda e: fl.broadcast(e.b, [1, 0]), "flags", "[1, 0]"),
    bad("broadcast None flags", lambda e: fl.broadcast(e.b, None), "flags", "None"),
    bad("broadcast x", lambda e: fl.broadcast(5, [True]), "broadcast", "x must be", "5"),
    bad("broadcast count", lambda e: fl.broadcast(e.b, [True, True]), "broadcast", "flags"),
    bad("broadcast rank", lambda e: fl.broadcast(e.b, [True] * 64 + [False]), "flags", "65 items"),
    # -- reductions ------------------------------------------------------------------------
    bad("sum str axes", lambda e: fl.sum(e.x, "0"), "sum", "axes", "'0'"),
    bad("sum float axis", lambda e: fl.sum(e.x, 1.0), "sum", "axes", "1.0"),
    bad("sum bool axis", lambda e: fl.sum(e.x, True), "sum", "axes", "True"),
    bad("sum nested axes", lambda e: fl.sum(e.x, [[0]]), "sum", "axes", "[0]"),
    bad("sum axis twice", lambda e: fl.sum(e.x, [0, 0]), "sum", "axis listed twice"),
    bad("sum axis range", lambda e: fl.sum(e.x, 5), "sum", "axis 5 is out of range"),
    bad("sum keepdim str", lambda e: fl.sum(e.x, 0, keepdim="no"), "keepdim", "'no'"),
    bad("sum keepdim int", lambda e: fl.sum(e.x, 0, keepdim=1), "keepdim", "1"),
    bad("sum None", lambda e: fl.sum(None), "sum", "x must be", "None"),
    bad("max str axes", lambda e: fl.max(e.x, "0"), "max", "axes", "'0'"),
    bad("max keepdim None", lambda e: fl.max(e.x, 0, keepdim=None), "keepdim", "None"),
    bad("max of two tensors", lambda e: fl.max(e.x, e.x), "maximum"),
    bad("max float axis", lambda e: fl.max(e.x, 2.5), "max", "axes", "2.5"),
    # -- expand, reshape ------------------------------------------------------------------------
    bad("expand str shape", lambda e: fl.expand(e.x, "46"), "expand", "shape", "'46'"),
    bad("expand float shape", lambda e: fl.expand(e.x, [4.0, 6]), "expand", "shape", "4.0"),
    bad("expand None", lambda e: fl.expand(e.x, None), "expand", "shape", "None"),
    bad("expand x", lambda e: fl.expand(5, [4]), "expand", "x must be", "5"),
    bad("expand rank", lambda e: fl.expand(e.x, [4]), "expand", "shape [4] has 1"),
    bad("expand iteration axis", lambda e: fl.expand(e.x, [8, 6]), "expand", "axis 0"),
    bad("reshape str", lambda e: fl.reshape(e.x, "24"), "reshape", "shape", "'24'"),
    bad("reshape float", lambda e: fl.reshape(e.x, [2.5, 2]), "reshape", "shape", "2.5"),
    bad("reshape None", lambda e: fl.reshape(e.x, None), "reshape", "shape", "None"),
    bad("reshape count", lambda e: fl.reshape(e.x, [5, 5]), "reshape", "[5, 5]"),
    bad("reshape x", lambda e: fl.reshape("x", [24]), "reshape", "x must be", "'x'"),
    bad("reshape rank", lambda e: fl.reshape(e.b, [1] * 64 + [5]), "reshape", "shape", "65 items"),
    bad("permute dims", lambda e: fl.permute(e.x, [0, 0]), "permute", "dims [0, 0]", "once"),
    bad("permute str", lambda e: fl.permute(e.x, "10"), "permute", "dims", "'10'"),
    bad("take row", lambda e: fl.take(e.x, [4]), "take", "[4]", "0..3"),
    bad("take none", lambda e: fl.take(e.x, None), "take", "indices", "None"),
    # -- matmul, linear --------------------------------------------------------------------------
    bad("matmul b int", lambda e: fl.matmul(e.x, 5), "matmul", "b must be", "5"),
    bad("matmul a int", lambda e: fl.matmul(5, e.x), "matmul", "a must be", "5"),
    bad("matmul batched b", lambda e: fl.matmul(e.x, e.w3), "last axis has 6", "axis 1 of b"),
    bad("matmul 1-D b", lambda e: fl.matmul(e.x, e.b), "matmul", "b must be [..., k, n]", "1 axes"),
    bad("matmul k", lambda e: fl.matmul(e.x, e.w), "matmul", "last axis has 6", "has 5"),
    bad("linear weight int", lambda e: fl.linear(e.x, 5), "linear", "weight must be", "5"),
    bad("linear bias int", lambda e: fl.linear(e.x, e.w, 5), "linear", "bias must be", "5"),
    bad("linear 1-D weight", lambda e: fl.linear(e.x, e.b), "weight must be [..., n, k]", "1 axes"),
    bad("linear batched bias", lambda e: fl.linear(e.x, e.w3, e.b), "bias", "[2, 5]"),
    bad("linear bias shape", lambda e: fl.linear(e.x, e.w, e.x), "bias", "[5]"),
    bad("linear k", lambda e: fl.linear(e.x, fl.tensor([5, 4])), "linear", "has 6", "has 4"),
    # -- DeviceMesh ----------------------------------------------------------------------------------
    bad("mesh ragged", lambda e: fl.DeviceMesh([[0, 1], [2]]), "rows", "different lengths"),
    bad("mesh 2-D twice", lambda e: fl.DeviceMesh(np.zeros((2, 2), int)), "device twice (0)"),
    bad("mesh 4-D", lambda e: fl.DeviceMesh(np.zeros((1, 1, 1, 1), int)), "at most 3"),
    bad("mesh mixed rows", lambda e: fl.DeviceMesh([[0, 1], 2]), "devices", "[0, 1]"),
    bad("mesh empty rows", lambda e: fl.DeviceMesh([[], []]), "at least one device"),
    bad("mesh float id", lambda e: fl.DeviceMesh([1.5]), "devices", "1.5"),
    bad("mesh str", lambda e: fl.DeviceMesh("01"), "devices", "'01'"),
    bad("mesh int", lambda e: fl.DeviceMesh(5), "devices", "5"),
    bad("mesh None", lambda e: fl.DeviceMesh(None), "devices", "None"),
    bad("mesh bool id", lambda e: fl.DeviceMesh([True]), "devices", "True"),
    bad("mesh set", lambda e: fl.DeviceMesh({0, 1}), "devices", "set"),
    bad("mesh twice", lambda e: fl.DeviceMesh([0, 0]), "DeviceMesh{0 0}", "twice"),
    bad("mesh negative", lambda e: fl.DeviceMesh([-1]), "devices", "-1"),
    bad("mesh empty", lambda e: fl.DeviceMesh([]), "DeviceMesh", "at least one device"),
    bad("mesh too many", lambda e: fl.DeviceMesh(range(10**9)), "1000000000 devices", "4096"),
    bad("mesh id too big", lambda e: fl.DeviceMesh([0, 10**9]), "devices", "1000000000"),
    bad("mesh size zero", lambda e: fl.DeviceMesh.for_num_devices(0), "number of devices", "0"),
    bad("mesh size float", lambda e: fl.DeviceMesh.for_num_devices(2.0), "number of dev", "2.0"),
    bad("mesh size str", lambda e: fl.DeviceMesh.for_num_devices("2"), "number of dev", "'2'"),
    bad("mesh size huge", lambda e: fl.DeviceMesh.for_num_devices(10**9), "1..4096"),
    # -- Fusion, TensorView and IterDomain methods -------------------------------------------------
    bad("add_input int", lambda e: e.fusion.add_input(5), "add_input", "tv", "5"),
    bad("add_output str", lambda e: e.fusion.add_output("x"), "add_output", "tv", "'x'"),
    bad("add_input computed", lambda e: e.fusion.add_input(e.y), "add_input", "T5"),
    bad("add_input twice", lambda e: e.fusion.add_input(e.x), "add_input", "already"),
    bad("axis str", lambda e: e.x.axis("0"), "axis", "i must be", "'0'"),
    bad("axis float", lambda e: e.x.axis(1.0), "axis", "1.0"),
    bad("axis range", lambda e: e.x.axis(5), "axis 5 is out of range"),
    bad("split str axis", lambda e: e.x.split("0", 2), "split", "axis", "'0'"),
    bad("split float factor", lambda e: e.x.split(0, 2.0), "split", "factor", "2.0"),
    bad("split zero factor", lambda e: e.x.split(0, 0), "split", "factor", "0"),
    bad("split bool factor", lambda e: e.x.split(0, True), "split", "factor", "True"),
    bad("outer_split str", lambda e: e.x.outer_split(0, "2"), "outer_split", "factor", "'2'"),
    bad("merge str", lambda e: e.x.merge("0"), "merge", "axis_o", "'0'"),
    bad("merge str inner", lambda e: e.x.merge(0, "1"), "merge", "axis", "'1'"),
    bad("merge itself", lambda e: e.x.merge(0, 0), "merge", "itself"),
    bad("reorder list", lambda e: e.x.reorder([1, 0]), "reorder", "order", "[1, 0]"),
    bad("reorder str key", lambda e: e.x.reorder({"0": 1}), "reorder", "axis", "'0'"),
    bad("reorder range", lambda e: e.x.reorder({0: 5}), "reorder", "axis 5"),
    bad("set_device_mesh list", lambda e: e.x.set_device_mesh([0, 1]), "DeviceMesh", "[0, 1]"),
    bad("parallelize int", lambda e: e.x.axis(0).parallelize(5), "parallel_type", "5"),
    bad("parallelize None", lambda e: e.x.axis(0).parallelize(None), "parallel_type", "None"),
    bad("parallelize name", lambda e: e.x.axis(0).parallelize("warpIdx"), "'warpIdx'"),
    bad("parallel type parse", lambda e: fl.ParallelType.parse(5), "parallel type", "5"),
    bad("dtype parse None", lambda e: fl.DType.parse(None), "dtype", "None"),
    # -- SPMD collectives ------------------------------------------------------------------------------
    bad("all_gather outside", lambda e: fl.all_gather(e.x), "all_gather", "only inside"),
    bad("all_gather int", lambda e: e.local(lambda s: fl.all_gather(5)), "all_gather", "5"),
    bad(
        "axis_index axis", lambda e: e.local(lambda s: fl.axis_index(3)), "axis_index", "axis", "3"
    ),
    bad("axis_index outside", lambda e: fl.axis_index(), "axis_index", "only inside", "shard_map"),
    bad("all_gather dim str", lambda e: e.local(lambda s: fl.all_gather(s, "0")), "dim", "'0'"),
    bad("all_gather dim range", lambda e: e.local(lambda s: fl.all_gather(s, 5)), "dim", "5"),
    bad("all_gather tiled", lambda e: e.local(lambda s: fl.all_gather(s, tiled="no")), "tiled"),
    bad("all_gather axis", lambda e: e.local(lambda s: fl.all_gather(s, axis="y")), "axis", "'y'"),
    bad(
        "all_reduce op list",
        lambda e: e.local(lambda s: fl.all_reduce(s, op=["sum"])),
        "op",
        "['sum']",
    ),
    bad(
        "all_reduce op name",
        lambda e: e.local(lambda s: fl.all_reduce(s, op="mean")),
        "op",
        "'mean'",
    ),
    bad(
        "reduce_scatter dim",
        lambda e: e.local(lambda s: fl.reduce_scatter(s, scatter_dim="0")),
        "scatter_dim",
    ),
    bad(
        "reduce_scatter count",
        lambda e: e.local(lambda s: fl.reduce_scatter(s, shard_count="2")),
        "shard_count",
    ),
    bad(
        "reduce_scatter range",
        lambda e: e.local(lambda s: fl.reduce_scatter(s, scatter_dim=9)),
        "scatter_dim",
        "9",
    ),
    bad(
        "all_to_all split str",
        lambda e: e.local(lambda s: fl.all_to_all(s, "1", 0)),
        "split_dim",
        "'1'",
    ),
    bad(
        "all_to_all split range",
        lambda e: e.local(lambda s: fl.all_to_all(s, 9, 0)),
        "split_dim",
        "9",
    ),
    bad(
        "all_to_all concat",
        lambda e: e.local(lambda s: fl.all_to_all(s, 1, None)),
        "concat_dim",
        "None",
    ),
    bad("psum axis", lambda e: e.local(lambda s: fl.psum(s, 3)), "psum", "axis", "3"),
    bad("pmax outside", lambda e: fl.pmax(e.x), "pmax", "only inside"),
    bad("pmin outside", lambda e: fl.pmin(e.x), "pmin", "only inside"),
    bad("min of a tensor", lambda e: fl.min(e.x, e.x), "reduction", "fl.minimum"),
    bad("psum axes twice", lambda e: e.local(lambda s: fl.psum(s, ("DIDx", "DIDx"))), "distinct"),
    bad("psum no axes", lambda e: e.local(lambda s: fl.psum(s, ())), "one or more distinct"),
    bad(
        "all_to_all two axes",
        lambda e: e.local(lambda s: fl.all_to_all(s, 0, 1, axis=("DIDx",) * 2)),
        "distinct",
    ),
    bad(
        "psum_scatter dim",
        lambda e: e.local(lambda s: fl.psum_scatter(s, None, "0")),
        "scatter_dim",
        "'0'",
    ),
    bad("ppermute perm", lambda e: e.local(lambda s: fl.ppermute(s, None, 5)), "perm", "5"),
    bad(
        "ppermute missing",
        lambda e: e.local(lambda s: fl.ppermute(s, None, [(0, 1)])),
        "perm",
        "[0]",
    ),
    bad("show_sharding str", lambda e: fl.show_sharding("x"), "show_sharding", "tv", "'x'"),
    # -- placements (DTensor's) --------------------------------------------------------
    bad("distribute int", lambda e: fl.distribute(3, e.mesh, [fl.Shard(0)]), "distribute", "3"),
    bad("distribute mesh", lambda e: fl.distribute(e.x, [0, 1], [fl.Shard(0)]), "mesh", "[0, 1]"),
    bad(
        "distribute placements",
        lambda e: fl.distribute(e.x, e.mesh, fl.Shard(0)),
        "placements",
        "Shard(dim=0)",
    ),
    bad("distribute item", lambda e: fl.distribute(e.x, e.mesh, ["S0"]), "mesh axis 0", "'S0'"),
    bad("distribute name", lambda e: fl.distribute("q", e.mesh, [fl.Shard(0)]), "no input 'q'"),
    bad("Shard str", lambda e: fl.Shard("0"), "Shard(dim)", "'0'"),
    bad("Partial op", lambda e: fl.Partial("mean"), "Partial('mean')", "'sum', 'max'"),
    bad("redistribute int", lambda e: fl.redistribute(3, [fl.Shard(0)]), "redistribute", "tv"),
    bad("redistribute no mesh", lambda e: fl.redistribute(e.y, [fl.Shard(0)]), "has no mesh"),
    bad("shard_map fn", lambda e: fl.shard_map(5, e.mesh), "shard_map", "fn", "5"),
    bad("shard_map mesh", lambda e: fl.shard_map(abs, [0, 1]), "shard_map", "mesh", "[0, 1]"),
    bad("shard_map arg", lambda e: fl.shard_map(abs, e.mesh, [None], [None])(3), "argument 0", "3"),
    bad(
        "shard_map specs",
        lambda e: fl.shard_map(abs, e.mesh, [None, None], [None])(e.x),
        "in_specs",
    ),
    bad(
        "shard_map spec",
        lambda e: fl.shard_map(abs, e.mesh, ["DIDx"], [None])(e.x),
        "spec",
        "'DIDx'",
    ),
    # -- FusionExecutor ----------------------------------------------------------------------------------
    bad("executor fusion", lambda e: fl.FusionExecutor(5), "FusionExecutor", "fusion", "5"),
    bad("executor backend int", lambda e: fl.FusionExecutor(e.fusion, 5), "backend", "5"),
    bad("executor backend name", lambda e: fl.FusionExecutor(e.fusion, "gpu"), "backend", "gpu"),
    bad("executor schedule", lambda e: fl.FusionExecutor(e.fusion, schedule="no"), "schedule"),
    bad("executor pipeline", lambda e: fl.FusionExecutor(e.fusion, pipeline="x"), "pipeline"),
    bad("run None", lambda e: e.ex.run(None), "inputs", "None"),
    bad("run bare array", lambda e: e.ex.run(e.inputs[0]), "inputs", "ndarray"),
    bad("run count", lambda e: e.ex.run([]), "takes 1 inputs", "got 0"),
    bad("run ragged", lambda e: e.ex.run([[[1, 2], [3]]]), "input T0", "not an array"),
    bad("run shape", lambda e: e.ex.run([np.ones(3, np.float32)]), "input T0", "[3]"),
    bad("run dtype", lambda e: e.ex.run([np.ones((4, 6))]), "input T0", "float64"),
    bad("run_per_device int", lambda e: e.ex.run_per_device(5), "inputs", "5"),
    # -- reference, validation, random inputs ------------------------------------------------------
    bad("evaluate fusion", lambda e: fl.evaluate(5, []), "evaluate", "fusion", "5"),
    bad("evaluate None", lambda e: fl.evaluate(e.fusion, None), "inputs", "None"),
    bad("evaluate shape", lambda e: fl.evaluate(e.fusion, [np.ones(3, np.float32)]), "[3]"),
    bad("evaluate object", lambda e: fl.evaluate(e.fusion, [Ragged()]), "input T0", "shape"),
    bad("validate outputs", lambda e: fl.validate(e.fusion, e.inputs, None), "outputs", "None"),
    bad("validate outputs int", lambda e: fl.validate(e.fusion, e.inputs, 5), "outputs", "5"),
    bad("validate fusion", lambda e: fl.validate(5, e.inputs, []), "fusion", "5"),
    bad("random_inputs fusion", lambda e: fl.random_inputs(5), "random_inputs", "fusion", "5"),
    bad("random_inputs str", lambda e: fl.random_inputs(e.fusion, "1"), "seed", "'1'"),
    bad("random_inputs negative", lambda e: fl.random_inputs(e.fusion, -1), "seed", "-1"),
    bad("random_inputs float", lambda e: fl.random_inputs(e.fusion, 1.5), "seed", "1.5"),
    # -- text, verify, pipeline ----------------------------------------------------------------------
    bad("parse int", lambda e: fl.parse(5), "parse", "text", "5"),
    bad("parse bytes", lambda e: fl.parse(b"input x: float32[2]"), "text", "bytes"),
    bad("parse filename", lambda e: fl.parse("", filename=5), "filename", "5"),
    bad("parse too big", lambda e: fl.parse("#" * (16 * 2**20 + 1)), "limited to 16777216"),
    bad("load None", lambda e: fl.load(None), "load", "path", "None"),
    bad("load int", lambda e: fl.load(5), "load", "path", "5"),
    bad("load directory", lambda e: fl.load(ROOT), "cannot read the file"),
    bad("load missing", lambda e: fl.load(ROOT / "missing.fus"), "missing.fus", "cannot read"),
    bad("to_fus int", lambda e: fl.to_fus(5), "to_fus", "fusion", "5"),
    bad("verify int", lambda e: fl.verify(5), "verify", "fusion", "5"),
    bad("verify require_mesh", lambda e: fl.verify(e.fusion, require_mesh="no"), "require_mesh"),
    bad("lower int", lambda e: fl.lower(5), "fusion", "5"),
    bad("pipeline str", lambda e: fl.Pipeline("segment"), "passes", "'segment'"),
    bad("pipeline int pass", lambda e: fl.Pipeline([5]), "passes", "[5]"),
    bad("pipeline unknown pass", lambda e: fl.Pipeline(["nope"]), "unknown pass 'nope'"),
    bad("pipeline print_after", lambda e: fl.Pipeline([], print_after="segment"), "print_after"),
    bad("pipeline verify_each", lambda e: fl.Pipeline([], verify_each="no"), "verify_each"),
    bad("pipeline run", lambda e: fl.Pipeline([]).run(5), "Pipeline.run", "fusion", "5"),
    bad(
        "pipeline program pass first",
        lambda e: fl.Pipeline(["schedule-pointwise", "segment"]),
        "pass schedule-pointwise works on a program",
        "run segment before it",
    ),
    bad(
        "pipeline fusion pass after segment",
        lambda e: fl.Pipeline(["segment", "propagate-shardings"]),
        "pass propagate-shardings works on a fusion",
        "after segment",
        "put it before segment",
    ),
    bad("pipeline input_level", lambda e: fl.Pipeline([], input_level="kernel"), "input_level"),
    bad("pipeline run program", lambda e: fl.Pipeline([]).run(e.ex.program), "fusion", "Program"),
    bad("verify_program int", lambda e: fl.verify_program(5), "verify_program", "program", "5"),
    bad("verify_program fusion", lambda e: fl.verify_program(e.fusion), "program", "Fusion"),
    bad("explain fusion", lambda e: fl.explain(e.fusion), "explain", "fl.lower(fusion)", "Fusion"),
    # -- fl.grad, fl.vjp ---------------------------------------------------------------
    bad("grad fusion", lambda e: fl.grad("f", ["x"]), "grad", "fusion", "'f'"),
    bad("grad wrt str", lambda e: fl.grad(e.fusion, "T0"), "grad", "wrt", "'T0'"),
    bad("grad loss not scalar", lambda e: fl.grad(e.fusion, ["T0"]), "grad", "T5", "scalar"),
    bad("vjp unknown input", lambda e: fl.vjp(e.fusion, ["w"]), "vjp", "'w'", "T0"),
    bad("vjp int input", lambda e: fl.vjp(e.fusion, [7]), "vjp", "7"),
    bad("explain machine", lambda e: fl.explain(e.ex.program, machine=3), "machine", "int"),
    bad("timeline int", lambda e: fl.timeline(5), "timeline", "program", "5"),
    bad("timeline machine", lambda e: fl.timeline(e.fusion, "tpu"), "unknown machine 'tpu'"),
    # -- keyword arguments passed on (**kwargs): named, with the closest one taken --------
    bad("lower unknown keyword", lambda e: fl.lower(e.fusion, bogus=1), "lower", "'bogus'", "dump"),
    bad(
        "lower misspelled keyword",
        lambda e: fl.lower(e.fusion, latency_byte=1),
        "lower: unexpected keyword argument 'latency_byte'; did you mean 'latency_bytes'?",
    ),
    bad(
        "pipeline default keyword",
        lambda e: fl.Pipeline.default(verify_eac=False),
        "Pipeline: unexpected keyword argument 'verify_eac'; did you mean 'verify_each'?",
    ),
    # -- shard_axis --------------------------------------------------------------------
    bad(
        "shard_axis axis out of range",
        lambda e: shard_axis(e.x, 5, e.mesh),
        "shard_axis: logical_index",
        "T0's 2 logical axes",
        "-2..1, got 5",
    ),
    bad("shard_axis float axis", lambda e: shard_axis(e.x, 1.0, e.mesh), "logical_index", "1.0"),
    bad("shard_axis mesh list", lambda e: shard_axis(e.x, 0, [0, 1]), "mesh must be", "[0, 1]"),
    bad(
        "shard_axis thread type",
        lambda e: shard_axis(e.x, 0, e.mesh, fl.ParallelType.TIDx),
        "parallel_type must be one of DIDx, DIDy, DIDz",
    ),
    bad("shard_axis not a tensor", lambda e: shard_axis(3, 0, e.mesh), "tv must be", "3"),
    # -- erf, embedding, the PyTorch frontend -----------------------------------------
    bad("erf number", lambda e: fl.erf(2.0), "erf", "x", "2.0"),
    bad("embedding float indices", lambda e: fl.embedding(e.w, e.x), "indices", "float32", "cast"),
    bad(
        "embedding_backward rows", lambda e: fl.embedding_backward(e.x, e.i, 0), "num_weights", "0"
    ),
    bad("gelu approximate", lambda e: fl.gelu(e.x, approximate="erf"), "approximate", "'erf'"),
    bad("from_torch number", lambda e: fl.from_torch(5), "from_torch"),
    bad("parallelize plan", lambda e: fl.parallelize(e.fusion, e.mesh, ["fc1"]), "plan", "dict"),
    bad(
        "parallelize unknown module",
        lambda e: fl.parallelize(e.fusion, e.mesh, {"fc1": "colwise"}),
        "'fc1' names no module",
    ),
]


def test_the_corpus_covers_every_public_function() -> None:
    assert len(BAD) >= 120
    assert len({case.id for case in BAD}) == len(BAD)
    names = {n for n in fl.__all__ if callable(getattr(fl, n)) and not n[0].isupper()}
    used = {name for case in BAD for name in _names_used(case.call)}
    assert names - used == set(), f"no bad call for {sorted(names - used)}"


def _names_used(fn: Callable | types.CodeType) -> set[str]:
    code = getattr(fn, "__code__", fn)
    inner = [c for c in code.co_consts if isinstance(c, types.CodeType)]  # nested lambdas
    return set(code.co_names).union(*map(_names_used, inner))


@pytest.mark.parametrize("case", BAD, ids=[case.id for case in BAD])
def test_bad_call_is_a_clear_error(case: Bad) -> None:
    env = Env()
    with env.fusion, pytest.raises(fl.FuserliteError) as info:
        case.call(env)
    error = info.value
    assert type(error) is not fl.FuserliteError  # a subclass that says what kind of mistake
    message = str(error)
    for fragment in case.expect:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert len(message) < 400, message  # one paragraph, long values abbreviated
