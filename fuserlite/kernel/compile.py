"""Compile C++ with the system compiler, cache the shared object on disk, load it with ctypes.

    compiler = KernelCompiler()      # c++, g++ or clang++ from the PATH
    fns = compiler.functions(PRELUDE, {"fl_ab12": source}, {"fl_ab12": "kernel 0 (T4)"})
    fns["fl_ab12"](pointer, pointer)

One `functions` call compiles every function it is given that this compiler has
not loaded yet into one shared object: one compiler launch, however many
kernels. The file is named by a hash of its translation unit, the compiler's
identity, the CPU and the flags, in the cache directory (the `cache_dir`
argument, else ~/.cache/fuserlite/kernels), next to its source. A later process with the same
kernels loads that file and launches no compiler. Files are written under a
temporary name and renamed, so processes compiling at once (MPI ranks) never
load a partial file.

The compiler is probed once per CPU (the result is cached beside the
kernels) for the OPTIONAL_FLAGS: the loop vectorizer, -march=native, -fopenmp
and glibc's vector math library libmvec (FL_VECTOR_MATH); without them the
same source builds for one thread with scalar math calls. The flags keep IEEE
arithmetic exact: no fast-math, no contraction into fused multiply-adds,
wrapping integer overflow as numpy's. Nothing is read from the environment:
the compiler and the directory are arguments (`fuserlite run --cache-dir`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fuserlite.ir.errors import ExecutionError

CANDIDATES = ("c++", "g++", "clang++")
# -O2 with the loop vectorizer's -O3 cost model (the "vectorize" flags below) runs these
# kernels as fast as -O3. (-O1 with the vectorizer compiled faster, but GCC 12 built wrong
# code with it and -march=native: tests/test_schedule_adversarial.py seed 1168.)
FLAGS = (
    "-O2",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-pipe",
    "-w",
    "-fno-math-errno",  # lets sqrt be one instruction and math calls vectorize; values unchanged
    "-ffp-contract=off",  # a * b + c rounds twice, as numpy computes it
    "-fwrapv",  # integer overflow wraps, as numpy's does
)
# Probed, each kept if the compiler takes it: (name, flags before the source, after it).
# The libraries are built for this CPU (-march=native: AVX2 or AVX-512 where there is one),
# so the CPU is part of every cache key.
OPTIONAL_FLAGS = (
    ("no-undefined", ("-Wl,-z,defs",), ()),  # a missing symbol fails the link, not a call
    ("vectorize", ("-ftree-vectorize", "-fvect-cost-model=dynamic"), ()),
    # GCC 12.2's tree loop-invariant motion with -march=native (AVX-512) built a kernel whose
    # 128 threads all stored one element (a one-element output) wrongly: minimum(relu(x), x)
    # - 1.5 came out 0 for x < 0 (tests/test_cpu_kernels.py). Such kernels now run one
    # thread (fuserlite.schedule.grid.kernel_grid), and that one builds right with the
    # motion on; the flag stays because a kernel that also writes a wider tensor still has
    # every thread store its one-element outputs. Without it the loops vectorize as before
    # and run as fast (benchmarks/chain.py); the RTL invariant motion still runs.
    ("no-tree-loop-im", ("-fno-tree-loop-im",), ()),
    ("native", ("-march=native",), ()),
    ("openmp", ("-fopenmp",), ()),
    ("vector-math", ("-DFL_VECTOR_MATH",), ("-lmvec",)),
)
COMPILE_TIMEOUT_S = 600
MESSAGE_LINES = 8  # of the compiler's output, in an error


def find_compiler() -> str | None:
    """The C++ compiler to use by default: the first of c++, g++, clang++ on the PATH."""
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


def default_cache_dir() -> Path:
    """Where kernel libraries are kept unless told otherwise: ~/.cache/fuserlite/kernels
    (for a user without a home directory, fuserlite-kernels in the temporary directory)."""
    try:
        return Path.home() / ".cache" / "fuserlite" / "kernels"
    except RuntimeError:
        return Path(tempfile.gettempdir()) / "fuserlite-kernels"


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """A compiler, what it is, and the flags every kernel library is built with."""

    compiler: str
    version: str  # the first line of `compiler --version`
    cpu: str  # cpu_identity(): the libraries are built for it
    flags: tuple[str, ...]  # before the source
    libraries: tuple[str, ...]  # after it
    features: tuple[str, ...]  # the OPTIONAL_FLAGS names the compiler took

    def command(self, source: Path, output: Path) -> list[str]:
        """The compiler's command line that builds `source` into the shared object `output`."""
        return [self.compiler, *self.flags, str(source), *self.libraries, "-o", str(output)]


