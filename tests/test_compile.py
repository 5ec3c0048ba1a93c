"""Compiling kernels: the system compiler, the disk cache, errors, and choosing the path."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pointwise_cases import build
from three_way import HAVE_COMPILER, bits_differ

import fuserlite as fl
import fuserlite.kernel.compile as compile_module
import fuserlite.runtime.compute as compute
from fuserlite.cli import main
from fuserlite.kernel.compile import KernelCompiler, default_cache_dir
from fuserlite.kernel.cpu import PRELUDE, CpuFunction, cpu_function

needs_compiler = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on the PATH")

TWICE = 'extern "C" void fl_twice(const float* x, float* y) { y[0] = 2 * x[0]; }\n'


def call_twice(fn, value: float) -> float:
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    x, y = np.array([value], np.float32), np.zeros(1, np.float32)
    fn(x.ctypes.data, y.ctypes.data)
    return float(y[0])


@needs_compiler
def test_a_library_is_compiled_once_then_loaded_from_the_cache(tmp_path, monkeypatch) -> None:
    first = KernelCompiler(cache_dir=tmp_path)
    fn = first.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"]
    assert call_twice(fn, 1.5) == 3.0 and first.compiles == 1
    assert first.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"] is fn  # loaded: kept
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".cpp", ".sha256", ".so"]

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"a warm cache launched {args[0]}")

    monkeypatch.setattr(compile_module.subprocess, "Popen", no_compiler)
    second = KernelCompiler(cache_dir=tmp_path)  # another process, as far as it knows
    assert call_twice(second.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"], 4.0) == 8.0
    assert second.compiles == 0


@needs_compiler
def test_other_flags_build_another_library(tmp_path) -> None:
    plain = KernelCompiler(cache_dir=tmp_path)
    plain.functions(PRELUDE, {"fl_twice": TWICE})
    other = KernelCompiler(cache_dir=tmp_path, extra_flags=["-DFL_UNUSED=1"])
    other.functions(PRELUDE, {"fl_twice": TWICE})
    assert other.compiles == 1 and len(list(tmp_path.glob("*.so"))) == 2
    assert "-DFL_UNUSED=1" in other.toolchain.flags


def test_the_cache_directory_is_an_argument(tmp_path) -> None:
    assert default_cache_dir() == Path.home() / ".cache" / "fuserlite" / "kernels"
    if HAVE_COMPILER:
        assert KernelCompiler(cache_dir=tmp_path / "mine").cache_dir == tmp_path / "mine"


@needs_compiler
def test_an_unwritable_cache_directory_is_a_clear_error(tmp_path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(
        fl.ExecutionError, match=r"cannot write compiled kernels to .*file.*--cache-dir"
    ):
        KernelCompiler(cache_dir=blocked / "kernels").functions(PRELUDE, {"fl_twice": TWICE})


@needs_compiler
def test_a_compile_error_names_the_function_and_abbreviates_the_message(tmp_path) -> None:
    wrong = "".join(f"  y[0] = no_such_name_{k};\n" for k in range(30))
    broken = 'extern "C" void fl_broken(float* y) {\n' + wrong + "}\n"
    compiler = KernelCompiler(cache_dir=tmp_path)
    labels = {"fl_broken": "scheduled kernel 3 (writes T9)", "fl_twice": "the good one"}
    with pytest.raises(fl.ExecutionError) as info:
        compiler.functions(PRELUDE, {"fl_twice": TWICE, "fl_broken": broken}, labels)
    message = str(info.value)
    assert message.startswith(f"the C++ compiler ({compiler.compiler}) rejected scheduled kernel 3")
    assert "no_such_name_0" in message and "more lines)" in message
    assert len(message.splitlines()) <= 12 and "compute='interpret'" in message
    assert not list(tmp_path.glob("*.so"))  # nothing half-built is left to load


@needs_compiler
def test_the_executor_never_falls_back_when_a_kernel_does_not_compile(
    monkeypatch, tmp_path
) -> None:
    f = build([[300]], lambda a: [a * 3.0 + 1.0])

    def broken(kernel, symbol=None):
        symbol, source, parts, parallel = cpu_function(kernel, symbol)
        wrong = source.replace("const bool", "const nonsense", 1)
        return CpuFunction(symbol, wrong, parts, parallel)

    monkeypatch.setattr(compute, "cpu_function", broken)
    ex = fl.FusionExecutor(f, compute=KernelCompiler(cache_dir=tmp_path))  # nothing cached
    with pytest.raises(fl.ExecutionError, match=r"rejected scheduled kernel 0 \(writes T\d+\)"):
        ex.run(fl.random_inputs(f))


def fake_compiler(tmp_path: Path, refuses: str) -> Path:
    """A compiler that is the real one, except that it fails on any argument `refuses`."""
    script = tmp_path / "fake-c++"
    real = compile_module.find_compiler()
    script.write_text(
        f'#!/bin/sh\nfor a in "$@"; do case "$a" in {refuses}) exit 1;; esac; done\n'
        f'exec {real} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@needs_compiler
def test_without_openmp_the_same_source_runs_on_one_thread(tmp_path) -> None:
    compiler = KernelCompiler(str(fake_compiler(tmp_path, "-fopenmp")), cache_dir=tmp_path)
    assert (
        "openmp" not in compiler.toolchain.features and "-fopenmp" not in compiler.toolchain.flags
    )
    f = build([[512, 300], [300]], lambda a, b: [a * b - 1.5])
    inputs = fl.random_inputs(f, 1)
    (got,) = fl.FusionExecutor(f, compute=compiler).run(inputs)
    assert compiler.compiles == 1
    (want,) = fl.FusionExecutor(f, compute="interpret").run(inputs)
    assert bits_differ(got, want) is None


def built_commands(monkeypatch) -> list[list[str]]:
    """The compiler command lines run from now on (the probe's too)."""
    commands: list[list[str]] = []
    real = compile_module._run

    def recording(argv, building=None):
        commands.append(list(argv))
        return real(argv, building)

    monkeypatch.setattr(compile_module, "_run", recording)
    return commands


PARALLEL = (
    'extern "C" void fl_par(float* y) {\n'
    "#pragma omp parallel for\n"
    "  for (int i = 0; i < 64; ++i) y[i] = 2 * y[i];\n}\n"
)


@needs_compiler
def test_only_a_unit_with_a_parallel_loop_is_built_with_openmp(tmp_path, monkeypatch) -> None:
    assert compile_module.uses_openmp(PARALLEL) and compile_module.uses_openmp(
        "  #  pragma omp for"
    )
    assert not compile_module.uses_openmp(PRELUDE + TWICE)  # the prelude's _OPENMP is no pragma
    commands = built_commands(monkeypatch)
    compiler = KernelCompiler(cache_dir=tmp_path)
    assert call_twice(compiler.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"], 2.5) == 5.0
    fn = compiler.functions(PRELUDE, {"fl_par": PARALLEL})["fl_par"]
    fn.argtypes = [ctypes.c_void_p]
    y = np.arange(64, dtype=np.float32)
    fn(y.ctypes.data)
    np.testing.assert_array_equal(y, 2 * np.arange(64, dtype=np.float32))
    plain, parallel = commands[-2:]
    assert "-fopenmp" not in plain and "-lgomp" not in plain
    if "openmp" in compiler.toolchain.features:
        assert "-fopenmp" in parallel and "-lgomp" in parallel
    for kernel in (plain, parallel):  # the probe's check, never a kernel's: see the next test
        assert "-Wl,-z,defs" not in kernel and "-lc" not in kernel
    if "no-undefined" in compiler.toolchain.features:
        assert "-Wl,-z,defs" in compiler.toolchain.command(Path("a.cpp"), Path("a.so"), probe=True)


@needs_compiler
def test_a_library_with_a_symbol_nothing_defines_fails_to_load_and_is_not_cached(
    tmp_path,
) -> None:
    missing = 'extern "C" void fl_nowhere(float*);\nextern "C" void fl_calls(float* y) { fl_nowhere(y); }\n'
    compiler = KernelCompiler(cache_dir=tmp_path)
    with pytest.raises(
        fl.ExecutionError, match=r"cannot load the kernels just compiled.*fl_nowhere"
    ):
        compiler.functions(PRELUDE, {"fl_calls": missing})
    assert compiler.compiles == 1 and not list(tmp_path.glob("*.so*"))


@needs_compiler
def test_a_long_build_says_so_on_stderr(tmp_path, monkeypatch, capsys) -> None:
    slow = tmp_path / "slow-c++"
    slow.write_text(f'#!/bin/sh\nsleep 0.5\nexec {compile_module.find_compiler()} "$@"\n')
    slow.chmod(0o700)
    compiler = KernelCompiler(str(slow), cache_dir=tmp_path)
    _ = compiler.toolchain  # the probe says nothing
    monkeypatch.setattr(compile_module, "BUILD_NOTE_S", 0.2)
    monkeypatch.setattr(compile_module, "BUILD_NOTE_EVERY_S", 0.2)
    compiler.functions(PRELUDE, {"fl_twice": TWICE})
    lines = capsys.readouterr().err.splitlines()
    assert 1 <= len(lines) <= 4
    assert all(
        re.fullmatch(
            r"fuserlite: compiling 1 kernel \(\d+ KB of C\+\+\) with "
            r"slow-c\+\+: \d+ s so far",
            line,
        )
        for line in lines
    ), lines


@pytest.fixture
def fresh_defaults():
    """The process-wide default compiler and compute path, found again in this test."""
    compute.default_compiler.cache_clear()
    compute.default_compute.cache_clear()
    yield
    compute.default_compiler.cache_clear()
    compute.default_compute.cache_clear()


def test_without_a_compiler_kernels_run_interpreted_after_one_note(
    monkeypatch, capsys, fresh_defaults
) -> None:
    monkeypatch.setattr(compile_module, "CANDIDATES", ("no-such-c++-compiler",))
    f = build([[10]], lambda a: [a + 1.0])
    inputs = fl.random_inputs(f)
    for _ in range(2):
        ex = fl.FusionExecutor(f)
        fl.validate(f, inputs, ex.run(inputs))
        assert ex.compute == "interpret"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no C++ compiler" in err and "compute='interpret'" in err
    with pytest.raises(fl.ExecutionError, match="no C.. compiler is on the PATH.*interpret"):
        fl.FusionExecutor(f, compute="compiled")
    with pytest.raises(fl.ExecutionError, match="'no-such-c' is not on the PATH"):
        KernelCompiler("no-such-c")


def test_compute_and_schedule_arguments() -> None:
    f = build([[10]], lambda a: [a + 1.0])
    assert fl.FusionExecutor(f, schedule=False).compute == "numpy"
    assert fl.FusionExecutor(f, compute="numpy").schedule is False
    with pytest.raises(fl.ExecutionError, match="compute must be one of compiled, interpret"):
        fl.FusionExecutor(f, compute="gpu")
    with pytest.raises(fl.ExecutionError, match="schedule=False means compute='numpy'"):
        fl.FusionExecutor(f, schedule=False, compute="interpret")


@needs_compiler
def test_the_cli_compute_flag(capsys, tmp_path) -> None:
    fus = Path(__file__).resolve().parents[1] / "examples" / "bias_gelu.fus"
    for flags in (["--compute", "compiled"], ["--compute", "interpret"], ["--no-schedule"]):
        assert main(["run", str(fus), *flags]) == 0
        assert "validation: ok" in capsys.readouterr().out
    assert main(["run", str(fus), "--no-schedule", "--compute", "compiled"]) == 1
    assert "not allowed with argument --no-schedule" in capsys.readouterr().err
    assert main(["run", str(fus), "--cache-dir", str(tmp_path)]) == 0
    assert "validation: ok" in capsys.readouterr().out and list(tmp_path.glob("*.so"))
    assert main(["run", str(fus), "--cache-dir", str(tmp_path), "--compute", "numpy"]) == 1
    assert "--cache-dir is where compiled kernels are kept" in capsys.readouterr().err
    assert main(["codegen", str(fus), "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "struct __half" in out and 'extern "C" void fl_' in out and "__global__" not in out


@needs_compiler
def test_mpi_ranks_compiling_at_once_share_one_cache(tmp_path) -> None:
    """Processes that build the same library at the same time each load a whole file."""
    script = (
        "import sys, fuserlite as fl\n"
        "from fuserlite.kernel.compile import KernelCompiler\n"
        "from fuserlite.kernel.cpu import PRELUDE\n"
        f"fn = KernelCompiler(cache_dir={str(tmp_path)!r}).functions(PRELUDE, {{'fl_twice': {TWICE!r}}})\n"
        "print('ok')\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, env=os.environ.copy()
        )
        for _ in range(4)
    ]
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == [b"ok"] * 4
    (library,) = tmp_path.glob("*.so")
    record = (tmp_path / (library.name + ".sha256")).read_text().strip()
    assert record == f"{hashlib.sha256(library.read_bytes()).hexdigest()} {library.stem}"
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".cpp", ".sha256", ".so"]


@needs_compiler
def test_a_kernel_of_more_buffers_than_ctypes_passes_as_arguments(tmp_path) -> None:
    """ctypes calls a function of at most 1024 arguments: a kernel of 1100 outputs was a raw
    ArgumentError after its compile; its entry point takes one array of addresses."""
    f = build([[4]], lambda a: [a + float(k) for k in range(1100)])
    quick = KernelCompiler(cache_dir=tmp_path, extra_flags=("-O0",))  # 1100 stores compile slowly
    inputs = fl.random_inputs(f)
    outputs = fl.FusionExecutor(f, compute=quick).run(inputs)
    assert quick.compiles == 1
    want = fl.evaluate(f, inputs)
    assert [bits_differ(got, ref) for got, ref in zip(outputs, want)] == [None] * 1100
