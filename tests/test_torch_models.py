"""PyTorch models imported and sharded in PyTorch's tensor-parallel vocabulary: a GPT
block and an MLP unsharded, tensor-parallel (one Allreduce per row-parallel linear),
sequence-parallel (Megatron-SP's Allgather / ReduceScatter pairs) and 2-D with data
parallelism on a 2x4 mesh, each equal to torch's forward; an embedding vocab-parallel."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the torch extra is not installed: pip install 'fuserlite[torch]'"
)

from torch_models import LLAMA_TP, SP, TP, Block, LlamaBlock, NormMLP, TinyLM  # noqa: E402

import fuserlite as fl  # noqa: E402

MESH_8 = fl.DeviceMesh(list(range(8)))
MESH_2X4 = fl.DeviceMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
MLP_TP = {"mlp.fc1": "colwise", "mlp.fc2": "rowwise"}
MLP_SP = {**MLP_TP, "ln": "sequence"}


def _imported(model: torch.nn.Module, *example: torch.Tensor):
    """(fusion, inputs, torch's output): exported once, for every configuration."""
    torch.manual_seed(0)
    model = model.eval()
    fusion, inputs = fl.from_torch(model, *example)
    return fusion, inputs, model(*example).detach().numpy()


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(1)
    return _imported(Block(dim=32), torch.randn(2, 8, 32))


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(2)
    return _imported(NormMLP(), torch.randn(2, 8, 16))


def _run(imported, plan=None, mesh=None, dp_axis=None):
    """(outputs, communications) of a copy of the imported fusion, placed by `plan`."""
    fusion, inputs, want = imported
    copy, _ = fusion.clone()
    if mesh is not None:
        fl.parallelize(copy, mesh, plan, dp_axis=dp_axis)
    ex = fl.FusionExecutor(copy)
    out = ex.run(inputs)
    np.testing.assert_allclose(out[0], want, rtol=2e-5, atol=2e-5)
    return [s for s in ex.program.steps if hasattr(s, "kind")]


def _kinds(comms) -> list[str]:
    return [c.kind.name for c in comms]


CONFIGS = {
    # name: (plan, mesh, dp_axis, the block's communications, the MLP's)
    "unsharded": (None, None, None, [], []),
    "tensor-parallel": (TP, MESH_8, None, ["Allreduce"] * 2, ["Allreduce"]),
    "sequence-parallel": (
        SP,
        MESH_8,
        None,
        ["Allgather", "ReduceScatter"] * 2,
        ["Allgather", "ReduceScatter"],
    ),
    "2-D tensor-parallel": (TP, MESH_2X4, 0, ["Allreduce"] * 2, ["Allreduce"]),
    "2-D sequence-parallel": (
        SP,
        MESH_2X4,
        0,
        ["Allgather", "ReduceScatter"] * 2,
        ["Allgather", "ReduceScatter"],
    ),
}


@pytest.mark.parametrize("config", CONFIGS)
def test_gpt_block(block, config: str) -> None:
    plan, mesh, dp, kinds, _ = CONFIGS[config]
    comms = _run(block, plan, mesh, dp)
    assert _kinds(comms) == kinds
    if mesh is MESH_2X4:  # over the tensor-parallel axis: teams of 4 along DIDx
        assert all(c.teams == [(0, 1, 2, 3), (4, 5, 6, 7)] for c in comms)


@pytest.mark.parametrize("config", CONFIGS)
def test_mlp(mlp, config: str) -> None:
    _, mesh, dp, _, kinds = CONFIGS[config]
    plan = None if mesh is None else (MLP_SP if "sequence" in config else MLP_TP)
    assert _kinds(_run(mlp, plan, mesh, dp)) == kinds


def test_the_plan_places_parameters_as_dtensor_does(block) -> None:
    fusion, _, _ = block
    copy, _ = fusion.clone()
    fl.parallelize(copy, MESH_8, SP)
    by_name = {t.user_name: t for t in copy.inputs}
    shard0, shard1, whole = (fl.Shard(0),), (fl.Shard(1),), (fl.Replicate(),)
    assert by_name["attn.q.weight"].placements == shard0 == by_name["attn.q.bias"].placements
    assert by_name["attn.proj.weight"].placements == shard1
    assert by_name["attn.proj.bias"].placements == whole == by_name["ln1.weight"].placements
    assert by_name["x"].placements == shard1  # the sequence axis, into ln1


def test_torch_parallel_styles_read_as_the_names(block) -> None:
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )

    plan = {k: ColwiseParallel() for k, v in SP.items() if v == "colwise"}
    plan |= {k: RowwiseParallel(output_layouts=Shard(1)) for k, v in SP.items() if v == "rowwise"}
    plan |= {"ln1": SequenceParallel(), "ln2": SequenceParallel()}
    assert _kinds(_run(block, plan, MESH_8)) == ["Allgather", "ReduceScatter"] * 2
    plain = {**plan, "attn.proj": RowwiseParallel(), "mlp.fc2": RowwiseParallel()}
    del plain["ln1"], plain["ln2"]
    assert _kinds(_run(block, plain, MESH_8)) == ["Allreduce"] * 2


