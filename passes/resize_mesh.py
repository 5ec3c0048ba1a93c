"""resize-mesh: move every tensor from devices 0..k-1 to devices 0..N-1 (`run --devices N`).

Before: every mesh is the devices 0..k-1, and every tensor's transforms are its
sharding splits (the fusion is not scheduled yet); a sharded axis is an outer
split by the mesh size, so it divides among any number of devices (an axis
parallelized whole has the device count as its extent and cannot move).
After: every mesh is the devices 0..N-1; each tensor is sharded on the same
logical axes as before. A fusion already on 0..N-1 is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.errors import FusionError, PassOptionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import check_device_count
from fuserlite.passes.base import Level, Pass, register
from fuserlite.schedule.shard import resize_meshes


def _meshes(fusion: Fusion) -> set[tuple[int, ...]]:
    return {tv.mesh.devices for tv in fusion.tensors_created if tv.mesh is not None}


@register
@dataclass(frozen=True)
class ResizeMesh(Pass):
    """Move every tensor from devices 0..k-1 to devices 0..N-1, sharded on the same axes."""

    name: ClassVar[str] = "resize-mesh"
    level: ClassVar[Level] = Level.fusion
    devices: int

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            check_device_count(self.devices, f"pass {self.name}: option devices")
        except FusionError as exc:
            raise PassOptionError(str(exc)) from None

    def ensures(self, fusion: Fusion) -> list[str]:
        wanted = tuple(range(self.devices))
        return [
            f"{tv.name} is on {tv.mesh}, not on devices 0..{self.devices - 1}"
            for tv in fusion.tensors_created
            if tv.mesh is not None and tv.mesh.devices != wanted
        ]

    def run(self, fusion: Fusion) -> None:
        if _meshes(fusion) <= {tuple(range(self.devices))}:
            return  # on these devices already (or on none)
        resize_meshes(fusion, self.devices)
