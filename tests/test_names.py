"""Messages and reports use the names a user gave tensors (issue 8, item 15).

A tensor named in .fus or with `fl.tensor(..., name=)` is `w1 (T1)` in every
error and in the run report; printed IR and .fus text keep the T-numbers; a
tensor made by a file points back at the line of the statement that made it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.cli import main

MLP = """\
mesh m = [0, 1]
input x: float32[4, 8] on m
input w1: float32[6, 8] on m
h = linear(x, w1)
out = relu(h)
output out
outer_split w1 axis 0 by 2
parallelize w1 axis 0 DIDx
"""


def test_name_shows_the_user_name_beside_the_number() -> None:
    with fl.Fusion() as fusion:
        w1 = fl.tensor([2, 3], name="w1")
        t = fl.tensor([3])
        y = fl.add(w1, t)
    fusion.add_input(w1)
    fusion.add_input(t)
    fusion.add_output(y)
    assert (w1.name, w1.ir_name, w1.user_name) == ("w1 (T0)", "T0", "w1")
    assert (t.name, y.name) == ("T1", "T3")  # T2: the implicit broadcast of t
    y.user_name = "y"
    assert y.name == "y (T3)"
    # The printed IR is nvFuser's text: T-numbers only.
    assert "w1" not in str(fusion) and "T0_g_float[ iS0{2}, iS1{3} ]" in str(fusion)


def test_shard_map_local_values_take_their_arguments_names() -> None:
    with fl.Fusion():
        s = fl.tensor([4, 3], name="shard")
        spec = [(fl.ParallelType.DIDx,)]
        with pytest.raises(fl.FusionError, match=r"out_specs\[0\] of shard \(T0\)"):
            fl.shard_map(lambda t: t, fl.DeviceMesh([0, 1]), spec, [None])(s)


def test_errors_name_the_users_tensors() -> None:
    with fl.Fusion():
        w1 = fl.tensor([2, 3], name="w1")
        with pytest.raises(fl.FusionError, match=r"shapes w1 \(T0\)\[2, 3\] and b \(T1\)\[4\]"):
            fl.add(w1, fl.tensor([4], name="b"))
        with pytest.raises(fl.ScheduleError, match=r"split: w1 \(T0\) has 2 loop axes"):
            w1.split(5, 2)


def test_parsed_names_and_origins() -> None:
    fusion = fl.parse(MLP, "mlp.fus")
    by_name = {tv.user_name: tv for tv in fusion.tensors_created if tv.user_name}
    assert sorted(by_name) == ["h", "out", "w1", "x"]
    assert by_name["w1"].name == "w1 (T1)" and by_name["w1"].origin == "mlp.fus:3"
    assert by_name["out"].origin == "mlp.fus:5"
    # `h = linear(x, w1)` made one tensor; line 4 made it.
    assert [tv.origin for tv in fusion.tensors_created] == [
        "mlp.fus:2",
        "mlp.fus:3",
        "mlp.fus:4",
        "mlp.fus:5",
    ]
    # The writer keeps T-numbers, so the text parses back to the same IR.
    assert "w1" not in fl.to_fus(fusion) and str(fl.parse(fl.to_fus(fusion))) == str(fusion)


def test_parse_errors_say_the_written_name() -> None:
    with pytest.raises(fl.ParseError) as info:
        fl.parse(MLP + "split w1 axis 7 by 2\n", "mlp.fus")
    assert "split: w1 (T1) has 3 loop axes; axis 7 is out of range" in str(info.value)


def test_post_parse_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "unmarked.fus"
    path.write_text("input x: float32[4]\ntensor b: float32[4]\ny = add(x, b)\noutput y\n")
    with pytest.raises(fl.VerifyError) as info:
        fl.verify(fl.load(path))
    assert f"{path}:2: b (T1) is read by y (T2) = add(...) but is not a fusion input" in str(
        info.value
    )


def test_pipeline_errors_name_file_and_line(tmp_path: Path) -> None:
    # x has no mesh of its own: its DIDx axis (extent 16) meets a 2-device mesh only
    # when propagate-shardings gives it one, after parsing.
    path = tmp_path / "late.fus"
    path.write_text(
        "mesh m = [0, 1]\ninput x: float32[8, 16]\ny = neg(x)\noutput y\n"
        "set_mesh y m\nparallelize x axis 1 DIDx\n"
    )
    with pytest.raises(fl.FuserliteError) as info:
        fl.lower(fl.load(path))
    assert f"{path}:2: x (T0) axis 1" in str(info.value)


def test_clone_keeps_names_and_derived_tensors_have_none() -> None:
    fusion = fl.parse(MLP, "mlp.fus")
    lowered = fl.lower(fusion)
    named = {tv.ir_name: tv.name for tv in lowered.fusion.tensors_created if tv.user_name}
    assert named == {"T0": "x (T0)", "T1": "w1 (T1)", "T2": "h (T2)", "T3": "out (T3)"}
    new = lowered.fusion.tensors_created[len(fusion.tensors_created) :]
    assert new and all(tv.user_name is None and tv.origin is None for tv in new)
    # The user's out is still the fusion output, written from a compiler-made local.
    assert [tv.name for tv in lowered.outputs] == ["out (T3)"]


def test_run_report_uses_the_users_names(capsys, tmp_path: Path) -> None:
    path = tmp_path / "gather.fus"
    path.write_text(
        "mesh m = [0, 1]\ninput rows: float32[4, 8] on m\nwhole = set(rows)\nout = neg(whole)\n"
        "output out\nouter_split rows axis 0 by 2\nparallelize rows axis 0 DIDx\nset_mesh whole m\n"
    )
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\nout (T2)  [4, 8]" in out
    assert "\nAllgather  rows (T0)  whole (T1)  0 1" in out


def test_executor_messages_use_names() -> None:
    fusion = fl.parse(MLP, "mlp.fus")
    with pytest.raises(fl.ExecutionError, match=r"input w1 \(T1\) has shape \[6, 8\]"):
        fl.evaluate(fusion, [np.ones((4, 8), np.float32), np.ones((8, 6), np.float32)])


DOTTED = """\
mesh m = [0, 1]
input x: float32[4, 8] on m
input layers.0.fc1.weight: float32[6, 8] on m
input T0: float32[6] on m
h = linear(x, layers.0.fc1.weight)
out.y = add(h, T0)
output out.y
place layers.0.fc1.weight on m (S0)
"""


def test_dotted_names_are_names_as_pytorch_writes_them() -> None:
    """PyTorch's parameter names (digits between the dots too) name tensors in .fus and
    in Python, and messages say them."""
    fusion = fl.parse(DOTTED, "block.fus")
    w = fusion.inputs[1]
    assert w.name == "layers.0.fc1.weight (T1)" and w.placements == (fl.Shard(0),)
    with fl.Fusion():
        t = fl.tensor([2], name="attn.q.bias")
        assert t.user_name == "attn.q.bias"
        for bad in ("a..b", "0.a", "a.", ".a", "a-b"):
            with pytest.raises(fl.FusionError, match="joined by dots"):
                fl.tensor([2], name=bad)
    with pytest.raises(
        fl.ParseError, match=r"block.fus:9:1: split: layers.0.fc1.weight \(T1\) has 3"
    ):
        fl.parse(DOTTED + "split layers.0.fc1.weight axis 7 by 2\n", "block.fus")


def test_to_fus_writes_the_users_names_when_asked() -> None:
    fusion = fl.parse(DOTTED, "block.fus")
    text = fl.to_fus(fusion, user_names=True)
    assert "input layers.0.fc1.weight: float32[6, 8] on m0" in text
    assert "out.y = add(h, T4)" in text and "input T2: float32[6]" in text  # T0: its number
    again = fl.parse(text)
    assert str(again) == str(fusion)
    assert [t.name for t in again.inputs] == ["x (T0)", "layers.0.fc1.weight (T1)", "T2"]
    assert "layers" not in fl.to_fus(fusion)  # by default: T numbers, as before
