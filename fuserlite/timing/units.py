"""Times, sizes and rates as people read them: three significant figures and a unit."""

from __future__ import annotations


def _sig(x: float) -> str:
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def seconds_text(s: float) -> str:
    """'850 ns', '12.3 us', '1.25 ms', '2 s'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{_sig(s / scale)} {unit}"
    return f"{_sig(s / 1e-9)} ns" if s > 0 else "0 s"


def bytes_text(n: int) -> str:
    """'512 B', '1.5 KiB', '3 MiB', '2.25 GiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{_sig(n / scale)} {unit}"
    return f"{n} B"


def rate_text(bytes_per_second: float) -> str:
    """'450 GB/s', '3.35 TB/s' (decimal units, as datasheets give bandwidths)."""
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)):
        if bytes_per_second >= scale:
            return f"{_sig(bytes_per_second / scale)} {unit}"
    return f"{_sig(bytes_per_second)} B/s"
