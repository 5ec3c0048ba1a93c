"""IR values (fuserlite.ir.values): an IterDomain and a TensorDomain are frozen and
interned, alike means the same object; facts of them are cached functions."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest

import fuserlite as fl
from fuserlite.ir.domain import IterDomain, Split, TensorDomain
from fuserlite.ir.types import IterType, ParallelType
from fuserlite.ir.values import FACT_SIZE, fact, interned_count


def test_alike_is_the_same_object_and_unlike_is_not() -> None:
    assert IterDomain(4) is IterDomain(4) is IterDomain(4, IterType.ITERATION)
    assert IterDomain(4) is not IterDomain(4, IterType.BROADCAST)
    assert IterDomain(4).with_parallel_type(ParallelType.TIDx) is IterDomain(
        4, IterType.ITERATION, ParallelType.TIDx
    )
    a = TensorDomain([IterDomain(8), IterDomain(16)])
    assert a is TensorDomain([IterDomain(8), IterDomain(16)])
    assert a.split(1, 4) is a.split(1, 4) is not a
    assert a.split(1, 4, False) is not a.split(1, 4)
    assert a.split(1, 4).transforms == (Split(1, 4, True, 2, 3),)
    assert {a: 1}[TensorDomain([IterDomain(8), IterDomain(16)])] == 1  # a dict key


def test_values_are_frozen() -> None:
    dom = TensorDomain([IterDomain(8)])
    with pytest.raises(AttributeError, match="IterDomain is a value"):
        dom.axes[0].extent = 4
    with pytest.raises(AttributeError, match="TensorDomain is a value"):
        dom.loop_positions = ()


def test_copies_and_pickles_are_the_value_itself() -> None:
    dom = TensorDomain([IterDomain(8), IterDomain(1, IterType.BROADCAST)]).split(0, 2)
    assert copy.copy(dom) is dom and copy.deepcopy(dom) is dom
    assert pickle.loads(pickle.dumps(dom)) is dom
    assert pickle.loads(pickle.dumps(dom.axes[1])) is dom.axes[1]


def test_a_value_nobody_holds_is_dropped() -> None:
    """The intern table holds values weakly (memory stays bounded by what is alive)."""
    gc.collect()
    before = interned_count()
    made = [IterDomain(10**9 + k) for k in range(100)]
    assert interned_count() >= before + 100
    del made
    gc.collect()
    assert interned_count() <= before + 5


def test_a_tensor_is_given_a_new_domain_and_alike_tensors_share_one() -> None:
    with fl.Fusion():
        x, y = fl.tensor([8, 16]), fl.tensor([8, 16])
    assert x.domain is y.domain
    before = x.domain
    x.split(1, 4)
    assert before is y.domain and x.domain is not before  # nothing edited in place
    y.split(1, 4)
    assert x.domain is y.domain


def test_an_axis_handle_names_its_axis_across_primitives() -> None:
    with fl.Fusion():
        x = fl.tensor([8, 16])
    first = x.axis(0)
    x.split(1, 4).reorder({0: 2})
    assert first == x.loop[2] and first.extent == 8
    first.parallelize(fl.ParallelType.BIDx)
    assert x.domain.loop[2].parallel_type is fl.ParallelType.BIDx
    assert first.definition is None and x.axis(0).definition == x.domain.transforms[0]


def test_a_fact_is_computed_once_per_distinct_arguments_and_bounded() -> None:
    calls = []

    @fact
    def extent_of(ax: IterDomain) -> int:
        calls.append(ax)
        return ax.extent

    assert extent_of(IterDomain(3)) == extent_of(IterDomain(3)) == 3
    assert len(calls) == 1
    assert extent_of.cache_info().maxsize == FACT_SIZE
