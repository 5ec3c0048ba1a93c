"""Golden tests of the printer: the seed-004 schedule, every op kind, stable numbering."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import fuserlite as fl
from fuserlite.ir import Axis, IterDomain, LoadStoreOp, MemoryType, TensorView

P = fl.ParallelType
Built = tuple[list[TensorView], list[TensorView]]

# The scheduled fusion printed in seed 004 (the first bug of docs/origins.md),
# copied here so the test does not depend on files outside the repository.
SEED_004_KERNEL = """\
%kernel {
T3_l_float[ iblockIdx.x26{1}, iUS27{1}, ithreadIdx.x25{128} ] ca_pos( 2 ) (DeviceMesh{0 1})
   = Set( T0_g_float[ iS30{1}, iS31{1}, iS29{128} ] (DeviceMesh{0 1}), cache_op=Streaming )
T4_l_float[ bblockIdx.x18{1}, bUS19{1}, bthreadIdx.x17{128} ] (DeviceMesh{0 1})
   = Set( T1_g_float[ bdeviceIdx.x22{1}, bdeviceIdx.x23{1}, bdeviceIdx.x21{128} ] (DeviceMesh{0 1}), cache_op=AllLevels )
T5_l_float[ iblockIdx.x14{1}, iUS15{1}, ithreadIdx.x13{128} ] ca_pos( 3 ) produce_pos( 2 ) (DeviceMesh{0 1})
   = T3_l_float[ iblockIdx.x26{1}, iUS27{1}, ithreadIdx.x25{128} ] ca_pos( 2 ) (DeviceMesh{0 1})
   + T4_l_float[ bblockIdx.x18{1}, bUS19{1}, bthreadIdx.x17{128} ] (DeviceMesh{0 1});
T2_g_float[ iblockIdx.x10{1}, iUS11{1}, ithreadIdx.x9{128} ] ca_pos( 2 ) produce_pos( 3 ) (DeviceMesh{0 1})
   = Set( T5_l_float[ iblockIdx.x14{1}, iUS15{1}, ithreadIdx.x13{128} ] ca_pos( 3 ) produce_pos( 2 ) (DeviceMesh{0 1}), cache_op=Streaming )

TransformPrinter :\x20
T0_g_float[ iS30{1}, iS31{1}, iS29{128} ] (DeviceMesh{0 1})
 logical domain : (iS0{2})
 contiguity: t
  Split: iS0{2} by factor 128 -> iS28{1}, iS29{128}
  Split: iS28{1} by factor 1 -> iS30{1}, iS31{1}
 loop domain : (iS30{1}, iS31{1}, iS29{128})
T3_l_float[ iblockIdx.x26{1}, iUS27{1}, ithreadIdx.x25{128} ] ca_pos( 2 ) (DeviceMesh{0 1})
 logical domain : (iS5{2})
 contiguity: t
  Split: iS5{2} by factor 128 -> iS24{1}, ithreadIdx.x25{128}
  Split: iS24{1} by factor 1 -> iblockIdx.x26{1}, iUS27{1}
 loop domain : (iblockIdx.x26{1}, iUS27{1}, ithreadIdx.x25{128})
T1_g_float[ bdeviceIdx.x22{1}, bdeviceIdx.x23{1}, bdeviceIdx.x21{128} ] (DeviceMesh{0 1})
 logical domain : (bdeviceIdx.x1{1})
 contiguity: n
  Split: bdeviceIdx.x1{1} by factor 128 -> bdeviceIdx.x20{1}, bdeviceIdx.x21{128}
  Split: bdeviceIdx.x20{1} by factor 1 -> bdeviceIdx.x22{1}, bdeviceIdx.x23{1}
 loop domain : (bdeviceIdx.x22{1}, bdeviceIdx.x23{1}, bdeviceIdx.x21{128})
T4_l_float[ bblockIdx.x18{1}, bUS19{1}, bthreadIdx.x17{128} ] (DeviceMesh{0 1})
 logical domain : (bdeviceIdx.x6{1})
 contiguity: n
  Split: bdeviceIdx.x6{1} by factor 128 -> bdeviceIdx.x16{1}, bthreadIdx.x17{128}
  Split: bdeviceIdx.x16{1} by factor 1 -> bblockIdx.x18{1}, bUS19{1}
 loop domain : (bblockIdx.x18{1}, bUS19{1}, bthreadIdx.x17{128})
T5_l_float[ iblockIdx.x14{1}, iUS15{1}, ithreadIdx.x13{128} ] ca_pos( 3 ) produce_pos( 2 ) (DeviceMesh{0 1})
 logical domain : (iS2{2})
 contiguity: t
  Split: iS2{2} by factor 128 -> iS12{1}, ithreadIdx.x13{128}
  Split: iS12{1} by factor 1 -> iblockIdx.x14{1}, iUS15{1}
 loop domain : (iblockIdx.x14{1}, iUS15{1}, ithreadIdx.x13{128})
T2_g_float[ iblockIdx.x10{1}, iUS11{1}, ithreadIdx.x9{128} ] ca_pos( 2 ) produce_pos( 3 ) (DeviceMesh{0 1})
 logical domain : (iS7{2})
 contiguity: t
  Split: iS7{2} by factor 128 -> iS8{1}, ithreadIdx.x9{128}
  Split: iS8{1} by factor 1 -> iblockIdx.x10{1}, iUS11{1}
 loop domain : (iblockIdx.x10{1}, iUS11{1}, ithreadIdx.x9{128})
} // %kernel
"""

_ID_NUMBER = re.compile(
    r"\b([ibr](?:S|US|UR|V|deviceIdx\.[xyz]|blockIdx\.[xyz]|threadIdx\.[xyz]))(\d+)(?=\{)"
)
_TENSOR_NAME = re.compile(r"\bT(\d+)(?=_[gls]_)")


def canonical(text: str) -> str:
    """Renumber IterDomains and tensors in order of first appearance.

    nvFuser numbers IterDomains in creation order, which depends on how its
    scheduler built the fusion; the *structure* of the text (which axis is which,
    and where each one reappears) survives this renaming.
    """
    ids: dict[str, int] = {}
    tensors: dict[str, int] = {}
    text = _ID_NUMBER.sub(lambda m: f"{m[1]}#{ids.setdefault(m[2], len(ids))}", text)
    return _TENSOR_NAME.sub(lambda m: f"T#{tensors.setdefault(m[1], len(tensors))}", text)


def _blocks(kernel: str) -> dict[str, str]:
    """The TransformPrinter block of each tensor of a printed kernel, by tensor name."""
    section = kernel.split("TransformPrinter : \n", 1)[1].rsplit("} // %kernel", 1)[0]
    out: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith(" "):
            name = line.split("_", 1)[0]
            out[name] = line + "\n"
        else:
            out[name] += line + "\n"
    return out


def _split_128_then_1(tv: TensorView) -> None:
    """The pointwise schedule of the seed: split by 128, then the outer part by 1."""
    tv.split(0, 128)
    tv.split(0, 1)


def _parallelize_bid_us_tid(tv: TensorView) -> None:
    tv.axis(0).parallelize(P.BIDx)
    tv.axis(1).parallelize(P.Unswitch)
    tv.axis(2).parallelize(P.TIDx)


def build_seed_t0_t3() -> fl.Fusion:
    """T0 float[2] on DeviceMesh{0 1}, T3 = set(T0) scheduled as in seed 004."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh([0, 1])
        t0 = fl.tensor([2])
        t0.set_device_mesh(mesh)
        fusion.add_input(t0)
        t3 = fl.set(t0)
        t3.set_device_mesh(mesh)
        t3.definition.cache_op = "Streaming"
        fusion.add_output(t3)
        t3.memory_type = MemoryType.LOCAL  # in the seed T3 is a local cache of T0
        _split_128_then_1(t0)
        _split_128_then_1(t3)
        _parallelize_bid_us_tid(t3)
        t3.compute_at_pos = 2
    return fusion


