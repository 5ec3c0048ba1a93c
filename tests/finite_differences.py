"""Central finite differences in float64: the gradients the numerics tests check against."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def gradient(loss: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """d loss / d x, element by element: (loss(x + h) - loss(x - h)) / 2h."""
    x = np.array(x, np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        saved = x[i]
        x[i] = saved + h
        up = loss(x)
        x[i] = saved - h
        down = loss(x)
        x[i] = saved
        grad[i] = (up - down) / (2 * h)
    return grad
