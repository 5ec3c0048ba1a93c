"""The mpi backend's watchdog: every MPI operation is posted non-blocking and waited
for against a deadline, so a stalled rank ends the job with a message, not a hang.

A killed rank is noticed by mpiexec, which ends the job at once; a stopped one
(SIGSTOP, a debugger, a swapped-out or stuck node) fails nothing, and every other
rank would wait in its next collective forever. So `MpiCommunicator` posts each
operation (MPI_Iallgather, MPI_Ialltoallv, MPI_Ibcast, MPI_Isend/MPI_Irecv, ...)
and hands its requests to `Watchdog.wait` as a `Pending`, which tests them
(MPI_Testall): in a loop for SPIN_S, then between naps of a twentieth of the
time waited so far (NAP_MAX_S at most), so a rank waiting for long takes about
1% of a core. `post` and `wait` are apart on
purpose: a caller may post, compute, then wait.

Who did not answer. When a rank has waited `timeout` seconds at one operation it
asks every other rank where it is (a query on COMM_WORLD under WATCH_TAG, which
no data message uses). Every rank serves these messages each time it waits, and
while it waits: it answers with where it is and how many operations it has
completed. The asker listens for `min(timeout, ANSWER_WINDOW_S)`:

- a rank that does not answer (stopped, hung, or computing outside MPI for that
  long) ends the job: the asker sends a verdict naming it to every rank, and
  each live rank prints one line (its rank, the step it waits at, by index and
  name, the MPI operation and its team, the ranks that did not answer) and calls
  MPI_Abort; mpiexec then kills every process, a stopped one too (SIGKILL);
- if every rank answers and one of them has completed an operation since the
  asker's last question, the job is moving (a rank computes for long, or waits
  for one that does): the asker waits `timeout` more;
- if every rank answers twice in a row with no operation completed anywhere,
  they wait on each other (ranks that disagree on the program): a verdict too.

So a stalled rank ends the job about timeout + ANSWER_WINDOW_S + ABORT_GRACE_S
after the first rank began waiting for it. While every operation completes in
time nothing is sent: the watchdog costs one probe and one test per operation
(benchmarks/backends.py measures it).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError

DEFAULT_TIMEOUT_S = 300.0
ANSWER_WINDOW_S = 2.0  # how long an asker listens for the others' answers
ABORT_GRACE_S = 0.5  # mpiexec forwards stderr through a proxy that MPI_Abort tears down
# Waiting: test in a loop for SPIN_S (MPI progresses only in our calls, and a collective
# of several rounds needs every member to test in each; most small ones end within it),
# then nap for a NAP_SHARE of the time waited so far, NAP_MAX_S at most: that adds at
# most ~5% to a wait and costs a rank waiting long ~1% of a core. Yielding instead of
# spinning, on 2 loaded cores, handed the core to other jobs for whole time slices.
SPIN_S = 2e-4
NAP_SHARE = 0.05
NAP_MAX_S = 1e-3
WATCH_TAG = 7302  # the watchdog's messages on COMM_WORLD (exchange's data use 7301)

# Kinds of watchdog message: [kind, round, ...] in int64.
QUERY, ANSWER, VERDICT = 0, 1, 2
# Where a rank is, when not at a program step (a step is its index, >= 0).
PREPARING, COLLECTING, OUTSIDE = -1, -2, -3
PLACES = {
    PREPARING: "the set-up of the program's teams",
    COLLECTING: "the gather of the outputs to rank 0",
    OUTSIDE: "an operation outside a program",
}
HINT = "if a rank is only slow, give a longer timeout: --timeout, FusionExecutor(timeout=)"


@dataclass
class Pending:
    """Posted non-blocking MPI operations: `call` (the MPI function) over `team` (world
    ranks), as the watchdog names them; `keep` holds buffers MPI still reads or writes."""

    requests: list
    call: str
    team: Sequence[int]
    keep: tuple = field(default=())


def check_timeout(value: object, who: str) -> float:
    """A timeout in seconds: a positive int or float (math.inf: wait for ever)."""
    if not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)):
        seconds = float(value)
        if seconds > 0:  # NaN is not
            return seconds
    raise ExecutionError(
        f"{who}: timeout must be a positive number of seconds (math.inf waits for ever), "
        f"not {value!r}"
    )


def seconds_text(seconds: float) -> str:
    """`2 s`, `0.5 s`, `300 s`."""
    return f"{seconds:.3g} s"


def ranks_text(ranks: Sequence[int]) -> str:
    """`rank 1`, `ranks 1 3`."""
    return f"rank{'s' if len(ranks) != 1 else ''} {abbreviate(ranks)}"


def abort(world, line: str) -> NoReturn:
    """Print this rank's `line` on stderr and end every rank of the job (MPI_Abort)."""
    sys.stderr.write(f"{line}\n")  # one write: the ranks' lines do not interleave
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)  # let mpiexec pass the message on before the abort
    world.Abort(1)
    os._exit(1)  # MPICH's Abort can return before the process manager kills us


