"""The N-D examples lower as their comments say; --mesh / resize-mesh[mesh=...] re-shard."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.pipeline import default_pass_names

REPO = Path(__file__).resolve().parents[1]


def fsdp_tp_mlp() -> fl.Fusion:
    """The fusion of examples/fsdp_tp.py."""
    spec = importlib.util.spec_from_file_location("fsdp_tp", REPO / "examples" / "fsdp_tp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fsdp_tp_mlp()


def lowered(path: str, *first: str) -> fl.Program:
    return fl.Pipeline([*first, *default_pass_names()]).run(fl.load(REPO / path))


def test_dp_tp_mlp_is_one_allreduce_per_didx_team() -> None:
    (comm,) = lowered("examples/dp_tp_mlp.fus").communications
    assert comm.kind.value == "Allreduce" and comm.group_names == ("DIDx",)
    assert comm.teams == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert str(comm.before) == "(S0,P)" and str(comm.after) == "(S0,R)"
    # Each device holds a [2, 8, 16] float partial sum: the ring's 2 (D-1)/D of it.
    assert comm.bytes_per_device == 2 * 3 * (2 * 8 * 16 * 4) // 4


def test_fsdp_tp_gathers_weights_over_the_data_axis_and_reduce_scatters_after() -> None:
    program = fl.lower(fsdp_tp_mlp())
    got = [(c.kind.value, c.group_names) for c in program.communications]
    assert got == [
        ("Allgather", ("DIDy",)),
        ("Allgather", ("DIDy",)),
        ("ReduceScatter", ("DIDx",)),
    ]
    assert "rejected:" in fl.explain(program)


def test_resize_mesh_to_a_shape_keeps_each_parallel_type() -> None:
    """tp_mlp (1-D, DIDx) on 2x4: tensor parallel in each DIDx team, replicated on DIDy."""
    program = lowered("examples/tp_mlp.fus", "resize-mesh[mesh=2x4]")
    (record,) = program.reshardings
    assert str(record.plan.source) == "(R,P)" and str(record.plan.target) == "(R,R)"
    reduce = [c for c in program.communications if c.kind.value == "Allreduce"]
    assert [c.group_names for c in reduce] == [("DIDx",)]
    assert reduce[0].teams == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [c.kind.value for c in program.communications] == ["Allreduce"]
    # The idle DIDy axis could halve what the Allreduce carries (slice, reduce, gather back:
    # 1280 B against 1536 B), but in two collectives: at the default latency the one
    # Allreduce costs less, and explain names the other as the rejected plan.
    alternative = record.plan.alternative
    assert alternative.label == "fewest bytes"
    assert [s.step.kind.value for s in alternative.steps] == [
        "LocalSlice",
        "Allreduce",
        "Allgather",
    ]
    assert (record.plan.bytes, alternative.bytes) == (1536, 1280)
    (comm,) = lowered("examples/dp_tp_mlp.fus", "resize-mesh[mesh=4x2]").communications
    assert comm.group_names == ("DIDx",) and len(comm.teams) == 4
    assert comm.mesh == fl.DeviceMesh.for_shape([4, 2])


def test_resize_to_a_mesh_without_a_parallel_type_used_names_it() -> None:
    with pytest.raises(fl.FusionError, match=r"sharded over DIDy, which DeviceMesh\{0 1 2 3"):
        lowered("examples/dp_tp_mlp.fus", "resize-mesh[devices=4]")


def test_run_mesh_option(capsys) -> None:
    """--mesh is resize-mesh[mesh=...]: tp_mlp on 2x4 runs (one Allreduce per DIDx team;
    by bytes alone, sliced over DIDy, reduced over each DIDx team, gathered back) and
    validates."""
    code = main(["run", str(REPO / "examples/tp_mlp.fus"), "--mesh", "2x4"])
    out = capsys.readouterr().out
    assert code == 0 and "8 sim device(s)" in out and "validation: ok" in out
    code = main(["run", str(REPO / "examples/tp_mlp.fus"), "--mesh", "2x4", "--latency-bytes", "0"])
    out = capsys.readouterr().out
    assert code == 0 and "validation: ok" in out
    table = out.split("communications\n")[1].split("sent: ")[0].splitlines()[1:]
    assert [row.split()[0] for row in table] == ["LocalSlice", "Allreduce", "Allgather"]
    code = main(["run", str(REPO / "examples/tp_mlp.fus"), "--mesh", "2by4"])
    assert code == 1 and "axis sizes joined by x" in capsys.readouterr().err
    code = main(["run", str(REPO / "examples/tp_mlp.fus"), "--mesh", "2x4", "--devices", "8"])
    assert code != 0 and "not allowed with argument --mesh" in capsys.readouterr().err


def test_run_dp_tp_mlp_validates(capsys) -> None:
    code = main(["run", str(REPO / "examples/dp_tp_mlp.fus"), "--compute", "interpret"])
    assert code == 0 and "validation: ok" in capsys.readouterr().out


@pytest.mark.parametrize("compute", ["numpy", "interpret"])
def test_the_nd_examples_compute_the_reference(compute: str) -> None:
    tp = fl.load(REPO / "examples/tp_mlp.fus")
    resized = fl.Pipeline(["resize-mesh[mesh=2x4]", *default_pass_names()]).run(tp)
    cases = [
        (fl.load(REPO / "examples/dp_tp_mlp.fus"), None),
        (fsdp_tp_mlp(), None),
        (tp, resized),
    ]
    for fusion, program in cases:
        ex = fl.FusionExecutor(program or fusion, compute=compute)
        inputs = fl.random_inputs(fusion, 1)
        fl.validate(fusion, inputs, ex.run(inputs))


def test_the_run_table_names_the_teams_of_an_nd_collective() -> None:
    from fuserlite.cli.cmd_run import communication_report, team_text

    (comm,) = fl.FusionExecutor(fl.load(REPO / "examples/dp_tp_mlp.fus")).communications
    assert (
        team_text(communication_report(comm)) == "DIDx (tp): 0-3 | 4-7"
    )  # the file names its axes
    (comm,) = fl.lower(fl.load(REPO / "examples/tp_mlp.fus")).communications
    assert team_text(communication_report(comm)) == "0 1"
