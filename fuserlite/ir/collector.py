"""The cyclic garbage collector paused while fuserlite builds or runs big IR.

Lowering, running and evaluating a fusion allocate many small, long-lived objects
(IR nodes, derived facts, index arrays) and free almost no cycles: the collector's
full scans over a growing heap would make them superlinear (a 10000-op compile
took 17x a 1000-op one; the collections were a third of running 20000 outputs).

    with COLLECTOR_PAUSE:
        ...
"""

from __future__ import annotations

import gc
import threading


class CollectorPause:
    """The cyclic garbage collector off while at least one pause is open, then back to
    what it was when the first began: pauses may nest or overlap in threads, and the
    collector (a process-wide switch) is left as the caller had it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._was_enabled:
                # What the pause made survives it (the IR, its facts): moved to the
                # oldest generation unscanned, or the young collections' first scans
                # after the pause walk it all (0.85 s after lowering 20 000 outputs)
                # and then again in the run. Cycles among it wait for a full scan.
                gc.freeze()
                gc.unfreeze()
                gc.enable()


COLLECTOR_PAUSE = CollectorPause()  # one per process, as the collector is
