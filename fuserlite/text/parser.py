"""Parser of the .fus text format: text in, Fusion out.

One statement per line, `#` starts a comment (full grammar: fus.lark; guide:
docs/fus-format.md)::

    mesh m = [0, 1]                       # a device mesh (`... axes (tp)`: its axes' names)
    input x: float32[4, 8] on m           # declare a tensor and make it a fusion input
    tensor t: float32[4]                  # declare a tensor that is not an input
    input t                               # make a declared tensor an input
    y = add(x, 1.5)                       # any builder of fuserlite.ops, scalars allowed
    s = sum(y, [1], keepdim=true)         # keyword arguments
    output s                              # make a tensor a fusion output
    set_mesh y m                          # place a tensor on a mesh
    split x axis 1 by 4                   # inner split: the inner part has extent 4
    outer_split x axis 0 by 2             # outer split: the outer part has extent 2
    merge x axes 1 2                      # merge two loop axes
    reorder x {0: 1, 1: 0}                # move loop axes {old: new}
    parallelize x axis 0 DIDx             # or deviceIdx.x, TIDx, threadIdx.x, Unswitch, ...
    swizzle1d y axis 0 DIDx               # nvFuser's swizzle1d (a ring pipeline's Stream axis)
    place x on m (S0, R)                  # fl.distribute: one placement per mesh axis

Statements run in order. Names are the writer's (x, y); the fusion numbers its
tensors T0, T1, ... in creation order. Every mistake is a ParseError with
`file:line:col`, the source line and a caret.
"""

from __future__ import annotations

import functools
import os
import re
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput
from lark.lexer import PatternStr

from fuserlite import ops
from fuserlite.ir import args
from fuserlite.ir.errors import FuserliteError, FusionError, ParseError, ScheduleError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import sharding_problem
from fuserlite.ir.tensor import Axis, TensorView
from fuserlite.ir.types import DType, ParallelType
from fuserlite.schedule.placements import distribute
from fuserlite.spmd.collectives import COLLECTIVES
from fuserlite.text.calls import Arg, call_op
from fuserlite.text.regions import Block, call_collective, run_block
from fuserlite.text.source import Source, syntax_error

_PUNCTUATION = ("LSQB", "RSQB", "COMMA")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Grammar:
    """The .fus grammar, compiled on first use and then read only: lark keeps the state
    of each parse in the parse, so every parse (and thread) shares one compiled parser.
    GRAMMAR is the one instance; nothing else of the parser outlives a parse."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @functools.cached_property
    def lark(self) -> Lark:
        return Lark(
            self.path.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=False
        )

    @functools.cached_property
    def reserved_words(self) -> frozenset[str]:
        """The keywords that look like names (`mesh`, `on`, `true`, ...): never names.

        lark's contextual lexer would accept most of them as names where no keyword fits
        (`mesh mesh = [0]`); docs/fus-format.md promises they are reserved, so they are."""
        return frozenset(
            t.pattern.value
            for t in self.lark.terminals
            if isinstance(t.pattern, PatternStr) and _NAME.fullmatch(t.pattern.value)
        )


GRAMMAR = Grammar(Path(__file__).with_name("fus.lark"))


def reserved_words() -> frozenset[str]:
    """The grammar's keywords that look like names: never names."""
    return GRAMMAR.reserved_words


# A .fus file is text a person writes or a tool generates: 16 MiB is ~600k statements.
# Larger input is refused before it is read, so a path to /dev/zero or a huge file is
# an error, not a parse that grows until memory runs out.
MAX_SOURCE_BYTES = 16 * 2**20


def parse(text: str, filename: str = "<string>") -> Fusion:
    """Parse .fus text into a new Fusion; raises ParseError on any mistake."""
    check_source(text, filename, "parse", ".fus text")
    source = Source(text, filename)
    try:
        tree = GRAMMAR.lark.parse(text)
    except UnexpectedInput as exc:
        raise syntax_error(source, GRAMMAR.lark, exc) from None
    return _Builder(source).run(tree)


