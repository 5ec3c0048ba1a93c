"""The validator: the fusion checks that run between passes (`fusion.py`), which the
program verifier (`fuserlite.program.verify`) shares. `fl.verify` is `fusion.verify`."""
