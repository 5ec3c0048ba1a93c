"""The .fus text format: `parse`/`load` text into a Fusion, `to_fus` writes one back."""

from fuserlite.text.parser import load, parse
from fuserlite.text.writer import to_fus

__all__ = ["load", "parse", "to_fus"]
