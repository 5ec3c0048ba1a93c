"""What `run --devices N` / `--mesh AxB` changed: tensors moved that the file's mesh keeps.

resize-mesh keeps which axes each tensor shards, but an op may not keep a sharding
the new mesh splits unevenly (8 heads of the transformer block's q/k/v on 3
devices: the reshape into heads needs them whole, so they are all-gathered). The
run then validates, at a cost nothing reported. `resize_notes` lowers the file on
its own meshes too and names each tensor of the file that the resized program
moves and the file's does not: what moves it, before which op, why (an axis split
unevenly), and what to change.
"""

from __future__ import annotations

from collections import defaultdict

from fuserlite.ir.fusion import Fusion
from fuserlite.ir.sharding import placement
from fuserlite.ir.tensor import TensorView
from fuserlite.pipeline import Pipeline
from fuserlite.program.program import Program, Resharding


def _moved(program: Program, known: int) -> dict[int, Resharding]:
    """Tensor number -> its resharding, of the file's tensors (numbered below `known`)
    whose communications send data."""
    return {
        r.source.number: r
        for r in program.reshardings
        if r.source.number < known and sum(c.bytes_per_device for c in r.communications)
    }


def _uneven(tv: TensorView) -> tuple[str, int] | None:
    """(`axis 2 (64) splits unevenly over 3 devices (22 per device)`, 64) for tv's first
    sharded axis its devices do not divide; None if they divide them all."""
    p, mesh = placement(tv), tv.mesh
    for k, axes in enumerate(p.shards):
        devices = 1
        for a in axes:
            devices *= mesh.shape[a]
        extent = tv.shape[k]
        if devices > 1 and extent % devices:
            per = -(-extent // devices)
            text = f"axis {k} ({extent}) splits unevenly over {devices} devices ({per} per device)"
            return text, extent
    return None


def _names(tensors: list[TensorView]) -> str:
    names = [tv.name for tv in tensors]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def resize_notes(fusion: Fusion, resized: Program, passes: list[str], where: str) -> list[str]:
    """One note per op before which the resized program (`where`: `3 devices`) moves
    tensors of the file that its own meshes (the program of `passes`) keep in place."""
    original = Pipeline(passes).run(fusion)
    known = len(fusion.tensors_created)
    kept = _moved(original, known)
    groups: dict[tuple, list[TensorView]] = defaultdict(list)
    for n, r in _moved(resized, known).items():
        if n in kept:
            continue
        uses = r.target.uses
        op = uses[0].op_name if uses else "the output"
        kinds = " + ".join(dict.fromkeys(c.kind.value for c in r.communications))
        groups[(op, kinds, _uneven(r.source))].append(r.source)
    files = {tv.number: tv for tv in original.fusion.tensors_created}
    notes = []
    for (op, kinds, uneven), tensors in groups.items():
        mesh = files[tensors[0].number].mesh
        size = f" ({mesh.size} devices)" if mesh is not None else ""
        one = len(tensors) == 1
        note = (
            f"note: on {where}, {_names(tensors)} {'is' if one else 'are'} moved ({kinds}) "
            f"before {op}; on the file's mesh{size} {'it stays' if one else 'they stay'} sharded."
        )
        if uneven is not None:
            why, extent = uneven
            note += (
                f" {'Its' if one else 'Their'} {why}, which {op} cannot keep split; to keep "
                f"{'it' if one else 'them'} sharded, run on a device count that divides {extent}"
                + (f" (as {mesh.size} does)" if mesh is not None else "")
                + "."
            )
        notes.append(note)
    return notes
