"""numpy reference math that several layers share: the Philox random numbers
(`philox`) and the transformer ops' formulas (`nn`, `attention`).

A leaf: it imports numpy, ml_dtypes and fuserlite.ir only, so the per-op
evaluators of the runtime and the code generator can both use it. Floats are
computed in their compute dtype (float32 for half, bfloat16 and float32; float64
for float64) and rounded to the inputs' dtype once, at the end.
"""
