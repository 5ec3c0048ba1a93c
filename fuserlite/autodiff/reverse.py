"""Reverse-mode differentiation of a fusion: fl.grad and fl.vjp.

The derived fusion is a copy of the forward (the same inputs, sharded alike) with
the backward appended: expressions are visited in reverse topological order, and
each op's vector-Jacobian rule (`OpDef.vjp`, in the op's own definition) builds its
operands' cotangents from its outputs' with ordinary ops. A tensor read by several
expressions gets the sum of their cotangents (in float32 for float16 and bfloat16,
rounded once); a cotangent has its tensor's dtype. Each gradient output is placed
as its input (DTensor's rule: a gradient lies as its parameter), so the planner
puts in the communications of the training step: the data-parallel Allreduce, the
ReduceScatter of FSDP, tensor parallelism's Allreduce of the input gradient.

A Set that reshards a fusion input (FSDP's all-gather of a weight) is done again
where the backward reads it (`regather=True`, FSDP's choice: the gathered copy is
not kept alive from forward to backward); `regather=False` reads the forward's copy.
The derived fusion is built with the public builders only, so it prints, writes as
`.fus`, lowers and runs like any fusion.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import completed_placement, is_resharding
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, MemoryType
from fuserlite.ops.casts import cast
from fuserlite.ops.common import tensor
from fuserlite.ops.gradients import full, zeros
from fuserlite.ops.pointwise import add
from fuserlite.ops.registry import definition
from fuserlite.ops.views import set as set_
from fuserlite.passes.propagate_shardings import PropagateShardings
from fuserlite.schedule.shard import shard_axis


def grad(fusion: Fusion, wrt: Sequence[str], *, regather: bool = True) -> Fusion:
    """A new fusion with fusion's inputs whose outputs are its first output (a scalar
    loss) and the loss's gradient with respect to each input named in `wrt`
    (`grad_<name>`, placed as that input)."""
    args.instance(fusion, Fusion, "grad", "fusion", "a Fusion")
    if not fusion.outputs:
        raise FusionError("grad: the fusion has no outputs; its first output is the loss")
    new, _ = fusion.clone()
    targets = _targets(new, wrt, "grad")
    loss = new.outputs[0]
    if loss.shape != () or not loss.dtype.is_float:
        raise FusionError(
            f"grad: the first output {loss.name} is {loss.dtype.name}{list(loss.shape)}; the "
            "loss must be a float scalar (sum or mean it); for the cotangents of other "
            "outputs use fl.vjp"
        )
    seed = full(loss, (), 1.0, loss.dtype)
    _place_like(seed, loss)
    grads = _Backward(new, regather).gradients({loss: seed}, targets)
    _set_outputs(new, [loss, *grads])
    return new


def vjp(fusion: Fusion, wrt: Sequence[str], *, regather: bool = True) -> Fusion:
    """A new fusion taking fusion's inputs and then one cotangent per float output
    (`cotangent_<name>`, placed as the output), giving fusion's outputs and the
    vector-Jacobian product with respect to each input named in `wrt` (`grad_<name>`)."""
    args.instance(fusion, Fusion, "vjp", "fusion", "a Fusion")
    new, _ = fusion.clone()
    targets = _targets(new, wrt, "vjp")
    outputs = list(new.outputs)
    seeds: dict[TensorView, TensorView] = {}
    with new:
        for out in outputs:
            if out.dtype.is_float:
                seeds[out] = tensor(out.shape, out.dtype, name=f"cotangent_{_base(out)}")
                _place_like(seeds[out], out)
                new.add_input(seeds[out])
    if not seeds:
        raise FusionError("vjp: the fusion has no float output to take a cotangent of")
    grads = _Backward(new, regather).gradients(seeds, targets)
    _set_outputs(new, [*outputs, *grads])
    return new


def _base(tv: TensorView) -> str:
    """The user's name of a tensor, or its T number."""
    return tv.user_name or tv.ir_name


