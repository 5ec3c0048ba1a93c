"""`fuserlite explain` of a program read back from its printed form says what `explain`
of the .fus file says: the `Planner: latency_bytes=N` line and the ` plan
intermediate :` marks carry what the communications alone do not (the latency every
plan was chosen at, which communications are the steps of one plan)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cli_opt import cli

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.ir.errors import ParseError
from fuserlite.pipeline import Pipeline, default_pass_names, latency_options
from fuserlite.program.parser import parse_printed

REPO = Path(__file__).resolve().parents[1]
# The examples that have communications, each also re-sharded onto a 2x4 mesh where it
# can be (multi-step plans at latency 0), at the default latency and by bytes alone.
COMMUNICATING = ["dp_tp_mlp", "seed_000", "sp_mlp", "tp_mlp", "transformer_block"]
LATENCIES = [None, 0]
MESHES = {"dp_tp_mlp": [None], "seed_000": [None]}


def nameless(text: str) -> str:
    """Explain's text without the user's names (`y (T7)` -> `T7`): the printed dialect
    shows T numbers only (docs/printed-form.md, 'What is not printed')."""
    return re.sub(r"\b\w+ \((T\d+)\)", r"\1", text)


def pipeline(mesh: str | None, latency: int | None) -> list[str]:
    """The passes `explain --mesh M --latency-bytes L` runs, as an `opt -p` list."""
    resize = [f"resize-mesh[mesh={mesh}]"] if mesh else []
    return resize + default_pass_names(**latency_options(latency))


CASES = [
    pytest.param(name, mesh, latency, id=f"{name}-{mesh or '1d'}-L{latency}")
    for name in COMMUNICATING
    for mesh in MESHES.get(name, [None, "2x4"])
    for latency in LATENCIES
]


@pytest.mark.parametrize(("name", "mesh", "latency"), CASES)
def test_explain_of_the_printed_program_is_that_of_the_fus_file(
    capsys, monkeypatch, name: str, mesh: str | None, latency: int | None
) -> None:
    path = REPO / "examples" / f"{name}.fus"
    flags = [
        *(["--mesh", mesh] if mesh else []),
        *(["--latency-bytes", latency] * (latency is not None)),
    ]
    code, direct, err = cli(capsys, monkeypatch, "explain", path, *flags)
    assert (code, err) == (0, ""), err
    code, text, err = cli(capsys, monkeypatch, "opt", path, "-p", ",".join(pipeline(mesh, latency)))
    assert (code, err) == (0, ""), err
    code, back, err = cli(capsys, monkeypatch, "explain", "-", stdin=text)
    assert (code, err) == (0, ""), err
    assert back == nameless(direct)
    # printed again, the program read back is the same text (its marks and latency included)
    code, again, err = cli(capsys, monkeypatch, "opt", "-", stdin=text)
    assert (code, again) == (0, text), err


def test_opt_latency_bytes_lowers_as_explain_does(capsys, monkeypatch) -> None:
    """`opt F --latency-bytes L | explain -` is `explain F --latency-bytes L`."""
    path = REPO / "examples" / "sp_mlp.fus"
    code, text, err = cli(capsys, monkeypatch, "opt", path, "--latency-bytes", "0")
    assert code == 0 and text.startswith("Planner: latency_bytes=0\n"), err
    code, back, _ = cli(capsys, monkeypatch, "explain", "-", stdin=text)
    code, direct, _ = cli(capsys, monkeypatch, "explain", path, "--latency-bytes", "0")
    assert back == nameless(direct) and "1 launch x 0 B" in back


def lowered_text(source: str | Path, latency: int | None, mesh: str | None = None) -> str:
    fusion = fl.load(source) if isinstance(source, Path) else fl.parse(source)
    return str(Pipeline(pipeline(mesh, latency)).run(fusion))


def test_fl_load_of_a_printed_program_explains_as_the_original(tmp_path) -> None:
    fusion = fl.load(REPO / "examples" / "tp_mlp.fus")
    program = Pipeline(pipeline("2x4", 0)).run(fusion)
    path = tmp_path / "tp_mlp.txt"
    path.write_text(str(program))
    back = fl.load(path)
    assert isinstance(back, fl.Program)
    assert fl.explain(back) == nameless(fl.explain(program))
    assert len(back.reshardings) == 1 and len(back.communications) == 3


# Two resharding Sets in a row, y only read by z's: (R,R) -> (S0,R) -> (S0,S1), two
# LocalSlices, which together are also the planner's plan from x to z.
TWO_SETS = """\
mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]]
input x: float32[8, 16] on m
y = set(x)
z = set(y)
out = neg(z)
output out
outer_split y axis 0 by 2
parallelize y axis 0 DIDy
outer_split z axis 0 by 2
parallelize z axis 0 DIDy
outer_split z axis 2 by 4
parallelize z axis 2 DIDx
"""


@pytest.mark.parametrize("latency", LATENCIES)
def test_two_reshardings_in_a_row_read_back_as_two(latency: int | None) -> None:
    program = Pipeline(pipeline(None, latency)).run(fl.parse(TWO_SETS))
    assert [len(r.communications) for r in program.reshardings] == [1, 1]
    back = parse_printed(str(program))
    assert [len(r.communications) for r in back.reshardings] == [1, 1]
    assert fl.explain(back) == nameless(fl.explain(program))


TP_MLP = REPO / "examples" / "tp_mlp.fus"


def marked_text() -> tuple[str, list[str]]:
    """tp_mlp on 2x4 at latency 0 (one plan of three steps), and its two marks."""
    text = lowered_text(TP_MLP, 0, "2x4")
    marks = [line for line in text.splitlines() if line.startswith(" plan intermediate : ")]
    assert marks == [" plan intermediate : T10 -> T7"] * 2
    return text, marks


def parse_error(text: str) -> str:
    with pytest.raises(ParseError) as info:
        parse_printed(text, "t.txt")
    return str(info.value)


def test_a_plan_is_read_at_the_latency_its_planner_line_gives() -> None:
    """The same marked steps at another latency are not the planner's plan: an error
    naming the latency and the plan it gives, at the mark."""
    text, _ = marked_text()
    message = parse_error(text.replace("Planner: latency_bytes=0", "Planner: latency_bytes=131072"))
    assert "LocalSlice + Allreduce + Allgather from T10 to T7 is marked one plan" in message
    assert "at latency_bytes=131072 is Allreduce on DIDx teams" in message
    line = text.splitlines().index(" plan intermediate : T10 -> T7") + 1
    assert message.startswith(f"t.txt:{line}:1: ")
    assert message.splitlines()[1:] == [" plan intermediate : T10 -> T7", "^"]


def test_without_its_marks_a_plan_reads_as_its_steps() -> None:
    """The marks say which steps are one plan: without them each communication is one
    resharding (a hand-written one that is no plan of the planner 'as written')."""
    text, marks = marked_text()
    back = parse_printed(text.replace(marks[0] + "\n", ""), "t.txt")
    assert [len(r.communications) for r in back.reshardings] == [1, 1, 1]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("T10 -> T7", "T11 -> T7", 1),
            "T16 is marked an intermediate of T11 -> T7, but the "
            "communications through it go from T10 to T7",
        ),
        (("T10 -> T7", "T10 to T7", 1), "expected ` plan intermediate : T<source> -> T<target>`"),
        (
            ("Planner: latency_bytes=0", "Planner: latency_bytes=-1", 1),
            "expected `Planner: latency_bytes=N`",
        ),
        (
            ("Planner: latency_bytes=0", "Planner: latency=0", 1),
            "expected `Planner: latency_bytes=N`",
        ),
    ],
)
def test_marks_and_a_planner_line_that_contradict_the_program(edit, message: str) -> None:
    text, _ = marked_text()
    old, new, count = edit
    assert message in parse_error(text.replace(old, new, count))


def test_a_mark_on_a_tensor_no_plan_passes_through() -> None:
    text, marks = marked_text()
    lines = text.splitlines()
    # the plan's result T7, which a kernel reads: no next step reads it
    head = next(
        k
        for k, line in enumerate(lines)
        if line.startswith("T7_") and k > 0 and lines[k + 1].startswith(" logical")
    )
    marked = [*lines[: head + 1], marks[0], *lines[head + 1 :]]
    assert (
        "T7 is marked an intermediate of a plan, but the next communication does not read it"
        in (parse_error("\n".join(marked) + "\n"))
    )
    # a fusion input: no communication computes it
    head = next(
        k
        for k, line in enumerate(lines)
        if line.startswith("T0_g_float") and lines[k + 1].startswith(" logical")
    )
    marked = [*lines[: head + 1], marks[0], *lines[head + 1 :]]
    assert "T0 is marked an intermediate of a plan, but no communication computes it" in (
        parse_error("\n".join(marked) + "\n")
    )


def test_a_fusion_has_no_planner_line_and_no_marks() -> None:
    text = str(fl.load(TP_MLP))
    assert "a fusion has no `Planner:` line" in parse_error("Planner: latency_bytes=0\n" + text)
    lines = text.splitlines()
    k = next(k for k, line in enumerate(lines) if line.startswith(" logical domain"))
    marked = [*lines[:k], " plan intermediate : T0 -> T1", *lines[k:]]
    assert "a fusion's tensors are no plan's intermediates" in parse_error("\n".join(marked) + "\n")


def test_explain_of_a_printed_program_rejects_what_would_re_lower_it(capsys, monkeypatch) -> None:
    path = REPO / "examples" / "sp_mlp.fus"
    _, text, _ = cli(capsys, monkeypatch, "opt", path, "--latency-bytes", "0")
    for flags, message in [
        (
            ["--mesh", "2x4"],
            "--mesh re-shards a fusion before lowering it, and <stdin> is a lowered",
        ),
        (["--latency-bytes", "5"], "<stdin> was planned at latency_bytes=0 (its `Planner:` line)"),
    ]:
        code, out, err = cli(capsys, monkeypatch, "explain", "-", *flags, stdin=text)
        assert (code, out) == (1, "") and message in err, err
    code, out, _ = cli(capsys, monkeypatch, "explain", "-", "--latency-bytes", "0", stdin=text)
    assert code == 0 and out.startswith("T10 = Set(T0)")
    passes = "propagate-shardings,insert-reshardings,reorder-sharded-axis,segment"
    _, early, _ = cli(capsys, monkeypatch, "print", path, "--passes", passes)
    code, out, err = cli(capsys, monkeypatch, "explain", "-", stdin=early)
    assert code == 1 and "is a program before lower-communications" in err, err


def test_opt_and_print_latency_bytes(capsys, monkeypatch) -> None:
    """--latency-bytes alone lowers (it was ignored by print); with the passes given it
    belongs in lower-communications' spec; opt --lowered starts from a fusion."""
    path = REPO / "examples" / "sp_mlp.fus"
    code, out, _ = cli(capsys, monkeypatch, "print", path, "--latency-bytes", "0")
    assert code == 0 and out.startswith("Planner: latency_bytes=0\n")
    code, lowered, _ = cli(capsys, monkeypatch, "opt", path, "--lowered")
    assert code == 0 and lowered.startswith("Planner: latency_bytes=131072\n")
    for argv, message in [
        (
            ["opt", path, "-p", "segment", "--latency-bytes", "0"],
            "write lower-communications[latency_bytes=0] instead",
        ),
        (["opt", "-", "--lowered"], "--lowered runs the default pipeline on a fusion, and <stdin>"),
    ]:
        code, out, err = cli(capsys, monkeypatch, *argv, stdin=lowered)
        assert (code, out) == (1, "") and message in err, err


def test_commands_that_take_a_fusion_say_so_of_a_printed_program(tmp_path, capsys) -> None:
    path = tmp_path / "t.txt"
    path.write_text(str(fl.lower(fl.load(TP_MLP))))
    for command in ("run", "print", "show", "codegen"):
        assert main([command, str(path)]) == 1
        err = capsys.readouterr().err
        assert f"{path} is a printed program (after segment); this command takes a fusion" in err
    # a printed fusion is a fusion: it runs
    path.write_text(str(fl.load(TP_MLP)))
    assert main(["run", str(path), "--compute", "numpy"]) == 0
    assert "\nvalidation: ok\n" in capsys.readouterr().out
