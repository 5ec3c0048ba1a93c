"""Named mesh axes (JAX's and DTensor's axis_names): every API that takes a mesh axis
accepts the name, and what people read shows it beside nvFuser's DID name."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.program.explain import explain
from fuserlite.program.parser import parse_printed

X, Y = fl.ParallelType.DIDx, fl.ParallelType.DIDy
NAMED = fl.DeviceMesh([[0, 1, 2, 3], [4, 5, 6, 7]], axis_names=("dp", "tp"))


def test_names_are_labels_of_the_axes_not_part_of_the_mesh() -> None:
    plain = fl.DeviceMesh.for_shape([2, 4])
    assert plain == NAMED and hash(plain) == hash(NAMED)
    assert NAMED.axis_names == ("dp", "tp") and plain.axis_names is None
    assert NAMED.parallel_type_of("dp") is Y and NAMED.parallel_type_of("tp") is X
    assert NAMED.parallel_type_of("DIDx") is X and NAMED.parallel_type_of("deviceIdx.y") is Y
    assert [NAMED.axis_label(a) for a in (0, 1)] == ["DIDy (dp)", "DIDx (tp)"]
    assert NAMED.axis_label(X) == "DIDx (tp)" and plain.axis_label(X) == "DIDx"
    assert fl.DeviceMesh.for_num_devices(4, axis_names="tp").axis_names == ("tp",)
    assert plain.with_axis_names(["a", "b"]).axis_names == ("a", "b")
    assert NAMED.text() == plain.text()  # nvFuser's printed mesh


def test_a_cached_sharding_error_names_the_axes_of_its_own_mesh() -> None:
    """Meshes alike but for their names are equal, so a fact cached for one is the other's:
    the error text still names each mesh's own axes (regression: the second mesh's error
    said 'tp' though its axis has no name)."""

    def bad_sharding(mesh: fl.DeviceMesh) -> str:
        with fl.Fusion() as fusion:
            x = fl.tensor([6, 4], name="x")
            x.set_device_mesh(mesh)
            x.axis(0).parallelize(X)
            fusion.add_output(fl.exp(x))
        with pytest.raises(fl.FuserliteError) as info:
            fl.lower(fusion)
        return str(info.value)

    named = bad_sharding(fl.DeviceMesh([0, 1, 2, 3], axis_names=("tp",)))
    plain = bad_sharding(fl.DeviceMesh([0, 1, 2, 3]))
    assert "mesh axis 0, tp, of" in named
    assert "mesh axis 0 of" in plain and "tp" not in plain


@pytest.mark.parametrize(
    "names, fragment",
    [
        (("dp",), "2 distinct names"),
        ("dp", "2 distinct names"),
        (("dp", "dp"), "names an axis twice"),
        (("DIDx", "tp"), "'DIDx' is a parallel type's name"),
        (("deviceIdx.x", "tp"), "identifiers"),
        (("a b", "c"), "identifiers"),
        ((1, 2), "identifiers"),
    ],
)
def test_bad_axis_names_are_clear_errors(names, fragment) -> None:
    with pytest.raises(fl.FusionError, match=fragment):
        fl.DeviceMesh([[0, 1], [2, 3]], axis_names=names)


def test_an_unknown_axis_name_lists_the_mesh_axes_by_both_names() -> None:
    with pytest.raises(fl.FusionError, match=r"DIDy \(dp\), DIDx \(tp\), got 'ep'"):
        NAMED.parallel_type_of("ep")


NAMED_FUS = """mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]] axes (dp, tp)
input x: float32[4, 8] on m
input w: float32[16, 8] on m
y = linear(x, w)
output y
place x on m (S0, R)
outer_split w axis 0 by 4
parallelize w axis 0 tp
"""


def test_fus_names_the_axes_and_parallelize_takes_a_name() -> None:
    f = fl.parse(NAMED_FUS)
    x, w = f.inputs
    assert x.mesh.axis_names == ("dp", "tp") and w.placements == (fl.Replicate(), fl.Shard(0))
    text = fl.to_fus(f)
    assert "mesh m0 = [[0, 1, 2, 3], [4, 5, 6, 7]] axes (dp, tp)\n" in text
    again = fl.parse(text)
    assert str(again) == str(f) and again.inputs[1].mesh.axis_names == ("dp", "tp")


@pytest.mark.parametrize(
    "line, column, fragment",
    [
        ("mesh m = [[0, 1], [2, 3]] axes (dp)", 33, "2 distinct names"),
        ("mesh m = [[0, 1], [2, 3]] axes (dp, dp)", 33, "names an axis twice"),
        ("mesh m = [[0, 1], [2, 3]] axes (dp, DIDx)", 33, "parallel type's name"),
        ("mesh m = [[0, 1], [2, 3]] axes (dp, axes)", 37, "reserved word"),
    ],
)
def test_bad_axis_names_in_fus_point_at_them(line, column, fragment) -> None:
    with pytest.raises(fl.ParseError, match=fragment) as info:
        fl.parse(line + "\n")
    assert (info.value.line, info.value.column) == (1, column)


def test_the_printed_dialect_shows_the_names_beside_the_dids_and_reads_them_back() -> None:
    f = fl.parse(NAMED_FUS)
    text = str(f)
    assert text.startswith("Mesh axes: DeviceMesh{{0 1 2 3}{4 5 6 7}} DIDy (dp), DIDx (tp)\n\n")
    assert "(tp)" not in text.split("\n", 2)[2]  # every other line is nvFuser's
    back = parse_printed(text)
    assert str(back) == text and back.inputs[0].mesh.axis_names == ("dp", "tp")
    program = fl.lower(fl.load("examples/dp_tp_mlp.fus"))
    printed = str(program)
    assert printed.splitlines()[:2] == [  # after the Planner: line
        "Planner: latency_bytes=131072",
        "Mesh axes: DeviceMesh{{0 1 2 3}{4 5 6 7}} DIDy (dp), DIDx (tp)",
    ]
    parsed = parse_printed(printed)
    assert str(parsed) == printed
    # The same explanation, with T numbers for the user's tensor names (not printed).
    assert explain(parsed) == explain(program).replace("y (T7)", "T7")
    assert all(k.mesh.axis_names == ("dp", "tp") for k in parsed.kernels)
    unnamed = str(fl.parse(NAMED_FUS.replace(" axes (dp, tp)", "").replace(" tp\n", " DIDx\n")))
    assert "Mesh axes" not in unnamed and unnamed == text.split("\n", 2)[2]


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("Mesh axes: DeviceMesh{{0 1 2 3}{4 5 6 7}} DIDy (dp)", "one `DID? (name)` per mesh axis"),
        ("Mesh axes: DeviceMesh{{0 1 2 3}{4 5 6 7}} DIDx (dp), DIDy (tp)", "axis 0 first"),
        ("Mesh axes: DeviceMesh{{0 1 2 3}{4 5 6 7}} DIDy (dp), DIDx (dp)", "names an axis twice"),
        ("Mesh axes: Mesh{0 1} DIDx (tp)", "expected `Mesh axes: DeviceMesh"),
    ],
)
def test_a_wrong_mesh_axes_line_is_a_parse_error(line, fragment) -> None:
    text = str(fl.parse(NAMED_FUS)).split("\n", 2)[2]
    with pytest.raises(fl.ParseError, match=re.escape(fragment)) as info:
        parse_printed(line + "\n" + text)
    assert info.value.line == 1


def test_explain_show_and_run_name_the_axes() -> None:
    program = fl.lower(fl.load("examples/dp_tp_mlp.fus"))
    text = explain(program)
    assert "DIDy (dp): Shard(0) -> Shard(0); DIDx (tp): Partial -> Replicate" in text
    assert "Allreduce on DIDx (tp) teams" in text
    out = io.StringIO()
    fl.show_sharding(program.fusion.inputs[0], file=out)
    assert "axis 0 sharded over DIDy (dp)" in out.getvalue()


def test_a_resized_mesh_keeps_the_axis_names() -> None:
    from fuserlite.schedule.shard import resize_meshes

    f = fl.load("examples/dp_tp_mlp.fus")
    resize_meshes(f, fl.DeviceMesh.for_shape([2, 2]))
    assert {t.mesh.axis_names for t in f.inputs} == {("dp", "tp")}


def test_shard_map_specs_and_collectives_take_axis_names() -> None:
    mesh = fl.DeviceMesh([[0, 1], [2, 3]], axis_names=("dp", "tp"))

    def run(specs, out_specs, body):
        with fl.Fusion() as f:
            x = fl.tensor([4, 6], name="x")
            f.add_input(x)
            f.add_output(fl.shard_map(body, mesh, specs, out_specs)(x))
        inputs = [np.arange(24, dtype=np.float32).reshape(4, 6)]
        return fl.FusionExecutor(f).run(inputs)[0], inputs[0]

    got, x = run([("dp", "tp")], [(None, "tp")], lambda b: fl.psum(b, "dp"))
    np.testing.assert_array_equal(got, x[:2] + x[2:])
    got, x = run([("dp", None)], [("dp", "tp")], lambda b: b * fl.axis_index("tp"))
    np.testing.assert_array_equal(got, np.concatenate([x * 0, x * 1], axis=1))
