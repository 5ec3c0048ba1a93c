"""`fuserlite import MODEL.py:NAME --example EXPR [-o OUT.fus]`: a PyTorch module as .fus.

    fuserlite import model.py:make_block --example "torch.randn(2, 16, 64)" -o block.fus
    fuserlite import model.py:make_block --example "torch.randn(2, 16, 64)" \\
        --plan attn.q=colwise,attn.proj=rowwise --mesh 8 -o block_tp.fus

It runs MODEL.py (the user's own file) and evaluates each --example (a Python
expression with torch and the file's names in scope) to get the example inputs:
that is what the command is for, so point it only at files you would run yourself
(fuserlite.frontends.load). The module is traced by fl.from_torch, placed by
fl.parallelize when --plan is given, and written as .fus text under its parameters'
dotted names (to_fus(user_names=True)), so print, explain, show, timeline and run
take it like any file. The .fus text holds no values: `run` draws random inputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import fuserlite
from fuserlite.cli.output import EXIT_OK, Output, UsageError
from fuserlite.frontends.load import examples, load_model
from fuserlite.ir.mesh import DeviceMesh


def _plan(text: str) -> dict[str, str]:
    """`attn.q=colwise,attn.proj=rowwise` as a plan."""
    plan = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        module, sep, style = item.partition("=")
        if not sep or not module or not style:
            raise UsageError(
                f"fuserlite import: error: --plan item {item!r} is not MODULE=STYLE "
                "(e.g. attn.q=colwise,attn.proj=rowwise,ln1=sequence)"
            )
        plan[module] = style
    return plan


def _mesh(text: str) -> DeviceMesh:
    try:
        sizes = [int(s) for s in text.lower().split("x")]
    except ValueError:
        raise UsageError(
            f"fuserlite import: error: --mesh {text!r} is not N or AxB (e.g. 8 or 2x4)"
        ) from None
    return DeviceMesh.for_shape(sizes)


def cmd_import(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite import`: trace the module, place it, write its .fus text."""
    if args.plan is not None and args.mesh is None:
        raise UsageError("fuserlite import: error: --plan needs --mesh N (or AxB)")
    target, namespace = load_model(args.model)
    inputs = examples(args.example, namespace)
    fusion, _ = fuserlite.from_torch(target, *inputs, seed=args.seed)
    if args.mesh is not None:
        mesh = _mesh(args.mesh)
        plan = {} if args.plan is None else _plan(args.plan)
        dp = 0 if args.data_parallel else None
        fuserlite.parallelize(fusion, mesh, plan, dp_axis=dp)
    text = fuserlite.to_fus(fusion, user_names=True)
    header = f"# imported from {args.model} by fuserlite import\n"
    if args.output is None:
        out.text(header + text)
        return EXIT_OK
    Path(args.output).write_text(header + text)
    params = sum(1 for t in fusion.inputs if t.user_name and "." in t.user_name)
    outputs = len(fusion.outputs)
    out.text(
        f"wrote {args.output}: {len(fusion.inputs)} inputs ({params} parameters and buffers), "
        f"{len(fusion.exprs())} expressions, {outputs} output{'s' if outputs != 1 else ''}\n"
    )
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `import` to the subcommands."""
    c = commands.add_parser(
        "import",
        parents=[common],
        help="import a PyTorch module (torch.export) as .fus",
        description="Trace MODEL.py:NAME with torch.export on the example inputs and write "
        "it as .fus. This runs MODEL.py and evaluates the --example expressions: only "
        "for files you would run yourself. Needs the torch extra.",
    )
    c.add_argument("model", metavar="MODEL.py:NAME", help="a module, class, factory or function")
    c.add_argument(
        "--example",
        action="append",
        required=True,
        metavar="EXPR",
        help="an example input: a Python expression with torch in scope, e.g. "
        "'torch.randn(2, 16, 64)' (repeat it for several; a tuple gives several)",
    )
    c.add_argument("-o", "--output", metavar="OUT.fus", help="write here (default: stdout)")
    c.add_argument("--seed", type=int, default=0, help="Philox seed of train-mode dropout")
    c.add_argument(
        "--plan",
        metavar="MODULE=STYLE,...",
        help="a tensor-parallel plan (colwise, rowwise, sequence), as fl.parallelize takes",
    )
    c.add_argument("--mesh", metavar="N|AxB", help="the mesh to place on (with --plan)")
    c.add_argument(
        "--data-parallel",
        action="store_true",
        help="on an AxB mesh, shard the example inputs' batch over its first axis",
    )
    c.set_defaults(handler=cmd_import)
