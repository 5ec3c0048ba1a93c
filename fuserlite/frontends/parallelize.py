"""fl.parallelize: PyTorch's tensor-parallel plans as placements of an imported fusion.

    fl.parallelize(fusion, mesh, {"attn.q": "colwise", "attn.proj": "rowwise",
                                  "mlp.fc1": "colwise", "mlp.fc2": "rowwise"})

does to a fusion from fl.from_torch what torch.distributed.tensor.parallel's
parallelize_module(module, mesh, plan) does to the module: each plan entry names
modules (by dotted path; `*` matches one part: "layers.*.mlp.fc1") and a style,
which places their parameters, and where the style says so their inputs and
outputs, with fl.distribute. The styles are PyTorch's (torch's own ParallelStyle
objects are read too, their input_layouts / output_layouts / sequence_dim):

    "colwise"   ColwiseParallel: a Linear's weight and bias Shard(0) (an Embedding's
                weight Shard(1)); its input Replicate, its output Shard(-1)
    "rowwise"   RowwiseParallel: a Linear's weight Shard(1), bias Replicate (an
                Embedding's weight Shard(0), vocab-parallel); its input Shard(-1)
                (an Embedding's Replicate), its output Replicate: the partial sums'
                Allreduce. In a plan with "sequence" entries its output is
                Shard(sequence_dim) instead, as Megatron-SP and PyTorch's own SP plans
                write it (RowwiseParallel(output_layouts=Shard(1))): a ReduceScatter
    "sequence"  SequenceParallel: the module's parameters Replicate, its input
                Shard(1) (its sequence axis), so a LayerNorm works on its shard of
                the sequence; the colwise linear after it Allgathers it

Everything else is Replicate on the mesh. An input's placement is written only where
it is a fusion input (an intermediate's placement is what its producers make it,
as DTensor's redistribute leaves it to the data). On a mesh of several axes the plan
is on the tensor-parallel axis `tp_axis` (the last, DIDx, by default; an index or the
axis's name, "tp" of DeviceMesh(..., axis_names=("dp", "tp"))); `dp_axis`
shards the batch (axis 0) of every example input and placed activation on that
axis: data parallelism, Megatron's 2-D layout.

Modules are found by their parameters' names (`attn.q.weight`) and, for "sequence",
by the module paths from_torch records on each tensor it makes (its origin); a plan
entry that matches no module, or a style a module cannot take, is a FusionError
naming the entry, the modules there are and the fix.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from fuserlite.frontends.torch import fusion_name, is_folded_constant, is_state, module_path
from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import MeshAxisPlacement, Replicate, Shard
from fuserlite.ir.tensor import TensorView
from fuserlite.schedule.placements import distribute

STYLES = ("colwise", "rowwise", "sequence")
_FOLLOWED = ("cast", "set", "permute")  # a weight on its way to its contraction


@dataclass(frozen=True)
class Style:
    """One plan entry's style in fuserlite's terms (None: the style's default)."""

    kind: str  # colwise, rowwise or sequence
    input_layout: MeshAxisPlacement | None = None
    output_layout: MeshAxisPlacement | None = None
    sequence_dim: int = 1


def parallelize(
    fusion: Fusion,
    mesh: DeviceMesh,
    plan: Mapping[str, object],
    *,
    tp_axis: int | str = -1,
    dp_axis: int | str | None = None,
) -> Fusion:
    """Place `fusion`'s tensors on `mesh` as PyTorch's parallelize_module(module, mesh,
    plan) places the module's (`plan`: module path -> "colwise", "rowwise",
    "sequence" or a torch ParallelStyle); the rest Replicate. Returns the fusion."""
    who = "parallelize"
    args.instance(fusion, Fusion, who, "fusion", "a Fusion (from fl.from_torch)")
    args.instance(mesh, DeviceMesh, who, "mesh", "a DeviceMesh")
    if not isinstance(plan, Mapping):
        raise args.fail(
            who, "plan", 'a dict of module path -> "colwise", "rowwise" or "sequence"', plan
        )
    tp = _mesh_axis(mesh, tp_axis, "tp_axis")
    dp = None if dp_axis is None else _mesh_axis(mesh, dp_axis, "dp_axis")
    if dp == tp:
        raise FusionError(f"{who}: dp_axis and tp_axis are both mesh axis {tp}; give two axes")
    # keys as from_torch names modules: an nn.Sequential's "0" is "_0"
    styles = {fusion_name(key): _style(key, value) for key, value in plan.items()}
    sequence_dims = {s.sequence_dim for s in styles.values() if s.kind == "sequence"}
    placed = _Placements(fusion, mesh, tp, dp)
    modules = _modules(fusion)
    for key, style in styles.items():
        matched = sorted(m for m in modules if fnmatch.fnmatchcase(m, key))
        if not matched:
            known = ", ".join(sorted(m for m in modules if m)[:20]) or "none"
            raise FusionError(
                f"{who}: plan entry {key!r} names no module of the fusion; its modules are "
                f"{known} (a path is dotted, `*` matches one part: 'layers.*.mlp.fc1')"
            )
        for m in matched:
            _apply(placed, fusion, m, style, sequence_dims, key)
    placed.write()
    return fusion


def _mesh_axis(mesh: DeviceMesh, axis: object, arg: str) -> int:
    """A mesh axis given by its index (negative from the end) or its name ("tp", DIDx)."""
    if isinstance(axis, str):
        return mesh.axis_of(mesh.parallel_type_of(axis, f"parallelize {arg}"))
    k = args.integer(axis, "parallelize", arg, minimum=-mesh.rank, maximum=mesh.rank - 1)
    return k % mesh.rank


def _style(key: str, value: object) -> Style:
    """A plan entry's style: a name, or torch's ParallelStyle read by its fields."""
    if isinstance(value, str):
        if value not in STYLES:
            raise FusionError(
                f"parallelize: plan entry {key!r} has style {value!r}; use one of "
                f"{', '.join(map(repr, STYLES))} (PyTorch's ColwiseParallel, RowwiseParallel, "
                "SequenceParallel) or those objects themselves"
            )
        return Style(value)
    kind = {"ColwiseParallel": "colwise", "RowwiseParallel": "rowwise"}.get(type(value).__name__)
    if kind is not None:
        return Style(
            kind,
            _torch_placement(key, value.input_layouts[0]),
            _torch_placement(key, value.output_layouts[0]),
        )
    if type(value).__name__ == "SequenceParallel":
        return Style("sequence", sequence_dim=value.sequence_sharding[0].dim)
    raise FusionError(
        f"parallelize: plan entry {key!r} has style {args.given(value)}; use 'colwise', "
        "'rowwise', 'sequence', or torch's ColwiseParallel, RowwiseParallel or SequenceParallel"
    )


def _torch_placement(key: str, p: object) -> MeshAxisPlacement:
    kind = type(p).__name__
    if kind == "Shard":
        return Shard(p.dim)
    if kind == "Replicate":
        return Replicate()
    raise FusionError(
        f"parallelize: plan entry {key!r}: a layout {p}; the styles' layouts are Shard(d) or "
        "Replicate()"
    )


def _modules(fusion: Fusion) -> set[str]:
    """Every module path the fusion knows: its parameters' prefixes (`attn.q` of
    `attn.q.weight`) and the modules its tensors were made in, with their parents."""
    found: set[str] = set()
    for tv in fusion.inputs:
        if tv.user_name and "." in tv.user_name:
            found.add(tv.user_name.rsplit(".", 1)[0])
    found |= {module_path(tv) for tv in fusion.tensors_created}
    for m in list(found):
        parts = m.split(".")
        found |= {".".join(parts[:k]) for k in range(1, len(parts))}
    found.discard("")
    return found


class _Placements:
    """The placement each tensor gets, one entry per mesh axis, written at the end."""

    def __init__(self, fusion: Fusion, mesh: DeviceMesh, tp: int, dp: int | None) -> None:
        self.fusion, self.mesh, self.tp, self.dp = fusion, mesh, tp, dp
        self.chosen: dict[int, tuple[TensorView, MeshAxisPlacement, str]] = {}

    def put(self, tv: TensorView, p: MeshAxisPlacement, why: str) -> None:
        if isinstance(p, Shard) and p.dim < 0:
            p = Shard(p.dim % len(tv.shape))
        old = self.chosen.get(id(tv))
        if old is not None and old[1] != p:
            raise FusionError(
                f"parallelize: {tv.name} is placed {old[1]!r} by {old[2]} and {p!r} by {why}; "
                "give the two entries one placement of it"
            )
        self.chosen[id(tv)] = (tv, p, why)

    def write(self) -> None:
        """Every fusion input and every tensor a plan entry placed, on the mesh; on the
        data-parallel axis the activations' batch sharded (the example inputs and the
        tensors placed, not parameters nor folded constants)."""
        made = [tv for tv, _, _ in self.chosen.values() if tv.definition is not None]
        for tv in [*self.fusion.inputs, *made]:
            entry = self.chosen.get(id(tv))
            placements: list[MeshAxisPlacement] = [Replicate()] * self.mesh.rank
            if entry is not None:
                placements[self.tp] = entry[1]
            activation = tv.definition is not None or not (is_state(tv) or is_folded_constant(tv))
            if self.dp is not None and activation and tv.shape:
                placements[self.dp] = Shard(0)
            distribute(tv, self.mesh, placements)


def _input(fusion: Fusion, name: str) -> TensorView | None:
    return next((t for t in fusion.inputs if t.user_name == name), None)


def _contraction(weight: TensorView) -> tuple[str, TensorView, TensorView] | None:
    """(op, its output, its data operand) of the linear, matmul or embedding that reads
    the weight as its weight (through casts, copies and permutes), or None."""
    tv = weight
    for _ in range(8):
        if len(tv.uses) != 1:
            return None  # unused, or shared (tied weights): no one module's
        expr = tv.uses[0]
        op, ins = expr.op_name, expr.inputs
        if op == "linear" and len(ins) > 1 and ins[1] is tv:
            return op, expr.output, ins[0]
        if op == "embedding" and ins[0] is tv:
            return op, expr.output, ins[1]
        if op == "matmul" and tv in ins:
            return op, expr.output, ins[0] if ins[1] is tv else ins[1]
        if op not in _FOLLOWED:
            return None
        tv = expr.output
    return None


def _inside(tv: TensorView, m: str) -> bool:
    """True for a tensor made in module m or one of its submodules."""
    path = module_path(tv)
    return path == m or path.startswith(m + ".")


def _module_input(fusion: Fusion, m: str) -> TensorView | None:
    """The first tensor made outside module m (or a fusion input, not m's own
    parameter) that an expression made inside m reads."""
    for expr in fusion.exprs():
        if any(_inside(t, m) for t in expr.outputs):
            for t in expr.inputs:
                if t.definition is None and t.user_name and t.user_name.startswith(m + "."):
                    continue  # the module's own parameters
                if t.definition is None or not _inside(t, m):
                    return t
    return None


def _apply(
    placed: _Placements, fusion: Fusion, m: str, style: Style, sequence_dims: set[int], key: str
) -> None:
    weight, bias = _input(fusion, f"{m}.weight"), _input(fusion, f"{m}.bias")
    why = f"plan entry {key!r} ({style.kind})"
    if style.kind == "sequence":
        for p in (weight, bias):
            if p is not None:
                placed.put(p, Replicate(), why)
        x = _module_input(fusion, m)
        if x is None:
            raise FusionError(
                f"parallelize: {why}: no tensor enters module {m!r}; sequence parallelism "
                "needs a fusion from fl.from_torch (its tensors know their modules)"
            )
        placed.put(x, Shard(style.sequence_dim), why)
        return
    if weight is not None and not weight.uses and len(weight.shape) == 2:
        # a module the forward never calls: its parameters placed as a Linear's, as
        # parallelize_module places them whatever runs
        column = style.kind == "colwise"
        placed.put(weight, Shard(0 if column else 1), why)
        if bias is not None:
            placed.put(bias, Shard(0) if column else Replicate(), why)
        return
    found = None if weight is None else _contraction(weight)
    if found is None:
        raise FusionError(
            f"parallelize: {why}: module {m!r} has no weight read by a linear, matmul or "
            "embedding; colwise and rowwise shard nn.Linear and nn.Embedding"
        )
    op, out, data = found
    embedding = op == "embedding"
    if style.kind == "colwise":
        placed.put(weight, Shard(1 if embedding else 0), why)
        if bias is not None:
            placed.put(bias, Shard(0), why)
        default_in, default_out = Replicate(), None
    else:
        placed.put(weight, Shard(0 if embedding else 1), why)
        if bias is not None:
            placed.put(bias, Replicate(), why)
        sequence = Shard(min(sequence_dims)) if sequence_dims else Replicate()
        default_in, default_out = (Replicate() if embedding else Shard(-1)), sequence
    given_in = style.input_layout or default_in
    if data.definition is None and data in fusion.inputs and not isinstance(given_in, Replicate):
        placed.put(data, given_in, why)
    layout = style.output_layout if style.output_layout is not None else default_out
    if layout is not None and not (style.kind == "colwise" and layout == Shard(-1)):
        placed.put(out, layout, why)
