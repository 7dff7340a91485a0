"""Second-order gradients (a gradient of a gradient, create_graph) and retain_graph, against torch.autograd.grad.

Each function f gets its gradient g = df/dx as a differentiable tensor, then the Hessian-vector product
d(sum(g * v))/d(inputs) is compared with torch's in float64 for the same float32 data."""
import zlib
import numpy as np, pytest, torch
from frontend import Tensor

def _hvp_ours(fn, arrays, v):
  xs = [Tensor(a, requires_grad=True) for a in arrays]
  g = fn(*xs).gradient(xs[0])[0]
  return [g.numpy()] + [t.numpy() for t in (g * Tensor(v)).sum().gradient(*xs)]

def _hvp_torch(fn, arrays, v):
  xs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
  (g,) = torch.autograd.grad(fn(*xs), xs[0], create_graph=True)
  return [g.detach().numpy()] + [t.numpy() for t in torch.autograd.grad((g * torch.tensor(v, dtype=torch.float64)).sum(), xs)]

CASES = {
  "cube": (lambda x: (x ** 3).sum(), lambda x: (x ** 3).sum(), [(4, 5)]),
  "sin": (lambda x: x.sin().sum(), lambda x: x.sin().sum(), [(7,)]),
  "exp_log": (lambda x: (x.exp() * (x * x + 1).log()).sum(), lambda x: (x.exp() * (x * x + 1).log()).sum(), [(6,)]),
  "matmul_relu": (lambda x, w: ((x @ w).relu() ** 2).sum(), lambda x, w: ((x @ w).relu() ** 2).sum(), [(3, 4), (4, 5)]),
  "softmax": (lambda x, c: (x.softmax(-1) * c).sum(), lambda x, c: (x.softmax(-1) * c).sum(), [(3, 6), (3, 6)]),
  "conv2d": (lambda x, w: (x.conv2d(w, padding=1) ** 2).sum(),
             lambda x, w: (torch.nn.functional.conv2d(x, w, padding=1) ** 2).sum(), [(2, 3, 6, 6), (4, 3, 3, 3)]),
  # the weight read twice, the second conv's input computed from it: each conv's backward must stop at its own inputs
  "conv2d_shared_weight": (lambda x, w: (x.conv2d(w, padding=1).tanh().conv2d(w, padding=1) ** 2).sum(),
                           lambda x, w: (torch.nn.functional.conv2d(torch.nn.functional.conv2d(x, w, padding=1).tanh(), w, padding=1) ** 2).sum(),
                           [(1, 3, 5, 5), (3, 3, 3, 3)]),
  "conv2d_stride2": (lambda x, w: (x.conv2d(w, stride=2, padding=1) ** 2).sum(),
                     lambda x, w: (torch.nn.functional.conv2d(x, w, stride=2, padding=1) ** 2).sum(), [(1, 2, 8, 8), (8, 2, 3, 3)]),
}

@pytest.mark.parametrize("name", list(CASES))
def test_hessian_vector_product_matches_torch(name):
  """Against float64. An element is a float32 sum of products as large as the tensor's largest elements (the convs:
  hundreds) that can cancel to a small value, so its rounding error scales with the tensor's magnitude, not its own:
  64 units in the last place (2**-24) of max|ref| absolute. Measured over 30 random inputs of conv2d_shared_weight
  (whose elements sum 75 and more such products), the error past rtol reached 33 of them on the CPU, 21 on the NV
  mock's PTX, 20 in torch's own float32; an H200 was 3.6e-4 off torch's float32 where max|ref| >= 420 (<= 14 units)."""
  ours, theirs, shapes = CASES[name]
  rng = np.random.default_rng(zlib.crc32(name.encode()))   # the case's own data, whichever tests ran before it
  arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  v = rng.standard_normal(shapes[0]).astype(np.float32)
  for a, b in zip(_hvp_ours(ours, arrays, v), _hvp_torch(theirs, arrays, v)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=max(1e-4, 64 * 2.0**-24 * float(np.abs(b).max())))

