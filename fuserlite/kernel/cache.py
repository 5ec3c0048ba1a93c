"""The on-disk cache of compiled kernel libraries, trusted the way ssh trusts ~/.ssh.

    with KernelCache(path).opened() as cache:    # checks the directory, or refuses it
        data = cache.load(key)                   # verified bytes, or None: build them
        cache.store(key, data)                   # the object, then its SHA-256 record
    library = load_library(data, key)            # dlopen of exactly those bytes

What is trusted, and why (README, `--cache-dir`; docs/design.md §7):

- The directory must be the user's own: created 0700, opened without following
  a symbolic link, and refused (an ExecutionError naming it and the fix) when it
  is a link, not owned by this user, or writable by its group or others. Each
  entry used is opened the same way (O_NOFOLLOW) and refused on the same grounds.
  All of it goes through the directory's file descriptor, so renaming a parent
  after the check changes nothing.
- `<key>.so` is recorded by `<key>.so.sha256`, written after it: the object's SHA-256
  and the key it was built for, so an entry copied or renamed from another key (a
  foreign entry) is refused as a corrupted one is. Each is written
  under a temporary name, fsynced and renamed, so a reader sees a whole file or
  none; a process that dies or a disk that fills between the two leaves an object
  with no record, which is never loaded.
- Loading reads the object's bytes, checks their SHA-256 against the record and
  hands the dynamic loader those very bytes, in a sealed memory file
  (memfd_create): what was checked is what runs, and a cache file truncated or
  replaced afterwards cannot reach the process (no SIGBUS from a shrunk mapping).
  A mismatch, a short or unreadable object or record is reported in one line and
  built again.
- Nothing else is read back: the compiler, its flags and what it supports are
  found from the environment in each process (fuserlite.kernel.compile); the
  `.cpp` beside each object is written for people to read, never compiled.

The record detects corruption and half-written files; protection from other
users is the directory's ownership and mode (anyone who can write there as you
can run code as you anyway).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fuserlite.ir.errors import ExecutionError

RECORD = ".sha256"  # the suffix of an object's record, after its own
MAX_ENTRY_BYTES = 1 << 30  # an entry larger than this is not read (bounded memory)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO does not block
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A loaded memory file can be neither written, shrunk nor grown, nor unsealed.
SEALS = sum(getattr(fcntl, f"F_SEAL_{s}", 0) for s in ("SEAL", "SHRINK", "GROW", "WRITE"))
_FIX = (
    "pass another directory (fuserlite run --cache-dir DIR, KernelCompiler(cache_dir=...)) "
    "or run kernels interpreted (compute='interpret')"
)


def note(text: str) -> None:
    """One line on stderr, as fuserlite says what it did instead of what was asked."""
    print(f"fuserlite: {text}", file=sys.stderr, flush=True)


class KernelCache:
    """A directory of compiled libraries (see the module docstring for what is trusted)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def opened(self) -> Iterator[OpenCache]:
        """The directory, created private if absent, checked and held open while in use."""
        fd = self._open_directory()
        try:
            yield OpenCache(self.path, fd)
        finally:
            os.close(fd)

    def _open_directory(self) -> int:
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP or path.is_symlink():
                raise ExecutionError(
                    f"the kernel cache directory {path} is a symbolic link; fuserlite loads "
                    "code from that directory and follows no link into it: pass the directory "
                    f"itself (--cache-dir {_resolved(path)}), or {_FIX}"
                ) from None
            raise ExecutionError(
                f"cannot write compiled kernels to {path} ({exc.strerror or exc}); {_FIX}"
            ) from None
        problem = _untrusted(os.fstat(fd), want_directory=True)
        if problem is not None:
            os.close(fd)
            private = problem.startswith("is writable")
            fix = (
                f"Make it private (chmod 700 {path})" if private else "Use a directory of your own"
            )
            raise ExecutionError(
                f"the kernel cache directory {path} {problem}: anyone who can write there could "
                f"make fuserlite run their code. {fix}, or {_FIX}"
            )
        return fd