def _targets(fusion: Fusion, wrt: Sequence[str], who: str) -> list[TensorView]:
    """The float inputs `wrt` names (user names, or T numbers), in its order."""
    if isinstance(wrt, str) or not args.is_sequence(wrt) or not wrt:
        raise args.fail(who, "wrt", "a non-empty list of input names", wrt)
    by_name = {}
    for t in fusion.inputs:
        by_name[t.ir_name] = t
        if t.user_name is not None:
            by_name[t.user_name] = t
    known = ", ".join(_base(t) for t in fusion.inputs) or "none"
    targets: list[TensorView] = []
    for name in wrt:
        t = by_name.get(name) if isinstance(name, str) else None
        if t is None:
            raise FusionError(
                f"{who}: {name!r} is not an input of the fusion (its inputs: {known})"
            )
        if not t.dtype.is_float:
            raise FusionError(
                f"{who}: input {t.name} is {t.dtype.name}; only float inputs have gradients"
            )
        if any(t is u for u in targets):
            raise FusionError(f"{who}: {name!r} is named twice in wrt")
        targets.append(t)
    return targets


Where = tuple[DeviceMesh, Placement]  # a mesh and a placement on a tensor's data axes


def _where(tv: TensorView) -> Where | None:
    """tv's mesh and its completed placement on its data axes (None: no mesh)."""
    if tv.mesh is None:
        return None
    mesh, complete = completed_placement(tv)
    return mesh, Placement(
        complete.mesh_rank, tuple(complete.shards[li] for li in tv.data_positions())
    )


def _place(tv: TensorView, where: Where | None) -> None:
    """Give tv (unsharded) a mesh and a placement on its data axes."""
    if where is None:
        return
    mesh, data = where
    tv.set_device_mesh(mesh)
    for li, axes in zip(tv.data_positions(), data.shards):
        for a in axes:  # outer splits even of an axis of the mesh's size: resizable
            shard_axis(tv, li, mesh, mesh.parallel_types[a], whole=False)


def _place_like(tv: TensorView, like: TensorView) -> None:
    """Give tv (unsharded) like's mesh and completed placement on its data axes."""
    _place(tv, _where(like))


def _forward_placements(fusion: Fusion) -> dict[int, Where]:
    """{id of a tensor: where the forward puts it}: propagate-shardings on a copy, so
    that the fusion itself keeps only the shardings it was given."""
    copy, mapping = fusion.clone()
    PropagateShardings().run(copy)
    found = {}
    for t in fusion.tensors_created:
        where = _where(mapping[t])
        if where is not None:
            found[id(t)] = where
    return found


def _set_outputs(fusion: Fusion, outputs: list[TensorView]) -> None:
    """Make `outputs` the fusion's outputs, the old ones local unless they are inputs."""
    for t in fusion.outputs:
        if not t.is_fusion_input:
            t.memory_type = MemoryType.LOCAL
    fusion.outputs = []
    for t in outputs:
        fusion.add_output(t)


_HALF = (DType.float16, DType.bfloat16)