def test_seed_t0_t3_golden(golden) -> None:
    golden("seed004_t0_t3.txt", str(build_seed_t0_t3()))


def test_seed_t0_t3_matches_seed_lines() -> None:
    text = str(build_seed_t0_t3())
    assert "  Split: iS0{2} by factor 128 -> iS2{1}, iS3{128}\n" in text
    ours = _blocks(text)
    seed = _blocks(SEED_004_KERNEL)
    assert canonical(ours["T0"]) == canonical(seed["T0"])
    assert canonical(ours["T1"]) == canonical(seed["T3"])
    seed_math = SEED_004_KERNEL.splitlines()[1:3]
    assert canonical("\n".join(text.splitlines()[1:3])) == canonical("\n".join(seed_math))
    assert " contiguity: t\n" in text
    assert " loop domain : (iblockIdx.x8{1}, iUS9{1}, ithreadIdx.x7{128})\n" in text


def build_seed_004_kernel() -> fl.Fusion:
    """All six tensors of seed 004 with the seed's names, caches and (buggy) schedule.

    T1's three DIDx loop axes are set directly: the schedule primitive rightly
    refuses them, but the printer must still be able to show the seed's state.
    """
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(2)
        t0 = fl.tensor([2])
        t1 = fl.tensor([1])
        t2 = TensorView(fusion, [IterDomain(2)])
        t3 = fl.set(t0)
        t4 = fl.set(t1)
        t5 = fl.add(t3, t4)
        LoadStoreOp(t2, t5, cache_op="Streaming")
        t3.definition.cache_op = "Streaming"
        t4.definition.cache_op = "AllLevels"
        fusion.add_input(t0)
        fusion.add_input(t1)
        fusion.add_output(t2)
        for tv in (t0, t1, t2, t3, t4, t5):
            tv.set_device_mesh(mesh)
        t1.axis(0).parallelize(P.DIDx)
        t4.logical[0].parallel_type = P.DIDx
        for tv in (t2, t5, t4, t1, t3, t0):
            _split_128_then_1(tv)
        for tv in (t1, t4):  # nvFuser's split outputs inherit the input's parallel type
            for tr in tv.domain.transforms:
                for p in tr.outputs:
                    Axis(tv, p).parallel_type = P.DIDx
        for tv in (t3, t4, t5, t2):
            _parallelize_bid_us_tid(tv)
        t3.compute_at_pos, t5.compute_at_pos, t2.compute_at_pos = 2, 3, 2
        t5.produce_pos, t2.produce_pos = 2, 3
    return fusion


