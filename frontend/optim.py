"""Optimizers: SGD (momentum, nesterov, weight decay), Adam, AdamW, LAMB.

`step()` writes every parameter and state tensor in place with `assign` and realizes them all in ONE call, so the
scheduler sees the whole update at once and fuses what it can.

>>> from frontend import Tensor
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> opt = SGD([w], lr=0.5)
>>> _ = (w * w).sum().backward(); opt.step()
>>> w.tolist()
[0.0, 0.0]
"""
from __future__ import annotations
import numpy as np
from compiler.dtypes import dtypes, to_np
from frontend.engine import from_host
from frontend.tensor import Tensor, shared_read_walks, _wrap
from compiler.lazy import LazyBuffer
from compiler.sint import any_sym
from compiler.uop import Ops

def _dedup(xs: list[Tensor]) -> list[Tensor]: return list({id(x): x for x in xs}.values())
def _host(arr: np.ndarray, device: str | tuple[str, ...], axis: int | None = None) -> Tensor:
  """A realized tensor from host memory (no kernel runs; assign then writes it in place). from_host keeps a 0-d
  shape, which Tensor(ndarray) currently doesn't. On a tuple of devices: sharded along `axis` like the parameter."""
  if isinstance(device, tuple): return _host(arr, device[0]).shard(device, axis).realize()
  return Tensor(from_host(arr, dtypes.from_np(arr.dtype), device), requires_grad=False)
def _state_like(t: Tensor, value: float = 0.0) -> Tensor:
  return _host(np.full(t.shape, value, dtype=to_np(t.dtype) if t.dtype.is_float and t.dtype.fmt else np.float32), t.device,
               getattr(t.lazydata, "axis", None))

class Optimizer:
  """Base class: `params` that require grad (None counts as yes) are optimized; the others (running stats) are
  realized with each step. `lr` is a Tensor so schedules can change it without re-capturing a JIT."""
  def __init__(self, params: list[Tensor], lr: float):
    params = list(params)
    for x in params:
      if x.requires_grad is None: x.requires_grad = True
    self.params: list[Tensor] = _dedup([x for x in params if x.requires_grad])
    if not self.params: raise ValueError("optimizer got an empty parameter list (no tensor requires grad)")
    self.buffers: list[Tensor] = _dedup([x for x in params if not x.requires_grad])
    self.device = self.params[0].device
    self.lr = _host(np.array(lr, dtype=np.float32), self.device)
    # params must own storage for the in-place updates
    todo = [t for t in self.params + self.buffers if not t.lazydata.realized or t.lazydata.is_view]
    for t in todo: t.replace(t.contiguous())
    if todo: Tensor.realize(*todo)

  def zero_grad(self) -> None:
    """Forget the gradients (the next backward starts from zero)."""
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Update every parameter from its .grad; one realize for all parameters, optimizer state and buffers."""
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Build the lazy update (params assigned in place) and return every tensor that must be realized."""
    for i, p in enumerate(self.params):
      if p.grad is None: raise RuntimeError(f"{type(self).__name__}.step: parameter {i} {p.shape} has no gradient; call .backward() first")
    prev, Tensor.no_grad = Tensor.no_grad, True   # the update itself is not differentiated
    try:
      with shared_read_walks(): state = self._step()   # (the updates' assigns walk the same gradient graphs)
    finally: Tensor.no_grad = prev
    return state + self.params + self.buffers

  def _step(self) -> list[Tensor]: raise NotImplementedError

class SGD(Optimizer):
  """SGD as torch defines it (dampening 0): g += wd*p; b = momentum*b + g; p -= lr * (g + momentum*b if nesterov else b).

  >>> from frontend import Tensor
  >>> SGD([Tensor([1.0])], lr=0.1, momentum=0.9).b[0].tolist()
  [0.0]
  """
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False, classic: bool = False):
    super().__init__(params, lr)
    if nesterov and momentum <= 0: raise ValueError("SGD: nesterov needs a positive momentum")
    self.momentum, self.wd, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
    self.b = [_state_like(t) for t in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    for i, t in enumerate(self.params):
      p = t.detach()
      g = t.grad.detach().cast(p.dtype)
      if self.wd: g = g + self.wd * p
      if self.momentum:
        # "classic" puts lr inside the momentum buffer (Sutskever); the default is torch's form
        self.b[i].assign((self.momentum * self.b[i] + (g * self.lr if self.classic else g)).cast(self.b[i].dtype))
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      t.assign((p - (g if self.classic and self.momentum else g * self.lr)).cast(t.dtype))
    return self.b

class Muon(SGD):
  """Muon: SGD momentum (nesterov by default) whose update is orthogonalized by `ns_steps` Newton-Schulz iterations
  (Tensor.newton_schulz, over the parameter flattened to (dim 0, rest)), with weight decay applied after momentum as
  p *= 1 - lr*wd. The learning rate is not rescaled by the matrix's aspect ratio (tinygrad's Muon; torch.optim.Muon
  with a wide or square matrix).

  >>> from frontend import Tensor
  >>> w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  >>> opt = Muon([w], lr=0.1, weight_decay=0.0)
  >>> _ = (w * w).sum().backward(); opt.step(); w.shape
  (2, 2)
  """
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
               ns_steps: int = 5, ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315), nesterov: bool = True):
    super().__init__(params, lr, momentum, 0.0, nesterov and momentum > 0)
    self.muon_wd, self.ns_steps, self.ns_coefficients = weight_decay, ns_steps, ns_coefficients
  def _step(self) -> list[Tensor]:
    for i, t in enumerate(self.params):
      p, g = t.detach(), t.grad.detach().cast(t.dtype)
      if self.momentum:
        self.b[i].assign((self.momentum * self.b[i] + g).cast(self.b[i].dtype))
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      g = g.reshape(g.shape[0], -1).newton_schulz(self.ns_steps, self.ns_coefficients).reshape(g.shape)
      if self.muon_wd: p = p * (1.0 - self.muon_wd * self.lr)
      t.assign((p - g * self.lr).cast(t.dtype))
    return self.b

