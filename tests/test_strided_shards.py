"""nvFuser's shardings that no contiguous chunk holds, translated (issue 24, part 5).

nvFuser's own multi-device tests shard a tensor so that a device holds a strided
or block-cyclic set of rows: DIDx on the inner part of an inner split
(`test_inner_split`: device r holds t.reshape(3, d)[:, r]), on a split of the inner
part of a split whose outer part is serial (`test_nonoutermost_split`: t.reshape(2,
d, 3)[:, r, :]), DIDy and DIDx on splits of the parts of an inner split
(`test_2d_sharded_vector`), and DIDx on a merge with a broadcast axis. fuserlite's
layouts are boxes (plan.blocks: each device a contiguous chunk per axis), so each is
refused before any pass runs, with a VerifyError naming the tensor, the axis and a
schedule that works; these tests hold the refusals to that, and check the rows the
inner-split message says a device would hold against nvFuser's layout.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.types import ParallelType

DIDx, DIDy = ParallelType.DIDx, ParallelType.DIDy


def _refusal(shape, mesh, schedule) -> str:
    with fl.Fusion() as f:
        x = fl.tensor(shape, name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        schedule(x)
        f.add_output(fl.exp(x))
    with pytest.raises(fl.VerifyError) as info:
        fl.lower(f)
    return str(info.value)


def test_inner_split():
    d = 2
    says = _refusal(
        [3 * d],
        fl.DeviceMesh.for_num_devices(d),
        lambda x: (x.split(0, d), x.axis(1).parallelize(DIDx)),
    )
    assert "x (T0) axis 1 (ideviceIdx.x3{2}): it is the inner part of a split" in says
    assert "device i would hold rows i, i + 2, i + 4, ... (a strided sharding)" in says
    assert "outer_split the axis by 2" in says
    # the rows the message names are nvFuser's layout: t.reshape(3, d)[:, r]
    t = np.arange(3 * d)
    for r in range(d):
        assert list(t.reshape(3, d)[:, r]) == [r, r + 2, r + 4]


def test_inner_split_uneven_extent_is_refused_alike():
    """7 rows over 2 devices: nvFuser's devices would hold 0 2 4 6 and 1 3 5."""
    says = _refusal(
        [7],
        fl.DeviceMesh.for_num_devices(2),
        lambda x: (x.split(0, 2), x.axis(1).parallelize(DIDx)),
    )
    assert "x (T0) axis 1" in says and "a strided sharding" in says


def test_nonoutermost_split():
    d = 2
    says = _refusal(
        [2 * d * 3],
        fl.DeviceMesh.for_num_devices(d),
        lambda x: (x.outer_split(0, 2), x.outer_split(1, d), x.axis(1).parallelize(DIDx)),
    )
    assert "x (T0) axis 1 (ideviceIdx.x4{2}): it splits a part of an axis that a split made" in (
        says
    )
    assert "outer_split the axis by 2 and parallelize the outer part first" in says


def test_2d_sharded_vector():
    says = _refusal(
        [2 * 2 * 2 * 3],
        fl.DeviceMesh([[0, 1], [2, 3]]),
        lambda x: (
            x.split(0, 2 * 3),
            x.outer_split(0, 2),
            x.axis(0).parallelize(DIDy),
            x.outer_split(2, 2),
            x.axis(2).parallelize(DIDx),
        ),
    )
    assert "x (T0) axis 0 (ideviceIdx.y4{2}): it splits a part of an axis that a split made" in (
        says
    )


@pytest.mark.parametrize("shape", [[8, 1], [1, 8]], ids=["broadcast inner", "broadcast outer"])
def test_merge_with_broadcast(shape):
    says = _refusal(
        shape,
        fl.DeviceMesh.for_num_devices(2),
        lambda x: (x.merge(0, 1), x.outer_split(0, 2), x.axis(0).parallelize(DIDx)),
    )
    assert "x (T0) axis 0 (ideviceIdx.x5{2}): it is a merge with a broadcast axis" in says
    assert "shard the other axis before the merge" in says