def check_source(text: object, filename: object, who: str, what: str) -> None:
    """ParseError unless `text` and `filename` are strs and `text` (`what`, in the
    message) has at most MAX_SOURCE_BYTES characters."""
    args.instance(text, str, who, "text", "a str (decode bytes first)", ParseError)
    args.instance(filename, str, who, "filename", "a str", ParseError)
    if len(text) > MAX_SOURCE_BYTES:
        raise ParseError(
            f"{filename}: {len(text)} characters; {what} is limited to {MAX_SOURCE_BYTES} (16 MiB)"
        )


def load(path: str | Path | BinaryIO, name: str | None = None) -> Fusion:
    """Read and parse a .fus file of at most MAX_SOURCE_BYTES (a path, or an open binary
    stream such as stdin, called `name` in messages)."""
    name = str(path) if name is None else name
    return parse(read_source(path, name), name)


def read_source(path: str | Path | BinaryIO, name: str | None = None) -> str:
    """The text of a file (a path, or an open binary stream such as stdin, called
    `name` in messages) of at most MAX_SOURCE_BYTES; ParseError if it cannot be read."""
    if not hasattr(path, "read"):
        accepted = "a file path (str or os.PathLike)"
        args.instance(path, (str, os.PathLike), "load", "path", accepted, ParseError)
    name = str(path) if name is None else name
    too_big = f"{name}: the file is larger than {MAX_SOURCE_BYTES} bytes (16 MiB), the limit of a .fus file"
    try:
        with open(path, "rb") if not hasattr(path, "read") else nullcontext(path) as f:
            try:
                size = os.fstat(f.fileno()).st_size
            except (AttributeError, OSError, ValueError):  # a stream without a descriptor
                size = 0
            if size > MAX_SOURCE_BYTES:  # a regular file: refuse before reading
                raise ParseError(too_big)
            # Devices and pipes report no size: read one byte past the limit at most.
            data = f.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            raise ParseError(too_big)
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(data, exc, name) from None
    except OSError as exc:
        raise ParseError(f"{name}: cannot read the file: {exc}") from None


def not_utf8(data: bytes, exc: UnicodeDecodeError, name: str) -> ParseError:
    """The ParseError of bytes that are not UTF-8, located at the first bad byte."""
    before = data[: exc.start].decode("utf-8")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    bad = data[exc.start]
    why = "the file is not UTF-8 text"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        why += " (it starts with a UTF-16 byte-order mark: save it as UTF-8)"
    else:
        why += f" (byte 0x{bad:02x} here: a binary file?)"
    return Source(data.decode("utf-8", errors="replace"), name).error(why, line, column)


MAX_LIST_DEPTH = 3  # every argument is a number or a list nested at most 3 deep (a 3-D mesh)


class _TooDeep(Exception):
    """A list nested deeper than any argument needs (located at its bracket)."""

    def __init__(self, line: int, column: int) -> None:
        super().__init__(f"lists nest at most {MAX_LIST_DEPTH} deep")
        self.line, self.column = line, column


def _arg(node: Token | Tree, depth: int = 0) -> Arg:
    """A value of the parse tree as an Arg (numbers converted, lists recursed)."""
    if isinstance(node, Tree):  # a list: keep its '[' for the position
        bracket = node.children[0]
        if depth >= MAX_LIST_DEPTH:
            raise _TooDeep(bracket.line, bracket.column)
        items = [_arg(c, depth + 1) for c in node.children if not _is_punctuation(c)]
        return Arg(items, "list", "a list", bracket.line, bracket.column)
    kind, value = "name", str(node)
    if node.type in ("TRUE", "FALSE"):
        kind, value = "bool", node.type == "TRUE"
    elif node.type in ("INF", "NEG_INF", "NAN"):
        kind, value = "float", float(str(node))
    elif node.type == "NUMBER":
        is_int = str(node).lstrip("+-").isdigit()
        kind, value = ("int", int(node)) if is_int else ("float", float(node))
    return Arg(value, kind, repr(str(node)), node.line, node.column)


def _is_punctuation(node: Token | Tree) -> bool:
    return isinstance(node, Token) and node.type in _PUNCTUATION


