"""The collector pause (fuserlite/ir/collector.py): what a pause made survives it in
the oldest generation, unscanned, and its garbage cycles are still freed."""

from __future__ import annotations

import gc
import weakref

from fuserlite.ir.collector import COLLECTOR_PAUSE


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_what_a_pause_made_is_not_left_for_the_young_collections():
    """The young generation's count is what its next scan would walk: 0 after a pause
    that made 50 000 objects (it was 50 000, scanned at the first allocation after)."""
    assert gc.isenabled()
    with COLLECTOR_PAUSE:
        kept = [[k] for k in range(50_000)]
    assert gc.isenabled()
    assert gc.get_count()[0] < 1000
    assert len(kept) == 50_000


def test_a_cycle_made_in_a_pause_is_freed_by_a_full_collection():
    with COLLECTOR_PAUSE:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
    assert ref() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert ref() is None


def test_a_caller_who_turned_the_collector_off_keeps_it_off():
    gc.disable()
    try:
        with COLLECTOR_PAUSE:
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
