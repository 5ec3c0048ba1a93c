"""resize-mesh: move every tensor to devices 0..N-1 (`run --devices N`) or to a mesh of
a given shape (`resize-mesh[mesh=2x4]`, `run --mesh 2x4`).

Before: every mesh is the devices 0..k-1 in row-major order, and every tensor's
transforms are its sharding splits (the fusion is not scheduled yet); a sharded
axis is an outer split by its mesh axis's size, so it divides among any number of
devices (an axis parallelized whole has the device count as its extent and
cannot move).
After: every mesh is the new one; each tensor is sharded on the same logical axes
by the same parallel types as before (DIDx names the last mesh axis of the new
mesh, so a 1-D fusion on a 2x4 mesh is sharded over the 4 devices of each DIDx
team and replicated along DIDy). A fusion already on that mesh is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.errors import FusionError, PassOptionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh, check_device_count
from fuserlite.passes.base import Level, Pass, register
from fuserlite.schedule.shard import resize_meshes


@register
@dataclass(frozen=True)
class ResizeMesh(Pass):
    """Move every tensor to devices 0..N-1 or to a mesh of a shape, sharded on the same axes."""

    name: ClassVar[str] = "resize-mesh"
    level: ClassVar[Level] = Level.fusion
    devices: int = 0
    mesh: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.devices == 0 and not self.mesh:
            raise PassOptionError(
                f"pass {self.name} needs option devices or mesh: write "
                f"{self.name}[devices=...] (devices 0..N-1) or {self.name}[mesh=2x4] (a mesh of "
                "that shape)"
            )
        if self.devices and self.mesh:
            raise PassOptionError(
                f"pass {self.name} takes devices or mesh, not both (got devices={self.devices} "
                f"and mesh={self.mesh})"
            )
        self.target()

    def target(self) -> DeviceMesh:
        """The mesh every tensor moves to."""
        try:
            if self.mesh:
                return DeviceMesh.for_shape(mesh_shape(self.mesh, f"pass {self.name}: option mesh"))
            check_device_count(self.devices, f"pass {self.name}: option devices")
            return DeviceMesh.for_num_devices(self.devices)
        except FusionError as exc:
            raise PassOptionError(str(exc)) from None

    def ensures(self, fusion: Fusion) -> list[str]:
        wanted = self.target()
        return [
            f"{tv.name} is on {tv.mesh}, not on {wanted}"
            for tv in fusion.tensors_created
            if tv.mesh is not None and tv.mesh != wanted
        ]

    def run(self, fusion: Fusion) -> None:
        wanted = self.target()
        if {tv.mesh for tv in fusion.tensors_created if tv.mesh is not None} <= {wanted}:
            return  # on this mesh already (or on none)
        resize_meshes(fusion, wanted)


def mesh_shape(text: str, who: str) -> list[int]:
    """`2x4` as [2, 4], or a FusionError naming `who`."""
    parts = text.lower().split("x")
    if not all(p.isdigit() for p in parts):
        raise FusionError(
            f"{who}: a mesh shape is axis sizes joined by x, like 8, 2x4 or 2x2x2; got {text!r}"
        )
    return [int(p) for p in parts]
