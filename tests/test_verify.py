"""The validator: duplicate parallel types, DID without a mesh, indivisible shardings."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite import models

P = fl.ParallelType


def _seed_fusion(shard_y: bool) -> fl.Fusion:
    """x[2] + y[1] on DeviceMesh{0 1}: seed 004's two parallelizations."""
    return models.add_broadcast(2, shard_y)


@pytest.mark.parametrize("shard_y", [True, False], ids=["parallelized", "not_parallelized"])
def test_accepts_seed_004_fusions(shard_y: bool) -> None:
    fl.verify(_seed_fusion(shard_y))


def test_rejects_two_loop_axes_with_the_same_parallel_type() -> None:
    """Seed 004's T1: three bDIDx loop axes (set directly; the primitive refuses them)."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(2)
        y = fl.tensor([1])
        y.set_device_mesh(mesh)
        fusion.add_input(y)
        fusion.add_output(fl.set(y))
        y.split(0, 128)
        y.split(0, 1)
        for ax in y.loop:
            ax.parallel_type = P.DIDx
    with pytest.raises(fl.VerifyError) as info:
        fl.verify(fusion)
    message = str(info.value)
    assert (
        "T0: found multiple loop IterDomains with the same parallel type (deviceIdx.x): "
        "bdeviceIdx.x4{1}, bdeviceIdx.x5{1}, bdeviceIdx.x3{128}"
    ) in message


def test_rejects_duplicate_thread_types_too() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4, 4])
        fusion.add_input(x)
        fusion.add_output(fl.neg(x))
        x.axis(0).parallel_type = P.TIDx
        x.axis(1).parallel_type = P.TIDx
    with pytest.raises(
        fl.VerifyError,
        match=r"same parallel type \(threadIdx.x\): ithreadIdx.x0\{4\}, ithreadIdx.x1\{4\}",
    ):
        fl.verify(fusion)


def test_rejects_did_without_any_mesh() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4])
        fusion.add_input(x)
        fusion.add_output(fl.neg(x))
        x.axis(0).parallelize(P.DIDx)
    with pytest.raises(fl.VerifyError, match=r"T0 axis 0 \(ideviceIdx.x0\{4\}\): .*no device mesh"):
        fl.verify(fusion)


def test_accepts_did_without_mesh_when_a_neighbour_has_one() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([2])
        x.set_device_mesh(fl.DeviceMesh.for_num_devices(2))
        fusion.add_input(x)
        out = fl.neg(x)
        fusion.add_output(out)
        out.axis(0).parallelize(P.DIDx)
    fl.verify(fusion)
    with pytest.raises(fl.VerifyError, match=r"T1 axis 0 .*no device mesh"):
        fl.verify(fusion, require_mesh=True)


def sharded_neg(n: int, devices: int, split) -> fl.Fusion:
    """neg(x), x[n] on `devices` devices, split by `split(x)` and parallelized on axis 0."""
    with fl.Fusion() as fusion:
        x = fl.tensor([n])
        x.set_device_mesh(fl.DeviceMesh.for_num_devices(devices))
        fusion.add_input(x)
        fusion.add_output(fl.neg(x))
        split(x)
        x.axis(0).parallelize(P.DIDx)
    return fusion


def test_accepts_sharded_extent_the_mesh_does_not_divide() -> None:
    fl.verify(sharded_neg(5, 2, lambda x: x.outer_split(0, 2)))  # torch.chunk: 3 rows and 2


def test_rejects_an_inner_split_whose_chunks_are_not_torch_chunks() -> None:
    # 2 devices of 6 rows and 4; torch.chunk gives 5 and 5
    fusion = sharded_neg(10, 2, lambda x: x.split(0, 6))
    with pytest.raises(fl.VerifyError, match=r"T0 axis 0 .*chunks of 6 .*ceil\(10/2\) = 5"):
        fl.verify(fusion)


def test_accepts_outer_split_sharding() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([6, 3])
        x.set_device_mesh(fl.DeviceMesh.for_num_devices(3))
        fusion.add_input(x)
        fusion.add_output(fl.neg(x))
        x.outer_split(0, 3)
        x.axis(0).parallelize(P.DIDx)
    fl.verify(fusion)


def test_lists_every_problem() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4, 4])
        fusion.add_input(x)
        out = fl.neg(x)
        fusion.add_output(out)
        for ax in (*x.loop, *out.loop):
            ax.parallel_type = P.BIDx
    with pytest.raises(fl.VerifyError) as info:
        fl.verify(fusion)
    assert "T0: found multiple" in str(info.value) and "T1: found multiple" in str(info.value)


def test_rejects_reading_a_tensor_that_is_not_an_input() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4])
        fusion.add_output(fl.neg(x))
    with pytest.raises(fl.VerifyError, match=r"T0 is read by T1 = neg\(...\) but is not a fusion"):
        fl.verify(fusion)


def test_a_fusion_without_outputs_is_rejected() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([2])
        fusion.add_input(x)
    with pytest.raises(fl.VerifyError, match="no outputs; mark one with fusion.add_output"):
        fl.verify(fusion)