class _Builder:
    """Runs the statements of a parse tree, in order, on a new Fusion."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.fusion = Fusion()
        self.tensors: dict[str, TensorView] = {}
        self.meshes: dict[str, DeviceMesh] = {}
        self.block: Block | None = None  # the shard_map block being read

    def run(self, tree: Tree) -> Fusion:
        with self.fusion:  # the fusion of ops with no tensor operands (iota)
            self._statements(tree)
        if self.block is not None:
            raise self._at_stmt(self.block.header, "this shard_map block has no `end`")
        return self.fusion

    def _statements(self, tree: Tree) -> None:
        for stmt in tree.children:
            if self.block is not None and stmt.data in ("assign", "return_stmt"):
                self.block.statements.append(stmt)
                continue
            made = len(self.fusion.tensors_created)
            try:
                self._statement(stmt)
            except ParseError:
                raise
            except _TooDeep as exc:  # before scanning the (deep) statement for names
                raise self.source.error(str(exc), exc.line, exc.column) from None
            except FuserliteError as exc:  # ops and primitives: locate at the statement
                raise self._at_stmt(stmt, str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - never let an internal error escape
                what = f"internal error ({type(exc).__name__}: {exc}); please report it"
                raise self._at_stmt(stmt, what) from exc
            # Every tensor the statement made (implicit broadcasts too) points back at it.
            for tv in self.fusion.tensors_created[made:]:
                tv.origin = f"{self.source.filename}:{stmt.meta.line}"

    def _statement(self, stmt: Tree) -> None:
        if self.block is not None and stmt.data != "end_stmt":
            raise self._at_stmt(
                stmt,
                "inside a shard_map block only op calls and `return` may appear; close it with `end`",
            )
        if stmt.data == "shard_map":
            self.block = Block(stmt, self._mesh(stmt.children[0]))
        elif stmt.data == "end_stmt":
            if self.block is None:
                raise self._at_stmt(stmt, "`end` without a shard_map block")
            block, self.block = self.block, None
            run_block(self, block, stmt, _arg)
        elif stmt.data == "return_stmt":
            raise self._at_stmt(stmt, "`return` outside a shard_map block")
        else:
            getattr(self, "_" + stmt.data)(*stmt.children)

    def _at_stmt(self, stmt: Tree, message: str) -> ParseError:
        # Tensors carry their written names, so the message already says `x (T0)`.
        return self.source.error(message, stmt.meta.line, stmt.meta.column)

    def _fail(self, message: str, where: Token | Arg) -> ParseError:
        return self.source.error(message, where.line, where.column)

    # -- names ------------------------------------------------------------------
    def _define(self, name: Token) -> str:
        if name in reserved_words():
            raise self._fail(
                f"{name!s} is a reserved word of the .fus format and cannot name a tensor or "
                "a mesh; pick another name",
                name,
            )
        if name in self.tensors or name in self.meshes:
            what = "tensor" if name in self.tensors else "mesh"
            raise self._fail(f"{name!s} is already defined (as a {what}); pick a new name", name)
        return str(name)

    def _tensor(self, name: Token | Arg) -> TensorView:
        key = name.value if isinstance(name, Arg) else str(name)
        if key in self.tensors:
            return self.tensors[key]
        if key in self.meshes:
            raise self._fail(f"{key} is a mesh, not a tensor", name)
        raise self._fail(f"undefined tensor {key!r}; declare it with `input` or an op", name)

    def _mesh(self, ref: Token | Tree) -> DeviceMesh:
        if isinstance(ref, Tree):
            return self._mesh_of(_arg(ref))
        if ref in self.meshes:
            return self.meshes[str(ref)]
        if ref in self.tensors:
            raise self._fail(f"{ref!s} is a tensor, not a mesh", ref)
        raise self._fail(f"undefined mesh {str(ref)!r}; declare it with `mesh {ref} = [0, 1]`", ref)

    def _mesh_of(self, arg: Arg) -> DeviceMesh:
        try:
            return DeviceMesh(self._device_ids(arg))
        except ParseError:
            raise
        except FuserliteError as exc:
            raise self._fail(str(exc), arg) from None

    def _device_ids(self, arg: Arg) -> list:
        """A written mesh as (nested) lists of device ids: `[0, 1]`, `[[0, 1], [2, 3]]`."""
        rows = [a for a in arg.value if a.kind == "list"]
        if rows and len(rows) == len(arg.value):
            return [self._device_ids(r) for r in rows]
        bad = [a for a in arg.value if a.kind != ("list" if rows else "int")]
        if bad:
            what = (
                "every row of a mesh must be a list of device ids"
                if rows
                else ("a device id must be an integer")
            )
            raise self._fail(f"{what}, got {bad[0].text}", bad[0])
        return [a.value for a in arg.value]

    def _int(self, tok: Token, what: str, minimum: int | None = None) -> int:
        arg = _arg(tok)
        if arg.kind != "int" or (minimum is not None and arg.value < minimum):
            rule = "an integer" if minimum is None else f"an integer >= {minimum}"
            raise self._fail(f"{what} must be {rule}, got {tok!s}", tok)
        return arg.value

    # -- declarations -------------------------------------------------------------
    def _mesh_decl(self, name: Token, devices: Tree, axes: Tree | None = None) -> None:
        key = self._define(name)
        mesh = self._mesh(devices)
        if axes is not None:
            names = [str(t) for t in axes.children]
            for t in axes.children:
                if t in reserved_words():
                    raise self._fail(f"{t!s} is a reserved word and cannot name a mesh axis", t)
            try:
                mesh = mesh.with_axis_names(names)
            except FuserliteError as exc:
                raise self._fail(str(exc), axes.children[0]) from None
        self.meshes[key] = mesh

    def _declare(self, name: Token, ttype: Tree) -> TensorView:
        key = self._define(name)
        dtype_tok, dims, *rest = ttype.children
        try:
            dtype = DType.parse(str(dtype_tok))
        except FuserliteError as exc:
            raise self._fail(str(exc), dtype_tok) from None
        shape = [self._int(t, "an extent", 1) for t in dims.children if not _is_punctuation(t)]
        contiguous = not any(isinstance(r, Token) and r.type == "NONCONTIGUOUS" for r in rest)
        tv = ops.tensor(shape, dtype, contiguous=contiguous, fusion=self.fusion, name=key)
        for r in rest:
            if isinstance(r, Tree):  # placement
                tv.set_device_mesh(self._mesh(r.children[0]))
        self.tensors[key] = tv
        return tv

    def _input_decl(self, name: Token, ttype: Tree) -> None:
        self.fusion.add_input(self._declare(name, ttype))

    def _tensor_decl(self, name: Token, ttype: Tree) -> None:
        self._declare(name, ttype)

    def _input_mark(self, name: Token) -> None:
        self.fusion.add_input(self._tensor(name))

    def _output_mark(self, name: Token) -> None:
        self.fusion.add_output(self._tensor(name))

    def _assign(self, targets: Tree, op: Token, *args: Tree) -> None:
        names = [t for t in targets.children if isinstance(t, Token) and t.type == "NAME"]
        keys = [self._define(t) for t in names]
        if len(set(keys)) != len(keys):
            twice = next(t for k, t in enumerate(names) if t in names[:k])
            raise self._fail(f"{twice!s} is assigned twice in one statement", twice)
        out = self._call(op, args, self._tensor)
        results = list(out) if isinstance(out, tuple) else [out]
        if len(results) != len(keys):
            what = "tensor" if len(results) == 1 else "tensors"
            raise self._fail(
                f"{op!s} returns {len(results)} {what} but the statement names {len(keys)} "
                f"({', '.join(keys)}); name one per result: "
                f"{', '.join(f'y{k}' for k in range(len(results)))} = {op!s}(...)",
                names[0],
            )
        for key, tv in zip(keys, results):
            tv.user_name = key
            self.tensors[key] = tv

    def _call(self, op: Token, args: tuple[Tree, ...], tensor) -> TensorView | tuple:
        """What an op call or a collective makes (names read through `tensor`)."""
        written = []
        for a in args:
            if a.data == "keyword":  # located at the keyword, not at its value
                kw, value = a.children
                written.append(
                    replace(_arg(value), keyword=str(kw), line=kw.line, column=kw.column)
                )
            else:
                written.append(_arg(a.children[0]))
        if str(op) in COLLECTIVES:
            try:
                return call_collective(self.source, str(op), written, tensor)
            except ParseError as exc:
                if exc.line is not None:  # located at the argument already
                    raise
                raise self._fail(str(exc), op) from None
        return call_op(self.source, _arg(op), written, tensor)

    # -- directives ---------------------------------------------------------------
    def _set_mesh(self, name: Token, ref: Token | Tree) -> None:
        tv = self._tensor(name)
        tv.set_device_mesh(self._mesh(ref))
        for ax in tv.loop:
            self._check_sharding(tv, ax)

    def _split(self, name: Token, axis: Token, factor: Token, inner: bool = True) -> None:
        tv = self._tensor(name)
        tv.split(self._int(axis, "an axis"), self._int(factor, "a factor", 1), inner)

    def _outer_split(self, name: Token, axis: Token, factor: Token) -> None:
        self._split(name, axis, factor, inner=False)

    def _merge(self, name: Token, outer: Token, inner: Token) -> None:
        tv = self._tensor(name)
        tv.merge(self._int(outer, "an axis"), self._int(inner, "an axis"))

    def _reorder(self, name: Token, *pairs: Tree) -> None:
        tv = self._tensor(name)
        order: dict[int, int] = {}
        for pair in pairs:
            old, new = pair.children
            if self._int(old, "an axis") in order:
                raise self._fail(f"axis {old!s} is moved twice", old)
            order[self._int(old, "an axis")] = self._int(new, "an axis")
        tv.reorder(order)

    def _parallelize(self, name: Token, axis: Token, ptype: Tree) -> None:
        tv = self._tensor(name)
        text = ".".join(str(t) for t in ptype.children)
        try:  # a mesh axis by the user's name (`tp`), else a parallel type
            pt = self._named_axis(tv, text) or ParallelType.parse(text)
        except FuserliteError as exc:
            raise self._fail(str(exc), ptype.children[0]) from None
        ax = tv.axis(self._int(axis, "an axis"))
        ax.parallelize(pt)
        self._check_sharding(tv, ax)

    def _swizzle1d(self, name: Token, axis: Token, ptype: Tree) -> None:
        tv = self._tensor(name)
        text = ".".join(str(t) for t in ptype.children)
        try:
            pt = self._named_axis(tv, text) or ParallelType.parse(text)
        except FuserliteError as exc:
            raise self._fail(str(exc), ptype.children[0]) from None
        tv.swizzle1d(self._int(axis, "an axis"), pt)

    def _place(self, name: Token, ref: Token | Tree, *items: Tree) -> None:
        tv = self._tensor(name)
        mesh = self._mesh(ref)
        written = []
        for item in items:
            head, *tail = item.children
            text = str(head) + "".join(str(t) for t in tail)
            if not re.fullmatch(r"S\d+(\.\d+)?|R|P", text) or (
                tail and tail[0].column != head.end_column
            ):
                raise self._fail(
                    f"{text} is not a placement: write S<d> (Shard(d): this mesh axis splits "
                    "tensor axis d), R (Replicate) or P (Partial), one per mesh axis",
                    head,
                )
            if text.startswith("S") and int(text[1:].split(".")[0]) >= len(tv.shape):
                raise self._fail(
                    f"{text}: {tv.name} has {len(tv.shape)} data axes"
                    f"{f' (0..{len(tv.shape) - 1})' if tv.shape else ''}, so it has no axis "
                    f"{text[1:].split('.')[0]} to shard",
                    head,
                )
            written.append(text)
        distribute(tv, mesh, "(" + ",".join(written) + ")")

    def _named_axis(self, tv: TensorView, name: str) -> ParallelType | None:
        """The parallel type of the mesh axis the user called `name`: on tv's mesh, or,
        for a tensor not placed yet, on the file's meshes (which must agree)."""
        meshes = [tv.mesh] if tv.mesh is not None else list(self.meshes.values())
        found = {m.parallel_type_of(name) for m in meshes if name in (m.axis_names or ())}
        if len(found) > 1:
            raise FusionError(
                f"{tv.name} has no mesh yet and the meshes name different axes {name}; "
                f"give it its mesh first (set_mesh) or write the parallel type"
            )
        return found.pop() if found else None

    def _check_sharding(self, tv: TensorView, ax: Axis) -> None:
        # Without a mesh the tensor inherits one during propagation; verify() checks it then.
        if tv.mesh is not None and ax.is_device_parallel:
            problem = sharding_problem(tv.domain, tv.mesh, ax.position)
            if problem is not None:
                where = tv.domain.loop_index(ax.position)
                raise ScheduleError(f"{tv.name} axis {where}: {problem}")