class LAMB(Optimizer):
  """LAMB (layer-wise trust ratio on top of Adam moments, decoupled weight decay); adam=True drops the trust ratio,
  which is AdamW. Bias corrections use the running products b1^t, b2^t kept as tensors."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam, self.l2 = b1, b2, eps, weight_decay, adam, 0.0
    self.b1_t = _host(np.ones((), np.float32), self.device)
    self.b2_t = _host(np.ones((), np.float32), self.device)
    self.m = [_state_like(t) for t in self.params]
    self.v = [_state_like(t) for t in self.params]

  # Adam and AdamW without weight decay on float32 tensors of one device: the update built on the lazy buffers (the
  # graph the Tensor ops below make, node for node in the same order, without their wrappers: tests/frontend/test_optim.py
  # compares the two). Off: always the Tensor ops.
  LAZY_UPDATE: bool = True

  def _step(self) -> list[Tensor]:
    if self.LAZY_UPDATE and self._lazy_ok(): return self._adam_lazy()
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    # (the bias corrections are the same for every parameter: one node each, read by every update kernel)
    c1, c2 = 1.0 - self.b1_t, 1.0 - self.b2_t
    for i, t in enumerate(self.params):
      p = t.detach()
      g = t.grad.detach().cast(self.m[i].dtype)
      if self.l2: g = g + self.l2 * p   # Adam's (coupled) L2 weight decay, as torch.optim.Adam does
      self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      m_hat = self.m[i] / c1
      v_hat = self.v[i] / c2
      up = m_hat / (v_hat.sqrt() + self.eps)
      # (decoupled weight decay; none at 0, as torch: adding 0 * p would turn an infinite weight into NaN)
      if self.wd: up = up + self.wd * p
      if not self.adam:
        r1, r2 = p.square().sum().sqrt(), up.square().sum().sqrt()
        r = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
        up = up * r
      t.assign((p - self.lr * up).cast(t.dtype))
    return [self.b1_t, self.b2_t] + self.m + self.v

  def _lazy_ok(self) -> bool:
    if not self.adam or self.wd or self.l2: return False
    ts = [self.lr, self.b1_t, self.b2_t, *self.params, *self.m, *self.v, *(t.grad for t in self.params)]
    return all(isinstance(lb := t.lazydata, LazyBuffer) and lb.dtype is dtypes.float32 and not any_sym(lb.shape) for t in ts)

  def _adam_lazy(self) -> list[Tensor]:
    """_step's Adam update (adam, no weight decay, all float32 on one device) on the lazy buffers: each line makes the
    nodes its Tensor expression above makes, in the same order (constants first, as _broadcasted makes them)."""
    b1, b2, MUL, ADD, NEG, FDIV = self.b1, self.b2, Ops.MUL, Ops.ADD, Ops.NEG, Ops.FDIV
    for bt, b in ((self.b1_t, b1), (self.b2_t, b2)):
      lb = bt.lazydata
      bt.assign(_wrap(lb.alu(MUL, lb.const_like(b))))   # bt * b
    c1, c2 = [_wrap((lb := bt.lazydata).const_like(1.0).alu(ADD, lb.alu(NEG)), None) for bt in (self.b1_t, self.b2_t)]   # 1.0 - bt
    for i, t in enumerate(self.params):
      p, g, m, v = t.lazydata, t.grad.lazydata, self.m[i], self.v[i]
      mv = (lb := m.lazydata).const_like(b1).alu(MUL, lb)                      # b1 * m
      m.assign(_wrap(mv.alu(ADD, g.const_like(1.0 - b1).alu(MUL, g))))          # + (1.0 - b1) * g
      vv = (lb := v.lazydata).const_like(b2).alu(MUL, lb)                      # b2 * v
      gg = g.alu(MUL, g)                                                        # g * g
      v.assign(_wrap(vv.alu(ADD, gg.const_like(1.0 - b2).alu(MUL, gg))))       # + (1.0 - b2) * (g * g)
      shape = p.shape
      m_hat = m.lazydata.alu(FDIV, c1._expand_to(shape).lazydata)               # m / c1
      v_hat = v.lazydata.alu(FDIV, c2._expand_to(shape).lazydata)               # v / c2
      den = (sq := v_hat.alu(Ops.SQRT)).alu(ADD, sq.const_like(self.eps))       # v_hat.sqrt() + eps
      up = m_hat.alu(FDIV, den)
      step = self.lr._expand_to(shape).lazydata.alu(MUL, up)                    # lr * up
      t.assign(_wrap(p.alu(ADD, step.alu(NEG))))                                # p - lr * up
    return [self.b1_t, self.b2_t] + self.m + self.v

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0) -> LAMB:
  """Adam (torch.optim.Adam semantics; weight_decay is L2 added to the gradient).

  >>> from frontend import Tensor
  >>> type(Adam([Tensor([1.0])])).__name__
  'LAMB'
  """
  opt = LAMB(params, lr, b1, b2, eps, 0.0, adam=True)
  opt.l2 = weight_decay
  return opt

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> LAMB:
  """AdamW: Adam with decoupled weight decay (p -= lr * wd * p), like torch.optim.AdamW."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)

__all__ = ["LAMB", "SGD", "Adam", "AdamW", "Muon", "Optimizer"]
