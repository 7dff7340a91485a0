"""The Tensor's activation functions: `relu`, `sigmoid`, `tanh`, `gelu`, `silu`, `elu`, `softplus`, `mish`, the
hard variants, `erf`, ... `relu` and `sigmoid` are primitives of frontend/function.py (a forward and a backward of
their own); the rest are compositions of the elementwise ops and get their gradients through them. `Tensor` inherits
them from `ActivationMixin`.

>>> from frontend import Tensor
>>> Tensor([-1.0, 0.0, 2.0]).relu().tolist(), [round(v, 4) for v in Tensor([0.0, 1.0]).sigmoid().tolist()]
([0.0, 0.0, 2.0], [0.5, 0.7311])
"""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
from frontend import function as F

# (frontend/tensor.py imports this module, so this one can't import it)
if TYPE_CHECKING: from frontend.tensor import Tensor

class ActivationMixin:
  __slots__ = ()

  def relu(self: Tensor) -> Tensor:
    """max(x, 0).

    >>> Tensor([-1.5, 0.0, 2.5]).relu().tolist()
    [0.0, 0.0, 2.5]
    """
    return F.Relu.apply(self)
  def sigmoid(self: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), as floats.

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).sigmoid().tolist()]
    [0.2689, 0.5, 0.7311]
    """
    return F.Sigmoid.apply(self._float())
  def tanh(self: Tensor) -> Tensor:
    """The hyperbolic tangent.

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0, 2.0]).tanh().tolist()]
    [-0.7616, 0.7616, 0.964]
    """
    return 2.0 * ((2.0 * self).sigmoid()) - 1.0
  def gelu(self: Tensor) -> Tensor:
    """GELU with the tanh approximation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu().tolist()]
    [-0.1588, 0.0, 0.8412]
    """
    return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self: Tensor) -> Tensor:
    """x * sigmoid(1.702 * x), a cheaper GELU approximation.

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).quick_gelu().tolist()]
    [-0.1542, 0.0, 0.8458]
    """
    return self * (self * 1.702).sigmoid()
  def silu(self: Tensor) -> Tensor:
    """x * sigmoid(x) (also called swish).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).silu().tolist()]
    [-0.2689, 0.0, 0.7311]
    """
    return self * self.sigmoid()
  def swish(self: Tensor) -> Tensor:
    """The same as `silu`: x * sigmoid(x).

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0]).swish().tolist()]
    [-0.2689, 0.7311]
    """
    return self.silu()
  def relu6(self: Tensor) -> Tensor:
    """min(max(x, 0), 6).

    >>> Tensor([-1.0, 3.0, 8.0]).relu6().tolist()
    [0.0, 3.0, 6.0]
    """
    return self.relu() - (self - 6).relu()
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
    """x for x >= 0, neg_slope * x below.

    >>> Tensor([-2.0, 0.0, 3.0]).leaky_relu(0.5).tolist()
    [-1.0, 0.0, 3.0]
    """
    return (self < 0).where(self * neg_slope, self)
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) below.

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).elu().tolist()]
    [-0.6321, 2.0]
    """
    return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0).

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).celu(alpha=2.0).tolist()]
    [-0.7869, 2.0]
    """
    return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def selu(self: Tensor, alpha=1.67326, gamma=1.0507) -> Tensor:
    """gamma * x for x >= 0, gamma * alpha * (exp(x) - 1) below (the self-normalizing constants by default).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).selu().tolist()]
    [-1.1113, 0.0, 2.1014]
    """
    return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))
  def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, stable for large |x| forward and backward; x itself where beta*x > threshold
    (torch's convention).

    >>> Tensor([-1000.0, 0.0, 1000.0]).softplus().tolist()
    [0.0, 0.6931471824645996, 1000.0]
    """
    bx = self._float() * beta
    # softplus(z) = max(z, 0) + log1p(exp(-|z|)); maximum splits its gradient at z = 0, giving sigmoid(0) = 0.5
    e = (-bx.abs()).exp()
    log1p = (e < 1e-4).where(e * (1 - e * 0.5), (1 + e).log())
    sp = (bx.maximum(0.0) + log1p) * (1 / beta)
    return (bx > threshold).where(self._float(), sp)
  def mish(self: Tensor) -> Tensor:
    """x * tanh(softplus(x)).

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0]).mish().tolist()]
    [-0.3034, 0.8651]
    """
    return self * self.softplus().tanh()
  def hardsigmoid(self: Tensor, alpha=1 / 6, beta=0.5) -> Tensor:
    """Piecewise-linear sigmoid: clip(alpha * x + beta, 0, 1).

    >>> Tensor([-4.0, 0.0, 1.5, 4.0]).hardsigmoid().tolist()
    [0.0, 0.5, 0.75, 1.0]
    """
    return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def hardswish(self: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6.

    >>> Tensor([-1.5, 0.0, 1.5, 4.0]).hardswish().tolist()
    [-0.375, 0.0, 1.125, 4.0]
    """
    return self * (self + 3).relu6() * (1 / 6)
  def hardtanh(self: Tensor, min_val=-1, max_val=1) -> Tensor:
    """clip(x, min_val, max_val), by default to [-1, 1].

    >>> Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist()
    [-1.0, 0.5, 1.0]
    """
    return self.clip(min_val, max_val)
  def softsign(self: Tensor) -> Tensor:
    """x / (1 + |x|).

    >>> Tensor([-3.0, 0.0, 1.0]).softsign().tolist()
    [-0.75, 0.0, 0.5]
    """
    return self / (1 + self.abs())
  def logsigmoid(self: Tensor) -> Tensor:
    """log(sigmoid(x)), computed as -softplus(-x).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).logsigmoid().tolist()]
    [-1.3133, -0.6931, -0.3133]
    """
    return -(-self).softplus()
  def erf(self: Tensor) -> Tensor:  # Abramowitz-Stegun 7.1.26, max error 1.5e-7
    """The Gauss error function (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.5, 2.0]).erf().tolist()]
    [-0.8427, 0.5205, 0.9953]
    """
    t = 1.0 / (1.0 + 0.3275911 * self.abs())
    return self.sign() * (1.0 - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * (-self.square()).exp())
