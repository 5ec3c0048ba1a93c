"""A kernel's function is named by its structure (fuserlite.kernel.signature), and a warm
load finds its library by that name without generating source: so the name must change
with everything the generated source depends on, and only with what it may."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest
import random_pointwise
import random_sharded
from pointwise_cases import build
from test_codegen import all_test_fusions, scheduled
from three_way import HAVE_COMPILER

import fuserlite as fl
import fuserlite.kernel.signature as signature_module
import fuserlite.runtime.compute as compute
from fuserlite.kernel import cpu
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.kernel.cpu import cpu_function, prelude
from fuserlite.kernel.signature import signature, structural_symbol
from fuserlite.program.program import Kernel
from fuserlite.runtime.compute import CompiledKernels
from fuserlite.schedule.shard import shard_axis

needs_compiler = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on the PATH")


def program_kernels(fusion: fl.Fusion, pipeline: fl.Pipeline | None = None) -> list[Kernel]:
    """The scheduled kernels of the fusion's lowered program."""
    ex = fl.FusionExecutor(fusion, compute="interpret", pipeline=pipeline)
    return [k for k in ex.program.kernels if k.scheduled]


def chain(
    shape=(1000,),
    dtype="float32",
    op: Callable = fl.add,
    scalar: object = 1.0,
    devices: int | None = None,
    padding: int = 0,
    seed: int = 5,
) -> fl.Fusion:
    """x -> tanh(op(x, scalar) * 0.5) + rand_like(x, seed): each argument one ingredient."""
    with fl.Fusion() as fusion:
        for _ in range(padding):  # tensors made first: the chain's are numbered after them
            fl.tensor([2])
        x = fl.tensor(list(shape), dtype, name="x")
        fusion.add_input(x)
        if devices is not None:
            shard_axis(x, 0, fl.DeviceMesh.for_num_devices(devices))
        fusion.add_output(fl.tanh(op(x, scalar) * 0.5) + fl.rand_like(x, seed=seed))
    return fusion


def the_kernel(fusion: fl.Fusion) -> Kernel:
    (kernel,) = program_kernels(fusion)
    return kernel


def test_equal_signatures_generate_equal_source() -> None:
    """Over the test suite's kernels (the codegen cases, their programs, reductions,
    random numbers, several meshes), any two of one name have one source text."""
    kernels = list(all_test_fusions().values())
    kernels += [scheduled(build([[1000]], lambda a: [fl.neg(a * 2.0 + 1.0)])) for _ in range(2)]
    for fusion in (chain(), chain(), chain(devices=2), chain(devices=4), chain(dtype="float16")):
        kernels += program_kernels(fusion)
    with fl.Fusion() as f:
        x = fl.tensor([64, 48], name="x")
        f.add_input(x)
        f.add_output(fl.sum(fl.exp(x), [1]))
        f.add_output(fl.max(x, [0]))
    kernels += program_kernels(f)
    for seed in range(24):  # random fusions, each built twice (its kernels alike)
        for _ in range(2):
            case = random_pointwise.build_case(seed)
            pipeline = random_pointwise.pipeline_for(case.block_size, case.vectorize)
            kernels += program_kernels(case.fusion, pipeline)
            kernels += program_kernels(random_sharded.build_case(seed).fusion)
    by_symbol: dict[str, set[str]] = {}
    for kernel in kernels:
        symbol = structural_symbol(kernel)
        assert symbol is not None, kernel
        by_symbol.setdefault(symbol, set()).add(cpu_function(kernel).source)
    assert all(len(sources) == 1 for sources in by_symbol.values())
    assert len(by_symbol) < len(kernels)  # some kernels are equal: one name each
    assert len(by_symbol) > 100


