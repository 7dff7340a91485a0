"""Tensor methods for neural networks (convolution, pooling, losses, attention, sorting, scatter/gather,
cumulative ops...), kept apart from tensor.py; `Tensor` inherits them from `NNOpsMixin`.
"""
from __future__ import annotations

class NNOpsMixin:
  __slots__ = ()
