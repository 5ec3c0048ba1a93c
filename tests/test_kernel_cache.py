"""The kernel cache as an attacker meets it: every way in is refused or rebuilt, never run.

Each test builds one tiny library (fl_twice, about 0.1 s) into a fresh directory,
spoils the cache as an attack or an accident would, and checks what a compiler
(a new process, as far as the cache knows) does next.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_compile import TWICE, call_twice, needs_compiler

import fuserlite as fl
import fuserlite.kernel.cache as cache_module
from fuserlite.kernel.compile import KernelCompiler, find_compiler
from fuserlite.kernel.cpu import PRELUDE

pytestmark = needs_compiler
UNIT = PRELUDE + "\n" + TWICE  # what KernelCompiler.functions builds for {"fl_twice": TWICE}


def built(cache: Path) -> tuple[KernelCompiler, Path]:
    """A compiler that has built fl_twice into `cache`, and the library's path."""
    compiler = KernelCompiler(cache_dir=cache)
    assert call_twice(compiler.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"], 2.0) == 4.0
    return compiler, cache / f"{compiler.key(UNIT)}.so"


def twice_again(cache: Path) -> KernelCompiler:
    """A fresh compiler's fl_twice from `cache`, checked to be right."""
    compiler = KernelCompiler(cache_dir=cache)
    assert call_twice(compiler.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"], 3.0) == 6.0
    return compiler


def evil_library(tmp_path: Path, marker: Path) -> bytes:
    """A library defining fl_twice wrongly, whose constructor writes `marker` when loaded."""
    source = tmp_path / "evil.cpp"
    source.write_text(
        "#include <stdio.h>\n"
        f'__attribute__((constructor)) static void evil() {{ fclose(fopen("{marker}", "w")); }}\n'
        'extern "C" void fl_twice(const float* x, float* y) { y[0] = 666; }\n'
    )
    out = tmp_path / "evil.so"
    subprocess.run([find_compiler(), "-shared", "-fPIC", str(source), "-o", str(out)], check=True)
    return out.read_bytes()


def test_the_directory_and_its_entries_are_private(tmp_path) -> None:
    cache = tmp_path / "new" / "kernels"
    _, library = built(cache)
    assert cache.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in cache.iterdir()} == {0o600}
    record = library.with_name(library.name + ".sha256").read_text().strip()
    assert record == f"{hashlib.sha256(library.read_bytes()).hexdigest()} {library.stem}"
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("keep", [0, 0.5])
def test_a_truncated_object_is_built_again_with_a_note(tmp_path, capsys, keep) -> None:
    _, library = built(tmp_path)
    data = library.read_bytes()
    library.write_bytes(data[: int(len(data) * keep)])
    assert twice_again(tmp_path).compiles == 1
    assert (
        "does not match its recorded SHA-256 and key: building them again"
        in capsys.readouterr().err
    )
    assert library.read_bytes() == data  # rebuilt in place, and trusted again
    assert twice_again(tmp_path).compiles == 0


def test_a_replaced_object_never_runs_its_constructor(tmp_path, capsys) -> None:
    marker = tmp_path / "constructor-ran"
    _, library = built(tmp_path / "cache")
    library.write_bytes(evil_library(tmp_path, marker))
    assert twice_again(tmp_path / "cache").compiles == 1  # 6.0, not 666
    assert not marker.exists()
    assert "does not match its recorded SHA-256" in capsys.readouterr().err


def test_a_library_its_record_vouches_for_but_the_loader_refuses_is_built_again(
    tmp_path, capsys
) -> None:
    _, library = built(tmp_path)
    library.write_bytes(b"not a shared object")
    record = library.with_name(library.name + ".sha256")
    record.write_text(f"{hashlib.sha256(b'not a shared object').hexdigest()} {library.stem}\n")
    assert twice_again(tmp_path).compiles == 1
    assert f"cannot load {library}" in capsys.readouterr().err


@pytest.mark.parametrize("spoil", ["foreign", "sha-only", "other-key"])
def test_a_record_vouches_for_its_own_key_only(tmp_path, capsys, spoil) -> None:
    """An entry copied from another key (its object and its true record), a record of the
    older form (the SHA-256 alone) or one naming another key: built again, never loaded."""
    marker = tmp_path / "constructor-ran"
    _, library = built(tmp_path / "cache")
    record = library.with_name(library.name + ".sha256")
    evil = evil_library(tmp_path, marker)
    digest = hashlib.sha256(evil).hexdigest()
    library.write_bytes(evil)
    if spoil == "foreign":  # a whole entry of key `other`, renamed to this one
        other = "0" * 32
        record.write_text(f"{digest} {other}\n")
    elif spoil == "sha-only":
        record.write_text(digest + "\n")
    else:
        record.write_text(f"{digest} {library.stem[:-1]}x\n")
    assert twice_again(tmp_path / "cache").compiles == 1  # 6.0, not 666
    assert not marker.exists()
    assert "does not match its recorded SHA-256 and key" in capsys.readouterr().err
    assert twice_again(tmp_path / "cache").compiles == 0  # rebuilt in place, trusted again


def test_an_unreadable_object_is_built_again(tmp_path, capsys) -> None:
    _, library = built(tmp_path)
    with library.open("r+b") as f:  # sparse: larger than any entry is read
        f.truncate(cache_module.MAX_ENTRY_BYTES + 1)
    assert twice_again(tmp_path).compiles == 1
    assert f"cannot read {library}" in capsys.readouterr().err


def test_a_loaded_library_cannot_be_changed_under_the_process(tmp_path) -> None:
    """What runs is a sealed copy of the checked bytes: truncating the cached file after
    loading (a SIGBUS for a library mapped from it) changes nothing."""
    compiler, library = built(tmp_path)
    library.write_bytes(b"")
    fn = compiler.functions(PRELUDE, {"fl_twice": TWICE})["fl_twice"]
    assert call_twice(fn, 5.0) == 10.0


@pytest.mark.parametrize("entry", [".so", ".so.sha256"])
def test_a_symbolic_link_in_the_cache_is_refused(tmp_path, entry) -> None:
    marker = tmp_path / "constructor-ran"
    compiler, library = built(tmp_path / "cache")
    evil = tmp_path / "evil.so"
    evil.write_bytes(evil_library(tmp_path, marker))
    link = Path(str(library).removesuffix(".so") + entry)
    link.unlink()
    link.symlink_to(evil)
    with pytest.raises(fl.ExecutionError, match=rf"{link} is a symbolic link.*Remove it \(rm "):
        twice_again(tmp_path / "cache")
    assert not marker.exists()


def test_a_symbolic_link_as_the_directory_is_refused(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(fl.ExecutionError, match=rf"link is a symbolic link.*--cache-dir {real}"):
        twice_again(tmp_path / "link")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_directory_others_can_write_is_refused(tmp_path, mode) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(fl.ExecutionError) as info:
        twice_again(cache)
    message = str(info.value)
    assert f"{cache} is writable by its group or others (mode {mode:o})" in message
    assert f"chmod 700 {cache}" in message and "--cache-dir" in message
    assert not list(cache.iterdir())  # nothing was written there either


def test_an_entry_others_can_write_is_refused(tmp_path) -> None:
    _, library = built(tmp_path)
    library.chmod(0o666)
    with pytest.raises(fl.ExecutionError, match=rf"entry {library} is writable by its group"):
        twice_again(tmp_path)


def test_a_directory_of_another_user_is_refused(tmp_path, monkeypatch) -> None:
    built(tmp_path)
    monkeypatch.setattr(cache_module.os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.raises(fl.ExecutionError, match=r"belongs to user \d+, not to you .*own"):
        twice_again(tmp_path)


def test_nothing_of_the_toolchain_or_the_source_is_read_back(tmp_path) -> None:
    """A toolchain record naming a script (the old `toolchain-*.json`) and a poisoned
    `.cpp` are ignored by a new process: the script never runs, the source never builds."""
    marker = tmp_path / "script-ran"
    script = tmp_path / "evil-c++"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    script.chmod(0o700)
    cache = tmp_path / "cache"
    run = (
        "import sys\n"
        "from fuserlite.kernel.compile import KernelCompiler\n"
        "from fuserlite.kernel.cpu import PRELUDE\n"
        f"c = KernelCompiler(cache_dir={str(cache)!r})\n"
        "src = sys.argv[1]\n"
        "f = c.functions(PRELUDE, {'fl_twice': src})['fl_twice']\n"
        "print(c.compiles)\n"
    )

    def new_process(source: str) -> str:
        proc = subprocess.run([sys.executable, "-c", run, source], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert new_process(TWICE) == "1"
    evil = {"compiler": str(script), "version": "x", "cpu": "x", "flags": [], "libraries": []}
    evil["features"] = []
    for name in [*(p.name for p in cache.glob("*.json")), "toolchain-0123456789abcdef.json"]:
        (cache / name).write_text(json.dumps(evil))
    other = TWICE.replace("2 * x[0]", "x[0] + x[0]")
    key = KernelCompiler(cache_dir=cache).key(PRELUDE + "\n" + other)
    (cache / f"{key}.cpp").write_text(evil_source := f'#error "compiled from the cache"\n{other}')
    assert new_process(other) == "1"  # built, from its own source
    assert not marker.exists()
    assert (cache / f"{key}.cpp").read_text() != evil_source


def test_a_full_disk_leaves_nothing_to_trust(tmp_path, monkeypatch, capsys) -> None:
    """ENOSPC writing the object: this process runs the kernels it built, after a note,
    and leaves no entry; writing the record: the object left without it is never loaded."""
    real = cache_module._write_all

    def full_disk(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_module, "_write_all", full_disk)
    assert twice_again(tmp_path).compiles == 1
    err = capsys.readouterr().err
    assert f"cannot save compiled kernels in {tmp_path} (No space left on device)" in err
    assert not [p.name for p in tmp_path.iterdir() if not p.name.endswith(".cpp")]

    def full_at_the_record(fd: int, data: bytes) -> None:
        if len(data) == 98:  # the record: a SHA-256 in hex, a space, the key, a newline
            full_disk(fd, data)
        real(fd, data)

    monkeypatch.setattr(cache_module, "_write_all", full_at_the_record)
    assert twice_again(tmp_path).compiles == 1
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".cpp", ".so"]
    monkeypatch.setattr(cache_module, "_write_all", real)
    assert twice_again(tmp_path).compiles == 1  # the object without a record: built again
    assert twice_again(tmp_path).compiles == 0


def test_without_executable_memory_files_a_private_copy_is_loaded(tmp_path, monkeypatch) -> None:
    """Where memfds may not be executable (vm.memfd_noexec) the checked bytes are loaded
    from a private temporary copy instead."""

    def refused(data: bytes, name: str):
        raise OSError(errno.EACCES, "memfd not executable")

    monkeypatch.setattr(cache_module, "_from_memory", refused)
    built(tmp_path)
    assert twice_again(tmp_path).compiles == 0  # loaded, from a copy
