"""assign-layouts: every collective gets a layout, all pinned or all free (seed 000)."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import PassOptionError
from fuserlite.passes.assign_layouts import AssignLayouts
from fuserlite.pipeline import Pipeline, default_pass_names


def lowered(pin: str | None):
    opts = {} if pin is None else {"assign-layouts": f"pin={pin}"}
    return Pipeline(default_pass_names(**opts)).run(models.all_gather_all_reduce_reduce_scatter(4))


def comms(fusion):
    return [s for s in fusion.steps if hasattr(s, "layout")]


def test_default_pins_every_collective_to_its_allocation_order():
    layouts = [c.layout for c in comms(lowered(None))]
    assert all(layout.pinned for layout in layouts)
    assert all(layout.order == (0,) for layout in layouts)


def test_pin_none_frees_every_collective():
    assert {c.layout.pinned for c in comms(lowered("none"))} == {False}


def test_layout_is_printed():
    text = lowered(None).fusion.print_math()
    assert "layout=pinned{0}" in text


def test_bad_option_is_refused_before_anything_runs():
    with pytest.raises(PassOptionError, match="option pin expects one of all, none, got 'some'"):
        lowered("some")
    with pytest.raises(PassOptionError, match="option pin expects one of all, none"):
        AssignLayouts(pin="some")  # built in Python too


def test_local_slices_get_no_layout():
    f = models.tensor_parallel_mlp(2, sequence_parallel=False)
    for c in comms(fl.lower(f)):
        assert (c.layout is None) == (not c.kind.is_collective)
