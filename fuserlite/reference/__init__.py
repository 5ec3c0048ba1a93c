"""The unsharded reference: the evaluator (`evaluator.py`), its numpy op table
(`numpy_ops.py`), the rounding two correct evaluations may differ by (`rounding.py`;
attention's in `attention_rounding.py`) and validation against it (`validate.py`)."""
