"""The unsharded reference: the evaluator (`evaluator.py`), its numpy op table
(`numpy_ops.py`), the rounding magnitudes (`magnitude.py`) and validation against it
(`validate.py`)."""
