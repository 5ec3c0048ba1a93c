"""DeviceMesh: the ordered devices a TensorView is distributed over."""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.errors import FusionError


@dataclass(frozen=True)
class DeviceMesh:
    """An ordered, one-dimensional set of device ids (compared by value)."""

    devices: tuple[int, ...]

    def __init__(self, devices) -> None:
        devs = tuple(int(d) for d in devices)
        if not devs:
            raise FusionError("a DeviceMesh needs at least one device")
        if len(set(devs)) != len(devs):
            raise FusionError(f"DeviceMesh{{{' '.join(map(str, devs))}}} lists a device twice")
        if any(d < 0 for d in devs):
            raise FusionError(f"device ids must be non-negative, got {list(devs)}")
        object.__setattr__(self, "devices", devs)

    @classmethod
    def for_num_devices(cls, n: int) -> DeviceMesh:
        """The mesh of devices 0..n-1."""
        if n < 1:
            raise FusionError(f"a mesh needs at least one device, got {n}")
        return cls(range(n))

    @property
    def size(self) -> int:
        return len(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __contains__(self, device: object) -> bool:
        return device in self.devices

    def index(self, device: int) -> int:
        """Position of a device in the mesh (its shard index)."""
        return self.devices.index(device)

    def __str__(self) -> str:
        return "DeviceMesh{" + " ".join(str(d) for d in self.devices) + "}"
