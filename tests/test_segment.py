"""segment: kernels and communications in execution order."""

from __future__ import annotations

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.expr import LoadStoreOp
from fuserlite.pipeline import Pipeline
from fuserlite.program.program import Kernel


def segments_of(fusion):
    return Pipeline(["propagate-shardings", "insert-reshardings", "segment"]).run(fusion).steps


def test_seed_004_is_one_kernel():
    segs = segments_of(models.add_broadcast(2, True))
    assert len(segs) == 1 and isinstance(segs[0], Kernel)
    k = segs[0]
    assert [t.name for t in k.inputs] == ["T0", "T1"] and [t.name for t in k.outputs] == ["T2"]


def test_mlp_segments_give_each_scheduler_its_kernel():
    segs = segments_of(models.tensor_parallel_mlp(2))
    shape = [
        "Set" if isinstance(s, LoadStoreOp) else "+".join(e.op_name for e in s.exprs) for s in segs
    ]
    assert shape == ["linear", "gelu", "linear", "Set", "broadcast+add"]  # the bias is in linear
    comm = segs[3]
    assert comm.input in segs[2].outputs and comm.output in segs[4].inputs


def test_unsharded_fusion_is_one_kernel_without_mesh():
    with fl.Fusion() as f:
        x = fl.tensor([3])
        f.add_input(x)
        f.add_output(fl.exp(fl.neg(x)))
    (k,) = segments_of(f)
    assert k.mesh is None and len(k.exprs) == 2
