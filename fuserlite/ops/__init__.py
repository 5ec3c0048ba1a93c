"""The ops: user-facing builders, each op defined once (fuserlite.ops.registry).

    pointwise.py     neg, exp, tanh, relu, abs, gelu, sqrt, log, sigmoid, silu, sin, cos,
                     rsqrt; add, sub, mul, div, pow, maximum, minimum, lt, where
    views.py         set, broadcast, expand, reshape, take
    reductions.py    sum, max, min
    contraction.py   matmul, linear, grouped_mm (mixture of experts)
    casts.py         cast
    movement.py      permute, squeeze, select, slice, cat; composites transpose,
                     unsqueeze, flatten, split, chunk
    attention.py     sdpa, sdpa_bwd (evaluated, several outputs)
    gather.py        embedding, embedding_backward (rows at tensor indices; scatter-add)
    normalization.py softmax, log_softmax, var_mean, layer_norm, rms_norm and backward
                     helpers: composites of the ops above (registry.composite)
    random.py        rand_like (Philox at global indices); uniform, dropout (composites)
    creation.py      iota (no tensor operands: values at the elements' global indices)
    registry.py      OpDef and the registry; forms.py: printed forms, both ways
    gradients.py     what the ops' vjp rules (OpDef.vjp) share: constants, unbroadcast
    common.py        what builders share; sharding.py: sharding queries on expressions

Importing this package registers every op and installs the operator sugar on
TensorView (`x + y`, pointwise.install_operators). Each op module lists its builders in
`__all__`; this package's `__all__` is `tensor` and all of them, and `fuserlite`
exports it: a new op is exported where it is defined.
"""

from fuserlite.ops import (
    attention,
    casts,
    contraction,
    creation,
    gather,
    movement,
    normalization,
    pointwise,
    random,
    reductions,
    views,
)
from fuserlite.ops.attention import *  # noqa: F403
from fuserlite.ops.casts import *  # noqa: F403
from fuserlite.ops.common import tensor
from fuserlite.ops.contraction import *  # noqa: F403 - the builders its __all__ lists
from fuserlite.ops.creation import *  # noqa: F403
from fuserlite.ops.gather import *  # noqa: F403
from fuserlite.ops.movement import *  # noqa: F403
from fuserlite.ops.normalization import *  # noqa: F403
from fuserlite.ops.pointwise import *  # noqa: F403
from fuserlite.ops.random import *  # noqa: F403
from fuserlite.ops.reductions import *  # noqa: F403
from fuserlite.ops.views import *  # noqa: F403

__all__ = ["tensor"]
__all__ += pointwise.__all__
__all__ += views.__all__
__all__ += reductions.__all__
__all__ += contraction.__all__
__all__ += casts.__all__
__all__ += movement.__all__
__all__ += attention.__all__
__all__ += normalization.__all__
__all__ += random.__all__
__all__ += creation.__all__
__all__ += gather.__all__