class _Backward:
    """One reverse sweep over a fusion's expressions, appending the backward to it."""

    def __init__(self, fusion: Fusion, regather: bool) -> None:
        self.fusion = fusion
        self.regather = regather
        # Each cotangent lies as its tensor does in the forward (DTensor's rule), so the
        # backward is as sharded as the forward and a partial sum is completed in the
        # place its consumers need (a ReduceScatter, not an Allreduce and a slice).
        self.placements = _forward_placements(fusion)
        self.first = fusion.tensors_created[-1].number + 1  # the backward's tensors from here
        self.parts: dict[int, list[TensorView]] = {}  # tensor id -> cotangent addends
        self.regathered: dict[int, TensorView] = {}  # a gathered input's backward copy

    def gradients(
        self, seeds: dict[TensorView, TensorView], targets: list[TensorView]
    ) -> list[TensorView]:
        """The cotangents of `targets` given those of the seeded outputs, placed as the
        targets and named grad_<name>."""
        exprs = list(self.fusion.exprs())  # before the backward adds its own
        depends = {id(t) for t in targets}
        for expr in exprs:
            if any(id(t) in depends for t in expr.inputs):
                depends.update(id(t) for t in expr.outputs)
        for out, seed in seeds.items():
            self.parts.setdefault(id(out), []).append(seed)
        with self.fusion:  # constants (iota) are made in the active fusion
            for expr in reversed(exprs):
                if any(id(t) in depends for t in expr.inputs):
                    self._visit(expr, depends)
            grads = []
            for t in targets:
                g = self._total(t)
                g = zeros(t, t.shape) if g is None else g
                mine = self._fresh(g) and _where(g) == _where(t)
                if not mine or any(g is h for h in grads):
                    g = set_(g)  # a tensor of its own to place and name
                    _place_like(g, t)
                g.user_name = f"grad_{_base(t)}"
                grads.append(g)
        return grads

    def _fresh(self, tv: TensorView) -> bool:
        """True for a tensor the backward made (not a forward tensor or a seed)."""
        return tv.number >= self.first and not tv.is_fusion_input

    def _visit(self, expr: Expr, depends: set[int]) -> None:
        """Add the cotangents of expr's operands that depend on the targets."""
        grads = [self._total(t) for t in expr.outputs]
        if all(g is None for g in grads):
            return
        d = definition(expr)
        if d is None or d.vjp is None:
            names = ", ".join(t.name for t in expr.outputs)
            raise FusionError(
                f"{expr.op_name} ({names}) has no vjp rule, so the gradient cannot pass "
                "through it; differentiate with respect to inputs it does not depend on, or "
                "give its OpDef a vjp"
            )
        operands = expr.operands()
        read = [self._primal(x) if isinstance(x, TensorView) else x for x in operands]
        outputs = [self._primal(t) for t in expr.outputs]
        for x, g in zip(operands, d.vjp(expr, read, outputs, grads)):
            if g is None or not isinstance(x, TensorView) or id(x) not in depends:
                continue
            if not x.dtype.is_float:
                continue  # integers and bools carry no gradient
            if tuple(g.shape) != tuple(x.shape):
                raise FusionError(
                    f"{expr.op_name}'s vjp rule gave {x.name} a cotangent of shape "
                    f"{list(g.shape)}, not its shape {list(x.shape)}"
                )
            self.parts.setdefault(id(x), []).append(g)

    def _total(self, tv: TensorView) -> TensorView | None:
        """tv's cotangent: the sum of its addends in tv's dtype (half ones added in
        float32), worked out once, when every reader has given its part; each new
        tensor of it placed as tv is in the forward."""
        parts = self.parts.get(id(tv))
        if not parts:
            return None
        # Placed as tv, but a Set's output: its cotangent is the Set's input's, placed
        # there (FSDP's gathered weight: the gradient reduce-scattered to the shards).
        is_set = tv.definition is not None and tv.definition.op_name == "set"
        where = None if is_set else _where(tv) or self.placements.get(id(tv))

        def placed(g: TensorView) -> TensorView:
            if self._fresh(g) and g.mesh is None:
                _place(g, where)
            return g

        if len(parts) > 1:
            # each partial sum completed where the total lies (a ReduceScatter each)
            total = None
            for p in parts:
                p = placed(cast(p, DType.float32) if p.dtype in _HALF else p)
                total = p if total is None else placed(add(total, p))
            parts[:] = [total]
        if parts[0].dtype is not tv.dtype:
            parts[0] = cast(parts[0], tv.dtype)
        return placed(parts[0])

    def _primal(self, tv: TensorView) -> TensorView:
        """The forward value as the backward reads it: a resharding Set of an input is
        done again (regather), else the forward's own tensor."""
        d = tv.definition
        if not (self.regather and d is not None and d.op_name == "set"):
            return tv
        source = d.inputs[0]
        if not source.is_fusion_input or tv.mesh is None or not is_resharding(d):
            return tv
        again = self.regathered.get(id(tv))
        if again is None:
            again = self.regathered[id(tv)] = set_(source)
            again.user_name = tv.user_name  # the same value, gathered again
            _place(again, _where(tv))
        return again
