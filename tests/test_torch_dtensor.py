"""DTensor example inputs: fl.from_torch takes their placements as the fusion inputs'
(on torch's threaded process group, every rank a thread calling from_torch as SPMD code
does), and refuses a fake process group, whose DTensors hold rank 0's shard only."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the torch extra is not installed: pip install 'fuserlite[torch]'"
)

import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Replicate, Shard, distribute_tensor  # noqa: E402
from torch.testing._internal.distributed.multi_threaded_pg import (  # noqa: E402
    _install_threaded_pg,
    _uninstall_threaded_pg,
)
from torch_models import NormMLP  # noqa: E402

import fuserlite as fl  # noqa: E402


def on_threaded_ranks(world: int, body) -> dict[int, object]:
    """body(rank) on `world` threads of torch's threaded process group; their results."""
    _install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    store, results = dist.HashStore(), {}

    def rank_main(rank: int) -> None:
        dist.init_process_group("threaded", rank=rank, world_size=world, store=store)
        try:
            results[rank] = body(rank)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            results[rank] = exc
        finally:
            dist.destroy_process_group()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        _uninstall_threaded_pg()
    return results


@pytest.mark.parametrize(
    ("shape", "placements", "want"),
    [
        ((4,), [Shard(1)], (fl.Shard(1),)),
        ((2, 2), [Shard(0), Shard(1)], (fl.Shard(0), fl.Shard(1))),
        ((2, 2), [Replicate(), Shard(0)], (fl.Replicate(), fl.Shard(0))),
    ],
    ids=["1-D sequence", "2-D batch and sequence", "2-D replicated"],
)
def test_dtensor_inputs_give_their_placements(shape, placements, want) -> None:
    torch.manual_seed(0)
    model, full = NormMLP().eval(), torch.randn(2, 8, 16)
    names = ("dp", "tp") if len(shape) == 2 else None

    def body(rank: int):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        x = distribute_tensor(full, mesh, placements)
        return fl.from_torch(model, x)

    results = on_threaded_ranks(4, body)
    assert len(results) == 4
    for r in results.values():
        if isinstance(r, BaseException):
            raise r
    fusion, inputs = results[0]
    x = fusion.inputs[-1]
    assert x.user_name == "x" and x.placements == want
    assert x.mesh == fl.DeviceMesh(np.arange(4).reshape(shape).tolist())
    assert x.mesh.axis_names == names  # torch's mesh_dim_names
    np.testing.assert_array_equal(inputs[-1], full.numpy())  # the whole tensor, gathered
    assert all(str(r[0]) == str(fusion) for r in results.values())  # every rank alike
    (got,) = fl.FusionExecutor(fusion).run(inputs)
    np.testing.assert_allclose(got, model(full).detach().numpy(), rtol=2e-5, atol=2e-5)


def test_a_fake_process_group_is_refused() -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        x = distribute_tensor(torch.randn(8, 4), init_device_mesh("cpu", (4,)), [Shard(0)])
        with pytest.raises(fl.FuserliteError, match="fake process group.*gloo"):
            fl.from_torch(torch.nn.Linear(4, 2), x)
    finally:
        dist.destroy_process_group()


def test_partial_dtensor_inputs_are_refused() -> None:
    from torch.distributed.tensor import DTensor, Partial

    def body(rank: int):
        mesh = init_device_mesh("cpu", (2,))
        x = DTensor.from_local(torch.ones(4, 4), mesh, [Partial()])
        with pytest.raises(fl.FuserliteError, match="a Partial value is an op's output"):
            fl.from_torch(torch.nn.Linear(4, 2), x)

    for r in on_threaded_ranks(2, body).values():
        if isinstance(r, BaseException):
            raise r


def test_a_module_parallelized_by_torch_is_refused_with_the_way_round() -> None:
    """parallelize_module makes the parameters DTensors, which torch.export cannot
    trace: the message names one and says to give the plan to fl.parallelize."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    def body(rank: int):
        model = NormMLP().eval()
        plan = {"mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}
        parallelize_module(model, init_device_mesh("cpu", (2,)), plan)
        with pytest.raises(fl.FuserliteError, match=r"mlp\.fc1\.weight is a DTensor.*fl\.paral"):
            fl.from_torch(model, torch.randn(2, 8, 16))

    for r in on_threaded_ranks(2, body).values():
        if isinstance(r, BaseException):
            raise r
