"""The pass registry, options, the validator between passes, and dumps."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import ClassVar

import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.passes.base import REGISTRY, Pass, PassOptionError, make_pass
from fuserlite.pipeline import DEFAULT_PASSES, PassFailed, Pipeline


def test_every_default_pass_is_registered_with_a_description():
    for name in DEFAULT_PASSES:
        cls = REGISTRY[name]
        assert cls.name == name and cls.description()
        doc = importlib.import_module(cls.__module__).__doc__
        assert "Before:" in doc and "After:" in doc, name


def test_make_pass_parses_options():
    p = make_pass("assign-layouts[pin=none]")
    assert p.pin == "none" and str(p) == "assign-layouts[pin=none]"
    with pytest.raises(PassOptionError, match="unknown pass 'nope'"):
        make_pass("nope")
    with pytest.raises(PassOptionError, match="unknown option"):
        make_pass("assign-layouts[color=red]")
    with pytest.raises(PassOptionError, match=r"key=value"):
        make_pass("assign-layouts[pin=none")


def test_pipeline_leaves_the_input_fusion_untouched():
    f = models.tensor_parallel_mlp(2)
    before = str(f)
    lowered = fl.lower(f)
    assert str(f) == before and lowered is not f and lowered.steps


def test_a_pass_that_breaks_an_invariant_is_named_with_the_passes_before_it():
    @dataclass(frozen=True)
    class DoubleDid(Pass):
        """Test-only: give a tensor two DIDx axes."""

        name: ClassVar[str] = "test-double-did"

        def run(self, fusion):
            tv = fusion.inputs[0]
            tv.split(0, 1)
            for ax in tv.loop:
                ax.parallel_type = fl.ParallelType.DIDx

    REGISTRY[DoubleDid.name] = DoubleDid
    try:
        with pytest.raises(PassFailed) as err:
            Pipeline(["propagate-shardings", "test-double-did"]).run(models.add_broadcast(2, True))
        msg = str(err.value)
        assert "pass test-double-did (after: propagate-shardings)" in msg
        assert "multiple loop IterDomains with the same parallel type (deviceIdx.x)" in msg
    finally:
        del REGISTRY[DoubleDid.name]


def test_print_after_dumps_only_the_named_pass():
    dumps = []
    Pipeline(
        ["propagate-shardings", "insert-reshardings"],
        print_after=["insert-reshardings"],
        dump=lambda name, f: dumps.append(name),
    ).run(models.add_broadcast(2, True))
    assert dumps == ["insert-reshardings"]
    with pytest.raises(PassOptionError, match="unknown pass"):
        Pipeline([], print_after=["nope"])
