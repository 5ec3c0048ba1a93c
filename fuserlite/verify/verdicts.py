"""Whole-IR verdicts: a validator that found a fusion or a program valid is not run
again on it while nothing it read has changed (the pipeline keeps one per run).

`Verdicts.check(ir, question, validate, reads)` runs `validate(ir)` unless it passed on
`ir` before and nothing its `Reads` names has changed since; FUSION_READS is what
fuserlite.verify.verify reads, program.verify.PROGRAM_READS what verify_program reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter, is_
from typing import Any

from fuserlite.ir.expr import Expr
from fuserlite.ir.stamps import tick
from fuserlite.ir.tensor import TensorView

# Many passes change few nodes or none (lower-communications and assign-layouts of a
# program with no resharding change no tensor); per node the validator already re-checks
# only what changed, and a verdict skips even the walk over the unchanged nodes.
#
# What a validator reads is of two kinds (its `Reads`): stamped nodes (TensorViews, their
# TensorDomains, Exprs: any write to one, or to an IterDomain a tensor owns, moves its
# stamp), and the lists that hold the IR together, which carry no stamp (a fusion's
# inputs and outputs, a program's steps, a kernel's expressions): of those a record keeps
# the contents. A record made at clock time T holds while every list holds the same nodes
# and every node reachable from them is stamped before T: then the IR is the same graph
# in the same state (a new node is reachable only through a changed node or list), and so
# is every verdict about it. Where the clock has not moved at all since the record was
# last found to hold, no node can have changed, and none is read.
_STAMP = attrgetter("_stamp")


@dataclass(frozen=True)
class Reads:
    """What a validator reads of an IR: `lists(ir)`, its unstamped lists (compared item
    by item, by identity), and `nodes(ir)`, every stamped node (TensorViews, their
    TensorDomains, Exprs; duplicates allowed) reachable from them."""

    lists: Callable[[Any], Sequence[Sequence[Any]]]
    nodes: Callable[[Any], Sequence[Any]]


def _same(now: Sequence[Sequence[Any]], then: Sequence[tuple]) -> bool:
    return len(now) == len(then) and all(
        len(a) == len(b) and all(map(is_, a, b)) for a, b in zip(now, then)
    )


@dataclass
class _Record:
    ir: Any
    question: object
    time: int  # the clock when the check began: every node it read is stamped before
    lists: list[tuple]
    last: int  # the clock when the record was last found to hold

    def holds(self, ir: Any, question: object, reads: Reads) -> bool:
        if ir is not self.ir or question != self.question:
            return False
        if not _same(reads.lists(ir), self.lists):
            return False
        now = tick()
        if now != self.last + 1:  # the clock moved: some node somewhere changed or is new
            # Walked now, from the same lists: while every node met is unchanged since
            # `time`, they are the nodes the check read.
            nodes = reads.nodes(ir)
            if nodes and max(map(_STAMP, nodes)) >= self.time:
                return False
        self.last = now  # else nothing at all has changed since (the one tick is ours)
        return True


class Verdicts:
    """The last whole-IR check that found nothing wrong, kept while its IR is unchanged
    (one per pipeline run)."""

    def __init__(self) -> None:
        self._record: _Record | None = None

    def check(
        self,
        ir: Any,
        question: object,
        validate: Callable[[Any], None],
        reads: Reads,
    ) -> None:
        """validate(ir) (it raises on a problem), unless it passed on `ir` for `question`
        and nothing it `reads` has changed since."""
        record = self._record
        if record is not None and record.holds(ir, question, reads):
            return
        self._record = None
        start = tick()
        validate(ir)
        lists = [tuple(x) for x in reads.lists(ir)]
        end = tick()
        # A tick during the check (none is expected: it only reads) leaves the stamps to say.
        self._record = _Record(ir, question, start, lists, end if end == start + 1 else 0)


_DOMAIN = attrgetter("domain")


def expr_nodes(exprs: Iterable[Expr], tensors: Iterable[TensorView] = ()) -> list:
    """`exprs`, `tensors` and every tensor the expressions read or write, with their
    domains: the stamped nodes a check of them reads (Verdicts)."""
    exprs = list(exprs)
    tvs = list(tensors)
    for e in exprs:
        tvs += e.inputs
        tvs += e.outputs
    return [*exprs, *tvs, *map(_DOMAIN, tvs)]


# What verify(fusion) reads (it follows the definitions back from the outputs).
FUSION_READS = Reads(
    lists=lambda f: (f.inputs, f.outputs),
    nodes=lambda f: expr_nodes(f.exprs(), (*f.inputs, *f.outputs)),
)