# One source exercises every optional flag: OpenMP, and each math call the prelude
# declares, vectorized through glibc's libmvec (for the CPU's widest vectors) exactly
# when FL_VECTOR_MATH is defined, as in fuserlite.kernel.cpu.PRELUDE.
_PROBE = """#ifdef FL_VECTOR_MATH
#define FL_SIMD __attribute__((simd("notinbranch")))
#else
#define FL_SIMD
#endif
""" + "".join(
    f'extern "C" {t} {f}({t}) FL_SIMD;\n'
    f'extern "C" void probe_{f}({t}* x, int n) {{\n#pragma omp parallel for\n'
    f"  for (int i = 0; i < n; ++i) x[i] = {f}(x[i]);\n}}\n"
    for t in ("float", "double")
    for f in (("expf", "logf", "tanhf") if t == "float" else ("exp", "log", "tanh"))
)


def cpu_identity() -> str:
    """What the CPU is, for cache keys: its model and feature flags where Linux says."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    lines = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    return _digest(platform.machine(), platform.processor(), *sorted(set(lines)))[:16]


class KernelCompiler:
    """Builds and loads C++ functions; keeps what it loaded (one per process is enough)."""

    def __init__(
        self,
        compiler: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        extra_flags: Sequence[str] = (),
    ) -> None:
        """`compiler`: a name on the PATH or a path (default: find_compiler()); `cache_dir`:
        where libraries are kept (default: default_cache_dir()); `extra_flags`: added to
        every compile after the others (e.g. -O3), and part of the cache key."""
        found = shutil.which(compiler) if compiler is not None else find_compiler()
        if found is None:
            what = f"{compiler!r} is not" if compiler is not None else "no C++ compiler is"
            raise ExecutionError(
                f"{what} on the PATH (looked for {', '.join(CANDIDATES)}); install one, pass "
                "KernelCompiler(compiler=...), or run kernels interpreted (compute='interpret')"
            )
        self.compiler = os.path.abspath(found)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.extra_flags = tuple(extra_flags)
        self._toolchain: Toolchain | None = None
        self._loaded: dict[str, Callable] = {}
        self._libraries: list[ctypes.CDLL] = []  # kept open while their functions are used
        self.compiles = 0  # compiler launches for kernels (not probes), for tests and benchmarks

    @property
    def toolchain(self) -> Toolchain:
        """The compiler's identity and flags, probed at first use (cached on disk)."""
        if self._toolchain is None:
            self._toolchain = self._probe()
        return self._toolchain

    def functions(
        self,
        prelude: str,
        sources: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Callable]:
        """symbol -> loaded function for each `sources` entry (symbol -> definition);
        those not loaded yet are compiled together, after `prelude`, or loaded from the
        cache. `labels` name the functions in errors (symbol -> "kernel 2 (T5)")."""
        missing = {s: src for s, src in sources.items() if s not in self._loaded}
        if missing:
            self._load(prelude, missing, labels or {})
        return {s: self._loaded[s] for s in sources}

    # -- building ---------------------------------------------------------------
    def _load(self, prelude: str, sources: dict[str, str], labels: Mapping[str, str]) -> None:
        tc = self.toolchain
        unit = prelude + "".join("\n" + sources[s] for s in sorted(sources))
        key = _digest(tc.compiler, tc.version, tc.cpu, *tc.flags, *tc.libraries, unit)[:32]
        library = self.cache_dir / f"{key}.so"
        if not library.exists():
            self._build(unit, library, prelude, sources, labels)
        try:
            lib = ctypes.CDLL(str(library))
        except OSError as exc:
            raise ExecutionError(f"cannot load the compiled kernels {library}: {exc}") from None
        self._libraries.append(lib)
        for symbol in sources:
            self._loaded[symbol] = lib[symbol]

    def _build(
        self,
        unit: str,
        library: Path,
        prelude: str,
        sources: dict[str, str],
        labels: Mapping[str, str],
    ) -> None:
        source = library.with_suffix(".cpp")
        self._write(source, unit)
        with self._scratch("build-") as tmp:
            out = Path(tmp) / library.name
            self.compiles += 1
            proc = self._run(self.toolchain.command(source, out))
            if proc.returncode != 0:
                where = _culprit(proc.stdout + proc.stderr, source.name, prelude, sources, labels)
                raise ExecutionError(
                    f"the C++ compiler ({self.compiler}) rejected {where}:\n"
                    f"{_abbreviate(proc.stdout + proc.stderr)}\n(source: {source}; "
                    "compute='interpret' runs the kernels without compiling)"
                )
            os.replace(out, library)

    def _write(self, path: Path, text: str) -> None:
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, text.encode())
        except OSError as exc:
            raise self._unwritable(exc) from None

    def _scratch(self, prefix: str) -> tempfile.TemporaryDirectory:
        """A temporary directory in the cache directory (renames from it are atomic)."""
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            return tempfile.TemporaryDirectory(dir=self.cache_dir, prefix=prefix)
        except OSError as exc:
            raise self._unwritable(exc) from None

    def _unwritable(self, exc: OSError) -> ExecutionError:
        return ExecutionError(
            f"cannot write compiled kernels to {self.cache_dir} ({exc.strerror or exc}); pass "
            "another directory (KernelCompiler(cache_dir=...), fuserlite run --cache-dir DIR) "
            "or run kernels interpreted (compute='interpret')"
        )

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ExecutionError(f"could not run the C++ compiler {argv[0]}: {exc}") from None

    def _probe(self) -> Toolchain:
        """Which OPTIONAL_FLAGS the compiler takes; remembered per compiler file and CPU."""
        stat = os.stat(self.compiler)
        what = (*FLAGS, repr(OPTIONAL_FLAGS), _PROBE, *self.extra_flags)  # a new version re-probes
        key = _digest(
            self.compiler, str(stat.st_mtime_ns), str(stat.st_size), cpu_identity(), *what
        )
        record = self.cache_dir / f"toolchain-{key[:16]}.json"
        try:
            data = json.loads(record.read_text())
            return Toolchain(**{k: v if isinstance(v, str) else tuple(v) for k, v in data.items()})
        except (OSError, ValueError, KeyError, TypeError):
            pass
        proc = self._run([self.compiler, "--version"])
        version = (proc.stdout.splitlines() or ["unknown"])[0].strip()
        taken: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

        def toolchain(groups: list) -> Toolchain:
            before = tuple(f for _, b, _ in groups for f in b)
            after = tuple(f for _, _, a in groups for f in a)
            names = tuple(n for n, _, _ in groups)
            flags = (*FLAGS, *before, *self.extra_flags)  # the caller's flags have the last word
            return Toolchain(self.compiler, version, cpu_identity(), flags, after, names)

        with self._scratch("probe-") as tmp:
            source, output = Path(tmp) / "probe.cpp", Path(tmp) / "probe.so"
            source.write_text(_PROBE)
            for group in OPTIONAL_FLAGS:
                if self._run(toolchain([*taken, group]).command(source, output)).returncode == 0:
                    taken.append(group)
        tc = toolchain(taken)
        self._write(record, json.dumps(dataclasses.asdict(tc)))
        return tc


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that no reader ever sees part of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _culprit(
    output: str, filename: str, prelude: str, sources: dict[str, str], labels: Mapping[str, str]
) -> str:
    """What the compiler's first error is in: a function's label, or the prelude."""
    match = re.search(rf"{re.escape(filename)}:(\d+):(?:\d+:)? (?:fatal )?error", output)
    if match is None:
        names = [labels.get(s, s) for s in sorted(sources)]
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    line = int(match.group(1))
    end = prelude.count("\n") + 1  # each function starts on a line after a blank one
    if line <= end:
        return "the CPU prelude"
    for symbol in sorted(sources):
        end += sources[symbol].count("\n") + 1
        if line <= end:
            return labels.get(symbol, symbol)
    return "the generated source"


def _abbreviate(output: str) -> str:
    """The compiler's first lines, indented; the number of the others."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    shown = "\n".join("  " + line for line in lines[:MESSAGE_LINES])
    rest = len(lines) - MESSAGE_LINES
    return shown + (f"\n  ... ({rest} more lines)" if rest > 0 else "")


__all__ = ["KernelCompiler", "Toolchain", "default_cache_dir", "find_compiler"]
