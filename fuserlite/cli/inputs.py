"""`fuserlite run --inputs FILE.npz`: the user's own inputs, checked before anything runs.

The file is numpy's `.npz` (`np.savez(path, x=..., w1=...)`): one array per fusion
input, keyed by the name the fusion gives it (its name in the .fus file, or `T0`
where it has none). It is read with allow_pickle=False, so nothing in it is executed,
and each member's header (shape, dtype) is checked against its input before its data
is read, so a file cannot make the command allocate or inflate more than the fusion
takes (numpy reads exactly the bytes the header's shape and dtype need). Every mismatch is an
error naming the file, the input and what to change: a missing or unknown name
(with the closest name), a shape, a dtype.
"""

from __future__ import annotations

import zipfile

import numpy as np

from fuserlite.ir.args import did_you_mean
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView


def input_key(tv: TensorView) -> str:
    """The key of `tv`'s array in an inputs file: its user name, else `T0`."""
    return tv.user_name or tv.ir_name


def load_inputs(path: str, fusion: Fusion) -> list[np.ndarray]:
    """The arrays of `path` (an .npz file) for `fusion`'s inputs, in their order; an
    ExecutionError naming the file and the input for anything that does not match."""
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic[:4] != b"PK\x03\x04" and magic != b"\x93NUMPY":
            raise ExecutionError(
                f"--inputs {path}: not an .npz file (it starts with {magic!r}); write it with "
                f"np.savez(path, {_keyword_list(fusion)})"
            )
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ExecutionError(f"--inputs {path}: no such file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ExecutionError(
            f"--inputs {path}: not an .npz file numpy can read without pickles ({exc}); "
            "write it with np.savez(path, name=array, ...)"
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ExecutionError(
            f"--inputs {path}: a single array (.npy); the inputs are an .npz of one array per "
            f"fusion input by name: np.savez(path, {_keyword_list(fusion)})"
        )
    with archive:
        return _arrays(path, archive, fusion)


def _keyword_list(fusion: Fusion) -> str:
    return ", ".join(f"{input_key(tv)}=..." for tv in fusion.inputs)


def _arrays(path: str, archive: np.lib.npyio.NpzFile, fusion: Fusion) -> list[np.ndarray]:
    keys = [input_key(tv) for tv in fusion.inputs]
    given = list(archive.files)
    unknown = [k for k in given if k not in keys]
    if unknown:
        raise ExecutionError(
            f"--inputs {path}: {unknown[0]!r} is not an input of the fusion"
            f"{did_you_mean(unknown[0], keys)} (its inputs: {', '.join(keys)})"
        )
    missing = [k for k in keys if k not in given]
    if missing:
        raise ExecutionError(
            f"--inputs {path}: no array for input{'s' * (len(missing) > 1)} "
            f"{', '.join(missing)} (the file has {', '.join(given) or 'none'}; it needs "
            f"{', '.join(keys)})"
        )
    return [_array(path, archive, tv) for tv in fusion.inputs]


def _array(path: str, archive: np.lib.npyio.NpzFile, tv: TensorView) -> np.ndarray:
    """One input's array: its header's shape and dtype checked before its data is read."""
    key = input_key(tv)
    want = np.dtype(tv.dtype.numpy)
    try:
        with archive.zip.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(member)
        if _same_bits(dtype, want):
            dtype = want
        if shape == tv.shape and dtype == want:
            a = archive[key]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ExecutionError(f"--inputs {path}: {key} cannot be read: {exc}") from None
    if shape != tv.shape:
        raise ExecutionError(
            f"--inputs {path}: {key} has shape {list(shape)}; input {tv.name} is "
            f"{tv.dtype.name}{list(tv.shape)}"
        )
    if dtype != want:
        raise ExecutionError(
            f"--inputs {path}: {key} has dtype {dtype}; input {tv.name} is "
            f"{tv.dtype.name}{list(tv.shape)} (numpy {want}): convert it with "
            ".astype(...) before saving"
        )
    return a.view(want) if a.dtype != want else a


def _same_bits(dtype: np.dtype, want: np.dtype) -> bool:
    """np.save writes ml_dtypes' bfloat16 as raw records (`|V2`): the same bits."""
    return (
        dtype.kind == "V"
        and dtype.names is None
        and want.kind == "V"
        and dtype.itemsize == want.itemsize
    )
