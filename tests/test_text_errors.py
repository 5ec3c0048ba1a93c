"""Bad .fus input: every mistake is a ParseError with file:line:col, the source line and
a caret under the column; no lark, numpy or Python exception ever escapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fuserlite as fl
from fuserlite.text.parser import reserved_words

ROOT = Path(__file__).resolve().parents[1]
HEADER = "mesh m = [0, 1]\ninput x: float32[2, 8] on m\ninput y: float32[3]\n"  # lines 1-3

# (name, text, line, column, a fragment of the message)
BAD = [
    ("bad character", HEADER + "z = exp(x) $\n", 4, 12, "unexpected character '$'"),
    ("missing paren", HEADER + "z = exp(x\n", 4, 10, "expected"),
    ("end of file", HEADER + "z = exp(", 4, 9, "unexpected end of file"),
    ("unknown statement", HEADER + "splitt x axis 0 by 2\n", 4, 1, "unknown statement 'splitt'"),
    ("unknown op", HEADER + "z = expo(x)\n", 4, 5, "unknown op 'expo'"),
    ("undefined tensor", HEADER + "z = add(x, q)\n", 4, 12, "undefined tensor 'q'"),
    ("redefined tensor", HEADER + "x = exp(y)\n", 4, 1, "x is already defined"),
    ("redefined mesh", HEADER + "mesh x = [0]\n", 4, 6, "x is already defined"),
    ("too many arguments", HEADER + "z = exp(x, y)\n", 4, 12, "exp takes at most 1"),
    ("missing argument", HEADER + "z = broadcast(x)\n", 4, 5, "needs 1 more argument(s): flags"),
    ("unknown keyword", HEADER + "z = sum(x, keep=true)\n", 4, 12, "sum has no argument 'keep'"),
    ("keyword twice", HEADER + "z = sum(x, [0], axes=[1])\n", 4, 17, "'axes' given twice"),
    ("bad flags", HEADER + "z = broadcast(x, [1, 0])\n", 4, 19, "must be a list of true/false"),
    ("float axis", HEADER + "z = sum(x, [1.5])\n", 4, 13, "must be an integer or a list"),
    ("shape mismatch", HEADER + "z = add(x, y)\n", 4, 1, "do not broadcast"),
    ("two scalars", HEADER + "z = add(1, 2)\n", 4, 1, "a and b are both numbers"),
    ("mesh as tensor", HEADER + "z = exp(m)\n", 4, 9, "m is a mesh, not a tensor"),
    ("unknown dtype", HEADER + "input w: float33[2]\n", 4, 10, "unknown dtype 'float33'"),
    ("zero extent", HEADER + "input w: float32[4, 0]\n", 4, 21, "extent must be an integer >= 1"),
    ("negative extent", HEADER + "input w: float32[-3]\n", 4, 18, "extent must be an integer >= 1"),
    ("unknown mesh", HEADER + "input w: float32[2] on q\n", 4, 24, "undefined mesh 'q'"),
    ("tensor as mesh", HEADER + "set_mesh y x\n", 4, 12, "x is a tensor, not a mesh"),
    ("duplicate device", "mesh m = [0, 0]\n", 1, 10, "lists a device twice"),
    ("float device", "mesh m = [0, 1.0]\n", 1, 14, "device id must be an integer"),
    (
        "unknown parallel type",
        HEADER + "parallelize x axis 0 DIDw\n",
        4,
        22,
        "unknown parallel type",
    ),
    ("axis out of range", HEADER + "split x axis 5 by 2\n", 4, 1, "axis 5 is out of range"),
    ("zero factor", HEADER + "split x axis 0 by 0\n", 4, 19, "factor must be an integer >= 1"),
    ("float factor", HEADER + "outer_split x axis 0 by 2.5\n", 4, 25, "factor must be an integer"),
    (
        "merge reduction",
        HEADER + "s = sum(x, [1])\nmerge s axes 0 1\n",
        5,
        1,
        "mix a reduction and an iteration axis",
    ),
    (
        "same parallel type twice",
        HEADER + "parallelize x axis 0 TIDx\nparallelize x axis 1 TIDx\n",
        5,
        1,
        "already has parallel type threadIdx.x",
    ),
    ("reorder twice", HEADER + "reorder x {0: 1, 0: 1}\n", 4, 18, "axis 0 is moved twice"),
    (
        "DID extent is not the mesh size",
        HEADER + "parallelize x axis 1 DIDx\n",
        4,
        1,
        "outer_split the axis by 2",
    ),
    (
        "DID after mesh change",
        HEADER
        + "z = exp(x)\nsplit z axis 1 by 4\nparallelize z axis 1 DIDx\nset_mesh z [0, 1, 2]\n",
        7,
        1,
        "has extent 2 but DIDx (mesh axis 0 of DeviceMesh{0 1 2}, 3 devices) has 3 devices",
    ),
    ("output undefined", HEADER + "output q\n", 4, 8, "undefined tensor 'q'"),
    ("output twice", HEADER + "output x\noutput x\n", 5, 1, "already an output"),
    ("computed input", HEADER + "z = exp(x)\ninput z\n", 5, 1, "is computed by exp"),
    ("bad expand", HEADER + "z = expand(x, [4, 8])\n", 4, 1, "cannot be expanded"),
    ("bad reshape", HEADER + "z = reshape(x, [3, 5])\n", 4, 1, "cannot view"),
    ("keyword as name", HEADER + "output = exp(x)\n", 4, 8, "expected a name"),
    ("reserved op result", HEADER + "on = exp(x)\n", 4, 1, "on is a reserved word"),
    ("reserved mesh", "mesh mesh = [0, 1]\n", 1, 6, "mesh is a reserved word"),
    ("reserved input", "input split: float32[2]\n", 1, 7, "split is a reserved word"),
    ("arabic digit", HEADER + "input w: float32[\u0663]\n", 4, 18, "(ARABIC-INDIC DIGIT THREE)"),
    ("superscript digit", HEADER + "z = add(x, \u00b2)\n", 4, 12, "with the digits 0-9"),
    ("bogus cache op", HEADER + "z = set(x, cache_op=Bogus)\n", 4, 12, "AllLevels, Streaming"),
]


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(fl.ParseError) as info:
        fl.parse(text, "bad.fus")
    err = info.value
    message = str(err)
    first, src, caret = message.split("\n")
    assert (err.line, err.column) == (line, column), message
    assert first.startswith(f"bad.fus:{line}:{column}: "), message
    assert fragment in first, message
    assert src == text.split("\n")[line - 1]
    assert caret == " " * (column - 1) + "^"


@pytest.mark.parametrize("word", sorted(reserved_words()))
def test_every_reserved_word_is_refused_as_a_name(word: str) -> None:
    for text in (f"mesh {word} = [0]\n", f"input {word}: float32[2]\n", f"{word} = neg(x)\n"):
        with pytest.raises(fl.ParseError, match=f"{word} is a reserved word|expected"):
            fl.parse(HEADER + text, "bad.fus")


def test_the_documented_reserved_words_are_the_grammars() -> None:
    doc = (ROOT / "docs" / "fus-format.md").read_text()
    match = re.search(r"Reserved words \(never names\): ((?:`\w+` ?)+)", doc)
    assert match, "docs/fus-format.md lists the reserved words"
    assert set(re.findall(r"`(\w+)`", match.group(1))) == reserved_words()


def test_cache_ops_of_the_format() -> None:
    for op in ("Unspecified", "AllLevels", "Streaming", "Global"):
        fusion = fl.parse(f"input x: float32[2]\ny = set(x, cache_op={op})\noutput y\n")
        assert f"cache_op={op} )" in fusion.print_math()


def test_enough_distinct_bad_inputs() -> None:
    assert len({b[1] for b in BAD}) >= 15


def test_op_errors_name_the_written_tensors() -> None:
    with pytest.raises(fl.ParseError) as info:
        fl.parse(HEADER + "z = add(x, y)\n", "bad.fus")
    assert "shapes x (T0)[2, 8] and y (T1)[3]" in str(info.value)


def test_caret_under_a_tab_indented_column() -> None:
    with pytest.raises(fl.ParseError) as info:
        fl.parse("\tz = exp(q)\n", "tab.fus")
    assert str(info.value).endswith("\tz = exp(q)\n\t        ^")


def test_load_reports_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.fus"
    path.write_text("input x: float32[2]\noutput\n")
    with pytest.raises(fl.ParseError, match=rf"^{path}:2:7: unexpected end of line"):
        fl.load(path)
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(fl.ParseError, match=rf"^{path}:1:1: the file is not UTF-8 text .*UTF-16"):
        fl.load(path)
    path.write_bytes(b"input x: float32[2]\ny = neg(x)\x1b[2J\xc3\x28\n")
    with pytest.raises(fl.ParseError) as info:
        fl.load(path)
    # located at the bad byte; the control character quoted escaped, the caret under it
    assert str(info.value).splitlines() == [
        f"{path}:2:15: the file is not UTF-8 text (byte 0xc3 here: a binary file?)",
        "y = neg(x)\\x1b[2J\ufffd(",
        " " * 17 + "^",
    ]


@pytest.mark.parametrize("name", ["softmax.fus", "bias_gelu.fus"])
def test_no_internal_exception_on_any_truncation(name: str) -> None:
    """Every prefix of a valid file either parses or raises ParseError, nothing else."""
    text = (ROOT / "examples" / name).read_text()
    for end in range(len(text)):
        try:
            fl.parse(text[:end], name)
        except fl.ParseError as err:
            assert err.line is not None and err.column is not None


@pytest.mark.parametrize("garbage", ["\x00", "{}", "= = =", "input", "x(", "[1, 2]", "mesh m = 1"])
def test_garbage_is_a_parse_error(garbage: str) -> None:
    with pytest.raises(fl.ParseError):
        fl.parse(garbage)


@pytest.mark.parametrize("at", [30, 50_000, 99_990])
def test_an_error_in_a_long_line_quotes_a_window_around_the_column(at: int) -> None:
    """A 1 MB line gave 200 KB-1 MB of stderr: the error quotes at most ~200 characters
    of it, cut with "...", the caret still under the column. (A 100 KB line: the parser
    reads about 10 us a character, so 1 MB took 9-17 s for the same window.)"""
    line = "y = add(x, " + "1, " * ((100_000 - 20) // 3) + ")"
    column = min(at, len(line))
    text = "input x: float32[2]\n" + line[: column - 1] + "?" + line[column:] + "\n"
    with pytest.raises(fl.ParseError) as info:
        fl.parse(text, "long.fus")
    first, shown, caret = str(info.value).split("\n")
    assert first.startswith(f"long.fus:2:{column}: unexpected character '?'")
    assert len(shown) <= 206 and len(caret) <= 206
    assert shown[len(caret) - 1] == "?"  # the caret points at the column
    assert shown.startswith("...") == (column > 101)
    assert shown.endswith("...") == (column < len(line) - 100)