def test_seed_004_whole_kernel_has_the_seed_structure() -> None:
    assert canonical(str(build_seed_004_kernel())) == canonical(SEED_004_KERNEL)


# -- every op kind ---------------------------------------------------------------
def _unary(fusion: fl.Fusion) -> Built:
    x = fl.tensor([4, 3])
    return [x], [fl.tanh(fl.neg(x))]


def _binary_scalar(fusion: fl.Fusion) -> Built:
    x = fl.tensor([4])
    return [x], [fl.mul(fl.add(x, 2.5), 3), fl.maximum(x, 0.0)]


def _binary_broadcast(fusion: fl.Fusion) -> Built:
    x, y = fl.tensor([2]), fl.tensor([1])
    return [x, y], [fl.sub(x, y)]


def _broadcast(fusion: fl.Fusion) -> Built:
    x = fl.tensor([3])
    return [x], [fl.broadcast(x, [True, False, True])]


def _sum(fusion: fl.Fusion) -> Built:
    x = fl.tensor([4, 8])
    return [x], [fl.sum(x, 1)]


def _max(fusion: fl.Fusion) -> Built:
    x = fl.tensor([4, 8])
    return [x], [fl.max(x, [0])]


def _expand(fusion: fl.Fusion) -> Built:
    x = fl.tensor([1, 5])
    return [x], [fl.expand(x, [3, -1])]


def _reshape(fusion: fl.Fusion) -> Built:
    x = fl.tensor([2, 6])
    return [x], [fl.reshape(x, [3, -1])]


