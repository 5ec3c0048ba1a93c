"""Parser of the printed dialect: what `fuserlite print` prints, read back.

    parse_printed(text) -> Fusion | Program
    parse_any(text) / load_any(path)   # printed text or .fus, told apart by is_printed
    load(path)                         # fl.load: the same, a .fus file not verified

A fusion prints as `%kernel { ... } // %kernel`; a lowered program as its steps in
order: `%kernel<k> (mesh) { ... } // %kernel<k>` blocks, resharding Sets and
`Communication ...` lines, then a `TransformPrinter :` section for the tensors no
kernel shows. Either may start with an `Inputs:` / `Outputs:` header (printed
where the tensors do not imply them) and, outside kernels, `//` comment lines; a
lowered program with planned communications starts with `Planner:
latency_bytes=N`, and the block of each intermediate of a plan says so (` plan
intermediate : T7 -> T14`): fl.explain's records come back from them.
docs/printed-form.md describes every line.

Nothing here knows an op or a communication: an expression's body (what follows
`   = `) is read by the op registry's printed forms (fuserlite.ops.forms), a
communication line by Communication's one form, tensors by
fuserlite.program.reader. Every mistake is a ParseError with file:line:col, the
line and a caret; what parses is verified (the fusion or the program verifier)
before it is returned.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO

from fuserlite.ir.errors import FuserliteError, ParseError, RedistributionError, VerifyError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.streams import Chunking
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops.forms import build_from_printed
from fuserlite.ops.registry import OpDef
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES, check_latency
from fuserlite.printer import MESH_AXES, implied_io
from fuserlite.program import host
from fuserlite.program.communication import Communication
from fuserlite.program.printer import (
    ALLOCATE,
    DEALLOCATE,
    INTERMEDIATE,
    NOTE,
    PLANNER,
    POST,
    SCHEDULED,
    SET_STREAM,
    SYNCHRONIZE,
    WAIT,
    printed_tensors,
    unescape_note,
)
from fuserlite.program.program import HostStep, Kernel, Program, finish_kernel
from fuserlite.program.reader import TENSOR, TENSOR_NUMBER, Block, Line, build_tensor
from fuserlite.program.rebuild import rebuild_problem
from fuserlite.program.reshardings import derive_reshardings
from fuserlite.program.sections import (
    BODY,
    TRANSFORM_PRINTER,
    ExprText,
    KernelText,
    LoopText,
    PostText,
    Text,
    split_text,
)
from fuserlite.program.verify import verify_program
from fuserlite.text.parser import check_source, read_source
from fuserlite.text.parser import parse as parse_fus
from fuserlite.text.source import Source, invalid_fusion
from fuserlite.verify.fusion import verify

# What a validator's problem names first: a step (`step 3`, `kernel 3`) or a tensor.
_NAMED = re.compile(r"\b(?:(?:step|kernel) (?P<step>\d+)|T(?P<tensor>\d+))\b")
# A communication, `Allgather T1 -> T2`: at the line that computes its output.
_COMMUNICATION = re.compile(r"\b[A-Z]\w+ T\d+ -> T(?P<tensor>\d+)\b")


def parse_printed(text: str, filename: str = "<string>") -> Fusion | Program:
    """Read printed text back into the Fusion or Program it shows, verified; any mistake
    is a ParseError with file:line:col (an invalid result too, at the line at fault)."""
    check_source(text, filename, "parse_printed", "printed text")
    source = Source(text, filename)
    return _Builder(source, split_text(source)).build()


def parse_any(text: str, filename: str = "<string>") -> Fusion | Program:
    """A printed fusion or program (`is_printed`), or else `.fus` text, verified."""
    if is_printed(text):
        return parse_printed(text, filename)
    fusion = parse_fus(text, filename)
    try:
        verify(fusion)
    except VerifyError as exc:
        raise invalid_fusion(Source(text, filename), str(exc), fusion) from None
    return fusion


def load(path: str | Path | BinaryIO, name: str | None = None) -> Fusion | Program:
    """fl.load: a .fus file's Fusion (not verified: it may be sharded after loading), or
    the Fusion or Program printed text shows (verified), told apart by `is_printed`."""
    name = str(path) if name is None else name
    text = read_source(path, name)
    return parse_printed(text, name) if is_printed(text) else parse_fus(text, name)


def load_any(path: str | Path | BinaryIO, name: str | None = None) -> Fusion | Program:
    """`parse_any` of a file's text (a path, or a binary stream called `name`)."""
    name = str(path) if name is None else name
    return parse_any(read_source(path, name), name)


