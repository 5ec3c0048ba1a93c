"""Compile C++ with the system compiler, cache the shared object on disk, load it with ctypes.

    compiler = KernelCompiler()      # c++, g++ or clang++ from the PATH
    fns = compiler.functions(PRELUDE, {"fl_ab12": source}, {"fl_ab12": "kernel 0 (T4)"})
    fns["fl_ab12"](pointer, pointer)

One `functions` call compiles every function it is given that this compiler has
not loaded yet into one shared object: one compiler launch, however many
kernels. The object is named by a hash of its translation unit and of the
toolchain's identity (the compiler's path, its `--version` output and file, the
CPU, every flag it may be built with), and kept in the cache directory (the
`cache_dir` argument, else ~/.cache/fuserlite/kernels; fuserlite.kernel.cache
says what it trusts there and why). `named` does the same for functions whose
names say everything their source depends on (the executor's kernels, named by
their structure: fuserlite.kernel.signature): the key is the prelude and the
names, and their source is generated only when the library must be built. A
later process with the same kernels loads that file and launches no compiler.
Builds happen in a private temporary directory; processes building one kernel at
once (MPI ranks) each store a whole file, and each load a verified one.

Nothing of the toolchain is read from the cache: its identity is found once per
process (one `--version`), and which OPTIONAL_FLAGS the compiler takes (the loop
vectorizer, -march=native, -fopenmp and glibc's vector math library libmvec,
FL_VECTOR_MATH) is probed once per process, when something must be built;
without them the same source builds for one thread with scalar math calls, so
the key needs only the flags that may be taken. The flags keep IEEE arithmetic
exact: no fast-math, no contraction into fused multiply-adds, wrapping integer
overflow as numpy's. The compiler and the directory are arguments (`fuserlite
run --cache-dir`). A build that takes over BUILD_NOTE_S seconds says so on
stderr, and again every BUILD_NOTE_EVERY_S.

What one launch costs (GCC 12.2, the 10-op chain of benchmarks/chain.py, 138 lines
with the prelude, CPU ms, least of 20 on a loaded 2-core machine): cc1plus about 50
(starting on an empty file 11 to 15, the prelude 3, initializing its back end for the
first function it emits 12 to 18, the kernel itself 10 to 15), the assembler 5 (beside
cc1plus: -pipe), the link 23. So the unit stays one file with no #include, and the
link is what is cut: a unit with no parallel loop (uses_openmp) is built without
-fopenmp, which builds the same instructions, and linked without libgomp (4 ms); the
library links libm and libmvec alone, no libc, no startup files, no C++ runtime
(-nostdlib; reading libc.so.6's symbols was 7 to 11 ms), and without -z defs, which
needs libc: the probe keeps -z defs (a vector math variant or OpenMP symbol the
libraries lack fails its link), and a kernel library with a symbol nothing defines
fails to load (ctypes loads with RTLD_NOW) and is not stored. The g++ launch went
from 81 to 70 ms CPU in the median for that unit (README.md "Compiled kernels").
Measured and not taken: C instead of C++ (cc1 starts as slowly as cc1plus: 13.2
against 13.8 ms on an empty file), -fuse-ld=gold, no linker plugin, calling ld
without the driver (1.5 ms), -fno-asynchronous-unwind-tables: each within
noise, and -O1 for small units (3 ms less, other code).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fuserlite.ir.errors import ExecutionError
from fuserlite.kernel.cache import KernelCache, OpenCache, load_library, note

CANDIDATES = ("c++", "g++", "clang++")
# The optimization level, by the size of what is built (lines of C++ after the prelude,
# `optimization`): with the loop vectorizer and its -O3 cost model (the "vectorize" flags
# below) every level up from -O1 ran the kernels of benchmarks/chain.py alike, and a
# small unit compiles in the same time at any (the launch is most of it), so a small one
# gets -O2 and a large one -O1, which GCC 12 compiles a third faster (the 1000-op chain:
# 165 against 245 ms of CPU; docs in README.md "Compiled kernels"). -fno-tree-vrp: at
# -O2, value range propagation made branches of NaN-propagating selects (relu, maximum),
# and a chain of them was not vectorized: 8x slower than at -O1. (-O1 once built wrong
# code with the vectorizer and -march=native, tests/test_schedule_adversarial.py seed
# 1168, before -fno-tree-loop-im below; 400 seeds of that test pass at -O1 now.)
SMALL_UNIT = ("-O2", "-fno-tree-vrp")
LARGE_UNIT = ("-O1",)
LARGE_UNIT_LINES = 256  # lines of C++ after the prelude from which a unit is large
FLAGS = (
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-pipe",
    "-w",
    "-fno-math-errno",  # lets sqrt be one instruction and math calls vectorize; values unchanged
    "-ffp-contract=off",  # a * b + c rounds twice, as numpy computes it
    "-fwrapv",  # integer overflow wraps, as numpy's does
    "-fno-exceptions",  # no unwinder is linked (the same instructions: the kernels throw nothing)
)
# Probed, each kept if the compiler takes it: (name, flags before the source, after it).
# The libraries are built for this CPU (-march=native: AVX2 or AVX-512 where there is one),
# so the CPU is part of every cache key.
OPTIONAL_FLAGS = (
    # A missing symbol fails the link: the probe's only (PROBE_ONLY). A kernel library is
    # linked without it and without libc (below); ctypes loads it with RTLD_NOW, so a
    # symbol nothing defines fails the load (ExecutionError), never a call, and nothing
    # that fails to load is stored in the cache.
    ("no-undefined", ("-Wl,-z,defs",), ("-lc",)),
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
    # Only for a unit with a parallel loop (OPENMP_ONLY, uses_openmp): without one,
    # -fopenmp builds the same instructions, and libgomp is not needed.
    ("openmp", ("-fopenmp",), ("-lgomp",)),
    ("vector-math", ("-DFL_VECTOR_MATH",), ("-lmvec",)),
    # No C++ runtime nor startup files, and of the C libraries libm alone (and libgcc's
    # static helpers): the kernels include no header and call nothing of libstdc++, and
    # the loading process (Python) has libc. Reading libc.so.6's symbols was about 10 ms
    # of the link (README.md "Compiled kernels").
    ("c-libraries", ("-nostdlib",), ("-lm", "-lgcc")),
)
PROBE_ONLY = ("no-undefined",)  # the groups only the probe is built with
OPENMP_ONLY = ("openmp",)  # the groups only a unit with a parallel loop is built with
_OPENMP_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+omp\b", re.MULTILINE)
LAUNCHER = "fuserlite_launch"  # a library's device loop, where its prelude defines one
COMPILE_TIMEOUT_S = 600
BUILD_NOTE_S = 2.0  # a build still running after this long says so on stderr,
BUILD_NOTE_EVERY_S = 10.0  # and again this often
MESSAGE_LINES = 8  # of the compiler's output, in an error


def find_compiler() -> str | None:
    """The C++ compiler to use by default: the first of c++, g++, clang++ on the PATH."""
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


def default_cache_dir() -> Path:
    """Where kernel libraries are kept unless told otherwise: ~/.cache/fuserlite/kernels
    (for a user without a home directory, fuserlite-kernels-UID in the temporary directory)."""
    try:
        return Path.home() / ".cache" / "fuserlite" / "kernels"
    except RuntimeError:
        return Path(tempfile.gettempdir()) / f"fuserlite-kernels-{os.getuid()}"


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """A compiler, what it is, and the flags kernel libraries are built with."""

    compiler: str
    version: str  # the first line of `compiler --version`
    cpu: str  # cpu_identity(): the libraries are built for it
    groups: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]  # OPTIONAL_FLAGS taken
    extra_flags: tuple[str, ...] = ()  # the caller's, after the others

    @property
    def features(self) -> tuple[str, ...]:
        """The names of the OPTIONAL_FLAGS the compiler took."""
        return tuple(name for name, _, _ in self.groups)

    @property
    def flags(self) -> tuple[str, ...]:
        """Every flag before the source that a build may have (command() leaves out the
        probe's and, for a unit without a parallel loop, OpenMP's)."""
        return self._flags(self.groups)

    @property
    def libraries(self) -> tuple[str, ...]:
        """Every library after the source that a build may link."""
        return tuple(f for _, _, after in self.groups for f in after)

    def _flags(self, groups) -> tuple[str, ...]:
        return (*FLAGS, *(f for _, before, _ in groups for f in before), *self.extra_flags)

    def command(
        self,
        source: Path,
        output: Path,
        optimize: Sequence[str] = SMALL_UNIT,
        *,
        openmp: bool = True,
        probe: bool = False,
    ) -> list[str]:
        """The compiler's command line that builds `source` into the shared object `output`
        at the optimization flags `optimize` (the toolchain's own flags come after); with
        OpenMP's flags where `openmp` (a unit with a parallel loop: uses_openmp), and the
        probe's (`-z defs` and libc) where `probe`."""
        groups = [
            g
            for g in self.groups
            if (openmp or g[0] not in OPENMP_ONLY) and (probe or g[0] not in PROBE_ONLY)
        ]
        libraries = [f for _, _, after in groups for f in after]
        flags = (*optimize, *self._flags(groups))
        return [self.compiler, *flags, str(source), *libraries, "-o", str(output)]


def uses_openmp(unit: str) -> bool:
    """Whether a translation unit has an OpenMP directive (a parallel loop): only then is
    it built with -fopenmp and linked with libgomp."""
    return _OPENMP_PRAGMA.search(unit) is not None


def optimization(lines: int) -> tuple[str, ...]:
    """The optimization flags of a unit of `lines` lines of C++ after its prelude."""
    return LARGE_UNIT if lines >= LARGE_UNIT_LINES else SMALL_UNIT


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


@functools.cache
def cpu_identity() -> str:
    """What the CPU is, for cache keys: its model and feature flags where Linux says."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    lines = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    # platform.processor() runs `uname -p` (a process, 6 ms of a warm load): asked only
    # where Linux does not say what the CPU is.
    processor = "" if lines else platform.processor()
    return _digest(platform.machine(), processor, *sorted(set(lines)))[:16]


@functools.cache
def compiler_version(compiler: str) -> str:
    """What `compiler --version` prints (once per process; a compiler that cannot say
    is an ExecutionError)."""
    proc = _run([compiler, "--version"])
    if proc.returncode != 0:
        raise ExecutionError(
            f"the C++ compiler {compiler} failed `--version` (exit {proc.returncode}); "
            "pass another (KernelCompiler(compiler=...)) or compute='interpret'"
        )
    return proc.stdout


def compiler_identity(compiler: str) -> str:
    """What the compiler is, for cache keys: its path, its `--version` output and its
    file's size and time."""
    info = os.stat(compiler)
    return _digest(compiler, compiler_version(compiler), str(info.st_size), str(info.st_mtime_ns))


@functools.cache
def probe(compiler: str, extra_flags: tuple[str, ...]) -> Toolchain:
    """The toolchain: which OPTIONAL_FLAGS the compiler takes, all at once where it takes
    every one (one launch), else each in turn; once per process and compiler."""
    version = (compiler_version(compiler).splitlines() or ["unknown"])[0].strip()

    def toolchain(groups: Sequence) -> Toolchain:  # the caller's flags have the last word
        return Toolchain(compiler, version, cpu_identity(), tuple(groups), extra_flags)

    with tempfile.TemporaryDirectory(prefix="fuserlite-probe-") as tmp:
        source, output = Path(tmp) / "probe.cpp", Path(tmp) / "probe.so"
        source.write_text(_PROBE)

        def takes(groups: Sequence) -> bool:
            command = toolchain(groups).command(source, output, probe=True)
            return _run(command).returncode == 0

        if takes(OPTIONAL_FLAGS):
            return toolchain(OPTIONAL_FLAGS)
        taken: list = []
        for group in OPTIONAL_FLAGS:
            if takes([*taken, group]):
                taken.append(group)
    return toolchain(taken)


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
        self.cache = KernelCache(self.cache_dir)
        self.extra_flags = tuple(extra_flags)
        self._loaded: dict[str, Callable] = {}
        self._launchers: dict[str, Callable | None] = {}  # symbol -> its library's LAUNCHER
        # Kept open while their functions are used: the libraries, and the memory files
        # they were loaded from (fuserlite.kernel.cache.load_library).
        self._libraries: list[tuple[ctypes.CDLL, int | None]] = []
        self.compiles = 0  # compiler launches for kernels (not probes), for tests and benchmarks

    @property
    def toolchain(self) -> Toolchain:
        """The compiler's identity and flags, probed at first use in this process."""
        return probe(self.compiler, self.extra_flags)

    def key(self, unit: str) -> str:
        """The cache key of a translation unit: it and everything that decides its build."""
        levels = repr((SMALL_UNIT, LARGE_UNIT, LARGE_UNIT_LINES))  # read now: tests change them
        groups = repr((OPTIONAL_FLAGS, PROBE_ONLY, OPENMP_ONLY, _OPENMP_PRAGMA.pattern))
        toolchain = (*FLAGS, groups, _PROBE, repr(self.extra_flags), levels)
        return _digest(compiler_identity(self.compiler), cpu_identity(), *toolchain, unit)[:32]

    def launcher(self, symbol: str) -> Callable | None:
        """`fuserlite_launch(function, table, rows, stride)` of the library holding the loaded
        function `symbol` (it calls the function on each row of an address table), or None
        where its prelude defines none."""
        return self._launchers.get(symbol)

    def has(self, symbol: str) -> bool:
        """True if the function `symbol` is loaded (functions() would build nothing for it)."""
        return symbol in self._loaded

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
            unit = _unit(prelude, missing)
            self._load(self.key(unit), prelude, lambda: missing, labels or {}, missing)
        absent = [s for s in sources if s not in self._loaded]
        if absent:
            raise ExecutionError(
                f"the compiled library defines no function {absent[0]}: its source must define "
                f'`extern "C" void {absent[0]}(...)`'
            )
        return {s: self._loaded[s] for s in sources}

    def named(
        self,
        prelude: str,
        symbols: Sequence[str],
        generate: Callable[[list[str]], Mapping[str, str]],
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Callable]:
        """symbol -> loaded function for each of `symbols` whose name says all its source
        depends on (fuserlite.kernel.signature): those not loaded yet are found in the
        cache under a key of the prelude and their names, without their source, or else
        `generate(missing)` gives their definitions (it may leave some out) and they are
        compiled together. A symbol neither the cached library nor `generate` holds is
        left out of the answer."""
        missing = sorted({s for s in symbols if s not in self._loaded})
        if missing:
            key = self.key("\0".join(("named", prelude, *missing)))
            self._load(key, prelude, lambda: dict(generate(missing)), labels or {}, missing)
        return {s: self._loaded[s] for s in symbols if s in self._loaded}

    # -- building ---------------------------------------------------------------
    def _load(
        self,
        key: str,
        prelude: str,
        generate: Callable[[], Mapping[str, str]],
        labels: Mapping[str, str],
        symbols: Sequence[str],
    ) -> None:
        """Load the library `key` from the cache, or build it from the prelude and
        generate()'s functions; then its functions `symbols` (those it holds)."""
        with self.cache.opened() as cache:
            library = None
            data = cache.load(key)
            if data is not None:
                try:
                    library = load_library(data, key)
                except OSError as exc:  # verified, yet refused: a library it needs is gone
                    note(f"cannot load {self.cache_dir / key}.so ({exc}): building it again")
            if library is None:
                sources = dict(generate())
                if not sources:
                    return
                unit = _unit(prelude, sources)
                data = self._build(unit, key, cache, prelude, sources, labels)
                try:  # loaded before it is stored: the cache holds no library that fails to
                    library = load_library(data, key)
                except OSError as exc:  # (a symbol nothing defines: not linked with -z defs)
                    raise ExecutionError(
                        f"cannot load the kernels just compiled: {exc} (compute='interpret' "
                        "runs the kernels without compiling)"
                    ) from None
                cache.store(key, data)
        self._libraries.append(library)
        launcher = getattr(library[0], LAUNCHER, None)  # a prelude may not define one
        if launcher is not None:
            launcher.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 2
            launcher.restype = None
        for symbol in symbols:
            function = getattr(library[0], symbol, None)  # absent: not generated
            if function is not None:
                self._loaded[symbol] = function
                self._launchers[symbol] = launcher

    def _build(
        self,
        unit: str,
        key: str,
        cache: OpenCache,
        prelude: str,
        sources: dict[str, str],
        labels: Mapping[str, str],
    ) -> bytes:
        """The shared object's bytes, built in a private temporary directory; the source
        is saved beside the cached object for people to read (never compiled from there)."""
        kept = self.cache_dir / f"{key}.cpp"
        try:
            cache.write(kept.name, unit.encode())
            where_source = f"source: {kept}"
        except OSError as exc:
            where_source = f"the source could not be saved in {self.cache_dir}: {exc.strerror}"
        with tempfile.TemporaryDirectory(prefix="fuserlite-build-") as tmp:
            source, out = Path(tmp) / kept.name, Path(tmp) / f"{key}.so"
            source.write_text(unit)
            self.compiles += 1
            n = len(sources)
            what = f"{n} kernel{'s' * (n != 1)} ({size_text(len(unit))} of C++)"
            optimize = optimization(unit.count("\n") - prelude.count("\n"))
            command = self.toolchain.command(source, out, optimize, openmp=uses_openmp(unit))
            proc = _run(command, what)
            if proc.returncode != 0:
                where = _culprit(proc.stdout + proc.stderr, source.name, prelude, sources, labels)
                raise ExecutionError(
                    f"the C++ compiler ({self.compiler}) rejected {where}:\n"
                    f"{_abbreviate(proc.stdout + proc.stderr)}\n({where_source}; "
                    "compute='interpret' runs the kernels without compiling)"
                )
            return out.read_bytes()


def _unit(prelude: str, sources: Mapping[str, str]) -> str:
    """The translation unit of the prelude and the functions, in the symbols' order."""
    return prelude + "".join("\n" + sources[s] for s in sorted(sources))


def _run(argv: list[str], building: str | None = None) -> subprocess.CompletedProcess:
    """Run the compiler; `building` (what it builds) is said on stderr once it has taken
    BUILD_NOTE_S seconds, and every BUILD_NOTE_EVERY_S after."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise ExecutionError(f"could not run the C++ compiler {argv[0]}: {exc}") from None
    start = time.monotonic()
    wait = BUILD_NOTE_S
    with proc:
        while True:
            try:
                out, err = proc.communicate(timeout=min(wait, COMPILE_TIMEOUT_S))
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - start
                if elapsed >= COMPILE_TIMEOUT_S:
                    proc.kill()
                    raise ExecutionError(
                        f"the C++ compiler {argv[0]} took over {COMPILE_TIMEOUT_S} s; "
                        "compute='interpret' runs the kernels without compiling"
                    ) from None
                if building is not None:
                    note(f"compiling {building} with {Path(argv[0]).name}: {elapsed:.0f} s so far")
                wait = BUILD_NOTE_EVERY_S
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def size_text(n: int) -> str:
    """A size in bytes for people: `4.8 MB`, `16 KB`."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


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


__all__ = [
    "KernelCompiler",
    "Toolchain",
    "default_cache_dir",
    "find_compiler",
    "optimization",
    "size_text",
    "uses_openmp",
]
