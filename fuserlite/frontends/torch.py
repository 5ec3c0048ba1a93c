"""fl.from_torch: a PyTorch module or function, traced by torch.export, as a fusion.

    fusion, inputs = fl.from_torch(block, torch.randn(2, 16, 64))
    fl.FusionExecutor(fusion).run(inputs)          # block's forward, on fuserlite

torch.export gives the ATen-level graph (no Python-level guessing, no decompositions:
`aten.linear`, `aten.layer_norm`, `aten.scaled_dot_product_attention` stay whole), and
each node becomes the fuserlite ops of its row in the ATen table
(fuserlite.frontends.aten). The fusion's inputs are, in order:

1. one per parameter and buffer, named by its dotted name (`attn.q.weight`), in the
   order torch.export lists them;
2. one per example input, named as the forward's argument (`x`);
3. one per constant a computed op reads: a tensor the forward makes from no input
   (a causal mask's `tril(ones(...))`, a rotary table) is evaluated by torch when the
   module is imported ("folded": the op of the table or of aten.FOLDABLE runs on the
   constants), and becomes an input of its own, named by its graph node (`tril`).

`inputs` holds their values as numpy arrays (bfloat16 as ml_dtypes.bfloat16). Each
tensor a node makes is named by the node (`linear_1`) and remembers where it came
from, `attn.q (block.py:12)`, which every message shows; each node's result is
checked against the shape and dtype torch.export recorded for it, so a row that
builds the wrong thing is an error, not a wrong number.

Example inputs may be DTensors (torch.distributed.tensor, on a real process group:
gloo, or the threaded group of torch's tests, every rank calling from_torch as SPMD
code does): the input takes their mesh and placements (fl.distribute), and their
values are the whole tensors (`full_tensor()`).

torch is imported here, inside the functions, and only here: without it from_torch
says how to install it.
"""

from __future__ import annotations

import inspect
import operator
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from fuserlite import ops
from fuserlite.frontends.aten import FOLDABLE, IGNORED, TABLE, Importing, outputs_of
from fuserlite.ir.errors import FuserliteError, FusionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Replicate, Shard
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.schedule.placements import distribute

INSTALL = "pip install 'fuserlite[torch]' (torch==2.13.0, the CPU wheel)"
_DTYPES = {
    "float32": DType.float32,
    "float64": DType.float64,
    "float16": DType.float16,
    "bfloat16": DType.bfloat16,
    "int32": DType.int32,
    "int64": DType.int64,
    "bool": DType.bool,
}
# torch.export keeps global state while it traces: threads of one process (torch's
# threaded process group, one per rank) take turns.
_EXPORTING = threading.Lock()