BASE = {}
VARIANTS = {
    "shape": {"shape": (1001,)},
    "rank": {"shape": (10, 100)},
    "dtype": {"dtype": "float64"},
    "op": {"op": fl.sub},
    "scalar value": {"scalar": 2.0},
    "attribute (seed)": {"seed": 6},
    "mesh and sharding": {"devices": 2},
    "mesh size": {"devices": 4},
    "tensor numbers": {"padding": 1},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_ingredient_changes_the_source_and_the_name(variant: str) -> None:
    base, other = the_kernel(chain(**BASE)), the_kernel(chain(**VARIANTS[variant]))
    assert cpu_function(base).symbol != cpu_function(other).symbol  # named by their text
    assert structural_symbol(base) != structural_symbol(other)
    named = cpu_function(base, structural_symbol(base))
    assert named.symbol == structural_symbol(base) and named.source == cpu_function(
        base
    ).source.replace(cpu_function(base).symbol, named.symbol)


def test_the_schedule_changes_the_name() -> None:
    """The same fusion scheduled with another block size, vectorized, or inlined otherwise."""

    def make(**options) -> Kernel:
        return scheduled(build([[1024]], lambda a: [fl.exp(a) * 2.0]), **options)

    base, blocks, vector = make(), make(block_size=256), make(vectorize=True)
    names = {structural_symbol(k) for k in (base, blocks, vector)}
    assert len(names) == 3
    assert len({cpu_function(k).source for k in (base, blocks, vector)}) == 3
    inlined = make()
    t = next(e.output for e in inlined.exprs if e.op_name == "exp")
    assert t.compute_at_pos > 0
    before = cpu_function(inlined).source
    t.compute_at_pos = 0  # stored instead of kept in a register
    assert structural_symbol(inlined) != structural_symbol(base)
    assert cpu_function(inlined).source != before


def test_the_generators_parameters_and_version_change_the_name(monkeypatch, tmp_path) -> None:
    kernel = the_kernel(chain())
    name = structural_symbol(kernel)
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 1)  # a parallel loop, now
    assert structural_symbol(kernel) != name
    assert "omp parallel" in cpu_function(kernel).source
    monkeypatch.undo()
    assert structural_symbol(kernel) == name
    # A copy of the package, its files' times kept, is the same generator; any edit of a
    # file of it (its size, or its time) is another.
    package = tmp_path / "fuserlite"
    shutil.copytree(signature_module.PACKAGE, package, ignore=shutil.ignore_patterns("*.pyc"))
    monkeypatch.setattr(signature_module, "PACKAGE", package)
    signature_module.generator_version.cache_clear()
    try:
        assert structural_symbol(kernel) == name
        source = package / "kernel" / "cuda.py"
        info = source.stat()
        source.write_text(source.read_text() + "# an edit\n")
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns))  # at the same time
        signature_module.generator_version.cache_clear()
        edited = structural_symbol(kernel)
        assert edited != name
        source.write_text(source.read_text().replace("# an edit", "# a tide"))  # same size
        signature_module.generator_version.cache_clear()
        assert structural_symbol(kernel) not in (name, edited)
    finally:
        signature_module.generator_version.cache_clear()


def test_compiler_flags_are_in_the_librarys_key(tmp_path) -> None:
    plain, other = KernelCompiler(cache_dir=tmp_path), KernelCompiler(extra_flags=["-O3"])
    assert plain.key("unit") != other.key("unit")


def test_what_the_signature_cannot_vouch_for_is_named_by_its_source(monkeypatch) -> None:
    kernel = the_kernel(chain())
    e = next(e for e in kernel.exprs if e.op_name == "rand_like")
    object.__setattr__(e, "attrs", {**e.attrs, "seed": object()})  # an unknown attribute
    assert signature(kernel) is None and structural_symbol(kernel) is None
    object.__setattr__(e, "attrs", {**e.attrs, "seed": 5})
    assert structural_symbol(kernel) is not None


@needs_compiler
def test_structurally_equal_kernels_of_two_fusions_share_one_entry(tmp_path, monkeypatch) -> None:
    """A new process (a new compiler on the directory) with a fusion built again loads
    the first one's library by name: no source generated, no compiler launched; and
    its numbers are right."""
    first, second = chain(devices=2), chain(devices=2)
    built = KernelCompiler(cache_dir=tmp_path)
    kernels = program_kernels(first)
    CompiledKernels(kernels, built).prepare()
    assert built.compiles == 1
    entries = sorted(p.name for p in tmp_path.glob("*.so"))

    def no_source(*args, **kwargs):
        raise AssertionError("generated source on a warm load")

    monkeypatch.setattr(compute, "cpu_function", no_source)
    again = KernelCompiler(cache_dir=tmp_path)
    ex = fl.FusionExecutor(second, compute=again)
    inputs = fl.random_inputs(second, seed=1)
    fl.validate(second, inputs, ex.run(inputs))
    assert again.compiles == 0
    assert sorted(p.name for p in tmp_path.glob("*.so")) == entries
    others = program_kernels(second)
    assert [structural_symbol(k) for k in others] == [structural_symbol(k) for k in kernels]
    assert prelude(others) == prelude(kernels)
