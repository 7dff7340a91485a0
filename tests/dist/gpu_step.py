"""One rank of the GPU check of tests/frontend/multi/test_distributed.py: `MOCKGPU=1 NV=1 mpiexec -n 2 python tests/dist/gpu_step.py`.

On the default device (a mock H100 under MOCKGPU=1 NV=1) each rank allreduces a tensor that a kernel computed, and
takes one SGD step whose gradient goes device -> host staging -> MPI -> device through a GradBucket; the results are
checked against numpy and the rank prints `rank R gpu ok DEVICE BUFFERTYPE` (to DIR/rankR.txt when given a DIR).
"""
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from frontend import Tensor, Device, optim
from frontend import distributed as dist

def main() -> None:
  dist.init()
  r, w = dist.rank(), dist.world_size()
  dev = Device.DEFAULT
  t = (Tensor(np.arange(6, dtype=np.float32), device=dev) * float(r + 1)).realize()   # a kernel wrote it, on the GPU
  dist.allreduce([t], op="sum")
  np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32) * sum(range(1, w + 1)))
  m = Tensor(np.full(3, float(r), np.float32), device=dev).realize()
  dist.allreduce([m], op="max")
  np.testing.assert_array_equal(m.numpy(), np.full(3, w - 1, np.float32))
  b = Tensor(np.full(4, 10.0 * r + 1, np.float32), device=dev).realize()
  dist.broadcast([b], root=w - 1)
  np.testing.assert_array_equal(b.numpy(), np.full(4, 10.0 * (w - 1) + 1, np.float32))

  wt = Tensor(np.array([1.0, 2.0, 3.0], np.float32), device=dev, requires_grad=True)
  opt = optim.SGD([wt], lr=0.5)
  bucket = dist.GradBucket([wt], op="mean")
  x = np.array([1.0, 2.0, 4.0], np.float32) * (r + 1)
  with Tensor.train():
    opt.zero_grad(); (wt * Tensor(x, device=dev)).sum().backward()
    bucket.pack(); bucket.allreduce(); bucket.unpack(); opt.step()
  mean_x = np.array([1.0, 2.0, 4.0], np.float32) * np.mean(np.arange(1, w + 1, dtype=np.float32))
  np.testing.assert_allclose(wt.numpy(), np.array([1.0, 2.0, 3.0], np.float32) - 0.5 * mean_x, rtol=1e-6)
  line = f"rank {r} gpu ok {dev} {type(t.lazydata.buffer.raw).__name__}\n"
  if len(sys.argv) > 1:   # a directory: one file per rank (the launcher may interleave the ranks' stdout within a line)
    with open(os.path.join(sys.argv[1], f"rank{r}.txt"), "w") as f: f.write(line)
  else: print(line, end="", flush=True)
  dist.shutdown()

if __name__ == "__main__":
  main()
