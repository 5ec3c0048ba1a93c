"""Ways in from the frameworks people write models in (docs/torch.md).

    aten.py        the ATen op table: one row per ATen op torch.export emits, each a
                   builder of fuserlite ops (no torch needed to read it)
    torch.py       fl.from_torch: torch.export a module or function, walk its graph
                   through the table, give back a fusion and its input values
    parallelize.py fl.parallelize: PyTorch's tensor-parallel plans (colwise, rowwise,
                   sequence) as placements of an imported fusion's tensors
    load.py        what `fuserlite import` runs: a model file's factory and examples

torch is an optional extra (`pip install 'fuserlite[torch]'`): only torch.py and
load.py import it, inside their functions, so the rest of fuserlite never needs it.
Nothing but the api (`fuserlite/__init__.py`) and the cli imports this package.
"""