class Watchdog:
    """Waits for Pending operations of one rank against a deadline (module docstring)."""

    def __init__(self, MPI, world, timeout: float, abort_on_stall: bool) -> None:
        """`abort_on_stall`: a stall aborts the job (else it raises an ExecutionError here)."""
        self.MPI, self.world = MPI, world
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.timeout = timeout
        self.abort_on_stall = abort_on_stall
        self.place, self.place_name = OUTSIDE, ""
        self.completed = 0  # operations this rank finished: the sign of progress
        self._round = 0  # the number of this rank's latest question
        self._answers: dict[int, tuple[int, int]] = {}  # rank -> (place, completed)
        self._sends: list = []  # requests and buffers of messages still in flight
        self._status = MPI.Status()
        self._current: Pending | None = None  # what this rank waits for, since _started
        self._started = 0.0

    def at(self, place: int, name: str = "") -> None:
        """Where this rank is now: a program step's index and name, or a PLACES key."""
        self.place, self.place_name = place, name

    def where(self, place: int | None = None, name: str | None = None) -> str:
        """`step 3 (Allreduce T10 -> T7)`, or the part of a run outside the program's steps."""
        place = self.place if place is None else place
        if place < 0:
            return PLACES[place]
        name = self.place_name if name is None else name
        return f"step {place} ({name})" if name else f"step {place}"

    # -- waiting ----------------------------------------------------------------------
    def wait(self, pending: Pending) -> None:
        """Return once every request of `pending` has completed; end the job (or raise)
        if it stalls."""
        Testall = self.MPI.Request.Testall
        if self.timeout == math.inf:  # no watchdog: MPI's own wait
            self.MPI.Request.Waitall(pending.requests)
        else:
            self._current, self._started = pending, time.monotonic()
            self._serve()  # every wait answers questions, also one that need not poll
            if not Testall(pending.requests):
                self._poll(pending, Testall)
            self._current = None
        self.completed += 1

    def _poll(self, pending: Pending, Testall) -> None:
        start = self._started
        deadline, seen = start + self.timeout, None
        while not Testall(pending.requests):
            self._serve()
            now = time.monotonic()
            if now < deadline:
                waited = now - start
                if waited >= SPIN_S:
                    time.sleep(min(NAP_SHARE * waited, NAP_MAX_S, deadline - now))
                continue
            seen = self._ask(pending, start, seen)
            if seen is None:  # the operation completed while we listened
                return
            deadline = time.monotonic() + self.timeout

    def _ask(self, pending: Pending, start: float, before: dict | None) -> dict | None:
        """Ask every rank where it is; their answers, or None once `pending` completed.
        Ends the job when a rank does not answer, or nothing moved since `before`."""
        self._round += 1
        self._answers = {}
        self._send_all([QUERY, self._round])
        window = min(self.timeout, ANSWER_WINDOW_S)
        until = time.monotonic() + window
        while len(self._answers) < self.size - 1 and time.monotonic() < until:
            if self.MPI.Request.Testall(pending.requests):
                return None
            self._serve()
            time.sleep(NAP_MAX_S)
        answers = dict(self._answers)
        missing = [r for r in range(self.size) if r != self.rank and r not in answers]
        if missing:
            cause = f"{ranks_text(missing)} did not answer within {seconds_text(window)}"
            cause += " (stopped, hung, or busy outside MPI)"
        elif before is not None and all(answers[r][1] == before[r][1] for r in answers):
            cause = "every rank answered, but none completed an operation since the last question"
        else:
            return answers  # the job is moving: wait on
        self._send_all([VERDICT, self._round, *missing])
        self._fail(pending, f"{cause}{self._others(answers)}", until - window - start)

    def _others(self, answers: dict[int, tuple[int, int]]) -> str:
        """`; the others wait: ranks 0 2 at step 3, rank 1 at ...`: where those that answered are."""
        at: dict[int, list[int]] = {}
        for r, (place, _) in sorted(answers.items()):
            at.setdefault(place, []).append(r)
        parts = [f"{ranks_text(rs)} at {self.where(p, '')}" for p, rs in at.items()]
        return f"; the others wait: {', '.join(parts)}" if parts else ""

    def _fail(self, pending: Pending, cause: str, waited: float) -> NoReturn:
        """This rank's one line about the stall, then the end of the job (or an error)."""
        message = (
            f"rank {self.rank}: waited {seconds_text(waited)} at {self.where()}, in "
            f"{pending.call} over team {{{abbreviate(pending.team)}}}: {cause}; ending the job "
            f"({HINT})"
        )
        if self.abort_on_stall and self.size > 1:
            abort(self.world, f"error: {message}")
        raise ExecutionError(message)

    # -- the watchdog's messages ------------------------------------------------------
    def _send_all(self, payload: list[int]) -> None:
        message = np.array(payload, np.int64)
        for r in range(self.size):
            if r != self.rank:
                self._send(r, message)

    def _send(self, rank: int, message: np.ndarray) -> None:
        with contextlib.suppress(self.MPI.Exception):  # a rank gone will not answer either
            self._sends.append((self.world.Isend(message, dest=rank, tag=WATCH_TAG), message))

    def _serve(self) -> None:
        """Handle the watchdog messages that have arrived: answer questions, note answers
        to ours, and end the job on a verdict."""
        if self._sends:
            self._sends = [(r, m) for r, m in self._sends if not r.Test()]
        status = self._status
        while True:
            msg = self.world.Improbe(source=self.MPI.ANY_SOURCE, tag=WATCH_TAG, status=status)
            if msg is None:
                return
            got = np.empty(status.Get_count(self.MPI.INT64_T), np.int64)
            msg.Recv(got)
            kind, round_, source = int(got[0]), int(got[1]), status.Get_source()
            if kind == QUERY:
                self._send(source, np.array([ANSWER, round_, self.place, self.completed], np.int64))
            elif kind == ANSWER and round_ == self._round:
                self._answers[source] = (int(got[2]), int(got[3]))
            elif kind == VERDICT:
                self._verdict(source, [int(r) for r in got[2:]])

    def _verdict(self, source: int, missing: list[int]) -> NoReturn:
        cause = (
            f"{ranks_text(missing)} did not answer rank {source} (stopped, hung, or busy "
            "outside MPI)"
            if missing
            else f"rank {source} found every rank waiting on the others"
        )
        pending = self._current or Pending([], "an MPI operation", range(self.size))
        self._fail(pending, cause, time.monotonic() - self._started)
