"""The rules of a host program's streams, waits and buffers (fuserlite.program.host).

`host_problems(program)` runs the host program's steps in order (loops unrolled) on
streams kept as vector clocks: each stream knows how far each other stream's work,
and each posted communication, is ordered before it. A step may read a tensor only
where it is ready on the step's stream: written earlier on the same stream, by a
stream the current one synchronized with since, or by a posted communication the
current stream (or one it synchronized with) has waited for. The problems found:

- a Wait without its post (no PostOnStream of that communication since its last Wait);
- a read before a wait: a step reads what a posted communication computes before a
  Wait for it, or what another stream computes before a Synchronize with it;
- a stream used before it is set (Synchronize of a stream no SetCurrentStream chose);
- a posted communication never waited for; an output not ready on the main stream at
  the end (Stream 0: what the caller reads);
- a buffer read or written after its Deallocate, allocated twice or after it was
  written, or an input or output allocated or deallocated (the caller owns them).
"""

from __future__ import annotations

from collections.abc import Mapping

from fuserlite.ir.errors import VerifyError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.program import host
from fuserlite.program.program import Kernel, Program

Lane = tuple[str, int]  # ("stream", k) or ("post", n): what a vector clock counts


class _Streams:
    """The vector clocks of the streams and where each tensor was last written."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.numbers = {id(s): k for k, s in enumerate(host.walk(program.steps))}
        self.current = host.MAIN_STREAM
        self.chosen = {host.MAIN_STREAM}
        self.clock: dict[int, dict[Lane, int]] = {}
        self.issued: dict[int, int] = {}
        self.written: dict[int, tuple[Lane, int, str]] = {}  # tensor -> lane, count, by what
        self.uses: dict[int, dict[Lane, tuple[int, str]]] = {}  # tensor -> its latest use per lane
        self.pending: dict[int, Lane] = {}  # id(post) -> its lane
        self.posts = 0
        self.freed: set[int] = set()
        self.allocated: set[int] = set()
        self.owned = {id(t) for t in (*program.inputs, *program.outputs)}
        self.written_by_steps = {id(t) for s in host.runs(program.steps) for t in s.outputs}
        self.views: dict[int, TensorView] = {}  # a chunk written through a view -> its whole
        self.problems: list[str] = []

    def of(self, stream: int) -> dict[Lane, int]:
        return self.clock.setdefault(stream, {})

    def where(self, step: object, env: Mapping[str, int]) -> str:
        loops = ", ".join(f"{k}={v}" for k, v in env.items())
        return f"step {self.numbers.get(id(step), '?')}" + (f" ({loops})" if loops else "")

    def use(self, t: TensorView, lane: Lane, count: int, step: object, env) -> None:
        self.uses.setdefault(id(t), {})[lane] = (count, self.where(step, env))

    def settled(self, t: TensorView) -> str | None:
        """None where every use of `t` so far is ordered before the current stream, else
        the step that may still use it."""
        mine = self.of(self.current)
        for lane, (count, where) in self.uses.get(id(t), {}).items():
            if mine.get(lane, 0) < count:
                return where
        return None

    def read(self, t: TensorView, step: object, env: Mapping[str, int]) -> None:
        if id(t) in self.freed:
            self.problems.append(f"{self.where(step, env)} reads {t.name} after its Deallocate")
            return
        found = self.written.get(id(t))
        if found is None:
            return  # an input: ready everywhere
        lane, count, by = found
        if self.of(self.current).get(lane, 0) >= count:
            return
        knows = [k for k, clock in sorted(self.clock.items()) if clock.get(lane, 0) >= count]
        if knows:  # a stream that waited for it, or wrote it
            fix = f"Synchronize Stream {knows[0]} on stream {self.current} first"
        else:
            fix = f"Wait Communication {t.ir_name} first"
        self.problems.append(
            f"{self.where(step, env)} reads {t.name} on stream {self.current} before it is "
            f"ready there: {by} computes it; {fix}"
        )

    def write(self, t: TensorView, lane: Lane, count: int, by: str, step, env) -> None:
        if id(t) in self.freed:
            self.problems.append(f"{self.where(step, env)} writes {t.name} after its Deallocate")
        self.written[id(t)] = (lane, count, by)
        whole = self.views.get(id(t))
        if whole is not None:  # a chunk of it: the whole is ready where its last chunk is
            self.written[id(whole)] = (lane, count, by)

    def run(self, run: Kernel | Expr, step: object, env: Mapping[str, int]) -> None:
        """A kernel, or a blocking communication, on the current stream."""
        for t in run.inputs:
            self.read(t, step, env)
        s = self.current
        self.issued[s] = self.issued.get(s, 0) + 1
        self.of(s)[("stream", s)] = self.issued[s]
        by = f"{self.where(step, env)} on stream {s}"
        for t in (*run.inputs, *run.outputs):
            self.use(t, ("stream", s), self.issued[s], step, env)
        for t in run.outputs:
            self.write(t, ("stream", s), self.issued[s], by, step, env)

    def post(self, post: host.PostOnStream, env: Mapping[str, int]) -> None:
        run = post.step
        if isinstance(run, Kernel):
            self.run(run, post, env)
            return
        self.read(run.input, post, env)
        self.posts += 1
        lane = ("post", self.posts)
        self.pending[id(post)] = lane
        by = f"posted Communication {run.kind.value} ({self.where(post, env)})"
        for t in (run.input, run.output):  # in use until it completes
            self.use(t, lane, 1, post, env)
        self.write(run.output, lane, 1, by, post, env)

    def wait(self, wait: host.Wait, env: Mapping[str, int]) -> None:
        lane = self.pending.pop(id(wait.post), None)
        if lane is None:
            out = wait.post.step.output
            self.problems.append(
                f"{self.where(wait, env)}: Wait Communication {out.ir_name} without its post: no "
                f"PostOnStream of it runs before this Wait (since its last Wait)"
            )
            return
        self.of(self.current)[lane] = 1

    def synchronize(self, sync: host.Synchronize, env: Mapping[str, int]) -> None:
        other = sync.stream.value(env)
        if other not in self.chosen:
            self.problems.append(
                f"{self.where(sync, env)}: Synchronize Stream {other} before any SetCurrentStream "
                f"to Stream {other}: the stream is used before it is set"
            )
            return
        mine = self.of(self.current)
        for lane, count in self.of(other).items():
            mine[lane] = max(mine.get(lane, 0), count)

    def buffer(self, step: host.Allocate | host.Deallocate, env: Mapping[str, int]) -> None:
        t, word = step.tensor, type(step).__name__
        if id(t) in self.owned:
            self.problems.append(
                f"{self.where(step, env)}: {word} {t.name}, a fusion input or output: the "
                "caller owns its buffer"
            )
            return
        if isinstance(step, host.Deallocate):
            busy = self.settled(t)
            if busy is not None:
                self.problems.append(
                    f"{self.where(step, env)}: Deallocate {t.name} on stream {self.current} "
                    f"while {busy} may still use it: synchronize with its stream (or wait) first"
                )
            self.freed.add(id(t))
            return
        if id(t) in self.allocated and id(t) not in self.freed:
            self.problems.append(f"{self.where(step, env)}: {t.name} is allocated twice")
        elif id(t) in self.written and id(t) not in self.freed:
            self.problems.append(f"{self.where(step, env)}: Allocate {t.name} after it is written")
        self.allocated.add(id(t))
        self.freed.discard(id(t))

    def step(self, step: object, env: Mapping[str, int]) -> None:
        """Run one step (not a loop) of the host program."""
        if isinstance(step, host.SetCurrentStream):
            self.current = step.stream.value(env)
            self.chosen.add(self.current)
        elif isinstance(step, host.PostOnStream):
            self.post(step, env)
        elif isinstance(step, host.Wait):
            self.wait(step, env)
        elif isinstance(step, host.Synchronize):
            self.synchronize(step, env)
        elif isinstance(step, (host.Allocate, host.Deallocate)):
            self.buffer(step, env)
        elif isinstance(step, host.ShardByStream):
            if id(step.chunk) in self.written_by_steps:
                self.views[id(step.chunk)] = step.whole
            else:  # a view of what is computed before: ready on this stream
                self.read(step.whole, step, env)
        elif host.executable(step) is not None:  # blocking: on the current stream
            self.run(step, step, env)

    def finish(self) -> None:
        for key in self.pending:
            post = next(s for s in host.walk(self.program.steps) if id(s) == key)
            self.problems.append(
                f"step {self.numbers[key]} posts Communication {post.step.kind.value} -> "
                f"{post.step.output.name} and nothing waits for it"
            )
        self.current = host.MAIN_STREAM
        for t in self.program.outputs:
            if id(t) in self.written and not self._ready_on_main(t):
                self.problems.append(
                    f"output {t.name} is not ready on the main stream (Stream 0) at the end: "
                    "Synchronize its stream (or Wait for its communication) on Stream 0"
                )

    def _ready_on_main(self, t: TensorView) -> bool:
        lane, count, _ = self.written[id(t)]
        return self.of(host.MAIN_STREAM).get(lane, 0) >= count


def host_problems(program: Program) -> list[str]:
    """The broken rules of a host program's streams, waits and buffers (module doc); none
    for a flat program (every step on the main stream, communications blocking)."""
    if not host.is_host_program(program.steps):
        return []
    try:
        host.check_loops(program.steps)
    except VerifyError as exc:  # reported with the others
        return [str(exc)]
    streams = _Streams(program)
    for step, env in host.unrolled(program.steps):
        streams.step(step, env)
    streams.finish()
    return list(dict.fromkeys(streams.problems))


def settled_after(program: Program, tensors: list[TensorView]) -> list[set[int]]:
    """Per top-level step of the program, the ids of `tensors` whose every use so far is
    ordered before the stream current after that step: where a Deallocate of them may
    go (allocate-and-deallocate asks). Allocate and Deallocate steps are left out."""
    streams = _Streams(program)
    out = []
    for top in program.steps:
        for step, env in host.unrolled([top]):
            if not isinstance(step, (host.Allocate, host.Deallocate)):
                streams.step(step, env)
        out.append({id(t) for t in tensors if streams.settled(t) is None})
    return out