class OpenCache:
    """A checked cache directory, read and written through its file descriptor."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def load(self, key: str) -> bytes | None:
        """The bytes of `<key>.so` if its record vouches for them; None if there is no
        whole entry (with a one-line note when there was a bad one)."""
        name = key + ".so"
        try:
            record = self.read(name + RECORD)
            if record is None:
                return None  # never built, or its record never written: build it
            data = self.read(name)
        except OSError as exc:
            note(f"cannot read {self.path / name} ({exc.strerror or exc}): building it again")
            return None
        if data is None or record != _record(key, data):
            what = "is missing" if data is None else "does not match its recorded SHA-256 and key"
            note(f"the compiled kernels {self.path / name} {what}: building them again")
            return None
        return data

    def store(self, key: str, data: bytes) -> bool:
        """Write `<key>.so` and then its record, each atomically; False (after a one-line
        note) if the disk refused: the caller goes on with the bytes it holds."""
        try:
            self.write(key + ".so", data)
            self.write(key + ".so" + RECORD, _record(key, data))
        except OSError as exc:
            note(
                f"cannot save compiled kernels in {self.path} ({exc.strerror or exc}); "
                "this process uses them, the next one builds them again"
            )
            return False
        return True

    def read(self, name: str) -> bytes | None:
        """An entry's bytes, None if it is absent; OSError if it cannot be read, an
        ExecutionError if it is a link, not a file, or not the user's own and private."""
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse(name, "is a symbolic link")
            raise
        try:
            info = os.fstat(fd)
            problem = _untrusted(info, want_directory=False)
            if problem is not None:
                self._refuse(name, problem)
            if info.st_size > MAX_ENTRY_BYTES:
                raise OSError(errno.EFBIG, f"larger than {MAX_ENTRY_BYTES} bytes")
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read(MAX_ENTRY_BYTES + 1)
        finally:
            os.close(fd)

    def write(self, name: str, data: bytes) -> None:
        """Make `name` hold `data`, never partly: a temporary file, fsync, rename, fsync of
        the directory. OSError (a full disk) leaves no temporary file behind."""
        temporary = f".{name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(temporary, _CREATE, 0o600, dir_fd=self.fd)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise
        with contextlib.suppress(OSError):  # durability only: some file systems refuse it
            os.fsync(self.fd)

    def _refuse(self, name: str, problem: str) -> None:
        entry = self.path / name
        raise ExecutionError(
            f"the kernel cache entry {entry} {problem}: fuserlite loads code from {self.path} "
            f"and trusts only files of your own that no one else can write. Remove it (rm "
            f"{entry}; it is built again), or {_FIX}"
        )


def _record(key: str, data: bytes) -> bytes:
    """The record of `<key>.so` holding `data`: its SHA-256 and the key, one line."""
    return f"{hashlib.sha256(data).hexdigest()} {key}\n".encode()


def _untrusted(info: os.stat_result, want_directory: bool) -> str | None:
    """Why a file or directory is not to be trusted, or None."""
    if want_directory and not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if not want_directory and not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.getuid():
        return f"belongs to user {info.st_uid}, not to you (user {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by its group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _resolved(path: Path) -> Path:
    try:
        return path.resolve(strict=True)
    except OSError:
        return path


def _write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written in the cache (a write may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def load_library(data: bytes, name: str) -> tuple[ctypes.CDLL, int | None]:
    """(the library, a descriptor to keep open while it is used) dlopened from `data`
    itself: a sealed memory file where Linux has one, else a private temporary copy.
    OSError if the loader refuses it."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        try:
            return _from_memory(data, name)
        except OSError:
            pass  # memory files not executable here (vm.memfd_noexec), or no library
    with tempfile.TemporaryDirectory(prefix="fuserlite-load-") as private:
        copy = Path(private) / f"{name}.so"
        copy.write_bytes(data)
        return ctypes.CDLL(str(copy)), None  # the mapping outlives the file


def _from_memory(data: bytes, name: str) -> tuple[ctypes.CDLL, int]:
    fd = os.memfd_create(f"fuserlite-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(fd, "wb", closefd=False) as memory:
            memory.write(data)
        with contextlib.suppress(OSError):  # a kernel without seals: the file is still ours
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        # glibc knows a loaded library by its path: the descriptor stays open, so that its
        # number is not reused, for as long as the library is loaded (the process).
        return ctypes.CDLL(f"/proc/self/fd/{fd}"), fd
    except BaseException:
        os.close(fd)
        raise


__all__ = ["KernelCache", "OpenCache", "load_library", "note"]
