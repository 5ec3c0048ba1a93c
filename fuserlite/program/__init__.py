"""The lowered program: compute kernels and communications in execution order."""

from fuserlite.program.communication import CommKind, Communication, Layout, Sizing
from fuserlite.program.printer import print_program, print_scheduled
from fuserlite.program.program import Kernel, Program, Resharding, Step

__all__ = [
    "CommKind",
    "Communication",
    "Kernel",
    "Layout",
    "Program",
    "Resharding",
    "Sizing",
    "Step",
    "print_program",
    "print_scheduled",
]
