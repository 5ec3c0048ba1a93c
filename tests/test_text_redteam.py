"""Malformed input in the newest syntax (shard_map blocks, axis_index, iota, ppermute, a
CollectivePermute's printed line): every mistake is a ParseError at file:line:col with
the source line and a caret, never a traceback; and the mistakes that used to read
silently (a tensor given twice to a block, a statement after `return`, a local name
defined twice, a keyword given twice, a communication's op= or team= edited) are
errors, or read back exactly."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.program.parser import parse_printed

REPO = Path(__file__).resolve().parents[1]
DIDx = fl.ParallelType.DIDx

RING = """\
mesh m = [0, 1, 2, 3]
input x: float32[8] on m
outer_split x axis 0 by 4
parallelize x axis 0 DIDx
shard_map m (x [DIDx]) -> (y [DIDx])
    b = ppermute(x, axis=DIDx, perm=[[0, 1], [1, 2], [2, 3], [3, 0]])
    return b
end
output y
"""
INDEX = """\
mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]]
input x: float32[8, 16] on m
outer_split x axis 0 by 2
parallelize x axis 0 DIDy
shard_map m (x [DIDy]) -> (y [DIDy, DIDx])
    i = axis_index(DIDx)
    z = mul(x, i)
    return z
end
output y
"""
IOTA = """\
mesh m = [0, 1]
t = iota(8)
u = iota(8, float32, 0.5, 2)
v = add(t, u)
output v
set_mesh v m
outer_split v axis 0 by 2
parallelize v axis 0 DIDx
"""
SEED = (REPO / "examples" / "seed_000.fus").read_text()
TP_MLP = REPO / "examples" / "tp_mlp.fus"
PERM = "perm=[[0, 1], [1, 2], [2, 3], [3, 0]]"

# (base, old, new, line:col, a fragment of the message)
BAD = [
    (RING, PERM, "perm=[[0, 1], [1, 2], [2, 3]]", "6:5", "gives device(s) [0] of DIDx no value"),
    (RING, PERM, "perm=[[0, 1], [1, 2], [2, 3], [3, 9]]", "6:5", "each destination once"),
    (RING, PERM, "perm=[[0, 1, 2], [1, 2], [2, 3], [3, 0]]", "6:5", "(source, destination) pairs"),
    (RING, PERM, "perm=[]", "6:5", "no value"),
    (RING, PERM, "perm=[[0.5, 1], [1, 2], [2, 3], [3, 0]]", "6:5", "item 0 is 0.5"),
    (RING, PERM, "perm=[[true, 1], [1, 2], [2, 3], [3, 0]]", "6:5", "item 0 is True"),
    (RING, PERM, "perm=x", "6:5", "a list of (source, destination) pairs"),
    (RING, "axis=DIDx, ", "axis=DIDy, ", "6:5", "axis must be a mesh axis"),
    (RING, "axis=DIDx, ", "axis=DIDx., ", "6:30", "unexpected '.'"),  # a name ends in a part
    (RING, "axis=DIDx, ", "", "6:9", "missing 1 required positional argument: 'axis'"),
    (RING, "ppermute(x, ", "ppermute(2, ", "6:9", "its first argument is a local tensor"),
    (RING, "ppermute(x, ", "ppermute(m, ", "6:18", "'m' is not a local value"),
    (RING, "ppermute(x, ", "ppermute(x, x, ", "6:9", "multiple values for argument 'axis'"),
    (RING, "axis=DIDx, ", "axis=DIDx, axis=DIDx, ", "6:32", "argument 'axis' given twice"),
    (RING, "(x [DIDx])", "(x [DIDx], x [DIDx])", "5:24", "x names two arguments of this"),
    (RING, "(x [DIDx])", "(x [DIDx], x [] as x)", "5:32", "x names two arguments of this"),
    (RING, "(x [DIDx])", "(x [DIDx] as)", "5:25", "unexpected ')'; expected a name"),
    (RING, "(x [DIDx])", "(q [DIDx])", "5:14", "undefined tensor 'q'"),
    (RING, "(y [DIDx])", "(y [DIDx, DIDx])", "5:1", "has 2 entries but the tensor has 1"),
    (RING, "(y [DIDx])", "(x [DIDx])", "5:28", "x is already defined"),
    (RING, "    return b\n", "    return b\n    return b\n", "8:5", "the block returns at line 7"),
    (RING, "    return b\n", "    return b\n    c = neg(b)\n", "8:5", "nothing may follow"),
    (RING, "    b = ppermute", "    x = ppermute", "6:5", "x is already a local value"),
    (RING, "    b = ppermute", "    b, c = ppermute", "6:5", "returns 1 tensor(s)"),
    (RING, "end\n", "", "8:1", "only op calls and `return` may appear; close it with `end`"),
    (RING, "end\noutput y\n", "", "5:1", "this shard_map block has no `end`"),
    (RING, "output y\n", "end\noutput y\n", "9:1", "`end` without a shard_map block"),
    (RING, "shard_map m", "shard_map [0, 1]", "6:5", "devices 0..1 of DIDx"),
    (RING, "shard_map m", "shard_map x", "5:11", "x is a tensor, not a mesh"),
    (RING, "input x: float32[8] on m\n", "input x: float32[6] on m\n", "5:1", "not divisible"),
    (INDEX, "axis_index(DIDx)", "axis_index()", "6:5", "say which with axis="),
    (INDEX, "axis_index(DIDx)", "axis_index(DIDz)", "6:5", "axis must be a mesh axis"),
    (INDEX, "axis_index(DIDx)", "axis_index(DIDx, DIDy)", "6:9", "positional arguments"),
    (INDEX, "axis_index(DIDx)", "axis_index(axis=DIDx, axis=DIDy)", "6:31", "given twice"),
    (INDEX, "axis_index(DIDx)", "axis_index(bogus=DIDx)", "6:9", "unexpected keyword"),
    (INDEX, "axis_index(DIDx)", "axis_index(axis=1.5)", "6:5", "got 1.5 (a float)"),
    (INDEX, "    z = mul(x, i)\n", "    z = mul(x, i)\n    i = axis_index(DIDy)\n", "8:5", "i is "),
    (INDEX, "    return z\n", "    return i\n", "5:1", "the tensor has 0 axes"),
    (INDEX, "(y [DIDy, DIDx])", "(y [DIDy])", "5:1", "of z (T3): the spec replicates"),
    (INDEX, "output y\n", "output y\nj = axis_index(DIDx)\n", "11:1", "axis_index is a collective"),
    (IOTA, "iota(8)", "iota()", "2:5", "iota needs 1 more argument(s): n"),
    (IOTA, "iota(8)", "iota(0)", "2:1", "must be an integer in 1.."),
    (IOTA, "iota(8)", "iota(2.5)", "2:10", "argument 'n' must be an integer"),
    (IOTA, "iota(8)", "iota(8, bool)", "2:1", "dtype bool holds no counts"),
    (IOTA, "iota(8)", "iota(8, float33)", "2:13", "must be a dtype"),
    (IOTA, "iota(8)", "iota(8, int32, 2147483647, 1)", "2:1", "do not fit int32"),
    (IOTA, "iota(8)", "iota(8, int32, 0.5)", "2:1", "start must be an integer"),
    (IOTA, "iota(8)", "iota(8, float32, inf)", "2:1", "start must be a finite number"),
    (IOTA, "iota(8)", "iota(8, float32, 0, nan)", "2:1", "step must be a finite number"),
    (IOTA, "iota(8)", "iota(99999999999999999999)", "2:1", "must be an integer in 1.."),
    (IOTA, "iota(8)", "iota(8, dtype=int32, dtype=int64)", "2:26", "'dtype' given twice"),
    (IOTA, "iota(8)", "iota(1e309)", "2:10", "argument 'n' must be an integer"),
    (IOTA, "outer_split v axis 0 by 2\n", "outer_split v axis 0 by 3\n", "8:1", "extent 3"),
    (SEED, "all_gather(t1)", "all_gather(t1, dim=5)", "10:5", "dim must be an integer in 0..0"),
    (SEED, "all_gather(t1)", "all_gather(t1, tiled=2)", "10:5", "tiled must be True or False"),
    (SEED, "op=sum)", "op=prod)", "11:5", "op must be one of 'sum', 'max'"),
    (SEED, "shard_count=8", "shard_count=0", "12:5", "shard_count 0 must equal the 8"),
    (SEED, "-> (t5 [DIDx])", "-> ()", "9:29", "unexpected ')'; expected a name"),
    (SEED, "-> (t5 [DIDx])", "(t5 [DIDx])", "9:25", "expected '->'"),
    (SEED, "-> (t5 [DIDx])", "-> (t5 [1])", "9:32", "a spec lists a mesh axis"),
    (SEED, "    return t5\n", "    return\n", "15:11", "expected a name"),
    (SEED, "    s = sum(t4)\n", "    s = sum(t4)\n    output s\n", "14:5", "only op calls"),
    (SEED, "    s = sum(t4)\n", "    s = sum(t5)\n", "13:13", "'t5' is not a local value"),
    (SEED, "output t5\n", "output t4\n", "17:8", "undefined tensor 't4'"),
]


def located(message: str, filename: str, where: str) -> bool:
    """`file:line:col: ...`, the source line, and a caret under the column."""
    lines = message.splitlines()
    column = int(where.split(":")[1])
    return (
        lines[0].startswith(f"{filename}:{where}: ")
        and len(lines) == 3
        and lines[2] == " " * (column - 1) + "^"
    )


@pytest.mark.parametrize(
    ("base", "old", "new", "where", "fragment"),
    BAD,
    ids=[f"{k}-{b[2][:30]}" for k, b in enumerate(BAD)],
)
def test_malformed_input_is_a_located_parse_error(base, old, new, where, fragment) -> None:
    assert old in base
    with pytest.raises(fl.ParseError) as info:
        fl.verify(fl.parse(base.replace(old, new, 1), "t.fus"))
    message = str(info.value)
    assert fragment in message and located(message, "t.fus", where), message


def test_the_command_reports_them_in_one_paragraph(tmp_path, capsys) -> None:
    path = tmp_path / "t.fus"
    path.write_text(RING.replace("    return b\n", "    return b\n    return b\n"))
    for command in ("print", "run", "explain", "opt", "show"):
        assert main([command, str(path)]) == 1
        err = capsys.readouterr().err
        assert (
            err.startswith(f"error: {path}:8:5: the block returns at line 7")
            and "Traceback" not in err
        )


def two_spec_fusion() -> fl.Fusion:
    """x given twice to one shard_map, by rows and by columns: a + b is no b + b."""
    with fl.Fusion() as fusion:
        x = fl.tensor([2, 2], name="x")
        fusion.add_input(x)
        both = fl.shard_map(
            lambda a, b: fl.add(a, b), fl.DeviceMesh([0, 1]), [(DIDx,), (None, DIDx)], [(DIDx,)]
        )
        fusion.add_output(both(x, x))
    return fusion


def test_a_tensor_given_twice_under_two_specs_writes_and_reads_back() -> None:
    """Both local values were written `T0` and read back as the second (b + b: a silent
    wrong answer); the second is now written `T0 [none, DIDx] as l1`."""
    fusion = two_spec_fusion()
    text = fl.to_fus(fusion)
    assert "shard_map m0 (T0 [DIDx], T0 [none, DIDx] as l1)" in text
    assert "l2 = add(T0, l1)" in text
    back = fl.parse(text)
    assert fl.to_fus(back) == text
    inputs = [np.arange(4, dtype=np.float32).reshape(2, 2)]
    (want,), (got,) = fl.evaluate(fusion, inputs), fl.evaluate(back, inputs)
    assert np.array_equal(want, got)
    (ran,) = fl.FusionExecutor(back, backend="sim", compute="numpy").run(inputs)
    assert np.array_equal(ran, want)


# -- the printed form: what a communication's line says must be what its tensors say ---
def printed_line(path: Path, kind: str) -> tuple[str, str]:
    """The lowered print of `path` and its line of the communication `kind`."""
    text = str(fl.lower(fl.load(path)))
    (line,) = [x for x in text.splitlines() if x.startswith(f"Communication {kind} ")]
    return text, line


@pytest.mark.parametrize(
    ("kind", "old", "new", "fragment"),
    [
        ("Allreduce", "team=(0 1)", "team=(0)", "takes every device of it: team=(0 1)"),
        ("Allreduce", "team=(0 1), ", "team=(0 1), root=1, ", "has no root"),
        ("Allreduce", "bytes_per_device=1024", "bytes_per_device=-1", "at least 0"),
        ("CollectivePermute", "sources=(3 0 1 2)", "sources=(3 0 1)", "sources"),
        ("CollectivePermute", "sources=(3 0 1 2)", "sources=(3 0 1 9)", "sources"),
        ("CollectivePermute", "sources=(3 0 1 2), ", "", "shows its sources=(...)"),
        ("CollectivePermute", "3->0 [3:4, 0:2]", "3->1 [3:4, 0:2]", "are not the move planned"),
        ("CollectivePermute", "team=(0 1 2 3)", "team=(0 1 2 3 4)", "team=(0 1 2 3)"),
        ("CollectivePermute", "bytes_per_device=8)", "bytes_per_device=9)", "sends at most 8"),
    ],
)
def test_a_communication_line_that_contradicts_its_tensors(tmp_path, kind, old, new, fragment):
    if kind == "CollectivePermute":
        path = tmp_path / "ring.fus"
        path.write_text(RING)
    else:
        path = TP_MLP
    text, line = printed_line(path, kind)
    assert old in line
    number = text.splitlines().index(line) + 1
    with pytest.raises(fl.ParseError) as info:
        parse_printed(text.replace(line, line.replace(old, new, 1)), "t.txt")
    message = str(info.value)
    assert fragment in message and re.match(rf"t\.txt:{number}:\d+: ", message), message
    assert message.splitlines()[2].strip() == "^"


@pytest.mark.parametrize(
    ("kind", "old", "new", "fragment"),
    [
        ("Allreduce", "op=add, ", "op=max, ", "combines the partial values of T10 with op=max"),
        ("Allreduce", "op=add, ", "", "combines the partial values of T10 but names no op"),
        ("CollectivePermute", "sources=", "op=add, sources=", "has op=add, but T1 holds complete"),
    ],
)
def test_a_communication_that_combines_by_another_op_is_invalid(tmp_path, kind, old, new, fragment):
    """The executor reduces by op= (a max of partial sums read back and ran to wrong
    numbers): the program validator checks it against the partial values' op, and the
    reader reports its problem at the communication's line."""
    path = tmp_path / "ring.fus"
    path.write_text(RING)
    text, line = printed_line(path if kind == "CollectivePermute" else TP_MLP, kind)
    number = text.splitlines().index(line) + 1
    with pytest.raises(fl.ParseError) as info:  # at the communication's line
        parse_printed(text.replace(line, line.replace(old, new, 1)), "t.txt")
    message = str(info.value)
    assert message.startswith(f"t.txt:{number}:1: invalid program:") and fragment in message
