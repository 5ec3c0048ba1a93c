"""N-D device meshes: shape, coordinates, parallel types, teams, text forms, bad input."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import interned_count
from fuserlite.plan.mesh_axes import teams as plan_teams

DIDx, DIDy, DIDz = ParallelType.DIDx, ParallelType.DIDy, ParallelType.DIDz


def test_a_2d_mesh_has_shape_rank_size_and_row_major_devices() -> None:
    mesh = fl.DeviceMesh([[0, 1, 2], [3, 4, 5]])
    assert mesh.shape == (2, 3) and mesh.rank == 2 and mesh.size == len(mesh) == 6
    assert mesh.devices == (0, 1, 2, 3, 4, 5)
    assert mesh == fl.DeviceMesh.for_shape([2, 3]) == fl.DeviceMesh(np.arange(6).reshape(2, 3))
    assert mesh != fl.DeviceMesh.for_num_devices(6)  # same ids, another shape
    assert mesh != fl.DeviceMesh.for_shape([3, 2])
    assert mesh.coordinates(4) == (1, 1) and mesh.coordinates(2) == (0, 2)
    assert mesh.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert fl.DeviceMesh([4, 7]).shape == (2,) and fl.DeviceMesh([4, 7]).rank == 1


def test_parallel_types_name_mesh_axes_from_the_inside_out() -> None:
    """nvFuser: DIDx is the last mesh axis, DIDy the one before, DIDz before that."""
    cube = fl.DeviceMesh.for_shape([2, 3, 4])
    assert cube.parallel_types == (DIDz, DIDy, DIDx)
    assert [cube.axis_of(pt) for pt in (DIDx, DIDy, DIDz)] == [2, 1, 0]
    assert [cube.axis_size(pt) for pt in (DIDx, DIDy, DIDz)] == [4, 3, 2]
    flat = fl.DeviceMesh([0, 1])
    assert flat.parallel_types == (DIDx,) and not flat.has(DIDy)
    with pytest.raises(fl.FusionError, match=r"DIDy needs a mesh of rank 2 .*DeviceMesh\{0 1\}"):
        flat.axis_of(DIDy)


def test_teams_along_one_or_several_parallel_types() -> None:
    mesh = fl.DeviceMesh([[10, 11, 12, 13], [20, 21, 22, 23]])
    assert mesh.teams(DIDx) == [(10, 11, 12, 13), (20, 21, 22, 23)]
    assert mesh.teams(DIDy) == [(10, 20), (11, 21), (12, 22), (13, 23)]
    assert mesh.teams([DIDy, DIDx]) == [(10, 11, 12, 13, 20, 21, 22, 23)]
    assert mesh.teams([DIDx, DIDy]) == [(10, 20, 11, 21, 12, 22, 13, 23)]  # DIDx outer
    assert mesh.team(22, DIDy) == (12, 22) and mesh.team(22, DIDx) == (20, 21, 22, 23)
    with pytest.raises(fl.FusionError, match="device 5 is not in"):
        mesh.team(5, DIDx)
    with pytest.raises(fl.FusionError, match="distinct parallel types"):
        mesh.teams([DIDx, DIDx])


def test_teams_are_the_planners_teams_named_by_device_ids() -> None:
    """One definition of a team (fuserlite.ir.teams): DeviceMesh.teams names the planner's
    teams of device indices by the mesh's ids."""
    for shape in ([2, 2], [2, 4], [2, 2, 2], [3, 2, 2]):
        ids = np.arange(100, 100 + int(np.prod(shape)))[::-1].reshape(shape)
        mesh = fl.DeviceMesh(ids)
        rank = mesh.rank
        for group in ([rank - 1], [0], list(range(rank)), [rank - 1, 0]):
            pts = [mesh.parallel_types[a] for a in group]
            want = [tuple(mesh.devices[i] for i in t) for t in plan_teams(mesh.shape, tuple(group))]
            assert mesh.teams(pts) == want