@pytest.mark.parametrize(("style", "kinds"), [("rowwise", ["Allreduce"]), ("colwise", [])])
def test_embedding_vocab_and_embedding_parallel(style: str, kinds: list[str]) -> None:
    """wte rowwise: each device holds a slice of the vocabulary, partial sums, one
    Allreduce (Megatron's vocab-parallel embedding); colwise: a slice of each row."""
    torch.manual_seed(3)
    model = TinyLM().eval()
    idx = torch.randint(0, 40, (2, 8))
    fusion, inputs = fl.from_torch(model, idx)
    fl.parallelize(fusion, MESH_8, {"wte": style})
    ex = fl.FusionExecutor(fusion)
    (got,) = ex.run(inputs)
    np.testing.assert_allclose(got, model(idx).detach().numpy(), rtol=2e-5, atol=2e-5)
    assert [s.kind.name for s in ex.program.steps if hasattr(s, "kind")][: len(kinds)] == kinds


def test_named_mesh_axes_pick_the_plans_and_the_batchs_axes(mlp) -> None:
    """tp_axis and dp_axis by name: the plan on "tp" (here the first axis), the batch
    on "dp"; the collective's teams run along tp."""
    fusion, inputs, want = mlp
    copy, _ = fusion.clone()
    mesh = fl.DeviceMesh([[0, 1], [2, 3], [4, 5], [6, 7]], axis_names=("tp", "dp"))
    fl.parallelize(copy, mesh, MLP_TP, tp_axis="tp", dp_axis="dp")
    by_name = {t.user_name: t for t in copy.inputs}
    assert by_name["mlp.fc1.weight"].placements == (fl.Shard(0), fl.Replicate())
    assert by_name["x"].placements == (fl.Replicate(), fl.Shard(0))
    ex = fl.FusionExecutor(copy)
    np.testing.assert_allclose(ex.run(inputs)[0], want, rtol=2e-5, atol=2e-5)
    (allreduce,) = [s for s in ex.program.steps if hasattr(s, "kind")]
    assert allreduce.teams == [(0, 2, 4, 6), (1, 3, 5, 7)]
    with pytest.raises(fl.FusionError, match=r"parallelize tp_axis.*DIDy \(tp\)"):
        fl.parallelize(copy, mesh, MLP_TP, tp_axis="model")


def test_plan_mistakes_name_the_entry_and_the_fix(block) -> None:
    fusion, _, _ = block
    copy, _ = fusion.clone()
    with pytest.raises(fl.FusionError, match=r"'attn\.qq' names no module.*attn\.q"):
        fl.parallelize(copy, MESH_8, {"attn.qq": "colwise"})
    with pytest.raises(fl.FusionError, match="use one of 'colwise'"):
        fl.parallelize(copy, MESH_8, {"attn.q": "columnwise"})
    with pytest.raises(fl.FusionError, match="no weight read by a linear"):
        fl.parallelize(copy, MESH_8, {"ln1": "colwise"})
    with pytest.raises(fl.FusionError, match="dp_axis and tp_axis"):
        fl.parallelize(copy, MESH_2X4, TP, dp_axis=1)


def test_wildcards_match_one_part() -> None:
    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([NormMLP(), NormMLP()])

        def forward(self, x):
            return self.layers[1](self.layers[0](x))

    torch.manual_seed(4)
    model, x = Stack().eval(), torch.randn(2, 8, 16)
    fusion, inputs = fl.from_torch(model, x)
    fl.parallelize(fusion, MESH_8, {"layers.*.mlp.fc1": "colwise", "layers.*.mlp.fc2": "rowwise"})
    ex = fl.FusionExecutor(fusion)
    np.testing.assert_allclose(ex.run(inputs)[0], model(x).detach().numpy(), rtol=2e-5, atol=2e-5)
    assert [s.kind.name for s in ex.program.steps if hasattr(s, "kind")] == ["Allreduce"] * 2


def test_a_module_the_forward_never_calls_is_placed_as_a_linear() -> None:
    class Spare(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used, self.spare = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.used(x)

    model, x = Spare(), torch.randn(2, 4)
    fusion, inputs = fl.from_torch(model, x)
    fl.parallelize(fusion, fl.DeviceMesh([0, 1]), {"used": "colwise", "spare": "rowwise"})
    by_name = {t.user_name: t for t in fusion.inputs}
    assert by_name["spare.weight"].placements == (fl.Shard(1),)
    (got,) = fl.FusionExecutor(fusion).run(inputs)
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("dtype", "ulps"), [("bfloat16", 2), ("float16", 2), ("float64", 4)])
def test_a_tensor_parallel_block_in_other_dtypes_is_torchs_within_ulps_of_its_scale(
    dtype, ulps
) -> None:
    torch.manual_seed(1)
    model = Block(dim=32).eval().to(getattr(torch, dtype))
    x = torch.randn(2, 8, 32, dtype=getattr(torch, dtype))
    fusion, inputs = fl.from_torch(model, x)
    fl.parallelize(fusion, MESH_8, TP)
    (got,) = fl.FusionExecutor(fusion).run(inputs)
    want = model(x).detach().to(torch.float64).numpy()
    # ulps of the largest value: the residual sums cancel, small elements carry its error
    top = np.abs(want).max().astype(fl.DType.parse(dtype).numpy)
    assert np.abs(got.astype(np.float64) - want).max() <= ulps * float(np.spacing(top))


