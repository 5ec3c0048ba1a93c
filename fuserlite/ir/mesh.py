"""DeviceMesh: the ordered devices a TensorView is distributed over."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuserlite.ir.args import abbreviate, fail, integer, is_integer, is_sequence
from fuserlite.ir.errors import FusionError

# Device ids are 0..MAX_DEVICES-1, so a mesh has at most MAX_DEVICES devices: far more
# than a simulated run in one process or one machine's MPI ranks can use, and small
# enough that a typo (--devices 1000000000) is an error up front, not a MemoryError.
MAX_DEVICES = 4096


def check_device_count(n: object, who: str) -> int:
    """A number of devices: an integer in 1..MAX_DEVICES, or a FusionError."""
    return integer(n, who, "the number of devices", minimum=1, maximum=MAX_DEVICES)


def _check_one_dimensional(devices: object) -> None:
    """Meshes are 1-D today; the one place a later N-D mesh lifts the restriction."""
    if isinstance(devices, np.ndarray):
        nested = devices.ndim > 1
    else:
        nested = isinstance(devices, (list, tuple)) and any(is_sequence(d) for d in devices)
    if nested:
        raise FusionError(
            f"DeviceMesh: devices must be a flat list of device ids; meshes are 1-D today "
            f"(N-D meshes come in a later version), got the nested {_short(devices)}; "
            "list the devices in one row, e.g. DeviceMesh([0, 1, 2, 3])"
        )


def _short(devices: object) -> str:
    text = repr(devices.tolist() if isinstance(devices, np.ndarray) else devices)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class DeviceMesh:
    """An ordered, one-dimensional set of device ids (compared by value)."""

    devices: tuple[int, ...]

    def __init__(self, devices) -> None:
        accepted = f"a list or tuple of distinct device ids in 0..{MAX_DEVICES - 1}"
        # Before looking at the ids: range(10**9) must not be walked.
        if isinstance(devices, (list, tuple, range)) and len(devices) > MAX_DEVICES:
            raise FusionError(
                f"DeviceMesh: {len(devices)} devices; a mesh has at most {MAX_DEVICES} "
                f"(device ids 0..{MAX_DEVICES - 1})"
            )
        _check_one_dimensional(devices)
        if not is_sequence(devices):
            raise fail("DeviceMesh", "devices", accepted, devices)
        bad = [d for d in devices if not is_integer(d) or not 0 <= d < MAX_DEVICES]
        if bad:
            raise FusionError(
                f"DeviceMesh: devices must be {accepted}, got {_short(devices)}: "
                f"{bad[0]!r} is not one"
            )
        devs = tuple(int(d) for d in devices)
        if not devs:
            raise FusionError("DeviceMesh: a mesh needs at least one device, got []")
        if len(set(devs)) != len(devs):
            raise FusionError(f"DeviceMesh{{{abbreviate(devs)}}} lists a device twice")
        object.__setattr__(self, "devices", devs)

    @classmethod
    def for_num_devices(cls, n: int) -> DeviceMesh:
        """The mesh of devices 0..n-1."""
        return cls(range(check_device_count(n, "DeviceMesh.for_num_devices")))

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

    def text(self) -> str:
        """The printed IR form with every device: `DeviceMesh{0 1 2 3}`."""
        return "DeviceMesh{" + " ".join(str(d) for d in self.devices) + "}"

    def __str__(self) -> str:
        """For messages: at most 8 ids, `DeviceMesh{0 1 2 3 4 5 6 ... 4095}`."""
        return "DeviceMesh{" + abbreviate(self.devices) + "}"
