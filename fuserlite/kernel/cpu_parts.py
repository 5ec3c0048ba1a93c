"""A kernel body too large for one C++ function, as several: decided by its size.

g++'s time grows faster than a function's size, mostly in its register allocator
over every value live at once: 2000 outputs of one kernel took 3.3 s of CPU and
5000 took 20 s in one function, 20 000 over 4 minutes, and a chain of 120 000
statements took 50 s and 1.7 GB (on another machine g++ crashed on it). A body
of more than FUNCTION_BYTES of C++ is therefore compiled as parts of at most
PART_BYTES, in linear time (1.2, 3.1 and 13 s for those outputs, 3.8 s and 360
MB for the chain: benchmarks/compile_size.py):

    static inline void fl_X_part3_body(const float* __restrict__ T0, float* __restrict__ T9,
                                       const long long l0, ..., fl_reg* fl_r) {
      const float t5 = fl_r[0].f;          // computed by an earlier part
      ... the part's statements ...
      fl_r[1].f = t9;                      // read by a later one
    }
    static __attribute__((noinline)) void fl_X_part3(void* const* fl_args, const long long l0,
                                                     ..., fl_reg* fl_r) {
      fl_X_part3_body((const float*)fl_args[0], (float*)fl_args[9], l0, ..., fl_r);
    }

and the grid loop calls the parts in turn at each grid point, with a small array
of slots (`fl_reg fl_r[K]`) on its stack. A part is not inlined (that would make
the one large function again); its body is, so that its buffers are __restrict__
parameters as in one function (g++ analyses local restrict pointers far more
slowly). The statements are first reordered so that each value is computed just
before what reads it (_near_uses): the kernel writer puts every computation
before every store, which kept all N values of N outputs live at once, and
would pass them all between parts. A slot is reused once the last part reading
it has started, so K is the most values crossing one boundary.

Parts run one grid point at a time, not vectorized across threads: a chain of
cheap ops ran 3.6x slower split than in one function, which is why only bodies
over FUNCTION_BYTES are split. A body that cannot be split so (one statement
over PART_BYTES, more than MAX_SLOTS values crossing a boundary) is
KernelTooLarge: the executor computes that kernel with the kernel runner.
"""

from __future__ import annotations

from fuserlite.ir.errors import ExecutionError
from fuserlite.kernel.cuda import Statement
from fuserlite.kernel.indexing import loop_var

# Bytes of C++ in a body above which it is split (one function of that size compiles in
# about a second), and the most in one part (benchmarks/compile_size.py: 8 to 16 KB
# compiled fastest per statement).
FUNCTION_BYTES = 1 << 18
PART_BYTES = 1 << 14
MAX_SLOTS = 1 << 12  # values crossing one boundary between parts, at most
_MEMBER = {"float": "f", "double": "d", "int": "i", "long long": "q", "bool": "b"}  # of fl_reg


class KernelTooLarge(ExecutionError):
    """A kernel the C++ compiler should not be given: the kernel runner computes it."""


def body_bytes(statements: list[Statement]) -> int:
    """The bytes of C++ of the statements (not counting their indentation)."""
    return sum(len(line.lstrip()) + 1 for st in statements for line in st.lines)


def splits(statements: list[Statement]) -> bool:
    """True if a body of these statements is compiled in parts (over FUNCTION_BYTES)."""
    return body_bytes(statements) > FUNCTION_BYTES


def split_body(
    name: str, statements: list[Statement], params: list[str], loops: int, indent: str
) -> tuple[list[str], list[str]]:
    """(the part functions, the lines the grid loop runs at each grid point: the slots'
    declaration, then a call per part) of a body of `statements` (written at `indent`)
    of a kernel with these parameters and `loops` grid positions."""
    parts = _split(statements)
    slots = _slots(parts)
    types = {st.register: st.ctype for st in statements}
    variables = [loop_var(j) for j in range(loops)]
    # name -> (its index in the address array, its declaration), buffers and device indices
    named = {p.rsplit(" ", 1)[1]: (i, p) for i, p in enumerate(params)}
    functions = []
    for i, part in enumerate(parts):
        functions += _part(f"{name}_part{i}", part, named, variables, slots, types, indent)
    args = "".join(f"{v}, " for v in variables)
    calls = [f"{indent}fl_reg fl_r[{1 + max(slots.values(), default=0)}];"]
    calls += [f"{indent}{name}_part{i}(fl_args, {args}fl_r);" for i in range(len(parts))]
    return functions, calls


def _split(statements: list[Statement]) -> list[list[Statement]]:
    """The statements in parts of at most PART_BYTES of C++ each, in an order that
    computes each value just before what reads it (_near_uses)."""
    parts: list[list[Statement]] = [[]]
    size = 0
    for st in _near_uses(statements):
        n = body_bytes([st])
        if n > PART_BYTES:
            raise KernelTooLarge(
                f"its statement computing {st.register} alone is {n} bytes of C++ "
                f"(more than {PART_BYTES}, the most one part of a function is given)"
            )
        if size + n > PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(st)
        size += n
    return parts