def test_printed_as_nvfuser_prints_meshes() -> None:
    assert fl.DeviceMesh([0, 1, 2]).text() == "DeviceMesh{0 1 2}"
    assert fl.DeviceMesh([[0, 1, 2], [3, 4, 5]]).text() == "DeviceMesh{{0 1 2}{3 4 5}}"
    cube = fl.DeviceMesh.for_shape([2, 2, 2])
    assert cube.text() == str(cube) == "DeviceMesh{{{0 1}{2 3}}{{4 5}{6 7}}}"
    big = fl.DeviceMesh.for_shape([4, 16])
    assert str(big) == "DeviceMesh[4x16]{0 1 2 3 4 5 6 ... 63}"  # messages: 8 ids at most
    assert big.text().count("{") == 5


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ([[0, 1], [2]], "different lengths"),
        ([[0, 1], [1, 2]], "lists a device twice \\(1\\)"),
        ([[0, -1]], "-1 is not one"),
        ([[]], "at least one device"),
        ([[[[0]]]], "at most 3"),
        ([[0], [[[[[[1]]]]]]], "at most 3"),
    ],
)
def test_bad_meshes_are_errors_that_say_what_is_wrong(devices: list, message: str) -> None:
    with pytest.raises(fl.FusionError, match=message):
        fl.DeviceMesh(devices)


def test_for_shape_checks_its_sizes() -> None:
    with pytest.raises(fl.FusionError, match="axis size"):
        fl.DeviceMesh.for_shape([2, 0])
    with pytest.raises(fl.FusionError, match="4096"):
        fl.DeviceMesh.for_shape([64, 65])
    with pytest.raises(fl.FusionError, match="shape"):
        fl.DeviceMesh.for_shape(4)


def test_fus_reads_and_writes_nd_meshes() -> None:
    text = "mesh m = [[0, 1, 2], [3, 4, 5]]\ninput x: float[6, 4] on m\ny = neg(x)\noutput y\n"
    fusion = fl.parse(text)
    assert fusion.inputs[0].mesh == fl.DeviceMesh.for_shape([2, 3])
    written = fl.to_fus(fusion)
    assert "mesh m0 = [[0, 1, 2], [3, 4, 5]]" in written
    assert fl.parse(written).inputs[0].mesh == fusion.inputs[0].mesh
    assert "(DeviceMesh{{0 1 2}{3 4 5}})" in str(fusion)


@pytest.mark.parametrize(
    ("mesh", "message"),
    [
        ("[[0, 1], [2]]", "different lengths"),
        ("[[0, 1], 2]", "every row of a mesh must be a list of device ids, got '2'"),
        ("[[0, 1.5]]", "a device id must be an integer, got '1.5'"),
    ],
)
def test_fus_bad_nd_meshes(mesh: str, message: str) -> None:
    with pytest.raises(fl.ParseError, match=message):
        fl.parse(f"mesh m = {mesh}\n")


def test_a_did_type_the_mesh_lacks_names_tensor_axis_and_mesh() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4, 6], name="x")
        x.set_device_mesh(fl.DeviceMesh([0, 1]))
        x.axis(0).parallelize(DIDy)
        fusion.add_input(x)
        fusion.add_output(fl.neg(x))
    with pytest.raises(
        fl.VerifyError, match=r"x.* axis 0 .*DIDy is not an axis of DeviceMesh\{0 1\}"
    ):
        fl.verify(fusion)


def test_meshes_compare_by_ids_and_shape_only():
    a = fl.DeviceMesh([[0, 1], [2, 3]], axis_names=("dp", "tp"))
    same = fl.DeviceMesh([[0, 1], [2, 3]])
    assert a == a and a == same and hash(a) == hash(same)  # names are not compared
    assert a != fl.DeviceMesh([0, 1, 2, 3]) and a != fl.DeviceMesh([[0, 2], [1, 3]])
    assert a != None and a != (0, 1, 2, 3)  # noqa: E711 - not a mesh: not equal


def test_a_mesh_is_a_value_made_once_per_content() -> None:
    """Meshes made alike are one object (the facts they key compare them by identity, in
    C), whatever made them; names make another value, equal all the same; pickling and
    copying keep the one object."""
    a = fl.DeviceMesh.for_num_devices(6)
    assert fl.DeviceMesh(list(range(6))) is a and fl.DeviceMesh(np.arange(6)) is a
    named = fl.DeviceMesh(list(range(6)), axis_names=["tp"])
    assert named is not a and named == a and hash(named) == hash(a)
    assert named.axis_names == ("tp",) and a.axis_names is None
    grid = fl.DeviceMesh.for_shape([2, 3])
    assert grid is not a and grid != a and fl.DeviceMesh([[0, 1, 2], [3, 4, 5]]) is grid
    for mesh in (a, named, grid):
        assert pickle.loads(pickle.dumps(mesh)) is mesh
        assert copy.copy(mesh) is mesh and copy.deepcopy(mesh) is mesh
    before = interned_count()
    fl.DeviceMesh([97, 98, 99])  # held by nobody: the table lets it go
    gc.collect()
    assert interned_count() == before
