"""Pictures of shardings: which device holds which block of a tensor.

    fl.show_sharding(tv)              # prints the picture (coloured on a terminal)
    plain(sheet(tv)), svg([sheet(tv)])  # the text and the SVG of it

In the spirit of jax.debug.visualize_array_sharding; `fuserlite show` draws every
tensor of a fusion, after any pass, and the communications of the lowered program.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.show.layout import Cell, Sheet, sheet
from fuserlite.show.svg import svg
from fuserlite.show.text import coloured, plain

__all__ = ["Cell", "Sheet", "find_tensor", "plain", "sheet", "show_sharding", "svg"]


def show_sharding(tv: TensorView, file: TextIO | None = None) -> None:
    """Print which device holds which block of tv: coloured on a terminal, ASCII otherwise."""
    args.instance(tv, TensorView, "show_sharding", "tv", "a TensorView")
    console = Console(file=file if file is not None else sys.stdout, soft_wrap=True)
    s = sheet(tv)
    if console.is_terminal:
        console.print(coloured(s), end="")
    else:
        console.file.write(plain(s))


def find_tensor(fusion: Fusion, name: str) -> TensorView:
    """The tensor a user names: its own name (`w1`) or its number (`T3`)."""
    tensors = fusion.tensors()
    for tv in tensors:
        if name in (tv.user_name, tv.ir_name):
            return tv
    known = ", ".join(tv.user_name or tv.ir_name for tv in tensors[:12])
    more = ", ..." if len(tensors) > 12 else ""
    names = [n for tv in tensors for n in (tv.user_name, tv.ir_name) if n]
    raise FusionError(
        f"the fusion has no tensor {name!r}{args.did_you_mean(name, names)} (its tensors are "
        f"{known}{more})"
    )