def test_gradient_through_a_shared_weight_conv_chain():
  """First order through gradient() (differentiable mode), the weight used by two convs (tinygrad's test_biased_conv2d),
  against float64. Gradients reach ~180 here; over 40 inputs the error was at most 3% of the tolerance."""
  rng = np.random.default_rng(8)   # its own data, whichever tests ran before
  x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 8, 5, 5), (8, 8, 1, 1), (8,)))
  ts = [Tensor(a, requires_grad=True) for a in (x, w, b)]
  ours = ts[0].conv2d(ts[1], ts[2]).relu().conv2d(ts[1], ts[2]).sum().gradient(*ts)
  tt = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b)]
  F = torch.nn.functional
  F.conv2d(F.conv2d(tt[0], tt[1], tt[2]).relu(), tt[1], tt[2]).sum().backward()
  for o, t in zip(ours, tt): np.testing.assert_allclose(o.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_third_order():
  x = Tensor([0.5, -1.5], requires_grad=True)
  g1 = (x ** 4).sum().gradient(x)[0]
  g2 = g1.sum().gradient(x)[0]
  g3 = g2.sum().gradient(x)[0]
  np.testing.assert_allclose(g3.numpy(), 24 * np.array([0.5, -1.5]), rtol=1e-6)

def test_backward_create_graph_then_backward_of_grad():
  """g = sin x + x cos x, then its gradient 2 cos x - x sin x, against float64. Each is a float32 sum of terms that
  cancel (x tan x = 2 near x = 1.08: terms of 0.95 sum to -0.02), so an element's rounding error scales with its
  terms' magnitudes, not with its value: 16 units of 2**-24 of the sum of |terms| (a float64 oracle), rtol beside it.
  Measured over 20000 inputs: at most 6.7 such units on the CPU and the PTX interpreter, 2.3 in torch's own float32;
  an H200 (sin.approx) was 3.0e-7 off torch's float32 at x.grad -0.0223 from terms of ~0.95 (about 2.6 units)."""
  a = np.random.default_rng(5).standard_normal(40).astype(np.float32)   # its own data, whichever tests ran before
  x = Tensor(a, requires_grad=True)
  (x.sin() * x).sum().backward(create_graph=True)
  g = x.grad
  x.grad = None
  g.sum().backward()
  xt = torch.tensor(a, dtype=torch.float64, requires_grad=True)
  (gt,) = torch.autograd.grad((xt.sin() * xt).sum(), xt, create_graph=True)
  gt.sum().backward()
  a64 = a.astype(np.float64)
  for name, ours, ref, terms in (("g", g, gt.detach(), np.abs(np.sin(a64)) + np.abs(a64 * np.cos(a64))),
                                 ("x.grad", x.grad, xt.grad, 2 * np.abs(np.cos(a64)) + np.abs(a64 * np.sin(a64)))):
    err, ref = np.abs(ours.numpy() - ref.numpy()), ref.numpy()
    bad = np.nonzero(err > 16 * 2.0**-24 * terms + 1e-5 * np.abs(ref))[0]
    assert bad.size == 0, [(name, float(a[i]), float(ours.numpy()[i]), float(ref[i]), float(err[i] / (2.0**-24 * terms[i]))) for i in bad[:5]]

def test_backward_without_create_graph_gives_a_constant_grad():
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x * x).sum().backward()
  assert x.grad._ctx is None and not x.grad.requires_grad

def test_retain_graph():
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = (x.exp() * x).sum()
  y.backward(retain_graph=True)
  first = x.grad.numpy().copy()
  y.backward()   # the graph was kept: a second pass accumulates
  np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)
  with pytest.raises(RuntimeError, match="retain_graph"): y.backward()   # ...and freed by the second pass

def test_create_graph_retains_the_graph():
  x = Tensor([3.0], requires_grad=True)
  y = (x * x * x).sum()
  y.backward(create_graph=True)
  y.backward()   # torch: create_graph implies retain_graph
  np.testing.assert_allclose(x.grad.numpy(), [54.0])

def test_gradient_leaves_grad_untouched():
  x, w = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
  (gx,) = (x * w).sum().gradient(x)
  assert x.grad is None and w.grad is None
  np.testing.assert_allclose(gx.numpy(), [3.0, 4.0])

def test_input_written_in_place_after_forward():
  # the first-order gradient reads the value the forward saw; differentiating it again through that value is refused
  x = Tensor([2.0, 3.0], requires_grad=True)
  h = x * 1
  y = (h * h).sum()
  h.assign(Tensor([10.0, 10.0]))
  (gh,) = y.gradient(h)
  np.testing.assert_allclose(gh.numpy(), [4.0, 6.0])
  with pytest.raises(NotImplementedError, match="in place"): gh.sum().gradient(x)
