"""Per-device programs (JAX's shard_map, torch_xla's SPMD) built as global-view IR:
`shard_map.py` (fl.shard_map), `trace.py` (the local values it traces) and
`collectives.py` (all_gather, psum, ppermute, axis_index, ...)."""
