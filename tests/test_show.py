"""Pictures of shardings: `fuserlite show`, fl.show_sharding and the SVG."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

import fuserlite as fl
from fuserlite import cli, models
from fuserlite.plan import Placement
from fuserlite.show import plain, sheet, svg
from fuserlite.show.layout import layout
from fuserlite.show.text import coloured

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.fus"))
MESH_2X4 = fl.DeviceMesh.for_shape([2, 4])


def show(capsys, *argv: str) -> str:
    assert cli.main(["show", *argv]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_show_every_example_golden(path, capsys, golden, monkeypatch):
    monkeypatch.chdir(ROOT)
    golden(f"show/{path.stem}.txt", show(capsys, str(path.relative_to(ROOT))))


@pytest.mark.parametrize("name", ["tp_mlp", "sp_mlp", "softmax"])
def test_show_communications_golden(name, capsys, golden, monkeypatch):
    monkeypatch.chdir(ROOT)
    golden(
        f"show/{name}_communications.txt", show(capsys, f"examples/{name}.fus", "--communications")
    )


def test_show_after_a_pass_places_every_tensor(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = show(capsys, "examples/softmax.fus", "--as-written")
    after = show(capsys, "examples/softmax.fus", "--after", "propagate-shardings")
    assert "no mesh yet" in before and "no mesh yet" not in after
    # By default after the whole pipeline: the file's tensors, every one placed.
    lowered = show(capsys, "examples/softmax.fus")
    assert "no mesh yet" not in lowered
    assert [line.split()[0] for line in lowered.splitlines() if " on DeviceMesh" in line] == [
        line.split()[0] for line in before.splitlines() if " float" in line
    ]
    one = show(
        capsys, "examples/softmax.fus", "--tensor", "row_max", "--after", "insert-reshardings"
    )
    assert one.splitlines()[0] == "row_max (T1) float[8] on DeviceMesh{0 1}"


def test_partial_values_are_marked(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = show(capsys, "examples/tp_mlp.fus", "--communications")
    assert "== Allreduce: before, after" in text
    assert "partial over DIDx: each device holds an addend" in text and "d0+d1" in text


def test_svg_is_well_formed_and_names_every_device(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "tp.svg"
    assert show(capsys, "examples/tp_mlp.fus", "--svg", str(target)).startswith(f"wrote {target}")
    root = ET.fromstring(target.read_text())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "device 0" in texts and "device 1" in texts
    # A 2x4 mesh, partial over one axis, and an uneven split with an empty device.
    sheets = [
        layout("x", (4, 16), MESH_2X4, Placement.parse("(S0,S1)", 2)),
        layout("p", (4, 16), MESH_2X4, Placement.parse("(P,S1)", 2)),
        layout("u", (5,), fl.DeviceMesh.for_num_devices(4), Placement.parse("(S0)", 1)),
    ]
    root = ET.fromstring(svg(sheets))
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for d in range(8):
        assert any(f"device {d}" in t or f" {d}" in t for t in texts[:10]), d
    assert "devices 0 + 4" in texts and "holding nothing: devices 3" in texts


def test_2d_mesh_and_uneven_blocks_to_scale():
    grid = plain(layout("x", (4, 16), MESH_2X4, Placement.parse("(S0,S1)", 2)))
    assert "axis 0 sharded over DIDy; axis 1 sharded over DIDx" in grid
    assert "|       d4       |       d5       |" in grid
    replicated_rows = plain(layout("r", (3, 5, 16), MESH_2X4, Placement.parse("(S2,R)", 3)))
    assert "(rows: axis 0, columns: axis 2)" in replicated_rows and "d0,1,2,3" in replicated_rows
    # torch.chunk: 5 over 4 devices is 2, 2, 1 and nothing; 2 elements draw twice as wide as 1.
    uneven = plain(layout("u", (5,), fl.DeviceMesh.for_num_devices(4), Placement.parse("(S0)", 1)))
    row = next(line for line in uneven.splitlines() if "d0" in line)
    widths = [len(part) for part in row.strip("|").split("|")]
    assert widths[0] == widths[1] and abs(widths[0] - 2 * widths[2]) <= 1
    assert uneven.splitlines()[-1] == "holds nothing: d3"


def test_show_sharding_plain_when_piped_and_coloured_on_a_terminal():
    fusion = models.all_gather_all_reduce_reduce_scatter(4, 8)
    t1 = fusion.inputs[0]
    piped = io.StringIO()
    fl.show_sharding(t1, file=piped)
    assert piped.getvalue() == plain(sheet(t1))
    assert "|       d0       |       d1       |" in piped.getvalue()
    terminal = io.StringIO()
    Console(file=terminal, force_terminal=True, color_system="truecolor").print(coloured(sheet(t1)))
    assert "\x1b[" in terminal.getvalue() and "│" in terminal.getvalue()


def test_bad_requests_are_clear_errors(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["show", "examples/tp_mlp.fus", "--after", "fuse-everything"]) == 1
    assert (
        "not a pass of the default pipeline (choose one of propagate-shardings"
        in capsys.readouterr().err
    )
    assert cli.main(["show", "examples/tp_mlp.fus", "--tensor", "nope"]) == 1
    assert "no tensor 'nope' (its tensors are x, w1" in capsys.readouterr().err
    assert cli.main(["show", "examples/tp_mlp.fus", "--tensor", "x", "--communications"]) == 1
    assert "cannot be combined with --tensor" in capsys.readouterr().err
    with pytest.raises(fl.FusionError, match="show_sharding: tv must be a TensorView"):
        fl.show_sharding("x")


def test_a_cyclic_shard_draws_its_rows_device_by_device():
    """DIDx on the inner part of split(0, 2): rows 0, 2, 4 on d0 and 1, 3 on d1, each
    drawn where it is (not as the block the planner's S0 would be)."""
    from strided_cases import cyclic_square

    x = cyclic_square(2, 5).inputs[0]
    s = sheet(x)
    assert s.placement == "axis 0 cyclic over DIDx: device i holds rows i, i + 2, ..."
    assert [(c.rows, c.devices) for c in s.cells] == [((r, r + 1), (r % 2,)) for r in range(5)]
    assert "holds nothing" not in plain(s)


def test_a_block_cyclic_shard_draws_its_blocks_device_by_device():
    """Blocks of 3 rows over 2 devices (rows 0-2, 6-8 on d0; 3-5, 9-11 on d1), and under
    DIDy each DIDy chunk of the periods (nvFuser's 2-D sharded vector)."""
    from strided_cases import cyclic_square, vector_2d_gathered

    x = cyclic_square(2, 12, block=3).inputs[0]
    s = sheet(x)
    assert s.placement == (
        "axis 0 cyclic over DIDx: device i holds blocks of 3 rows, rows i*3 to i*3 + 2, "
        "then those + 6, ..."
    )
    assert [(c.rows, c.devices) for c in s.cells] == [
        ((r, r + 1), ((r // 3) % 2,)) for r in range(12)
    ]
    v = vector_2d_gathered().inputs[0]
    held = {c.rows[0]: c.devices for c in sheet(v).cells}
    assert [held[r] for r in (0, 3, 6, 9, 12, 15, 18, 21)] == [
        (0,),
        (1,),
        (0,),
        (1,),
        (2,),
        (3,),
        (2,),
        (3,),
    ]
