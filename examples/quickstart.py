"""A short end-to-end example: a tiny linear regression trained with autograd on the default device.

Run: python examples/quickstart.py   (DEBUG=2 shows every kernel launched)
"""
from frontend import Tensor, Device, GlobalCounters

def main() -> None:
  Tensor.manual_seed(0)
  print(f"device: {Device.DEFAULT}")
  X = Tensor.rand(256, 3)
  true_w = Tensor([[2.0], [-3.0], [0.5]])
  y = X @ true_w + 1.0
  w, b = Tensor.zeros(3, 1, requires_grad=True), Tensor.zeros(1, requires_grad=True)
  for step in range(200):
    loss = ((X @ w + b - y) ** 2).mean()
    loss.backward()
    w.assign(w.detach() - 0.5 * w.grad); b.assign(b.detach() - 0.5 * b.grad)
    w.grad = b.grad = None
    Tensor.realize(w, b)
    if step % 50 == 0: print(f"step {step:3d} loss {loss.item():.6f}")
  print("learned w:", [round(v, 3) for v in w.numpy().ravel().tolist()], "b:", round(b.item(), 3))
  print(f"kernels run: {GlobalCounters.kernel_count}")

if __name__ == "__main__":
  main()
