"""What a plan costs: launches and bytes, one alpha-beta sum in bytes-equivalent.

    cost = launches * latency_bytes + bytes

`bytes` is what each device sends over the plan (the ring counts of plan.steps: beta
is one per byte), `launches` its collectives (a LocalSlice launches nothing) and
`latency_bytes` alpha, a collective's fixed cost expressed as the bytes a device could
send in that time (latency x link bandwidth). The default, 128 KiB, is 5.2 us at 25 GB/s
(a 200 Gb/s NIC per GPU), within the base latencies NCCL's tuning model gives a ring
collective (3.6 to 8.4 us, src/graph/tuning.cc): a tensor of a few KiB then takes the
plan with the fewest collectives, one of MiBs still the plan with the fewest bytes.
latency_bytes=0 plans by bytes alone (ties broken by fewer collectives).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from fuserlite.ir.errors import RedistributionError

DEFAULT_LATENCY_BYTES = 128 * 1024


def check_latency(latency_bytes: object, what: str = "latency_bytes") -> int:
    """`latency_bytes` as a non-negative int (numpy's integers too), or a
    RedistributionError naming `what`."""
    try:
        n = None if isinstance(latency_bytes, bool) else operator.index(latency_bytes)
    except TypeError:
        n = None
    if n is None or n < 0:
        raise RedistributionError(
            f"{what} must be a non-negative integer (a collective's latency in bytes-equivalent, "
            f"{DEFAULT_LATENCY_BYTES} by default; 0 plans by bytes alone), got {latency_bytes!r}"
        )
    return n


def _launches(n: int) -> str:
    return f"{n} launch" + ("" if n == 1 else "es")


@dataclass(frozen=True)
class Cost:
    """A plan's launches and bytes per device, under a latency of `latency_bytes`."""

    launches: int
    bytes: int
    latency_bytes: int

    @property
    def total(self) -> int:
        """launches * latency_bytes + bytes."""
        return self.launches * self.latency_bytes + self.bytes

    def amount(self) -> str:
        """'1536 B/device', and where launches cost, 'in 1 launch'."""
        return f"{self.bytes} B/device" + (
            f" in {_launches(self.launches)}" if self.latency_bytes else ""
        )

    def describe(self) -> str:
        """'1 launch x 131072 B + 1536 B = 132608 B'."""
        return (
            f"{_launches(self.launches)} x {self.latency_bytes} B + {self.bytes} B = {self.total} B"
        )

    def why_not(self, rejected: Cost) -> str:
        """Why this (chosen) cost beats `rejected`, in the terms that differ."""
        dl, db = rejected.launches - self.launches, rejected.bytes - self.bytes
        alpha = self.latency_bytes
        if self.total == rejected.total:
            return "the same cost: ties go to fewer collectives, then fewer steps"
        if not alpha:
            return f"it sends {db} B more (latency_bytes=0: launches cost nothing)"
        if db < 0:  # the rejected plan sends less, in more launches
            return f"{-db} B fewer do not pay for {_launches(dl)} more at {alpha} B each"
        if dl < 0:
            return f"{_launches(-dl)} fewer save {-dl * alpha} B but it sends {db} B more"
        if not dl:
            return f"it sends {db} B more in as many launches"
        more = f"{db} B more" if db else "as many bytes"
        return f"it sends {more} in {_launches(dl)} more"
