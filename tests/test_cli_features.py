"""The CLI as people use it (issue 24 part 6): --inputs, --json, --color and NO_COLOR,
opt -o / --print-after-all / --help, "did you mean", 80 columns, run's totals."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.cli.inputs import input_key
from fuserlite.pipeline import default_pass_names

REPO = Path(__file__).resolve().parents[1]
TP_MLP = str(REPO / "examples" / "tp_mlp.fus")
SP_MLP = str(REPO / "examples" / "sp_mlp.fus")
EXAMPLES = sorted((REPO / "examples").glob("*.fus"))


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


def cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def user_error(capsys, *argv: object) -> str:
    """The message of a command that must fail with a user error (no traceback)."""
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (1, ""), (out, err)
    assert "Traceback" not in err and "internal error" not in err
    return err


# -- run --inputs ----------------------------------------------------------------------
def save_inputs(path: Path, fusion: fl.Fusion, arrays: list[np.ndarray], **changes) -> Path:
    named = {input_key(tv): a for tv, a in zip(fusion.inputs, arrays)}
    for key, value in changes.items():
        if value is None:
            del named[key]
        else:
            named[key] = value
    np.savez(path, **named)
    return path


def test_inputs_run_on_the_users_arrays(capsys, tmp_path: Path) -> None:
    """The arrays of seed 3 saved by name give seed 3's report; other arrays another."""
    fusion = fl.load(TP_MLP)
    path = save_inputs(tmp_path / "in.npz", fusion, fl.random_inputs(fusion, 3))
    code, given, err = cli(capsys, "run", TP_MLP, "--inputs", path, "--compute", "numpy")
    assert (code, err) == (0, "")
    _, seeded, _ = cli(capsys, "run", TP_MLP, "--seed", "3", "--compute", "numpy")
    assert given.splitlines()[0].endswith(f"inputs {path}")
    assert given.splitlines()[1:] == seeded.splitlines()[1:]
    ones = [np.ones(tv.shape, np.float32) for tv in fusion.inputs]
    path = save_inputs(tmp_path / "ones.npz", fusion, ones)
    code, out, _ = cli(capsys, "run", TP_MLP, "--inputs", path, "--json", "--compute", "numpy")
    assert code == 0
    (result,) = json.loads(out)["outputs"]
    (expected,) = fl.evaluate(fusion, ones)
    assert result["sum"] == pytest.approx(float(expected.astype(np.float64).sum()), rel=1e-6)


def test_inputs_in_bfloat16(capsys, tmp_path: Path) -> None:
    """np.save writes ml_dtypes' bfloat16 as raw 2-byte records: read back as bfloat16."""
    source = tmp_path / "bf.fus"
    source.write_text("input x: bfloat16[4]\ny = neg(x)\noutput y\n")
    path = tmp_path / "bf.npz"
    np.savez(path, x=np.array([1, 2, 3, 4], ml_dtypes.bfloat16))
    code, out, _ = cli(capsys, "run", source, "--inputs", path, "--json")
    assert code == 0 and json.loads(out)["outputs"][0]["sum"] == -10


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"w1": None, "w_1": np.zeros((64, 16), np.float32)}, ["'w_1' is not an input", "'w1'?"]),
        ({"b2": None}, ["no array for input b2", "it needs x, w1, b1, w2, b2"]),
        ({"x": np.zeros((1, 8, 16), np.float32)}, ["x has shape [1, 8, 16]", "float32[2, 8, 16]"]),
        ({"x": np.zeros((2, 8, 16), np.float64)}, ["x has dtype float64", "x (T0) is float32"]),
        ({"x": np.array([None] * 256, dtype=object).reshape(2, 8, 16)}, ["x has dtype object"]),
    ],
    ids=["misspelled", "missing", "shape", "dtype", "pickled objects"],
)
def test_a_mismatched_input_is_a_clear_error(capsys, tmp_path: Path, change, needles) -> None:
    fusion = fl.load(TP_MLP)
    path = save_inputs(tmp_path / "bad.npz", fusion, fl.random_inputs(fusion, 0), **change)
    err = user_error(capsys, "run", TP_MLP, "--inputs", path)
    assert err.startswith(f"error: --inputs {path}: ")
    for needle in needles:
        assert needle in err


