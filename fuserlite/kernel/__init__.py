"""One kernel body, three targets: index lowering of scheduled tensors (`indexing.py`),
the numpy kernel runner (`runner.py`, with `batches.py`, `grid_index.py`,
`memory.py`), C++ for the host (`cpu.py`, built by `compile.py`) and CUDA (`cuda.py`)."""
