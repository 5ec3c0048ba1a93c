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


# -- the structural checks as a fact of the domain (verify.domain_is_valid) -----------
MESH2 = fl.DeviceMesh.for_num_devices(2)


def _tensor(shape, mesh=MESH2):
    with fl.Fusion():
        x = fl.tensor(shape)
        if mesh is not None:
            x.set_device_mesh(mesh)
    return x


def _bad(edit, shape=(8, 16), mesh=MESH2):
    def make():
        x = _tensor(list(shape), mesh)
        edit(x)
        return x

    return make


def _slot(ax, pt) -> None:
    ax.parallel_type = pt  # the unchecked setter: the primitive would refuse most of these


BAD_TENSORS = {
    "two TIDx": _bad(lambda x: (_slot(x.axis(0), P.TIDx), _slot(x.axis(1), P.TIDx))),
    "two DIDx after a split": _bad(
        lambda x: (x.outer_split(0, 2), _slot(x.axis(0), P.DIDx), _slot(x.axis(1), P.DIDx))
    ),
    "TIDx over 1024": _bad(lambda x: _slot(x.axis(0), P.TIDx), shape=(2048,)),
    "DIDx without a mesh": _bad(lambda x: _slot(x.axis(0), P.DIDx), mesh=None),
    "DIDx on an axis of 8 over 2 devices": _bad(lambda x: _slot(x.axis(0), P.DIDx)),
    "DIDy on a mesh of rank 1": _bad(lambda x: (x.outer_split(0, 2), _slot(x.axis(0), P.DIDy))),
    "DIDx on a merge": _bad(lambda x: (x.merge(0), x.split(0, 2), _slot(x.axis(0), P.DIDx))),
    "inner split of 10 by 6 for chunks of 5": _bad(
        lambda x: (x.split(0, 6), _slot(x.axis(0), P.DIDx)), shape=(10,)
    ),
    "loop axis no transform made": _bad(
        lambda x: setattr(x, "domain", x.split(0, 2).domain.with_loop((0, 1)))
    ),
    "loop axis dropped": _bad(
        lambda x: setattr(x, "domain", x.split(0, 2).domain.with_loop((2, 3)))
    ),
    "an axis split twice": _bad(
        lambda x: setattr(
            x,
            "domain",
            fl.ir.TensorDomain.made(
                (*x.domain.axes, *x.domain.split(0, 2).axes[2:], *x.domain.split(0, 4).axes[2:]),
                2,
                (*x.domain.split(0, 2).transforms, fl.ir.Split(0, 4, True, 4, 5)),
                (1, 2, 4, 5),
                None,
                x.domain.contiguity,
            ),
        )
    ),
}


@pytest.mark.parametrize("bad", BAD_TENSORS, ids=str)
def test_the_checks_as_a_fact_say_no_wherever_the_checks_find_a_problem(bad) -> None:
    """verify.tensor_problems asks the fact first and the checks one by one (for their
    messages) only where it says no: it must say no wherever they find a problem."""
    import importlib

    from fuserlite.printer import Namer

    verify_module = importlib.import_module("fuserlite.verify.fusion")
    x = BAD_TENSORS[bad]()
    namer = Namer(x.fusion)
    problems = verify_module._domain_problems(x, namer, False)
    assert problems, "the case must be invalid"
    assert not verify_module.domain_is_valid(x.domain, x.mesh, False)
    assert verify_module.tensor_problems(x, namer, False) == problems


def test_the_fact_finds_every_tensor_of_a_scheduled_program_valid() -> None:
    from fuserlite.models import many_outputs
    from fuserlite.verify.fusion import domain_is_valid

    program = fl.lower(many_outputs(5))
    tensors = program.fusion.tensors()
    assert any(tv.domain.transforms for tv in tensors)
    assert all(domain_is_valid(tv.domain, tv.mesh, False) for tv in tensors)


def _one_output_changed(change) -> tuple[str, str, str]:
    """A lowered program of outputs `x + k` alike, one of them changed: the validator's
    message, the changed output's name and a neighbour's."""
    from fuserlite.models import many_outputs

    program = fl.lower(many_outputs(3))
    good, bad = program.fusion.outputs[0], program.fusion.outputs[1]
    assert good.domain is bad.domain
    change(bad)
    with pytest.raises(fl.VerifyError) as err:
        fl.verify_program(program)
    return str(err.value), bad.name, good.name


def _axis_replaced(tv, find, make) -> None:
    """tv's domain with the axis `find(axis)` picks made again by `make(axis)`."""
    dom = tv.domain
    p = next(k for k, ax in enumerate(dom.axes) if find(ax))
    axes = tuple(make(ax) if k == p else ax for k, ax in enumerate(dom.axes))
    tv.domain = fl.ir.TensorDomain.made(
        axes, dom.n_logical, dom.transforms, dom.loop_positions, None, dom.contiguity
    )


MUTATIONS = {
    "logical extent": (
        lambda tv: _axis_replaced(tv, lambda ax: ax.extent == 8, lambda ax: fl.IterDomain(6)),
        "chunks are ceil",
    ),
    "parallel type twice": (
        lambda tv: _slot(next(a for a in tv.loop if a.is_device_parallel), P.TIDx),
        "multiple loop IterDomains with the same parallel type",
    ),
    "thread extent": (
        lambda tv: _axis_replaced(
            tv,
            lambda ax: ax.parallel_type is P.TIDx,
            lambda ax: fl.IterDomain(2048, ax.iter_type, P.TIDx),
        ),
        "exceeds",
    ),
    "loop axis dropped": (
        lambda tv: setattr(tv, "domain", tv.domain.with_loop(tv.domain.loop_positions[:-1])),
        "loop domain does not match its recorded transforms",
    ),
    "reduction axis (a partial output)": (
        lambda tv: _axis_replaced(
            tv,
            lambda ax: ax.extent == 8,
            lambda ax: fl.IterDomain(8, fl.IterType.REDUCTION),
        ),
        "holds partial results",
    ),
    "mesh of other devices": (
        lambda tv: tv.set_device_mesh(fl.DeviceMesh.for_num_devices(4)),
        "has 4 devices",
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=str)
def test_an_output_laid_out_as_valid_ones_but_for_one_detail_is_caught_and_named(mutation):
    change, message = MUTATIONS[mutation]
    text, bad, good = _one_output_changed(change)
    lines = [line for line in text.splitlines() if message in line]
    assert any(bad in line for line in lines), text
    assert not any(good + ":" in line for line in lines)
