"""Chunks on streams: a flat program of independent chunks, each a communication and the
kernels after it, as nvFuser's collective-based pipelining runs it.

    stream_chunks(program)   # chunk i's communication posted on stream i + 1 and waited
                             # for there, its kernels after it on the same stream; the main
                             # stream synchronizes every chunk's stream at the end

Chunk i + 1's communication then runs while chunk i's kernels compute (each team's
communications in turn on its communication stream, fuserlite.timing). The result is
verified: where a chunk reads what another chunk computes (they are not independent),
verify_program says which step reads what before it is ready. Kernels before the first
communication stay on the main stream.
"""

from __future__ import annotations

from fuserlite.program import host
from fuserlite.program.communication import Communication
from fuserlite.program.program import Kernel, Program
from fuserlite.program.verify import verify_program


def stream_chunks(program: Program) -> Program:
    """`program` (flat: kernels and communications) with each communication and the
    kernels after it on a stream of their own (module doc), in place; returned."""
    steps: list = []
    chunk = 0
    for step in program.steps:
        if isinstance(step, Communication):
            chunk += 1
            post = host.PostOnStream(step)
            steps += [host.SetCurrentStream(host.StreamIndex(chunk)), post, host.Wait(post)]
        elif isinstance(step, Kernel):
            steps.append(host.PostOnStream(step))
        else:
            raise TypeError(f"stream_chunks takes a flat lowered program, not one with {step!r}")
    steps.append(host.SetCurrentStream(host.StreamIndex(host.MAIN_STREAM)))
    steps += [host.Synchronize(host.StreamIndex(s + 1)) for s in range(chunk)]
    program.steps = steps
    verify_program(program)
    return program