def import_torch() -> Any:
    """The torch module, or a FusionError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise FusionError(
            f"fl.from_torch needs PyTorch, which is not installed: {INSTALL}"
        ) from None
    return torch


def from_torch(
    module_or_fn: Callable, *example_inputs: Any, seed: int = 0
) -> tuple[Fusion, list[np.ndarray]]:
    """(fusion, input values) of a torch.nn.Module or function on example inputs,
    traced by torch.export: parameters and buffers first, by their dotted names, then
    the example inputs (DTensors placed as they are), then folded constants. `seed`
    is the Philox seed of train-mode dropout (fuserlite's masks, not torch's)."""
    torch = import_torch()
    module = _as_module(torch, module_or_fn)
    _no_distributed_state(module)
    examples, placed = _examples(torch, example_inputs)
    with _EXPORTING:
        try:
            program = torch.export.export(module, tuple(examples))
        except Exception as exc:  # noqa: BLE001 - torch's own errors, said as ours
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FusionError(
                f"from_torch: torch.export could not trace {_what(module_or_fn)}: "
                f"{type(exc).__name__}: {first}"
            ) from exc
    graph = _Graph(torch, program, examples, seed)
    fusion, values = graph.build()
    for k, (mesh, placements) in placed.items():
        distribute(graph.user_inputs[k], mesh, placements)
    return fusion, values


def _what(target: object) -> str:
    name = getattr(target, "__name__", None) or type(target).__name__
    return f"{name}"


def _as_module(torch: Any, target: Callable) -> Any:
    """A module as it is; a function wrapped as one's forward."""
    if isinstance(target, torch.nn.Module):
        return target
    if not callable(target):
        raise FusionError(
            f"from_torch: {target!r} is neither a torch.nn.Module nor a function; pass the "
            "module (or function) to import and its example inputs"
        )

    class Function(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return target(*args)

    try:  # the function's own argument names name the inputs (export reads the signature)
        params = list(inspect.signature(target).parameters.values())
        me = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        Function.forward.__signature__ = inspect.Signature([me, *params])
    except (TypeError, ValueError):
        pass  # a builtin without a signature: args_0, args_1, ...
    Function.__name__ = _what(target)
    return Function()


def _no_distributed_state(module: Any) -> None:
    """A FusionError for a module whose parameters torch has parallelized already
    (DTensors: torch.export traces none, nor parallelize_module's hooks)."""
    state = [*module.named_parameters(), *module.named_buffers()]
    placed = [name for name, t in state if type(t).__name__ == "DTensor"]
    if placed:
        raise FusionError(
            f"from_torch: the module's {placed[0]} is a DTensor "
            f"({len(placed)} of its parameters and buffers are: torch's parallelize_module or "
            "distribute_module placed them), which torch.export cannot trace; import the "
            "module before parallelizing it and give the same plan to fl.parallelize (it "
            "reads torch's ColwiseParallel, RowwiseParallel and SequenceParallel too)"
        )


# -- example inputs and DTensors ------------------------------------------------------------
def _examples(torch: Any, given: Sequence[Any]) -> tuple[list[Any], dict[int, tuple]]:
    """The example inputs as plain tensors, and {input position: (mesh, placements)} of
    the DTensors among them."""
    plain, placed = [], {}
    for k, x in enumerate(given):
        if not isinstance(x, torch.Tensor):
            raise FusionError(
                f"from_torch: example input {k} is {type(x).__name__} {x!r:.40}, not a tensor; "
                "example inputs are tensors (a number is a constant of the module: close over "
                "it instead)"
            )
        if type(x).__name__ == "DTensor":
            placed[k] = _placement_of(x, k)
            x = _whole(x, k)
        plain.append(x)
    return plain, placed


def _placement_of(x: Any, k: int) -> tuple[DeviceMesh, list]:
    """A DTensor's device mesh (its mesh_dim_names the axes' names) and its placements
    in fuserlite's terms."""
    mesh = DeviceMesh(x.device_mesh.mesh.tolist(), axis_names=x.device_mesh.mesh_dim_names)
    out = []
    for axis, p in enumerate(x.placements):
        kind = type(p).__name__
        if kind == "Shard":
            out.append(Shard(p.dim))
        elif kind == "Replicate":
            out.append(Replicate())
        else:
            raise FusionError(
                f"from_torch: example input {k} is a DTensor placed {p} on mesh axis {axis}; "
                "an input is Shard(d) or Replicate() on each mesh axis (a Partial value is an "
                "op's output: reduce it first, dt.redistribute(placements=[Replicate()]))"
            )
    return mesh, out


def _whole(x: Any, k: int) -> Any:
    """The global value of a DTensor: its shards gathered from every rank."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_backend() == "fake":
        raise FusionError(
            f"from_torch: example input {k} is a DTensor on a fake process group, which holds "
            "rank 0's shard only; use a process group that communicates (gloo, or torch's "
            "threaded group), every rank calling from_torch"
        )
    return x.full_tensor()


# -- values ---------------------------------------------------------------------------------
def numpy_of(t: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array of the same dtype (bfloat16 through
    ml_dtypes: numpy has none)."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def dtype_of(torch_dtype: Any, what: str) -> DType:
    """A torch dtype as fuserlite's (float32, float64, float16, bfloat16, int32, int64, bool)."""
    name = str(torch_dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise FusionError(
            f"from_torch: {what} is {name}; fuserlite's dtypes are {', '.join(_DTYPES)}"
        )
    return _DTYPES[name]


@dataclass(frozen=True)
class Constant:
    """A tensor the module computes from no input (folded by torch at import time)."""

    value: Any  # a torch.Tensor
    name: str  # the input it becomes where a computed op reads it


_LOCATION = re.compile(r'File "([^"]+)", line (\d+)')


class _Graph:
    """One import: walks the exported graph, building the fusion node by node."""

    def __init__(self, torch: Any, program: Any, examples: list[Any], seed: int) -> None:
        self.torch = torch
        self.program = program
        self.examples = examples
        self.importing = Importing(seed=seed)
        self.fusion = Fusion()
        self.values: dict[str, Any] = {}  # graph node name -> its value
        self.arrays: dict[int, np.ndarray] = {}  # id(fusion input) -> its value
        self.materialized: dict[int, TensorView] = {}  # id(Constant) -> its input
        self.user_inputs: list[TensorView] = []  # the example inputs' fusion inputs
        self.where = ""  # the node being built, for messages

    # -- the walk ----------------------------------------------------------------------
    def build(self) -> tuple[Fusion, list[np.ndarray]]:
        with self.fusion:
            self._placeholders()
            for node in self.program.graph.nodes:
                if node.op == "call_function":
                    self._call(node)
                elif node.op == "output":
                    self._outputs(node)
                elif node.op != "placeholder":
                    raise FusionError(
                        f"from_torch: a {node.op} node ({node.name}) in the exported graph; "
                        "only ATen calls are imported"
                    )
        return self.fusion, [self.arrays[id(tv)] for tv in self.fusion.inputs]

    def _placeholders(self) -> None:
        sig = self.program.graph_signature
        state, constants = self.program.state_dict, self.program.constants
        users = iter(self.examples)
        for spec in sig.input_specs:
            kind, name = spec.kind.name, spec.arg.name
            if kind in ("PARAMETER", "BUFFER"):
                value = state[spec.target] if spec.target in state else constants[spec.target]
                tv = self.values[name] = self._input(fusion_name(spec.target), value)
                tv.origin = f"{_STATE} ({kind.lower()} {spec.target})"
            elif kind == "CONSTANT_TENSOR":
                self.values[name] = Constant(constants[spec.target], spec.target)
            elif kind == "USER_INPUT":
                self.values[name] = self._input(name, next(users))
                self.user_inputs.append(self.values[name])
            else:
                raise FusionError(f"from_torch: an input of kind {kind} ({name}) is not imported")

    def _input(self, name: str, value: Any) -> TensorView:
        dtype = dtype_of(value.dtype, f"{name} ({list(value.shape)})")
        tv = ops.tensor(list(value.shape) or [], dtype, fusion=self.fusion, name=name)
        self.fusion.add_input(tv)
        self.arrays[id(tv)] = numpy_of(value)
        return tv

    def _call(self, node: Any) -> None:
        target = node.target
        name = str(target)
        if target is operator.getitem:
            whole, index = node.args
            self.values[node.name] = self.values[whole.name][index]
            return
        if name in IGNORED:
            self.values[node.name] = None
            return
        self.where = self._origin(node)
        if not self._reads_fusion(node.args, node.kwargs):
            self.values[node.name] = self._fold(node, name)
            return
        row = TABLE.get(name)
        if row is None:
            raise FusionError(self._unsupported(name))
        made = len(self.fusion.tensors_created)
        args = self._arguments(node.args, row.scalars)
        kwargs = {k: self._arguments(v, row.scalars) for k, v in node.kwargs.items()}
        try:
            value = row.build(self.importing, *args, **kwargs)
        except FuserliteError as exc:
            raise FusionError(f"from_torch: {self.where}: {name}: {exc}") from None
        for tv in self.fusion.tensors_created[made:]:
            if tv.origin is None:  # a constant made an input here already says so
                tv.origin = self.where
        self._check(node, name, value)
        for k, tv in enumerate(outputs_of(value)):
            if isinstance(tv, TensorView) and tv.user_name is None:
                tv.user_name = node.name if not isinstance(value, tuple) else f"{node.name}.{k}"
        self.values[node.name] = value

    def _outputs(self, node: Any) -> None:
        kinds = {s.kind.name for s in self.program.graph_signature.output_specs}
        if kinds - {"USER_OUTPUT"}:
            mutated = [s.target for s in self.program.graph_signature.output_specs if s.target]
            raise FusionError(
                f"from_torch: the module updates {', '.join(mutated) or 'its state'} in place "
                f"({', '.join(sorted(kinds - {'USER_OUTPUT'}))}), which a fusion cannot; "
                "import it in eval mode (module.eval()) or without in-place buffer updates"
            )
        results = list(outputs_of(self._value(node.args[0])))
        flat = [
            r for item in results for r in (item if isinstance(item, (list, tuple)) else [item])
        ]
        for k, out in enumerate(flat):
            if isinstance(out, Constant):
                out = self._materialize(out)
            if not isinstance(out, TensorView):
                raise FusionError(
                    f"from_torch: output {k} is {out!r}, not a tensor; return tensors only"
                )
            if out in self.fusion.inputs or out in self.fusion.outputs:
                out = ops.set(out)  # an output of its own: a copy of an input or output
            out.user_name = "out" if len(flat) == 1 else f"out.{k}"
            self.fusion.add_output(out)

    # -- arguments ---------------------------------------------------------------------
    def _value(self, arg: Any) -> Any:
        """A graph argument's value: a node's, with lists and tuples walked."""
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._value(a) for a in arg)
        if hasattr(arg, "op") and hasattr(arg, "name") and arg.name in self.values:
            return self.values[arg.name]
        return arg

    def _reads_fusion(self, args: Any, kwargs: dict) -> bool:
        def reads(v: Any) -> bool:
            if isinstance(v, (list, tuple)):
                return any(reads(x) for x in v)
            return isinstance(v, TensorView)

        return reads(self._value(list(args))) or reads(self._value(list(kwargs.values())))

    def _arguments(self, arg: Any, scalars: bool) -> Any:
        """A node argument for a row: tensors as TensorViews (a constant as an input of its
        own, or a Python number where the row takes one for a 0-d constant), dtypes as
        DTypes, devices, layouts and memory formats as None."""
        value = self._value(arg)
        if isinstance(value, (list, tuple)):
            return type(value)(self._arguments(a, scalars) for a in value)
        if isinstance(value, Constant):
            if scalars and value.value.dim() == 0 and value.value.dtype.is_floating_point:
                return float(value.value.item())
            if scalars and value.value.dim() == 0 and not value.value.dtype.is_complex:
                return value.value.item()
            return self._materialize(value)
        if isinstance(value, self.torch.dtype):
            return dtype_of(value, "a dtype argument")
        if isinstance(value, (self.torch.device, self.torch.layout, self.torch.memory_format)):
            return None
        return value

    def _materialize(self, c: Constant) -> TensorView:
        """A folded constant as a fusion input (once, however many nodes read it)."""
        if id(c) not in self.materialized:
            tv = self.materialized[id(c)] = self._input(c.name, c.value)
            tv.origin = f"{_FOLDED} {self.where}"
        return self.materialized[id(c)]

    # -- folding -------------------------------------------------------------------------
    def _fold(self, node: Any, name: str) -> Any:
        """A node that reads no fusion tensor, evaluated by torch now (its tensors a
        Constant each, named by the node)."""
        if name not in TABLE and name not in FOLDABLE:
            raise FusionError(self._unsupported(name, folded=True))

        def unwrap(v: Any) -> Any:
            if isinstance(v, Constant):
                return v.value
            if isinstance(v, (list, tuple)):
                return type(v)(unwrap(x) for x in v)
            return v

        args = unwrap(self._value(list(node.args)))
        kwargs = {k: unwrap(self._value(v)) for k, v in node.kwargs.items()}
        with self.torch.no_grad():
            result = node.target(*args, **kwargs)
        if isinstance(result, (list, tuple)):
            return tuple(
                Constant(r, f"{node.name}.{k}") if isinstance(r, self.torch.Tensor) else r
                for k, r in enumerate(result)
            )
        return Constant(result, node.name) if isinstance(result, self.torch.Tensor) else result

    # -- checks and messages -------------------------------------------------------------
    def _check(self, node: Any, name: str, value: Any) -> None:
        """The row's result against the shape and dtype torch.export recorded."""
        expected = node.meta.get("val")
        if expected is None:
            return
        wanted = expected if isinstance(expected, (list, tuple)) else (expected,)
        got = outputs_of(value)
        if len(wanted) != len(got):
            raise FusionError(
                f"from_torch: {self.where}: {name} gave {len(got)} results, torch {len(wanted)}"
            )
        for w, g in zip(wanted, got):
            if not isinstance(w, self.torch.Tensor):
                continue
            shape, dtype = tuple(int(e) for e in w.shape), dtype_of(w.dtype, name)
            if not isinstance(g, TensorView) or (g.shape, g.dtype) != (shape, dtype):
                have = f"{g.dtype.name}{list(g.shape)}" if isinstance(g, TensorView) else repr(g)
                raise FusionError(
                    f"from_torch: {self.where}: {name} made {have} where torch makes "
                    f"{dtype.name}{list(shape)}; this is a bug of its row in "
                    "fuserlite.frontends.aten: please report it"
                )

    def _origin(self, node: Any) -> str:
        """`attn.q (block.py:12)`: the module a node came from and the line of its source
        (`block.py:30` alone at the top level; the module alone without a source)."""
        stack = node.meta.get("nn_module_stack") or {}
        path = list(stack.values())[-1][0] if stack else ""
        frames = _LOCATION.findall(node.meta.get("stack_trace") or "")
        mine = [(f, line) for f, line in frames if not self._library(f)]
        where = f"{Path(mine[-1][0]).name}:{mine[-1][1]}" if mine else ""
        path = fusion_name(path)
        if path and where:
            return f"{path} ({where})"
        return path or where or "the top level"

    def _library(self, file: str) -> bool:
        """True for a frame of torch's own modules (nn.Linear.forward) or of this
        importer (a function's wrapper): the user's line is the last frame but them."""
        path = Path(file).resolve()
        return path == Path(__file__).resolve() or Path(self.torch.__file__).parent in path.parents

    def _unsupported(self, name: str, folded: bool = False) -> str:
        what = "a constant (it reads no input) made by " if folded else ""
        known = ", ".join(sorted(r.removeprefix("aten.") for r in TABLE))
        return (
            f"from_torch: {self.where}: {what}{name} is not in fuserlite's ATen table "
            f"(fuserlite/frontends/aten.py, docs/torch.md), which holds: {known}"
        )


_FOLDED = "a constant folded at import, read by"
_STATE = "the module's state"


def fusion_name(path: str) -> str:
    """A PyTorch dotted path as a fuserlite name: a path that starts with a number (an
    nn.Sequential's `0.weight`) gets a leading `_` (`_0.weight`), since a name starts
    with a letter or _ (so that .fus never reads one as a number)."""
    return f"_{path}" if path[:1].isdigit() else path


def is_state(tv: TensorView) -> bool:
    """True for a fusion input from_torch made of a parameter or buffer."""
    return (tv.origin or "").startswith(_STATE)


def is_folded_constant(tv: TensorView) -> bool:
    """True for a fusion input from_torch made of a constant the module computes."""
    return (tv.origin or "").startswith(_FOLDED)


def module_path(tv: TensorView) -> str:
    """The dotted path of the module an imported tensor was made in (`attn.q`), read
    from its origin; "" for the top level and for a tensor from_torch did not make."""
    origin = tv.origin or ""
    m = re.fullmatch(r"(\S+) \(\S+:\d+\)", origin)
    if m is not None:
        return m[1]
    return origin if re.fullmatch(r"[A-Za-z_][\w.]*", origin) else ""