def test_an_inputs_file_is_checked_before_its_data_is_read(capsys, tmp_path: Path) -> None:
    """A member whose header claims 2**40 elements is refused from its header: nothing is
    allocated or inflated for it."""
    fusion = fl.load(TP_MLP)
    path = save_inputs(tmp_path / "huge.npz", fusion, fl.random_inputs(fusion, 0), x=None)
    header = {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    with zipfile.ZipFile(path, "a") as z, z.open("x.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, header)
    err = user_error(capsys, "run", TP_MLP, "--inputs", path)
    assert "x has shape [1099511627776]" in err


@pytest.mark.parametrize("kind", ["text", "npy", "absent", "seed too"])
def test_what_is_not_an_inputs_file(capsys, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "in.npz"
    flags: list[str] = []
    if kind == "text":
        path.write_text("x = 1\n")
    elif kind == "npy":
        np.save(tmp_path / "in.npy", np.ones(3))
        path = tmp_path / "in.npy"
    elif kind == "seed too":
        np.savez(path, x=np.ones(3))
        flags = ["--seed", "1"]
    err = user_error(capsys, "run", TP_MLP, "--inputs", path, *flags)
    want = {
        "text": "not an .npz file",
        "npy": "a single array (.npy)",
        "absent": "no such file",
        "seed too": "--seed chooses random ones",
    }[kind]
    assert want in err


# -- --json ----------------------------------------------------------------------------
def _numbers(text: str) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?", text)


def test_run_json_carries_the_numbers_of_the_text(capsys) -> None:
    code, text, _ = cli(capsys, "run", SP_MLP, "--devices", "3", "--compute", "numpy")
    assert code == 0
    code, out, err = cli(capsys, "run", SP_MLP, "--devices", "3", "--compute", "numpy", "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["command"], doc["schema"]) == ("run", 1)
    lines = text.splitlines()
    for o in doc["outputs"]:
        (row,) = [line.split() for line in lines if line.startswith(o["name"] + " ")]
        assert row[-2:] == [f"{o['sum']:.6g}", f"{o['sum_abs']:.6g}"]
    table = text.split("communications\n")[1].split("sent: ")[0].splitlines()[1:]
    assert len(table) == len(doc["communications"])
    for row, c in zip(table, doc["communications"]):
        assert row.startswith(
            f"{c['kind']} ({c['sizing']})" if c["sizing"] != "even" else c["kind"]
        )
        assert row.split()[-1] == str(c["bytes_per_device"])
        assert c["before"] and c["after"] and c["teams"] == [[0, 1, 2]]
    totals = doc["totals"]
    assert (
        f"sent: {totals['bytes_per_device']} B by the busiest device, {totals['bytes']} B" in text
    )
    assert f"on device {totals['peak_memory']['device']} " in text
    v = doc["validation"]
    assert v["ok"] and v["unsharded"]["elements"] == v["reference"]["elements"]
    ref = v["reference"]
    assert f"max error {ref['max_error']:.3g}" in text or ref["differing"] == 0
    if ref["nearest"] is not None:
        assert f"{ref['nearest']['allowed']:.3g} allowed" in text


def test_run_json_of_an_overflow_is_still_json(capsys, tmp_path: Path) -> None:
    path = tmp_path / "f16.fus"
    path.write_text("input x: float16[4]\ny = mul(x, 60000.0)\noutput y\n")
    np.savez(tmp_path / "x.npz", x=np.full(4, 2, np.float16))
    code, out, _ = cli(capsys, "run", path, "--inputs", tmp_path / "x.npz", "--json")
    assert code == 0 and json.loads(out)["outputs"][0]["sum"] == "inf"


def test_explain_json_carries_the_numbers_of_the_text(capsys) -> None:
    code, text, _ = cli(capsys, "explain", SP_MLP, "--devices", "3")
    assert code == 0
    code, out, _ = cli(capsys, "explain", SP_MLP, "--devices", "3", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["command"] == "explain" and doc["machine"] == "h100-nvlink"
    assert "".join(r["text"] for r in doc["reshardings"]) == text
    for r in doc["reshardings"]:
        assert r["text"].startswith(
            f"{r['target']} = Set({r['source']}), needed by {r['needed_by']}"
        )
        cost = r["plan"]["cost"]
        assert f"= {cost['total']} B" in r["text"]
        assert f"= {r['rejected']['cost']['total']} B" in r["text"]
        for c in r["communications"]:
            assert f"{c['kind']} ({c['sizing']}: " in r["text"]  # uneven on 3 devices
            assert f"{c['bytes_per_device']} B/device" in r["text"]
            assert c["seconds"] > 0


def test_timeline_json_carries_the_numbers_of_the_text(capsys) -> None:
    code, text, _ = cli(capsys, "timeline", SP_MLP)
    code, out, _ = cli(capsys, "timeline", SP_MLP, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["command"] == "timeline"
    step = doc["step_time"]
    assert text.startswith(f"step time {step * 1e6:.3g} us on {doc['machine']}")
    assert max(e["end"] for e in doc["events"]) == step
    assert {d["device"] for d in doc["devices"]} == {0, 1}
    assert doc["totals"]["exposed"] <= doc["totals"]["communication"]


def test_passes_json_lists_what_the_table_lists(capsys) -> None:
    code, text, _ = cli(capsys, "passes")
    code, out, _ = cli(capsys, "passes", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["command"] == "passes"
    names = [p["name"] for p in doc["passes"]]
    assert names == [line.split()[0] for line in text.splitlines()[2:] if line[:1].strip()]
    (schedule,) = [p for p in doc["passes"] if p["name"] == "schedule-pointwise"]
    assert schedule["options"]["block_size"] == {"required": False, "default": 128}
    assert "options: block_size=128" in text


def test_show_json_has_the_blocks_of_the_picture(capsys) -> None:
    code, out, _ = cli(capsys, "show", TP_MLP, "--tensor", "w1", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["command"] == "show"
    (picture,) = doc["sections"][0]["pictures"]
    assert picture["title"] == "w1 (T1) float[64, 16] on DeviceMesh{0 1}"
    assert [(c["rows"], c["devices"]) for c in picture["cells"]] == [
        ([0, 32], [0]),
        ([32, 64], [1]),
    ]


# -- colour ----------------------------------------------------------------------------
COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-8]|4[0-8]|9[0-7])[;m]")  # a foreground or background


def test_color_flag_and_no_color(capsys, monkeypatch) -> None:
    path = str(REPO / "examples" / "add_broadcast.fus")
    assert "\x1b[" not in cli(capsys, "print", path)[1]
    assert COLOUR.search(cli(capsys, "--color", "always", "print", path)[1])
    assert COLOUR.search(cli(capsys, "print", path, "--color", "always")[1])
    monkeypatch.setenv("FORCE_COLOR", "1")  # as if on a terminal
    assert COLOUR.search(cli(capsys, "print", path)[1])
    assert "\x1b[" not in cli(capsys, "print", path, "--color", "never")[1]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not COLOUR.search(cli(capsys, "print", path)[1])  # bold may stay: it is no colour
    assert not COLOUR.search(cli(capsys, "run", path)[1])
    assert COLOUR.search(cli(capsys, "print", path, "--color", "always")[1])  # a flag beats it


# -- opt -------------------------------------------------------------------------------
def test_opt_output_file_print_after_all_and_help(capsys, tmp_path: Path) -> None:
    passes = "propagate-shardings,insert-reshardings"
    code, direct, _ = cli(capsys, "opt", TP_MLP, "-p", passes)
    assert code == 0
    target = tmp_path / "out.txt"
    code, out, _ = cli(capsys, "opt", TP_MLP, "-p", passes, "-o", target)
    assert (code, out) == (0, "") and target.read_text() == direct
    code, out, _ = cli(capsys, "opt", TP_MLP, "-p", passes, "--print-after-all")
    assert code == 0
    assert re.findall(r"// ----- after (\S+) -----", out) == passes.split(",")
    assert out.endswith(direct)
    err = user_error(capsys, "opt", TP_MLP, "-o", tmp_path / "no" / "such" / "dir")
    assert "cannot write -o" in err
    code, out, _ = cli(capsys, "opt", "--help")
    assert code == 0
    listed = out.split("passes (-p;")[1].split()
    assert {"propagate-shardings", "segment", "resize-mesh", "allocate-and-deallocate"} <= set(
        listed
    )


# -- did you mean ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["rnu", TP_MLP], "did you mean 'run'?"),
        (["run", TP_MLP, "--seeed", "3"], "did you mean '--seed'?"),
        (["run", TP_MLP, "--jsn"], "did you mean '--json'?"),
        (["run", TP_MLP, "--compute", "interpet"], "did you mean 'interpret'?"),
        (["opt", TP_MLP, "-p", "propagate-sharding"], "did you mean 'propagate-shardings'?"),
        (["print", TP_MLP, "--print-after", "segmnt"], "did you mean 'segment'?"),
        (["show", TP_MLP, "--after", "segmen"], "did you mean 'segment'?"),
        (["show", TP_MLP, "--tensor", "w_1"], "did you mean 'w1'?"),
        (["run", str(REPO / "examples" / "tp_mpl.fus")], "did you mean"),
        (["timeline", TP_MLP, "--machine", "h100-nvlnk"], "did you mean 'h100-nvlink'?"),
    ],
    ids=[
        "command",
        "flag",
        "json",
        "choice",
        "pass",
        "print-after",
        "after",
        "tensor",
        "file",
        "machine",
    ],
)
def test_did_you_mean(capsys, argv: list[str], hint: str) -> None:
    err = user_error(capsys, *argv)
    assert hint in err
    if argv[0] == "run" and "tp_mpl" in argv[1]:
        assert "examples/tp_mlp.fus'?" in err


def test_did_you_mean_an_op(capsys, tmp_path: Path) -> None:
    path = tmp_path / "op.fus"
    path.write_text("input x: float[2]\ny = nge(x)\noutput y\n")
    assert "unknown op 'nge'; did you mean 'neg'?" in user_error(capsys, "print", path)


# -- tables in 80 columns; run's report ------------------------------------------------
TABLE_COMMANDS = [["run", "--compute", "numpy"], ["run", "--devices", "3", "--compute", "numpy"]]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_tables_fit_80_columns_with_whole_headers(capsys, monkeypatch, example: Path) -> None:
    """Every line of run's tables (up to `sent:`) within 80 columns, each header whole
    on its line, on the file's devices and on 3 where the file can be resized to 3."""
    monkeypatch.chdir(REPO)
    for i, (command, *flags) in enumerate(TABLE_COMMANDS):
        code, out, _ = cli(capsys, command, f"examples/{example.name}", *flags)
        if i and code:  # written for its own device count (seed_000) or a 2-D mesh
            continue
        assert code == 0
        tables = out.split("\nsent: ")[0].splitlines()
        assert [line for line in tables if len(line) > 80] == []
        heads = [line.split() for line in tables if line.startswith(("output ", "kind "))]
        assert heads[0] == ["output", "shape", "dtype", "sum", "sum", "|x|"]
        assert heads[1][:4] == ["kind", "input", "output", "team"] and heads[1][-1] == "B/device"
        assert all(line == line.rstrip() for line in tables)


def test_the_passes_table_and_the_timeline_chart_fit_80_columns(capsys) -> None:
    assert all(len(line) <= 80 for line in cli(capsys, "passes")[1].splitlines())
    chart = [line for line in cli(capsys, "timeline", SP_MLP)[1].splitlines() if "|" in line]
    assert chart and all(len(line) <= 80 for line in chart)


def test_run_reports_totals_and_each_devices_peak_memory(capsys) -> None:
    """Bytes sent: per communication its bytes per device on each device of its teams;
    peak memory: the busiest device's own working set, which summed over the devices is
    the working set of them all."""
    code, out, _ = cli(capsys, "run", SP_MLP, "--devices", "3", "--json", "--compute", "numpy")
    doc = json.loads(out)
    totals = doc["totals"]
    assert totals["bytes"] == sum(
        c["bytes_per_device"] * sum(len(t) for t in c["teams"]) for c in doc["communications"]
    )
    passes = fl.Pipeline(["resize-mesh[devices=3]", *default_pass_names()])
    executor = fl.FusionExecutor(fl.load(SP_MLP), pipeline=passes)
    each = [executor.working_set(d) for d in executor.devices]
    assert sum(w.total for w in each) == executor.working_set().total
    assert totals["peak_memory"]["bytes"] == max(w.total for w in each)


def test_one_device_lists_no_collectives(capsys) -> None:
    """On one device the program keeps an Allreduce over a team of one: it moves nothing
    and the report does not list it."""
    code, out, _ = cli(capsys, "run", TP_MLP, "--devices", "1", "--compute", "numpy")
    assert code == 0
    table = out.split("communications\n")[1].split("sent: ")[0].splitlines()[1:]
    assert [row.split()[0] for row in table] == ["(none)"]
    assert "sent: 0 B by the busiest device, 0 B in all" in out
    assert any(c.kind.value == "Allreduce" for c in fl.lower(_on_one(TP_MLP)).communications)


def _on_one(path: str) -> fl.Fusion:
    return fl.Pipeline(["resize-mesh[devices=1]"]).run(fl.load(path))


def test_explain_names_the_reader_as_written_and_what_an_uneven_collective_sends(capsys) -> None:
    code, out, _ = cli(capsys, "explain", SP_MLP, "--devices", "3")
    assert code == 0
    first = out.splitlines()
    assert first[0].startswith(
        "T10 = Set(x (T0)), needed by h1 (T5) = linear(x (T0), w1 (T1), b1 (T2))"
    )
    assert first[3] == (
        "  sent: Allgather (variable: each chunk its own size) 682 B/device; the plan above "
        "counts even chunks, 768 B/device"
    )
    code, out, _ = cli(capsys, "explain", SP_MLP)  # even: no such line
    assert code == 0 and "  sent: " not in out
    # The writer's output as written too: the user's `a`, not the partial a Set reduces.
    block = str(REPO / "examples" / "transformer_block.fus")
    code, out, _ = cli(capsys, "explain", block, "--devices", "3")
    assert code == 0
    assert "T85 = Set(o2 (T45)), needed by a (T46) = linear(o2 (T45), wo (T9))," in out


def test_the_example_inputs_are_seed_7s(capsys, monkeypatch) -> None:
    """README: examples/tp_mlp_inputs.npz gives the report of --seed 7."""
    monkeypatch.chdir(REPO)
    flags = ["--compute", "numpy"]
    code, given, _ = cli(
        capsys, "run", "examples/tp_mlp.fus", "--inputs", "examples/tp_mlp_inputs.npz", *flags
    )
    _, seeded, _ = cli(capsys, "run", "examples/tp_mlp.fus", "--seed", "7", *flags)
    assert code == 0 and given.splitlines()[1:] == seeded.splitlines()[1:]
