"""`fuserlite codegen`: the source of the scheduled kernels, for CUDA or the CPU."""

from __future__ import annotations

import argparse
from typing import Any

from fuserlite.cli.output import EXIT_OK, Output, add_command, load_fusion, pipeline
from fuserlite.kernel.cpu import cpu_source
from fuserlite.kernel.cuda import cuda_source
from fuserlite.pipeline import default_pass_names


def cmd_codegen(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite codegen`: CUDA source, one __global__ kernel per scheduled kernel; with
    --target cpu the C++ that `run --compute compiled` builds (the same kernel bodies)."""
    program = pipeline(args, default_pass_names()).run(load_fusion(args.path))
    kernels = [k for k in program.kernels if k.scheduled]
    out.text(cpu_source(kernels) if args.target == "cpu" else cuda_source(kernels))
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `codegen` to the subcommands."""
    g = add_command(
        commands, common, cmd_codegen, "codegen", "print CUDA for the scheduled kernels"
    )
    g.add_argument(
        "--target", choices=("cuda", "cpu"), default="cuda", help="cuda (default) or cpu"
    )