def test_imported_inputs_are_distributed_by_their_names(mlp) -> None:
    """fl.distribute on the imported fusion, as DTensor users place parameters."""
    fusion, inputs, want = mlp
    copy, _ = fusion.clone()
    mesh = fl.DeviceMesh([0, 1, 2, 3])
    for name, where in (("mlp.fc1.weight", 0), ("mlp.fc1.bias", 0), ("mlp.fc2.weight", 1)):
        fl.distribute(name, mesh, [fl.Shard(where)], fusion=copy)
    for t in copy.inputs:
        if t.mesh is None:
            fl.distribute(t, mesh, [fl.Replicate()])
    ex = fl.FusionExecutor(copy)
    np.testing.assert_allclose(ex.run(inputs)[0], want, rtol=2e-5, atol=2e-5)
    assert [s.kind.name for s in ex.program.steps if hasattr(s, "kind")] == ["Allreduce"]


def _communications(ex: fl.FusionExecutor) -> list[str]:
    return [s.kind.name for s in ex.program.steps if hasattr(s, "kind")]


def test_a_sequentials_numbered_modules_import_and_take_a_plan() -> None:
    """nn.Sequential names its parameters 0.weight, 2.weight: from_torch names them
    _0.weight (a name starts with a letter or _), and the plan's "0" finds them."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)
    ).eval()
    x = torch.randn(4, 16)
    fusion, inputs = fl.from_torch(model, x)
    assert [t.user_name for t in fusion.inputs] == [
        "_0.weight",
        "_0.bias",
        "_2.weight",
        "_2.bias",
        "input",
    ]
    assert fl.parse(fl.to_fus(fusion, user_names=True)).inputs[0].user_name == "_0.weight"
    fl.parallelize(fusion, MESH_8, {"0": "colwise", "2": "rowwise"})
    by_name = {t.user_name: t for t in fusion.inputs}
    assert by_name["_2.weight"].placements == (fl.Shard(1),)
    ex = fl.FusionExecutor(fusion)
    np.testing.assert_allclose(ex.run(inputs)[0], model(x).detach().numpy(), rtol=2e-5, atol=2e-5)
    assert _communications(ex) == ["Allreduce"]


def test_data_parallelism_leaves_a_top_level_modules_parameters_whole() -> None:
    """A parameter of the module itself (`scale`, no dot in its name) is state, not an
    activation: replicated on the data-parallel axis, only the example input's batch split."""

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.randn(8, 16))
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            return self.fc(x) * self.scale

    torch.manual_seed(6)
    model, x = Scaled().eval(), torch.randn(8, 16)
    fusion, inputs = fl.from_torch(model, x)
    fl.parallelize(fusion, MESH_2X4, {"fc": "colwise"}, dp_axis=0)
    by_name = {t.user_name: t for t in fusion.inputs}
    assert by_name["scale"].placements == (fl.Replicate(), fl.Replicate())
    assert by_name["x"].placements == (fl.Shard(0), fl.Replicate())
    ex = fl.FusionExecutor(fusion)
    np.testing.assert_allclose(ex.run(inputs)[0], model(x).detach().numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(("plan", "kinds"), [(None, []), (LLAMA_TP, ["Allreduce"] * 2)])
def test_a_llama_style_block_hand_written_rmsnorm_and_rotary(plan, kinds) -> None:
    """pow, rsqrt, sin and cos on the fusion's own tensors (the positions are an input),
    unsharded and tensor-parallel over 4 devices (the rotary tables broadcast over the
    heads each device holds)."""
    torch.manual_seed(7)
    model, x, positions = LlamaBlock().eval(), torch.randn(2, 8, 32), torch.arange(8)
    fusion, inputs = fl.from_torch(model, x, positions)
    ops = {e.op_name for e in fusion.exprs()}
    assert {"pow", "rsqrt", "sin", "cos"} <= ops
    if plan is not None:
        fl.parallelize(fusion, fl.DeviceMesh([0, 1, 2, 3]), plan)
    ex = fl.FusionExecutor(fusion)
    (got,) = ex.run(inputs)
    np.testing.assert_allclose(got, model(x, positions).detach().numpy(), rtol=2e-5, atol=2e-5)
    assert _communications(ex) == kinds