def _near_uses(statements: list[Statement]) -> list[Statement]:
    """The statements reordered so that few values are live at once: each that nothing
    reads (a store) in turn, just after what it needs that is not computed yet (depth
    first). The kernel writer puts every computation first and every store after, so
    that a kernel of N outputs held N values from one end to the other."""
    by_register = {st.register: st for st in statements}
    read = {r for st in statements for r in st.uses}
    done: set[str] = set()
    order: list[Statement] = []
    for sink in [st for st in statements if st.register not in read] + statements:
        stack = [(sink, iter(sink.uses))]  # iterative: a chain is 100 000 deep
        while stack:
            st, pending = stack[-1]
            if st.register in done:
                stack.pop()
                continue
            r = next((r for r in pending if r not in done), None)
            if r is not None and r in by_register:
                stack.append((by_register[r], iter(by_register[r].uses)))
                continue
            if r is not None:  # not this kernel's (the compiler will say so)
                continue
            stack.pop()
            done.add(st.register)
            order.append(st)
    return order


def _slots(parts: list[list[Statement]]) -> dict[str, int]:
    """register -> its fl_reg slot, for each register a later part reads. It is written
    at the end of the part computing it and read at the start of those reading it, so
    its slot serves another register from the start of the last of those on."""
    defined = {st.register: i for i, part in enumerate(parts) for st in part}
    last: dict[str, int] = {}  # register -> the last part reading it
    for i, part in enumerate(parts):
        for st in part:
            last.update((r, i) for r in st.uses if defined.get(r, i) < i)
    ending: dict[int, list[str]] = {}
    for r, i in last.items():
        ending.setdefault(i, []).append(r)
    slots: dict[str, int] = {}
    free: list[int] = []
    count = 0
    for i, part in enumerate(parts):
        free += [slots[r] for r in ending.get(i, [])]
        for st in part:
            if st.register in last and free:
                slots[st.register] = free.pop()
            elif st.register in last:
                slots[st.register] = count
                count += 1
    if count > MAX_SLOTS:
        raise KernelTooLarge(
            f"split into {len(parts)} functions, it would pass {count} values at once from "
            f"one to another (more than {MAX_SLOTS})"
        )
    return slots


def _part(
    name: str,
    part: list[Statement],
    named: dict[str, tuple[int, str]],
    variables: list[str],
    slots: dict[str, int],
    types: dict[str, str],
    indent: str,
) -> list[str]:
    """One part: its body (the buffers it uses as __restrict__ parameters, the registers
    of earlier parts read from their slots, its statements, what later parts read left in
    slots) and the function of one grid point that calls it with those buffers."""
    used = dict.fromkeys(b for st in part for b in st.buffers)
    # In the kernel's order; the device indices (`didx`), few, are read inside predicates'
    # text: all of them.
    mine = sorted(named[b] for b in used)
    mine += [(i, p) for i, p in named.values() if " __restrict__ " not in p]
    loops = "".join(f"const long long {v}, " for v in variables)
    typed = "".join(f"{p}, " for _, p in mine)
    head = "static inline __attribute__((always_inline)) void"
    lines = [f"{head} {name}_body({typed}{loops}fl_reg* fl_r) {{"]
    defined = [st.register for st in part]  # in order: the text is the same in every process
    own = set(defined)
    for r in dict.fromkeys(r for st in part for r in st.uses if r not in own):
        lines.append(f"  const {types[r]} {r} = fl_r[{slots[r]}].{_MEMBER[types[r]]};")
    lines += ["  " + line.removeprefix(indent) for st in part for line in st.lines]
    lines += [f"  fl_r[{slots[r]}].{_MEMBER[types[r]]} = {r};" for r in defined if r in slots]
    lines.append("}")
    head = "static __attribute__((noinline)) void"
    lines.append(f"{head} {name}(void* const* fl_args, {loops}fl_reg* fl_r) {{")
    casts = "".join(from_address(p, f"fl_args[{i}]") + ", " for i, p in mine)
    args = "".join(f"{v}, " for v in variables)
    lines.append(f"  {name}_body({casts}{args}fl_r);")
    return lines + ["}"]


def from_address(param: str, slot: str) -> str:
    """The argument for `param` read from an entry of the address array: a buffer's
    address cast to its pointer type, or a device index (`didx`) carried as an integer."""
    if " __restrict__ " in param:
        return f"({param.rsplit(' __restrict__ ', 1)[0]}){slot}"
    return f"(long long)(unsigned long long){slot}"


__all__ = [
    "FUNCTION_BYTES",
    "MAX_SLOTS",
    "PART_BYTES",
    "KernelTooLarge",
    "body_bytes",
    "from_address",
    "split_body",
    "splits",
]