def _linear(fusion: fl.Fusion) -> Built:
    x, w, b = fl.tensor([4, 8]), fl.tensor([16, 8]), fl.tensor([16])
    return [x, w, b], [fl.linear(x, w, b)]


def _matmul(fusion: fl.Fusion) -> Built:
    a, b = fl.tensor([4, 8]), fl.tensor([8, 2])
    return [a, b], [fl.matmul(a, b)]


def _outer_split(fusion: fl.Fusion) -> Built:
    x = fl.tensor([8, 4])
    y = fl.exp(x)
    y.outer_split(0, 2)
    y.axis(0).parallelize(P.BIDx)
    return [x], [y]


def _merge(fusion: fl.Fusion) -> Built:
    x = fl.tensor([8, 4])
    y = fl.relu(x)
    y.merge(0)
    y.split(0, 16)
    y.axis(1).parallelize(P.TIDx)
    return [x], [y]


OP_KINDS: dict[str, Callable[[fl.Fusion], Built]] = {
    "unary": _unary,
    "binary_scalar": _binary_scalar,
    "binary_broadcast": _binary_broadcast,
    "broadcast": _broadcast,
    "sum": _sum,
    "max": _max,
    "expand": _expand,
    "reshape": _reshape,
    "linear": _linear,
    "matmul": _matmul,
    "outer_split": _outer_split,
    "merge": _merge,
}


def build_op_fusion(kind: str) -> fl.Fusion:
    """A small fusion exercising one op kind (or one transform)."""
    with fl.Fusion() as fusion:
        inputs, outputs = OP_KINDS[kind](fusion)
        for tv in inputs:
            fusion.add_input(tv)
        for tv in outputs:
            fusion.add_output(tv)
    return fusion


@pytest.mark.parametrize("kind", sorted(OP_KINDS))
def test_op_kind_golden(kind: str, golden) -> None:
    fusion = build_op_fusion(kind)
    fl.verify(fusion)
    golden(f"ops/{kind}.txt", fusion.print_math() + "\n" + fusion.print_transforms())


def test_kernel_is_math_then_transforms() -> None:
    fusion = build_op_fusion("sum")
    math_body = fusion.print_math().split("\n", 1)[1].rsplit("} // %kernel_math", 1)[0]
    assert str(fusion) == (
        "%kernel {\n" + math_body + "\n" + fusion.print_transforms() + "} // %kernel\n"
    )


def test_reduction_line() -> None:
    text = build_op_fusion("sum").print_math()
    assert "op = add, initial value = float(0), allreduce = false )" in text
    assert "rS" in text


def test_transform_lines() -> None:
    assert (
        "  Outer split: iS2{8} by factor 2 -> iblockIdx.x4{2}, iS5{4}\n"
        in build_op_fusion("outer_split").print_transforms()
    )
    assert "  Merge: iS2{8} and iS3{4} -> iS4{32}\n" in build_op_fusion("merge").print_transforms()


# -- deterministic numbering -----------------------------------------------------
def _interleaved(schedule_early: bool) -> fl.Fusion:
    """The same fusion and schedule, with schedule calls placed differently."""
    with fl.Fusion() as fusion:
        x, y = fl.tensor([64, 32]), fl.tensor([1, 32])
        fusion.add_input(x)
        fusion.add_input(y)
        if schedule_early:
            x.split(1, 8)
            x.axis(2).parallelize(P.TIDx)
        z = fl.add(x, y)
        if schedule_early:
            z.merge(0)
        w = fl.sum(z, [0])
        if not schedule_early:
            z.merge(0)
            x.split(1, 8)
        w.split(0, 4)
        fusion.add_output(w)
        if not schedule_early:
            x.axis(2).parallelize(P.TIDx)
    return fusion


def test_numbering_does_not_depend_on_when_schedules_ran() -> None:
    assert str(_interleaved(True)) == str(_interleaved(False))


def test_printing_is_pure() -> None:
    fusion = build_seed_t0_t3()
    assert str(fusion) == str(fusion)
    assert fusion.print_math() == fusion.print_math()