def is_printed(text: str) -> bool:
    """True for text in the printed dialect, False for anything else (`.fus` text): its
    first line past blank lines and `//` comments opens a kernel, a header, a
    communication, a TransformPrinter section or a Set's tensor (`#` starts a .fus
    comment; no .fus statement starts like these)."""
    for line in text.split("\n"):
        line = line.strip()
        if line and not line.startswith("//"):
            starts = ("%kernel", "Inputs:", "Planner:", MESH_AXES, "Communication ")
            starts += (TRANSFORM_PRINTER,)
            return line.startswith(starts) or TENSOR.match(line) is not None
    return False


def _first_line(part: KernelText | ExprText | Line | PostText | LoopText) -> Line:
    """The first line of a step's text."""
    if isinstance(part, KernelText):
        return part.label
    if isinstance(part, ExprText):
        return part.outputs[0] if part.outputs else part.body[0]
    if isinstance(part, PostText):
        return part.line
    if isinstance(part, LoopText):
        return part.head
    return part


# -- building ------------------------------------------------------------------------
class _Builder:
    """Makes the tensors of the blocks, then the expressions and steps in text order."""

    def __init__(self, source: Source, text: Text) -> None:
        self.source = source
        self.text = text
        self.fusion = Fusion()
        self.tensors: dict[int, TensorView] = {}
        self.heads: dict[int, Line] = {}  # each tensor's canonical text: its block's head
        self.computed_at: dict[int, Line] = {}  # where each computed tensor's step starts
        self.marks: dict[int, Line] = {}  # tensor number -> its ` plan intermediate :` line
        self.posts: dict[int, host.PostOnStream] = {}  # a posted communication's output number
        self.loops: list[str] = []  # the indices of the loops around the step being read
        self.named = self.named_meshes()  # the meshes whose axes the user named

    def named_meshes(self) -> dict[DeviceMesh, DeviceMesh]:
        """{mesh: the same mesh with its axes' names} from the `Mesh axes:` lines."""
        named: dict[DeviceMesh, DeviceMesh] = {}
        for line in self.text.mesh_axes:
            m = re.fullmatch(r"(DeviceMesh\{[{}\d ]*\}) (.*)", line.text[len(MESH_AXES) :])
            mesh = None
            if m is not None:
                try:
                    mesh = DeviceMesh.from_text(m[1])
                except FuserliteError:
                    mesh = None
            labels = m[2].split(", ") if m is not None else []
            pairs = [re.fullmatch(r"(DID[xyz]) \((\w+)\)", t) for t in labels]
            if mesh is None or len(pairs) != mesh.rank or not all(pairs):
                raise self.fail(
                    "expected `Mesh axes: DeviceMesh{...} DIDy (dp), DIDx (tp)`: a mesh and its "
                    "axes' names, one `DID? (name)` per mesh axis, axis 0 first",
                    line.number,
                    len(MESH_AXES) + 1,
                )
            types = [p[1] for p in pairs]
            if types != [pt.name for pt in mesh.parallel_types] or mesh in named:
                raise self.fail(
                    f"{mesh} has axes {', '.join(pt.name for pt in mesh.parallel_types)}, named "
                    "once: one `DID? (name)` each, axis 0 first",
                    line.number,
                    len(MESH_AXES) + len(m[1]) + 2,
                )
            try:
                named[mesh] = mesh.with_axis_names([p[2] for p in pairs])
            except FuserliteError as exc:
                raise self.fail(str(exc), line.number, len(MESH_AXES) + len(m[1]) + 2) from None
        return named

    def fail(self, message: str, line: int, column: int) -> ParseError:
        return self.source.error(message, line, column)

    def build(self) -> Fusion | Program:
        self.make_tensors()
        text = self.text
        self.note_computed()
        if text.fusion is not None:
            exprs = [self.expression(e) for e in text.fusion.exprs]
            self.set_io(exprs)
            self.check_shown(self.fusion.tensors())
            try:
                verify(self.fusion)
            except VerifyError as exc:
                raise self.invalid(exc) from None
            return self.fusion
        steps = [self.step(s) for s in text.steps]
        runs = list(host.runs(steps))
        exprs = [e for s in runs for e in (s.exprs if isinstance(s, Kernel) else [s])]
        self.set_io(exprs)
        users = {id(t): t.uses for t in self.fusion.tensors_created}
        outputs = {id(t) for t in self.fusion.outputs}
        # A loop's chunk is its kernel's output: a view stores it into the whole.
        outputs |= {id(v.chunk) for v in host.walk(steps) if isinstance(v, host.ShardByStream)}
        for s in runs:
            if isinstance(s, Kernel):
                finish_kernel(s, outputs, users)
        program = Program(self.fusion, steps)
        self.check_shown(printed_tensors(program))
        try:
            verify_program(program)
        except VerifyError as exc:
            raise self.invalid(exc) from None
        program.reshardings = self.reshardings(program)  # what fl.explain reads
        return program

    def invalid(self, exc: VerifyError) -> ParseError:
        """The validator's problems at the line of the first step or tensor they name:
        the step's first line, or the line that computes the tensor, else its block's."""
        message = str(exc)
        first = message.split("\n  ")[1] if "\n  " in message else message
        line = self.text.steps[0] if self.text.steps else None
        m = _COMMUNICATION.search(first) or _NAMED.search(first)
        named = {} if m is None else {k: int(v) for k, v in m.groupdict().items() if v}
        if named.get("step", len(self.text.steps)) < len(self.text.steps):
            line = self.text.steps[named["step"]]
        elif named.get("tensor") in self.heads:
            line = self.computed_at.get(named["tensor"], self.heads[named["tensor"]])
        if line is None:
            line = self.text.fusion.label if self.text.fusion else Line(1, "")
        return self.fail(message, _first_line(line).number, 1)

    def latency(self) -> int:
        """The `Planner: latency_bytes=N` line's N (the planner's default without one)."""
        line = self.text.planner
        if line is None:
            return DEFAULT_LATENCY_BYTES
        value = line.text[len(PLANNER) :]
        if not line.text.startswith(PLANNER) or not re.fullmatch(r"\d+", value):
            raise self.fail(
                "expected `Planner: latency_bytes=N`, N the bytes-equivalent a collective "
                "cost the planner (a non-negative integer)",
                line.number,
                len(PLANNER) + 1 if line.text.startswith(PLANNER) else 1,
            )
        try:
            return check_latency(int(value), "Planner: latency_bytes")
        except RedistributionError as exc:
            raise self.fail(str(exc), line.number, len(PLANNER) + 1) from None

    def reshardings(self, program: Program) -> list:
        """fl.explain's records of the program's communications, planned at the `Planner:`
        line's latency and grouped at the marked intermediates (program.reshardings);
        a ParseError where the marks or the line contradict the communications."""
        marked = {}
        for n, line in self.marks.items():
            tv = self.tensors[n]
            m = re.fullmatch(r"(T\d+) -> (T\d+)", line.text[len(INTERMEDIATE) :])
            if m is None:
                raise self.fail(
                    "expected ` plan intermediate : T<source> -> T<target>`, the ends of the "
                    "resharding whose plan passes through this tensor",
                    line.number,
                    len(INTERMEDIATE) + 1,
                )
            if not isinstance(tv.definition, Communication):
                raise self.fail(
                    f"T{n} is marked an intermediate of a plan, but no communication computes "
                    "it (a plan's intermediates are between two of its communications)",
                    line.number,
                    1,
                )
            marked[id(tv)] = (m[1], m[2])

        def contradiction(tv: TensorView, message: str) -> ParseError:
            line = self.marks.get(tv.number) or self.heads[tv.number]
            return self.fail(message, line.number, 1)

        return derive_reshardings(program, self.latency(), marked, contradiction)

    def make_tensors(self) -> None:
        taken: dict[int, int] = {}
        first: dict[int, Block] = {}
        for block in self.text.blocks:
            m = TENSOR.fullmatch(block.head.text)
            if m is None:
                raise self.fail(
                    "expected a tensor as printed, e.g. T3_l_float[ iS0{2} ] (DeviceMesh{0 1})",
                    block.head.number,
                    1,
                )
            n = block.tensor_number
            seen = first.setdefault(n, block)
            if seen is not block and [x.text for x in seen.lines] != [x.text for x in block.lines]:
                raise self.fail(
                    f"T{n}'s TransformPrinter block differs from the one at line "
                    f"{seen.head.number}; a tensor prints the same everywhere",
                    block.head.number,
                    1,
                )
        for n in sorted(first):
            block = first[n]
            if len(block.lines) > 1 and block.lines[1].text.startswith(INTERMEDIATE):
                if self.text.fusion is not None:
                    raise self.fail(
                        "a fusion's tensors are no plan's intermediates (a lowered program's "
                        "communications are)",
                        block.lines[1].number,
                        1,
                    )
                self.marks[n] = block.lines[1]
                block = Block((block.head, *block.lines[2:]))
            tv = build_tensor(self.fusion, block, taken, self.fail)
            tv.origin = f"{self.source.filename}:{block.head.number}"
            if tv.mesh in self.named:
                tv.set_device_mesh(self.named[tv.mesh])
            self.tensors[n] = tv
            self.heads[n] = block.head

    def note_computed(self) -> None:
        """Where each computed tensor's expression is (to reject reads before it)."""
        exprs = list(self.text.fusion.exprs) if self.text.fusion else []
        for s in _walk_text(self.text.steps):
            if isinstance(s, PostText):
                s = s.step
            if isinstance(s, LoopText) or (
                isinstance(s, Line) and not s.text.startswith("Communication ")
            ):
                continue  # a loop's head and a host construct's line compute nothing
            exprs.extend(s.exprs if isinstance(s, KernelText) else [s])
        for e in exprs:
            if isinstance(e, Line):  # a communication: its output=
                m = re.search(r"output=(T\d+)_", e.text)
                outs = [(e, m.start(1) + 1)] if m else []
                numbers = [int(m.group(1)[1:])] if m else []
            else:
                outs = [(line, 1) for line in e.outputs]
                numbers = [int(TENSOR_NUMBER.match(line.text).group(1)) for line in e.outputs]
            for n, (line, column) in zip(numbers, outs):
                if n in self.computed_at:
                    before = self.computed_at[n].number
                    raise self.fail(
                        f"T{n} is computed twice (at line {before} too)", line.number, column
                    )
                self.computed_at[n] = line

    def tensor(self, text: str, line: Line, column: int, *, read: bool = True) -> TensorView:
        """The tensor a printed text names, which must be printed as its block shows it
        and, where `read` and it is not computed on `line`, be computed already."""
        m = TENSOR_NUMBER.match(text)
        n = int(m.group(1)) if m else -1
        tv = self.tensors.get(n)
        if tv is None:
            raise self.fail(
                f"T{n} has no TransformPrinter block; every tensor shown has one (in its "
                "kernel, or in the last TransformPrinter section of a program)",
                line.number,
                column,
            )
        head = self.heads[n]
        if text != head.text:
            raise self.fail(
                f"T{n} is printed here as {text}, but its TransformPrinter block (line "
                f"{head.number}) shows {head.text}",
                line.number,
                column,
            )
        if read and self.computed_at.get(n, line) is not line and tv.definition is None:
            raise self.fail(
                f"T{n} is read here before line {self.computed_at[n].number} computes it",
                line.number,
                column,
            )
        return tv

    def expression(self, e: ExprText) -> Expr:
        outputs = [self.tensor(line.text, line, 1) for line in e.outputs]
        first = e.body[0]
        body = "\n".join([first.text[len(BODY) :], *(line.text for line in e.body[1:])])

        def where(offset: int) -> tuple[Line, int]:
            """The line and column of an offset into `body`."""
            start = len(BODY)
            for line in e.body:
                if offset <= len(line.text) - start:
                    return line, start + offset + 1
                offset -= len(line.text) - start + 1
                start = 0
            return e.body[-1], 1

        def operand(text: str) -> TensorView:
            line, column = where(max(body.find(text), 0))
            return self.tensor(text, line, column)

        def check(d: OpDef, outs: list, operands: list, attrs: dict) -> None:
            problem = rebuild_problem(d, outs, operands, attrs)
            if problem is not None:
                raise self.fail(problem, first.number, len(BODY) + 1)

        try:
            return build_from_printed(body, outputs, operand, check)
        except ParseError as exc:
            if exc.line is not None:  # located already
                raise
            line, column = where(exc.column - 1) if exc.column else (first, len(BODY) + 1)
            raise self.fail(str(exc), line.number, column) from None

    def communication(self, line: Line, shift: int = 0) -> Communication:
        """The communication of a `Communication ...` line (`shift` columns right of the
        line's start where PostOnStream precedes it)."""

        def tensor(text: str) -> TensorView:
            return self.tensor(text, line, line.text.find(text) + 1 + shift)

        try:
            comm = Communication.from_printed(line.text, tensor)
        except ParseError as exc:
            if exc.line is not None:
                raise
            raise self.fail(str(exc), line.number, (exc.column or 1) + shift) from None
        if comm is None:
            raise self.fail(
                "expected Communication <kind> (team=(0 1)[, mesh=..., teams=(...), placements="
                "...][, root=N][, op=add], input=<tensor>, output=<tensor>[, in_axis=N][, "
                "out_axis=N][, transfers=[...]][, layout=...], bytes_per_device=N)",
                line.number,
                1,
            )
        return comm

    def shard_by_stream(self, line: Line, text: str) -> host.ShardByStream:
        """`ShardByStream T9 = T3 axis 0 chunk i of 4[ of 2 blocks]`, checked as
        lower-streams makes it: the chunk is shaped as one chunk of the whole."""
        m = host.SHARD_BY_STREAM_LINE.fullmatch(text)
        where = len(host.SHARD_BY_STREAM) + 1
        if m is None or not {int(m["chunk"]), int(m["whole"])} <= self.tensors.keys():
            raise self.fail(
                "expected `ShardByStream T<n> = T<m> axis A chunk i of S[ of B blocks]` (a "
                "ring's: `chunk (i + DIDx) % S of S`), "
                "T<n> and T<m> tensors of the program",
                line.number,
                where,
            )
        index = m["index"] or m["ring"]
        if index not in self.loops:
            raise self.fail(
                f"ShardByStream: {index} is the index of no loop around this line",
                line.number,
                where,
            )
        chunk, whole = self.tensors[int(m["chunk"])], self.tensors[int(m["whole"])]
        swizzle = None if m["ring"] is None else ParallelType[m["swizzle"]]
        if swizzle is not None and m["modulo"] != m["chunks"]:
            raise self.fail(
                f"ShardByStream: a ring's chunk is ({index} + {m['swizzle']}) % S of S "
                f"chunks; % {m['modulo']} of {m['chunks']}",
                line.number,
                where,
            )
        c = Chunking(int(m["axis"]), int(m["chunks"]), int(m["blocks"] or 1), swizzle)
        view = host.ShardByStream(whole, chunk, c, index)
        why = view.problem()
        if why is not None:
            raise self.fail(f"ShardByStream {chunk.ir_name}: {why}", line.number, where)
        return view

    def step(self, s: KernelText | ExprText | Line | PostText | LoopText) -> HostStep:
        if isinstance(s, PostText):
            inner = s.step
            if isinstance(inner, Line):
                comm = self.communication(inner, len(POST))
                post = host.PostOnStream(comm)
                self.posts[comm.output.number] = post
                return post
            return host.PostOnStream(self.step(inner))
        if isinstance(s, LoopText):
            if not 1 <= s.extent <= host.MAX_EXTENT:
                raise self.fail(
                    f"FOR {s.index}: the extent {s.extent} is not in 1..{host.MAX_EXTENT}",
                    s.head.number,
                    s.head.text.index("(") + 2,
                )
            if s.index in self.loops:
                raise self.fail(
                    f"FOR {s.index} is inside a loop of the same index; give it another",
                    s.head.number,
                    len("FOR ") + 1,
                )
            self.loops.append(s.index)
            body = [self.step(x) for x in s.body]
            self.loops.pop()
            return host.ForLoop(s.index, s.extent, body)
        if isinstance(s, Line):
            if s.text.startswith("Communication "):
                return self.communication(s)
            return self.host_line(s)
        if isinstance(s, ExprText):
            return self.expression(s)
        mesh = None
        if s.mesh is not None:
            try:
                mesh = DeviceMesh.from_text(s.mesh)
            except FuserliteError as exc:
                raise self.fail(str(exc), s.label.number, s.label.text.index("(") + 2) from None
            mesh = self.named.get(mesh, mesh)
        kernel = Kernel([self.expression(e) for e in s.exprs], [], [], mesh)
        for line in s.annotations:
            if line.text.startswith(NOTE):
                kernel.notes.append(unescape_note(line.text[len(NOTE) :]))
                continue
            what = line.text[len(SCHEDULED) :]
            kernel.scheduled = True
            if what != "no reference":
                m = re.fullmatch(r"reference T(\d+)", what)
                if m is None or int(m.group(1)) not in self.tensors:
                    raise self.fail(
                        "expected ` scheduled : reference T<n>` naming a tensor of the program",
                        line.number,
                        len(SCHEDULED) + 1,
                    )
                kernel.reference = self.tensors[int(m.group(1))]
        return kernel

    def host_line(self, line: Line) -> HostStep:
        """SetCurrentStream, Synchronize, Wait, Allocate, Deallocate or ShardByStream,
        from its line."""
        text = line.text.rstrip()
        if text.startswith(host.SHARD_BY_STREAM):
            return self.shard_by_stream(line, text)
        for word, make in ((SET_STREAM, host.SetCurrentStream), (SYNCHRONIZE, host.Synchronize)):
            if text.startswith(word):
                stream = host.StreamIndex.parse(text[len(word) :])
                if stream is None:
                    raise self.fail(
                        "expected a stream: a number (`Stream 1`) or a loop index, modulo a "
                        "count and plus an offset (`Stream i % 2 + 1`)",
                        line.number,
                        len(word) + 1,
                    )
                if stream.index is not None and stream.index not in self.loops:
                    raise self.fail(
                        f"Stream {stream.text()}: {stream.index} is the index of no loop around "
                        "this line",
                        line.number,
                        len(word) + 1,
                    )
                return make(stream)
        for word in (WAIT, ALLOCATE, DEALLOCATE):
            if not text.startswith(word):
                continue
            m = re.fullmatch(r"T(\d+)", text[len(word) :])
            if m is None or int(m.group(1)) not in self.tensors:
                raise self.fail(
                    f"expected `{word}T<n>`, T<n> a tensor of the program",
                    line.number,
                    len(word) + 1,
                )
            n = int(m.group(1))
            if word == WAIT:
                post = self.posts.get(n)
                if post is None:
                    raise self.fail(
                        f"Wait Communication T{n}: no PostOnStream Communication before it "
                        f"computes T{n}; a Wait waits for a posted communication",
                        line.number,
                        len(word) + 1,
                    )
                return host.Wait(post)
            return (host.Allocate if word == ALLOCATE else host.Deallocate)(self.tensors[n])
        raise self.fail(
            "expected SetCurrentStream to Stream N, Synchronize Stream N, Wait Communication "
            "T<n>, Allocate T<n>, Deallocate T<n>, ShardByStream T<n> = ... or "
            "`FOR i in range(N) {`",
            line.number,
            1,
        )

    def set_io(self, exprs: list[Expr]) -> None:
        """The header's inputs and outputs, or those the tensors imply."""
        if self.text.header is None:
            self.fusion.inputs, self.fusion.outputs = implied_io(self.tensors.values(), exprs)
            return
        lists = []
        for lines in self.text.header:
            # An output may be listed twice (two outputs insert-reshardings completed alike).
            lists.append([self.tensor(line.text[2:], line, 3, read=False) for line in lines])
        self.fusion.inputs, self.fusion.outputs = lists

    def check_shown(self, shown: list[TensorView]) -> None:
        """Every block is of a tensor the text uses (what it prints back)."""
        ids = {id(t) for t in shown}
        for n, tv in self.tensors.items():
            if id(tv) not in ids:
                raise self.fail(
                    f"T{n} has a TransformPrinter block, but no step, input or output uses it",
                    self.heads[n].number,
                    1,
                )


def _walk_text(steps: list) -> list:
    """The step texts in order, loop bodies inside their loops."""
    out = []
    for s in steps:
        out.append(s)
        if isinstance(s, LoopText):
            out.extend(_walk_text(s.body))
    return out
